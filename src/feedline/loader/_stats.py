"""Where a loader's time goes: ``loader.stats()`` and the ``progress=True`` bar.

Each batch is timed in the thread that makes it (``_base.clock``): the order (the
claim), the read (the gather from the sources), the map (a dataset's map functions,
inside the read), the collation (padding), the batch transform, the copy (to torch, to
the device), and the wait for worker processes; the workers time their own read, map,
collation and transform and send the times with each batch. The caller's wait is the
time spent inside ``next`` (all of the above that happened in this process); the rest
of the wall time is the caller's own (the training step). One lock acquisition per
batch, a few clock reads: a fraction of a percent of the fastest plain gather's batch.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from time import perf_counter_ns
from typing import Any

STAGES = ("order", "read", "map", "collate", "transform", "copy", "workers")
WORKER_STAGES = ("read", "map", "collate", "transform")


@dataclass(frozen=True)
class LoaderStats:
    """A loader's figures since it was made (or since ``stats(reset=True)``).

    ``seconds`` is the wall time from the first batch asked for to the last one
    delivered; ``wait_s`` the time callers spent inside ``next`` (summed over the
    threads that share the loader); ``stages`` the seconds of each stage in this
    process (``workers``: waiting for worker processes); ``worker_stages`` those spent
    in the workers, whose busy time over ``workers x seconds`` is their utilisation.
    """

    batches: int
    rows: int
    seconds: float
    first_batch_s: float | None
    wait_s: float
    stages: Mapping[str, float] = field(default_factory=dict)
    workers: int = 0
    worker_stages: Mapping[str, float] = field(default_factory=dict)
    worker_busy_s: float = 0.0

    @property
    def rows_per_s(self) -> float:
        return self.rows / self.seconds if self.seconds > 0 else 0.0

    @property
    def wait_fraction(self) -> float:
        """The share of the wall time the caller waited for batches (0: never)."""
        return self.wait_s / self.seconds if self.seconds > 0 else 0.0

    @property
    def worker_utilisation(self) -> float:
        """The workers' busy time over their number times the wall time (0 without)."""
        if not self.workers or self.seconds <= 0:
            return 0.0
        return self.worker_busy_s / (self.workers * self.seconds)

    def __str__(self) -> str:
        first = "-" if self.first_batch_s is None else f"{self.first_batch_s * 1e3:.1f} ms"
        lines = [
            f"{self.batches:,} batches, {self.rows:,} rows in {self.seconds:.3f} s: "
            f"{self.rows_per_s:,.0f} rows/s; first batch {first}; the caller waited "
            f"{self.wait_s:.3f} s ({self.wait_fraction:.0%})"
        ]
        rows = [(f"  {k}", v) for k, v in self.stages.items() if v > 0]
        if self.workers:
            rows += [(f"  {k} (in workers)", v) for k, v in self.worker_stages.items() if v > 0]
        for name, seconds in rows:
            share = seconds / self.seconds if self.seconds > 0 else 0.0
            lines.append(f"{name:<24} {seconds:9.3f} s  {share:6.1%} of the wall time")
        if self.workers:
            lines.append(
                f"  {self.workers} workers busy {self.worker_busy_s:.3f} s: "
                f"{self.worker_utilisation:.0%} utilisation"
            )
        return "\n".join(lines)


