"""Worker processes for a loader: batches gathered in parallel, delivered in order.

Workers are fresh interpreters (``python -m feedline.loader._worker_main``): they never
import the program's ``__main__``, so a script needs no ``if __name__ == "__main__":``.
Each receives the loader's datasets pickled (files reopen by path, so no memory is
shared by fork) and gathers batches into a ring of shared-memory slots, ``prefetch``
per worker; the loader copies each batch out of its slot and hands batches out in
order, so the stream is the same whatever the number of workers. A worker's
exception reaches the caller with the worker's traceback text; a worker that dies
is a ``WorkerError`` within a second; the shared memory is unlinked when the loader
closes or the process exits.
"""

from __future__ import annotations

import contextlib
import io
import os
import pickle
import pickletools
import signal
import socket
import subprocess
import sys
import threading
import warnings
import weakref
from collections import deque
from multiprocessing.connection import Connection, wait
from multiprocessing.shared_memory import SharedMemory
from typing import Any

import numpy as np

from ..errors import WorkerError
from ._batch import Batch

# How long the loader waits for a result before it checks that the workers are alive.
_POLL_S = 0.5
# How long a worker may take to start and load its datasets.
_START_TIMEOUT_S = 60.0


def unpicklable_reason(obj: Any) -> str | None:
    """Why ``obj`` cannot go to a worker (None if it can): it cannot be pickled, or it
    refers to something defined in ``__main__``, which a worker never imports."""
    try:
        data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as e:
        return f"it cannot be pickled ({type(e).__name__}: {e})"
    strings: list[str] = []
    for op, arg, _ in pickletools.genops(io.BytesIO(data)):
        if op.name in ("GLOBAL", "INST") and isinstance(arg, str) and arg.startswith("__main__"):
            return f"it refers to {arg.replace(' ', '.')}, defined in __main__"
        if op.name in ("SHORT_BINUNICODE", "BINUNICODE", "UNICODE"):
            strings.append(arg)
        if op.name == "STACK_GLOBAL" and len(strings) >= 2 and strings[-2] == "__main__":
            return f"it refers to __main__.{strings[-1]}, defined in __main__"
    return None


class _Worker:
    def __init__(self, payload: bytes) -> None:
        parent, child = socket.socketpair()
        env = dict(os.environ)
        # The worker imports feedline as the parent does (an installed or source tree).
        env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "feedline.loader._worker_main", str(child.fileno())],
            pass_fds=(child.fileno(),), env=env, stdin=subprocess.DEVNULL,
            start_new_session=False)
        child.close()
        self.conn = Connection(parent.detach())
        self.conn.send_bytes(payload)
        self.busy = 0

    def alive(self) -> bool:
        return self.proc.poll() is None

    def describe_death(self) -> str:
        code = self.proc.poll()
        if code is None:
            return "is running"
        if code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = f"signal {-code}"
            return f"was killed by {name}"
        return f"exited with status {code}"


