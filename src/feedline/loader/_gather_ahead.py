"""Plain gathers a chunk at a time, the next chunks gathered ahead by helper threads.

A plain path's batch is rows of arrays in memory or memory-mapped (``PlainPlan``).
Here the rows of several batches are gathered at once, a *chunk* of the order block,
and the batches are views of their chunk. Helper threads gather the next chunks of the
block while the caller takes batches from this one:

- where the compiled row copies are built (``rowcopy``), each chunk is a task queued as
  soon as the caller reaches the chunk before it; C threads that never take the GIL copy
  it in blocks, and so does the thread that needs it (``_copied``), which, while the
  last blocks are in flight, copies blocks of the next chunks;
- else (or with ``FEEDLINE_NATIVE=0``) Python helper threads take whole chunks with one
  ``np.take`` per field (numpy releases the GIL while it copies), and the calling thread,
  when the chunk it needs is still being gathered, gathers the next unclaimed one
  meanwhile.

Either way both cores copy rows with two threads, and no thread waits for another to be
woken per batch.

A chunk is a pure function of the order block's records and the dataset's columns, and
its key carries the ledger's generation and the block's first position (a chunk found
under its key that ends before the claim, the last of a shorter block at the same first
position, is made again): a batch holds the same rows whichever thread gathered them,
with any number of threads. Nothing here is state of the loader: a chunk dropped or
never made is gathered again.

Cost: ``threads - 1`` helper threads (a process-wide pool), at most ``_AHEAD + 2``
chunks of about ``_CHUNK_BYTES`` held per loader.
"""

from __future__ import annotations

import bisect
import contextlib
import itertools
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from .._base import recycle, rowcopy
from ._blocks import _BLOCK, OrderBlocks
from ._chunk import _arrays_of, _Chunk, _fields_of, _holds, _prepared, _row_bytes, _unwritten
from ._config import _in_torch_worker, usable_cpus
from ._gather import take_mixed

# Bytes a chunk holds at least (rounded up to whole batches). Measured on the 2-core reference
# machine, 4,000,000 rows of 264 bytes in batches of 512 (benchmarks/compare.py):
# see the default of ``threads`` below for the figures.
_CHUNK_BYTES = 4 << 20
# Rows of ``_LARGE_ROW`` bytes or more copied by C's threads: chunks of whole batches of
# at least ``_LARGE_ROW_CHUNK_BYTES``. Fresh processes, 8 alternated rounds: 3,080-byte
# rows ran 1.09 - 1.12x faster than in 4 MB chunks; 1 KB rows within 2%; 264-byte rows
# 7% slower, so they keep 4 MB (docs/benchmarks.md, "Large rows in smaller chunks").
_LARGE_ROW = 2048
_LARGE_ROW_CHUNK_BYTES = 2 << 20
# Chunks gathered ahead of the caller's: enough that a helper is never idle while the
# caller takes batches, few enough that memory stays a few chunks.
_AHEAD = 3
# Most helper threads any loader uses (the pool's size).
_MAX_HELPERS = 15

_pool: tuple[int, ThreadPoolExecutor] | None = None  # (pid, pool): a forked child's own
_pool_lock = threading.Lock()
_running: set = set()  # helpers' futures: a fork waits for them


def default_threads() -> int:
    """Threads gathering a plain path's batches when ``threads=None``: two where the
    process may run on two CPUs or more, and while the load average leaves a core to
    the helper (``GatherAhead._spare``); one inside a torch DataLoader worker (its
    siblings use the other cores).

    Measured on the 2-core reference machine (docs/benchmarks.md, issue 20), 4,000,000
    rows of 264 bytes in batches of 512 and 500,000 of 3,080 bytes in batches of 256:
    with the cores to the process, two threads gave 1.4 - 1.7x one (passes interleaved
    in one process) and 1.2 - 1.35x in ``benchmarks/compare.py``'s fresh processes with
    numpy's takes; with the C copies, 1.2 - 1.45x and 1.4 - 1.7x numpy's one-thread gather
    there; with other sessions keeping both cores busy (load average 2.5 - 6), 0.6 - 1.1x
    one thread. Three threads (two C helpers) ran 0.75 - 0.9x two: more threads gain less
    than they take from the rest of a training step.
    """
    return 1 if _in_torch_worker() else min(2, usable_cpus())


def _finish_running() -> None:
    for future in list(_running):
        future.exception()  # waits


def _executor() -> ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        pool = _pool
        if pool is None or pool[0] != os.getpid():
            if pool is None and hasattr(os, "register_at_fork"):
                os.register_at_fork(before=_finish_running)
            pool = _pool = (os.getpid(), ThreadPoolExecutor(_MAX_HELPERS, "feedline-gather"))
        return pool[1]


