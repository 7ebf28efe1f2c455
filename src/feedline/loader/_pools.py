"""Worker pools kept for the loops over a dataset, and how a loader uses one.

ShapeScript: "The workers are started once per dataset parameter and kept for the loops
over it." So the seed's idiom ``for epoch ...: for b in ds.shuffle(seed=epoch).batches(8)``
starts its workers once, not once per epoch:

* A pool is registered under a key: a digest of its datasets as pickled (what its
  workers hold) and of the batch transform it runs, and the settings its workers and
  shared memory depend on (batch size, workers, prefetch, value checks, output).
  Keying by content, not by object, means workers are reused only when a fresh start
  would send them exactly what they hold: a source changed in place gets new workers,
  never stale examples.
* A loader holds one pool at a time. The next loader with the same key takes it over
  when its holder has nothing in flight (its pass ended, or it was reset) or was
  collected; batches a collected holder left in flight are waited out first, so every
  loader starts on an empty pipeline and the stream is the same as with fresh workers.
* A pool stops (workers stopped, pipes closed, memory unlinked) when its holder is
  closed (``close`` frees everything, as it always did), when the last dataset that
  used it is collected (a weakref finaliser), or at exit; a pool whose worker died
  (``WorkerError``) stops at once and is never lent again.
"""

from __future__ import annotations

import os
import sys
import threading
import warnings
import weakref
from collections.abc import Callable
from typing import Any

from ..errors import WorkerError
from ._batch import Batch
from ._config import workers_are_set
from ._workers import WorkerPool, examine

# How long a loader waits for the batches a dropped holder left in flight (then the pool
# stops and the loader starts its own).
_DRAIN_S = 2.0

# Reentrant: a dataset's finaliser may run (garbage collection) while this thread holds it.
_lock = threading.RLock()
_pools: dict[tuple, list[WorkerPool]] = {}
_watched: dict[int, weakref.finalize] = {}


class PoolSpec:
    """What a loader's pool must be: its datasets, settings and key."""

    def __init__(self, datasets: list, fields: dict, batch_size: int, workers: int,
                 prefetch: int, check_values: bool, transform: Any, output: str,
                 device: str | None, digest: str, transform_digest: str | None) -> None:
        self.datasets = datasets
        self.args = (datasets, fields, batch_size, workers, prefetch, check_values)
        self.kwargs = {"transform": transform, "output": output, "device": device}
        layout = tuple((n, f.dtype.str, tuple(f.shape)) for n, f in fields.items())
        self.key = (digest, transform_digest, layout, batch_size, workers, prefetch,
                    check_values, output, device)


def live_pools() -> list[WorkerPool]:
    """The pools this process keeps (for tests and diagnostics)."""
    with _lock:
        return [p for pools in _pools.values() for p in pools]


def acquire(spec: PoolSpec, loader: Any) -> WorkerPool:
    """A pool for ``loader``, held by it, its ``use_lock`` held: one it can take over, or a
    new one (started here; ``WorkerError`` if a worker does not start)."""
    me = weakref.ref(loader)
    while (pool := _lend(spec, me)) is not None:
        ok = pool.drain(_DRAIN_S) if pool.pending else True
        if ok and pool.all_alive():
            try:
                pool.ensure_slots()
                return pool
            except WorkerError:
                pass
        pool.use_lock.release()
        discard(pool)
    pool = WorkerPool(*spec.args, **spec.kwargs)
    pool.key, pool.holder = spec.key, me
    pool.use_lock.acquire()
    with _lock:
        _pools.setdefault(spec.key, []).append(pool)
        _adopt(pool, spec.datasets)
    return pool


def _lend(spec: PoolSpec, me: weakref.ref) -> WorkerPool | None:
    """A registered pool ``me`` may take (now held by it, ``use_lock`` held), or None."""
    loader = me()
    with _lock:
        for pool in list(_pools.get(spec.key, ())):
            if pool.closed or pool.broken is not None:
                continue
            if not pool.use_lock.acquire(blocking=False):
                continue  # its holder is submitting or waiting
            holder = pool.holder() if pool.holder is not None else None
            if holder is not None and holder is not loader and pool.pending:
                pool.use_lock.release()  # in the middle of another loader's pass
                continue
            pool.holder = me
            _adopt(pool, spec.datasets)
            return pool
    return None


