"""Ctrl-C in the worker-process path (workers > 0) loses, repeats, leaks and hangs nothing.

CPython raises a signal handler's ``KeyboardInterrupt`` where it checks for signals: after
a call returns (the call's value is then dropped) and at a Python function's entry, never
at a plain store, a ``del x[0]``, an attribute set, or between ``__enter__`` of a C lock in
a ``with`` and its body. Each test injects the interrupt right after one call of the
worker plan's bookkeeping returns (the call did its work, as a real interrupt would find
it), catches it and asks for the next batch, as a training loop that saves and goes on
would. The pass must deliver every ``(source, record)`` pair exactly once (each batch's
rows are checked against its records too: no batch is read out of another's slot), the
next pass too (a lost claim leaves the ledger unfinished: later passes yield nothing), no
shared-memory slot may stay taken, and nothing may hang (each pass runs on a thread that
must finish in time).
"""

from __future__ import annotations

import sys
import threading
import types
from collections import Counter, deque
from typing import Any

import numpy as np
import pytest

import feedline as fl
from feedline._base import clock as real_clock
from feedline.loader import _slots, _worker_plan, _workers

from ._rows import in_thread
from .test_workers import ItemSource, Rows

N, B = 240, 8  # 30 batches
WANT = Counter((0, i) for i in range(N))


def dataset(n: int = N) -> fl.Dataset:
    return fl.Dataset(Rows, ItemSource(n))


def fails_on_5(ex, rng):
    """A map whose batch with record 5 is an error (importable: it runs in the workers)."""
    if int(ex["y"]) == 5:
        raise ValueError("record 5 is broken")
    return ex


def loader_of(ds: fl.Dataset | None = None) -> fl.Loader:
    loader = fl.Loader(dataset() if ds is None else ds, B, seed=1, workers=2, prefetch=2)
    assert isinstance(loader._plan, _worker_plan.WorkerPlan)
    return loader


def batch_pairs(batch) -> list[tuple[int, int]]:
    """The batch's ``(source, record)`` pairs, its rows checked against its records."""
    m = batch.meta
    recs = m.record_indices[: m.size]
    np.testing.assert_array_equal(batch.y[: m.size], recs)  # the rows of its own slot
    return list(zip(m.source_ordinals[: m.size].tolist(), recs.tolist(), strict=True))


def interrupted_pass(loader, how: str = "next") -> tuple[Counter, int, list]:
    """One pass of ``next`` (or ``next_into``) calls, going on after each
    ``KeyboardInterrupt``: the pairs, the interrupts, and the other errors seen (each a
    batch passed over)."""
    out = {"x": np.empty((B, 3), np.float32), "y": np.empty(B, np.int64)}
    meta = {"record_indices": np.empty(B, np.int64), "source_ordinals": np.empty(B, np.int64)}
    seen: Counter = Counter()
    interrupts, errors = 0, []
    it = iter(loader)  # the next pass, once one ended
    while True:
        try:
            if how == "next_into":
                n = loader.next_into(out, meta=meta)
                if n == 0:
                    return seen, interrupts, errors
                np.testing.assert_array_equal(out["y"][:n], meta["record_indices"][:n])
                seen.update(zip(meta["source_ordinals"][:n].tolist(), out["y"][:n].tolist()))
            else:
                seen.update(batch_pairs(next(it)))
        except KeyboardInterrupt:
            interrupts += 1
        except StopIteration:
            return seen, interrupts, errors
        except Exception as e:  # a batch's own error: passed over
            errors.append(e)


def clean_pass(loader, how: str = "next") -> Counter:
    seen, interrupts, _ = interrupted_pass(loader, how)
    assert interrupts == 0
    return seen


def check_pass_and_next(loader, how: str = "next") -> int:
    """The interrupted pass and the next, clean one each deliver every pair once; no
    slot stays taken. Returns the interrupts seen."""
    seen, interrupts, errors = interrupted_pass(loader, how)
    missing, extra = WANT - seen, seen - WANT
    assert not missing and not extra, (
        f"lost {sorted(missing.elements())[:8]}, repeated {sorted(extra.elements())[:8]}, "
        f"errors {errors[:2]}"
    )
    assert loader.state_dict()["ended"]
    again = clean_pass(loader, how)
    assert again == WANT, f"the next pass delivered {sum(again.values())} of {N} pairs"
    pool = loader._pool
    assert pool is not None and len(pool.free) == len(pool.slots)  # no slot leaked
    return interrupts


