"""The worker plan: worker processes make a loader's batches ahead (``_workers``,
``_slots``), from pools kept for the loops over a dataset (``_pools``); ragged fields
are collated here, out of the workers' memory, as in process."""

from __future__ import annotations

import os
import sys
import threading
import warnings
from collections import deque
from collections.abc import Callable, Mapping
from time import perf_counter_ns
from types import FrameType
from typing import Any

import numpy as np

from .._base import clock
from ..errors import WorkerError
from ..records._ragged import Ragged
from . import _collate, _into
from ._batch import Batch
from ._config import workers_are_set
from ._local_plan import LocalPlan
from ._pools import PoolSpec, acquire, discard, hand_back
from ._shipping import examine
from ._util import Plan, on_host, to_torch
from ._workers import WorkerPool


class WorkerPlan(Plan):
    """Worker processes make the batches ahead; a pool is taken (or started) on first
    use. Something of ``__main__`` (a script's map, record or source) goes to them by
    value (cloudpickle, ``_shipping.examine``); datasets that cannot go at all (cloudpickle
    missing, or an open socket in a map's closure) are read here (``LocalPlan``), with a
    warning saying why when workers were asked for."""

    def __init__(self, loader: Any) -> None:
        super().__init__(loader)
        self.local = LocalPlan(loader)
        self.spec: PoolSpec | None = None
        self.decided = False
        self.pool: WorkerPool | None = None
        self.transform_in_workers = False
        self.ragged = any(f.ragged for f in loader.record.fields.values())
        self.inflight: deque = deque()
        self.lock = threading.Lock()  # one thread submits and waits at a time

    def __iter__(self) -> Any:
        return self

    def __next__(self) -> Any:
        return self.next()

    # -- the pool -----------------------------------------------------------------------
    def _decide(self) -> PoolSpec | None:
        loader = self.loader
        opts = loader.options
        asked = not opts.workers_default or workers_are_set()
        digest, reason, by_value = examine(loader._datasets)
        if reason is not None:
            if asked:
                warnings.warn(
                    f"the loader's datasets are loaded in the calling process, not "
                    f"in {opts.workers} workers: {reason}",
                    RuntimeWarning,
                    stacklevel=_caller_level(),
                )
            return None
        assert digest is not None  # examine gives a digest or a reason
        transform, transform_digest = opts.batch_transform, None
        if transform is not None and not on_host(opts.device):
            # The transform is given the batch as delivered, on the device, so it runs
            # here after the copy: in the workers, each would hold a CUDA context of its
            # own (device memory) and send its tensors back through a pickle.
            transform = None
        if transform is not None:
            transform_digest, reason, transform_by_value = examine(transform)
            by_value = by_value or transform_by_value
            if reason is not None:
                # The transform stays here; the workers still make the batches.
                if asked:
                    warnings.warn(
                        f"batch_transform runs in the calling process: {reason}",
                        RuntimeWarning,
                        stacklevel=_caller_level(),
                    )
                transform = None
        self.transform_in_workers = transform is not None
        return PoolSpec(
            loader._datasets,
            dict(loader.record.fields),
            opts.batch_size,
            opts.workers,
            opts.prefetch,
            opts.check_values,
            transform,
            opts.output,
            None if opts.device is None else str(opts.device),
            digest,
            transform_digest,
            (opts.pad_to_multiple, opts.pad_bounds, opts.nested),
            by_value,
        )

    def _spec(self) -> PoolSpec | None:
        if not self.decided:
            with self.lock:
                if not self.decided:
                    self.spec = self._decide()
                    self.decided = True
        return self.spec

    def _with_pool(self, use: Callable[[WorkerPool], Any]) -> Any:
        """Under ``lock``: ``use(pool)`` with the pool held by this loader and its
        ``use_lock`` held. Its own pool, unless another loader took it over between
        passes, or this process is a fork of the one that started it; a broken one raises
        ``WorkerError`` until a reset. The lock is taken by a ``with`` (nothing can land
        between a C lock's ``__enter__`` and the body) or, for a pool ``acquire`` returns
        held, released by the ``try`` that follows its store with no call between."""
        pool = self.pool
        if pool is not None:
            with pool.use_lock:
                if pool.holder is not None and pool.holder() is self.loader:
                    if pool.broken is not None:
                        raise WorkerError(
                            f"{pool.broken} (reset() or load_state_dict() continues with "
                            "new workers)"
                        )
                    return use(pool)
        if self.spec is None:
            raise ValueError("the loader is closed")
        # Not ours: forgotten before another is taken (an interrupt inside ``acquire``
        # lets go of the lock of the pool it was taking: ``_pools._let_go``).
        self.pool = None
        self.pool = pool = acquire(self.spec, self.loader)
        try:
            return use(pool)
        finally:
            pool.use_lock.release()

    def started(self) -> WorkerPool | None:
        """The pool this plan uses, taken (or started) now; None when batches are made in
        this process (for tests and diagnostics)."""
        if self._spec() is None:
            return None
        with self.lock:
            return self._with_pool(lambda pool: pool)

    # -- batches --------------------------------------------------------------------------
    def _batch_no(self, claim: Any) -> int:
        return claim.start // self.loader.options.batch_size

    def _take(self, got: list) -> Any:
        """Under ``lock``: submit while slots are free, then the next batch in flight:
        its fields, its claim appended to ``got`` as it leaves flight (with no call
        between), so that the caller's ``try`` holds it from there. An interrupt while it
        waits (or while the batch is copied out) leaves the batch in flight (the next call
        waits for it again); a worker's death or a timeout gives back every batch in
        flight to the ledger (they are made again after a reset)."""
        return self._with_pool(lambda pool: self._take_from(pool, got))

    def _take_from(self, pool: WorkerPool, got: list) -> Any:
        loader = self.loader
        inflight = self.inflight
        while pool.can_submit():
            held: list = []  # the claim, handed over before any call (``Loader.claim``)
            try:
                if loader.claim(held) is None:
                    break
                claim = held[0]
                pool.submit(
                    self._batch_no(claim),
                    claim.ords,
                    claim.recs,
                    loader.rows_for(claim.size),
                    claim.pos0,  # the rows' positions for a transform's batch.meta
                    loader.positions(claim),
                    loader.context(),
                )
                inflight.append(claim)
            except BaseException:
                if held:
                    self._unsubmitted(pool, held[0])
                raise
        if not inflight:
            raise StopIteration
        claim = inflight[0]
        batch_no = self._batch_no(claim)
        t = perf_counter_ns()
        try:
            fields = pool.result(batch_no, loader.options.timeout, self._collator(claim))
        except BaseException as e:
            if batch_no not in pool.pending:
                # the pool is done with it (its own error, or an interrupt as it was handed
                # over): out of flight, to the caller, who passes it over or gives it back
                del inflight[0]
                got.append(claim)
            elif isinstance(e, WorkerError):  # a death, a timeout, a close
                led = loader._ledger
                for c in inflight:
                    led.release(c)
                inflight.clear()
                if pool.broken is not None:
                    discard(pool)
            raise  # else it landed in the wait: the batch stays in flight
        del inflight[0]  # no call between the result's return and the hand-over
        got.append(claim)
        # the wait for the workers (the collation out of the slot counted apart)
        clock.add("workers", perf_counter_ns() - t)
        for k, v in pool.last_times.items():  # the stages in the worker (``_stats``)
            clock.add(f"worker {k}", v)
        clock.add("rows", claim.size)
        return fields

    def _unsubmitted(self, pool: WorkerPool, claim: Any) -> None:
        """An interrupt or an error came as ``claim`` was submitted: in flight if its task
        left for a worker (the pool has it), else given back to the ledger."""
        inflight = self.inflight
        if self._batch_no(claim) in pool.pending:
            if not inflight or inflight[-1] is not claim:
                inflight.append(claim)
        else:
            self.loader._ledger.release(claim)

    def _collator(self, claim: Any) -> Any:
        """How a batch of ragged fields is collated out of its slot (as in process: the
        same function of its examples and the options), or None for fixed fields only
        and for the results of a batch transform made in the workers."""
        if not self.ragged or self.transform_in_workers:
            return None
        loader = self.loader
        opts, size, rows = loader.options, claim.size, loader.rows_for(claim.size)

        def collate(fields: dict[str, Any]) -> Any:
            t = perf_counter_ns()
            batch = {n: a if isinstance(a, Ragged) else a[:rows] for n, a in fields.items()}
            out = _collate.collate(
                loader.record.fields,
                batch,
                size,
                rows,
                opts.pad_to_multiple,
                opts.pad_bounds,
                opts.nested,
            )
            if opts.nested:  # ragged columns stay ragged: out of the slot, which is reused
                fields_out, lengths = out
                out = ({n: _owned(a) for n, a in fields_out.items()}, lengths)
            clock.add("collate", perf_counter_ns() - t)
            clock.add("workers", t - perf_counter_ns())  # not the workers' time
            return out

        return collate

    def next(self, raw: bool = False, then: Callable[[Any], Any] | None = None) -> Any:
        try:
            return self._next(raw, then)
        except StopIteration:
            self._held = None  # the pass ended: a dropped loader is freed (``Plan``)
            raise

    def _next(self, raw: bool, then: Callable[[Any], Any] | None) -> Any:
        """The next batch (``raw``: before ``Loader.finish``), or ``then(batch)``. The
        claim is held by one ``try`` from the moment it leaves flight: the stats, ``then``
        and the tally's close come before the ledger records the delivery, which is the
        last step, with no call after it but the return; an interrupt anywhere before the
        return gives the batch back (``Ledger.give_back``, the stats taken back), an error
        passes it over."""
        if self._spec() is None:
            return self.local.next()
        loader = self.loader
        led, stats = loader._ledger, loader._stats
        t0 = stats.start()
        counted: list[int] = []  # the rows, once the stats count the batch
        got: list = []  # the claim, once out of flight
        acc = clock.tally()
        try:
            try:
                with self.lock:
                    fields = self._take(got)
                claim = got[0]
                out = self._finish(claim, fields, raw)
                if then is not None:
                    out = then(out)
                stats.batch(t0, acc, acc.pop("rows", 0), counted)
            finally:
                clock.untally()
            led.deliver(claim, claim.size)
            return out
        except Exception:
            if got:  # the batch's error reached the caller: passed over
                led.deliver(got[0], None)
            raise
        except BaseException:
            if got and led.give_back(got[0]):
                stats.undo(counted)
            raise

    def _finish(self, claim: Any, fields: Any, raw: bool) -> Any:
        """The batch of ``claim`` from the fields a worker made."""
        loader = self.loader
        if self.transform_in_workers and not raw:
            return fields  # the transform's result, made in a worker
        rows = loader.rows_for(claim.size)
        lengths = None
        if self.ragged:  # collated out of the slot (``_collator``)
            fields, lengths = fields
        out = {n: a if isinstance(a, Ragged) else a[:rows] for n, a in fields.items()}
        if loader.options.output == "torch":
            t = perf_counter_ns()
            out = to_torch(out, loader.options.device)
            clock.add("copy", perf_counter_ns() - t)
        c = claim
        batch = Batch.with_meta(out, c.size, rows, c.pos0, c.ords, c.recs, lengths=lengths)
        return batch if raw else loader.finish(batch)

    def next_into(
        self, out: Mapping[str, np.ndarray], meta: Mapping[str, np.ndarray], padded: bool
    ) -> int:
        if self._spec() is None:
            return self.local.next_into(out, meta, padded)
        if self.transform_in_workers:
            if self.inflight:
                raise ValueError(
                    "next_into fills arrays with the records' fields, and this "
                    "loader's workers have made batches ahead through its "
                    "batch_transform: iterate it, or use next_into from the "
                    "start of a pass"
                )
            return self.local.next_into(out, meta, padded)

        def copy(batch: Any) -> int:  # into the caller's arrays, before the delivery
            rows, size = len(batch), batch._size
            for n in self.loader.record.fields:
                a = batch[n]
                out[n][:rows] = a.cpu().numpy() if hasattr(a, "cpu") else a
            _into.fill_meta(meta, size, rows, batch._pos0, batch._ordinals, batch._records)
            return rows if padded else size

        try:  # no call after the delivery (an int() of it would lose the batch)
            n: int = self.next(raw=True, then=copy)
        except StopIteration:
            return 0
        return n

    def drain(self) -> None:
        """Discard batches the workers are making ahead (before a reset or a resume);
        after a worker died, let the next batch start new workers."""
        if self.pool is None:
            self.inflight.clear()
            return
        with self.lock:
            pool = self.pool
            if pool is not None:
                with pool.use_lock:
                    if (
                        pool.holder is not None
                        and pool.holder() is self.loader
                        and pool.broken is None
                    ):
                        pool.drain()  # a worker that dies meanwhile leaves it broken
                if pool.broken is not None:
                    discard(pool)
                    self.pool = None
            self.inflight.clear()

    def shutdown(self) -> None:
        """Stop the pool this loader holds (the loader closes). If another thread is
        waiting for a batch, the pool is stopped under it, at once: that thread's wait
        ends with a ``WorkerError`` saying the loader was closed."""
        if not self.lock.acquire(timeout=0.05):
            pool = self.pool
            self.spec, self.decided = None, True
            if pool is not None and pool.holder is not None and pool.holder() is self.loader:
                discard(pool)  # stops its workers: the waiting thread sees "closed"
            self.lock.acquire()
        try:
            pool, self.pool = self.pool, None
            self.spec, self.decided = None, True
            self.inflight.clear()
        finally:
            self.lock.release()
        if pool is not None and not pool.closed:
            hand_back(pool, self.loader)


def _caller_level() -> int:
    """The ``stacklevel`` of the first frame outside feedline's loader (a warning points
    at the caller's line, whichever path of the loader asked)."""
    here = os.path.dirname(__file__)
    frame: FrameType | None = sys._getframe(1)
    level = 1
    while frame is not None and os.path.dirname(frame.f_code.co_filename) == here:
        frame, level = frame.f_back, level + 1
    return level


def _owned(col: Any) -> Any:
    """A ragged column with buffers of its own (not views of a worker's slot)."""
    if not isinstance(col, Ragged):
        return col
    return Ragged(np.array(col.values), col.offsets.copy(), col.shapes.copy(), col.template)
