"""A loader worker killed with SIGKILL mid-epoch: a ``WorkerError``, and no shared memory left.

``kill_one`` starts ``Loader(mapped dataset, workers=2)``, reads some batches, kills one
worker at one of three moments (``MOMENTS``), reads on, and reports what was raised,
how long it took, and what the loader left in ``/dev/shm``.
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass

import numpy as np

import feedline as fl

from . import maps


def shm_names() -> set[str]:
    return set(os.listdir("/dev/shm"))


def own_segments(loader: fl.Loader) -> set[str]:
    """The loader's shared-memory segments (other processes may have their own)."""
    return {s.name.lstrip("/") for s in loader._pool.slots}


@dataclass
class Killed:
    raised: str  # the exception's type name ("" if the stream ended without one)
    message: str
    seconds: float  # from the kill to the exception
    batches_after: int  # batches delivered after the kill
    segments: int  # the loader's shared-memory segments while it ran
    segments_left: int  # of those, still in /dev/shm after close
    workers_left: int  # worker processes still running after close


MOMENTS = ("busy", "idle", "between passes")


def kill_one(
    batches_before: int,
    which: int,
    moment: str,
    rows: int = 2000,
    batch_size: int = 8,
    deadline: float = 60.0,
) -> Killed:
    """Kill worker ``which`` after ``batches_before`` batches, read on, close the loader.

    ``moment``: "busy" (the workers' map sleeps 2 ms an example, so each has a batch in
    hand), "idle" (after a pause in which the workers finish what they were given) or
    "between passes" (after a whole pass, when no batch is in flight).
    """
    fn = maps.identity if moment != "busy" else maps.slow_identity
    ds = fl.Dataset.from_arrays(
        name="killed", x=np.arange(rows * 2, dtype=np.float32).reshape(rows, 2)
    ).map(fn)
    loader = fl.Loader(ds, batch_size, seed=5, workers=2, prefetch=2)
    raised, message, after = "", "", 0
    try:
        it = iter(loader)
        if moment == "between passes":
            for _ in it:
                pass
            it = iter(loader)
        else:
            for _ in range(batches_before):
                next(it)
        mine = own_segments(loader)
        assert mine <= shm_names(), "the loader's segments are not in /dev/shm"
        procs = [w.proc for w in loader._pool.workers]
        victim = procs[which]
        if moment == "idle":
            time.sleep(0.3)  # every worker finishes the batches it was given
        os.kill(victim.pid, signal.SIGKILL)
        if moment != "busy":
            victim.wait(timeout=10)
        t = time.perf_counter()
        try:
            for _ in it:
                after += 1
                if time.perf_counter() - t > deadline:
                    raise AssertionError("the loader went on reading past its dead worker")
        except Exception as e:  # what reading on raises is the finding
            raised, message = type(e).__name__, str(e)
        seconds = time.perf_counter() - t
    finally:
        loader.close()
    left = mine & shm_names()
    running = sum(p.poll() is None for p in procs)
    return Killed(raised, message, seconds, after, len(mine), len(left), running)
