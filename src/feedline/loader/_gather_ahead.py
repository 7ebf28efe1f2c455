"""Plain gathers a chunk at a time, the next chunks gathered ahead by helper threads.

A plain path's batch is rows of arrays in memory or memory-mapped (``PlainPlan``).
Here the rows of several batches are gathered at once, a *chunk* of the order block,
with one ``np.take`` per field (numpy releases the GIL while it copies), and the
batches are views of their chunk. Helper threads gather the next chunks of the block
while the caller takes batches from this one, and the calling thread, when the chunk
it needs is still being gathered, gathers the next unclaimed one meanwhile: so with two
threads both cores copy rows, and no thread waits for another to be woken per batch.

A chunk is a pure function of the order block's records and the dataset's columns, and
its key carries the ledger's generation and the block's first position: a batch holds
the same rows whichever thread gathered them, with any number of threads. Nothing here
is state of the loader: a chunk dropped or never made is gathered again.

Cost: ``threads - 1`` helper threads (a process-wide pool), at most ``_AHEAD + 2``
chunks of about ``_CHUNK_BYTES`` held per loader.
"""

from __future__ import annotations

import bisect
import contextlib
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from ._blocks import _BLOCK, OrderBlocks
from ._config import _in_torch_worker, usable_cpus

# Bytes a chunk holds (rounded to whole batches). Measured on the 2-core reference
# machine, 4,000,000 rows of 264 bytes in batches of 512 (benchmarks/compare.py):
# see the default of ``threads`` below for the figures.
_CHUNK_BYTES = 2 << 20
# Chunks gathered ahead of the caller's: enough that a helper is never idle while the
# caller takes batches, few enough that memory stays a few chunks.
_AHEAD = 2
# Most helper threads any loader uses (the pool's size).
_MAX_HELPERS = 15

_pool: tuple[int, ThreadPoolExecutor] | None = None  # (pid, pool): a forked child's own
_pool_lock = threading.Lock()
_running: set = set()  # helpers' futures: a fork waits for them


