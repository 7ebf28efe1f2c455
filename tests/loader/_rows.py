"""The rows of the plain path's edge tests (``conftest.rows_flr``), their one-thread
stream, and a wrapper that raises an interrupt at chosen calls."""

from __future__ import annotations

import os
import threading
from typing import Any

import numpy as np

import feedline as fl


class Row(fl.Record):
    y = fl.field((), "int64")


N = 700_000  # a first block of 64k positions, then three of 256k (the last short)
B = 1000


def records(loader) -> np.ndarray:
    """The row values (the record indices) of one pass of ``loader``, in order."""
    return np.concatenate([b.y.copy() for b in loader])


def whole(path) -> np.ndarray:
    """``records`` of one pass over the file at ``path`` by one thread (seed 8)."""
    with fl.recfile.open(path) as f, fl.Loader(f, B, seed=8, threads=1) as loader:
        return records(loader)


def interrupted_pass(loader) -> np.ndarray:
    """A pass in which every ``KeyboardInterrupt`` is caught and the next batch asked
    for, as a training loop that saves and goes on would."""
    got, it = [], iter(loader)
    while True:
        try:
            got.append(next(it).y.copy())
        except KeyboardInterrupt:
            continue
        except StopIteration:
            return np.concatenate(got)


def interrupting(real: Any, at: tuple[int, ...]) -> Any:
    """``real``, raising ``KeyboardInterrupt`` after its calls numbered ``at`` (from 1)."""
    calls = {"n": 0}

    def wrapped(*args: Any) -> Any:
        out = real(*args)
        calls["n"] += 1
        if calls["n"] in at:
            raise KeyboardInterrupt
        return out

    return wrapped


def fork_checking(check: Any, seconds: float = 20.0) -> int:
    """Fork; the child exits 0 if ``check()`` is true, 4 if false, 3 if it has not
    returned after ``seconds`` (a hang), 5 if it raised. Returns the child's pid."""
    pid = os.fork()
    if pid == 0:
        code = 5
        try:
            threading.Timer(seconds, os._exit, (3,)).start()
            code = 0 if check() else 4
        finally:
            os._exit(code)
    return pid


def in_thread(fn: Any, timeout: float = 60.0) -> Any:
    """``fn()`` on a thread, failing (not hanging the suite) if it does not finish."""
    box: dict = {}

    def run() -> None:
        try:
            box["value"] = fn()
        except BaseException as e:  # handed to the test below
            box["error"] = e

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(timeout)
    assert not t.is_alive(), f"still running after {timeout} s (a hang)"
    if "error" in box:
        raise box["error"]
    return box["value"]
