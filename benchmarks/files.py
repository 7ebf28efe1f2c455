"""File benchmarks for .flr: a file as a loader source, write and verify throughput, and
anonymous memory while reading a file larger than 1 GB.

1. Shuffled batches of 512 from a 4,000,000-row .flr (64 float32 + an int64 label, in
   the page cache) through ``fl.Loader(fl.recfile.open(path), 512, seed=1)``, against the
   bare baseline in the same run: the RecFile's own memory-mapped columns, a precomputed
   permutation and ``np.take(..., out=..., mode="clip")`` into preallocated arrays; then
   both interleaved batch by batch in one pass, where the machine's drift cancels.
2. ``fl.recfile.write`` from in-memory columns (MB/s, fsync included) and
   ``RecFile.verify()`` over the cached file (GB/s).
3. RssAnon (``/proc/self/status``) before and while reading a .flr of more than 1 GiB in
   shuffled batches: the file's pages are file-backed (RssFile), so anonymous memory
   should grow by O(batch), not O(file).

    python benchmarks/files.py [--rows 4000000] [--repeat 3] [--dir /tmp]
"""

from __future__ import annotations

import argparse
import gc
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

import feedline as fl
from feedline.order._warm import warm_up

BATCH = 512


class Example(fl.Record, dims={"D": 64}):
    """64 float32 features and an int64 label."""

    x = fl.field("D", "float32")
    y = fl.field((), "int64")


def status() -> dict[str, int]:
    """RssAnon, RssFile and VmRSS of this process, in bytes."""
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            key, _, rest = line.partition(":")
            if key in ("RssAnon", "RssFile", "VmRSS"):
                out[key] = int(rest.split()[0]) * 1024
    return out


