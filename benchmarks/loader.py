"""Loader benchmark (issue 3): 4,000,000 in-memory examples of 64 float32 + an int64
label, shuffled, batches of 512, against numpy's own gather and torch's DataLoader.

    python benchmarks/loader.py
"""

from feedline.cli.bench import bench_loader
from feedline.order._warm import warm_up

if __name__ == "__main__":
    warm_up()
    bench_loader(4_000_000, 3)
