"""``feedline inspect``, ``feedline verify`` and ``feedline convert``.

A file that cannot be read or written, or converted to the format its name asks for,
is a one-line error naming it (exit status 2); feedline's own errors reach ``main``.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from ..errors import FeedlineError, FormatError
from ..formats import convert as _convert
from ..formats import ndf, recfile
from ..records import Ragged
from ._report import fail, is_within, reason


def _size(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if n < 1024 or unit == "TB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1024
    return f"{n} B"


def _reading(work: Callable[[str], int], path: str) -> int:
    """``work(path)``, with a file that cannot be read as a one-line error (exit 2);
    feedline's own errors go to the command line's handler."""
    try:
        return work(path)
    except FeedlineError:
        raise
    except (OSError, ValueError) as e:
        return fail(f"cannot read {path}: {reason(e, path)}")


def inspect(path: str) -> int:
    return _reading(_inspect, path)


def _sniff(path: str) -> str:
    """The file's format; anything but a regular file or a dataset directory is a
    ``FormatError`` naming it (a FIFO is never opened for reading: it would block)."""
    kind = _convert.sniff(path)
    if kind == "unknown" and os.path.isdir(path):
        raise FormatError("expected a file feedline reads, found a directory", path, 0)
    return kind


def _inspect(path: str) -> int:
    kind = _sniff(path)
    size = os.path.getsize(path) if os.path.isfile(path) else 0
    print(f"{path}: {kind}, {_size(size)}")
    if kind == "ndf":
        with ndf.open(path) as f:
            print(
                f"  rows {f.n:,}; {f.d} f64 features and {f.l} f64 labels a row "
                f"({(f.d + f.l) * 8} bytes)"
            )
    elif kind == "flr":
        with recfile.open(path) as f:
            print(f"  rows {len(f):,}")
            for line in f.record.describe().splitlines():
                print(f"  {line}")
            for name, (off, length, crc) in f._crcs.items():
                print(f"  column {name}: at byte {off:,}, {_size(length)}, crc32 {crc:#010x}")
            for line in _distributions(f):
                print(f"  {line}")
    elif kind in ("nndataset", "nnvocab"):
        from ..formats import nndataset

        with nndataset.open(path) as f:
            info = f.info
            for key, value in vars(info).items():
                if key == "vocab":
                    value = f"{len(value)} fields ({', '.join(list(value)[:6])})"
                print(f"  {key}: {value}")
    elif kind in ("parquet", "arrow"):
        from .. import sources

        src: Any = sources.parquet(path) if kind == "parquet" else sources.arrow(path)
        groups = src.n_groups if kind == "parquet" else src.n_batches
        what = "row groups" if kind == "parquet" else "record batches"
        print(f"  rows {len(src):,} in {groups:,} {what}; the record it reads as:")
        for line in src.record.describe().splitlines():
            print(f"  {line}")
    else:
        print("  (not a file feedline reads)")
        return 2
    return 0


def _spread(values: np.ndarray) -> str:
    if not len(values):
        return "no rows"
    return f"min {int(values.min()):,}, median {np.median(values):,g}, max {int(values.max()):,}"


def _distributions(f: recfile.RecFile) -> list[str]:
    """Each varying dim's lengths and each bytes or str field's sizes, over every row."""
    lines = []
    for name, col in f.columns.items():
        field = f.record.fields[name]
        if not isinstance(col, Ragged):
            continue
        if field.kind != "array":
            sizes = np.diff(np.asarray(col.offsets))
            what = "bytes" if field.kind == "bytes" else "bytes of UTF-8"
            lines.append(f"sizes of {name} ({field.kind}, {what}): {_spread(sizes)}")
            continue
        shapes = np.asarray(col.shapes).reshape(len(col), len(field.varying))
        for k, dim in enumerate(field.varying):
            lines.append(f"lengths of {name} ({dim}): {_spread(shapes[:, k])}")
    return lines


def verify(path: str) -> int:
    return _reading(_verify, path)


def _verify(path: str) -> int:
    kind = _sniff(path)
    t = time.perf_counter()
    if kind == "ndf":
        with ndf.open(path):
            pass
        note = (
            "checked: the header and the file's length; not checked: the values (the "
            "format carries no checksums)"
        )
    elif kind == "flr":
        with recfile.open(path) as f:
            f.verify()
        note = "the header and every column's CRC-32 match"
    elif kind in ("nndataset", "nnvocab"):
        from ..formats import nndataset

        with nndataset.open(path) as f:
            if kind == "nndataset":
                for subset in ("train", "test"):
                    if subset == "train" or f.info.test_docs:
                        f.load_text(subset)
        note = (
            "structure ok (the vocabulary record); the format carries no checksums"
            if kind == "nnvocab"
            else "structure ok (the root record, every document's offset and length); not "
            "checked: the tokens and masks (the format carries no checksums)"
        )
    else:
        print(f"{path}: not a file feedline reads ({kind})", file=sys.stderr)
        return 2
    print(f"{path}: ok ({kind}): {note} [{time.perf_counter() - t:.2f} s]")
    return 0


class _Bar:
    """Progress on stderr, only on a terminal: a tqdm bar when tqdm is installed, else a
    line rewritten at most ten times a second. A total of 0 is one not known yet
    (CSV, JSONL): rows and rows/s only."""

    def __init__(self, label: str) -> None:
        self.label, self.t0, self.last = label, time.perf_counter(), 0.0
        self.tty = sys.stderr.isatty()
        self.bar: Any = None
        self.done = 0

    def __call__(self, done: int, total: int) -> None:
        if not self.tty:
            return
        if self.bar is None:
            try:
                from tqdm import tqdm
            except ImportError:
                self.bar = False
            else:
                self.bar = tqdm(total=total or None, unit="rows", desc=self.label, leave=True)
        if self.bar is not False:
            self.bar.update(done - self.done)
            self.done = done
            return
        now = time.perf_counter()
        if now - self.last < 0.1 and (not total or done < total):
            return
        self.last = now
        rate = done / max(now - self.t0, 1e-9)
        pct = f"{100.0 * done / total:5.1f}%, " if total else ""
        print(
            f"\r{self.label}: {done:,}" + (f"/{total:,}" if total else "") + f" rows "
            f"({pct}{rate:,.0f} rows/s)",
            end="\n" if total and done >= total else "",
            file=sys.stderr,
            flush=True,
        )

    def close(self) -> None:
        if self.bar:
            self.bar.close()


def convert(src: str, dst: str, columns: list[str] | None = None, quiet: bool = False) -> int:
    t = time.perf_counter()
    parent = os.path.dirname(os.path.abspath(dst))
    if not os.path.isdir(parent):  # before reading anything
        return fail(f"cannot write {dst}: no such directory {parent}")
    bar = _Bar(f"{src} -> {dst}")
    try:
        if _is_image_folder(src, dst) or (src.endswith(".tar") and dst.endswith(".flr")):
            from ..images import from_folder, from_webdataset

            if columns is not None:
                return fail(f"cannot convert {src}: --columns is for tables, not images")
            summary = from_folder(src, dst) if os.path.isdir(src) else from_webdataset(src, dst)
            rows = summary.images
            print(f"   {summary}")
        else:
            rows = _convert.convert(src, dst, columns=columns, progress=None if quiet else bar)
    except FeedlineError:
        raise
    except OSError as e:
        if is_within(e.filename, src):
            return fail(f"cannot read {src}: {reason(e, src)}")
        if e.filename is not None:  # the target or the temporary written beside it
            return fail(f"cannot write {dst}: {e.strerror or e}")
        return fail(f"cannot convert {src} to {dst}: {e}")
    except ValueError as e:  # a format that cannot be read, or cannot hold what is read
        return fail(f"cannot convert {src} to {dst}: {e}")
    finally:
        bar.close()
    print(
        f"{src} -> {dst}: {rows:,} rows, {_size(os.path.getsize(dst))} in "
        f"{time.perf_counter() - t:.2f} s"
    )
    return 0


def _is_image_folder(src: str, dst: str) -> bool:
    """A directory of class subfolders (not a HuggingFace dataset) to a ``.flr``."""
    return (
        os.path.isdir(src)
        and dst.lower().endswith(".flr")
        and _convert.sniff(src) not in ("hf", "hfdict")
        and any(os.path.isdir(os.path.join(src, d)) for d in os.listdir(src))
    )