class Stats:
    """A loader's counters (``batch`` and ``plain`` add one batch; ``snapshot`` reads)."""

    def __init__(self, progress: bool = False) -> None:
        self.lock = threading.Lock()
        self.progress = progress
        self.bar: Any = None
        self.tqdm: Any = None
        if progress:  # refused when the loader is made, not after a batch was claimed
            try:
                from tqdm.auto import tqdm
            except ImportError as e:
                raise ImportError(
                    "progress=True shows a tqdm bar: pip install 'feedline[progress]'"
                ) from e
            self.tqdm = tqdm
        self.clear()

    def clear(self) -> None:
        self.ns = dict.fromkeys(STAGES, 0)
        self.worker_ns = dict.fromkeys(WORKER_STAGES, 0)
        self.worker_busy_ns = 0
        self.batches = self.rows = self.wait_ns = 0
        self.t_start: int | None = None
        self.t_last: int | None = None
        self.first_ns: int | None = None

    def start(self) -> int:
        """The clock at the start of a ``next`` (the first one starts the wall time)."""
        t = perf_counter_ns()
        if self.t_start is None:
            self.t_start = t
        return t

    def batch(self, t0: int, acc: Mapping[str, int], rows: int, token: list | None = None) -> None:
        """A batch of ``rows`` delivered by a ``next`` that started at ``t0``, its stages
        in ``acc``: the read includes the map (taken out here); ``worker <stage>`` keys
        are a worker's, ``worker busy`` its whole time on the batch."""
        t = perf_counter_ns()
        with self.lock:
            ns, wns = self.ns, self.worker_ns
            for k, v in acc.items():
                if k.startswith("worker "):
                    if k == "worker busy":
                        self.worker_busy_ns += v
                    else:
                        wns[k[7:]] = wns.get(k[7:], 0) + v
                else:
                    ns[k] = ns.get(k, 0) + v
            ns["read"] -= acc.get("map", 0)
            wns["read"] -= acc.get("worker map", 0)
            self._count(t, t - t0, rows, token)

    def plain(self, t0: int, t1: int, t2: int, rows: int, token: list | None = None) -> None:
        """A batch of the plain path: its claim from ``t0`` to ``t1``, its take to ``t2``.
        ``token`` (of ``batch`` too), where given, gets the rows once they are counted:
        what ``undo`` takes back if the batch is then given back."""
        with self.lock:
            self.ns["order"] += t1 - t0
            self.ns["read"] += t2 - t1
            self._count(t2, t2 - t0, rows, token)

    def undo(self, token: list) -> None:
        """The batch of ``token`` (given to ``batch`` or ``plain``) was counted, if the
        token says so, then given back before it reached the caller (an interrupt between
        the two): it is counted again when it is made again. Its time stays."""
        with self.lock:
            if not token:
                return
            self.batches -= 1
            self.rows -= token.pop()
            if self.bar is not None and self.bar.n > 0:
                self.bar.update(-1)

    def _count(self, t: int, wait: int, rows: int, token: list | None = None) -> None:
        self.batches += 1
        self.rows += rows
        if token is not None:
            token.append(rows)
        self.wait_ns += wait
        self.t_last = t
        if self.first_ns is None and self.t_start is not None:
            self.first_ns = t - self.t_start
        if self.bar is not None:
            self._show(rows)

    # -- the progress bar ----------------------------------------------------------------
    def open_bar(self, total: int, epoch: int) -> None:
        """The bar of a pass of ``total`` batches (tqdm, the ``progress`` extra)."""
        if not self.progress or self.bar is not None:
            return
        self.bar = self.tqdm(total=total, desc=f"pass {epoch}", unit="batch", leave=False)
        self.bar_t = perf_counter_ns()
        self.bar_wait = self.wait_ns
        self.bar_rows = self.rows

    def _show(self, rows: int) -> None:
        bar = self.bar
        bar.update(1)
        now = perf_counter_ns()
        if bar.n == bar.total or now - self.bar_t > 0.25e9:  # not at every batch
            seconds = (now - self.bar_t) / 1e9
            if seconds > 0:
                bar.set_postfix_str(
                    f"{(self.rows - self.bar_rows) / seconds:,.0f} rows/s, waited "
                    f"{(self.wait_ns - self.bar_wait) / 1e9 / seconds:.0%}",
                    refresh=False,
                )
        if bar.n >= bar.total:  # the pass's last batch: the next pass opens its own
            self.bar = None
            bar.close()

    def close_bar(self) -> None:
        """The pass ended (or the loader closed): the bar goes."""
        with self.lock:
            bar, self.bar = self.bar, None
        if bar is not None:
            bar.close()

    def snapshot(self, workers: int, reset: bool = False) -> LoaderStats:
        with self.lock:
            seconds = (
                (self.t_last - self.t_start) / 1e9
                if self.t_start is not None and self.t_last is not None
                else 0.0
            )
            out = LoaderStats(
                batches=self.batches,
                rows=self.rows,
                seconds=seconds,
                first_batch_s=None if self.first_ns is None else self.first_ns / 1e9,
                wait_s=self.wait_ns / 1e9,
                stages={k: v / 1e9 for k, v in self.ns.items()},
                workers=workers,
                worker_stages={k: v / 1e9 for k, v in self.worker_ns.items()},
                worker_busy_s=self.worker_busy_ns / 1e9,
            )
            if reset:
                self.clear()
        return out
