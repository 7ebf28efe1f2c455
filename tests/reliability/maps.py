"""Per-example functions for mapped datasets that go to worker processes.

They live in a module of their own, importing only numpy and time, so a worker imports
them quickly (workers unpickle a dataset's functions by module and name).
"""

from __future__ import annotations

import time

import numpy as np


def identity(example: dict) -> dict:
    """The example unchanged: a mapped dataset is read in the workers, not in process."""
    return example


def slow_identity(example: dict) -> dict:
    """The example unchanged after 2 ms: keeps the workers busy (a kill lands mid-batch)."""
    time.sleep(0.002)
    return example


def jitter(example: dict, rng: np.random.Generator) -> dict:
    """An augmentation: noise on ``x`` from the example's own generator."""
    noise = rng.standard_normal(example["x"].shape).astype(np.float32)
    return {**example, "x": example["x"] + noise}
