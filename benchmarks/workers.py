"""Worker processes against the calling process, per kind of dataset (issue 13).

The loader's default (``workers=None``: ``fl.loader_workers()``, else min(4, usable
CPUs)) starts workers only for datasets that need Python per example or per batch;
plain gathers stay in the calling process. This measures both choices for each kind,
in the same run, after a warm-up pass (the workers' start is reported on its own; the
persistent pools pay it once per dataset, not once per epoch):

    python benchmarks/workers.py [--workers N]

Each line: examples/s in the calling process, through N workers, and their ratio.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import numpy as np

import feedline as fl
from feedline.order._warm import warm_up

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from worker_fns import Example, NotCheap, SlowItems, augment_rows, jitter, normalise


def rate(loader: fl.Loader, passes: int = 2) -> float:
    list(loader)  # warm-up: the workers start, the kernels load
    n, t = 0, time.perf_counter()
    for _ in range(passes):
        n += sum(b.meta.size if isinstance(b, fl.Batch) else b["size"] for b in loader)
    return n / (time.perf_counter() - t)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workers", type=int, default=fl.loader_workers())
    p.add_argument("--rows", type=int, default=400_000)
    args = p.parse_args()
    w, rows = max(1, args.workers), args.rows
    warm_up()
    rng = np.random.default_rng(0)
    x = rng.standard_normal((rows, 64), dtype=np.float32)
    y = rng.integers(0, 10, rows)
    tmp = tempfile.mkdtemp()
    path = os.path.join(tmp, "bench.flr")
    fl.recfile.write(path, Example, {"x": x, "y": y})
    arrays = fl.Dataset(Example, {"x": x, "y": y})
    small = fl.Dataset(Example, {"x": x[:20_000], "y": y[:20_000]})
    with fl.recfile.open(path) as f:
        cases = [
            ("arrays in memory, plain gather (stays here)", NotCheap.of(arrays), 512, None),
            (
                "memory-mapped .flr, plain gather (stays here)",
                NotCheap.of(fl.Dataset(f.record, f)),
                512,
                None,
            ),
            ("Dataset.map (seeded jitter), 20k rows", small.map(jitter, seed=1), 64, None),
            ("item-by-item source, 50 us an item", fl.Dataset(Example, SlowItems(4_000)), 64, None),
            ("batch_transform, numpy only (normalise), 20k rows", small, 64, normalise),
            ("batch_transform, Python per row, 20k rows", small, 64, augment_rows),
        ]
        load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
        print(
            f"{os.cpu_count()} CPUs, {fl.loader_workers()} workers by default, "
            f"load average {load:.2f} at the start (other processes slow the workers)"
        )
        print(f"{'dataset':50s} {'here M/s':>9s} {f'{w} workers':>10s} {'ratio':>6s}")
        for name, ds, batch, transform in cases:
            here = rate(fl.Loader(ds, batch, seed=1, workers=0, batch_transform=transform))
            t = time.perf_counter()
            loader = fl.Loader(ds, batch, seed=1, workers=w, batch_transform=transform)
            next(iter(loader))
            start = time.perf_counter() - t
            there = rate(loader)
            loader.close()
            print(
                f"{name:50s} {here / 1e6:9.3f} {there / 1e6:10.3f} {there / here:5.2f}x"
                f"   (workers started in {start:.2f} s)"
            )


if __name__ == "__main__":
    main()
