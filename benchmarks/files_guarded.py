"""The readers' guards of issue 15 (fstat before a gather, token ids checked in a window)
measured against the code before them, in one run, interleaved.

Each round runs one child process per source tree (the order alternates from round
to round, so the machine's drift falls on both alike), on the same files in the page
cache (each gather rate is the best of five slices of its batches, so that spikes of
other processes' load fall on some slices and not on the figure):

- ``.flr`` gather: ``RecFile.getitems`` of shuffled batches of 512 rows from a
  1,000,000-row file (64 float32 + an int64 label), rows/s;
- ``.flr`` verify: ``RecFile.verify()`` (every column's CRC-32), GB/s, best of 3;
- ``.ndf`` gather: ``NdfFile.rows`` of shuffled batches of 512 rows of 17 float64,
  rows/s (slow: the rows start at byte 28, so numpy gathers unaligned float64);
- windows: ``fl.text.Windows.getitems`` of batches of 32 windows of 2,048 tokens from
  a 16M-token ``.nndataset``, two shuffled passes over its 8,000 windows (the first
  also checks the token ids of each block of the flow it meets), windows/s.

    python benchmarks/files_guarded.py --before OLD/src --after src [--rounds 7]

``OLD`` is, e.g., ``git archive <commit> | tar -x -C OLD`` of the commit before.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap

CHILD = textwrap.dedent("""
    import json, sys, time, numpy as np, feedline as fl
    d = sys.argv[1]
    out = {}
    rng = np.random.default_rng(0)

    def rate(fn, batches, per, parts=5):
        # the best of `parts` runs over slices of `batches`: spikes of other
        # processes' load fall on some runs, not on the best
        fn(batches[0])  # warm
        best = float("inf")
        step = len(batches) // parts
        for k in range(parts):
            t = time.perf_counter()
            for b in batches[k * step:(k + 1) * step]:
                fn(b)
            best = min(best, (time.perf_counter() - t) / step)
        return per / best

    with fl.recfile.open(d + "/rows.flr") as f:
        batches = [rng.integers(0, len(f), 512) for _ in range(4000)]
        out["flr gather (M rows/s)"] = rate(f.getitems, batches, 512) / 1e6
        size = sum(length for _, length, _ in f._crcs.values())
        best = float("inf")
        for _ in range(3):
            t = time.perf_counter()
            f.verify()
            best = min(best, time.perf_counter() - t)
        out["flr verify (GB/s)"] = size / best / 1e9
    with fl.ndf.open(d + "/rows.ndf") as f:  # rows at byte 28: unaligned f64, slow
        batches = [rng.integers(0, len(f), 512) for _ in range(100)]
        out["ndf gather (M rows/s)"] = rate(f.rows, batches, 512) / 1e6
    with fl.text.Windows(d + "/text.nndataset", 2048) as w:  # two shuffled passes
        order = rng.permutation(len(w))
        batches = [order[i:i + 32] for i in range(0, len(order) - 31, 32)]
        t = time.perf_counter()
        for b in batches:
            w.getitems(b)
        out["windows, pass 1 (k/s)"] = len(batches) * 32 / (time.perf_counter() - t) / 1e3
        out["windows, pass 2 (k/s)"] = rate(w.getitems, batches, 32) / 1e3
    print(json.dumps(out))
""")


def make_files(directory: str, src: str) -> None:
    script = textwrap.dedent("""
        import sys, numpy as np, feedline as fl
        d = sys.argv[1]
        rng = np.random.default_rng(1)
        R = fl.Dataset.from_arrays(x=np.zeros((1, 64), np.float32),
                                   y=np.zeros((1, 1), np.int64)).record
        n = 1_000_000
        fl.recfile.write(d + "/rows.flr", R, {"x": rng.standard_normal((n, 64), np.float32),
                                              "y": np.arange(n).reshape(n, 1)})
        fl.ndf.save(d + "/rows.ndf", rng.standard_normal((n, 16)), np.ones((n, 1)))
        docs = [rng.integers(0, 50_000, int(k)) for k in rng.integers(100, 3000, 10_000)]
        fl.nndataset.write(d + "/text.nndataset", fl.nndataset.Build(
            {"size": 50_000}, "c.txt", "", len(docs), train_docs=docs, created=1))
    """)
    subprocess.run(
        [sys.executable, "-c", script, directory], check=True, env={**os.environ, "PYTHONPATH": src}
    )


def measure(src: str, directory: str) -> dict[str, float]:
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, directory],
        check=True,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": src},
    )
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", required=True, help="the src directory of the old code")
    parser.add_argument("--after", default="src", help="the src directory of the new code")
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args(argv)
    trees = {"before": os.path.abspath(args.before), "after": os.path.abspath(args.after)}
    results: dict[str, list[dict[str, float]]] = {"before": [], "after": []}
    with tempfile.TemporaryDirectory(prefix="files-guarded-") as d:
        make_files(d, trees["after"])
        for r in range(args.rounds):
            for name in ("before", "after") if r % 2 == 0 else ("after", "before"):
                results[name].append(measure(trees[name], d))
    print(
        f"{'figure':<24} {'before (median, range)':>26} {'after (median, range)':>26} "
        f"{'after/before':>12}"
    )
    print(f"({args.rounds} rounds, interleaved)")
    for key in results["before"][0]:
        b = [x[key] for x in results["before"]]
        a = [x[key] for x in results["after"]]
        print(
            f"{key:<25} {statistics.median(b):>10.2f} ({min(b):.2f}-{max(b):.2f})"
            f"{'':>4} {statistics.median(a):>10.2f} ({min(a):.2f}-{max(a):.2f}){'':>4} "
            f"{statistics.median(a) / statistics.median(b):>10.3f}x"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
