"""``convert`` of tables to ``.flr`` (issue 19): the Parquet file of
``benchmarks/parquet.py`` (16 float32 features, an int64 label, a float32 weight and a
short string; row groups of 65,536) and the same rows as an HF ``save_to_disk``
directory, beside the hand-written path in the same run: pyarrow reads the table,
its columns become numpy arrays (the string column a ``Ragged`` from Arrow's offsets,
the fastest hand path there is), ``recfile.write`` writes them.

Every trial runs in a fresh child process (spawned: no page of a former trial is the
child's), timing itself and reporting its peak RSS; figures are the best of
``--repeat``, and the spread of the trials is printed as the noise. Then peak RSS of
each for a file ``--big`` times as many rows (the hand path holds the whole table; the
conversion a row group and a chunk).

    python benchmarks/parquet_convert.py [--rows 1000000] [--repeat 3] [--big 5]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import resource
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def _hand(src: str, dst: str) -> int:
    """pyarrow -> numpy -> recfile.write, by hand."""
    import numpy as np
    import pyarrow.parquet as pq

    import feedline as fl

    table = pq.read_table(src)
    cols: dict[str, object] = {}
    for name in table.column_names:
        arr = table.column(name).combine_chunks()
        if name == "text":  # a Ragged of the UTF-8 bytes, from Arrow's buffers
            offsets = np.frombuffer(arr.buffers()[1], np.int32)[: len(arr) + 1].astype(np.int64)
            values = np.frombuffer(arr.buffers()[2], np.uint8)[: offsets[-1]]
            cols[name] = fl.Ragged(values, offsets, np.diff(offsets)[:, None], (None,))
        else:
            cols[name] = arr.to_numpy()
    record = fl.sources.parquet(src).record
    return fl.recfile.write(dst, record, cols, check_values=False)


def _convert(src: str, dst: str) -> int:
    from feedline.formats.convert import convert

    return convert(src, dst)


def _trial(which: str, src: str, dst: str, out: mp.Queue) -> None:
    fn = _hand if which == "hand" else _convert
    t = time.perf_counter()
    rows = fn(src, dst)
    seconds = time.perf_counter() - t
    out.put((seconds, rows, peak_rss()))


def peak_rss() -> int:
    """This process's peak RSS in bytes: VmHWM, which a new program starts afresh
    (ru_maxrss keeps the forking parent's across exec: the file writer's 1 GB here)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def run(which: str, src: str, dst: str) -> tuple[float, int, int]:
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=_trial, args=(which, src, dst, q))
    p.start()
    result = q.get()
    p.join()
    os.unlink(dst)
    return result


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--big", type=int, default=5, help="the RSS file: this many times the rows")
    p.add_argument("--no-hf", action="store_true")
    args = p.parse_args()
    from parquet import write

    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "data.parquet")
        write(src, args.rows)
        dst = os.path.join(tmp, "out.flr")
        print(
            f"{args.rows:,} rows ({os.path.getsize(src) / 1e6:.0f} MB of Parquet) to .flr; "
            f"best of {args.repeat}, each in a fresh process"
        )

        def show(name: str, s: float, times: list[float], rss: int, base: float) -> None:
            spread = ", ".join(f"{t:.2f}" for t in times)
            print(
                f"  {name:<40} {s:6.2f} s  {base / s:5.2f}x hand  peak RSS "
                f"{rss / 2**20:5.0f} MiB  (trials {spread} s)"
            )

        hf = None
        if not args.no_hf:
            import datasets
            from datasets.utils.logging import disable_progress_bar

            disable_progress_bar()
            hf = os.path.join(tmp, "hf")
            datasets.Dataset.from_parquet(src, cache_dir=os.path.join(tmp, "c")).save_to_disk(hf)
        # trials interleaved (hand, convert, HF; again), so that the load of the shared
        # machine falls on each alike
        runs = [("hand", src), ("convert", src)] + ([("convert", hf)] if hf else [])
        trials: dict[int, list[tuple[float, int, int]]] = {k: [] for k in range(len(runs))}
        for _ in range(args.repeat):
            for k, (which, path) in enumerate(runs):
                trials[k].append(run(which, path, dst))
        names = [
            "hand: pyarrow -> numpy -> recfile.write",
            "feedline convert data.parquet out.flr",
            "feedline convert hf_dir out.flr",
        ]
        hand_s = min(t for t, _, _ in trials[0])
        rows = trials[0][0][1]
        for k in trials:
            times = [t for t, _, _ in trials[k]]
            assert all(r == rows for _, r, _ in trials[k])
            show(names[k], min(times), times, max(m for _, _, m in trials[k]), hand_s)
        ours_s = min(t for t, _, _ in trials[1])
        print(f"  convert / hand: {hand_s / ours_s:.2f}x (target >= 0.8x)")
        if args.big > 1:
            big = os.path.join(tmp, "big.parquet")
            os.unlink(src)
            write(big, args.rows * args.big)
            import pyarrow.parquet as pq

            decoded = pq.ParquetFile(big).metadata
            size = sum(decoded.row_group(g).total_byte_size for g in range(decoded.num_row_groups))
            print(
                f"{args.rows * args.big:,} rows ({os.path.getsize(big) / 1e6:.0f} MB of "
                f"Parquet, {size / 2**20:.0f} MiB decoded, {decoded.num_row_groups} row "
                f"groups): peak RSS of one trial each"
            )
            for which, name in (("hand", "hand path"), ("convert", "feedline convert")):
                s, _, rss = run(which, big, dst)
                print(f"  {name:<40} {s:6.2f} s  peak RSS {rss / 2**20:5.0f} MiB")


if __name__ == "__main__":
    main()
