"""Converting between formats, streamed in chunks, and telling formats apart.

``convert(src, dst)`` moves rows between ``.ndf``, ``.flr``, numpy ``.npy`` / ``.npz``;
from tables read through Arrow (the ``parquet`` extra: ``.parquet``, ``.arrow`` /
``.feather``, ``.csv``, ``.jsonl`` and HuggingFace ``save_to_disk`` directories, local or
at fsspec URLs, see ``_tabular``) to ``.flr``; and from any of the first to ``.parquet``.
Memory stays O(chunk) whatever the sizes: rows are read from memory maps (a ``.npz``'s
arrays, zip members that cannot be memory-mapped, are decompressed as they are read, a
chunk at a time; a Parquet file a row group at a time) and written through streaming
writers (``.npy``, ``.npz`` and ``.parquet`` targets too). The exception is a
Fortran-ordered array in a ``.npz``, which is read whole. Every target is written
atomically: a conversion that fails leaves no output.
"""

from __future__ import annotations

import json
import os
import zipfile
from collections.abc import Callable, Iterator
from typing import IO, Any

import numpy as np

from .._base.files import atomic_write, open_regular
from ..errors import FormatError
from ..records import Ragged, Record, make_record, record_from_schema
from . import _tabular, _textual, ndf, recfile
from ._fsinput import has_magic
from ._remote import is_url

# Rows move this many bytes at a time.
_CHUNK_BYTES = 32 << 20

Progress = Callable[[int, int], None]  # (rows done, rows in all: 0 where not known)


def sniff(path: str | os.PathLike[str]) -> str:
    """The format of a file by its first bytes: ndf, flr, nndataset, nnvocab, npy, npz,
    parquet, arrow (an IPC file or stream, Feather), hf (a HuggingFace dataset
    directory), hfdict (a ``DatasetDict``'s, of splits) or unknown."""
    path = os.fspath(path)
    if os.path.isdir(path):
        if os.path.exists(os.path.join(path, "dataset_dict.json")):
            return "hfdict"  # splits, each an hf directory
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
    if head[:4] == b"PAR1":
        return "parquet"
    if head[:6] == b"ARROW1" or head[:4] in (b"FEA1", b"\xff\xff\xff\xff"):
        return "arrow"
    return "unknown"


def table_kind(src: Any, storage_options: Any = None) -> str | None:
    """Which of ``_tabular.KINDS`` ``src`` is (a path, URL, glob or list), or None for
    the formats ``_source`` reads."""
    if isinstance(src, (list, tuple)):
        return "parquet"
    if is_url(src) or (has_magic(src) and not os.path.exists(src)):
        return _tabular.kind_by_name(src, storage_options)
    kind = sniff(src) if os.path.exists(src) else "unknown"
    if kind == "hfdict":
        with open(os.path.join(src, "dataset_dict.json")) as f:
            splits = json.load(f).get("splits", [])
        first = os.path.join(src, splits[0] if splits else "train")
        raise FormatError(
            f"expected one HuggingFace dataset, found a DatasetDict of splits {splits}: "
            f"convert each split's directory ({first})",
            src,
        )
    if kind in _tabular.KINDS:
        return kind
    if kind == "unknown" and not os.path.isdir(src):
        return _tabular.kind_by_name(src)
    return None


def _target(path: str) -> str:
    ext = os.path.splitext(path)[1].lower()
    kinds = {".ndf": "ndf", ".flr": "flr", ".npy": "npy", ".npz": "npz", ".parquet": "parquet"}
    if ext not in kinds:
        raise ValueError(
            f"cannot tell the format to write from {path!r}: use a .ndf, .flr, .npy, .npz "
            f"or .parquet name"
        )
    return kinds[ext]


def _row_bytes(c: Any) -> int:
    """About how many bytes a row of a column takes (a ragged one's on average)."""
    if isinstance(c, Ragged):
        return c.values.nbytes // max(len(c), 1) + 8
    if hasattr(c, "row_bytes"):
        return c.row_bytes
    return int(np.prod(c.shape[1:], dtype=np.int64)) * c.dtype.itemsize


