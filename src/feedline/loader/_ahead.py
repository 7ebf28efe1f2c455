"""The loader's look-ahead: the next order block, made on a thread of its own."""

from __future__ import annotations

import os
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
    only one block of a loader is made at a time, so one thread uses it at a time."""

    _pool: tuple[int, Any] | None = None  # (pid, executor): a forked child makes its own

    def __init__(self, order: Order, start: int, length: int, cursor: Any = None) -> None:
        self.order, self.start, self.pid = order, start, os.getpid()
        if cursor is None or cursor.offset != start:  # a cursor of this same order
            cursor = order.cursor(start)
        self.cursor = cursor
        self.future = self._executor().submit(self.make, cursor, length)
        _running.add(self.future)
        self.future.add_done_callback(_running.discard)

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
        return self.order is order and self.start == start and self.pid == os.getpid()

    def result(self) -> tuple[np.ndarray, np.ndarray]:
        return self.future.result()