def hand_back(pool: WorkerPool, loader: Any) -> None:
    """``loader`` closes: the pool it holds stops (workers, their pipes, the shared
    memory), as ``close`` promises; a pool another loader took over is not its own."""
    with pool.use_lock:
        if pool.holder is None or pool.holder() is not loader:
            return
        pool.holder = None
    discard(pool)


def discard(pool: WorkerPool) -> None:
    """Stop ``pool`` and forget it (a worker died, or it could not be emptied)."""
    with _lock:
        pools = _pools.get(pool.key)
        if pools is not None and pool in pools:
            pools.remove(pool)
            if not pools:
                del _pools[pool.key]
    pool.close()


def _adopt(pool: WorkerPool, datasets: list) -> None:
    """Under the lock: ``pool`` serves ``datasets``; it stops when they all have gone."""
    for ds in datasets:
        ident = id(ds)
        pool.users.add(ident)
        if ident not in _watched:
            fin = weakref.finalize(ds, _dataset_gone, ident)
            fin.atexit = False  # at exit every pool stops by its own finaliser
            _watched[ident] = fin


def _dataset_gone(ident: int) -> None:
    stop = []
    with _lock:
        _watched.pop(ident, None)
        for key, pools in list(_pools.items()):
            for pool in list(pools):
                pool.users.discard(ident)
                if not pool.users:
                    pools.remove(pool)
                    stop.append(pool)
            if not pools:
                del _pools[key]
    for pool in stop:
        pool.close()


def _forked() -> None:
    """In a forked child, the pools are the parent's: forget them without stopping them."""
    global _lock
    _lock = threading.RLock()
    for pools in _pools.values():
        for pool in pools:
            pool.forget()
    _pools.clear()
    for fin in _watched.values():
        fin.detach()
    _watched.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forked)