def default_threads() -> int:
    """Threads gathering a plain path's batches when ``threads=None``.

    Two where the process may run on two CPUs or more: gathering rows is bound by
    memory latency, and a second thread hides half of it (4,000,000 rows of 264 bytes,
    batches of 512: see ``docs/benchmarks.md``); more threads gain less than they cost
    the rest of a training step on the other cores, so more is the caller's choice.
    One inside a torch DataLoader worker, whose siblings use the other cores.
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


class _Chunk:
    """Rows ``lo .. hi`` of an order block, gathered (``fields``) once ``done`` is set;
    ``fields`` stays None when the gather failed (the caller gathers its batch itself,
    and meets the error where it is reported)."""

    __slots__ = ("cols", "done", "fields", "hi", "lo")

    def __init__(self, lo: int, hi: int, cols: dict[str, np.ndarray]) -> None:
        self.lo, self.hi, self.cols = lo, hi, cols
        self.fields: dict[str, np.ndarray] | None = None
        self.done = threading.Event()


def for_plain(loader: Any) -> GatherAhead | None:
    """The chunks of a plain plan, or None where its batches are gathered one by one:
    with one thread, and under length bucketing (no order blocks)."""
    opts = loader.options
    if opts.threads < 2 or not isinstance(loader._blocks, OrderBlocks):
        return None
    return GatherAhead(opts.threads, opts.batch_size, loader._ledger, opts.threads_default)


def _chunk_starts(batch_size: int, row_bytes: int) -> list[int]:
    """Chunk starts in a block: one batch, one, two, four... up to the chunk size, so a
    block's first batch (a pass's first; a fresh memory map's page faults) waits for one
    batch's rows, not a chunk's, while the helpers ramp up."""
    most = max(1, _CHUNK_BYTES // max(1, row_bytes * batch_size))
    starts, size, at = [0], 1, 0
    while at < _BLOCK + batch_size:
        at += size * batch_size
        starts.append(at)
        if len(starts) > 2:
            size = min(2 * size, most)
    return starts


class GatherAhead:
    """The chunks of one plain loader: the calling threads' batches are views of them."""

    def __init__(self, threads: int, batch_size: int, ledger: Any, chosen: bool = False) -> None:
        self.threads, self.batch_size, self.ledger = threads, batch_size, ledger
        self.chosen = chosen  # the default: helpers only while a core is spare
        self.spare: tuple[Any, bool] = (None, True)  # (block, helpers wanted there)
        self.starts: list[int] = []
        self.seen: tuple[Any, bool] = (None, False)  # (columns, gathered ahead)
        self._reset()

    def _reset(self) -> None:
        self.pid = os.getpid()
        self.lock = threading.Lock()
        self.chunks: dict[tuple[int, int, int], _Chunk] = {}
        # (generation, block, columns, first chunk, last chunk) helpers may gather
        self.window: tuple | None = None
        self.current: tuple[int, int, int] | None = None  # the chunk the window follows
        self.helping = 0

    def fields(self, claim: Any, block: tuple | None, cols: dict[str, np.ndarray]) -> Any:
        """The claim's rows as views of their chunk (gathered here if no thread has
        yet), or None where the caller gathers the batch itself: a share of the
        batches (a torch DataLoader worker's), columns that can be written (a chunk
        gathered ahead would miss a write that the batch must see), a failed gather."""
        if cols is not self.seen[0]:  # new columns (the first, or a refresh)
            self.seen = (cols, all(not a.flags.writeable for a in cols.values()))
            row = sum(a.itemsize * int(np.prod(a.shape[1:])) for a in cols.values())
            self.starts = _chunk_starts(self.batch_size, row)
        if not self.seen[1] or self.ledger.share != (0, 1) or block is None:
            return None
        start = block[0]
        c = bisect.bisect_right(self.starts, claim.start - start) - 1
        key = (claim.gen, start, c)
        chunk = self.chunks.get(key)
        mine = False
        if key != self.current or chunk is None or chunk.cols is not cols:
            with self.lock:  # a new chunk: the window moves on
                if self.pid != os.getpid():  # a forked child: no helper of its parent's
                    self._reset()
                chunk = self.chunks.get(key)
                mine = chunk is None or chunk.cols is not cols
                if mine:
                    chunk = self._new(key, block, cols)
                self._advance(key, block, cols)
        assert chunk is not None
        if mine:
            self._gather(key, chunk, block)
        elif not chunk.done.is_set():
            # A helper gathers it: gather the next unclaimed chunk meanwhile, not wait.
            with self.lock:
                other = self._unclaimed()
            if other is not None:
                # an error is met by the caller that needs that chunk, gathering it
                with contextlib.suppress(Exception):
                    self._gather(*other)
            chunk.done.wait()
        got = chunk.fields
        if got is None:
            return None
        lo, hi = claim.start - start - chunk.lo, claim.stop - start - chunk.lo
        return {n: a[lo:hi] for n, a in got.items()}

    # -- under the lock ------------------------------------------------------------------
    def _new(self, key: tuple[int, int, int], block: tuple, cols: dict) -> _Chunk:
        c = key[2]
        chunk = _Chunk(self.starts[c], min(self.starts[c + 1], block[4] - block[0]), cols)
        self.chunks[key] = chunk
        return chunk

    def _advance(self, key: tuple[int, int, int], block: tuple, cols: dict) -> None:
        """The caller is at chunk ``key``: drop the chunks behind it, open the window
        of the next ones to the helpers, and start a helper if one is free."""
        gen, start, c = key
        self.current = key
        for k in [k for k in self.chunks if k[:2] != (gen, start) or k[2] < c - 1]:
            del self.chunks[k]
        last = min(c + _AHEAD, bisect.bisect_right(self.starts, block[4] - block[0] - 1) - 1)
        if self.chosen and self.spare[0] is not block:
            self.spare = (block, self._spare_cpus())
        if not self.spare[1]:
            last = c  # the calling thread gathers every chunk
        self.window = (gen, block, cols, c + 1, last)
        if self.helping < self.threads - 1 and last > c:
            self.helping += 1
            future = _executor().submit(self._help)
            _running.add(future)
            future.add_done_callback(_running.discard)

    def _spare_cpus(self) -> bool:
        """Whether the helpers find cores to run on (checked once an order block): the
        1-minute load average, less this loader's own threads, leaves them one each.
        Where it does not, the GIL's hand-offs between the threads each wait for the
        scheduler, and the threads lose: measured on the 2-core reference machine at a
        load of 5 (other processes' tests), two threads gave 0.5 - 0.73x one."""
        try:
            load = os.getloadavg()[0]
        except (AttributeError, OSError):  # no load average (Windows): assume there is
            return True
        own = self.threads if self.spare[1] else 1
        return load - own < usable_cpus() - self.threads + 0.5

    def _unclaimed(self) -> tuple[tuple[int, int, int], _Chunk, tuple] | None:
        """The first chunk of the window no thread has taken, now taken; or None."""
        w = self.window
        if w is None:
            return None
        gen, block, cols, first, last = w
        for c in range(first, last + 1):
            key = (gen, block[0], c)
            if key not in self.chunks:
                return key, self._new(key, block, cols), block
        return None

    # -- gathering -------------------------------------------------------------------------
    def _gather(self, key: tuple[int, int, int], chunk: _Chunk, block: tuple) -> None:
        try:
            # the order's records are below 2**63 and in range: as int64 they index
            # without a conversion, and "clip" spares numpy its checks' buffered copy
            recs = block[2][chunk.lo : chunk.hi].view(np.int64)
            chunk.fields = {
                n: np.take(col, recs, axis=0, mode="clip") for n, col in chunk.cols.items()
            }
        except BaseException:
            with self.lock:
                if self.chunks.get(key) is chunk:
                    del self.chunks[key]
            raise
        finally:
            chunk.done.set()

    def _help(self) -> None:
        """A helper thread: gather the window's unclaimed chunks until none is left."""
        while True:
            with self.lock:
                got = self._unclaimed() if self.pid == os.getpid() else None
                if got is None:
                    self.helping -= 1  # in the same step: a caller may start another
                    return
            try:
                self._gather(*got)
            except Exception:
                pass  # the caller that needs this chunk gathers it and meets the error
            except BaseException:
                with self.lock:
                    self.helping -= 1
                raise