def from_module(real: Any, module: Any, at: tuple[int, ...], skip: tuple[str, ...] = ()) -> Any:
    """``real``, raising ``KeyboardInterrupt`` after its calls numbered ``at`` (from 1),
    counting only calls from ``module``'s code (not from functions named in ``skip``)."""
    calls = {"n": 0}
    path = module.__file__

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        out = real(*args, **kwargs)
        code = sys._getframe(1).f_code
        if code.co_filename == path and code.co_name not in skip:
            calls["n"] += 1
            if calls["n"] in at:
                raise KeyboardInterrupt
        return out

    wrapped.calls = calls  # type: ignore[attr-defined]
    return wrapped


class RaisingDeque(deque):
    """A deque whose ``method`` raises ``KeyboardInterrupt`` after it did its work, at its
    calls numbered ``at`` for which ``when()`` is true."""

    def __init__(self, items, method: str, at: tuple[int, ...], when=lambda: True) -> None:
        super().__init__(items)
        self.method, self.at, self.when, self.n = method, at, when, 0

    def _after(self, method: str) -> None:
        if method == self.method and self.when():
            self.n += 1
            if self.n in self.at:
                raise KeyboardInterrupt

    def popleft(self):
        out = super().popleft()
        self._after("popleft")
        return out

    def append(self, x) -> None:
        super().append(x)
        self._after("append")


def called_from(module: Any) -> Any:
    path = module.__file__
    return lambda: sys._getframe(3).f_code.co_filename == path


class InterruptibleLock:
    """A lock whose ``acquire()`` called from the worker plan raises ``KeyboardInterrupt``
    after taking the lock, at those calls numbered ``at`` (a signal checked as the call
    returns); ``with`` takes it as a C lock does: nothing can land between its
    ``__enter__`` and the body."""

    def __init__(self, at: tuple[int, ...]) -> None:
        self._lock = threading.Lock()
        self.at, self.n = at, 0

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        got = self._lock.acquire(blocking, timeout)
        if got and sys._getframe(1).f_code.co_filename == _worker_plan.__file__:
            self.n += 1
            if self.n in self.at:
                raise KeyboardInterrupt
        return got

    def release(self) -> None:
        self._lock.release()

    def __enter__(self) -> bool:
        return self._lock.acquire()

    def __exit__(self, *exc: Any) -> None:
        self._lock.release()


def started(loader) -> _workers.WorkerPool:
    pool = loader._workers_pool()
    assert pool is not None
    return pool


def clock_with(**fns: Any) -> types.SimpleNamespace:
    """The worker plan's view of ``clock``, some of its functions replaced."""
    names = {n: getattr(real_clock, n) for n in ("add", "tally", "untally", "perf_counter_ns")}
    return types.SimpleNamespace(**{**names, **fns})


# -- (4) WorkerPool.result forgets the batch before it is returned ---------------------------


def test_an_interrupt_after_result_frees_the_batchs_slot_loses_nothing():
    # The batch was forgotten by the pool (its bookkeeping popped, its slot freed) and the
    # interrupt lands before result returns it: the pool no longer makes it, so the batch
    # must be made again, not waited for (a spurious WorkerError), and its slot not kept.
    def run():
        with loader_of() as loader:
            pool = started(loader)
            pool.free = RaisingDeque(pool.free, "append", (3, 11, 20), called_from(_workers))
            interrupts = check_pass_and_next(loader)
            assert pool.free.n >= 20
            return interrupts

    assert in_thread(run) == 3


def test_an_interrupt_while_the_batch_is_read_out_of_its_slot_loses_nothing(monkeypatch):
    # Layout.read copies the batch out of its slot: an interrupt as it returns.
    monkeypatch.setattr(
        _slots.Layout, "read", from_module(_slots.Layout.read, _workers, (2, 9, 17))
    )

    def run():
        with loader_of() as loader:
            return check_pass_and_next(loader)

    assert in_thread(run) == 3


# -- (5) the pool's use_lock taken outside the try that releases it ----------------------------


def test_an_interrupt_as_the_pools_lock_is_taken_hangs_nothing():
    def run():
        with loader_of() as loader:
            pool = started(loader)
            pool.use_lock = InterruptibleLock((2, 7, 15))  # type: ignore[assignment]
            return check_pass_and_next(loader)

    in_thread(run, timeout=40)


