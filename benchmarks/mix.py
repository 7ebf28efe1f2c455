"""A mix of two .flr files (1,000,000 rows each of 64 float32 + an int64 label, 264
bytes, in the page cache), shuffled and mixed evenly, batches of 512: the plain path's
``take_mixed`` (one take per field per source, ``PlainPlan``; with the default threads,
chunks of batches copied ahead by C threads, ``rowcopy``, or with ``FEEDLINE_NATIVE=0``
taken by numpy on a helper thread) against the general path
(``LocalPlan``: a read per source and a scatter into the batch, the only path for a mix
before 2026-12-04) and numpy's gather of the same rows from one 2,000,000-row file with
a precomputed permutation (the machine's speed for these rows, as ``compare.py``).

Each is timed in a fresh process (the first pass, kernels not loaded before the clock)
and for two more passes there (the steady state), the three alternated for ``--rounds``
rounds; every figure is printed beside numpy's of the same round.

With ``--delayed`` the second file enters the mix halfway (``Schedule.delayed(0.5)``).
With ``--shards N`` the same 2 x ``--rows`` rows are N shard files instead of two,
concatenated and shuffled as one dataset (``fl.Seq.concat(shards).shuffle(1)``, what a
manifest's ``seq().shuffle(1)`` is).

    python benchmarks/mix.py [--rows 1000000] [--rounds 3] [--dir /tmp] [--delayed]
                             [--shards N]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

import feedline as fl

BATCH = 512


class Example(fl.Record, dims={"D": 64}):
    """64 float32 features and an int64 label."""

    x = fl.field("D", "float32")
    y = fl.field((), "int64")


def write(folder: str, rows: int, shards: int = 2) -> list[str]:
    """The parts' (or shards') paths, then the whole's (their rows in one file)."""
    total = 2 * rows
    sizes = [total * (k + 1) // shards - total * k // shards for k in range(shards)]
    paths = []
    for k, n in enumerate([*sizes, total]):
        last = k == len(sizes)
        path = os.path.join(folder, "whole.flr" if last else f"part{k}.flr")
        rng = np.random.default_rng(k)
        x = rng.standard_normal((n, 64), dtype=np.float32)
        fl.recfile.write(path, Example, {"x": x, "y": rng.integers(0, 10, n)})
        paths.append(path)
    return paths


def one(kind: str, paths: list[str], passes: int, delayed: bool) -> list[float]:
    """Rows/s of each pass of ``kind`` in this (fresh) process."""
    from feedline.loader._local_plan import LocalPlan

    if kind == "numpy":
        f = fl.recfile.open(paths[-1])
        cols = f.columns
        perm = np.random.default_rng(1).permutation(len(f))
        out = {n: np.empty((BATCH, *a.shape[1:]), a.dtype) for n, a in cols.items()}
        rates = []
        for _ in range(passes):
            t0 = time.perf_counter()
            for s in range(0, len(perm), BATCH):
                idx = perm[s : s + BATCH]
                for n, a in cols.items():
                    np.take(a, idx, axis=0, out=out[n][: len(idx)], mode="clip")
            rates.append(len(perm) / (time.perf_counter() - t0))
        return rates
    files = [fl.recfile.open(p) for p in paths[:-1]]
    if len(files) > 2:  # shards
        seq = fl.Seq.concat([fl.Seq.source(f) for f in files]).shuffle(1)
    else:
        second = fl.Seq.source(files[1]).shuffle(2)
        part = (second, fl.Schedule.delayed(0.5)) if delayed else second
        seq = fl.Seq.mix([fl.Seq.source(files[0]).shuffle(1), part])
    threads = None if kind in ("default", "numpy-copies") else 1
    loader = fl.Loader(seq, BATCH, seed=1, threads=threads)
    if kind == "general":
        loader._plan = LocalPlan(loader)
    assert type(loader._plan).__name__ == ("LocalPlan" if kind == "general" else "PlainPlan")
    rates = []
    for _ in range(passes):
        t0 = time.perf_counter()
        rows = sum(len(b.y) for b in loader)
        rates.append(rows / (time.perf_counter() - t0))
    return rates


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--dir", default=tempfile.gettempdir())
    ap.add_argument("--delayed", action="store_true")
    ap.add_argument("--shards", type=int, default=2, help="shard files, concatenated")
    ap.add_argument("--one", nargs=2, help=argparse.SUPPRESS)  # kind, paths (json)
    args = ap.parse_args()
    if args.shards < 2 or (args.shards > 2 and args.delayed):
        ap.error("--shards takes 2 or more, and not with --delayed")
    if args.one:
        print(json.dumps(one(args.one[0], json.loads(args.one[1]), 3, args.delayed)))
        return
    folder = tempfile.mkdtemp(dir=args.dir)
    try:
        paths = write(folder, args.rows, args.shards)
        got: dict[str, list[list[float]]] = {
            k: [] for k in ("numpy", "default", "numpy-copies", "plain", "general")
        }
        for _ in range(args.rounds):
            for kind in got:
                cmd = [sys.executable, __file__, "--one", kind, json.dumps(paths)]
                cmd += ["--delayed"] if args.delayed else []
                # numpy-copies: the default threads with the chunks taken by numpy on Python
                # threads (FEEDLINE_NATIVE=0), as before the compiled row copies
                env = {**os.environ, "FEEDLINE_NATIVE": "0"} if kind == "numpy-copies" else None
                out = subprocess.run(
                    cmd, check=True, capture_output=True, text=True, env=env
                ).stdout
                got[kind].append(json.loads(out.splitlines()[-1]))
        how = ", the second delayed to 0.5" if args.delayed else ""
        if args.shards > 2:
            print(
                f"{args.shards} .flr shards of {2 * args.rows // args.shards:,} rows (264 B), "
                f"concatenated and shuffled, batches of {BATCH}"
            )
        else:
            print(f"mix of two .flr files of {args.rows:,} rows (264 B){how}, batches of {BATCH}")
        print(f"{'':28} {'first pass':>16} {'steady':>16}   (M rows/s, medians; x numpy)")
        for kind, label in (
            ("numpy", "numpy gather, one file"),
            ("default", "feedline, default threads"),
            ("numpy-copies", "  the same, numpy's takes"),
            ("plain", "feedline, plain, 1 thread"),
            ("general", "feedline, general path"),
        ):
            first = [r[0] for r in got[kind]]
            steady = [statistics.mean(r[1:]) for r in got[kind]]
            ratio0 = statistics.median(f / n[0] for f, n in zip(first, got["numpy"]))
            ratio1 = statistics.median(
                s / statistics.mean(n[1:]) for s, n in zip(steady, got["numpy"])
            )
            print(
                f"{label:28} {statistics.median(first) / 1e6:8.2f} ({ratio0:4.2f}x)"
                f" {statistics.median(steady) / 1e6:8.2f} ({ratio1:4.2f}x)"
            )
        plain = [statistics.mean(r) for r in got["plain"]]
        general = [statistics.mean(r) for r in got["general"]]
        ratios = [p / g for p, g in zip(plain, general)]
        print(f"plain, 1 thread / general path: {statistics.median(ratios):.2f}x (rounds {ratios})")
        both = [statistics.mean(r) for r in got["default"]]
        ratios = [d / p for d, p in zip(both, plain)]
        print(f"default threads / 1 thread: {statistics.median(ratios):.2f}x (rounds {ratios})")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
