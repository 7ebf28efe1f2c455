"""Spans of a ragged column copied in C without the GIL: a batch of examples of varying
length gathered into one array (``gather``), from many sources' columns at once
(``prepare``, ``take_mixed``: a manifest's shards), or into the rows of a padded batch
(``pad``; ``pad_nd`` for examples that vary on any axis, images of any size).

These are a ragged batch's whole cost. numpy's way (an index of every value built with
``np.repeat`` and ``np.arange``, then one ``take``) writes three int64 temporaries of
every value; numba's kernel must load first, which in a fresh process took 0.4 - 0.6 s
while the numpy path ran beside it at a quarter of its speed (the first 400 batches of
512 token lists ran at 1.5 ms each, then 0.2 ms: issue 20, part 1). The C copies are
compiled at install (``setup.py``), so the first batch runs at the speed of the last.
Without them (no C compiler, or ``FEEDLINE_NATIVE=0``) ``available()`` is False and
the callers keep their numpy and numba ways (the same values).

    >>> import numpy as np
    >>> from feedline._base import spans
    >>> values = np.arange(10, dtype=np.int32)
    >>> starts, counts = np.array([7, 0]), np.array([3, 2])
    >>> spans.gather(values, starts, counts).tolist()
    [7, 8, 9, 0, 1]
    >>> spans.pad(values, starts, counts, np.empty((3, 4), np.int32), -1).tolist()
    [[7, 8, 9, -1], [0, 1, -1, -1], [-1, -1, -1, -1]]
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import native
from .native import i64 as _index

try:
    from . import _spans  # type: ignore[attr-defined]
except ImportError:  # not compiled (no C compiler at install)
    _spans = None


def available() -> bool:
    """Whether the compiled copies are here and not turned off (``FEEDLINE_NATIVE=0``)."""
    return native.enabled(_spans)


def _flat(values: Any) -> np.ndarray:
    """``values`` as a C-contiguous array (a memory map's pages are not copied)."""
    return values if values.flags.c_contiguous else np.ascontiguousarray(values)


def gather(values: np.ndarray, starts: Any, counts: Any, total: int | None = None) -> np.ndarray:
    """Spans ``values[starts[i] : starts[i] + counts[i]]`` one after another (1-D, of
    ``values``' dtype); ``total`` is ``counts``' sum when the caller knows it. Raises
    IndexError (copying nothing) for a span outside ``values``."""
    starts, counts = _index(starts), _index(counts)
    if total is None:
        total = int(counts.sum())
    if available() and isinstance(values, np.ndarray) and not values.dtype.hasobject:
        out = np.empty(total, dtype=values.dtype)
        assert _spans is not None
        _spans.gather(_flat(values), starts, counts, out)
        return out
    if len(starts) == 1:
        s = int(starts[0])
        return np.array(values[s : s + total])
    ends = np.cumsum(counts)
    index = np.repeat(starts - (ends - counts), counts)
    index += np.arange(total, dtype=np.int64)
    return np.take(values, index)


def pad(values: np.ndarray, starts: Any, counts: Any, out: np.ndarray, pad: Any) -> np.ndarray:
    """``out`` (rows x width, ``values``' dtype, rows at least the spans) with row ``i``
    span ``i`` then ``pad`` to its end, and rows past the spans all ``pad``; C only
    (``available()``). Raises IndexError (writing nothing) for a span outside
    ``values`` or longer than a row."""
    assert _spans is not None
    item = np.asarray(pad, dtype=out.dtype).reshape(1)
    _spans.pad(_flat(values), _index(starts), _index(counts), out, item)
    return out


def pad_nd(values: np.ndarray, starts: Any, shapes: Any, out: np.ndarray, pad: Any) -> np.ndarray:
    """``out`` (rows x P_1 x .. x P_k, ``values``' dtype) with row ``i`` example ``i`` (its
    values from ``starts[i]``, in C order, of shape ``shapes[i]``) at its start and
    ``pad`` everywhere else; C only. Raises IndexError (writing nothing) for an example
    outside ``values`` or larger than a row."""
    assert _spans is not None
    item = np.asarray(pad, dtype=out.dtype).reshape(1)
    _spans.pad_nd(_flat(values), _index(starts), _index(shapes), out, item)
    return out


def prepare(values: tuple[np.ndarray, ...], offsets: tuple[np.ndarray, ...]) -> Any:
    """The spans of one ragged field in many sources (``values[s]`` and ``offsets[s]``
    of source ``s``: C-contiguous arrays, the values of one item size, the offsets
    int64), their buffers held until the result is freed; C only (``available()``)."""
    assert _spans is not None
    return _spans.prepare(values, offsets)


def take_mixed(
    columns: Any, ords: np.ndarray, recs: np.ndarray, dtype: np.dtype
) -> tuple[np.ndarray, np.ndarray]:
    """(the values of record ``recs[i]`` of source ``ords[i]`` for each ``i``, one after
    another; each one's count of values) from ``prepare``'s ``columns``. Raises
    IndexError (copying nothing) for a record outside its source."""
    assert _spans is not None
    ords, recs = _index(ords), _index(recs)
    starts = np.empty(len(recs), dtype=np.int64)
    counts = np.empty(len(recs), dtype=np.int64)
    _spans.locate(columns, ords, recs, starts, counts)
    out = np.empty(int(counts.sum()), dtype=dtype)
    _spans.take(columns, ords, starts, counts, out)
    return out, counts


def shrunk(fds: np.ndarray, sizes: np.ndarray) -> int:
    """The first ``i`` whose file (open descriptor ``fds[i]``) is now shorter than
    ``sizes[i]`` bytes, or cannot be asked; -1 if none: many files checked for a
    truncation under the reader in one call (an ``lseek`` each). C only."""
    assert _spans is not None
    return int(_spans.shrunk(_index(fds), _index(sizes)))
