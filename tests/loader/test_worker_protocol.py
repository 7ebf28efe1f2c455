"""Ctrl-C inside the worker protocol itself loses, repeats, leaks and hangs nothing: the
task's send, the result's read, the telling of a grown slot, and the lending of a pool.

Each test injects ``KeyboardInterrupt`` through ``sys.setprofile`` at the return of a C
call (the call did its work, and its value is dropped, as where CPython checks for a
signal) made, at any depth, inside one function of the pool: the OS-level write of a
task inside ``WorkerPool.submit``, the unpickling of a message inside
``WorkerPool._receive``, a write inside ``WorkerPool._grow``, the taking of a lock inside
``_pools``. The hook is the loader thread's own (as a signal reaches only the main thread).
"""

from __future__ import annotations

import contextlib
import gc
import sys
import uuid
from collections import Counter
from typing import Any

import numpy as np

import feedline as fl
from feedline.loader import _pools, _workers

from ._rows import in_thread
from .test_varying_workers import pics
from .test_worker_interrupts import WANT, N, check_pass_and_next, interrupted_pass, loader_of
from .test_workers import ItemSource, Rows

_WRITES = ("write", "send", "sendall", "sendmsg")
# calls not of the protocol: a segment's registration with the resource tracker (a write)
_NOT_FROM = ("resource_tracker.py", "shared_memory.py")


class after_c_call:
    """A profile hook: ``KeyboardInterrupt`` at the return of the C functions named
    ``names`` (None: any) called inside ``module``'s function ``within`` (``depth``
    frames down at most; 1: by ``within`` itself), at those calls numbered ``at`` (from
    1); ``first=True``: at the first such call of each run of ``within``."""

    def __init__(self, names: Any, module: Any, within: str, at=(), first=False, depth=12) -> None:
        self.names, self.path, self.within = names, module.__file__, within
        self.at, self.first, self.depth, self.n, self.fired = at, first, depth, 0, 0
        self._runs: list = []  # the frames of ``within`` that already had their interrupt

    def _run(self, frame) -> Any:
        for _ in range(self.depth):
            if frame is None:
                return None
            code = frame.f_code
            if code.co_name == self.within and code.co_filename == self.path:
                return frame
            frame = frame.f_back
        return None

    def __call__(self, frame, event, arg) -> None:
        if event != "c_return":
            return
        if self.names is not None and getattr(arg, "__name__", None) not in self.names:
            return
        if frame.f_code.co_filename.endswith(_NOT_FROM):
            return
        run = self._run(frame)
        if run is None:
            return
        self.n += 1
        if self.first:
            if any(r is run for r in self._runs):
                return
            self._runs.append(run)
        elif self.n not in self.at:
            return
        self.fired += 1
        raise KeyboardInterrupt

    def _rearm(self, frame, event, arg) -> None:
        """A trace hook: CPython drops a profile hook that raised; set it again."""
        if sys.getprofile() is None:
            sys.setprofile(self)

    def __enter__(self) -> after_c_call:
        sys.settrace(self._rearm)
        sys.setprofile(self)
        return self

    def __exit__(self, *exc: Any) -> None:
        sys.setprofile(None)
        sys.settrace(None)


# -- 1. the task's send ------------------------------------------------------------------


def test_an_interrupt_after_the_task_is_written_gives_no_batch_another_ones_rows():
    # The bytes of the task reached the worker: the batch is the worker's (pending), its
    # slot not free, and no remade batch may take that task's result.
    def run():
        with loader_of() as loader:
            with after_c_call(_WRITES, _workers, "submit", at=(2, 9, 17)) as hook:
                interrupts = check_pass_and_next(loader)
            assert hook.fired == 3
            return interrupts

    assert in_thread(run, timeout=60) == 3


def test_an_interrupt_after_every_other_task_write_loses_and_repeats_nothing():
    def run():
        with loader_of() as loader:
            with after_c_call(_WRITES, _workers, "submit", at=range(1, 200, 2)) as hook:
                seen, interrupts, errors = interrupted_pass(loader)
            assert hook.fired >= 15 and interrupts == hook.fired and not errors
            assert seen == WANT
            assert interrupted_pass(loader)[0] == WANT  # the next pass
            pool = loader._pool
            assert len(pool.free) == len(pool.slots)

    in_thread(run, timeout=90)


# -- 2. the result's read ----------------------------------------------------------------


def test_an_interrupt_after_a_result_is_read_loses_no_result():
    # The message was read out of the pipe and unpickled, then dropped: next() must not
    # wait for it forever.
    def run():
        hook = after_c_call(("loads", "read", "recv"), _workers, "_receive", at=(2, 9, 17))
        with loader_of() as loader, hook:
            return check_pass_and_next(loader)

    in_thread(run, timeout=40)


# -- 3. a grown slot told to the workers ---------------------------------------------------


