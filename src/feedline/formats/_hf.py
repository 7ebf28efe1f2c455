"""A HuggingFace dataset (``save_to_disk``) as typed columns, from its Arrow schema.

Each column's field comes from its Arrow type: a string is a ``str`` field, a binary
one ``bytes``, a number or bool a scalar, and a list (of lists...) of numbers one axis
per level: fixed where every list of that level has one length, else a varying dim.
Top-level list columns whose lengths agree in every row (``input_ids`` and
``attention_mask``) share one dim. Columns are read a slice of rows at a time from the
memory-mapped Arrow table: a list of numbers as a ``Ragged`` straight from its offsets.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..records import Ragged, Record, record_from_schema
from ._arrowtypes import _is_list, _leaf

# Rows of a ragged column are estimated at this many bytes when the table does not say.
_ROW_GUESS = 256


def _axes(column: Any, name: str) -> tuple[list[Any], list[np.ndarray | None], Any] | None:
    """A list column's axes (an int each, or None where its length varies), each level's
    lengths (None where fixed) and its leaf type; None if it is not lists of numbers."""
    import pyarrow as pa
    import pyarrow.compute as pc

    axes: list[Any] = []
    lengths: list[np.ndarray | None] = []
    arr = column
    while _is_list(arr.type):
        if arr.null_count:
            raise ValueError(f"HF column {name!r} has missing (null) lists; feedline has no null")
        size = pc.list_value_length(arr).to_numpy(zero_copy_only=False).astype(np.int64)
        if pa.types.is_fixed_size_list(arr.type):
            axes.append(int(arr.type.list_size))
            lengths.append(None)
        elif len(size) and size.min() == size.max():  # one length: a fixed axis
            axes.append(int(size[0]))
            lengths.append(None)
        else:
            axes.append(None)
            lengths.append(size)
        arr = pc.list_flatten(arr)
    leaf = _leaf(arr.type)
    if leaf in ("str", "bytes"):
        raise ValueError(
            f"HF column {name!r} holds lists of {leaf} values: a feedline field holds "
            f"numbers (of any shape), or one {leaf} per example; join each row's values "
            f"into one, or remove the column (Dataset.remove_columns) before converting"
        )
    if leaf is None:
        return None
    return axes, lengths, leaf


def arrow_source(ds: Any, path: str) -> tuple[type[Record], dict[str, Any], int] | None:
    """(record, columns, rows) of a HuggingFace dataset read through Arrow, or None when
    a column's type is not one this reads (the caller falls back to numpy samples)."""
    table = ds.with_format("arrow")[0 : len(ds)]
    n = table.num_rows
    fields: list[dict[str, Any]] = []
    dims: dict[str, Any] = {}
    columns: dict[str, Any] = {}
    shared: list[tuple[str, np.ndarray]] = []  # top-level varying dims and their lengths
    for name in table.column_names:
        col = _encoded_bytes(table.column(name).combine_chunks(), name, path)
        leaf = _leaf(col.type)
        if leaf is not None:
            if col.null_count:
                raise ValueError(f"{path}: HF column {name!r} has missing (null) values")
            fields.append({"name": name, "dims": [], "dtype": leaf, "domain": None, "doc": None})
            columns[name] = _Column(col, leaf, ())
            continue
        if not _is_list(col.type):
            return None
        found = _axes(col, name)
        if found is None:
            return None
        axes, lengths, leaf = found
        named: list[Any] = []
        for level, (axis, size) in enumerate(zip(axes, lengths)):
            if axis is not None:
                named.append(axis)
                continue
            dim = None
            if level == 0 and size is not None:
                dim = next((d for d, s in shared if np.array_equal(s, size)), None)
            if dim is None:
                dim = "T" if not dims else f"T{len(dims)}"
                dims[dim] = None
                if level == 0 and size is not None:
                    shared.append((dim, size))
            named.append(dim)
        fields.append({"name": name, "dims": named, "dtype": leaf, "domain": None, "doc": None})
        columns[name] = _Column(col, leaf, tuple(axes))
    schema = {"name": "HFRow", "doc": None, "dims": dims, "fields": fields}
    return record_from_schema(schema, path), columns, n


def _encoded_bytes(col: Any, name: str, path: str) -> Any:
    """An HF ``Image`` (or ``Audio``) column, ``struct<bytes, path>``, as its bytes: the
    encoded file as stored (``fl.images.decoded`` decodes it); other columns as they are."""
    import pyarrow as pa

    t = col.type
    if not (pa.types.is_struct(t) and t.get_field_index("bytes") >= 0):
        return col
    data = col.field("bytes")
    if not (pa.types.is_binary(data.type) or pa.types.is_large_binary(data.type)):
        return col
    if data.null_count:
        row = data.is_null().to_numpy(zero_copy_only=False).nonzero()[0][0]
        raise ValueError(
            f"{path}: HF column {name!r} row {int(row)} holds no bytes (an image stored by "
            f"its path only): load it with decode=False after embedding the files, "
            f"Dataset.cast_column({name!r}, Image(decode=False)) on a dataset that has them"
        )
    return data


class _Column:
    """One Arrow column, sliced by rows into what ``check_columns`` takes."""

    def __init__(self, arr: Any, leaf: str, axes: tuple[Any, ...]) -> None:
        self.arr, self.leaf, self.axes = arr, leaf, axes
        self.row_bytes = max(1, arr.nbytes // max(len(arr), 1)) if len(arr) else _ROW_GUESS

    def __len__(self) -> int:
        return len(self.arr)

    def __getitem__(self, s: slice) -> Any:
        import pyarrow.compute as pc

        a, b, _ = s.indices(len(self.arr))
        part = self.arr.slice(a, max(0, b - a))
        if self.leaf in ("str", "bytes"):
            return part.to_pylist()
        if not self.axes:
            return part.to_numpy(zero_copy_only=False)
        if None not in self.axes:  # lists of one length at every level: one array
            flat = part
            for _ in self.axes:
                flat = pc.list_flatten(flat)
            values = flat.to_numpy(zero_copy_only=False)
            return values.reshape(len(part), *self.axes)
        if len(self.axes) == 1:  # lists of numbers: a Ragged from the offsets
            offsets = np.asarray(part.offsets, dtype=np.int64)
            values = pc.list_flatten(part).to_numpy(zero_copy_only=False)
            offsets = offsets - offsets[0]
            return Ragged(values, offsets, np.diff(offsets)[:, None], (None,))
        empty = tuple(0 if a is None else a for a in self.axes)  # [] has one axis only
        return [
            np.asarray(row, dtype=self.leaf) if len(row) else np.zeros(empty, self.leaf)
            for row in part.to_pylist()
        ]
