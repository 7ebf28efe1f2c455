"""The loader's ledger of batches: its only mutable state, every change under one lock.

A pass is a run of batch numbers ``0 .. steps`` (of this loader's share: with a share
``(w, k)`` of the batches, number ``i`` is the pass's batch ``i * k + w``). A caller
*claims* a number, makes the batch and then either *delivers* it (it reached the caller,
or its error did: the batch is passed over) or *releases* it (an interrupt, a
``KeyboardInterrupt`` or ``SystemExit`` while it was made or waited for: the caller did
not get it, so the next claim makes it again). Every claim carries the pass's
*generation*: a reset or a new pass starts a new generation, and what a claim of an
older one reports afterwards changes nothing.

An interrupt can land after any call returns, so a claim is taken and recorded with no
call after the change (``take_number``), and whoever claims holds the claim inside one
``try`` that gives it back (``give_back``) on an interrupt: even after the delivery was
recorded, if the batch had not yet been returned (the lock's release is a call).

What a state records follows from this: the batches delivered without a gap
(``delivered``) and those delivered past the gap (``ahead``); a restore makes exactly
the others. The end of a pass is found and recorded under the same lock as the claim
that found it, so a thread can never end the pass another thread just started.
"""

from __future__ import annotations

import bisect
import concurrent.futures.thread  # noqa: F401  (its fork hook is registered before ours)
import os
import threading
import weakref
from typing import Any, NamedTuple

# The live ledgers, whose locks a fork takes first (``_before_fork``).
_LEDGERS: weakref.WeakSet[Ledger] = weakref.WeakSet()
_HELD: list[threading.Lock] = []  # the locks taken for the fork in progress


class Claim(NamedTuple):
    """A claimed batch: its number in the share, its generation, and the positions
    ``start .. stop`` of the pass's order with their sources and records. (A named tuple:
    a frozen dataclass cost half a microsecond a batch to make.) Under length bucketing
    the rows are positions ``pos`` (``stop - start`` of them) of the batch's group."""

    gen: int
    index: int  # type: ignore[assignment]  # shadows tuple.index, which no one calls
    start: int
    stop: int
    ords: Any
    recs: Any
    pos: Any = None

    @property
    def pos0(self) -> Any:
        """The rows' positions for a batch's metadata: the first (consecutive rows), or
        the array of them (bucketing)."""
        return self.start if self.pos is None else self.pos

    @property
    def size(self) -> int:
        return self.stop - self.start


