"""A HuggingFace dataset (``save_to_disk``) as typed columns, from its Arrow schema.

Each column's field comes from its Arrow type: a string is a ``str`` field, a binary
one ``bytes``, a number or bool a scalar, and a list (of lists...) of numbers one axis
per level: fixed where every list of that level has one length, else a varying dim.
Top-level list columns whose lengths agree in every row (``input_ids`` and
``attention_mask``) share one dim. The table is the directory's Arrow stream files,
memory-mapped (``_tabular.hf``); ``_arrowcols.decode`` reads each batch of rows from
Arrow's buffers (strings and lists of numbers as a ``Ragged`` from their offsets), no
Python per row but for lists of lists whose lengths vary at two levels.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import FormatError
from ..records import Record, record_from_schema
from ._arrowcols import decode, encoded_bytes
from ._arrowtypes import _is_list, _leaf, _why_not, is_encoded_file


def _axes(
    column: Any, name: str, path: str
) -> tuple[list[Any], list[np.ndarray | None], Any] | None:
    """A list column's axes (an int each, or None where its length varies), each level's
    lengths (None where fixed) and its leaf type; None if it is not lists of numbers."""
    import pyarrow as pa
    import pyarrow.compute as pc

    axes: list[Any] = []
    lengths: list[np.ndarray | None] = []
    arr = column
    while _is_list(arr.type):
        if arr.null_count:
            raise FormatError(
                f"HF column {name!r} has missing (null) lists; feedline has no null", path
            )
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
        raise FormatError(
            f"HF column {name!r} holds lists of {leaf} values: a feedline field holds "
            f"numbers (of any shape), or one {leaf} per example; join each row's values "
            f"into one, or leave the column out (--columns, or Dataset.remove_columns) "
            f"before converting",
            path,
        )
    if leaf is None:
        return None
    return axes, lengths, leaf


def table_record(table: Any, path: str) -> tuple[type[Record], dict[str, Any]]:
    """(record, decoders) of an HF dataset's Arrow table: a decoder for each column that
    ``_arrowcols.decode`` does not read as it is (an image's struct, lists of lists of
    varying lengths at two levels). A type with no field is a ``FormatError`` naming the
    column and saying how to leave it out."""
    fields: list[dict[str, Any]] = []
    dims: dict[str, Any] = {}
    decoders: dict[str, Any] = {}
    shared: list[tuple[str, np.ndarray]] = []  # top-level varying dims and their lengths
    for name in table.column_names:
        col = table.column(name)
        data = _encoded_bytes(col, name, path)
        if data is not col:
            decoders[name] = _image_bytes
        leaf = _leaf(data.type)
        if leaf is not None:
            if data.null_count:
                raise FormatError(f"HF column {name!r} has missing (null) values", path)
            fields.append({"name": name, "dims": [], "dtype": leaf, "domain": None, "doc": None})
            continue
        found = _axes(data, name, path) if _is_list(data.type) else None
        if found is None:
            raise FormatError(
                f"HF column {name!r} is {data.type}, which has no feedline field: "
                f"{_why_not(data.type)}; convert only the columns that have one: "
                f"--columns a,b (columns=[...])",
                path,
            )
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
        if sum(a is None for a in axes) > 1 or (None in axes[1:]):
            decoders[name] = _Rows(leaf, tuple(axes))
    schema = {"name": "HFRow", "doc": None, "dims": dims, "fields": fields}
    return record_from_schema(schema, path), decoders


def _image_bytes(arr: Any, f: Any, where: str, first: int) -> Any:
    return decode(_encoded_bytes(arr, f.name, where), f, where, first)


def _encoded_bytes(col: Any, name: str, path: str) -> Any:
    """An HF ``Image`` (or ``Audio``) column, ``struct<bytes, path>``, as its bytes
    (``_arrowcols.encoded_bytes``); other columns as they are."""
    if not is_encoded_file(col.type):
        return col
    return encoded_bytes(col.combine_chunks() if hasattr(col, "chunks") else col, name, path)


class _Rows:
    """A column of lists of lists whose lengths vary at more than one level: each row an
    array (the one column read per row, in Python)."""

    def __init__(self, leaf: str, axes: tuple[Any, ...]) -> None:
        self.leaf, self.axes = leaf, axes

    def __call__(self, arr: Any, f: Any, where: str, first: int) -> list[np.ndarray]:
        empty = tuple(0 if a is None else a for a in self.axes)  # [] has one axis only
        out = []
        for r, row in enumerate(arr.to_pylist()):
            try:
                out.append(
                    np.asarray(row, dtype=self.leaf) if len(row) else np.zeros(empty, self.leaf)
                )
            except ValueError as e:  # numpy's "inhomogeneous shape"
                raise FormatError(
                    f"HF column {f.name!r} row {first + r:,} holds lists of different "
                    f"lengths side by side ({[len(x) for x in row][:8]}): an example of a "
                    f"field is a rectangular array; pad them, or leave the column out "
                    f"(--columns)",
                    where,
                ) from e
        return out
