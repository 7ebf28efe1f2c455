"""A chunk of an order block's rows, gathered once for the batches cut from it
(``_gather_ahead``), and what decides whether columns may be gathered ahead in chunks."""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from .._base import rowcopy


def _unwritten(a: Any) -> bool:
    """Whether no reference can write ``a``'s rows while chunks of them are gathered
    ahead: a numpy array flagged read-only over bases all flagged so, down to a buffer
    that cannot be written (a file mapped read-only, ``bytes``). A read-only view of
    writable memory, or an array owning its memory (its flag can be lifted), is not: a
    write through it would show in a batch gathered batch by batch, as one thread
    gathers it, and be missed by a chunk gathered before it."""
    while isinstance(a, np.ndarray):
        if a.flags.writeable:
            return False
        a = a.base
    while isinstance(a, memoryview):  # a read-only view of a buffer may be over a writable one
        if not a.readonly:
            return False
        a = a.obj
    if a is None:
        return False
    try:
        with memoryview(a) as m:  # the buffer's owner (a memory map opened to read, bytes)
            return bool(m.readonly)
    except TypeError:  # no buffer (an object numpy wraps): not known to be unwritten
        return False


def _fields_of(cols: Any) -> dict[str, np.ndarray]:
    """The columns of one dataset (``cols``), or of a mix's first source (a tuple of
    them, every source with the same fields, dtypes and row shapes)."""
    return cols[0] if isinstance(cols, tuple) else cols


def _row_bytes(cols: Any) -> int:
    """Bytes of one row over every field of ``cols`` (a dataset's columns, or a mix's)."""
    return sum(
        np.dtype(a.dtype).itemsize * int(np.prod(a.shape[1:])) for a in _fields_of(cols).values()
    )


def _in_c(cols: Any) -> bool:
    """Whether the compiled row copies (``rowcopy``) can copy rows of ``cols``: numpy
    arrays of plain values, C-contiguous, every source's fields of the same dtypes (a
    remote file's columns, fetched by ranges, are not)."""
    return rowcopy.available() and rowcopy.copyable(_arrays_of(cols)) and _alike(cols)


def _prepared(cols: Any) -> rowcopy.Prepared | None:
    """``rowcopy.prepare(cols)`` where the compiled copies serve ``cols`` (``_in_c``),
    else None (numpy's takes serve): their buffers, taken once for every chunk."""
    if not _in_c(cols):
        return None
    try:
        return rowcopy.prepare(cols)
    except (ValueError, TypeError, BufferError):  # what C cannot read as rows
        return None


def _alike(cols: Any) -> bool:
    """Whether every source of ``cols`` (one dataset's columns, or a mix's tuple of them)
    has the same fields of the same dtypes, as the compiled copies need (they copy bytes)."""
    if not isinstance(cols, tuple):
        return True
    first = cols[0]
    return all(
        c.keys() == first.keys() and all(c[n].dtype == a.dtype for n, a in first.items())
        for c in cols[1:]
    )


def _arrays_of(cols: Any) -> list[np.ndarray]:
    return [a for c in (cols if isinstance(cols, tuple) else (cols,)) for a in c.values()]


def _holds(chunk: _Chunk | None, cols: Any, need: int) -> bool:
    """Whether ``chunk`` is of ``cols`` and holds its block's first ``need`` rows."""
    return chunk is not None and chunk.cols is cols and chunk.lo + len(chunk.recs) >= need


class _Chunk:
    """Rows ``lo ..`` of an order block (their records ``recs``, of sources ``ords``),
    gathered (``fields``) once ``ready``; ``fields`` stays None when the gather failed
    (the caller gathers its batch itself, and meets the error where it is reported).
    ``task``: the compiled copy of its rows into ``buffers`` (``rowcopy``), where the
    helpers are C threads."""

    __slots__ = (
        "buffers",
        "cols",
        "fields",
        "gate",
        "lo",
        "ords",
        "owner",
        "ready",
        "recs",
        "task",
    )

    def __init__(self, lo: int, recs: np.ndarray, cols: Any, ords: np.ndarray) -> None:
        self.lo, self.recs, self.cols, self.ords = lo, recs, cols, ords
        self.owner = threading.get_ident()  # the thread that took it, to gather it
        self.fields: dict[str, np.ndarray] | None = None
        self.buffers: dict[str, np.ndarray] | None = None  # what ``fields`` are views of
        self.task: Any = None
        # Set by ``finish``, after ``fields``; the gate, held until then, is what waiters
        # block on (a lock of its own, not a ``threading.Event``: a chunk is made by the
        # caller's Python, and an Event's condition cost 3 - 4 us of it, under the GIL
        # that the helpers wait for)
        self.ready = False
        self.gate = threading.Lock()
        self.gate.acquire()

    def finish(self) -> None:
        """Mark it gathered (or given up), waking its waiters: only by its owner."""
        if not self.ready:
            self.ready = True
            self.gate.release()

    def wait(self) -> None:
        if not self.ready:
            with self.gate:
                pass