class WorkerPool:
    """``workers`` processes gathering batches for one loader."""

    def __init__(self, datasets: list, fields: dict, batch_size: int, workers: int,
                 prefetch: int, check_values: bool, transform: Any = None,
                 output: str = "numpy", device: str | None = None) -> None:
        self.batch_size = batch_size
        self.fields = fields
        layout, off = [], 0
        for name, f in fields.items():
            layout.append((name, f.dtype.str, tuple(f.shape), off))
            nbytes = batch_size * f.dtype.itemsize * int(np.prod(f.shape, dtype=np.int64))
            off = -(-(off + nbytes) // 64) * 64
        self.layout = layout
        self.slot_bytes = max(off, 64)
        self.slots = [SharedMemory(create=True, size=self.slot_bytes)
                      for _ in range(workers * prefetch)]
        self.free = deque(range(len(self.slots)))
        self._finalizer = weakref.finalize(self, _release, list(self.slots), [])
        payload = pickle.dumps({"datasets": datasets, "layout": layout,
                                "batch_size": batch_size, "check_values": check_values,
                                "slots": [s.name for s in self.slots],
                                "transform": transform, "output": output, "device": device},
                               protocol=pickle.HIGHEST_PROTOCOL)
        self.workers = [_Worker(payload) for _ in range(workers)]
        self._finalizer.detach()
        self._finalizer = weakref.finalize(self, _release, list(self.slots), self.workers)
        self.pending: dict[int, tuple[int, _Worker]] = {}
        self.done: dict[int, tuple[str, Any]] = {}
        self.lock = threading.Lock()
        self._next_worker = 0
        for w in self.workers:
            self._expect_ready(w)

    def _expect_ready(self, w: _Worker) -> None:
        if not w.conn.poll(_START_TIMEOUT_S):
            raise WorkerError(f"a loader worker (pid {w.proc.pid}) did not start within "
                              f"{_START_TIMEOUT_S:.0f} s; it {w.describe_death()}")
        try:
            msg = w.conn.recv()
        except EOFError as e:
            raise WorkerError(f"a loader worker (pid {w.proc.pid}) {w.describe_death()} while "
                              f"loading its datasets (see its stderr)") from e
        if msg[0] != "ready":
            raise WorkerError(f"a loader worker sent {msg[0]!r} instead of ready")

    # -- tasks --------------------------------------------------------------------------
    def can_submit(self) -> bool:
        return bool(self.free)

    def submit(self, batch_no: int, ords: np.ndarray, recs: np.ndarray, rows: int, start: int,
               seeds: np.ndarray | None, context: int) -> None:
        slot = self.free.popleft()
        w = self.workers[self._next_worker % len(self.workers)]
        self._next_worker += 1
        try:
            w.conn.send(("task", batch_no, slot, np.ascontiguousarray(ords),
                         np.ascontiguousarray(recs), rows, start, seeds, context))
        except OSError as e:  # the worker died (a broken pipe): say so, with how it died
            self.free.appendleft(slot)
            with contextlib.suppress(subprocess.TimeoutExpired):
                w.proc.wait(1.0)
            raise WorkerError(f"a loader worker (pid {w.proc.pid}) {w.describe_death()} "
                              "before it could be given a batch") from e
        w.busy += 1
        self.pending[batch_no] = (slot, w)

    def result(self, batch_no: int) -> dict[str, np.ndarray]:
        """Wait for batch ``batch_no``; its fields copied out of the slot (freed)."""
        while batch_no not in self.done:
            self._receive()
        kind, value = self.done.pop(batch_no)
        slot, _ = self.pending.pop(batch_no)
        if kind == "error":
            self.free.append(slot)
            payload, text = value
            exc = None
            if payload is not None:
                with contextlib.suppress(Exception):
                    exc = pickle.loads(payload)
            if isinstance(exc, BaseException):
                exc.add_note(f"raised in a loader worker:\n{text}")
                raise exc
            raise WorkerError(f"a loader worker raised:\n{text}")
        if kind == "result":  # a batch transform's result, pickled by the worker
            self.free.append(slot)
            return pickle.loads(value)
        shm = self.slots[slot]
        out = {}
        for name, dtype, shape, off in self.layout:
            view = np.ndarray((self.batch_size, *shape), dtype=np.dtype(dtype), buffer=shm.buf,
                              offset=off)
            out[name] = view.copy()
        self.free.append(slot)
        return out

    def _receive(self) -> None:
        conns = [w.conn for w in self.workers if w.busy]
        if not conns:
            raise WorkerError("the loader waits for a batch no worker is making")
        ready = wait(conns, timeout=_POLL_S)
        if not ready:
            for w in self.workers:
                if not w.alive():
                    raise WorkerError(f"a loader worker (pid {w.proc.pid}) {w.describe_death()}")
            return
        for conn in ready:
            w = next(w for w in self.workers if w.conn is conn)
            try:
                msg = conn.recv()
            except (EOFError, OSError) as e:
                w.proc.wait(timeout=5)
                raise WorkerError(f"a loader worker (pid {w.proc.pid}) "
                                  f"{w.describe_death()}") from e
            w.busy -= 1
            if msg[0] == "done":
                self.done[msg[1]] = ("done", None)
            elif msg[0] == "result":
                self.done[msg[1]] = ("result", msg[2])
            else:
                self.done[msg[1]] = ("error", (msg[2], msg[3]))

    def drain(self) -> None:
        """Wait out and discard every batch in flight (before a seek or a reset)."""
        for batch_no in list(self.pending):
            with contextlib.suppress(Exception):
                self.result(batch_no)
        self.pending.clear()
        self.done.clear()

    def close(self) -> None:
        self._finalizer()


class PoolMode:
    """How a ``Loader`` uses a worker pool (the loader provides the attributes)."""

    def _use_pool(self) -> WorkerPool | None:
        """The worker pool, started on first use (None: batches are made in process).
        Decided once, under a lock: threads that call next() while the pool starts wait
        for it rather than gather in process meanwhile."""
        if self._pool_decided:
            return self._pool
        with self._next_lock:
            if not self._pool_decided:
                self._pool = self._start_pool()
                self._pool_decided = True
        return self._pool

    def _start_pool(self) -> WorkerPool | None:
        if self.workers == 0:
            return None
        if all(ds.cheap_gathers for ds in self._datasets) and self.batch_transform is None:
            # Arrays in memory and memory-mapped files gather faster here than batches
            # travel between processes (measured: 11 M/s here, 4 M/s through 2 workers
            # on a 2-core machine), and sending arrays would copy them into every worker.
            return None
        reason = unpicklable_reason(self._datasets)
        if reason is not None:
            warnings.warn(f"the loader's datasets are loaded in the calling process, not in "
                          f"{self.workers} workers: {reason}", RuntimeWarning, stacklevel=4)
            return None
        transform = self.batch_transform
        if transform is not None and unpicklable_reason(transform) is not None:
            # The transform stays here; the workers still make the batches.
            warnings.warn(f"batch_transform runs in the calling process: "
                          f"{unpicklable_reason(transform)}", RuntimeWarning, stacklevel=4)
            transform = None
        self._transform_in_workers = transform is not None
        return WorkerPool(self._datasets, dict(self.record.fields), self.batch_size,
                          self.workers, self.prefetch, self.check_values,
                          transform=transform, output=self.output,
                          device=None if self.device is None else str(self.device))

    def _next_from_pool(self, pool: WorkerPool, raw: bool = False) -> Any:
        """The next batch the workers made (``raw``: before a transform in this process)."""
        with self._next_lock:
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
                raise StopIteration
            start, stop, ords, recs = self._inflight.popleft()
            try:
                fields = pool.result(start // self.batch_size)
            finally:
                self._passed(start)
            if self._transform_in_workers:
                return fields  # the transform's result, made in a worker
            size = stop - start
            rows = self._rows_for(size)
            fields = {n: a[:rows] for n, a in fields.items()}
        if self.output == "torch":
            fields = self._to_torch(fields)
        batch = Batch(fields, size, rows, start, ords, recs)
        if self.batch_transform is not None and not raw:
            return self.batch_transform(batch)
        return batch

    def _drain(self) -> None:
        """Discard batches the workers are making ahead (before a reset or a resume)."""
        if self._pool is not None:
            with self._next_lock:
                self._pool.drain()
                self._inflight.clear()



def _release(slots: list[SharedMemory], workers: list[_Worker]) -> None:
    for w in workers:
        with contextlib.suppress(Exception):
            w.conn.send(("stop",))
    for w in workers:
        with contextlib.suppress(Exception):
            w.proc.wait(timeout=2)
        if w.proc.poll() is None:
            w.proc.kill()
            with contextlib.suppress(Exception):
                w.proc.wait(timeout=2)
        with contextlib.suppress(Exception):
            w.conn.close()
    for s in slots:
        with contextlib.suppress(Exception):
            s.close()
        with contextlib.suppress(FileNotFoundError):
            s.unlink()
