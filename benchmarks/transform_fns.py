"""The transform of benchmarks/transforms.py, in a module of its own: worker processes
import a map's function by its module, and never a program's ``__main__``."""

import numpy as np


def slow(example, rng):
    """About 40-50 us of pure Python, then a little noise from the example's generator."""
    acc = 0.0
    for _ in range(1500):
        acc += 1.0
    return {"x": example["x"] + rng.random(64, dtype=np.float32) * (acc * 0), "y": example["y"]}
