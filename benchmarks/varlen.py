"""Variable-length batches (issue 16): shuffled batches of 64 int32 sequences (lengths
lognormal, median 256, at most 4,096) padded to the batch's longest, from memory (and
from a ``.flr`` when the file format holds ragged columns), beside a hand-written
vectorised numpy baseline over the same values + offsets in the same run (the
permutation precomputed, one ``np.take`` of offsets, one fill of the padded array),
and the padding with and without length bucketing. ``--shards K`` also reads the same
sequences from K ``.flr`` shards concatenated and shuffled as one (a manifest's way), the
sources' columns read together (``loader._many``) and, in the same run, source by source
(the general path's read before them).

Each figure is the median of ``--repeat`` timed epochs after one untimed warm-up epoch
(the first epoch of a fresh process is printed too).

    python benchmarks/varlen.py [--n 200000] [--repeat 3] [--shards 256]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

import numpy as np

import feedline as fl

BATCH = 64


class Seq(fl.Record, dims={"T": fl.Varying(max=4096)}):
    tokens = fl.field("T", "int32")


def make(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    lengths = np.clip(rng.lognormal(np.log(256), 0.6, n).astype(np.int64), 1, 4096)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    values = rng.integers(0, 50_000, int(offsets[-1]), dtype=np.int32)
    return values, offsets


def numpy_epoch(values: np.ndarray, offsets: np.ndarray, perm: np.ndarray) -> int:
    """The baseline: one take of offsets, one fill of the padded array, per batch."""
    tokens = 0
    for lo in range(0, len(perm), BATCH):
        idx = perm[lo : lo + BATCH]
        starts = offsets[idx]
        lens = offsets[idx + 1] - starts
        width = int(lens.max())
        col = np.arange(width)
        inside = col < lens[:, None]
        out = np.zeros((len(idx), width), dtype=values.dtype)
        out[inside] = values[(starts[:, None] + col)[inside]]
        tokens += int(lens.sum())
    return tokens


def feedline_epoch(loader: fl.Loader) -> int:
    tokens = 0
    for batch in loader:
        tokens += int(batch.meta.lengths["T"].sum())
    return tokens


def timed(fn, repeat: int) -> tuple[float, float, int]:
    """(first epoch's seconds, median of ``repeat`` later epochs, tokens per epoch)."""
    t = time.perf_counter()
    tokens = fn()
    first = time.perf_counter() - t
    runs = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        runs.append(time.perf_counter() - t)
    return first, statistics.median(runs), tokens


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--n", type=int, default=200_000)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--memory-only", action="store_true", help="skip the .flr measurement")
    p.add_argument("--shards", type=int, default=0, help="also from this many .flr shards")
    args = p.parse_args()
    values, offsets = make(args.n)
    n = args.n
    print(
        f"{n:,} sequences, {len(values):,} tokens (median length "
        f"{int(np.median(np.diff(offsets)))}, max {int(np.diff(offsets).max())}), "
        f"batches of {BATCH}, shuffled; median of {args.repeat} epochs after one"
    )
    perm = np.random.default_rng(1).permutation(n)
    base_first, base, tokens = timed(lambda: numpy_epoch(values, offsets, perm), args.repeat)
    lengths = np.diff(offsets)
    column = fl.Ragged(values, offsets, lengths[:, None], (None,))
    ds = fl.Dataset(Seq, {"tokens": column})

    def row(name: str, first: float, steady: float) -> None:
        print(
            f"  {name:<46} {n / steady / 1e3:8.1f} k seq/s {tokens / steady / 1e6:7.1f} M tok/s"
            f"   {base / steady:5.2f}x numpy   (first epoch {base_first / first:5.2f}x)"
        )

    row("numpy baseline", base_first, base)
    loader = fl.Loader(ds, BATCH, seed=1, workers=0)
    first, steady, got = timed(lambda: feedline_epoch(loader), args.repeat)
    assert got == tokens
    row("feedline, in memory", first, steady)
    try:
        if args.memory_only:
            raise fl.FeedlineError("--memory-only")
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "seqs.flr")
            fl.recfile.write(path, Seq, {"tokens": column})
            size = os.path.getsize(path)
            with fl.recfile.open(path) as f:
                loader = fl.Loader(f, BATCH, seed=1, workers=0)
                first, steady, got = timed(lambda: feedline_epoch(loader), args.repeat)
                assert got == tokens
                loader.close()
            row("feedline, from a .flr", first, steady)
            print(
                f"  .flr size {size / 1e6:.1f} MB for {(values.nbytes + offsets.nbytes) / 1e6:.1f}"
                f" MB of values and offsets ({size / (values.nbytes + offsets.nbytes):.3f}x)"
            )
    except fl.FeedlineError as e:
        print(f"  feedline, from a .flr: not measured ({type(e).__name__}: {e})")
    if args.shards:
        with tempfile.TemporaryDirectory() as tmp:
            shards(tmp, column, args.shards, args.repeat, tokens, row)

    real = int(lengths.sum())
    for name, options in (("no bucketing", {}), ("bucket='T'", {"bucket": "T"})):
        padded = 0
        for batch in fl.Loader(ds, BATCH, seed=1, workers=0, **options):
            padded += batch.tokens.size
        print(f"  padding, {name:<14} {1 - real / padded:6.1%} of the padded tokens")


def shards(tmp: str, column: fl.Ragged, k: int, repeat: int, tokens: int, row) -> None:
    """The rows of ``--shards``: the sequences from ``k`` .flr files, read together and
    source by source."""
    from feedline.loader import _many

    n = len(column)
    cuts = np.linspace(0, n, k + 1).astype(np.int64)
    files = []
    for i in range(k):
        path = os.path.join(tmp, f"{i:05d}.flr")
        fl.recfile.write(path, Seq, {"tokens": column.take(np.arange(cuts[i], cuts[i + 1]))})
        files.append(fl.recfile.open(path))
    seq = fl.Seq.concat([fl.Seq.source(fl.Dataset(Seq, f)) for f in files]).shuffle(1)
    keep = _many.MIN_SOURCES
    for name, least in (("together", keep), ("source by source", 1 << 30)):
        _many.MIN_SOURCES = least
        each = fl.Loader(seq, BATCH, seed=1, workers=0)
        first, steady, got = timed(lambda each=each: feedline_epoch(each), repeat)
        assert got == tokens
        each.close()
        row(f"feedline, {k} .flr shards, {name}", first, steady)
    _many.MIN_SOURCES = keep
    for f in files:
        f.close()


if __name__ == "__main__":
    main()
