"""Packed rows in C without the GIL: the placement of a packing plan's pieces into rows
(first fit, best fit) and the fill of a batch of packed rows (``text.Packed``).

numba compiles the same placement (``text/_pack_place.py``) and fill
(``text/_pack_jit.py``), but loads first: building a ``Packed`` in a fresh process
waited 430 - 500 ms for it, and a first pass filled rows on the numpy path while it
loaded beside them (issue 20, part 1). These are compiled at install (``setup.py``);
without them (no C compiler, ``FEEDLINE_NATIVE=0``, a big-endian machine) ``available()``
is False and the callers keep numba's kernels and the Python / numpy paths (the same
rows).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import native
from .native import i64 as _i64

try:
    from . import _packing  # type: ignore[attr-defined]
except ImportError:  # not compiled (no C compiler at install)
    _packing = None


def available() -> bool:
    """Whether the compiled packing is here and not turned off (``FEEDLINE_NATIVE=0``);
    an arena's tokens are little-endian words, read as int64 in place."""
    return native.enabled(_packing, little_endian=True)


def placer(strategy: str) -> Any:
    """The C placement of ``strategy`` ("first_fit" or "best_fit"), called as
    ``text/_pack_place``'s functions are: ``(size, block_ptr, cap, local, per_block)``."""
    assert _packing is not None
    return _packing.place_first_fit if strategy == "first_fit" else _packing.place_best_fit


_ROWS = {"loss_mask": np.bool_, "segment_ids": np.int32, "position_ids": np.int32}


def fits(batch: dict[str, np.ndarray], *buffers: Any) -> bool:
    """Whether C can fill ``batch`` (C-contiguous rows of ``text.packed_record``'s dtypes)
    from ``buffers`` (numpy arrays: not a remote file's spans)."""
    return available() and native.fits(batch, _ROWS, *buffers)


def fill(
    plan: Any, rows: np.ndarray, args: tuple, has_mask: bool, pad_id: int, batch: dict
) -> None:
    """Packed rows ``rows`` of ``plan`` into ``batch``; ``args`` is ``(wide, tok, u8,
    tstart, mbytes, mstart)`` as ``text/_pack_jit.fill_packed`` takes them."""
    assert _packing is not None
    wide, tok, u8, tstart, mbytes, mstart = args
    _packing.fill(
        _i64(rows), _i64(plan.row_ptr), _i64(plan.doc), _i64(plan.off), _i64(plan.pairs),
        bool(wide), tok, u8, _i64(tstart), np.asarray(mbytes).view(np.uint8), _i64(mstart),
        bool(has_mask), int(pad_id), batch["input_ids"], batch["targets"], batch["loss_mask"],
        batch["segment_ids"], batch["position_ids"], batch.get("doc_ids"),
    )  # fmt: skip