def for_plain(loader: Any) -> GatherAhead | None:
    """The chunks of a plain plan, or None where its batches are gathered one by one:
    with one thread, and under length bucketing (no order blocks)."""
    opts = loader.options
    if opts.threads < 2 or not isinstance(loader._blocks, OrderBlocks):
        return None
    ahead = GatherAhead(opts.threads, opts.batch_size, loader._ledger, loader._blocks)
    ahead.chosen = opts.threads_default  # the default's helpers wait for a spare core
    return ahead


def _chunk_starts(batch_size: int, row_bytes: int, ramp: bool, copied: bool = False) -> list[int]:
    """Chunk starts in a block: chunks of about ``_CHUNK_BYTES`` (of rows copied by C's
    threads, ``copied``: less for large rows, see ``_LARGE_ROW``); with ``ramp`` (a
    pass's first block) one batch, one, two, four... up to that, so the pass's first
    batch (a fresh memory map's page faults) waits for one batch's rows, not a chunk's."""
    # whole batches of at least ``_CHUNK_BYTES``: numpy asks the kernel for transparent
    # huge pages for an array of 4 MiB or more, and np.take of 3 KB rows into such a
    # buffer ran 3 - 6% faster than into one just under (2-thread passes: within this
    # machine's noise, 1.34 against 1.20x and 1.36 against 1.36x numpy, 9 fresh rounds)
    chunk = _CHUNK_BYTES
    if copied and row_bytes >= _LARGE_ROW:
        chunk = min(chunk, _LARGE_ROW_CHUNK_BYTES)
    most = max(1, -(-chunk // max(1, row_bytes * batch_size)))
    starts, size, at = [0], 1 if ramp else most, 0
    while at < _BLOCK + batch_size:
        at += size * batch_size
        starts.append(at)
        if len(starts) > 2:
            size = min(2 * size, most)
    return starts


Key = tuple[int, int, int]  # (ledger generation, block's first position, chunk)


class GatherAhead:
    """The chunks of one plain loader: the calling threads' batches are views of them."""

    def __init__(self, threads: int, batch_size: int, ledger: Any, blocks: Any) -> None:
        self.threads, self.batch_size = threads, batch_size
        self.ledger, self.blocks = ledger, blocks
        self.chosen = False  # helpers only while a core is spare (``_spare``)
        self.spared: tuple[Any, bool] = (None, True)  # (block, helpers wanted there)
        self.starts: tuple[list[int], list[int]] = ([], [])  # (a pass's first block, others)
        # (columns, gathered ahead, their buffers taken for the compiled copies, once
        # for every chunk: ``rowcopy.prepare``; None where numpy's takes serve)
        self.seen: tuple[Any, bool, Any] = (None, False, None)
        self.closed = False  # released: the caller gathers any batch still being made
        self._reset()

    def _reset(self) -> None:
        self.pid = os.getpid()
        self.lock = threading.Lock()
        self.chunks: dict[Key, _Chunk] = {}
        # the chunks helpers may gather, in order: (key, first row, records, columns, sources)
        self.window: list[tuple[Key, int, np.ndarray, Any, np.ndarray]] = []
        self.current: Key | None = None  # the chunk the window follows
        self.helping = 0
        self.helpers: set = set()  # this loader's helpers' futures (``release`` waits)
        self.native = 0  # C's helper threads known to run (``rowcopy.helpers``)
        # (generation, first and end position in the pass, columns, fields) of the chunk
        # that the last batch was cut from, gathered: the next batches' fast path
        self.last: tuple[int, int, int, dict, dict[str, np.ndarray]] | None = None
        # Buffers of dropped chunks, to gather into again once no batch views them: a
        # fresh 4 MB array a chunk cost page faults that halved the threads' gathers.
        self.spare: list[dict[str, np.ndarray]] = []

    def release(self) -> None:
        """Let go of every chunk, buffer and view of the columns (the loader closes): a
        thread still making a batch keeps what it holds; nothing is gathered after."""
        with self.lock:
            self.closed = True
            self.window = []  # the helpers find nothing more to gather
            self.chunks = {}
            self.current = self.last = None
            self.spare = []
            self.seen = (None, False, None)
        if self.pid == os.getpid():
            for future in list(self.helpers):  # a helper's chunk in hand: one take at most
                future.exception()  # waits

    def fields(self, claim: Any, block: tuple | None, cols: Any) -> Any:
        """The claim's rows as views of their chunk (gathered here if no thread has
        yet), or None where the caller gathers the batch itself: a share of the
        batches (a torch DataLoader worker's), columns that can be written (a chunk
        gathered ahead would miss a write that the batch must see), a failed gather."""
        # A claim inside the chunk of the last batch, once gathered: its rows are views of
        # it, with nothing else to decide. The chunk's rows are a pure function of the
        # generation and their positions in the pass; the views held here keep its
        # buffers from being gathered into again (``recycle.views``).
        last = self.last
        if (
            last is not None
            and last[0] == claim.gen
            and last[1] <= claim.start
            and claim.stop <= last[2]
            and last[3] is cols
        ):
            lo, hi = claim.start - last[1], claim.stop - last[1]
            return {n: a[lo:hi] for n, a in last[4].items()}
        if self.closed:  # a batch claimed before the loader closed, on another thread
            return None
        if cols is not self.seen[0]:  # new columns (the first, or a refresh)
            row = _row_bytes(cols)
            # numpy arrays over memory nothing writes (memory maps); a remote file's columns
            # (fl.remote's RemoteArray, fetched by ranges) are gathered batch by batch
            arrays = _arrays_of(cols)
            ahead = all(_unwritten(a) for a in arrays)
            prepared = _prepared(cols) if ahead else None
            # the chunks' starts before the columns are marked seen: another user thread's
            # first batch that sees these columns finds their chunks (it met empty starts)
            copied = prepared is not None
            self.starts = (
                _chunk_starts(self.batch_size, row, True, copied),
                _chunk_starts(self.batch_size, row, False, copied),
            )
            self.seen = (cols, ahead, prepared)
        if not self.seen[1] or self.ledger.share != (0, 1) or block is None:
            self.blocks.here = False  # the look-ahead thread makes the next order block
            return None
        # a helper makes it, where Python helpers gather (C's never hold the GIL)
        self.blocks.here = self.spared[1] and self.seen[2] is None
        if self.pid != os.getpid():
            # a forked child: no thread of its parent's is here to gather a chunk it took
            # (another user thread's, in flight at the fork), nor any helper of its
            self._reset()
        start = block[0]
        c = bisect.bisect_right(self.starts[start > 0], claim.start - start) - 1
        key = (claim.gen, start, c)
        chunk = self.chunks.get(key)
        # The key leaves out the block's length: two blocks of a generation may start at
        # one position with other lengths (a block made for a given-back claim, or after a
        # seek, is short), and the short one's last chunk ends at its end. A chunk that
        # ends before the claim is made again, of this block's rows.
        need = claim.stop - start
        taken: tuple[Key, _Chunk] | None = None  # a chunk this thread took, to gather
        try:
            if key != self.current or not _holds(chunk, cols, need):
                with self.lock:  # a new chunk: the window moves on
                    chunk = self.chunks.get(key)
                    if not _holds(chunk, cols, need):
                        lo, recs, ords = self._rows(key, block[2], block[1])
                        chunk = self._new(key, lo, recs, cols, ords)
                        taken = (key, chunk)
                    self._advance(key, block, cols)
            assert chunk is not None
            if chunk.task is not None:  # copied by C's threads and this one
                if not chunk.ready:
                    self._copied(chunk)
            elif taken is not None:
                self._gather(*taken)
            elif not chunk.ready and chunk.owner == threading.get_ident():
                # this thread took it and was stopped before it gathered it (an interrupt
                # that also stopped the giving back): gathered now
                taken = (key, chunk)
                self._gather(*taken)
            elif not chunk.ready:
                # A helper gathers it: gather the next unclaimed chunk meanwhile, not wait.
                with self.lock:
                    taken = self._unclaimed()
                if taken is not None:
                    # an error is met by the caller that needs that chunk, gathering it
                    with contextlib.suppress(Exception):
                        self._gather(*taken)
                chunk.wait()
        except BaseException:
            self._give_back()
            raise
        got = chunk.fields
        if got is None:
            return None
        first = start + chunk.lo  # the chunk's first position in the pass
        with self.lock:  # (once a chunk) not after ``release``: it would keep the columns
            if not self.closed:
                self.last = (claim.gen, first, first + len(chunk.recs), cols, got)
        lo, hi = claim.start - first, claim.stop - first
        return {n: a[lo:hi] for n, a in got.items()}

    def _give_back(self) -> None:
        """After an interrupt (or a helper's ``SystemExit``) between taking a chunk and
        gathering it: the chunks this thread took and did not gather are dropped (a later
        batch takes them again), and the threads waiting for them woken to gather their
        batches themselves. No thread then waits for a chunk that no thread gathers."""
        me = threading.get_ident()
        with self.lock:
            for key, chunk in list(self.chunks.items()):
                if chunk.owner == me and not chunk.ready:
                    chunk.finish()  # first: its waiters wake whatever comes next
                    del self.chunks[key]

    # -- under the lock ------------------------------------------------------------------
    def _rows(
        self, key: Key, recs: np.ndarray, ords: np.ndarray
    ) -> tuple[int, np.ndarray, np.ndarray]:
        """Chunk ``key``'s first row in its block, its records and their sources (of the
        block's)."""
        starts = self.starts[key[1] > 0]
        lo, hi = starts[key[2]], starts[key[2] + 1]
        return lo, recs[lo:hi], ords[lo:hi]

    def _new(self, key: Key, lo: int, recs: np.ndarray, cols: Any, ords: np.ndarray) -> _Chunk:
        chunk = _Chunk(lo, recs, cols, ords)
        queue = False
        seen = self.seen
        if cols is seen[0] and seen[2] is not None:
            # Copied by C: queued for the helpers at once (where a core is spare), and by
            # whichever thread needs it first (``_copied``); no thread of Python owns it.
            # Known by its key only once its task is made: an interrupt before that leaves
            # no chunk that no thread copies.
            chunk.owner = 0
            chunk.buffers = self._buffers(cols)
            queue = self.spared[1] and not self.closed
            chunk.task = rowcopy.submit(
                chunk.buffers, cols, recs, ords, queue=queue, prepared=seen[2]
            )
        self.chunks[key] = chunk
        if queue and self.native < self.threads - 1:
            try:
                self.native = rowcopy.helpers(self.threads - 1)
            except OSError:  # no thread could start: whoever needs a chunk copies it
                self.native = self.threads
        return chunk

    def _advance(self, key: Key, block: tuple, cols: Any) -> None:
        """The caller is at chunk ``key``: drop the chunks behind it, open the window of
        the next ones (into the next order block, once the look-ahead has made it) to
        the helpers, and start a helper if one is free."""
        gen, start, c = key
        self.current = key
        st, recs, ords = self.starts[start > 0], block[2], block[1]
        chunks = bisect.bisect_right(st, block[4] - start - 1)
        # the next chunks of this block (``_rows`` written out: a call less each)
        window = [
            ((gen, start, i), st[i], recs[st[i] : st[i + 1]], cols, ords[st[i] : st[i + 1]])
            for i in range(c + 1, min(chunks, c + 1 + _AHEAD))
        ]
        if len(window) < _AHEAD:
            window += self._next_block(gen, block, cols)
        del window[_AHEAD:]
        if self.chosen and self.spared[0] is not block:
            self.spared = (block, self._spare())
        if not self.spared[1] or self.closed:
            window = []  # the calling thread gathers every chunk
        keep = {key, (gen, start, c - 1), *(w[0] for w in window)}
        for k in [k for k in self.chunks if k not in keep]:
            dropped = self.chunks.pop(k).buffers
            if dropped is not None and len(self.spare) < 2 * _AHEAD + 2:
                self.spare.append(dropped)
        self.window = window
        if self.seen[2] is not None and cols is self.seen[0]:
            for k, lo, rows, of, ords in window:  # the helpers (C's) start on them now
                if k not in self.chunks:
                    self._new(k, lo, rows, of, ords)
            return
        if self.helping < self.threads - 1 and window:
            self.helping += 1
            try:
                future = _executor().submit(self._help)
            except BaseException:  # no helper started: its place is given back
                self.helping -= 1
                raise
            _running.add(future)
            self.helpers.add(future)
            future.add_done_callback(_running.discard)
            future.add_done_callback(self.helpers.discard)

    def _next_block(self, gen: int, block: tuple, cols: Any) -> list:
        """The first chunks of the order block after ``block``, if the look-ahead has
        made it (its records read from the same block of the order the loader reads)."""
        ahead = self.blocks.ahead
        if ahead is None or self.blocks.block is not block or not ahead.future.done():
            return []  # read in this order: an ``ahead`` of another block is refused
        if ahead.future.exception() is not None:
            return []
        ords, recs = ahead.result()
        chunks = bisect.bisect_right(self.starts[1], len(recs) - 1)
        window = []
        for k in _keys(gen, ahead.start, 0, min(chunks, _AHEAD)):
            lo, rows, of = self._rows(k, recs, ords)
            window.append((k, lo, rows, cols, of))
        return window

    def _buffers(self, cols: Any) -> dict[str, np.ndarray]:
        """Arrays of the largest chunk's rows for ``cols``: a dropped chunk's that no
        batch views any more (the only references left are the list's and the call's),
        or new ones."""
        # the most recently dropped first: its pages are the likeliest still in the
        # caches and the TLB (two threads of np.take of 3 KB rows ran 1.15x faster each
        # into one buffer than cycling through four; here, where several chunks are
        # live anyway, 1.0 - 1.03x against taking the oldest)
        cols = _fields_of(cols)
        # (new columns may be chunked otherwise: a buffer of smaller chunks is not reused)
        rows = max(b - a for st in self.starts for a, b in itertools.pairwise(st))
        for i in range(len(self.spare) - 1, -1, -1):
            bufs = self.spare[i]
            if (
                all(
                    n in bufs and bufs[n].dtype == c.dtype and bufs[n].shape[1:] == c.shape[1:]
                    for n, c in cols.items()
                )
                and all(len(b) >= rows for b in bufs.values())
                and recycle.REUSE
                and recycle.views(bufs) == 0
            ):
                return self.spare.pop(i)
        return {n: np.empty((rows, *c.shape[1:]), dtype=c.dtype) for n, c in cols.items()}

    def _spare(self) -> bool:
        """Whether a helper finds a core (checked once an order block): the 1-minute load
        average, less this loader's own threads, leaves one. Where it does not, the GIL's
        hand-offs between the threads wait for the scheduler and the threads lose (0.6 -
        1.1x one thread on the reference machine with other sessions keeping it busy)."""
        try:
            load = os.getloadavg()[0]
        except (AttributeError, OSError):  # no load average (Windows): assume a core
            return True
        own = self.threads if self.spared[1] else 1
        return load - own < usable_cpus() - self.threads + 0.5

    def _unclaimed(self) -> tuple[Key, _Chunk] | None:
        """The first chunk of the window no thread has taken, now taken; or None."""
        for key, lo, recs, cols, ords in self.window:
            if key not in self.chunks:
                return key, self._new(key, lo, recs, cols, ords)
        return None

    # -- gathering -------------------------------------------------------------------------
    def _copied(self, chunk: _Chunk) -> None:
        """Copy what is left of a chunk's task in this thread, wait for the rest, and
        mark it gathered; given up (``fields`` None: the caller gathers its batch and
        meets the error) where a record is out of range or the task was cancelled."""
        try:
            whole = bool(chunk.task.run())
        except IndexError:
            whole = False
        with self.lock:  # any thread may get here: one marks it
            if not chunk.ready:
                if whole:
                    k = len(chunk.recs)
                    chunk.fields = {n: a[:k] for n, a in chunk.buffers.items()}  # type: ignore[union-attr]
                chunk.finish()

    def _gather(self, key: Key, chunk: _Chunk) -> None:
        if chunk.task is not None:  # C's: copied (and marked) as any thread that needs it
            self._copied(chunk)
            return
        try:
            # the order's records are below 2**63 and in range: as int64 they index
            # without a conversion, and "clip" spares numpy its checks' buffered copy
            recs = chunk.recs.view(np.int64)
            k = len(recs)
            with self.lock:
                bufs = self._buffers(chunk.cols)
            if isinstance(chunk.cols, tuple):  # a mix: each source's rows at once
                take_mixed(chunk.cols, chunk.ords, recs, out=bufs)
            else:
                for n, col in chunk.cols.items():
                    np.take(col, recs, axis=0, mode="clip", out=bufs[n][:k])
            chunk.buffers = bufs
            chunk.fields = {n: a[:k] for n, a in bufs.items()}
        except BaseException:
            with self.lock:
                if self.chunks.get(key) is chunk:
                    del self.chunks[key]
            raise
        finally:
            chunk.finish()

    def _help(self) -> None:
        """A helper thread: gather the window's unclaimed chunks until none is left, and
        make the next order block where the helpers make it (``Ahead``'s ``here``) and
        no thread is making it yet: one more piece of the pass's work, which the caller
        meets already made, while it gathers the chunks that this thread does not."""
        try:
            while True:
                ahead = self.blocks.ahead
                if ahead is not None and ahead.pending and ahead.pid == os.getpid():
                    ahead.run(wait=False)  # an error is kept for the caller that needs it
                with self.lock:
                    got = self._unclaimed() if self.pid == os.getpid() else None
                    if got is None:
                        self.helping -= 1  # in the same step: a caller may start another
                        return
                # the caller that needs this chunk gathers it and meets the error
                with contextlib.suppress(Exception):
                    self._gather(*got)
        except BaseException:  # (SystemExit): this helper's chunks and place given back
            self._give_back()
            with self.lock:
                self.helping -= 1
            raise


def _keys(gen: int, start: int, first: int, stop: int) -> list[Key]:
    return [(gen, start, c) for c in range(first, min(stop, first + _AHEAD))]
