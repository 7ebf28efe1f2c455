"""Collation: a batch's examples stacked field by field, padded to the batch's rows.

Every field of today's records has a fixed shape, so a batch is its examples stacked
(batch axis first) into arrays of ``rows`` rows, written in place by the read stage;
the rows past the real examples (``pad``, even steps across ranks) are zeros, and
``batch.meta.mask`` tells them apart. This is also where variable-length fields will
be padded to the batch's longest example, with their lengths in
``batch.meta.lengths`` (issue 16).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np


def rows_for(size: int, batch_size: int, padded: bool) -> int:
    """The rows of a batch of ``size`` real examples: all of ``batch_size`` when the
    loader pads (``pad``, or even steps across ranks), else ``size``."""
    return batch_size if padded else size


def empty(fields: Mapping[str, Any], rows: int) -> dict[str, np.ndarray]:
    """Zeroed arrays of ``rows`` rows for the record's fields (``Field.shape``, dtype)."""
    return {n: np.zeros((rows, *f.shape), dtype=f.dtype) for n, f in fields.items()}


def zero_padding(arrays: Mapping[str, np.ndarray], size: int, rows: int) -> None:
    """Zero the padding rows ``size .. rows`` of arrays written in place."""
    if rows > size:
        for a in arrays.values():
            a[size:rows] = 0
