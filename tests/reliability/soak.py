"""Soak: many epochs of a scheduled, shuffled mix of two sources with 2 workers.

Each epoch must deliver every position once (with the records the mix holds: each
``web`` row once, each ``code`` row twice), and after each epoch this process's
resident memory, its open descriptors, the loader's shared-memory segments and the
workers (their pids, memory and descriptors) are measured. ``run`` returns the figures;
the callers judge them.
"""

from __future__ import annotations

import gc
import os
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

import feedline as fl

from . import maps


def rss(pid: int | str = "self") -> int:
    """Resident memory (VmRSS) of a process, in bytes."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for process {pid}")


def fds(pid: int | str = "self") -> int:
    """Open file descriptors of a process."""
    return len(os.listdir(f"/proc/{pid}/fd"))


@dataclass
class Soak:
    epochs: int
    batches: int = 0
    rss: list[int] = field(default_factory=list)  # this process, after each epoch
    fds: list[int] = field(default_factory=list)
    segments: list[frozenset[str]] = field(default_factory=list)  # the loader's, in /dev/shm
    worker_pids: list[tuple[int, ...]] = field(default_factory=list)
    worker_rss: list[int] = field(default_factory=list)  # the workers' together
    worker_fds: list[int] = field(default_factory=list)
    segments_left: int = -1  # the loader's segments in /dev/shm after close
    fds_after_close: int = -1
    fds_before: int = -1

    def growth(self, values: list[int]) -> float:
        """The largest value after the first epoch, relative to the first epoch's."""
        return max(values[1:], default=values[0]) / values[0] - 1


def mixed_seq(web_rows: int, code_rows: int) -> fl.Seq:
    """A mix of two sources: ``code`` cycled to two passes and ramped in; shuffled."""
    rng = np.random.default_rng(0)
    web = fl.Dataset.from_arrays(
        name="web", x=rng.standard_normal((web_rows, 16)).astype(np.float32), i=np.arange(web_rows)
    )
    code = fl.Dataset(
        web.record,
        {"x": rng.standard_normal((code_rows, 16)).astype(np.float32), "i": np.arange(code_rows)},
        name="code",
    )
    return fl.Seq.mix(
        [
            web.map(maps.jitter, seed=1).shuffle(1),
            (
                code.map(maps.identity).shuffle(2).cycle_to(2 * code_rows),
                fl.Schedule.ramp(0.2, 0.5),
            ),
        ]
    )


def run(epochs: int, web_rows: int = 600, code_rows: int = 200, batch_size: int = 32) -> Soak:
    seq = mixed_seq(web_rows, code_rows)
    length = web_rows + 2 * code_rows
    want = Counter(
        {**{(0, r): 1 for r in range(web_rows)}, **{(1, r): 2 for r in range(code_rows)}}
    )
    out = Soak(epochs)
    gc.collect()
    out.fds_before = fds()
    loader = fl.Loader(seq, batch_size, seed=7, workers=2, prefetch=2)
    try:
        for _ in range(epochs):
            positions: list[int] = []
            got: Counter = Counter()
            for batch in loader:
                positions.extend(batch.meta.positions.tolist())
                got.update(
                    zip(batch.meta.source_ordinals.tolist(), batch.meta.record_indices.tolist())
                )
                out.batches += 1
            assert positions == list(range(length)), "an epoch lost or repeated positions"
            assert got == want, "an epoch holds other records than the mix"
            gc.collect()
            out.rss.append(rss())
            out.fds.append(fds())
            mine = frozenset(s.name.lstrip("/") for s in loader._pool.slots)
            out.segments.append(mine & frozenset(os.listdir("/dev/shm")))
            pids = tuple(w.proc.pid for w in loader._pool.workers)
            out.worker_pids.append(pids)
            out.worker_rss.append(sum(rss(p) for p in pids))
            out.worker_fds.append(sum(fds(p) for p in pids))
    finally:
        loader.close()
    gc.collect()
    out.segments_left = (
        len(out.segments[-1] & frozenset(os.listdir("/dev/shm"))) if out.segments else 0
    )
    out.fds_after_close = fds()
    return out
