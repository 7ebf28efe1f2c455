"""Converting between formats, streamed in chunks, and telling formats apart.

``convert(src, dst)`` moves rows between ``.ndf``, ``.flr``, numpy ``.npy`` / ``.npz`` and
(with the ``hf`` extra) a HuggingFace dataset saved with ``save_to_disk``. Memory stays
O(chunk): rows are read from memory maps and written through streaming writers; the
exception is a ``.npz`` source, whose arrays are read whole (a zip member cannot be
memory-mapped).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from ..records import Record, make_record
from . import ndf, recfile
from ._io import atomic_write, open_regular

# Rows move this many bytes at a time.
_CHUNK_BYTES = 32 << 20

Progress = Callable[[int, int], None]  # (rows done, rows in all)


def sniff(path: str | os.PathLike[str]) -> str:
    """The format of a file by its first bytes: ndf, flr, nndataset, nnvocab, npy, npz,
    hf (a HuggingFace dataset directory) or unknown."""
    path = os.fspath(path)
    if os.path.isdir(path):
        return "hf" if os.path.exists(os.path.join(path, "dataset_info.json")) else "unknown"
    with os.fdopen(open_regular(path), "rb") as f:  # a FIFO: a FormatError, never a wait
        head = f.read(8)
    if head[:4] == ndf.MAGIC:
        return "ndf"
    if head == recfile.MAGIC:
        return "flr"
    if head[:4] == b"NNDS":
        return "nndataset"
    if head[:4] == b"NNVC":
        return "nnvocab"
    if head[:6] == b"\x93NUMPY":
        return "npy"
    if head[:4] == b"PK\x03\x04":
        return "npz"
    return "unknown"


def _target(path: str) -> str:
    ext = os.path.splitext(path)[1].lower()
    kinds = {".ndf": "ndf", ".flr": "flr", ".npy": "npy", ".npz": "npz"}
    if ext not in kinds:
        raise ValueError(f"cannot tell the format to write from {path!r}: use a .ndf, .flr, "
                         f".npy or .npz name")
    return kinds[ext]


def _rows_per_chunk(columns: dict[str, Any]) -> int:
    row = sum(int(np.prod(c.shape[1:], dtype=np.int64)) * c.dtype.itemsize
              for c in columns.values())
    return max(1, _CHUNK_BYTES // max(row, 1))


def _chunks(columns: dict[str, Any], n: int, progress: Progress | None) -> Iterator[dict]:
    step = _rows_per_chunk(columns)
    for a in range(0, n, step):
        yield {k: np.asarray(v[a:a + step]) for k, v in columns.items()}
        if progress:
            progress(min(a + step, n), n)


def _source(path: str) -> tuple[type[Record], dict[str, Any], int, Any]:
    """(record, columns as array-likes, rows, handle to close) of a source file."""
    kind = sniff(path)
    if kind == "ndf":
        f = ndf.open(path)
        rows = f._rows
        return f.record, {"x": rows[:, : f.d], "y": rows[:, f.d:]}, len(f), f
    if kind == "flr":
        f = recfile.open(path)
        return f.record, f.columns, len(f), f
    if kind == "npy":
        arr = np.load(path, mmap_mode="r")
        if arr.ndim == 0:
            raise ValueError(f"{path}: a .npy to convert needs a row axis")
        cols = {"x": arr}
    elif kind == "npz":
        with np.load(path) as z:
            cols = {k: z[k] for k in z.files}
    elif kind == "hf":
        try:
            import datasets
        except ImportError as e:
            raise ImportError("reading a HuggingFace dataset needs the 'hf' extra: "
                              "pip install 'feedline[hf]'") from e
        ds = datasets.load_from_disk(path).with_format("numpy")
        first = ds[:1]
        rec = make_record("HFRow", {k: (np.asarray(v).shape[1:], np.asarray(v).dtype)
                                    for k, v in first.items()})
        return rec, _HFColumns(ds), len(ds), None
    else:
        raise ValueError(f"{path}: not a format feedline converts (found {kind})")
    lengths = {len(c) for c in cols.values()}
    if len(lengths) != 1:
        raise ValueError(f"{path}: arrays of different lengths {sorted(lengths)}")
    rec = make_record("Arrays", {k: (v.shape[1:], v.dtype) for k, v in cols.items()})
    return rec, cols, lengths.pop(), None


class _HFColumns(dict):
    """Lazy column slices of a numpy-formatted HuggingFace dataset."""

    def __init__(self, ds: Any) -> None:
        first = ds[:1]
        super().__init__({k: _HFColumn(ds, k, np.asarray(v)) for k, v in first.items()})


class _HFColumn:
    def __init__(self, ds: Any, key: str, sample: np.ndarray) -> None:
        self.ds, self.key = ds, key
        self.shape, self.dtype = (len(ds), *sample.shape[1:]), sample.dtype

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, s: slice) -> np.ndarray:
        return np.asarray(self.ds[s][self.key])


def _rows(column: Any) -> np.ndarray:
    """A column as an n x width matrix (its values per row flattened; n may be 0)."""
    a = np.asarray(column)
    return a.reshape(len(a), int(np.prod(a.shape[1:], dtype=np.int64)))


def convert(src: str | os.PathLike[str], dst: str | os.PathLike[str], *,
            progress: Progress | None = None) -> int:
    """Convert ``src`` to ``dst`` (format from ``dst``'s extension); returns the rows moved.

    ``.ndf`` targets need float columns ``x`` (n x d) and optionally ``y`` (n x l).
    """
    src, dst = os.fspath(src), os.fspath(dst)
    target = _target(dst)
    record, columns, n, handle = _source(src)
    try:
        if target == "flr":
            return recfile.write_chunks(dst, record, _chunks(columns, n, progress),
                                        check_values=False)
        if target == "ndf":
            if "x" not in columns or set(columns) - {"x", "y"}:
                raise ValueError(f"an .ndf holds columns x and y; {src} has {sorted(columns)}")
            x = columns["x"]
            y = columns.get("y")
            x = _rows(x) if not hasattr(x, "ds") else np.asarray(x[:n])
            ndf.save(dst, x, None if y is None else _rows(y))
            if progress:
                progress(n, n)
            return n
        arrays = {k: np.asarray(v[:n]) for k, v in columns.items()}
        if target == "npy":
            if len(arrays) != 1:
                raise ValueError(f"a .npy holds one array; {src} has {sorted(arrays)}")
            with atomic_write(dst) as f:
                np.save(f, next(iter(arrays.values())))
        else:
            with atomic_write(dst) as f:
                np.savez(f, **arrays)
        if progress:
            progress(n, n)
        return n
    finally:
        if handle is not None:
            handle.close()
