"""nanoGPT's ``get_batch``, the baseline of the text benchmarks (``windows.py``,
``compact_windows.py``, ``packing.py``): random offsets into a ``np.memmap`` of the
uint16 token flow, each window stacked as int64, inputs and targets."""

from __future__ import annotations

import time

import numpy as np


def get_batch_rate(flat: str, steps: int, seq: int, batch: int) -> float:
    """Tokens/s of ``steps`` batches of ``batch`` windows of ``seq`` tokens."""
    data = np.memmap(flat, dtype=np.uint16, mode="r")
    rng = np.random.default_rng(1)
    t0 = time.perf_counter()
    for _ in range(steps):
        ix = rng.integers(0, len(data) - seq, batch)
        x = np.stack([data[i : i + seq].astype(np.int64) for i in ix])
        y = np.stack([data[i + 1 : i + 1 + seq].astype(np.int64) for i in ix])
        assert x.shape == y.shape
    return steps * batch * seq / (time.perf_counter() - t0)
