"""Shuffled batches from a Parquet file (issue 19): ``fl.sources.parquet`` beside
HuggingFace datasets' ``load_dataset("parquet")`` + ``shuffle()`` iterated in batches,
and beside a hand-written pyarrow baseline (every row group decoded once into numpy,
then one ``np.take`` per column per batch), in the same run, on the same file.

The file: ``--rows`` rows (default 1,000,000) of 16 float32 features, an int64 label,
a float32 weight and a short string, in row groups of 65,536 rows (zstd-free: snappy,
pyarrow's default). Batches of 512 in a seeded shuffle of the whole file. Each figure
counts the decoding: a timed epoch starts from the closed file (HF's conversion to its
own Arrow cache is done before timing and not counted; its figure is over the first
``--hf-batches`` batches, as it is slow). The epochs run in ``--repeat`` rounds (the
baseline, then feedline, then each without the string column, in every round), so the
shared machine's drift over seconds falls on each alike: a rate is the best of its
rounds, a ratio the median over the rounds of the ratio within a round (with its range).

    python benchmarks/parquet.py [--rows 1000000] [--repeat 2] [--hf-batches 300]

The same file's conversion to ``.flr`` (``convert`` beside the hand-written pyarrow ->
numpy -> ``recfile.write`` path, and peak RSS for a 5x file) is
``benchmarks/parquet_convert.py``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Callable

import numpy as np

import feedline as fl

BATCH = 512
GROUP = 65_536
FEATURES = [f"f{i}" for i in range(16)]


def write(path: str, rows: int) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(0)
    cols: dict[str, object] = {f: rng.standard_normal(rows, dtype=np.float32) for f in FEATURES}
    cols["label"] = rng.integers(0, 1000, rows, dtype=np.int64)
    cols["weight"] = rng.random(rows, dtype=np.float32)
    words = np.array(["alpha", "beta", "gamma", "delta", "epsilon", "zeta"], dtype=object)
    cols["text"] = pa.array(words[rng.integers(0, len(words), rows)] + "-x", pa.string())
    pq.write_table(pa.table(cols), path, row_group_size=GROUP)


def baseline_epoch(path: str, perm: np.ndarray, columns: list[str] | None = None) -> int:
    """Row groups decoded once into numpy, then one ``np.take`` per column per batch."""
    import pyarrow.parquet as pq

    table = pq.read_table(path, columns=columns)
    cols = {
        name: table.column(name).to_numpy()  # the string column: an object array of str
        for name in table.column_names
    }
    total = 0
    for lo in range(0, len(perm), BATCH):
        idx = perm[lo : lo + BATCH]
        batch = {k: np.take(v, idx) for k, v in cols.items()}
        total += len(batch["label"])
    return total


def feedline_epoch(
    path: str,
    seed: int,
    cache_groups: int | None,
    limit: int | None = None,
    columns: list[str] | None = None,
) -> int:
    src = fl.sources.parquet(path, cache_groups=cache_groups, columns=columns)
    total = 0
    for i, batch in enumerate(fl.Loader(src, BATCH, seed=seed)):
        total += len(batch.label)
        if limit is not None and i + 1 >= limit:
            break
    return total


def count(loader: fl.Loader) -> int:
    return sum(len(batch.label) for batch in loader)


def hf_batches(path: str, seed: int, limit: int, cache: str) -> tuple[float, int]:
    """(seconds, rows) of the first ``limit`` batches of HF's shuffled iteration."""
    from datasets import load_dataset
    from datasets.utils.logging import disable_progress_bar

    disable_progress_bar()
    ds = load_dataset("parquet", data_files=path, split="train", cache_dir=cache)
    shuffled = ds.shuffle(seed=seed).with_format("numpy")
    t = time.perf_counter()
    rows = 0
    for i, batch in enumerate(shuffled.iter(batch_size=BATCH)):
        rows += len(batch["label"])
        if i + 1 >= limit:
            break
    return time.perf_counter() - t, rows


def rounds(fns: dict[str, Callable[[], int]], repeat: int) -> dict[str, list[float]]:
    """Each of ``fns`` timed once a round, in order, for ``repeat`` rounds: its rows/s per
    round."""
    rates: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(repeat):
        for k, fn in fns.items():
            t = time.perf_counter()
            rows = fn()
            rates[k].append(rows / (time.perf_counter() - t))
    return rates


def paired(ours: list[float], base: list[float]) -> str:
    """The median over the rounds of ``ours / base``, and its range."""
    r = sorted(a / b for a, b in zip(ours, base))
    return f"{statistics.median(r):.2f}x (rounds {r[0]:.2f} - {r[-1]:.2f}x)"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--hf-batches", type=int, default=300)
    p.add_argument("--no-hf", action="store_true", help="skip HF datasets")
    args = p.parse_args()
    import pyarrow.parquet as pq

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "data.parquet")
        write(path, args.rows)
        src = fl.sources.parquet(path)
        groups = src.n_groups
        print(
            f"{args.rows:,} rows ({os.path.getsize(path) / 1e6:.0f} MB, {groups} row groups "
            f"of {GROUP:,}), shuffled batches of {BATCH}; best of {args.repeat}"
        )
        perm = np.random.default_rng(1).permutation(args.rows)
        numeric = [*FEATURES, "label", "weight"]
        memory = fl.sources.table(pq.read_table(path))

        def checked(rows: int) -> int:
            assert rows == args.rows
            return rows

        rates = rounds(
            {
                "base": lambda: baseline_epoch(path, perm),
                "fl": lambda: checked(feedline_epoch(path, 1, None)),
                "memory": lambda: count(fl.Loader(memory, BATCH, seed=1)),
                "base-num": lambda: baseline_epoch(path, perm, numeric),
                "fl-num": lambda: checked(feedline_epoch(path, 1, None, columns=numeric)),
            },
            args.repeat,
        )
        best = {k: max(v) for k, v in rates.items()}
        base = best["base"]

        def row(name: str, rows_per_s: float, extra: str = "") -> None:
            print(f"  {name:<44} {rows_per_s / 1e3:8.0f} k rows/s{extra}")

        row("pyarrow baseline (decode all, np.take)", base)
        ours = best["fl"]
        row(
            f"fl.sources.parquet (default: cache_groups={src.cache_groups})",
            ours,
            f"  {paired(rates['fl'], rates['base'])} baseline",
        )
        row(
            "the same columns in memory (fl.sources.table)",
            best["memory"],
            f"  {paired(rates['memory'], rates['base'])} baseline (not timing a read)",
        )
        print(
            f"  without the string column: baseline {best['base-num'] / 1e3:.0f} k rows/s, "
            f"fl.sources.parquet {best['fl-num'] / 1e3:.0f} k rows/s "
            f"({paired(rates['fl-num'], rates['base-num'])} baseline)"
        )
        few = 40
        t = time.perf_counter()
        rows = feedline_epoch(path, 1, 8, limit=few)
        row(f"fl.sources.parquet, cache_groups=8 ({few} batches)", rows / (time.perf_counter() - t))
        if not args.no_hf:
            hf_s, hf_rows = hf_batches(path, 1, args.hf_batches, os.path.join(tmp, "hf"))
            hf = hf_rows / hf_s
            row(f"HF load_dataset + shuffle ({args.hf_batches} batches)", hf)
            print(
                f"  fl.sources.parquet / HF: {ours / hf:.2f}x (target >= 3x); "
                f"/ baseline: {ours / base:.2f}x (target >= 0.8x)"
            )


if __name__ == "__main__":
    main()
