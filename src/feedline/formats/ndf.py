"""data.nu's ``.ndf`` rows, byte for byte.

Layout (little-endian)::

    offset  size        field
    0       4           magic  b"NDF1"
    4       8           u64 n  (rows)
    12      8           u64 d  (features per row)
    20      8           u64 l  (labels per row; may be 0)
    28      n*(d+l)*8   rows: d f64 features, then l f64 labels

Row ``i`` starts at ``28 + i * (d + l) * 8``. feedline checks what data.nu does not:
the file's length against the header (so a truncated file, or a header whose
``n * (d + l) * 8`` overflows or exceeds the file, is a ``FormatError`` at open, never an
allocation), and reads rows from a memory map, one gather per batch.
"""

from __future__ import annotations

import numbers
import os
import struct
from collections.abc import Mapping
from typing import Any

import numpy as np

from .._base.files import atomic_write
from ..errors import FormatError, RecordError, ShapeError
from ..records import Record, make_record
from ._open import OpenFile

__all__ = ["HEADER", "MAGIC", "NdfFile", "open", "record_for", "save", "write_rows"]

MAGIC = b"NDF1"
HEADER = 28
_HEADER = struct.Struct("<4sQQQ")
_records: dict[tuple[int, int], type[Record]] = {}
# A row of more values than this is not a real .ndf (and would not fit an array shape).
_MAX_ROW_VALUES = 1 << 32
_CHUNK_BYTES = 8 << 20  # rows gathered per write while saving: big writes, bounded memory


def record_for(d: int, l: int) -> type[Record]:  # noqa: E741
    """The record of ``.ndf`` rows with ``d`` features and ``l`` labels (one class per shape)."""
    key = (d, l)
    if key not in _records:
        _records[key] = make_record(
            f"NdfRow{d}x{l}",
            {"x": ((d,), np.float64), "y": ((l,), np.float64)},
            doc=f"A data.nu row: {d} f64 features and {l} f64 labels.",
        )
    return _records[key]


def save(path: str | os.PathLike[str], x: Any, y: Any = None) -> None:
    """Write an ``.ndf``, atomically: ``save(path, x, y)`` or ``save(path, dataset)``.

    ==========================  ==========================================================
    call                        rows
    ==========================  ==========================================================
    ``save(path, x)``           ``x`` (n x d), l = 0
    ``save(path, x, y)``        ``x`` (n x d) and ``y`` (n x l; a 1-D ``y`` is one label
                                a row)
    ``save(path, dataset)``     data.nu's ``data_save_ndf(path, DataSet)``: a dataset whose
                                record has the fields ``x`` [d] and optionally ``y`` [l]
                                (no others): an ``fl.Dataset``, an open ``.ndf`` or
                                ``.flr``, any typed source (``.record`` with ``.fields``,
                                ``len``, and ``getitems(indices)`` or ``[i]``)
    ==========================  ==========================================================

    Values are stored as little-endian float64 whatever their dtype (bool, integer or
    float; anything else is refused). A scalar field is one value a row. A dataset is
    read in chunks of about 8 MiB of rows (one ``getitems`` each), so memory stays at
    one chunk whatever its size; each chunk is checked against the record's shapes.
    A record with other fields, without ``x``, or whose fields are not vectors is a
    ``RecordError``/``ShapeError`` naming the field and where it was declared. On any
    error nothing is written.

    >>> import os, tempfile, feedline as fl
    >>> p = os.path.join(tempfile.mkdtemp(), "xy.ndf")
    >>> save(p, fl.Dataset.from_arrays(x=np.zeros((4, 3)), y=np.ones((4, 1))))
    >>> with open(p) as f:  # fl.ndf.open
    ...     (len(f), f.d, f.l)
    (4, 3, 1)
    """
    if _is_dataset(x):
        if y is not None:
            raise TypeError(
                "fl.ndf.save(path, dataset): y comes from the dataset's field y; "
                "pass arrays as save(path, x, y)"
            )
        _save_dataset(path, x)
        return
    x = _numbers(x, "x")
    if x.ndim != 2:
        raise ShapeError(f"fl.ndf.save: x must be n x d, got shape {x.shape}")
    n, d = x.shape
    y = np.zeros((n, 0)) if y is None else _numbers(y, "y")
    if y.ndim == 1:  # one label a row
        y = y.reshape(n, -1) if n else y.reshape(0, 1)
    if y.ndim != 2 or y.shape[0] != n:
        raise ShapeError(f"fl.ndf.save: y must be n x l with n = {n}, got shape {y.shape}")
    l = y.shape[1]  # noqa: E741
    step = _rows_per_chunk(d, l)
    write_rows(path, n, d, l, ((x[a : a + step], y[a : a + step]) for a in range(0, n, step)))


