"""``fl.sources.table``: a ``pyarrow.Table`` or a ``pandas.DataFrame`` as an in-memory
dataset whose record is inferred from its Arrow schema."""

from __future__ import annotations

from typing import Any

from ..formats._arrowtypes import schema_record
from ..records import Record
from ._arrow import as_table, is_table
from ._dataset import Dataset
from ._kinds import _is_hf_dataset


def table(
    data: Any, record: type[Record] | None = None, *, columns: list[str] | None = None
) -> Dataset:
    """A ``pyarrow.Table`` (or ``RecordBatch``) or a ``pandas.DataFrame`` as an in-memory
    ``fl.Dataset``, its columns decoded once; an HF ``datasets.Dataset`` as its Arrow
    table, read in place.

    ``record`` chooses the fields (each a column of that name); without one it is
    inferred from the Arrow schema, of every column or of ``columns``: numbers and
    bools are scalars, fixed-size lists fixed dims, lists a varying dim, strings (a
    DataFrame's object column of ``str``) ``str`` fields and binary ``bytes``. A column
    with no field (a struct, a date...) is a ``RecordError`` naming it and saying why.
    ``fl.Dataset(record, table)`` is the same with a record given.

    >>> import pyarrow as pa, feedline as fl
    >>> ds = fl.sources.table(pa.table({"x": [1.5, 2.5], "label": [0, 1]}))
    >>> ds.record.__name__, list(ds.record.fields), ds[1]["x"].item()
    ('TableRow', ['x', 'label'], 2.5)
    """
    where = type(data).__name__
    if _is_hf_dataset(data):  # its Arrow table, read in place (``_arrow.HFSource``)
        if record is None:
            record = schema_record(data.data.table.schema, "TableRow", where, columns)
        elif columns is not None:
            raise TypeError("fl.sources.table takes record= or columns=, not both")
        return Dataset(record, data)
    if not is_table(data):
        raise TypeError(
            f"fl.sources.table takes a pyarrow.Table or a pandas.DataFrame (or an HF "
            f"dataset), got {where}"
        )
    tbl = as_table(data, where)
    if record is None:
        record = schema_record(tbl.schema, "TableRow", where, columns)
    elif columns is not None:
        raise TypeError("fl.sources.table takes record= or columns=, not both")
    return Dataset(record, tbl)