def test_an_interrupt_while_the_pool_is_checked_under_its_lock_hangs_nothing():
    # The holder's check (a call) once the lock is held: the lock must be released.
    def run():
        with loader_of() as loader:
            pool = started(loader)
            pool.holder = from_module(pool.holder, _worker_plan, (2, 7, 15), ("drain", "shutdown"))
            return check_pass_and_next(loader)

    assert in_thread(run, timeout=40) == 3


# -- (6) the claim taken out of flight before the batch is delivered ----------------------------


@pytest.mark.parametrize("how", ["next", "next_into"])
def test_an_interrupt_after_the_claim_leaves_flight_loses_nothing(how):
    def run():
        with loader_of() as loader:
            started(loader)
            plan = loader._plan
            plan.inflight = RaisingDeque(plan.inflight, "popleft", (2, 9, 17))
            return check_pass_and_next(loader, how)

    in_thread(run)


def test_an_interrupt_in_the_stats_of_a_batch_out_of_flight_loses_nothing(monkeypatch):
    # After the batch left flight its waiting time is counted (calls): an interrupt there.
    real_add = real_clock.add
    calls = {"n": 0}

    def add(stage: str, ns: int) -> None:
        real_add(stage, ns)
        if stage == "workers":
            calls["n"] += 1
            if calls["n"] in (2, 9, 17):
                raise KeyboardInterrupt

    monkeypatch.setattr(_worker_plan, "clock", clock_with(add=add))

    def run():
        with loader_of() as loader:
            return check_pass_and_next(loader)

    assert in_thread(run) == 3


def test_an_interrupt_after_a_batchs_error_leaves_flight_loses_nothing():
    # A map's error is the batch's: passed over. An interrupt as its claim leaves flight
    # (the popleft in the error's handler) must not lose the claim.
    ds = dataset().map(fails_on_5, seed=0)
    with loader_of(ds) as reference:  # each pass passes over the batch with record 5
        want, want_next = interrupted_pass(reference)[0], interrupted_pass(reference)[0]
    assert sum(want.values()) == sum(want_next.values()) == N - B

    def run():
        with loader_of(ds) as loader:
            started(loader)
            plan = loader._plan
            during_error = lambda: sys.exc_info()[0] is ValueError  # noqa: E731
            plan.inflight = RaisingDeque(plan.inflight, "popleft", (1,), during_error)
            seen, interrupts, errors = interrupted_pass(loader)
            assert seen == want and len(errors) + interrupts >= 1
            assert clean_pass(loader) == want_next  # a lost claim: nothing

    in_thread(run)


def test_an_interrupt_after_next_into_filled_the_arrays_loses_nothing(monkeypatch):
    # The delivery was recorded and the arrays filled; what follows must be no call (here
    # the int() of the count) or must give the batch back.
    monkeypatch.setattr(
        _worker_plan, "int", from_module(int, _worker_plan, (2, 9, 17)), raising=False
    )

    def run():
        with loader_of() as loader:
            return check_pass_and_next(loader, "next_into")

    in_thread(run)


# -- (7) the tally closed after the delivery was recorded ----------------------------------------


def test_an_interrupt_as_the_tally_closes_loses_nothing(monkeypatch):
    untally = from_module(real_clock.untally, _worker_plan, (2, 9, 17))
    monkeypatch.setattr(_worker_plan, "clock", clock_with(untally=untally))

    def run():
        with loader_of() as loader:
            interrupts = check_pass_and_next(loader)
            stats = loader.stats()  # each batch counted once: the given-back ones taken back
            assert (stats.batches, stats.rows) == (60, 2 * N)
            return interrupts

    assert in_thread(run) == 3


# -- the submitting loop: a claim between the ledger and the pool ---------------------------------


@pytest.mark.parametrize("at", [(1,), (2, 9, 17)])
def test_an_interrupt_as_a_claim_is_taken_for_the_workers_loses_nothing(at):
    def run():
        with loader_of() as loader:
            loader.claim = from_module(loader.claim, _worker_plan, at)  # type: ignore[method-assign]
            return check_pass_and_next(loader)

    assert in_thread(run) == len(at)


@pytest.mark.parametrize("at", [(1,), (2, 9, 17)])
def test_an_interrupt_after_a_batch_is_submitted_loses_and_leaks_nothing(at):
    # The task left for a worker: the claim is in flight, not given back (it would be made
    # twice, and the first task's slot kept).
    def run():
        with loader_of() as loader:
            pool = started(loader)
            pool.submit = from_module(pool.submit, _worker_plan, at)  # type: ignore[method-assign]
            return check_pass_and_next(loader)

    assert in_thread(run) == len(at)


