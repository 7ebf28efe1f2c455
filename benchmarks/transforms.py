"""A CPU-bound per-example transform (~40-50 us of Python) through Dataset.map, with 0 and
2 workers: how far worker processes scale it (issue 5's target: >= 1.8x on 2 cores).

    python benchmarks/transforms.py [--examples 20000] [--prefetch 2]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import numpy as np
from transform_fns import slow  # workers import it (this script is __main__)

import feedline as fl


class Example(fl.Record, dims={"D": 64}):
    x = fl.field("D", "float32")
    y = fl.field((), "int64")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--examples", type=int, default=20_000)
    parser.add_argument("--prefetch", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "rows.flr")
        n = args.examples
        fl.recfile.write(path, Example, {"x": np.zeros((n, 64), np.float32), "y": np.arange(n)})
        with fl.recfile.open(path) as f:
            ds = fl.Dataset(f.record, f).map(slow, seed=1)
            rates = {}
            for workers in (0, 2):
                t0 = time.perf_counter()
                loader = fl.Loader(ds, 256, seed=1, workers=workers, prefetch=args.prefetch)
                it = iter(loader)
                first = next(it)
                first_s = time.perf_counter() - t0
                t = time.perf_counter()
                rows = first.meta.size + sum(b.meta.size for b in it)
                rates[workers] = (rows - first.meta.size) / (time.perf_counter() - t)
                loader.close()
                print(
                    f"workers={workers}: {rates[workers]:,.0f} examples/s, first batch "
                    f"{first_s * 1e3:.0f} ms"
                )
            print(f"scaling 0 -> 2 workers: {rates[2] / rates[0]:.2f}x")


if __name__ == "__main__":
    main()
