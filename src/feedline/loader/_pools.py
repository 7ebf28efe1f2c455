"""Worker pools kept for the loops over a dataset (a loader uses one through
``_worker_plan.WorkerPlan``).

ShapeScript: "The workers are started once per dataset parameter and kept for the loops
over it." So the seed's idiom ``for epoch ...: for b in ds.shuffle(seed=epoch).batches(8)``
starts its workers once, not once per epoch:

* A pool is registered under a key: a digest of its datasets as pickled (what its
  workers hold) and of the batch transform it runs, and the settings its workers and
  shared memory depend on (batch size, workers, prefetch, value checks, output).
  Keying by content, not by object, means workers are reused only when a fresh start
  would send them exactly what they hold (the padding options too: a batch transform in
  the workers sees its batch collated): a source changed in place gets new workers,
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
import threading
import weakref
from typing import Any

from ..errors import WorkerError
from ._workers import WorkerPool

# How long a loader waits for the batches a dropped holder left in flight (then the pool
# stops and the loader starts its own).
_DRAIN_S = 2.0

# Reentrant: a dataset's finaliser may run (garbage collection) while this thread holds it.
_lock = threading.RLock()
_pools: dict[tuple, list[WorkerPool]] = {}
_watched: dict[int, weakref.finalize] = {}


class PoolSpec:
    """What a loader's pool must be: its datasets, settings and key."""

    def __init__(
        self,
        datasets: list,
        fields: dict,
        batch_size: int,
        workers: int,
        prefetch: int,
        check_values: bool,
        transform: Any,
        output: str,
        device: str | None,
        digest: str,
        transform_digest: str | None,
        padding: tuple[int | None, Any, bool] = (None, None, False),
        by_value: bool = False,
    ) -> None:
        self.datasets = datasets
        self.args = (datasets, fields, batch_size, workers, prefetch, check_values)
        self.kwargs = {
            "transform": transform,
            "output": output,
            "device": device,
            "padding": padding,
            "by_value": by_value,
        }
        layout = tuple((n, f.dtype.str, tuple(f.shape), f.kind) for n, f in fields.items())
        # how a batch transform in the workers sees ragged fields
        multiple, bounds, nested = padding
        if isinstance(bounds, dict):
            bounds = tuple(sorted(bounds.items()))
        self.key = (
            digest,
            transform_digest,
            layout,
            batch_size,
            workers,
            prefetch,
            check_values,
            output,
            device,
            multiple,
            bounds,
            nested,
        )


def live_pools() -> list[WorkerPool]:
    """The pools this process keeps (for tests and diagnostics)."""
    with _lock:
        return [p for pools in _pools.values() for p in pools]


def acquire(spec: PoolSpec, loader: Any) -> WorkerPool:
    """A pool for ``loader``, held by it, its ``use_lock`` held: one it can take over, or a
    new one (started here; ``WorkerError`` if a worker does not start). An interrupt
    before the return lets go of the pool's lock: a pool taken over stays registered (held
    by ``loader``, which takes it again next time: a drain cut short goes on), a new one
    stops."""
    me = weakref.ref(loader)
    while (pool := _lend(spec, me)) is not None:
        try:
            ok = pool.drain(_DRAIN_S) if pool.pending else True
            if ok and pool.all_alive():
                try:
                    pool.ensure_slots()
                    return pool
                except WorkerError:
                    pass
        except BaseException:
            _let_go(pool)
            raise
        _let_go(pool)
        discard(pool)
    pool = WorkerPool(*spec.args, **spec.kwargs)
    try:
        pool.key, pool.holder = spec.key, me
        pool.use_lock.acquire()
        with _lock:
            _pools.setdefault(spec.key, []).append(pool)
            _adopt(pool, spec.datasets)
    except BaseException:  # not yet the loader's: it must not outlive this call
        _let_go(pool)
        discard(pool)
        raise
    return pool


def _let_go(pool: WorkerPool) -> None:
    """Release ``pool``'s ``use_lock`` if this thread holds it (after an interrupt, the
    lock may or may not have been taken: an RLock knows its owner)."""
    owned = getattr(pool.use_lock, "_is_owned", None)
    if owned is not None and owned():
        pool.use_lock.release()


def _lend(spec: PoolSpec, me: weakref.ref) -> WorkerPool | None:
    """A registered pool ``me`` may take (now held by it, ``use_lock`` held), or None."""
    loader = me()
    with _lock:
        for pool in list(_pools.get(spec.key, ())):
            if pool.closed or pool.broken is not None:
                continue
            try:
                if not pool.use_lock.acquire(blocking=False):
                    continue  # its holder is submitting or waiting
                holder = pool.holder() if pool.holder is not None else None
                if holder is not None and holder is not loader and pool.pending:
                    pool.use_lock.release()  # in the middle of another loader's pass
                    continue
                pool.holder = me
                _adopt(pool, spec.datasets)
            except BaseException:  # an interrupt: the lock, if it was taken, goes back
                _let_go(pool)
                raise
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
