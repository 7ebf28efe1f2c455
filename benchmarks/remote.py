"""Reading a .flr from S3 (moto's server on loopback) beside the same file on disk.

The file (``--rows`` rows of 64 float32 + an int64 label) is uploaded to a local moto
S3 server; ``fl.Loader(fl.recfile.open(fl.remote.open(url, cache_dir=...)), 512,
seed=1)`` reads one epoch with a cold block cache (every block fetched on first use,
by byte-range requests) and one with the cache warm, against the same loader over the
local file in the same run (page cache warm).

    python benchmarks/remote.py [--rows 1000000] [--block-size 1048576]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tests.formats.s3_endpoint import S3Endpoint

import feedline as fl


class Example(fl.Record, dims={"D": 64}):
    """64 float32 features and an int64 label."""

    x = fl.field("D", "float32")
    y = fl.field((), "int64")


def epoch(source) -> tuple[float, int]:
    t0 = time.perf_counter()
    rows = sum(b.meta.size for b in fl.Loader(source, 512, seed=1))
    return time.perf_counter() - t0, rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--block-size", type=int, default=1 << 20)
    args = ap.parse_args()
    folder = tempfile.mkdtemp(prefix="feedline-bench-remote-")
    path = os.path.join(folder, "rows.flr")
    rng = np.random.default_rng(0)
    fl.recfile.write(
        path,
        Example,
        {"x": rng.standard_normal((args.rows, 64), np.float32), "y": np.arange(args.rows)},
    )
    size = os.path.getsize(path)
    s3 = S3Endpoint()
    try:
        fs = s3.bucket("bench")
        t0 = time.perf_counter()
        fs.put(path, "bench/rows.flr")
        print(f"uploaded {size / 1e6:.0f} MB in {time.perf_counter() - t0:.1f} s")
        with fl.recfile.open(path) as local:
            epoch(local)
            t_local, n = min(epoch(local) for _ in range(2))
        cache = os.path.join(folder, "cache")
        handle = fl.remote.open(
            "s3://bench/rows.flr",
            storage_options=s3.options(),
            block_size=args.block_size,
            cache_dir=cache,
        )
        with fl.recfile.open(handle) as remote:
            t_cold, _ = epoch(remote)
            t_warm, _ = min(epoch(remote) for _ in range(2))
        handle.close()
    finally:
        s3.close()
    print(f"one epoch of {n:,} rows ({size / 1e6:.0f} MB) in shuffled batches of 512:")
    print(f"  local file (page cache)        {n / t_local / 1e6:7.2f} M rows/s")
    print(
        f"  S3, block cache cold           {n / t_cold / 1e6:7.2f} M rows/s  "
        f"({t_local / t_cold:.3f}x; {size / t_cold / 1e6:.0f} MB/s fetched)"
    )
    print(
        f"  S3, block cache warm           {n / t_warm / 1e6:7.2f} M rows/s  "
        f"({t_local / t_warm:.2f}x)"
    )


if __name__ == "__main__":
    main()