def write_rows(
    path: str | os.PathLike[str],
    n: int,
    d: int,
    l: int,  # noqa: E741
    blocks: Any,
) -> None:
    """Write an ``.ndf`` of ``n`` rows atomically from ``blocks``: an iterable of
    ``(x, y)`` chunks (rows x d and rows x l numbers, checked as ``save`` checks them),
    written as they come (memory stays at one chunk)."""
    _check_row(n, d, l)
    with atomic_write(path) as f:
        f.write(_HEADER.pack(MAGIC, n, d, l))
        written = 0
        for x, y in blocks:
            x, y = _numbers(x, "x"), _numbers(y, "y")
            if x.shape != (len(x), d) or y.shape != (len(x), l):
                raise ShapeError(
                    f"fl.ndf: a chunk of x {x.shape} and y {y.shape} is not rows "
                    f"of d = {d} and l = {l} values"
                )
            f.write(memoryview(np.concatenate((x, y), axis=1).astype("<f8", copy=False)))  # type: ignore[arg-type]  # numpy types its buffer protocol for 3.12+
            written += len(x)
        if written != n:
            raise ShapeError(f"fl.ndf: {written} rows were given, the header says {n}")


def _numbers(values: Any, name: str) -> np.ndarray:
    """``values`` as float64, if they are numbers: bool, integer or float (``None`` would
    become NaN and the string "1.5" the number 1.5 under ``np.asarray(..., float64)``)."""
    a = np.asarray(values)
    if a.dtype == object:  # mixed Python values: each must be a real number
        bad = [v for v in a.flat if isinstance(v, (str, bytes)) or not isinstance(v, numbers.Real)][
            :1
        ]
        if bad:
            first = bad[0]
            raise ShapeError(
                f"fl.ndf.save: {name} must hold numbers (bool, int or float), "
                f"found {first!r} ({type(first).__name__})"
            )
    elif a.dtype.kind not in "biuf":
        raise ShapeError(
            f"fl.ndf.save: {name} must hold numbers (bool, int or float), found "
            f"dtype {a.dtype} ({a.dtype.kind!r} values, e.g. strings or complex)"
        )
    return a.astype(np.float64, copy=False)


def _check_row(n: int, d: int, l: int) -> None:  # noqa: E741
    if n and d + l == 0:  # the reader refuses such a file: rows of nothing
        raise ShapeError(
            f"an .ndf row holds at least one value; got {n} rows of d = 0 features and l = 0 labels"
        )