class PoolMode:
    """How a ``Loader`` uses worker pools (the loader provides the attributes)."""

    def _use_pool(self) -> WorkerPool | None:
        """The worker pool this loader uses, taken (or started) on first use; None:
        batches are made in process. Decided once, under a lock: threads that call
        next() while the pool starts wait for it rather than gather in process."""
        if self._pool_decided and (self._pool is not None or self._pool_spec is None):
            return self._pool
        with self._next_lock:
            if not self._pool_decided:
                self._pool_spec = self._plan_pool()
                self._pool_decided = True
            if self._pool_spec is not None and self._pool is None:
                self._take_pool().use_lock.release()
        return self._pool

    def _plan_pool(self) -> PoolSpec | None:
        if self.workers == 0:
            return None
        if all(ds.cheap_gathers for ds in self._datasets) and self.batch_transform is None:
            # Arrays in memory and memory-mapped files gather faster here than batches
            # travel between processes (benchmarks/workers.py; the figures are beside the
            # default in _config.py), and sending arrays would copy them into every worker.
            return None
        # With the machine's default (workers=None, no loader_workers(n)) a dataset that
        # cannot go to workers loads here quietly; asked for workers, it says why.
        asked = not self._workers_default or workers_are_set()
        digest, reason = examine(self._datasets)
        if reason is not None:
            if asked:
                warnings.warn(f"the loader's datasets are loaded in the calling process, not "
                              f"in {self.workers} workers: {reason}", RuntimeWarning,
                              stacklevel=_caller_level())
            return None
        transform, transform_digest = self.batch_transform, None
        if transform is not None:
            transform_digest, reason = examine(transform)
            if reason is not None:
                # The transform stays here; the workers still make the batches.
                if asked:
                    warnings.warn(f"batch_transform runs in the calling process: {reason}",
                                  RuntimeWarning, stacklevel=_caller_level())
                transform = None
        self._transform_in_workers = transform is not None
        return PoolSpec(self._datasets, dict(self.record.fields), self.batch_size,
                        self.workers, self.prefetch, self.check_values, transform,
                        self.output, None if self.device is None else str(self.device),
                        digest, transform_digest)

    def _take_pool(self) -> WorkerPool:
        """Under ``_next_lock``: the pool to submit to, held by this loader, with its
        ``use_lock`` held (the caller releases it). Its own, unless another loader took it
        over between passes; a broken one raises ``WorkerError`` until a reset."""
        pool = self._pool
        if pool is not None:
            pool.use_lock.acquire()
            if pool.holder is not None and pool.holder() is self:
                if pool.broken is not None:
                    pool.use_lock.release()
                    raise WorkerError(f"{pool.broken} (reset() or load_state_dict() "
                                      "continues with new workers)")
                return pool
            pool.use_lock.release()
        if self._pool_spec is None:
            raise ValueError("the loader is closed")
        self._pool = pool = acquire(self._pool_spec, self)
        return pool

    def _on_pool(self, fn: Callable[[WorkerPool], Any]) -> Any:
        """``fn(pool)`` with this loader's pool held; a death stops the pool for good."""
        pool = self._take_pool()
        try:
            return fn(pool)
        except WorkerError:
            if pool.broken is not None:
                discard(pool)
            raise
        finally:
            pool.use_lock.release()

    def _next_from_pool(self, raw: bool = False) -> Any:
        """The next batch the workers made (``raw``: before a transform in this process)."""
        with self._next_lock:
            start, stop, ords, recs, fields = self._on_pool(self._submit_and_take)
            if self._transform_in_workers:
                self._last_rows = stop - start
                return fields  # the transform's result, made in a worker
            size = stop - start
            rows = self._rows_for(size)
            fields = {n: a[:rows] for n, a in fields.items()}
            self._last_rows = size
        if self.output == "torch":
            fields = self._to_torch(fields)
        batch = Batch(fields, size, rows, start, ords, recs)
        if self.batch_transform is not None and not raw:
            return self.batch_transform(batch)
        return batch

    def _submit_and_take(self, pool: WorkerPool) -> tuple:
        while pool.can_submit():
            claim = self._claim()
            if claim is None:
                break
            start, stop, ords, recs = claim
            pool.submit(start // self.batch_size, ords, recs, self._rows_for(stop - start),
                        start, self._seeds(start, stop - start), self._context())
            self._inflight.append(claim)
        if not self._inflight:
            with self._lock:
                self._ended = True
                self._last_rows = 0
            raise StopIteration
        start, stop, ords, recs = self._inflight.popleft()
        try:
            fields = pool.result(start // self.batch_size)
        finally:
            self._passed(start)
        return start, stop, ords, recs, fields

    def _drain(self) -> None:
        """Discard batches the workers are making ahead (before a reset or a resume);
        after a worker died, let the next batch start new workers."""
        if self._pool is None:
            return
        with self._next_lock:
            pool = self._pool
            if pool is not None:
                with pool.use_lock:
                    if (pool.holder is not None and pool.holder() is self
                            and pool.broken is None):
                        pool.drain()  # a worker that dies meanwhile leaves it broken
                if pool.broken is not None:
                    discard(pool)
                    self._pool = None
            self._inflight.clear()

    def _release_pool(self) -> None:
        """On close: stop the pool this loader holds."""
        with self._next_lock:
            pool, self._pool = self._pool, None
            self._pool_spec, self._pool_decided = None, True
            self._inflight.clear()
        if pool is not None:
            hand_back(pool, self)


def _caller_level() -> int:
    """The ``stacklevel`` of the first frame outside feedline's loader (a warning points
    at the caller's line, whichever path of the loader asked)."""
    here = os.path.dirname(__file__)
    frame, level = sys._getframe(1), 1
    while frame is not None and os.path.dirname(frame.f_code.co_filename) == here:
        frame, level = frame.f_back, level + 1
    return level