def best(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def columns(n: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"x": rng.standard_normal((n, 64), dtype=np.float32), "y": rng.integers(0, 10, n)}


def loader_vs_memmap(path: str, repeat: int) -> dict:
    f = fl.recfile.open(path)
    n = len(f)
    cols = f.columns  # the file's memory-mapped columns
    X, Y = cols["x"], cols["y"]
    perm = np.random.default_rng(1).permutation(n)
    out = {"x": np.empty((BATCH, 64), np.float32), "y": np.empty(BATCH, np.int64)}

    def memmap_epoch() -> int:
        rows = 0
        for s in range(0, n, BATCH):
            idx = perm[s : s + BATCH]
            np.take(X, idx, axis=0, out=out["x"][: len(idx)], mode="clip")
            np.take(Y, idx, axis=0, out=out["y"][: len(idx)], mode="clip")
            rows += len(idx)
        assert rows == n
        return rows

    def loader_epoch() -> int:
        rows = 0
        for batch in fl.Loader(f, BATCH, seed=1):
            rows += batch.meta.size
        assert rows == n
        return rows

    def next_into_epoch() -> int:
        loader = fl.Loader(f, BATCH, seed=1)
        rows = 0
        while k := loader.next_into(out):
            rows += k
        assert rows == n
        return rows

    memmap_epoch()  # the pages into the page cache and this process's page tables
    t_np = best(memmap_epoch, repeat)
    t_fl = best(loader_epoch, repeat)
    t_into = best(next_into_epoch, repeat)
    ratios = [interleaved(f, X, Y, perm, out) for _ in range(repeat)]
    t0 = time.perf_counter()
    next(iter(fl.Loader(fl.recfile.open(path), BATCH, seed=2)))
    first_ms = (time.perf_counter() - t0) * 1e3
    f.close()
    r_np, r_fl, r_into = n / t_np / 1e6, n / t_fl / 1e6, n / t_into / 1e6
    print(
        f"1. shuffled batches of {BATCH} from a {n:,}-row .flr (64 float32 + int64), "
        f"page cache, best of {repeat}"
    )
    print(
        f"   Loader(recfile.open(path)) iteration  {r_fl:7.2f} M rows/s  "
        f"({r_fl / r_np:.2f}x the memmap baseline)"
    )
    print(
        f"   Loader.next_into (caller's arrays)    {r_into:7.2f} M rows/s  ({r_into / r_np:.2f}x)"
    )
    print(
        f"   memmap baseline (np.take into preallocated arrays, mode='clip') {r_np:7.2f} M rows/s"
    )
    print(
        f"   batch by batch, interleaved with the baseline's (drift falls on both alike): "
        f"{' '.join(f'{r:.2f}x' for r in ratios)} over {repeat} passes"
    )
    print(f"   time to the first batch of a freshly opened file: {first_ms:.1f} ms")
    return {
        "interleaved": ratios,
        "loader_mps": r_fl,
        "next_into_mps": r_into,
        "memmap_mps": r_np,
        "ratio": r_fl / r_np,
        "first_batch_ms": first_ms,
    }


def write_and_verify(path: str, cols: dict[str, np.ndarray], repeat: int) -> dict:
    writes = []
    for _ in range(max(1, repeat - 1)):
        # a new file each time, as the plain baseline writes one: replacing an existing
        # 1 GB file also makes the file system free its blocks (up to 3x slower here)
        if os.path.exists(path):
            os.remove(path)
        t0 = time.perf_counter()
        fl.recfile.write(path, Example, cols)
        writes.append(time.perf_counter() - t0)
    size = os.path.getsize(path)
    plain = []  # the disk's own speed: the same bytes written and fsynced, no format
    for _ in range(max(1, repeat - 1)):
        t0 = time.perf_counter()
        with open(path + ".plain", "wb") as out:
            for col in cols.values():
                out.write(memoryview(np.ascontiguousarray(col)).cast("B"))
            out.flush()
            os.fsync(out.fileno())
        plain.append(time.perf_counter() - t0)
        os.remove(path + ".plain")
    with fl.recfile.open(path) as f:
        f.verify()  # warm
        t_verify = best(f.verify, repeat)
    w_mbs = size / min(writes) / 1e6
    p_mbs = size / min(plain) / 1e6
    v_gbs = size / t_verify / 1e9
    print(
        f"2. .flr of {size / 1e9:.3f} GB: write from in-memory columns {w_mbs:,.0f} MB/s "
        f"(best of {len(writes)}, CRC-32 + fsync + rename included), beside the same bytes "
        f"written plainly and fsynced: {p_mbs:,.0f} MB/s ({w_mbs / p_mbs:.2f}x); verify "
        f"{v_gbs:.2f} GB/s (page cache, best of {repeat})"
    )
    return {"write_mbs": w_mbs, "plain_write_mbs": p_mbs, "verify_gbs": v_gbs, "size": size}


def write_big(path: str, rows: int) -> float:
    """Write the part-3 file from generated chunks (never all in memory); its write time."""
    chunk = 250_000

    def chunks():
        for a in range(0, rows, chunk):
            yield columns(min(chunk, rows - a), seed=a)

    t0 = time.perf_counter()
    fl.recfile.write_chunks(path, Example, chunks())
    return time.perf_counter() - t0


def rss_while_reading(path: str) -> dict:
    """One shuffled pass over ``path``, sampling this process's memory (run in a fresh
    process, so that no memory freed by earlier parts hides the growth)."""
    size = os.path.getsize(path)
    f = fl.recfile.open(path)
    loader = fl.Loader(f, BATCH, seed=3)
    before = status()
    peak = dict(before)
    batches = 0
    t0 = time.perf_counter()
    for batch in loader:
        batches += 1
        assert batch.x.shape[1] == 64
        if batches % 16 == 0:
            now = status()
            peak = {k: max(peak[k], now[k]) for k in peak}
    elapsed = time.perf_counter() - t0
    after = status()
    peak = {k: max(peak[k], after[k]) for k in peak}
    f.close()
    batch_bytes = BATCH * (64 * 4 + 8)
    grow = peak["RssAnon"] - before["RssAnon"]
    print(
        f"   one shuffled pass of {batches:,} batches of {BATCH} in {elapsed:.1f} s, in a "
        f"fresh process"
    )
    print(
        f"   RssAnon before {before['RssAnon'] / 2**20:.1f} MiB, peak while reading "
        f"{peak['RssAnon'] / 2**20:.1f} MiB: growth {grow / 2**20:+.2f} MiB "
        f"(one batch is {batch_bytes / 2**20:.2f} MiB; the file is {size / 2**20:,.0f} MiB)"
    )
    print(
        f"   RssFile before {before['RssFile'] / 2**20:.1f} MiB, peak "
        f"{peak['RssFile'] / 2**20:,.1f} MiB (the mapped file's pages: page cache, not "
        f"anonymous memory)"
    )
    return {"rss_anon_growth": grow, "size": size, "batch_bytes": batch_bytes}


def interleaved(
    f, X: np.ndarray, Y: np.ndarray, perm: np.ndarray, out: dict[str, np.ndarray]
) -> float:
    """One pass where each loader batch follows one baseline batch; returns the ratio of
    the baseline's summed time to the loader's. This machine's speed drifts by 1.5x over
    minutes, so epochs run one after another compare drift as much as code."""
    clock = time.perf_counter
    it = iter(fl.Loader(f, BATCH, seed=1))
    t_np = t_fl = 0.0
    rows = 0
    for s in range(0, len(perm), BATCH):
        t0 = clock()
        idx = perm[s : s + BATCH]
        np.take(X, idx, axis=0, out=out["x"][: len(idx)], mode="clip")
        np.take(Y, idx, axis=0, out=out["y"][: len(idx)], mode="clip")
        t1 = clock()
        rows += next(it).size
        t_np += t1 - t0
        t_fl += clock() - t1
    assert rows == len(perm)
    return t_np / t_fl


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=4_000_000)
    parser.add_argument(
        "--big-rows",
        type=int,
        default=4_500_000,
        help="rows of the part-3 file (4.5M rows = 1.11 GiB)",
    )
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--dir", default=tempfile.gettempdir())
    parser.add_argument("--rss-of", default=None, help=argparse.SUPPRESS)  # part 3's child
    args = parser.parse_args()
    warm_up()
    if args.rss_of:
        rss_while_reading(args.rss_of)
        return
    directory = tempfile.mkdtemp(prefix="feedline-files-", dir=args.dir)
    try:
        path = os.path.join(directory, "examples.flr")
        cols = columns(args.rows, seed=0)
        write_and_verify(path, cols, args.repeat)
        del cols
        gc.collect()
        loader_vs_memmap(path, args.repeat)
        os.unlink(path)
        big = os.path.join(directory, "big.flr")
        t_write = write_big(big, args.big_rows)
        print(
            f"3. a {os.path.getsize(big) / 2**30:.2f} GiB .flr ({args.big_rows:,} rows, "
            f"written by write_chunks in {t_write:.1f} s)",
            flush=True,
        )
        subprocess.run([sys.executable, os.path.abspath(__file__), "--rss-of", big], check=True)
    finally:
        shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main()
