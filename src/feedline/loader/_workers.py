"""Worker processes for loaders: batches gathered in parallel, delivered in order.

Workers are fresh interpreters (``python -m feedline.loader._worker_main``): they never
import the program's ``__main__``, so a script needs no ``if __name__ == "__main__":``;
what the datasets need from ``__main__`` travels by value (cloudpickle, ``examine``).
Each receives the loader's datasets pickled (files reopen by path, so no memory is
shared by fork) and gathers batches into a ring of shared-memory slots, ``prefetch``
per worker (``_slots``: ragged fields' values too, the slots growing to hold them); the
loader copies each batch out of its slot (collating ragged fields as it copies) and
hands batches out in order, so the stream is the same whatever the number of workers. A worker's
exception reaches the caller with the worker's traceback text; a worker that dies
is a ``WorkerError`` within a second, and its pool is never used again. A pool may
outlive the loader that started it (``_pools`` lends it to the next loop over the same
datasets); its workers stop and its shared memory is unlinked when it closes: when its
loader is closed, its datasets are collected, or the process exits.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import socket
import subprocess
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable
from multiprocessing.shared_memory import SharedMemory
from typing import Any

import numpy as np

from ..errors import WorkerError, add_note
from ._shipping import dumps_by_value
from ._slots import VALUES_START, Layout, grown
from ._wire import Reader, Worker, message, recorder, send_frame, wait_writable

# How long the loader waits for a result before it checks that the workers are alive.
_POLL_S = 0.5
# How long a worker may take to start and load its datasets.
_START_TIMEOUT_S = 60.0


class WorkerPool:
    """``workers`` processes gathering batches for one loader at a time.

    ``holder`` (a weak reference to the loader using it, or None) and ``use_lock``
    (held while a loader submits or waits; reentrant, so ``_pools`` can tell whether it
    holds it after an interrupt) let ``_pools`` lend the pool from loop to loop;
    ``broken`` says why it must not be used again (a worker died).

    The pipes are ``_wire``'s: a task is the worker's once the last frame of its message
    is sent, and the batch is pending from just before that send (a store), so an
    interrupt finds it pending and sent, or neither; a thread reads the results.
    """

    def __init__(
        self,
        datasets: list,
        fields: dict,
        batch_size: int,
        workers: int,
        prefetch: int,
        check_values: bool,
        transform: Any = None,
        output: str = "numpy",
        device: str | None = None,
        padding: tuple[int | None, Any, bool] = (None, None, False),
        by_value: bool = False,
    ) -> None:
        self.holder: weakref.ref | None = None
        self.pid = os.getpid()  # the process that owns the workers and the memory
        self.use_lock = threading.RLock()
        self.broken: str | None = None
        self.users: set[int] = set()  # ids of the live datasets it serves (see _pools)
        self.key: Any = None
        self.batch_size = batch_size
        self.fields = fields
        self.layout = layout = Layout(fields, batch_size)
        # A slot's values region (ragged columns' values; none with a batch transform in
        # the workers: they collate there), and the capacity to grow the slots to.
        ragged = layout.has_ragged and transform is None
        self.capacity0 = VALUES_START if ragged else 0
        self.capacities: list[int] = []
        self.want = self.capacity0
        self.n_slots = workers * prefetch
        # The ring of slots, made once the workers are ready (``ensure_slots`` tells them
        # its names). One list, changed in place (a slot that grows is replaced in it), so
        # the finaliser unlinks whatever ring there is.
        self.slots: list[SharedMemory] = []
        self.free: deque[int] = deque()
        self.workers: list[Worker] = []
        # The control messages every worker must have, in order (the ring, then each slot
        # grown: its frames and the segment it replaced); a worker is sent those it has
        # not had before its next task.
        self.log: list[tuple[list[bytes], SharedMemory | None]] = []
        self._token = 0  # the last message's (``_wire``)
        self.reader = Reader()
        self._finalizer = weakref.finalize(
            self, _release, self.slots, self.workers, self.log, self.reader
        )
        init = {
            "datasets": datasets,
            "layout": layout,
            "batch_size": batch_size,
            "check_values": check_values,
            "transform": transform,
            "output": output,
            "device": device,
            "padding": padding,
        }
        # what __main__ defines goes by value (``_shipping.examine``)
        payload = (
            dumps_by_value(init)
            if by_value
            else pickle.dumps(init, protocol=pickle.HIGHEST_PROTOCOL)
        )
        # batch -> (slot, worker, the task's token); the reader thread fills ``done``
        self.pending: dict[int, tuple[int, Worker, int]] = {}
        self.done: dict[int, tuple[str, Any]] = {}
        # the stages' times of each batch made (``_stats``), and those of the last result
        self.times: dict[int, dict[str, int]] = {}
        self.last_times: dict[str, int] = {}
        self._next_worker = 0
        try:
            self.workers.extend(Worker(payload) for _ in range(workers))
            for w in self.workers:
                self._expect_ready(w)
            self.reader.start(self.workers, recorder(self.pending, self.done, self.times))
            self.ensure_slots()
        except BaseException:
            self.close()
            raise

    @property
    def closed(self) -> bool:
        return not self._finalizer.alive

    def ensure_slots(self) -> None:
        """Make the ring of shared-memory slots, if there is none, and tell the workers."""
        if self.slots:
            return
        size = max(self.layout.values_off + self.capacity0, 64)
        self.slots.extend(SharedMemory(create=True, size=size) for _ in range(self.n_slots))
        self.capacities = [self.capacity0] * self.n_slots
        self.free = deque(range(len(self.slots)))
        names = [s.name for s in self.slots]
        self.log.append((self._message(("slots", names, self.capacities)), None))
        self._tell()

    def _message(self, msg: tuple) -> list[bytes]:
        """``msg``'s frames, under a new token."""
        self._token += 1
        return message(self._token, msg, self.workers[0].limit)

    def _tell(self) -> None:
        """Send every worker the control messages it has not had."""
        for w in self.workers:
            try:
                self._catch_up(w)
            except OSError as e:
                raise self._dead(
                    f"a loader worker (pid {w.proc.pid}) {w.describe_death()} "
                    "before it could be given its memory"
                ) from e

    def _catch_up(self, w: Worker) -> None:
        """Send ``w`` the control messages it has not had, in order. An interrupt finds the
        last one sent or not: it is sent again (to open a slot twice is to open it once)."""
        while w.told < len(self.log):
            for frame in self.log[w.told][0]:
                send_frame(w.sock, frame, w.alive)
            w.told += 1

    def _grow(self, slot: int) -> None:
        """Replace free slot ``slot`` by one whose values region holds ``want`` bytes (a
        batch's ragged values did not fit). If the memory cannot be had (``/dev/shm`` is
        full), the slot stays as it is and batches that do not fit keep travelling in
        the workers' messages."""
        want = self.want
        try:
            new = SharedMemory(create=True, size=self.layout.values_off + want)
        except OSError:
            self.want = self.capacities[slot]  # no slot grows further
            return
        try:
            reserve(new)
            told = self._message(("slot", slot, new.name, want))
        except OSError:
            _unlink([new])
            self.want = self.capacities[slot]
            return
        except BaseException:
            _unlink([new])
            raise
        # The change and its message with no call between but the log's append (after
        # it, every worker is told before its next task; the old segment is unlinked at
        # close if an interrupt stops the unlinking below).
        old = self.slots[slot]
        self.slots[slot] = new
        self.capacities[slot] = want
        self.log.append((told, old))
        _unlink([old])  # a worker's mapping of it stays valid until it opens the new one
        self._tell()

    def _dead(self, message: str) -> WorkerError:
        """A worker died: the pool is broken for good; the error to raise."""
        self.broken = message
        return WorkerError(message)

    def all_alive(self) -> bool:
        return self.broken is None and all(w.alive() for w in self.workers)

    def _expect_ready(self, w: Worker) -> None:
        if not w.conn.poll(_START_TIMEOUT_S):
            raise self._dead(
                f"a loader worker (pid {w.proc.pid}) did not start within "
                f"{_START_TIMEOUT_S:.0f} s; it {w.describe_death()}"
            )
        try:
            msg = w.conn.recv()
        except EOFError as e:
            raise self._dead(
                f"a loader worker (pid {w.proc.pid}) {w.describe_death()} while "
                f"loading its datasets (see its stderr)"
            ) from e
        if msg[0] != "ready":
            raise WorkerError(f"a loader worker sent {msg[0]!r} instead of ready")

    # -- tasks --------------------------------------------------------------------------
    def can_submit(self) -> bool:
        return bool(self.free)

    def submit(
        self,
        batch_no: int,
        ords: np.ndarray,
        recs: np.ndarray,
        rows: int,
        start: Any,
        seeds: np.ndarray | None,
        context: int,
    ) -> None:
        self._check_owner()
        w = self.workers[self._next_worker % len(self.workers)]
        self._next_worker += 1
        # The slot is taken with no call before the try that puts it back (an interrupt
        # lands only after a call: a popleft's slot would be lost, and the slot with it).
        slot = self.free[0]
        del self.free[0]
        try:
            if self.capacities[slot] < self.want:
                self._grow(slot)
            if w.told < len(self.log):
                self._catch_up(w)
            task: tuple = ("task", batch_no, slot, np.ascontiguousarray(ords))
            task += (np.ascontiguousarray(recs), rows, start, seeds, context)
            *parts, last = self._message(task)
            for part in parts:  # the task is not the worker's before its last frame
                send_frame(w.sock, part, w.alive)
            entry = (slot, w, self._token)
            while True:
                # Pending from here: the send below cannot wait, so it checks no signal
                # inside it; an interrupt that lands after it finds the task sent.
                self.pending[batch_no] = entry
                try:
                    n = w.sock.send(last, socket.MSG_DONTWAIT)
                except BlockingIOError:  # the pipe is full: not sent
                    del self.pending[batch_no]
                    wait_writable(w.sock, w.alive)
                    continue
                except OSError:
                    del self.pending[batch_no]
                    raise
                break
            if n < len(last):  # not on Linux: a frame is written whole
                w.sock.sendall(last[n:])
        except OSError as e:  # the worker died (a broken pipe): say so, with how it died
            self.free.appendleft(slot)
            with contextlib.suppress(subprocess.TimeoutExpired):
                w.proc.wait(1.0)
            raise self._dead(
                f"a loader worker (pid {w.proc.pid}) {w.describe_death()} "
                "before it could be given a batch"
            ) from e
        except BaseException:
            if batch_no not in self.pending:  # an interrupt before the task left
                self.free.appendleft(slot)
            raise  # else after it: the worker makes the batch

    def _check_owner(self) -> None:
        """Only the process that started the workers talks to them."""
        if self.pid != os.getpid():
            raise WorkerError(
                f"this loader's workers belong to process {self.pid}, not to "
                f"this forked process ({os.getpid()}): reset() or "
                "load_state_dict() here starts workers of its own"
            )

    def result(
        self,
        batch_no: int,
        timeout: float | None = None,
        collate: Callable[[dict[str, Any]], Any] | None = None,
    ) -> Any:
        """Wait for batch ``batch_no``; its fields copied out of the slot (freed), ragged
        fields as ``Ragged`` columns. With ``collate``, what it returns for the fields,
        called before the slot is freed: a ragged column's values are then a view of the
        slot (padding copies them once, not twice).

        The batch stays pending (its slot and its result kept) until what it returns or
        raises is ready; it is then forgotten with no call before the return but the
        slot's freeing, the last step. So an interrupt while it waits, or while the batch
        is copied out, leaves the batch pending (a later call gives it again); one that
        lands after it was forgotten finds it no longer in ``pending``: the batch is over
        (the caller makes it again). The batch's own error (a worker's, or the copy's)
        forgets it too. After ``timeout`` seconds it raises ``WorkerError`` naming the
        batch and the worker, and the pool is broken (the worker is stuck: it is not used
        again).
        """
        self._check_owner()
        deadline = None if timeout is None else time.monotonic() + timeout
        while batch_no not in self.done:
            if deadline is not None and time.monotonic() >= deadline:
                w = self.pending[batch_no][1]
                raise self._dead(
                    f"batch {batch_no} took longer than the loader's timeout of "
                    f"{timeout:g} s in the loader worker pid {w.proc.pid} (a map "
                    "function that never returns?)"
                )
            self._receive(None if deadline is None else max(0.0, deadline - time.monotonic()))
        kind, value = self.done[batch_no]
        slot = self.pending[batch_no][0]
        if kind == "error":
            payload, text = value
            exc = None
            if payload is not None:
                with contextlib.suppress(Exception):
                    exc = pickle.loads(payload)
            if isinstance(exc, BaseException):
                add_note(exc, f"raised in a loader worker:\n{text}")
                # the batch is over (its slot free): an interrupt raised by the batch itself,
                # unlike one in this wait, is not waited for again
                exc.feedline_batch_done = True  # type: ignore[attr-defined]
            else:
                exc = WorkerError(f"a loader worker raised:\n{text}")
            self._forget(batch_no, slot)
            raise exc
        if kind == "result":  # a batch transform's result, pickled by the worker
            try:
                out = pickle.loads(value)
            except Exception:
                self._forget(batch_no, slot)
                raise
            self._forget(batch_no, slot)
            return out
        info, need = value
        try:
            if need > self.capacities[slot]:
                self.want = max(self.want, grown(need))
            out = self.layout.read(self.slots[slot].buf, info, copy_values=collate is None)
            if collate is not None:
                out = collate(out)
        except Exception:  # the batch's error: it is over
            self._forget(batch_no, slot)
            raise
        self._forget(batch_no, slot)
        return out

    def _forget(self, batch_no: int, slot: int) -> None:
        """Batch ``batch_no`` is over: its bookkeeping dropped with no call between (an
        interrupt finds it pending or forgotten, never half), then its slot freed."""
        times = self.times.get(batch_no)
        del self.done[batch_no], self.pending[batch_no]
        if times is None:
            self.last_times = {}
        else:
            del self.times[batch_no]
            self.last_times = times
        self.free.append(slot)

    def _receive(self, limit: float | None = None) -> None:
        """Wait up to ``limit`` seconds (at most ``_POLL_S``) for the reader thread to
        record a message; then, if none came, check that the workers are alive."""
        if self.closed:
            raise WorkerError("the loader was closed while its batch was being made")
        for w in self.reader.lost:  # its pipe ended
            with contextlib.suppress(subprocess.TimeoutExpired):
                w.proc.wait(timeout=5)
            if self.closed:  # close() from another thread stopped the workers
                raise WorkerError("the loader was closed while its batch was being made")
            raise self._dead(f"a loader worker (pid {w.proc.pid}) {w.describe_death()}")
        if len(self.done) >= len(self.pending):
            raise WorkerError("the loader waits for a batch no worker is making")
        if self.reader.wait(_POLL_S if limit is None else min(_POLL_S, limit)):
            return
        if self.closed:
            raise WorkerError("the loader was closed while its batch was being made")
        for w in self.workers:
            if not w.alive():
                raise self._dead(f"a loader worker (pid {w.proc.pid}) {w.describe_death()}")

    def drain(self, timeout: float | None = None) -> bool:
        """Wait out and discard every batch in flight (before a seek, a reset, or the
        next loader's first batch). False if a worker died or ``timeout`` seconds passed
        first: the pool must then be closed, not used again."""
        deadline = None if timeout is None else time.monotonic() + timeout
        for batch_no in list(self.pending):
            while (
                self.broken is None
                and batch_no not in self.done
                and (deadline is None or time.monotonic() < deadline)
            ):
                try:
                    self._receive()
                except WorkerError as e:  # a death (broken), or nothing left to wait for
                    self.broken = self.broken or str(e)
            if batch_no not in self.done:
                self.broken = self.broken or "its batches in flight were not finished in time"
                return False
            with contextlib.suppress(Exception):
                self.result(batch_no)
        self.pending.clear()
        self.done.clear()
        self.times.clear()
        return True

    def close(self) -> None:
        """Stop the workers and unlink the shared memory (once; later calls do nothing)."""
        self._finalizer()

    def forget(self) -> None:
        """In a forked child: this pool's workers and memory are the parent's; never
        stop or unlink them from here."""
        self._finalizer.detach()
        self.broken = "the pool belongs to the parent process"


