"""Packed rows (``fl.text.Packed``): padding beside Grain's packing, and tokens/s beside
nanoGPT's ``get_batch``, from one compact corpus, in one run.

The corpus: ``--tokens`` random ids (vocabulary 50,257) in documents of lognormal length
(sigma 1, mean ~``--doc-mean`` tokens), written as a compact ``.flr`` (a ragged uint16
``tokens`` column, what ``fl.text.build(..., "x.flr")`` writes) and as nanoGPT's
``train.bin`` (the uint16 flow). Rows of 2,048 (input, target) pairs, batches of 16.

Padding. ``Packed``'s strategies (concat, first fit and best fit decreasing within
blocks of ``--block`` documents of the seeded order; more block sizes for best fit),
beside Grain's ``FirstFitPackIterDataset`` / ``BestFitPackIterDataset`` (grain 0.2.x:
online first/best fit into ``num_packing_bins`` open rows, all emitted when a piece
fits none) run by ``benchmarks/packing_grain.py`` in an interpreter that has grain
(``--grain-python``; grain is no dependency of feedline). Grain gets the same pieces in
the same order, twice:

- the same instance: each piece as its number of pairs into rows of 2,048 cells, which
  is exactly the problem ``Packed`` solves (a row of 2,048 pairs);
- Grain's own layout: each piece as its tokens (pairs + 1) into rows of 2,049 tokens,
  inputs and targets shifted by one inside the row, so a row also spends one cell at
  each document boundary.

For both the figure is the untrained fraction, ``1 - targets / (rows * 2048)`` (for
``Packed`` and the same instance, the padding fraction).

Speed: best of ``--repeat`` runs of ``--steps`` batches, every figure from the same
run: nanoGPT's ``get_batch`` (random offsets into a ``np.memmap`` of the uint16 flow,
``np.stack`` of inputs and targets as int64; no masks, no segments) beside
``fl.Loader(fl.text.Packed(path, 2048), 16, seed=1)`` (shuffled rows with loss masks,
segment ids, positions and doc ids) and ``Packed.getitems`` alone. The first batch of
a fresh ``Packed`` (its plan and the kernels' loading included) is timed on its own.

    python benchmarks/packing.py [--tokens 50000000] [--grain-python /tmp/grain/bin/python]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
from _nanogpt import get_batch_rate  # benchmarks/, the script's folder

import feedline as fl
from feedline.order._warm import warm_up
from feedline.text import _pack_plan

SEQ, BATCH, VOCAB = 2048, 16, 50257


class Doc(fl.Record, dims={"T": None, "V": VOCAB}):
    """One document of the corpus (uint16 ids)."""

    tokens = fl.field("T", "uint16", domain=fl.Index("V"))


def make_corpus(folder: str, tokens: int, doc_mean: int) -> tuple[str, str]:
    """The corpus as a compact .flr and a uint16 train.bin (kept for the next run)."""
    flr, flat = (os.path.join(folder, f"packing-{tokens}-{doc_mean}.{x}") for x in ("flr", "bin"))
    if os.path.exists(flr) and os.path.exists(flat):
        return flr, flat
    os.makedirs(folder, exist_ok=True)
    rng = np.random.default_rng(0)
    flow = rng.integers(0, VOCAB, tokens, dtype=np.uint16)
    lengths = np.maximum(
        1, rng.lognormal(np.log(doc_mean) - 0.5, 1.0, 2 * tokens // doc_mean + 10)
    ).astype(np.int64)
    cuts = np.cumsum(lengths)
    offsets = np.concatenate(([0], cuts[cuts < tokens], [tokens])).astype(np.int64)

    def chunks(step: int = 10_000):
        for a in range(0, len(offsets) - 1, step):
            o = offsets[a : a + step + 1]
            yield {"tokens": fl.Ragged(flow[o[0] : o[-1]], o - o[0], np.diff(o)[:, None], (None,))}

    fl.recfile.write_chunks(flr, Doc, chunks())
    flow.tofile(flat)
    return flr, flat


def pieces(counts: np.ndarray, seed: int) -> np.ndarray:
    """Every piece's pairs, in the order of the pass (``Packed``'s, before sorting)."""
    pairs = np.maximum(counts[_pack_plan.document_order(len(counts), seed, 0)] - 1, 0)
    pairs = pairs[pairs > 0]
    n = -(-pairs // SEQ)
    first = np.cumsum(n) - n
    k = np.arange(int(n.sum())) - np.repeat(first, n)
    return np.minimum(SEQ, np.repeat(pairs, n) - k * SEQ)


def grain_padding(python: str, sizes: np.ndarray, row: int, bins: list[int]) -> list[dict]:
    here = os.path.dirname(os.path.abspath(__file__))
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "sizes.npy")
        np.save(path, sizes)
        out = subprocess.run(
            [python, os.path.join(here, "packing_grain.py"), path, str(row), *map(str, bins)],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def baseline(flat: str, steps: int) -> float:
    """nanoGPT's ``get_batch`` over the same tokens (``_nanogpt``)."""
    return get_batch_rate(flat, steps, SEQ, BATCH)


