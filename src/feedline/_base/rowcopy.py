"""Rows copied by index without the GIL, by helper threads of C's own: the plain path's
chunks of batches (``loader._gather_ahead``).

numpy's ``np.take`` copies a chunk's rows with the GIL released, but a Python thread
needs the GIL again between two takes, and the caller holds it for runs of batches
(cutting views, the ledger, the caller's own loop): two Python threads gathering chunks
wait on each other and reached 1.4 - 1.6x one thread on 3 KB rows where the machine's
two cores copy 1.8 - 2.2x (docs/benchmarks.md, issue 20). Here a chunk is a task that
C threads copy in blocks of rows claimed from an atomic counter: helpers started once
per process, which never take the GIL, and any thread that needs the chunk (``run``:
it copies the blocks left, then waits for those in flight while copying blocks of the
next chunks). A task's rows are a pure function of its records and the columns, so
which thread copied which block does not show.

The extension is compiled when feedline is installed (``setup.py``) where a C compiler
is found; without it, or with ``FEEDLINE_NATIVE=0``, ``available()`` is False and the
loader gathers with numpy (the same rows).

    >>> import numpy as np
    >>> from feedline._base import rowcopy
    >>> col = np.arange(12, dtype=np.int32).reshape(6, 2)
    >>> out = {"x": np.zeros((3, 2), np.int32)}
    >>> if rowcopy.available():
    ...     task = rowcopy.submit(out, {"x": col}, np.array([5, 0, 2]), None, queue=False)
    ...     whole = task.run()
    ... else:
    ...     out["x"][:] = col[[5, 0, 2]]
    >>> out["x"].tolist()
    [[10, 11], [0, 1], [4, 5]]
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from . import native

try:
    from . import _rowcopy  # type: ignore[attr-defined]
except ImportError:  # not compiled (no C compiler at install)
    _rowcopy = None


_INDEX = (np.dtype(np.int64), np.dtype(np.uint64))  # native byte order


def available() -> bool:
    """Whether the compiled row copies are here and not turned off (``FEEDLINE_NATIVE=0``)."""
    return native.enabled(_rowcopy)


def copyable(arrays: Sequence[Any]) -> bool:
    """Whether every one of ``arrays`` is a C-contiguous numpy array of rows of plain
    (not object) values, as ``submit`` reads them."""
    return all(
        isinstance(a, np.ndarray) and a.ndim >= 1 and a.flags.c_contiguous and not a.dtype.hasobject
        for a in arrays
    )


def helpers(k: int) -> int:
    """Start helper threads until at least ``k`` run in this process (at most 15; they
    wait, without using a CPU, while no task is queued); how many run."""
    assert _rowcopy is not None
    return int(_rowcopy.start_helpers(k))


class Prepared(NamedTuple):
    """Columns to copy rows from (``prepare``): their fields' names and dtypes, and the
    buffers of every source's columns, held until this is freed."""

    names: tuple[str, ...]
    dtypes: tuple[np.dtype, ...]
    sources: Any  # _rowcopy.Sources
    parts: int  # how many sources


def prepare(cols: Mapping[str, np.ndarray] | tuple) -> Prepared:
    """The buffers of ``cols`` (one dataset's columns: field -> array; or a mix's: a
    tuple of such, one per source, every source with the first's fields and dtypes),
    taken once for every task that copies from them (``submit(..., prepared=)``): a
    loader over many sources takes them once, not at each chunk. They are held until
    the result is freed (and every task made with it)."""
    assert _rowcopy is not None
    each = cols if isinstance(cols, tuple) else (cols,)
    names = tuple(each[0])
    dtypes = tuple(each[0][n].dtype for n in names)
    for c in each[1:]:  # C copies bytes: every source's values of the same dtypes
        if tuple(c) != names:
            raise ValueError(f"a source's fields {tuple(c)} differ from the first's {names}")
        for n, d in zip(names, dtypes):
            if c[n].dtype != d:
                raise ValueError(f"field {n!r}: a source's rows of {c[n].dtype}, the first's {d}")
    sources = _rowcopy.prepare(tuple(tuple(c[n] for n in names) for c in each))
    return Prepared(names, dtypes, sources, len(each))


def submit(
    out: Mapping[str, np.ndarray],
    cols: Mapping[str, np.ndarray] | tuple,
    recs: np.ndarray,
    ords: np.ndarray | None,
    *,
    queue: bool,
    prepared: Prepared | None = None,
) -> Any:
    """A task copying, for each field of ``out``, rows ``recs[i]`` of the columns
    ``cols`` (one dataset's: field -> array; or a mix's: a tuple of such, one per
    source, picked by ``ords[i]``) into row ``i`` of ``out[field]``; ``prepared``:
    ``prepare(cols)`` made before (the columns are then not looked at).

    With ``queue`` the helpers copy it as soon as one is free; either way ``task.run()``
    copies what is left in the calling thread, waits for the rest and returns True, or
    False if the task was cancelled, and raises IndexError if a record was outside its
    source's rows (the rows are then not all written).
    ``task.cancel()`` stops it (no row is written after it returns). The task holds the
    arrays until it is freed (cancelled first if it is not done).
    """
    assert _rowcopy is not None
    if prepared is None:
        prepared = prepare(cols)
    if len(out) != len(prepared.names):
        raise ValueError(f"fields {tuple(out)} written, the sources have {prepared.names}")
    for n, d in zip(prepared.names, prepared.dtypes):  # C copies bytes: the rows' dtype
        if out[n].dtype != d:
            raise ValueError(f"field {n!r}: rows of {d} into an array of {out[n].dtype}")
    # read as native int64 in C: an unsigned record past 2**63 is out of range there
    if recs.dtype not in _INDEX:
        recs = recs.astype(np.int64)
    recs = np.ascontiguousarray(recs)
    if ords is not None:
        ords = np.ascontiguousarray(ords, dtype=np.int64) if prepared.parts > 1 else None
    dst = tuple(out[n] for n in prepared.names)
    return _rowcopy.submit(dst, prepared.sources, recs, ords, queue)
