"""Arrow tables (``pyarrow.Table``, ``pandas.DataFrame``) as sources of ``fl.Dataset``.

Columns are decoded by ``formats._arrowcols`` (a fixed-width column a numpy array
straight from its buffer, a list, string or binary one a ``Ragged`` from Arrow's own
offsets: no Python per row). The record of a table is inferred from its Arrow schema
(``formats._arrowtypes``) when none is given.
"""

from __future__ import annotations

import sys
from typing import Any

from ..errors import RecordError
from ..formats._arrowcols import check_field, decode
from ..formats._arrowtypes import pyarrow
from ..records import Record


def is_table(src: Any) -> bool:
    """Whether ``src`` is a ``pyarrow.Table`` / ``RecordBatch`` or a ``pandas.DataFrame``
    (neither library is imported to tell)."""
    pa, pd = sys.modules.get("pyarrow"), sys.modules.get("pandas")
    if pa is not None and isinstance(src, (pa.Table, pa.RecordBatch)):
        return True
    return pd is not None and isinstance(src, pd.DataFrame)


def as_table(src: Any, where: str) -> Any:
    """``src`` as a ``pyarrow.Table`` (a DataFrame converted, its index left out)."""
    pa = pyarrow()
    if isinstance(src, pa.Table):
        return src
    if isinstance(src, pa.RecordBatch):
        return pa.Table.from_batches([src])
    try:
        return pa.Table.from_pandas(src, preserve_index=False)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError) as e:
        # pyarrow names the column: "Could not convert ... with type X: ... column c"
        raise RecordError(
            f"{where}: a DataFrame column is not one Arrow type (mixed objects?): {e}"
        ) from e


def table_columns(record: type[Record], table: Any, where: str) -> dict[str, Any]:
    """The record's columns of an Arrow table, decoded once (numpy arrays, ``Ragged``)."""
    missing = [k for k in record.fields if k not in table.column_names]
    if missing:
        raise RecordError(
            f"{where}: {record.__name__} field `{missing[0]}` is not a column of the "
            f"table (it has {table.column_names})"
        )
    out = {}
    for k, f in record.fields.items():
        check_field(f, table.schema.field(k).type, where)
        out[k] = decode(table.column(k), f, where)
    return out


def table_source(record: type[Record], source: Any) -> Any:
    """A ``Dataset``'s source as it reads it: an Arrow table or a DataFrame as its
    record's columns, decoded once; any other source as it is."""
    if not is_table(source):
        return source
    what = f"the {type(source).__name__}"
    return table_columns(record, as_table(source, what), what)
