"""The demo's gather figures: shuffled batches of 512 from a 1,000,000-row .flr (64
float32 + a label), numpy's own gather from the memory map beside feedline's loader
(0 and 2 workers: a plain gather stays in the calling process either way), and the
same rows as a mix of two .flr files of half as many rows each (the plain path takes
each source's rows at once), and as 256 shard files shuffled as one dataset (what a
manifest's ``seq().shuffle(1)`` is)."""

from __future__ import annotations

import os
import time

import numpy as np

from .. import recfile
from ..loader import Loader
from ..order import Seq
from ..records import Record, field

SHARDS = 256


class Row(Record, dims={"D": 64}):
    """64 features and a label."""

    x = field("D", "float32")
    y = field((), "int64")


def gather_bench(out_dir: str, rows: int = 1_000_000) -> dict[str, float]:
    """Rows/s of each way (the best of three rounds, interleaved)."""
    path = os.path.join(out_dir, "bench.flr")
    halves = [os.path.join(out_dir, f"bench-half{k}.flr") for k in (0, 1)]
    shards = [os.path.join(out_dir, f"bench-shard{k:03d}.flr") for k in range(SHARDS)]
    rng = np.random.default_rng(0)
    x = rng.standard_normal((rows, 64), dtype=np.float32)
    recfile.write(path, Row, {"x": x, "y": np.arange(rows)})
    cut = rows // 2
    for k, part in enumerate((slice(0, cut), slice(cut, rows))):
        recfile.write(halves[k], Row, {"x": x[part], "y": np.arange(rows)[part]})
    for k, shard in enumerate(shards):
        part = slice(rows * k // SHARDS, rows * (k + 1) // SHARDS)
        recfile.write(shard, Row, {"x": x[part], "y": np.arange(rows)[part]})
    f = recfile.open(path)
    parts = [recfile.open(h) for h in halves]
    mix = Seq.mix([Seq.source(parts[0]).shuffle(1), Seq.source(parts[1]).shuffle(2)])
    pieces = [recfile.open(p) for p in shards]
    sharded = Seq.concat([Seq.source(p) for p in pieces]).shuffle(1)
    X, Y = f.columns["x"], f.columns["y"]
    perm = rng.permutation(rows)
    results: dict[str, list[float]] = {
        "numpy gather": [],
        "feedline, 0 workers": [],
        "feedline, 2 workers": [],
        "feedline, a mix of 2 files": [],
        f"feedline, {SHARDS} shards": [],
    }
    for _ in range(3):
        t = time.perf_counter()
        for s in range(0, rows, 512):
            idx = perm[s : s + 512]
            X.take(idx, axis=0)
            Y.take(idx, axis=0)
        results["numpy gather"].append(rows / (time.perf_counter() - t))
        for w in (0, 2):
            t = time.perf_counter()
            with Loader(f, 512, seed=1, workers=w) as loader:
                for _ in loader:
                    pass
            results[f"feedline, {w} workers"].append(rows / (time.perf_counter() - t))
        t = time.perf_counter()
        with Loader(mix, 512, seed=1) as loader:
            for _ in loader:
                pass
        results["feedline, a mix of 2 files"].append(rows / (time.perf_counter() - t))
        t = time.perf_counter()
        with Loader(sharded, 512, seed=1) as loader:
            for _ in loader:
                pass
        results[f"feedline, {SHARDS} shards"].append(rows / (time.perf_counter() - t))
    for opened in (f, *parts, *pieces):
        opened.close()
    for p in (path, *halves, *shards):
        os.remove(p)
    return {k: max(v) for k, v in results.items()}
