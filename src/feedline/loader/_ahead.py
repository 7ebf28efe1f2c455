"""The loader's look-ahead: the next order block, made on a thread of its own or, where
helper threads gather the rows, by a helper between its chunks (or the caller that needs
it first)."""

from __future__ import annotations

import os
import threading
from concurrent.futures import Future
from typing import Any

import numpy as np

from .._base import kernels
from ..order import Order

# Blocks being made. A fork waits for them: a child forked while the thread held a lock
# (numba's, loading a kernel for a new type) would wait on it forever, and torch's
# DataLoader forks its workers whenever an epoch starts.
_running: set = set()


def _finish_running() -> None:
    for future in list(_running):
        future.exception()  # waits; an error stays for the loader that asks for the block


class Ahead:
    """The order block at ``start`` being made on the process's look-ahead thread while
    the loader gathers the current one: the order lookup costs about a tenth of a plain
    gather, and this takes it off the loader's path. Blocks are pure functions of the
    order and the position, so one made ahead is used only for that same pair. The
    cursor walks on from block to block (a mix continues its walk instead of seeking);
    only one block of a loader is made at a time, so one thread uses it at a time.

    With ``here`` the block is made by a thread of the loader's own when it calls
    ``run`` (or ``result``): where helper threads gather a plain path's rows
    (``_gather_ahead``), a helper makes it between two of its chunks, as one more piece
    of the pass's work. A third thread's numpy calls took the GIL from the two threads
    gathering rows and then waited for a core."""

    _pool: tuple[int, Any] | None = None  # (pid, executor): a forked child makes its own

    def __init__(
        self, order: Order, start: int, length: int, cursor: Any = None, here: bool = False
    ) -> None:
        self.order, self.start, self.pid = order, start, os.getpid()
        if cursor is None or cursor.offset != start:  # a cursor of this same order
            cursor = order.cursor(start)
        self.cursor, self.length, self.here = cursor, length, here
        self.broken = False  # made ``here`` and interrupted: the cursor is not trusted
        self.pending = here  # to be made ``here``, and not made (nor interrupted)
        if here:
            self.future: Future = Future()
            self._lock = threading.Lock()
        else:
            self.future = self._executor().submit(self.make, cursor, length)
            _running.add(self.future)
            self.future.add_done_callback(_running.discard)

    def run(self, wait: bool = True) -> None:
        """Make a ``here`` block in the calling thread, unless it is made; while another
        thread makes it, wait for that one (or, without ``wait``, return). An error is
        kept for the loader that asks for the block; an interrupt leaves the block to be
        made again from its position (``matches`` refuses it)."""
        if not self.pending:
            return
        if not self._lock.acquire(blocking=wait):
            return
        try:
            if not self.pending:
                return
            try:
                got = self.make(self.cursor, self.length)
            except Exception as e:
                self.future.set_exception(e)
            except BaseException:
                self.broken = True
                raise
            else:
                self.future.set_result(got)
            finally:
                self.pending = False
        finally:
            self._lock.release()

    @classmethod
    def _executor(cls) -> Any:
        pool = cls._pool
        if pool is None or pool[0] != os.getpid():
            from concurrent.futures import ThreadPoolExecutor

            if pool is None and hasattr(os, "register_at_fork"):
                os.register_at_fork(before=_finish_running)
            pool = cls._pool = (os.getpid(), ThreadPoolExecutor(1, "feedline-order"))
        return pool[1]

    @staticmethod
    def make(cursor: Any, length: int) -> tuple[np.ndarray, np.ndarray]:
        with kernels.deferred():  # the numpy path while numba loads, not a wait
            return cursor.next_block(length)

    def matches(self, order: Order, start: int) -> bool:
        return (
            self.order is order
            and self.start == start
            and self.pid == os.getpid()
            and not self.broken
        )

    def result(self) -> tuple[np.ndarray, np.ndarray]:
        if self.here:
            self.run()
        return self.future.result()
