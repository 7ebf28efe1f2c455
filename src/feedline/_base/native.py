"""What feedline's C extensions share (``rowcopy``, ``spans``, ``windowfill``,
``packing``, ``ordering``): whether one is here and turned on, and whether arrays suit it.

Each is compiled at install where a C compiler is found (``setup.py``) and turned off
with ``FEEDLINE_NATIVE=0``; the callers then make the same batches with numpy (and
numba's kernels where installed).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import Any

import numpy as np


def enabled(module: Any, little_endian: bool = False) -> bool:
    """Whether the compiled ``module`` is here and not turned off (``FEEDLINE_NATIVE=0``);
    with ``little_endian``, only on such a machine (it reads stored little-endian words
    in place)."""
    return (
        module is not None
        and os.environ.get("FEEDLINE_NATIVE", "1") != "0"
        and (not little_endian or sys.byteorder == "little")
    )


def fits(batch: Mapping[str, Any], dtypes: Mapping[str, Any], *buffers: Any) -> bool:
    """Whether ``batch``'s rows are C-contiguous arrays of ``dtypes[name]`` (int64 for a
    name not there) and ``buffers`` C-contiguous numpy arrays (not a remote file's
    spans), as the C fills take them."""
    return all(isinstance(b, np.ndarray) and b.flags.c_contiguous for b in buffers) and all(
        isinstance(a, np.ndarray) and a.flags.c_contiguous and a.dtype == dtypes.get(k, np.int64)
        for k, a in batch.items()
    )


def i64(a: Any) -> np.ndarray:
    """``a`` as a C-contiguous int64 array (no copy where it is one)."""
    return np.ascontiguousarray(a, dtype=np.int64)
