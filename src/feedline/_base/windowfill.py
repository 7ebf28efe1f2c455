"""Language-model windows assembled in C without the GIL (``text.Windows``'s batches):
each window's inputs, targets, loss mask, document ids and positions, from an
``.nndataset``'s arena or a compact ``.flr`` corpus's token column.

numba's kernels do the same, but load first: a fresh process's first batch of windows
waited 480 - 640 ms for them, and without numba the numpy path ran at a tenth of their
speed (issue 20, part 1). These are compiled at install (``setup.py``); without them
(no C compiler, ``FEEDLINE_NATIVE=0``, a big-endian machine) ``available()`` is False
and the callers keep numba's kernels and the numpy path (the same arrays).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from . import native
from .native import i64 as _i64

try:
    from . import _windows  # type: ignore[attr-defined]
except ImportError:  # not compiled (no C compiler at install)
    _windows = None

_ROWS = {"input_ids": np.int64, "targets": np.int64, "loss_mask": np.bool_, "doc_ids": np.int64}


def available() -> bool:
    """Whether the compiled windows are here and not turned off (``FEEDLINE_NATIVE=0``);
    an arena's tokens are little-endian words, read as int64 in place."""
    return native.enabled(_windows, little_endian=True)


def fits(batch: Mapping[str, np.ndarray], *buffers: Any) -> bool:
    """Whether C can fill ``batch`` (its rows C-contiguous arrays of the windows' dtypes)
    from ``buffers`` (numpy arrays: not a remote file's spans)."""
    return available() and native.fits(batch, _ROWS, *buffers)


def fill_arena(
    u8: np.ndarray, lay: Any, a: np.ndarray, b: np.ndarray, pad_id: int, batch: dict
) -> None:
    """Windows of flow ranges ``[a, b)`` of an ``.nndataset`` subset (its ``_Layout``
    ``lay`` over the arena ``u8``) into ``batch``'s rows."""
    assert _windows is not None
    mask_start = lay.mask_start if lay.has_mask else lay.tok_start
    _windows.fill(
        u8, _i64(lay.tok_start), 1, 8, u8, _i64(mask_start), lay.has_mask, _i64(lay.cum),
        _i64(a), _i64(b), int(pad_id), batch["input_ids"], batch["targets"],
        batch["loss_mask"], batch["doc_ids"], batch.get("position_ids"),
    )  # fmt: skip


def fill_typed(
    tok: np.ndarray,
    cum: np.ndarray,
    start: np.ndarray,
    mask8: np.ndarray,
    has_mask: bool,
    a: np.ndarray,
    b: np.ndarray,
    pad_id: int,
    batch: dict,
) -> None:
    """Windows of a compact corpus: document ``d``'s tokens from ``tok[start[d]]`` (uint8,
    16 or 32), its mask bytes from ``mask8[start[d]]``."""
    assert _windows is not None
    tok = np.ascontiguousarray(tok)  # fits() asked the batch, not the tokens
    width = tok.dtype.itemsize
    if tok.dtype.kind != "u" or width not in (1, 2, 4) or not tok.dtype.isnative:
        raise ValueError(f"compact tokens of uint8, 16 or 32, got {tok.dtype}")
    mask = np.ascontiguousarray(mask8).view(np.uint8) if has_mask else tok.view(np.uint8)
    _windows.fill(
        tok, _i64(start), width, width, mask, _i64(start), has_mask, _i64(cum), _i64(a),
        _i64(b), int(pad_id), batch["input_ids"], batch["targets"], batch["loss_mask"],
        batch["doc_ids"], batch.get("position_ids"),
    )  # fmt: skip
