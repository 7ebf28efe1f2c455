"""``feedline bench FILE``: the loader on the user's own file, beside numpy's gather.

One shuffled pass after another through ``fl.Loader`` over the file (``.flr``,
``.ndf``, ``.parquet``, ``.arrow`` / ``.feather``), in this fresh process: the first
pass is timed apart (what a job's first epoch sees), then the loader's own
``stats()`` say where the time went. The baseline, in the same process on the same
rows and the same order: numpy's ``take`` from the file's memory-mapped columns (or
from the columns read into memory, for a file that does not map), a batch at a time;
where the page cache held less of the files before the loader's first pass than before
numpy's (the loader read them from the disk), the comparison says so.

``feedline bench ORDER.json --source FILE ...``: the same over an order configuration
(``Seq.to_json``: a mix, a curriculum) and the files of its sources, in its order; the
baseline takes each batch's rows from each source it draws on.

``feedline bench MANIFEST.json``: the same over a manifest's ``.flr`` shards, shuffled as
one dataset (``open_manifest(path).seq().shuffle(1)``).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import mmap
import os
import stat
import sys
import time
from typing import Any

import numpy as np

from ..errors import FormatError
from ..loader import Loader
from ..order import Order
from ..order._schedule import by_part
from ..records import Ragged

# ``cached_share`` asks about this much of a file at a time (a vector of 16k bytes).
_WINDOW = 64 << 20


def open_source(path: str) -> Any:
    """The typed source of ``path``, by its suffix."""
    suffix = os.path.splitext(path)[1].lower()
    if suffix == ".flr":
        from ..formats import recfile

        return recfile.open(path)
    if suffix == ".ndf":
        from ..formats import ndf

        return ndf.open(path)
    if suffix in (".parquet", ".pq"):
        from ..sources import parquet

        return parquet(path)
    if suffix in (".arrow", ".feather", ".ipc"):
        from ..sources import arrow

        return arrow(path)
    raise FormatError(
        "feedline bench FILE takes a .flr, .ndf, .parquet or .arrow/.feather file", path
    )


def _columns(src: Any, n: int) -> dict[str, Any]:
    """The file's columns for numpy's gather: memory-mapped where the file maps."""
    cols = getattr(src, "columns", None)
    if isinstance(cols, dict) and cols:
        return cols
    return src.getitems(np.arange(n))


def _take(cols: dict[str, Any], recs: np.ndarray) -> None:
    for col in cols.values():
        if isinstance(col, Ragged):
            _numpy_padded(col, recs)
        else:
            np.take(col, recs, axis=0)


def _numpy_padded(col: Ragged, recs: np.ndarray) -> np.ndarray:
    """A ragged column's batch as a user would write it in numpy, padded as the loader
    pads it: one take of offsets, one masked fill of the padded rows (elements in C
    order; benchmarks/varlen.py's baseline)."""
    offsets = col.offsets
    starts = np.asarray(offsets[recs], dtype=np.int64)
    counts = np.asarray(offsets[recs + 1], dtype=np.int64) - starts
    width = int(counts.max()) if len(counts) else 0
    inside = np.arange(width) < counts[:, None]
    out = np.zeros((len(recs), width), dtype=col.values.dtype)
    out[inside] = col.values[(starts[:, None] + np.arange(width))[inside]]
    return out


def _numpy_pass(each: list[dict[str, Any]], batches: list[tuple]) -> float:
    """Seconds for numpy's gather of every batch (``(sources, records)``; a ragged
    column padded by numpy, ``_numpy_padded``), from each source a batch draws on."""
    t = time.perf_counter()
    for ords, recs in batches:
        if len(each) == 1:
            _take(each[0], recs)
            continue
        for o, at in by_part(ords, len(each)):  # many sources: one sort, not a scan each
            _take(each[o], recs[at])
    return time.perf_counter() - t


def numpy_passes(
    paths: list[str], lengths: list[int], batches: list[tuple], later: int
) -> tuple[float, list[float]]:
    """Seconds of numpy's gather of ``batches``: its first pass over a fresh opening of
    the file (a new memory map, whose pages fault in as the loader's first pass's did),
    then ``later`` passes over the same columns (mapped by then, as the loader's later
    passes find its own). The file's pages are in the page cache by then: a first pass
    of the loader's that read them from the disk is slower than this for that."""
    srcs = [open_source(path) for path in paths]
    try:
        each = [_columns(src, n) for src, n in zip(srcs, lengths)]
        first = _numpy_pass(each, batches)
        again = [_numpy_pass(each, batches) for _ in range(later)]
        del each  # the maps' views, before the files close
        return first, again
    finally:
        for src in srcs:
            close = getattr(src, "close", None)
            if close is not None:
                close()


def cached_share(paths: list[str]) -> float | None:
    """The share of the files' pages in the page cache now (Linux's ``mincore`` over a
    read-only map of each, a window at a time, which reads nothing); None where that
    cannot be told (another system, a remote path, anything but regular files, an empty
    file set)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        mincore = libc.mincore
        mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    except (OSError, AttributeError):
        return None
    resident = total = 0
    vec = np.zeros(_WINDOW // mmap.PAGESIZE, dtype=np.uint8)  # one byte a page
    for path in paths:
        try:
            # not blocking: a FIFO's open waits for a writer
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        except (OSError, ValueError):
            return None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                return None
            if st.st_size == 0:
                continue
            with mmap.mmap(fd, st.st_size, access=mmap.ACCESS_READ) as m:
                head = np.frombuffer(m, dtype=np.uint8, count=1)  # the map's address
                base = head.ctypes.data
                del head  # before the map closes
                for at in range(0, st.st_size, _WINDOW):
                    size = min(_WINDOW, st.st_size - at)
                    pages = -(-size // mmap.PAGESIZE)
                    if mincore(base + at, size, vec.ctypes.data) != 0:
                        return None
                    resident += int(np.count_nonzero(vec[:pages] & 1))
                    total += pages
        except (OSError, ValueError, BufferError):
            return None
        finally:
            os.close(fd)
    return resident / total if total else None


def compared(
    n: int,
    loader_s: list[float],
    first_s: float,
    later_s: list[float],
    cached: tuple[float | None, float | None] = (None, None),
) -> str:
    """The loader's passes (seconds of ``n`` rows each) beside numpy's, like with like:
    the first pass beside numpy's first over a fresh opening, the later passes' median
    beside numpy's later passes' median (the best of numpy's against the mean of the
    loader's passes, the first among them, would tell a mapped file's page faults for
    the loader's cost). ``cached``: the share of the files in the page cache before the
    loader's first pass and before numpy's (``cached_share``); where the loader's found
    less of them there, its first pass read the rest from the disk, and the line says so."""
    numpy_later = n / float(np.median(later_s))
    first = (n / loader_s[0]) / (n / first_s)
    head = f"numpy's gather of the same batches: {numpy_later:,.0f} rows/s; the loader's "
    tail = (
        f"first pass is {first:.2f}x numpy's first ({n / first_s:,.0f} rows/s over a fresh opening)"
    )
    before, then = cached
    if before is not None and then is not None and before < then - 0.05:
        tail += (
            f"; but the files were {before:.0%} in the page cache before the loader's first "
            f"pass and {then:.0%} before numpy's: the loader's first pass read the rest from "
            "the disk, numpy's did not (run again to compare the first passes with the files "
            "cached)"
        )
    if len(loader_s) < 2:
        return head + tail
    later = (n / float(np.median(loader_s[1:]))) / numpy_later
    return head + f"later passes' median is {later:.2f}x that, its " + tail


def _sources(args: argparse.Namespace) -> tuple[Any, list[str], list[Any]]:
    """What the loader reads (a file's source, an order configuration over the files of
    ``--source``, or a manifest's shards shuffled as one), the files, and their opened
    sources."""
    if not args.file.lower().endswith(".json"):
        if args.source:
            raise FormatError("--source FILE goes with an order configuration (.json)", args.file)
        src = open_source(args.file)
        return src, [args.file], [src]
    from ..order import Seq

    with open(args.file, encoding="utf-8") as f:
        text = f.read()
    if _is_manifest(text):
        return _manifest(args)
    wanted = len(Seq.from_json(text).sources())
    paths = list(args.source or [])
    if len(paths) != wanted:
        raise FormatError(
            f"the order configuration has {wanted} sources: give each one's file, in its "
            f"order, with --source FILE (found {len(paths)})",
            args.file,
        )
    srcs = [open_source(path) for path in paths]
    return Seq.from_json(text, srcs), paths, srcs


def _is_manifest(text: str) -> bool:
    from ..formats.manifest import KIND

    try:
        doc = json.loads(text)
    except ValueError:
        return False  # the order configuration's reader says what is wrong with it
    return isinstance(doc, dict) and doc.get("kind") == KIND


def _manifest(args: argparse.Namespace) -> tuple[Any, list[str], list[Any]]:
    """A manifest's ``.flr`` shards shuffled as one dataset, their files and handles."""
    from ..manifest import open_manifest

    if args.source:
        raise FormatError(
            "--source FILE goes with an order configuration, not a manifest", args.file
        )
    m = open_manifest(args.file)
    if m.format != "flr":
        m.close()
        raise FormatError(
            f"feedline bench reads a manifest of .flr shards; this one lists .{m.format} shards",
            args.file,
        )
    # the loader's datasets keep shares of the files; the handles serve numpy's lengths
    return m.seq().shuffle(1), [h.path for h in m.handles], list(m.handles)


def run(args: argparse.Namespace) -> int:
    started = time.perf_counter()
    source, paths, srcs = _sources(args)
    t = time.perf_counter()
    cached_before = cached_share(paths)  # (not counted in the first pass's time)
    started += time.perf_counter() - t
    loader = Loader(
        source,
        args.batch,
        seed=args.seed,
        workers=args.workers,
        threads=args.threads,
    )
    record = loader.record
    n = len(srcs[0]) if source is srcs[0] else Order(source).length  # the rows a pass
    of = "" if source is srcs[0] else f" in the order over {len(srcs)} files"
    print(
        f"{args.file}: {n:,} rows{of} of {record.__name__} "
        f"({', '.join(record.fields)}); batches of {args.batch}, workers "
        f"{loader.options.workers}, threads {loader.options.threads}"
    )
    order: list[tuple] = []
    passes: list[float] = []
    for p in range(args.passes):
        t = time.perf_counter()
        rows = 0
        for batch in loader:
            m = batch.meta
            rows += m.size
            if p == 0:
                order.append(
                    (
                        np.asarray(m.source_ordinals[: m.size]),
                        np.asarray(m.record_indices[: m.size]),
                    )
                )
        seconds = time.perf_counter() - t
        first = " (the first: from making the loader, in this fresh process)" if p == 0 else ""
        if p == 0:
            seconds = time.perf_counter() - started
        passes.append(seconds)
        print(f"pass {p}: {rows / seconds:,.0f} rows/s{first}")
    stats = loader.stats()
    print(stats)
    loader.close()
    lengths = [len(src) for src in srcs]
    cached_then = cached_share(paths)
    first_s, later_s = numpy_passes(paths, lengths, order, max(1, args.passes - 1))
    print(compared(n, passes, first_s, later_s, (cached_before, cached_then)))
    for src in srcs:
        close = getattr(src, "close", None)
        if close is not None:
            close()
    return 0


def add_options(bench: argparse.ArgumentParser) -> None:
    bench.add_argument(
        "file",
        nargs="?",
        help="a .flr, .ndf, .parquet or .arrow file: the loader over it; an order "
        "configuration (.json, Seq.to_json) with --source for each of its sources; or a "
        "manifest of .flr shards (.json), shuffled as one dataset",
    )
    bench.add_argument(
        "--source",
        action="append",
        metavar="FILE",
        help="with ORDER.json: the file of its next source (repeat, in the order's order)",
    )
    bench.add_argument("--batch", type=int, default=512, help="batch size (512)")
    bench.add_argument("--workers", type=int, default=0, help="worker processes (0)")
    bench.add_argument("--threads", type=int, default=None, help="gather threads (auto)")
    bench.add_argument("--passes", type=int, default=2, help="shuffled passes (2)")
    bench.add_argument("--seed", type=int, default=1, help="the order's seed (1)")