def loader_rate(packed: fl.text.Packed, steps: int) -> float:
    loader = fl.Loader(packed, BATCH, seed=1)
    it = iter(loader)
    next(it)
    t0 = time.perf_counter()
    for _ in range(steps):
        try:
            b = next(it)
        except StopIteration:
            it = iter(loader)
            b = next(it)
    assert b["segment_ids"].shape == b["loss_mask"].shape == (BATCH, SEQ)
    rate = steps * BATCH * SEQ / (time.perf_counter() - t0)
    loader.close()
    return rate


def getitems_rate(packed: fl.text.Packed, steps: int) -> float:
    rng = np.random.default_rng(2)
    packed.getitems(rng.integers(0, len(packed), BATCH))
    t0 = time.perf_counter()
    for _ in range(steps):
        packed.getitems(rng.integers(0, len(packed), BATCH))
    return steps * BATCH * SEQ / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=50_000_000)
    ap.add_argument("--doc-mean", type=int, default=1000)
    ap.add_argument("--block", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--grain-bins", default="16,512")
    ap.add_argument("--grain-python", default=sys.executable)
    ap.add_argument("--plan-docs", type=int, default=1_000_000)
    ap.add_argument("--dir", default="/tmp/feedline-bench-packing")
    args = ap.parse_args()
    flr, flat = make_corpus(args.dir, args.tokens, args.doc_mean)
    for path in (flr, flat):  # into the page cache
        with open(path, "rb") as f:
            while f.read(1 << 24):
                pass

    # A fresh process's first batch: the plan, the kernels' loading, one gather.
    t0 = time.perf_counter()
    first = fl.text.Packed(flr, SEQ, block=args.block)
    built = time.perf_counter() - t0
    first.getitems(np.arange(BATCH))
    first_batch = time.perf_counter() - t0
    counts = first._layout.counts
    targets = first.num_targets
    print(
        f"{len(counts):,} documents, {int(counts.sum()):,} tokens (mean {counts.mean():.0f}), "
        f"rows of {SEQ} pairs: Packed built in {built:.2f} s, first batch after "
        f"{first_batch:.2f} s (fresh process)"
    )

    print("\npadding (untrained fraction of the rows' cells; lower is better):")
    ours = {}
    for strategy in ("concat", "first_fit", "best_fit"):
        with fl.text.Packed(flr, SEQ, strategy=strategy, block=args.block) as p:
            ours[strategy] = p.padding
            print(
                f"  Packed {strategy:<10} block {args.block:>5}  {len(p):>8,} rows  {p.padding:.4%}"
            )
    for block in (64, 256, 4096, 16384):
        with fl.text.Packed(flr, SEQ, block=block) as p:
            print(f"  Packed best_fit   block {block:>5}  {len(p):>8,} rows  {p.padding:.4%}")
    bins = [int(b) for b in args.grain_bins.split(",")]
    try:
        sizes = pieces(counts, 0)
        same = grain_padding(args.grain_python, sizes, SEQ, bins)
        native = grain_padding(args.grain_python, sizes + 1, SEQ + 1, bins)
    except (subprocess.CalledProcessError, FileNotFoundError) as e:
        err = getattr(e, "stderr", "") or str(e)
        print(f"  Grain: not run ({err.strip().splitlines()[-1]}); pass --grain-python "
              f"an interpreter with grain installed")  # fmt: skip
        same = native = []
    for label, results in (("same instance", same), ("own layout", native)):
        for r in results:
            untrained = 1 - targets / (r["rows"] * SEQ)
            mine = ours[r["strategy"]]
            print(
                f"  Grain  {r['strategy']:<10} bins {r['bins']:>6} ({label}) {r['rows']:>8,} rows"
                f"  {untrained:.4%}   Packed/Grain {mine / untrained:.3f}x  ({r['seconds']:.1f} s)"
            )

    rng = np.random.default_rng(3)
    many = np.maximum(1, rng.lognormal(np.log(args.doc_mean) - 0.5, 1.0, args.plan_docs)).astype(
        np.int64
    )
    order = _pack_plan.document_order(len(many), 0, 0)
    for strategy in ("first_fit", "best_fit"):
        times = []
        for _ in range(3):
            t0 = time.perf_counter()
            _pack_plan.plan(many, order, SEQ, strategy, args.block)
            times.append(time.perf_counter() - t0)
        print(f"  plan of {len(many):,} documents, {strategy}: {min(times):.3f} s (best of 3)")

    warm_up()
    runs = [
        (
            baseline(flat, args.steps),
            loader_rate(first, args.steps),
            getitems_rate(first, args.steps),
        )
        for _ in range(args.repeat)
    ]
    base, loader, kernel = (max(col) for col in zip(*runs))
    ratios = [r[1] / r[0] for r in runs]
    print(
        f"\nbatches of {BATCH} rows of {SEQ} tokens (best of {args.repeat} x {args.steps} "
        f"batches), tokens/s:"
    )
    print(f"  nanoGPT get_batch (uint16 memmap, np.stack)  {base / 1e6:8.1f} M")
    print(
        f"  Loader(Packed(.flr, best_fit))               {loader / 1e6:8.1f} M  "
        f"{loader / base:.2f}x (per run {min(ratios):.2f} - {max(ratios):.2f}x)"
    )
    print(f"  Packed.getitems, compiled kernel             {kernel / 1e6:8.1f} M  ", end="")
    print(f"{kernel / base:.2f}x")
    first.close()


if __name__ == "__main__":
    main()
