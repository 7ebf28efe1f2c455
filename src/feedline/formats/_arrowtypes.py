"""Arrow types as feedline fields: the one mapping that every Arrow reader shares (an HF
dataset, a Parquet file, a ``pyarrow.Table``, a ``pandas.DataFrame``).

==========================================  =========================================
Arrow type                                  field
==========================================  =========================================
integer, floating point, bool               a scalar of that dtype
string, large string                        ``str`` (one per example)
binary, large binary                        ``bytes`` (one per example)
struct<bytes: binary, path: string>         ``bytes``: the encoded file (an HF ``Image``
                                            or ``Audio`` column, as HF's Parquet holds it)
fixed-size list (of fixed-size lists...)    a fixed axis per level
list, large list (of fixed-size lists)      a varying first axis (``None``)
anything else (struct, map, dates...)       none: ``column_field`` says which and why
==========================================  =========================================

pyarrow is imported when a type is mapped, never with this module.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import RecordError

# The extra that brings pyarrow, named by every error that finds it missing.
EXTRA = "pip install 'feedline[parquet]'"


def pyarrow() -> Any:
    """The ``pyarrow`` module, or an ``ImportError`` naming the extra that installs it."""
    try:
        import pyarrow as pa
    except ImportError as e:
        raise ImportError(f"reading Arrow and Parquet data needs pyarrow: {EXTRA}") from e
    return pa


def _is_list(t: Any) -> bool:
    pa = pyarrow()
    return bool(pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t))


def _leaf(t: Any) -> str | None:
    """The field's dtype for an Arrow leaf type: a numpy dtype string, ``"str"``,
    ``"bytes"``, or None where feedline has none (structs, dictionaries, dates...)."""
    pa = pyarrow()
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return "str"
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return "bytes"
    if pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t):
        return np.dtype(t.to_pandas_dtype()).str
    if is_encoded_file(t):
        return "bytes"
    return None


def is_encoded_file(t: Any) -> bool:
    """Whether ``t`` is HF's ``Image`` / ``Audio`` storage, ``struct<bytes, path>``: the
    file's bytes as stored, and the path it came from."""
    pa = pyarrow()
    if not pa.types.is_struct(t) or t.get_field_index("bytes") < 0:
        return False
    data = t.field(t.get_field_index("bytes")).type
    return bool(pa.types.is_binary(data) or pa.types.is_large_binary(data))


def _why_not(t: Any) -> str:
    """Why an Arrow type has no field, and what to do instead."""
    pa = pyarrow()
    if pa.types.is_struct(t):
        return (
            "a struct (named fields inside one column): flatten it into a column per "
            "child (pyarrow.Table.flatten(), or an HF dataset's .flatten()) and rename "
            "those columns to identifiers ('a.b' cannot name a field: "
            "rename_columns), or leave it out"
        )
    if pa.types.is_map(t):
        return "a map (key-value pairs per row): a field has one shape for every example"
    if pa.types.is_temporal(t):
        return (
            "a date or time: feedline fields hold numbers; cast it to int64 "
            "(pyarrow.compute.cast) or leave it out"
        )
    if pa.types.is_dictionary(t):
        return "dictionary-encoded: cast it to its value type (pyarrow.compute.cast) first"
    if pa.types.is_decimal(t):
        return "a decimal: cast it to float64 or int64 first"
    if pa.types.is_null(t):
        return "a column of nulls only: it holds no values"
    return "not a number, bool, string, binary or list of numbers"


def column_field(name: str, t: Any, where: str) -> tuple[list[int | None], str]:
    """(axes, dtype) of the field for column ``name`` of Arrow type ``t``: an int per
    fixed axis, None for a varying one (only the first, a list's); the dtype a numpy
    dtype string, ``"str"`` or ``"bytes"``. A ``RecordError`` naming the column, the
    type and why, for a type with no field."""
    pa = pyarrow()
    axes: list[int | None] = []
    inner = t
    while _is_list(inner):
        if pa.types.is_fixed_size_list(inner):
            axes.append(int(inner.list_size))
        elif axes:
            raise RecordError(
                f"{where}: column {name!r} is {t}: a list inside a list may vary only at "
                f"its first level (make the inner lists fixed-size, or leave it out)"
            )
        else:
            axes.append(None)
        inner = inner.value_type
    leaf = _leaf(inner)
    if leaf is None:
        raise RecordError(
            f"{where}: column {name!r} is {t}, which has no feedline field: {_why_not(inner)}"
        )
    if axes and leaf in ("str", "bytes"):
        raise RecordError(
            f"{where}: column {name!r} is {t}: a feedline field holds numbers (of any "
            f"shape), or one {leaf} per example; join each row's values into one, or "
            f"leave the column out"
        )
    return axes, leaf


def schema_record(schema: Any, name: str, where: str, columns: list[str] | None = None) -> Any:
    """The record of an Arrow ``schema`` (or of its ``columns``): a field per column, named
    by it, each list column with a varying dim of its own (``T``, ``T1``, ...)."""
    from ..records import record_from_schema

    names = list(schema.names) if columns is None else list(columns)
    missing = [c for c in names if c not in schema.names]
    if missing:
        raise RecordError(f"{where}: no column {missing[0]!r} (it has {list(schema.names)})")
    if not names:
        raise RecordError(f"{where}: no columns to read")
    fields: list[dict[str, Any]] = []
    dims: dict[str, Any] = {}
    for col in names:
        if not (col.isidentifier() and not col.startswith("_")):
            raise RecordError(
                f"{where}: column {col!r} cannot name a field (a field is a batch "
                f"attribute: an identifier not starting with _); rename the column, or "
                f"choose the columns read (record=, columns=)"
            )
        axes, dtype = column_field(col, schema.field(col).type, where)
        named: list[Any] = []
        for axis in axes:
            if axis is None:
                dim = "T" if not dims else f"T{len(dims)}"
                dims[dim] = None
                named.append(dim)
            else:
                named.append(axis)
        fields.append({"name": col, "dims": named, "dtype": dtype, "domain": None, "doc": None})
    return record_from_schema({"name": name, "doc": None, "dims": dims, "fields": fields}, where)