def _rows_per_chunk(columns: dict[str, Any]) -> int:
    row = sum(_row_bytes(c) for c in columns.values())
    return max(1, _CHUNK_BYTES // max(row, 1))


def _chunks(columns: dict[str, Any], n: int, progress: Progress | None) -> Iterator[dict]:
    step = _rows_per_chunk(columns)
    for a in range(0, n, step):
        b = min(n, a + step)
        yield {
            k: v.take(np.arange(a, b)) if isinstance(v, Ragged) else _slice(v, a, b)
            for k, v in columns.items()
        }
        if progress:
            progress(b, n)


def _slice(column: Any, a: int, b: int) -> Any:
    part = column[a:b]
    return part if isinstance(part, (Ragged, list)) else np.asarray(part)


def _source(path: str) -> tuple[type[Record], dict[str, Any], int, Any]:
    """(record, columns as array-likes, rows, handle to close) of a source file."""
    kind = sniff(path)
    if kind == "ndf":
        f = ndf.open(path)
        rows = f._rows
        return f.record, {"x": rows[:, : f.d], "y": rows[:, f.d :]}, len(f), f
    if kind == "flr":
        rf = recfile.open(path)
        return rf.record, rf.columns, len(rf), rf
    if kind == "npy":
        arr = np.load(path, mmap_mode="r")
        if arr.ndim == 0:
            raise ValueError(f"{path}: a .npy to convert needs a row axis")
        cols = {"x": arr}
    elif kind == "npz":
        with zipfile.ZipFile(path) as z:
            members = [m for m in z.namelist() if m.endswith(".npy")]
        cols = {m[:-4]: _NpzColumn(path, m) for m in members}
    else:
        raise ValueError(f"{path}: not a format feedline converts (found {kind})")
    lengths = {len(c) for c in cols.values()}
    if len(lengths) != 1:
        raise ValueError(f"{path}: arrays of different lengths {sorted(lengths)}")
    rec = make_record("Arrays", {k: (v.shape[1:], v.dtype) for k, v in cols.items()})
    return rec, cols, lengths.pop(), None


class _NpzColumn:
    """One array of a ``.npz``, read in order a slice at a time: its zip member is
    decompressed as it is read, so memory stays at one slice (``np.load`` reads a
    member whole). A slice behind the last one read reopens the member."""

    def __init__(self, path: str, member: str) -> None:
        self.path, self.member = path, member
        self._zip: zipfile.ZipFile | None = None
        self._file: IO[bytes] | None = None
        self._whole: np.ndarray | None = None
        self._pos = 0
        self._open()
        self.shape, self.dtype = self._shape, self._dtype

    def _open(self) -> None:
        self.close()
        self._zip = zipfile.ZipFile(self.path)
        self._file = self._zip.open(self.member)
        fmt = np.lib.format
        version = fmt.read_magic(self._file)
        if version == (1, 0):
            shape, fortran, dtype = fmt.read_array_header_1_0(self._file)
        else:
            shape, fortran, dtype = fmt.read_array_header_2_0(self._file)
        if dtype.hasobject:
            raise ValueError(
                f"{self.path}: array {self.member[:-4]!r} holds Python objects "
                f"(pickles); feedline converts arrays of numbers only"
            )
        if not shape:
            raise ValueError(f"{self.path}: array {self.member[:-4]!r} needs a row axis")
        self._shape, self._dtype, self._fortran = tuple(shape), dtype, fortran
        self._pos = 0
        self._whole = None

    def close(self) -> None:
        for h in (self._file, self._zip):
            if h is not None:
                h.close()
        self._zip = self._file = None

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, s: slice) -> np.ndarray:
        start, stop, _ = s.indices(self.shape[0])
        stop = max(start, stop)
        if self._fortran:  # rows are not contiguous: read whole, once
            if self._whole is None:
                with np.load(self.path) as z:
                    self._whole = z[self.member[:-4]]
            return self._whole[start:stop]
        row = self.dtype.itemsize * int(np.prod(self.shape[1:], dtype=np.int64))
        if start < self._pos:
            self._open()
        while self._pos < start:  # skip forward (a convert reads in order: rarely)
            step = min(start - self._pos, max(1, (8 << 20) // max(row, 1)))
            self._read(step * row)
            self._pos += step
        data = self._read((stop - start) * row)
        self._pos = stop
        return np.frombuffer(data, dtype=self.dtype).reshape(stop - start, *self.shape[1:])

    def _read(self, nbytes: int) -> bytes:
        assert self._file is not None  # open from __init__ on
        data = self._file.read(nbytes)
        if len(data) != nbytes:
            raise ValueError(
                f"{self.path}: array {self.member[:-4]!r} ends before its "
                f"{self.shape[0]} rows (a truncated .npz?)"
            )
        return data

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        arr = self[:]
        return arr if dtype is None else arr.astype(dtype, copy=False)


def _rows(column: Any) -> np.ndarray:
    """A column as an n x width matrix (its values per row flattened; n may be 0)."""
    a = np.asarray(column)
    return a.reshape(len(a), int(np.prod(a.shape[1:], dtype=np.int64)))


def convert(
    src: Any,
    dst: str | os.PathLike[str],
    *,
    columns: list[str] | None = None,
    progress: Progress | None = None,
    storage_options: Any = None,
) -> int:
    """Convert ``src`` to ``dst`` (format from ``dst``'s extension); returns the rows moved.

    ``src`` is a file of any format above: a path, or for the tables read through Arrow
    a URL (``s3://bucket/x.parquet``, fsspec's ``storage_options``), a glob or a list of
    Parquet files. ``columns`` chooses the columns (fields) moved, in that order; a
    table's column whose type has no field is a ``FormatError`` naming the file, the
    column and its type (leave it out with ``columns``). ``progress(done, total)`` is
    called after each chunk (``total`` 0 where the rows are not known before reading:
    CSV, JSONL). ``.ndf`` targets need float columns ``x`` (n x d) and optionally
    ``y`` (n x l). Nothing is written on an error.

    >>> import os, tempfile, pyarrow as pa, pyarrow.parquet as pq
    >>> from feedline.formats.convert import convert
    >>> d = tempfile.mkdtemp()
    >>> pq.write_table(pa.table({"x": [0.5, 1.5], "s": ["a", "bc"]}), f"{d}/t.parquet")
    >>> convert(f"{d}/t.parquet", f"{d}/t.flr"), convert(f"{d}/t.flr", f"{d}/u.parquet")
    (2, 2)
    >>> pq.read_table(f"{d}/u.parquet").to_pydict()
    {'x': [0.5, 1.5], 's': ['a', 'bc']}
    """
    if not isinstance(src, (list, tuple)):
        src = os.fspath(src)
    dst = os.fspath(dst)
    target = _target(dst)
    if isinstance(columns, str) or (
        columns is not None and not all(isinstance(c, str) for c in columns)
    ):
        raise TypeError(f"columns is a list of column names, got {columns!r}")
    kind = table_kind(src, storage_options)
    if kind is not None:
        if target != "flr":
            raise ValueError(
                f"{src} ({kind}) converts to a .flr (then on to other formats); got {dst}"
            )
        table: Any
        if kind in ("csv", "jsonl"):
            opener = _textual.csv if kind == "csv" else _textual.jsonl
            table = opener(src, columns, storage_options)
        else:
            table = _tabular.open_table(src, kind, columns, storage_options)
        return recfile.write_chunks(dst, table.record, table.chunks(progress), check_values=False)
    if is_url(src):
        raise ValueError(f"{src}: convert reads {', '.join(_tabular.KINDS)} at URLs")
    record, opened, n, handle = _source(src)
    try:
        columns_ = opened
        if columns is not None:
            record, columns_ = _select(record, opened, columns, src)
        if target == "parquet":
            from . import _to_parquet

            return _to_parquet.write(dst, record, _chunks(columns_, n, progress))
        ragged = [f for f in record.fields.values() if f.ragged]
        if ragged and target != "flr":
            first = ragged[0]
            raise ValueError(
                f"a .{target} holds arrays of fixed shapes; {src}'s field `{first.name}` is "
                f"{first.declared} {first.type_name}, which varies per example (convert to .flr)"
            )
        if target == "flr":
            return recfile.write_chunks(
                dst, record, _chunks(columns_, n, progress), check_values=False
            )
        if target == "ndf":
            if "x" not in columns_ or set(columns_) - {"x", "y"}:
                raise ValueError(f"an .ndf holds columns x and y; {src} has {sorted(columns_)}")
            width = {k: int(np.prod(c.shape[1:], dtype=np.int64)) for k, c in columns_.items()}
            blocks = (
                (_rows(c["x"]), _rows(c["y"]) if "y" in c else np.zeros((len(c["x"]), 0)))
                for c in _chunks(columns_, n, progress)
            )
            ndf.write_rows(dst, n, width["x"], width.get("y", 0), blocks)
            return n
        if target == "npy" and len(columns_) != 1:
            raise ValueError(f"a .npy holds one array; {src} has {sorted(columns_)}")
        with atomic_write(dst) as f:
            if target == "npy":
                (column,) = columns_.values()
                _write_npy(
                    f,
                    column,
                    n,
                    (next(iter(chunk.values())) for chunk in _chunks(columns_, n, progress)),
                )
            else:
                _write_npz(f, columns_, n, progress)
        return n
    finally:
        if handle is not None:
            handle.close()
        for c in opened.values() if isinstance(opened, dict) else ():
            if isinstance(c, _NpzColumn):
                c.close()


def _select(
    record: type[Record], columns: dict[str, Any], names: list[str], src: str
) -> tuple[type[Record], dict[str, Any]]:
    """The record of fields ``names`` (in that order) and their columns."""
    missing = [c for c in names if c not in record.fields]
    if missing or not names:
        raise FormatError(
            f"no column {missing[0]!r} (it has {list(record.fields)})"
            if missing
            else "no columns chosen",
            src,
        )
    schema = record.schema()
    by_name = {f["name"]: f for f in schema["fields"]}
    schema = {**schema, "fields": [by_name[c] for c in names]}
    return record_from_schema(schema, src), {c: columns[c] for c in names}


def _write_npy(f: Any, column: Any, n: int, chunks: Iterator[np.ndarray]) -> None:
    """An ``.npy`` of ``n`` rows like ``column``'s, written chunk by chunk."""
    dtype = np.dtype(column.dtype)
    header = {
        "descr": np.lib.format.dtype_to_descr(dtype),
        "fortran_order": False,
        "shape": (n, *column.shape[1:]),
    }
    try:  # version 1.0 as np.save writes it, unless the header needs 2.0
        np.lib.format.write_array_header_1_0(f, header)
    except ValueError:
        np.lib.format.write_array_header_2_0(f, header)
    for chunk in chunks:
        f.write(np.ascontiguousarray(chunk, dtype=dtype).tobytes())


def _write_npz(f: Any, columns: dict[str, Any], n: int, progress: Progress | None) -> None:
    """An ``.npz`` (stored, as ``np.savez`` writes it), each member streamed."""
    with zipfile.ZipFile(f, "w", zipfile.ZIP_STORED, allowZip64=True) as z:
        for name, column in columns.items():
            with z.open(f"{name}.npy", "w", force_zip64=True) as member:
                one = {name: column}
                _write_npy(member, column, n, (c[name] for c in _chunks(one, n, None)))
        if progress:
            progress(n, n)