def test_an_interrupt_after_a_submitted_claim_is_put_in_flight_loses_nothing():
    def run():
        with loader_of() as loader:
            started(loader)
            plan = loader._plan
            plan.inflight = RaisingDeque(plan.inflight, "append", (2, 9, 17))
            return check_pass_and_next(loader)

    assert in_thread(run) == 3


def test_an_interrupt_as_a_slot_is_taken_for_a_batch_leaks_no_slot():
    # submit takes a free slot (a call) before the try that puts it back.
    def run():
        with loader_of() as loader:
            pool = started(loader)
            pool.free = RaisingDeque(pool.free, "popleft", (2, 9, 17), called_from(_workers))
            return check_pass_and_next(loader)

    in_thread(run)


# -- every point of one batch -------------------------------------------------------------------


def settle(pool: _workers.WorkerPool) -> None:
    """Wait until every batch in flight is made (the swept call then never waits: its
    points are the same from run to run)."""
    while len(pool.done) < len(pool.pending):
        pool._receive()


def sweep_run(loader, k: int | None, how: str) -> tuple[Counter, Counter, Any]:
    """From the start of pass 0: two batches, a third interrupted at point ``k`` (None:
    counted), the rest of the pass and the next pass. Returns their pairs and the probe."""
    from .test_interrupt_sweep import interrupt_at

    loader.reset()
    it = iter(loader)
    out = {"x": np.empty((B, 3), np.float32), "y": np.empty(B, np.int64)}
    meta = {"record_indices": np.empty(B, np.int64), "source_ordinals": np.empty(B, np.int64)}

    def call() -> Any:  # the loader's call alone (the probe sweeps its points only)
        if how == "next":
            try:
                return next(it)
            except StopIteration:
                return None
        return loader.next_into(out, meta=meta)

    def pairs_of(got: Any) -> list | None:
        if how == "next":
            return None if got is None else batch_pairs(got)
        n = got
        np.testing.assert_array_equal(out["y"][:n], meta["record_indices"][:n])
        return None if n == 0 else list(zip([0] * n, out["y"][:n].tolist(), strict=True))

    def one() -> list | None:
        return pairs_of(call())

    first: Counter = Counter()
    for _ in range(2):
        first.update(one())
    settle(loader._pool)
    interrupted = got = object()
    with interrupt_at(k) as probe:
        try:
            got = call()
        except KeyboardInterrupt:
            assert probe.fired, "a KeyboardInterrupt the sweep did not raise"
            got = interrupted
    if got is not interrupted and (p := pairs_of(got)) is not None:
        first.update(p)
    while (batch := one()) is not None:
        first.update(batch)
    second: Counter = Counter()
    it = iter(loader)
    while (batch := one()) is not None:
        second.update(batch)
    return first, second, probe


@pytest.mark.parametrize("how", ["next", "next_into"])
def test_an_interrupt_at_any_point_of_a_workers_batch_loses_and_repeats_nothing(how):
    n = 48  # 6 batches a pass
    want = Counter((0, i) for i in range(n))

    def sweep():
        with fl.Loader(dataset(n), B, seed=1, workers=2, prefetch=2) as loader:
            _, _, probe = sweep_run(loader, None, how)
            points = probe.points
            assert points > 20  # the probe saw the batch's calls
            bad, fired = [], 0
            for k in range(1, points + 1):
                first, second, probe = sweep_run(loader, k, how)
                fired += probe.fired
                # a run that waited less for the workers has fewer points (the wait's
                # polls): a point past its own count is not one of its points
                missed = not probe.fired and probe.points >= k
                if missed or first != want or second != want:
                    lost = sorted((want - first).elements())[:4]
                    extra = sorted((first - want).elements())[:4]
                    bad.append(
                        f"k={k} fired={probe.fired}: lost {lost} repeated {extra}, "
                        f"next pass {sum(second.values())}"
                    )
            pool = loader._pool
            settle(pool)
            assert len(pool.free) + len(pool.pending) == len(pool.slots)  # no slot leaked
            assert fired > 20, f"only {fired} of {points} points were reached"
            return points, bad

    points, bad = in_thread(sweep, timeout=120)
    assert not bad, f"{len(bad)} of {points} interrupt points lose or repeat: {bad[:6]}"
