"""Arrow arrays as a batch's columns: the one decoding every Arrow reader shares (the
Parquet and Arrow IPC sources, ``fl.sources.table``, and ``convert`` from Parquet, Arrow,
CSV, JSONL and HF datasets).

A fixed-width column without nulls comes out as a numpy array straight from its buffer
(a view: zero copy, memory-mapped pages included); a list, string or binary column as a
``Ragged`` whose values are a view of Arrow's and whose offsets are Arrow's own, rebased.
No Python runs per row.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import FormatError, RecordError
from ..records import Field, Ragged
from ..records._ragged import utf8_problem
from ._arrowtypes import column_field, is_encoded_file, pyarrow


def check_field(f: Field, t: Any, where: str) -> None:
    """Refuse now a column of Arrow type ``t`` that cannot fill field ``f``: a
    ``RecordError`` saying what the field wants and what the column is."""
    axes, leaf = column_field(f.name, t, where)
    want = f"{f.kind}" if f.kind != "array" else f"{f.declared} {f.dtype}"
    if f.kind != "array" or leaf in ("str", "bytes"):
        if leaf != f.kind or axes:
            raise RecordError(f"{where}: field `{f.name}` is {want}, the column is {t}")
        return
    # the first axis may be a list read into a fixed dim (its lengths checked as read)
    # or fixed lists read into a varying one; the axes inside it are fixed and equal
    fits = (
        len(axes) == len(f.shape)
        and list(axes[1:]) == list(f.shape[1:])
        and (not axes or axes[0] is None or f.shape[0] is None or axes[0] == f.shape[0])
    )
    if not fits:
        raise RecordError(
            f"{where}: field `{f.name}` is {want} (shape {list(f.shape)}), the column is "
            f"{t} (axes {axes})"
        )


def _numbers(arr: Any) -> np.ndarray:
    """A flat Arrow array of numbers or bools as numpy (zero copy where Arrow allows)."""
    return np.asarray(arr.to_numpy(zero_copy_only=False))


def _flat(arr: Any, levels: int) -> np.ndarray:
    """The numbers inside ``levels`` levels of fixed-size lists (the array's own slice)."""
    for _ in range(levels):
        arr = arr.flatten()
    return _numbers(arr)


def _cast(values: np.ndarray, f: Field) -> np.ndarray:
    """Values in the field's dtype where the cast is safe; otherwise as they are, for the
    record's check to convert or refuse."""
    if values.dtype != f.dtype and np.can_cast(values.dtype, f.dtype, "safe"):
        return values.astype(f.dtype)
    return values


def _offsets(arr: Any) -> np.ndarray:
    """A list, string or binary array's ``n + 1`` offsets (int64), its own slice's."""
    pa = pyarrow()
    t = arr.type
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return np.asarray(arr.offsets, dtype=np.int64)
    wide = pa.types.is_large_string(t) or pa.types.is_large_binary(t)
    buf = arr.buffers()[1]
    raw = np.frombuffer(buf, dtype=np.int64 if wide else np.int32)
    return raw[arr.offset : arr.offset + len(arr) + 1].astype(np.int64)


def _nulls_inside(arr: Any, name: str, where: str, first: int) -> None:
    """A null inside a list column (an element, or a list inside the list) is a
    ``FormatError`` naming the row: numpy would read it as NaN, or the column as floats."""
    pa = pyarrow()
    levels = []
    cur = arr
    lists = (pa.types.is_list, pa.types.is_large_list, pa.types.is_fixed_size_list)
    while any(is_list(cur.type) for is_list in lists):
        child = cur.flatten()  # the slice's own elements
        levels.append(cur)
        if child.null_count:
            k = int(np.flatnonzero(_numbers(child.is_null()))[0])
            for level in reversed(levels):  # the element's row in ``arr``
                if pa.types.is_fixed_size_list(level.type):
                    k //= int(level.type.list_size)
                else:
                    off = np.asarray(level.offsets, dtype=np.int64)
                    k = int(np.searchsorted(off - off[0], k, "right")) - 1
            raise FormatError(
                f"{where}: column {name!r} row {first + k:,} has a missing (null) value "
                f"inside its list; a feedline field has no null: fill them "
                f"(pyarrow.compute.fill_null on the list's values) or leave the column out"
            )
        cur = child


def decode(arr: Any, f: Field, where: str, first: int = 0) -> Any:
    """An Arrow array (or chunked array) as field ``f``'s batch column: a numpy array
    (batch axis first) or a ``Ragged``. ``where`` names the data (the file, the row
    group) for a ``FormatError`` on nulls, strings that are not UTF-8 or lists of the
    wrong length, which names the row as ``first`` plus its index in ``arr`` (the row of
    the file)."""
    pa = pyarrow()
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    if is_encoded_file(arr.type):
        arr = encoded_bytes(arr, f.name, where, first)
    n = len(arr)
    if arr.null_count:
        row = first + int(np.flatnonzero(_numbers(arr.is_null()))[0])
        raise FormatError(
            f"{where}: column {f.name!r} has {arr.null_count:,} missing (null) values, the "
            f"first at row {row:,}; a feedline field has no null: fill them "
            f"(pyarrow.compute.fill_null) or leave the column out"
        )
    if f.kind != "array":
        offsets = _offsets(arr)
        data = arr.buffers()[2]
        values = np.zeros(0, np.uint8) if data is None else np.frombuffer(data, np.uint8)
        values = values[int(offsets[0]) : int(offsets[-1])]
        offsets = offsets - offsets[0]
        bad = utf8_problem(values, offsets) if f.kind == "str" else None
        if bad is not None:
            r = int(np.searchsorted(offsets, bad, "right")) - 1
            raise FormatError(
                f"{where}: column {f.name!r} row {first + r:,} is not UTF-8 (byte "
                f"{bad - int(offsets[r])} of the string); a str field holds UTF-8: read the "
                f"column as binary (a bytes field) or leave it out"
            )
        return Ragged(values, offsets, np.diff(offsets)[:, None], (None,))
    t = arr.type
    if not f.shape:
        return _cast(_numbers(arr), f)
    _nulls_inside(arr, f.name, where, first)
    inner = tuple(int(d or 0) for d in f.shape[1:])  # fixed: check_field saw to it
    size = int(np.prod(inner, dtype=np.int64))
    if pa.types.is_fixed_size_list(t):
        values = _cast(_flat(arr, len(f.shape)), f)
        if f.shape[0] is None:  # fixed lists read into a varying field
            offsets = np.arange(n + 1, dtype=np.int64) * int(t.list_size) * size
            shapes = np.full((n, 1), int(t.list_size), dtype=np.int64)
            return Ragged(values, offsets, shapes, f.shape)
        return values.reshape(n, *f.shape)
    offsets = _offsets(arr)
    child = _flat(arr.values, len(inner))
    values = _cast(child[int(offsets[0]) * size : int(offsets[-1]) * size], f)
    lengths = np.diff(offsets)
    if f.shape[0] is None:
        return Ragged(values, (offsets - offsets[0]) * size, lengths[:, None], f.shape)
    wrong = np.flatnonzero(lengths != f.shape[0])
    if len(wrong):
        r = int(wrong[0])
        raise FormatError(
            f"{where}: column {f.name!r} row {first + r:,} is a list of {int(lengths[r])}, field "
            f"`{f.name}` takes {f.shape[0]} (declare its first dim None to read lists "
            f"of any length)"
        )
    return values.reshape(n, *f.shape)


def encoded_bytes(arr: Any, name: str, where: str, first: int = 0) -> Any:
    """An HF ``Image`` (or ``Audio``) array, ``struct<bytes, path>``, as its bytes: the
    encoded file as stored (``fl.images.decoded`` decodes it). A row that holds only a
    path is a ``FormatError`` naming it."""
    import pyarrow.compute as pc

    if arr.null_count:  # a missing struct: nothing stored at all
        data = arr
    else:
        data = pc.struct_field(arr, "bytes")
    if data.null_count:
        row = first + int(np.flatnonzero(_numbers(data.is_null()))[0])
        raise FormatError(
            f"{where}: column {name!r} row {row:,} holds no bytes (an image stored by "
            f"its path only): load it with decode=False after embedding the files, "
            f"Dataset.cast_column({name!r}, Image(decode=False)) on a dataset that has them"
        )
    return data