def _release(slots: list[SharedMemory], workers: list[Worker], log: list, reader: Reader) -> None:
    if workers:
        stop = message(0, ("stop",), workers[0].limit)[0]
        for w in workers:
            with contextlib.suppress(Exception):
                w.sock.send(stop, socket.MSG_DONTWAIT)
    # Idle workers stop at once; one busy with a batch (a map that takes long, or never
    # returns) is killed after a second, whatever the number of workers.
    deadline = time.monotonic() + 1.0
    for w in workers:
        with contextlib.suppress(Exception):
            w.proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        if w.proc.poll() is None:
            w.proc.kill()
            with contextlib.suppress(Exception):
                w.proc.wait(timeout=2)
    reader.stop()  # before the pipes close
    for w in workers:
        w.close()
    _unlink(slots)
    _unlink([old for _, old in log if old is not None])


def reserve(shm: SharedMemory) -> None:
    """Back all of ``shm`` with memory now (``OSError`` if ``/dev/shm`` cannot hold it),
    so that a worker writing into it is never killed by ``SIGBUS`` instead."""
    fd = getattr(shm, "_fd", -1)
    if fd >= 0 and hasattr(os, "posix_fallocate"):
        os.posix_fallocate(fd, 0, shm.size)


def _unlink(slots: list[SharedMemory]) -> None:
    for s in slots:
        with contextlib.suppress(Exception):
            s.close()
        with contextlib.suppress(FileNotFoundError):
            s.unlink()
