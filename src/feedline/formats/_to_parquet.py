"""A record's columns as a Parquet file (``convert x.flr out.parquet``), so data goes
back to pandas, Spark or DuckDB.

=============================  ===========================================
field                          Parquet (Arrow) column
=============================  ===========================================
scalar of a dtype              that type (``uint16`` stays ``uint16``)
fixed dims ``(3, 4)``          ``fixed_size_list<fixed_size_list<x, 4>, 3>``
first dim varying ``(T, 3)``   ``list<fixed_size_list<x, 3>>``
``str`` / ``bytes``            ``string`` / ``binary``
=============================  ===========================================

Columns become Arrow arrays from their buffers (a numpy array or a ``Ragged``'s values
and offsets: no Python per row), written a chunk at a time (one row group a chunk),
atomically. The record's schema (dims, domains, docs) rides in the file's metadata
under ``feedline.record``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from typing import Any

import numpy as np

from .._base.files import atomic_write
from ..records import Field, Ragged, Record
from ._arrowtypes import pyarrow

# The key of the record's schema in the Parquet file's metadata.
RECORD_KEY = b"feedline.record"


def arrow_type(f: Field) -> Any:
    """The Arrow type of a field's column (a ``ValueError`` for one Parquet cannot hold
    as a list column: more than one varying dim)."""
    pa = pyarrow()
    if f.kind == "str":
        return pa.string()
    if f.kind == "bytes":
        return pa.binary()
    if any(d is None for d in f.shape[1:]):
        raise ValueError(
            f"field `{f.name}` is {f.declared}: a Parquet list column varies in its first "
            f"dim only (write the others fixed, or leave the field out with --columns)"
        )
    t = pa.from_numpy_dtype(f.dtype)
    for d in reversed(f.shape[1:] if f.shape and f.shape[0] is None else f.shape):
        t = pa.list_(t, int(d or 0))
    return pa.list_(t) if f.shape and f.shape[0] is None else t


def _fixed(values: np.ndarray, dims: tuple[int, ...]) -> Any:
    """Flat values as nested fixed-size lists of ``dims`` (outermost first)."""
    pa = pyarrow()
    arr = pa.array(np.ascontiguousarray(values).reshape(-1))
    for d in reversed(dims):
        arr = pa.FixedSizeListArray.from_arrays(arr, int(d))
    return arr


def column_array(f: Field, col: Any) -> Any:
    """One chunk of a field's column as an Arrow array of ``arrow_type(f)``."""
    pa = pyarrow()
    if f.kind in ("str", "bytes"):
        r: Ragged = col
        offsets = np.asarray(r.offsets, dtype=np.int64)
        if len(offsets) and offsets[-1] >= 2**31:
            raise ValueError(f"field `{f.name}`: a chunk of over 2 GiB of {f.kind}")
        t = arrow_type(f)
        return pa.Array.from_buffers(
            t,
            len(r),
            [None, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(np.asarray(r.values))],
        )
    if not f.shape or f.shape[0] is not None:
        a = np.asarray(col)
        return _fixed(a, tuple(int(d or 0) for d in f.shape)) if f.shape else pa.array(a)
    r = col
    inner = tuple(int(d or 0) for d in f.shape[1:])
    size = int(np.prod(inner, dtype=np.int64))
    child = _fixed(np.asarray(r.values), inner) if inner else pa.array(np.asarray(r.values))
    offsets = np.asarray(r.offsets, dtype=np.int64) // max(size, 1)
    return pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), child)


def write(path: Any, record: type[Record], chunks: Iterable[dict[str, Any]]) -> int:
    """A Parquet file of ``record``'s columns from ``chunks`` (dicts of columns as a
    ``RecFile`` gives them), a row group a chunk; atomic. Returns the rows written."""
    pa = pyarrow()
    import pyarrow.parquet as pq

    fields = list(record.fields.values())
    meta = {RECORD_KEY: json.dumps(record.schema()).encode()}
    schema = pa.schema([pa.field(f.name, arrow_type(f)) for f in fields], meta)
    n = 0
    with atomic_write(os.fspath(path)) as out:
        writer = pq.ParquetWriter(out, schema)
        try:
            for chunk in chunks:
                arrays = [column_array(f, chunk[f.name]) for f in fields]
                writer.write_table(pa.Table.from_arrays(arrays, schema=schema))
                n += len(arrays[0]) if arrays else 0
        finally:
            writer.close()
    return n
