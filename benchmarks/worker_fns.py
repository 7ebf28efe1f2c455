"""Importable pieces of benchmarks/workers.py (workers import them, never ``__main__``)."""

from __future__ import annotations

import time

import numpy as np

import feedline as fl


class Example(fl.Record, dims={"D": 64}):
    x = fl.field("D", "float32")
    y = fl.field((), "int64")


def jitter(example, rng):
    """A light augmentation: noise from the example's own generator."""
    return {"x": example["x"] + rng.standard_normal(64, dtype=np.float32), "y": example["y"]}


def normalise(batch):
    """A batch transform: the features scaled to unit norm per row."""
    x = batch.x / np.linalg.norm(batch.x, axis=1, keepdims=True)
    return {"x": x, "y": batch.y, "size": batch.meta.size}


def augment_rows(batch):
    """A batch transform with Python per row (a crop offset drawn and applied per row)."""
    x = batch.x.copy()
    for r in range(len(x)):
        k = int(batch.y[r]) % 8
        x[r] = np.roll(x[r], k) * (1.0 + 0.01 * k)
    return {"x": x, "y": batch.y, "size": batch.meta.size}


class NotCheap(fl.Dataset):
    """A dataset whose gathers the loader treats as not cheap: to measure plain gathers
    through workers (the loader keeps them in process otherwise)."""

    cheap_gathers = False

    @classmethod
    def of(cls, ds: fl.Dataset) -> NotCheap:
        out = object.__new__(cls)
        out.__dict__.update(ds.__dict__)
        return out


class SlowItems:
    """An item-by-item source that spends 50 us per item (decoding, say)."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict:
        end = time.perf_counter() + 50e-6
        while time.perf_counter() < end:
            pass
        return {"x": np.full(64, i % 7, np.float32), "y": i}