class Ledger:
    """Which batches of the current pass were claimed, delivered or given back."""

    def __init__(self, seed: int | None, steps: int) -> None:
        self.lock = threading.Lock()
        _LEDGERS.add(self)
        self.gen = 0
        self.seed = seed
        self.epoch = 0
        self.base = 0  # positions of the pass consumed before the dealing (elastic resume)
        self.steps = steps  # batches in the pass, all shares together
        self.share = (0, 1)
        self.next = 0  # the next number never claimed in this pass
        self.delivered = 0  # numbers below this were delivered
        self.ahead: set[int] = set()  # numbers delivered past ``delivered``
        self.redo: list[int] = []  # numbers given back, to be made again (sorted)
        self.ended = False  # nothing is left to claim (some claims may be out)
        self.last_rows = 0
        self.closed = False

    # -- under the lock (the caller holds ``lock``) --------------------------------------
    @property
    def share_steps(self) -> int:
        w, k = self.share
        return max(0, -(-(self.steps - w) // k))

    def take_number(self) -> int | None:
        """The next number to make (a given-back one first), or None at the end of the
        pass, which is then recorded as ended (in this same lock acquisition)."""
        if self.closed:
            raise ValueError("the loader is closed")
        redo = self.redo
        if redo:  # no call after the change: an interrupt would lose the number
            i = redo[0]
            del redo[0]
            return i
        while self.next < self.delivered or self.next in self.ahead:
            self.next += 1  # delivered before a restore
        w, k = self.share
        if self.next >= -(-(self.steps - w) // k):  # this share's batches (share_steps)
            self.ended = True
            self.last_rows = 0
            return None
        self.next += 1
        return self.next - 1

    def untake(self, index: int) -> None:
        """Give back a number whose positions could not be looked up (nothing claimed)."""
        bisect.insort(self.redo, index)
        self.ended = False

    def begin(
        self,
        epoch: int,
        base: int,
        steps: int,
        seed: int | None,
        delivered: int = 0,
        ahead: set[int] | None = None,
        ended: bool = False,
    ) -> None:
        """A new generation: pass ``epoch`` from its start (or, for a restore, past its
        first ``delivered`` batches and those in ``ahead``). Whole or not at all: every
        value is made before the first store, and no call stands between the stores
        (an interrupt lands only at a call: it finds the old generation or this one)."""
        ahead = set() if ahead is None else ahead
        redo: list[int] = []
        self.gen += 1
        self.seed = seed
        self.epoch = epoch
        self.base = base
        self.steps = steps
        self.next = delivered
        self.delivered = delivered
        self.ahead = ahead
        self.redo = redo
        self.ended = ended

    # -- transitions (each takes the lock) -------------------------------------------------
    def deliver(self, claim: Claim, rows: int | None) -> None:
        """``claim`` reached the caller (``rows``: its real rows), or its error did
        (``rows`` None: passed over). A claim of an older generation changes nothing."""
        with self.lock:
            if claim.gen != self.gen:
                return
            if rows is not None:
                self.last_rows = rows
            i = claim.index
            if i == self.delivered:
                self.delivered += 1
                while self.delivered in self.ahead:
                    self.ahead.remove(self.delivered)
                    self.delivered += 1
            elif i > self.delivered:
                self.ahead.add(i)

    def release(self, claim: Claim) -> bool:
        """``claim`` did not reach the caller (an interrupt): it is made again. True when
        it was given back; a claim of an older generation, one given back already, or one
        delivered (the interrupt came after the delivery) is not."""
        with self.lock:
            i = claim.index
            if claim.gen != self.gen or i in self.redo or i < self.delivered or i in self.ahead:
                return False
            bisect.insort(self.redo, i)
            self.ended = False
            return True

    def give_back(self, claim: Claim) -> bool:
        """``claim``, held by the caller that claimed it, did not reach its caller (an
        interrupt): made again, even if its delivery was recorded (the interrupt came
        after the record, before the batch was returned; batches other claims delivered
        past it stay delivered). True when it was given back; a claim of an older
        generation, or one given back already, is not. Only the holder of a claim calls
        this, once: no other claim can have delivered its number since."""
        with self.lock:
            i = claim.index
            if claim.gen != self.gen or i in self.redo:
                return False
            if i in self.ahead:
                self.ahead.remove(i)
            elif i < self.delivered:  # the batches past it stay delivered, as ahead
                self.ahead.update(range(i + 1, self.delivered))
                self.delivered = i
            bisect.insort(self.redo, i)
            self.ended = False
            return True

    def start_next_pass(self, steps: int) -> bool:
        """Under the lock: after a finished pass (every claim of it delivered: batches a
        worker made ahead, or another thread is still making, belong to it), the next,
        of ``steps`` batches. True when one started."""
        if not self.finished():
            return False
        self.begin(self.epoch + 1, 0, steps, self.seed)
        return True

    def finished(self) -> bool:
        """The pass ended and every claim of it was delivered."""
        return self.ended and not self.redo and self.delivered >= self.next


def _before_fork() -> None:
    """Before a fork: take every live ledger's lock, so that no other thread is in the
    middle of a change when the child is made (the child would find the lock held by a
    thread it does not have, and its next batch would wait forever). A lock not had in
    a few seconds (its holder waits for this thread) is left as it is. The thread pools'
    own hook (``concurrent.futures.thread``, imported above so that it is registered
    first) runs after this one: a holder starting a look-ahead thread gets the pools'
    lock and lets go of the ledger's."""
    for ledger in list(_LEDGERS):
        if ledger.lock.acquire(timeout=5):
            _HELD.append(ledger.lock)


def _after_fork() -> None:
    """After the fork, in the parent and in the child: the locks taken back."""
    while _HELD:
        _HELD.pop().release()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(
        before=_before_fork, after_in_parent=_after_fork, after_in_child=_after_fork
    )