def _rows_per_chunk(d: int, l: int) -> int:  # noqa: E741
    return max(1, _CHUNK_BYTES // max(8 * (d + l), 1))


# -- saving a dataset ------------------------------------------------------------------------


def _is_dataset(obj: Any) -> bool:
    """A typed source: a ``.record`` with ``.fields``, a length, and a way to read items
    (duck-typed: formats know nothing of ``fl.Dataset``)."""
    fields = getattr(getattr(obj, "record", None), "fields", None)
    return (
        isinstance(fields, Mapping)
        and hasattr(obj, "__len__")
        and (hasattr(obj, "getitems") or hasattr(obj, "__getitem__"))
    )


def _where(field: Any) -> str:
    where = getattr(field, "where", None)
    return f"{where}: " if where else ""


def _ndf_fields(record: Any) -> dict[str, tuple[int, ...]]:
    """The record's ``x`` and ``y`` (if any) and their shapes, checked for an ``.ndf``."""
    name = getattr(record, "__name__", type(record).__name__)
    fields = record.fields
    if "x" not in fields:
        first = next(iter(fields.values()), None)
        raise RecordError(
            f"{_where(first)}fl.ndf.save: expected a dataset with fields x [d] "
            f"and optionally y [l], found {name} with fields "
            f"{', '.join(map(str, fields)) or 'none'}"
        )
    for key, f in fields.items():
        if key not in ("x", "y"):
            raise RecordError(
                f"{_where(f)}{name} field `{key}`: an .ndf holds x and y only "
                "(data.nu's DataSet); select those fields first"
            )
    shapes = {}
    for key, part in (("x", "d"), ("y", "l")):
        if key not in fields:
            continue
        f = fields[key]
        shape, dtype = tuple(f.shape), np.dtype(f.dtype)
        if len(shape) > 1:
            raise ShapeError(
                f"{_where(f)}{name} field `{key}` should be [{part}] (one vector "
                f"a row) to be stored in an .ndf, got shape {shape}"
            )
        if dtype.kind not in "biuf":
            raise RecordError(
                f"{_where(f)}{name} field `{key}` is {dtype}: an .ndf stores "
                "float64, which cannot hold it"
            )
        shapes[key] = shape
    return shapes


def _read_rows(
    ds: Any, idx: np.ndarray, shapes: dict[str, tuple[int, ...]], name: str
) -> dict[str, np.ndarray]:
    """Items ``idx`` of ``ds`` as float64 columns (rows x values), their shapes checked."""
    if hasattr(ds, "getitems"):
        batch = ds.getitems(idx)
        out = {}
        for key, shape in shapes.items():
            col = np.asarray(batch[key])
            if col.shape != (len(idx), *shape):
                raise ShapeError(
                    f"{name}: items {int(idx[0])} to {int(idx[-1])}: field `{key}` "
                    f"should be {(len(idx), *shape)} as a batch, got shape "
                    f"{col.shape}"
                )
            out[key] = col.reshape(len(idx), -1).astype(np.float64, copy=False)
        return out
    out = {
        key: np.empty((len(idx), int(np.prod(shape, dtype=np.int64))))
        for key, shape in shapes.items()
    }
    for row, i in enumerate(idx.tolist()):
        item = ds[i]
        for key, shape in shapes.items():
            try:
                value = np.asarray(item[key])
            except (KeyError, IndexError, TypeError) as e:
                raise ShapeError(f"{name}: item {i} has no field `{key}`") from e
            if value.shape != shape:
                raise ShapeError(
                    f"{name}: item {i}'s field `{key}` should be {shape}, got shape {value.shape}"
                )
            out[key][row] = value.reshape(-1)
    return out


def _save_dataset(path: str | os.PathLike[str], ds: Any) -> None:
    record = ds.record
    name = getattr(record, "__name__", type(record).__name__)
    shapes = _ndf_fields(record)
    n = len(ds)
    d = int(np.prod(shapes["x"], dtype=np.int64))
    l = int(np.prod(shapes["y"], dtype=np.int64)) if "y" in shapes else 0  # noqa: E741
    _check_row(n, d, l)
    rows_per_chunk = _rows_per_chunk(d, l)
    with atomic_write(path) as f:
        f.write(_HEADER.pack(MAGIC, n, d, l))
        for a in range(0, n, rows_per_chunk):
            cols = _read_rows(
                ds, np.arange(a, min(n, a + rows_per_chunk), dtype=np.int64), shapes, name
            )
            parts = [cols["x"]] + ([cols["y"]] if "y" in cols else [])
            f.write(np.concatenate(parts, axis=1).astype("<f8", copy=False).tobytes())


class NdfFile(OpenFile):
    """An open ``.ndf``: a typed source of ``{"x": f64[d], "y": f64[l]}`` items.

    ``len(f)``, ``f.d``, ``f.l``, ``f.read_row(i) -> (x, y)``, ``f.rows(indices) -> (X, Y)``
    (one gather), ``f.getitems(indices)`` (columns for the loader), ``f.record``,
    ``f.share()`` and ``f.close()`` (the file closes with its last share).
    """

    # Every row has the record's shapes and dtypes by construction: datasets need not
    # check each batch, and its gathers are plain copies from the memory map.
    fixed_layout = True

    def _parse(self) -> None:
        size = self._file.size
        if size < HEADER:
            raise FormatError(
                f"an .ndf header is {HEADER} bytes, the file has {size}", self.path, 0
            )
        magic, n, d, l = _HEADER.unpack(self._file.pread(HEADER, 0, "the .ndf header"))  # noqa: E741
        if magic != MAGIC:
            raise FormatError(f"expected magic {MAGIC!r}, found {magic!r}", self.path, 0)
        if d + l > _MAX_ROW_VALUES:
            raise FormatError(
                f"the header says a row holds d={d} + l={l} values; at most "
                f"{_MAX_ROW_VALUES} are supported",
                self.path,
                12,
            )
        if d + l == 0 and n:
            raise FormatError(f"the header says {n} rows of no values", self.path, 4)
        expected = HEADER + n * (d + l) * 8
        if expected != size:
            raise FormatError(
                f"the header says n={n}, d={d}, l={l}: {expected} bytes in all, the file has "
                f"{size}",
                self.path,
                4,
            )
        self.n, self.d, self.l = n, d, l
        self._rows = self._file.array("<f8", HEADER, n * (d + l), (n, d + l))
        self.record = record_for(d, l)
        self.salt = 0

    def __len__(self) -> int:
        return self.n

    def _rows_view(self) -> np.ndarray:
        if self._rows is None:
            raise ValueError(f"{self.path}: this handle is closed")
        self._file.check_intact()  # a file truncated under us: an error, not SIGBUS
        return self._rows

    def read_row(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        """Row ``i`` as (features, labels), copies."""
        rows = self._rows_view()
        i = int(i)
        if not 0 <= i < self.n:
            raise IndexError(f"row {i} is outside the file's {self.n} rows")
        row = np.array(rows[i])
        return row[: self.d], row[self.d :]

    def rows(self, indices: Any) -> tuple[np.ndarray, np.ndarray]:
        """Rows ``indices`` as (X: len x d, Y: len x l): one gather from the memory map."""
        rows = self._rows_view()
        idx = np.asarray(indices, dtype=np.int64)
        if len(idx) and (int(idx.min()) < 0 or int(idx.max()) >= self.n):
            raise IndexError(f"row indices must be in [0, {self.n})")
        block = np.take(rows, idx, axis=0)
        return block[:, : self.d], block[:, self.d :]

    def __getitem__(self, i: int) -> dict[str, np.ndarray]:
        x, y = self.read_row(i)
        return {"x": x, "y": y}

    def getitems(
        self, indices: Any, out: dict[str, np.ndarray] | None = None
    ) -> dict[str, np.ndarray]:
        """Rows ``indices`` as ``{"x", "y"}`` columns (into ``out``'s rows when given)."""
        x, y = self.rows(indices)
        if out is None:
            return {"x": x, "y": y}
        out["x"][: len(x)] = x
        out["y"][: len(y)] = y
        return {"x": out["x"][: len(x)], "y": out["y"][: len(y)]}

    def _release(self) -> None:
        self._rows = None

    def __repr__(self) -> str:
        return f"NdfFile({self.path!r}, n={self.n}, d={self.d}, l={self.l})"


def open(path: str | os.PathLike[str]) -> NdfFile:
    """Open an ``.ndf`` for random access; every header field is checked first."""
    return NdfFile(path)