def test_an_interrupt_while_a_grown_slot_is_told_leaves_no_worker_in_the_old_one():
    # After the first worker was told of each grown slot: the other must be told too
    # before it makes a batch there (it wrote into the old segment: empty rows).
    ds = pics(160)
    with fl.Loader(ds, 32, seed=1, workers=0) as reference:  # each pass's examples
        passes = [
            {int(r): j for b in reference for r, j in zip(b.label, b.jpeg, strict=True)}
            for _ in range(2)
        ]

    def pass_checked(loader, jpegs: dict) -> tuple[Counter, int]:
        seen, interrupts = Counter(), 0
        it = iter(loader)
        while True:
            try:
                b = next(it)
            except KeyboardInterrupt:
                interrupts += 1
                continue
            except StopIteration:
                return seen, interrupts
            recs = b.meta.record_indices[: b.meta.size].tolist()
            assert b.label[: b.meta.size].tolist() == recs  # the rows of its own slot
            assert list(b.jpeg[: b.meta.size]) == [jpegs[r] for r in recs]
            seen.update(recs)

    def run():
        with fl.Loader(ds, 32, seed=1, workers=2, prefetch=2) as loader:
            with after_c_call(_WRITES, _workers, "_grow", first=True) as hook:
                seen, interrupts = pass_checked(loader, passes[0])
                again, more = pass_checked(loader, passes[1])
            assert hook.fired >= 2 and interrupts + more == hook.fired
            want = Counter(range(160))
            assert seen == want and again == want
            pool = loader._pool
            assert len(pool.free) == len(pool.slots)

    in_thread(run, timeout=90)


# -- 4. a pool lent or started ---------------------------------------------------------------


def own_dataset() -> fl.Dataset:
    """``dataset()``, with a key of its own: no other test's pool can be lent to it."""
    source = ItemSource(N)
    source.tag = uuid.uuid4().hex  # type: ignore[attr-defined]
    return fl.Dataset(Rows, source)


def pools_of(loader: fl.Loader) -> list[_workers.WorkerPool]:
    """The live pools under ``loader``'s key (one of its own: ``own_dataset``)."""
    key = loader._plan._spec().key
    return [p for p in _pools.live_pools() if p.key == key]


def pool_lock_taken(at=(1,)) -> after_c_call:
    return after_c_call(("acquire",), _pools, "_lend", at=at)


def test_an_interrupt_as_a_pool_is_lent_orphans_no_pool():
    # The next loader over the same dataset takes over the pool of a finished pass: an
    # interrupt right after it took the pool's lock must not keep the lock (every later
    # use of that pool, the closing of its first loader too, would wait forever).
    ds = own_dataset()

    def run():
        first = loader_of(ds)
        assert sum(interrupted_pass(first)[0].values()) == 240
        second = loader_of(ds)
        with pool_lock_taken():
            try:
                next(iter(second))
                raised = False
            except KeyboardInterrupt:
                raised = True
        assert raised
        seen, interrupts, _ = interrupted_pass(second)
        assert interrupts == 0 and sum(seen.values()) == 240
        mine = pools_of(second)
        second.close()
        first.close()
        return [p for p in mine if not p.closed]

    assert in_thread(run, timeout=40) == []


def test_an_interrupt_in_the_drain_of_a_lent_pool_orphans_no_pool():
    # The pool's last holder was collected mid-pass: the next loader waits out its batches
    # in flight (drain); an interrupt there must leave the pool to that loader, not held.
    ds = own_dataset()

    def run():
        first = loader_of(ds)
        it = iter(first)
        next(it)  # batches in flight
        del it, first
        gc.collect()
        second = loader_of(ds)
        hook = after_c_call(None, _workers, "drain", at=(1,))
        with hook, contextlib.suppress(KeyboardInterrupt):
            next(iter(second))
        assert hook.fired == 1
        seen, interrupts, _ = interrupted_pass(second)
        assert interrupts == 0 and sum(seen.values()) == 240
        mine = pools_of(second)
        assert len(mine) == 1
        second.close()
        return [p for p in mine if not p.closed]

    assert in_thread(run, timeout=40) == []


def test_an_interrupt_as_a_new_pool_is_registered_orphans_no_pool():
    ds = own_dataset()

    def run():
        loader = loader_of(ds)
        hook = after_c_call(("append",), _pools, "acquire", at=(1,), depth=1)
        with hook, contextlib.suppress(KeyboardInterrupt):
            next(iter(loader))
        assert hook.fired == 1
        seen, interrupts, _ = interrupted_pass(loader)
        assert interrupts == 0 and sum(seen.values()) == 240
        mine = pools_of(loader)
        loader.close()
        return [p for p in mine if not p.closed]

    assert in_thread(run, timeout=40) == []


def test_frames_make_the_message_again_whatever_its_size():
    import socket
    from multiprocessing.connection import Connection

    from feedline.loader._wire import frame_limit, message, received

    a, b = socket.socketpair()
    conn = Connection(b.detach())
    try:
        limit = frame_limit(a)
        big = ("task", np.arange(3 * limit // 8))
        sent = [message(1, ("slot", 0), limit), message(2, big, limit)]
        assert len(sent[0]) == 1 and len(sent[1]) > 2
        assert all(len(f) <= limit for fs in sent for f in fs)
        # a message cut short (an interrupt between its frames), then one sent again
        a.sendall(sent[1][0] + sent[1][1] + sent[0][0] + sent[0][0])
        a.sendall(b"".join(sent[1]))
        got = received(conn)
        assert next(got) == (1, ("slot", 0))
        assert next(got) == (1, ("slot", 0))
        token, msg = next(got)
        assert token == 2 and np.array_equal(msg[1], big[1])
    finally:
        a.close()
        conn.close()
