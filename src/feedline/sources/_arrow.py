"""Arrow tables (``pyarrow.Table``, ``pandas.DataFrame``) as sources of ``fl.Dataset``.

Columns are decoded by ``formats._arrowcols`` (a fixed-width column a numpy array
straight from its buffer, a list, string or binary one a ``Ragged`` from Arrow's own
offsets: no Python per row). The record of a table is inferred from its Arrow schema
(``formats._arrowtypes``) when none is given.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

from ..errors import RecordError
from ..formats._arrowcols import check_field, decode
from ..formats._arrowtypes import column_field, pyarrow
from ..records import Ragged, Record
from ._kinds import _is_hf_dataset


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
    names = [str(c) for c in getattr(src, "columns", [])]
    twice = sorted({c for c in names if names.count(c) > 1})
    if twice:  # a field is one column: which of two would it be
        raise RecordError(f"{where}: the DataFrame has columns named twice: {twice}")
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
    record's columns, decoded once; an HF dataset whose columns all map to the record's
    fields as its Arrow table (``HFSource``); any other source as it is."""
    if _is_hf_dataset(source):
        table = source.data.table
        custom = getattr(source, "format", {}).get("type") == "custom"  # set_transform
        missing = [k for k in record.fields if k not in table.column_names]
        if missing and not custom:  # no transform can make the column: say so now
            raise RecordError(
                f"the HF dataset: {record.__name__} field `{missing[0]}` is not a column "
                f"of the dataset (it has {table.column_names})"
            )
        try:
            for k, f in record.fields.items():
                t = table.schema.field(k).type
                check_field(f, t, "the HF dataset")
                leaf = column_field(k, t, "the HF dataset")[1]
                if f.kind == "array" and not _casts(np.dtype(leaf), f.dtype):
                    return source  # values the record's checks must see item by item
        except (KeyError, RecordError):
            return source  # read item by item, as HF formats them
        return HFSource(record, source)
    if not is_table(source):
        return source
    what = f"the {type(source).__name__}"
    return table_columns(record, as_table(source, what), what)


def _casts(have: np.dtype, want: np.dtype) -> bool:
    """Whether an HF column of ``have`` values fills a field of ``want`` without a check
    per value: the same dtype, a safe cast, or floats to floats (HF stores lists of
    floats as float64)."""
    return bool(have == want or np.can_cast(have, want, "safe") or (have.kind == want.kind == "f"))


class HFSource:
    """An HF ``datasets.Dataset`` read as the Arrow table it is (memory-mapped from its
    cache files), not item by item: the record's columns decoded once per process
    (numpy arrays and ``Ragged`` views of Arrow's buffers; a shuffled or selected
    dataset's rows taken once through its indices), a batch one ``take`` per field.
    It pickles as the HF dataset (which pickles as its files): a worker decodes its own.
    """

    fixed_layout = True  # the columns are the record's dtypes and shapes (check_field)

    def __init__(self, record: type[Record], hf: Any) -> None:
        self.record, self.hf = record, hf
        self._cols: dict[str, Any] | None = None

    def __len__(self) -> int:
        return len(self.hf)

    def _columns(self) -> dict[str, Any]:
        if self._cols is None:
            table = self.hf.data.table
            indices = getattr(self.hf, "_indices", None)
            if indices is not None:  # shuffle() / select() without flatten_indices()
                table = table.take(indices.column(0))
            cols = table_columns(self.record, table, "the HF dataset")
            for k, f in self.record.fields.items():  # HF's float64 lists, a float32 field
                col = cols[k]
                if f.kind != "array" or col.dtype == f.dtype:
                    continue
                if isinstance(col, Ragged):
                    cols[k] = Ragged(
                        col.values.astype(f.dtype), col.offsets, col.shapes, col.template
                    )
                else:
                    cols[k] = col.astype(f.dtype)
            self._cols = cols
        return self._cols

    def getitems(self, idx: Any, out: dict[str, Any] | None = None) -> dict[str, Any]:
        idx = np.asarray(idx, dtype=np.int64)
        batch: dict[str, Any] = {}
        for k, col in self._columns().items():
            if isinstance(col, Ragged):
                batch[k] = col.take(idx)
            elif out is not None and k in out:
                batch[k] = np.take(col, idx, axis=0, out=out[k][: len(idx)], mode="clip")
            else:
                batch[k] = col.take(idx, axis=0)
        return batch

    def __getstate__(self) -> dict:
        return {"record": self.record, "hf": self.hf}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["record"], state["hf"])  # type: ignore[misc]
