"""Grain's packing of the pieces ``benchmarks/packing.py`` packs (run by packing.py, in
an environment that has ``grain``; it needs only grain and numpy, not feedline).

    python benchmarks/packing_grain.py SIZES.npy ROW_LENGTH BINS [BINS ...]

``SIZES.npy`` holds each piece's length, in the order of the pass; each becomes one
example ``{"tokens": int32[length]}`` of a ``grain.MapDataset`` iterated in that order
through ``grain.experimental.FirstFitPackIterDataset`` and ``BestFitPackIterDataset``
(``length_struct={"tokens": ROW_LENGTH}``, ``num_packing_bins=BINS``, bins not
shuffled). Prints one JSON line per (strategy, bins): rows, padding (the fraction of
the rows' cells whose segment id is 0) and seconds.
"""

from __future__ import annotations

import json
import sys
import time

import numpy as np


def main() -> None:
    import grain
    import grain.experimental as ge

    sizes = np.load(sys.argv[1])
    row = int(sys.argv[2])
    total = int(sizes.sum())
    for bins in map(int, sys.argv[3:]):
        for name, cls in (
            ("first_fit", ge.FirstFitPackIterDataset),
            ("best_fit", ge.BestFitPackIterDataset),
        ):
            ds = grain.MapDataset.source(sizes).map(
                lambda n: {"tokens": np.ones(int(n), dtype=np.int32)}
            )
            packed = cls(
                ds.to_iter_dataset(),
                length_struct={"tokens": row},
                num_packing_bins=bins,
                shuffle_bins=False,
            )
            t0 = time.perf_counter()
            rows = real = 0
            for ex in packed:
                seg = ex["tokens_segment_ids"]
                rows += 1
                real += int(np.count_nonzero(seg))
            seconds = time.perf_counter() - t0
            assert real == total, (real, total)  # every token of every piece, once
            print(
                json.dumps(
                    {
                        "strategy": name,
                        "bins": bins,
                        "rows": rows,
                        "padding": 1 - real / (rows * row),
                        "seconds": seconds,
                    }
                ),
                flush=True,
            )


if __name__ == "__main__":
    main()
