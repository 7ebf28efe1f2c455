"""Language-model windows: feedline's ``Windows`` beside the nanoGPT-style baseline.

A corpus of ``--tokens`` random token ids (vocabulary 50,257) in documents of random
length (mean ``--doc-mean`` tokens) is written twice: as a ``.nndataset`` (u64 tokens,
the neuralnet.cpp layout) and as nanoGPT's ``train.bin`` (the same flow as uint16).
Both are in the page cache when measured. Each figure is the best of ``--repeat``
timed runs of ``--steps`` batches of 16 windows of 2048 tokens:

- baseline: nanoGPT's ``get_batch``: random offsets into a ``np.memmap`` of the uint16
  flow, ``np.stack`` of each window converted to int64, for inputs and targets;
- feedline: ``fl.Loader(fl.text.Windows(path, 2048), 16, seed=1)`` (shuffled, resumable),
  producing inputs, targets, loss mask and doc ids, with the C windows (the default)
  and, for reference, numba's kernel and the numpy path (``Windows.getitems`` without the
  loader);
- a fresh process's first batch of windows (``python -c``: import, open, first batch).

    python benchmarks/windows.py [--tokens 500000000] [--dir /tmp/feedline-bench-windows]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

import numpy as np
from _nanogpt import get_batch_rate  # benchmarks/, the script's folder

import feedline as fl
from feedline._base import kernels as _kernels
from feedline._base import windowfill
from feedline.order._warm import warm_up

SEQ, BATCH, VOCAB = 2048, 16, 50257


def make_corpus(folder: str, tokens: int, doc_mean: int) -> tuple[str, str]:
    """The corpus as a .nndataset and as a uint16 train.bin (kept for the next run)."""
    nnd = os.path.join(folder, f"corpus-{tokens}.nndataset")
    flat = os.path.join(folder, f"corpus-{tokens}.bin")
    if os.path.exists(nnd) and os.path.exists(flat):
        return nnd, flat
    os.makedirs(folder, exist_ok=True)
    rng = np.random.default_rng(0)
    t0 = time.perf_counter()
    flow = rng.integers(0, VOCAB, tokens, dtype=np.uint16)
    lengths = rng.geometric(1 / doc_mean, size=2 * tokens // doc_mean + 10)
    cuts = np.cumsum(lengths)
    cuts = cuts[cuts < tokens]
    docs = np.split(flow, cuts)  # views: the documents share the flow's memory
    flow.tofile(flat)
    fl.nndataset.write(
        nnd,
        fl.nndataset.Build({"size": VOCAB}, "random", "", len(docs), train_docs=docs, created=0),
    )
    print(f"wrote {len(docs):,} documents, {tokens:,} tokens in {time.perf_counter() - t0:.1f} s")
    return nnd, flat


def baseline(flat: str, steps: int) -> float:
    """nanoGPT's ``get_batch`` over the same tokens (``_nanogpt``)."""
    return get_batch_rate(flat, steps, SEQ, BATCH)


def loader_rate(nnd: str, steps: int) -> float:
    windows = fl.text.Windows(nnd, SEQ)
    loader = fl.Loader(windows, BATCH, seed=1)
    it = iter(loader)
    next(it)  # the first batch loads the kernels
    t0 = time.perf_counter()
    for _ in range(steps):
        b = next(it)
    assert b["input_ids"].shape == (BATCH, SEQ)
    rate = steps * BATCH * SEQ / (time.perf_counter() - t0)
    loader.close()
    windows.close()
    return rate


def getitems_rate(nnd: str, steps: int, way: str) -> float:
    """``Windows.getitems`` per second, ``way`` "c", "numba" or "numpy"."""
    windows = fl.text.Windows(nnd, SEQ)
    rng = np.random.default_rng(2)
    get, c = _kernels.get, windowfill.available
    if way != "c":
        windowfill.available = lambda: False  # type: ignore[assignment]
    if way == "numpy":
        _kernels.get = lambda: None
    try:
        windows.getitems(rng.integers(0, len(windows), BATCH))
        t0 = time.perf_counter()
        for _ in range(steps):
            windows.getitems(rng.integers(0, len(windows), BATCH))
        rate = steps * BATCH * SEQ / (time.perf_counter() - t0)
    finally:
        _kernels.get, windowfill.available = get, c  # type: ignore[assignment]
        windows.close()
    return rate


_FIRST = """
import time
t0 = time.perf_counter()
import feedline as fl
t1 = time.perf_counter()
w = fl.text.Windows({path!r}, {seq})
b = next(iter(fl.Loader(w, {batch}, seed=1)))
print(t1 - t0, time.perf_counter() - t1)
"""


def first_batch(nnd: str, native: bool) -> tuple[float, float]:
    """A fresh process's seconds to import feedline, then to its first batch of windows
    (opening the file and making the loader included)."""
    env = {**os.environ, "FEEDLINE_NATIVE": "1" if native else "0"}
    code = _FIRST.format(path=nnd, seq=SEQ, batch=BATCH)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    imported, first = out.stdout.split()[-2:]
    return float(first), float(imported)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=500_000_000)
    ap.add_argument("--doc-mean", type=int, default=1000)
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--dir", default="/tmp/feedline-bench-windows")
    args = ap.parse_args()
    nnd, flat = make_corpus(args.dir, args.tokens, args.doc_mean)
    warm_up()
    for path in (nnd, flat):  # into the page cache
        with open(path, "rb") as f:
            while f.read(1 << 24):
                pass
    rows = []
    for _ in range(args.repeat):
        rows.append(
            (
                baseline(flat, args.steps),
                loader_rate(nnd, args.steps),
                getitems_rate(nnd, args.steps, "c"),
                getitems_rate(nnd, args.steps, "numba"),
                getitems_rate(nnd, args.steps // 10, "numpy"),
            )
        )
    base, loader, c, kernel, numpy_path = (max(col) for col in zip(*rows))
    firsts = {n: sorted(first_batch(nnd, n) for _ in range(3)) for n in (True, False)}
    ratios = [r[1] / r[0] for r in rows]
    print(
        f"batches of {BATCH} windows of {SEQ} tokens, {args.tokens:,}-token corpus "
        f"(best of {args.repeat} x {args.steps} batches), tokens/s:"
    )
    print(f"  nanoGPT get_batch (uint16 memmap, np.stack) {base / 1e6:8.1f} M")
    print(
        f"  feedline Loader(Windows, seed=1)            {loader / 1e6:8.1f} M  "
        f"{loader / base:.2f}x (per run {min(ratios):.2f} - {max(ratios):.2f}x)"
    )
    print(f"  Windows.getitems, C (the default)           {c / 1e6:8.1f} M  {c / base:.2f}x")
    print(
        f"  Windows.getitems, numba's kernel            {kernel / 1e6:8.1f} M  {kernel / base:.2f}x"
    )
    print(
        f"  Windows.getitems, numpy path                {numpy_path / 1e6:8.1f} M  "
        f"{numpy_path / base:.2f}x"
    )
    for native, label in ((True, "C"), (False, "numba (FEEDLINE_NATIVE=0)")):
        ms = ", ".join(f"{t * 1e3:.0f}" for t, _ in firsts[native])
        imports = ", ".join(f"{i * 1e3:.0f}" for _, i in firsts[native])
        print(f"  a fresh process's first batch, {label}: {ms} ms (its import: {imports} ms)")


if __name__ == "__main__":
    main()
