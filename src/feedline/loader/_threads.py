"""Gathering threads: ``workers=N`` for sources whose batches are plain gathers.

Arrays in memory and memory-mapped files gather with numpy's ``take``, which releases
the GIL; sending such batches between processes would cost more than making them
(measured: 4 M rows/s through 2 worker processes against 11 M/s in one). For these
sources the ``N`` workers are threads of the calling process: the loader claims each
batch in order (the order lookup, under its lock) and hands the gather to a thread,
up to ``prefetch`` batches ahead; batches come back in order. The stream is the same
as with ``workers=0``, batch for batch.

The pool records the process it was made in: a process forked from it (which has
none of its threads) makes its own.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np


class ThreadPool:
    """The worker pool's interface (``can_submit``, ``submit``, ``result``, ``drain``,
    ``close``) over threads that call ``make(ords, recs, rows, start)``."""

    def __init__(self, make: Callable[..., dict[str, np.ndarray]], threads: int,
                 prefetch: int) -> None:
        self._make = make
        self._executor = ThreadPoolExecutor(threads, thread_name_prefix="feedline-gather")
        self._slots = max(threads, prefetch)
        self.pending: dict[int, Future] = {}
        self.pid = os.getpid()

    def can_submit(self) -> bool:
        return len(self.pending) < self._slots

    def submit(self, batch_no: int, ords: np.ndarray, recs: np.ndarray, rows: int, start: int,
               context: int) -> None:
        self.pending[batch_no] = self._executor.submit(self._make, ords, recs, rows, start)

    def result(self, batch_no: int) -> Any:
        return self.pending.pop(batch_no).result()

    def drain(self) -> None:
        """Wait out and discard every batch in flight (before a seek or a reset)."""
        for future in self.pending.values():
            with contextlib.suppress(Exception):
                future.result()
        self.pending.clear()

    def close(self) -> None:
        self._executor.shutdown(wait=True, cancel_futures=True)
        self.pending.clear()
