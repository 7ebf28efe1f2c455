"""What a batch and its metadata cost: ``fl.Batch(...)`` as the loader makes it, and the
first read of ``batch.meta.size`` / ``batch.meta.mask``, against a plain slotted object
of the same six attributes measured in the same run (the floor for any batch object).

The loader's fast path makes ~20k batches a second, so a batch must cost a few hundred
nanoseconds at most; the metadata is made only when read.

    python benchmarks/batch_meta.py [--repeat 7] [--number 200000]
"""

from __future__ import annotations

import argparse
import timeit

import numpy as np

import feedline as fl


class Floor:
    """Six attributes and a dict, as plain as it gets."""

    __slots__ = ("__dict__", "o", "p", "r", "rows", "s")

    def __init__(self, fields, size, rows, pos0, ordinals, records) -> None:
        self.__dict__ = fields
        self.s, self.rows, self.p, self.o, self.r = size, rows, pos0, ordinals, records


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--number", type=int, default=200_000)
    args = ap.parse_args()
    fields = {"x": np.zeros((64, 8), np.float32), "y": np.zeros(64, np.int64)}
    ords, recs = np.zeros(64, np.int64), np.arange(64)

    def best(fn) -> float:
        return min(timeit.repeat(fn, number=args.number, repeat=args.repeat)) / args.number

    floor = best(lambda: Floor(fields, 64, 64, 0, ords, recs))
    cases = {
        "fl.Batch(...)": lambda: fl.Batch(fields, 64, 64, 0, ords, recs),
        "... + batch.x": lambda: fl.Batch(fields, 64, 64, 0, ords, recs).x,
        "... + batch.meta.size": lambda: fl.Batch(fields, 64, 64, 0, ords, recs).meta.size,
        "... + batch.meta.mask": lambda: fl.Batch(fields, 64, 64, 0, ords, recs).meta.mask,
        "... + all of batch.meta": lambda: _all(fl.Batch(fields, 64, 64, 0, ords, recs).meta),
    }
    print(f"{'plain slotted object (floor)':32s} {floor * 1e9:8.0f} ns   1.00x")
    for name, fn in cases.items():
        t = best(fn)
        print(f"{name:32s} {t * 1e9:8.0f} ns {t / floor:6.2f}x")


def _all(meta) -> tuple:
    return (
        meta.size,
        meta.mask,
        meta.positions,
        meta.source_ordinals,
        meta.record_indices,
        meta.lengths,
    )


if __name__ == "__main__":
    main()
