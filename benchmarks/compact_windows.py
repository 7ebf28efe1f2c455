"""Windows from a compact ``.flr`` corpus (uint16 tokens) beside nanoGPT's ``get_batch``.

One corpus of ``--tokens`` random ids (vocabulary 50,257) in documents of lognormal
length (mean ~``--doc-mean`` tokens) is written three ways: as a compact ``.flr`` (what
``fl.text.build(..., "x.flr")`` writes: a ragged uint16 ``tokens`` column), as a
``.nndataset`` (u64 tokens) and as nanoGPT's ``train.bin`` (the uint16 flow). All are in
the page cache when measured. Best of ``--repeat`` runs of ``--steps`` batches of 16
windows of 2,048 tokens, every figure from the same run:

- nanoGPT's ``get_batch``: random offsets into a ``np.memmap`` of the uint16 flow,
  ``np.stack`` of each window as int64, inputs and targets (no masks, no doc ids);
- ``fl.Loader(fl.text.Windows(path, 2048), 16, seed=1)`` over the ``.flr`` and over the
  ``.nndataset``: shuffled, resumable, with loss masks and doc ids;
- ``Windows.getitems`` over the ``.flr`` with the compiled kernel.

Storage is reported as bytes a token for each file.

    python benchmarks/compact_windows.py [--tokens 100000000] [--dir /tmp/feedline-bench-compact]
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np
from _nanogpt import get_batch_rate  # benchmarks/, the script's folder

import feedline as fl
from feedline.order._warm import warm_up
from feedline.text._build_flr import corpus_record

SEQ, BATCH, VOCAB = 2048, 16, 50257


def make_corpus(folder: str, tokens: int, doc_mean: int) -> tuple[str, str, str]:
    """The corpus as a .flr, a .nndataset and a uint16 train.bin (kept for the next run)."""
    paths = tuple(os.path.join(folder, f"corpus-{tokens}.{x}") for x in ("flr", "nndataset", "bin"))
    if all(os.path.exists(p) for p in paths):
        return paths  # type: ignore[return-value]
    os.makedirs(folder, exist_ok=True)
    rng = np.random.default_rng(0)
    t0 = time.perf_counter()
    flow = rng.integers(0, VOCAB, tokens, dtype=np.uint16)
    sigma = 1.0
    lengths = np.maximum(
        1, rng.lognormal(np.log(doc_mean) - sigma**2 / 2, sigma, 2 * tokens // doc_mean + 10)
    ).astype(np.int64)
    cuts = np.cumsum(lengths)
    cuts = cuts[cuts < tokens]
    offsets = np.concatenate(([0], cuts, [tokens])).astype(np.int64)
    flr, nnd, flat = paths
    record = corpus_record(VOCAB, False, False)

    def chunks(step: int = 10_000):
        for a in range(0, len(offsets) - 1, step):
            o = offsets[a : a + step + 1]
            values = flow[o[0] : o[-1]]
            yield {"tokens": fl.Ragged(values, o - o[0], np.diff(o)[:, None], (None,))}

    fl.recfile.write_chunks(flr, record, chunks())
    docs = (flow[a:b] for a, b in zip(offsets[:-1].tolist(), offsets[1:].tolist()))
    build = fl.nndataset.Build({"size": VOCAB}, "random", "", len(offsets) - 1, train_docs=docs)
    fl.nndataset.write(nnd, build)  # streamed from the generator
    flow.tofile(flat)
    print(
        f"wrote {len(offsets) - 1:,} documents, {tokens:,} tokens "
        f"in {time.perf_counter() - t0:.1f} s"
    )
    return paths  # type: ignore[return-value]


def baseline(flat: str, steps: int) -> float:
    """nanoGPT's ``get_batch`` over the same tokens (``_nanogpt``)."""
    return get_batch_rate(flat, steps, SEQ, BATCH)


def loader_rate(path: str, steps: int) -> float:
    windows = fl.text.Windows(path, SEQ)
    loader = fl.Loader(windows, BATCH, seed=1)
    it = iter(loader)
    next(it)  # the first batch loads the kernels
    t0 = time.perf_counter()
    for _ in range(steps):
        b = next(it)
    assert b["input_ids"].shape == b["loss_mask"].shape == b["doc_ids"].shape == (BATCH, SEQ)
    rate = steps * BATCH * SEQ / (time.perf_counter() - t0)
    loader.close()
    windows.close()
    return rate


def getitems_rate(path: str, steps: int) -> float:
    with fl.text.Windows(path, SEQ) as windows:
        rng = np.random.default_rng(2)
        windows.getitems(rng.integers(0, len(windows), BATCH))
        t0 = time.perf_counter()
        for _ in range(steps):
            windows.getitems(rng.integers(0, len(windows), BATCH))
        return steps * BATCH * SEQ / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=100_000_000)
    ap.add_argument("--doc-mean", type=int, default=1000)
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--dir", default="/tmp/feedline-bench-compact")
    args = ap.parse_args()
    flr, nnd, flat = make_corpus(args.dir, args.tokens, args.doc_mean)
    warm_up()
    for path in (flr, nnd, flat):  # into the page cache
        with open(path, "rb") as f:
            while f.read(1 << 24):
                pass
    rows = [
        (
            baseline(flat, args.steps),
            loader_rate(flr, args.steps),
            loader_rate(nnd, args.steps),
            getitems_rate(flr, args.steps),
        )
        for _ in range(args.repeat)
    ]
    base, on_flr, on_nnd, kernel = (max(col) for col in zip(*rows))
    ratios = [r[1] / r[0] for r in rows]
    print(
        f"batches of {BATCH} windows of {SEQ} tokens, {args.tokens:,}-token corpus "
        f"(best of {args.repeat} x {args.steps} batches), tokens/s:"
    )
    print(f"  nanoGPT get_batch (uint16 memmap, np.stack) {base / 1e6:8.1f} M")
    print(
        f"  Loader(Windows(.flr, uint16))               {on_flr / 1e6:8.1f} M  "
        f"{on_flr / base:.2f}x (per run {min(ratios):.2f} - {max(ratios):.2f}x)"
    )
    print(
        f"  Loader(Windows(.nndataset, u64))            {on_nnd / 1e6:8.1f} M  {on_nnd / base:.2f}x"
    )
    print(
        f"  Windows(.flr).getitems, compiled kernel     {kernel / 1e6:8.1f} M  {kernel / base:.2f}x"
    )
    for name, path in (("flr", flr), ("nndataset", nnd), ("nanoGPT bin", flat)):
        print(f"  {name:<12} {os.path.getsize(path) / args.tokens:.3f} bytes/token")


if __name__ == "__main__":
    main()
