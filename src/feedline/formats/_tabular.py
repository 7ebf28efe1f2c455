"""Tables that ``convert`` reads through Arrow, a batch of rows at a time: Parquet files
(by row group), Arrow IPC files and streams (Feather), CSV, JSONL and HuggingFace
``save_to_disk`` directories, local or at fsspec URLs.

Each is an ``ArrowInput``: the record (inferred from the Arrow schema, of every column
or of ``columns``), the rows when known, and ``chunks``: column chunks for
``recfile.write_chunks``, each Arrow batch decoded by ``_arrowcols.decode`` (numpy
views and ``Ragged`` values from Arrow's buffers, no Python per row). Memory stays at
one batch (a Parquet row group's compressed pages, a CSV block) plus the chunk written.

========================  ======================================================
input                     read as
========================  ======================================================
``.parquet`` (PAR1)       row group by row group, only the columns asked for
``.arrow`` / ``.feather`` the file's record batches, memory-mapped (zero copy)
``.csv`` / ``.tsv``       pyarrow's streaming CSV reader; types from the first block
``.jsonl`` / ``.ndjson``  blocks of whole lines, each parsed by pyarrow (``_textual``)
HF directory              its Arrow stream files, memory-mapped (``_hf`` infers)
========================  ======================================================
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from ..errors import FormatError, RecordError
from ..records import Field, Record
from ._arrowcols import check_field, decode
from ._arrowtypes import pyarrow, schema_record
from ._fsinput import exists, expand, join, open_cached, open_input, read_bytes
from ._image_sizes import SizedInput, with_sizes
from ._remote import is_url

# Decoded bytes a chunk holds (rows per chunk from the rows' size where it is known).
CHUNK_BYTES = 32 << 20
# Batches of fewer rows are joined before they are decoded and written.
SMALL = 16_384
_ROW_GUESS = 256

Progress = Callable[[int, int], None]  # (rows done, rows in all: 0 where not known)
Decoder = Callable[[Any, Field, str, int], Any]  # (Arrow array, field, where, first row)

# the kinds by name, for a URL (not sniffed) or a text file (no magic)
EXTENSIONS = {
    ".parquet": "parquet",
    ".pq": "parquet",
    ".arrow": "arrow",
    ".feather": "arrow",
    ".ipc": "arrow",
    ".arrows": "arrow",
    ".csv": "csv",
    ".tsv": "csv",
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
}
KINDS = ("parquet", "arrow", "csv", "jsonl", "hf")


def kind_by_name(path: str, storage_options: Mapping[str, Any] | None = None) -> str | None:
    """The kind of a URL or text file by its name (an HF directory by its
    ``state.json``), or None."""
    kind = EXTENSIONS.get(os.path.splitext(path.rstrip("/"))[1].lower())
    if kind is None and is_url(path) and exists(join(path, "state.json"), storage_options):
        return "hf"
    return kind


class ArrowInput:
    """A table read a batch at a time: ``record``, ``rows`` (None until read, for CSV,
    JSONL and Arrow streams) and ``chunks``."""

    def __init__(
        self,
        where: str,
        record: type[Record],
        rows: int | None,
        batches: Callable[[int], Iterator[Any]],
        row_bytes: int = _ROW_GUESS,
        decoders: Mapping[str, Decoder] | None = None,
    ) -> None:
        self.where, self.record, self.rows = where, record, rows
        self._batches, self._decoders = batches, dict(decoders or {})
        self.step = max(1024, min(1 << 20, CHUNK_BYTES // max(row_bytes, 1)))

    def chunks(self, progress: Progress | None = None) -> Iterator[dict[str, Any]]:
        """The record's columns, a batch of rows at a time."""
        first = 0
        fields = self.record.fields
        for batch in _coalesced(self._batches(self.step), self.step):
            n = batch.num_rows
            yield {
                k: self._decoders.get(k, decode)(batch.column(k), f, self.where, first)
                for k, f in fields.items()
            }
            first += n
            if progress:
                progress(first, self.rows or 0)


def _coalesced(batches: Iterator[Any], step: int) -> Iterator[Any]:
    """Batches of at least ``SMALL`` rows as they come; smaller ones (an HF file's 1,000
    rows, a JSONL block's) joined up to ``step`` rows (one copy, of a chunk), so the
    writer's work per chunk is not paid per thousand rows."""
    pa = pyarrow()
    pending: list[Any] = []
    rows = 0
    for b in batches:
        if not b.num_rows:
            continue
        if b.num_rows >= SMALL and not pending:
            yield b
            continue
        pending.append(b)
        rows += b.num_rows
        if rows >= step or b.num_rows >= SMALL:
            yield pa.Table.from_batches(pending).combine_chunks()
            pending, rows = [], 0
    if pending:
        yield pa.Table.from_batches(pending).combine_chunks()


def record_of(
    schema: Any, where: str, columns: list[str] | None, name: str = "Row"
) -> type[Record]:
    """The record of a table's schema; a column with no field is a ``FormatError``
    naming the file, the column and its type, and saying how to leave it out."""
    try:
        return schema_record(schema, name, where, columns)
    except RecordError as e:
        text = str(e).removeprefix(f"{where}: ")
        if columns is None:  # a column that has no field (not a column asked for that is not)
            text += "; convert only the columns that have one: --columns a,b (columns=[...])"
        raise FormatError(text, where) from e


def stored_record(schema: Any, where: str) -> type[Record] | None:
    """The record a ``.flr`` converted to Parquet keeps in its metadata (its dim names,
    domains and docs), when it still fits the file's columns; else None (inferred)."""
    from ..records import record_from_schema
    from ._to_parquet import RECORD_KEY

    stored = (schema.metadata or {}).get(RECORD_KEY)
    if stored is None:
        return None
    try:
        record = record_from_schema(json.loads(stored), where)
        for name, f in record.fields.items():
            check_field(f, schema.field(name).type, where)
    except (ValueError, TypeError, KeyError):  # RecordError is a TypeError
        return None
    return record


def _sliced(batches: Iterator[Any], step: int) -> Iterator[Any]:
    for b in batches:
        for a in range(0, b.num_rows, step):
            yield b.slice(a, step)


# -- Parquet -------------------------------------------------------------------------
def parquet_file(
    path: str,
    storage_options: Mapping[str, Any] | None = None,
    *,
    mapped: bool = True,
    cached: bool = False,
) -> Any:
    """A ``pyarrow.parquet.ParquetFile`` (memory-mapped, or read as a plain file when not
    ``mapped``, or by ranges at a URL: through feedline's block cache when ``cached``);
    a ``FormatError`` naming the file when it is not Parquet or its footer is cut off."""
    pa = pyarrow()
    import pyarrow.parquet as pq

    if cached and is_url(path):
        source: Any = open_cached(path, storage_options)
    else:
        source = open_input(path, storage_options, mapped=mapped)
    try:
        return pq.ParquetFile(source)
    except (pa.ArrowInvalid, pa.ArrowIOError, OSError) as e:
        size = source.size() if isinstance(source, pa.NativeFile) else source.size
        source.close()
        raise FormatError(
            f"expected a Parquet file (PAR1 at both ends, a footer of metadata), found "
            f"{size:,} bytes that pyarrow cannot read as one (truncated, or not "
            f"Parquet): {e}",
            path,
        ) from e


def same_types(record: type[Record], schema: Any, first: Any, path: str, first_path: str) -> None:
    """A later file's columns must have the first file's types."""
    for name in record.fields:
        if name not in schema.names:
            raise FormatError(
                f"{record.__name__} field `{name}` is not a column of the file (it has "
                f"{schema.names})",
                path,
            )
        t, t0 = schema.field(name).type, first.field(name).type
        if t != t0:
            raise FormatError(
                f"column {name!r} is {t} here, {t0} in {first_path}: the files of one "
                f"table share their columns' types",
                path,
            )


def parquet(
    path: Any, columns: list[str] | None, storage_options: Mapping[str, Any] | None
) -> ArrowInput | SizedInput:
    pa = pyarrow()
    paths = expand(path, "Parquet file", storage_options)
    # read once in order: a plain file, so the pages read are not held as the process's
    files = [parquet_file(p, storage_options, mapped=False) for p in paths]
    schema = files[0].schema_arrow
    where = paths[0] if len(paths) == 1 else f"{paths[0]} (and {len(paths) - 1} more)"
    record = stored_record(schema, paths[0]) if columns is None else None
    record = record or record_of(schema, paths[0], columns)
    for p, pf in zip(paths[1:], files[1:]):
        same_types(record, pf.schema_arrow, schema, p, paths[0])
    names = list(record.fields)
    rows = sum(pf.metadata.num_rows for pf in files)
    size = sum(
        pf.metadata.row_group(g).column(i).total_uncompressed_size
        for pf in files[:1]
        for g in range(pf.metadata.num_row_groups)
        for i in range(pf.metadata.num_columns)
        if pf.metadata.schema.column(i).path.split(".")[0] in record.fields
    )
    row_bytes = size // max(files[0].metadata.num_rows, 1) or _ROW_GUESS

    def batches(step: int) -> Iterator[Any]:
        start = 0
        for p, pf in zip(paths, files):
            for g in range(pf.metadata.num_row_groups):
                n = pf.metadata.row_group(g).num_rows
                try:
                    yield from pf.iter_batches(
                        batch_size=step, row_groups=[g], columns=names, use_threads=True
                    )
                except (pa.ArrowInvalid, pa.ArrowIOError, OSError) as e:
                    raise FormatError(
                        f"row group {g} (rows {start:,} to {start + n:,}, columns {names}) "
                        f"does not decode (truncated or corrupt): {e}",
                        p,
                    ) from e
                start += n

    return with_sizes(ArrowInput(where, record, rows, batches, row_bytes), schema)


# -- Arrow IPC files and streams (Feather) -------------------------------------------
def ipc_open(
    path: str, storage_options: Any
) -> tuple[Any, int | None, Callable[[], Iterator[Any]]]:
    """(schema, rows, record batches) of an Arrow IPC file (its rows counted from the map;
    None at a URL, where that would read every batch twice), an Arrow stream (rows
    None) or a Feather version 1 file (read whole by pyarrow). Bytes that are none of
    them are a ``FormatError`` naming the file."""
    pa = pyarrow()
    import pyarrow.ipc as ipc

    source = open_input(path, storage_options)
    head = source.read(8)
    source.seek(0)
    try:
        if head[:6] == b"ARROW1":
            reader = ipc.open_file(source)
            rows: int | None = None
            if not is_url(path):
                rows = sum(
                    reader.get_record_batch(i).num_rows for i in range(reader.num_record_batches)
                )

            def every() -> Iterator[Any]:
                for i in range(reader.num_record_batches):
                    yield reader.get_record_batch(i)

            return reader.schema, rows, every
        if head[:4] == b"FEA1":  # Feather version 1: read whole by pyarrow
            import pyarrow.feather as feather

            table = feather.read_table(source)
            return table.schema, table.num_rows, table.to_batches
        stream = ipc.open_stream(source)
        return stream.schema, None, lambda: iter(stream)
    except (pa.ArrowInvalid, pa.ArrowIOError) as e:
        source.close()
        raise FormatError(
            f"expected an Arrow IPC file or stream (Feather), found bytes pyarrow cannot "
            f"read as one (truncated, or another format): {e}",
            path,
        ) from e


def arrow(path: str, columns: list[str] | None, storage_options: Any) -> ArrowInput:
    pa = pyarrow()
    schema, rows, every = ipc_open(path, storage_options)
    record = record_of(schema, path, columns)
    names = list(record.fields)

    def batches(step: int) -> Iterator[Any]:
        try:
            yield from _sliced((b.select(names) for b in every()), step)
        except (pa.ArrowInvalid, pa.ArrowIOError) as e:
            raise FormatError(f"a record batch does not read (truncated?): {e}", path) from e

    return ArrowInput(path, record, rows, batches)


# -- HuggingFace save_to_disk directories ---------------------------------------------
def hf(path: str, columns: list[str] | None, storage_options: Any) -> ArrowInput | SizedInput:
    """An HF dataset directory: its Arrow stream files (``state.json``'s data files),
    memory-mapped and read without the ``datasets`` package."""
    pa = pyarrow()
    import pyarrow.ipc as ipc

    from . import _hf

    try:
        state = json.loads(read_bytes(join(path, "state.json"), storage_options))
        files = [d["filename"] for d in state["_data_files"]]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise FormatError(
            f"expected a HuggingFace dataset saved with save_to_disk (a state.json listing "
            f"its data files), found none that reads: {e}",
            path,
        ) from e
    if state.get("_indices_data_files"):
        raise FormatError(
            "the dataset has an indices mapping (select or shuffle not flattened): save it "
            "again with Dataset.flatten_indices() first",
            path,
        )
    tables = []
    for name in files:
        where = join(path, name)
        try:
            tables.append(ipc.open_stream(open_input(where, storage_options)).read_all())
        except (pa.ArrowInvalid, pa.ArrowIOError) as e:
            raise FormatError(f"an HF data file does not read as Arrow: {e}", where) from e
    table = _storage(pa.concat_tables(tables) if len(tables) > 1 else tables[0])
    if columns is not None:
        missing = [c for c in columns if c not in table.column_names]
        if missing:
            raise FormatError(f"no column {missing[0]!r} (it has {table.column_names})", path)
        table = table.select(columns)
    record, decoders = _hf.table_record(table, path)
    row_bytes = table.nbytes // max(table.num_rows, 1) or _ROW_GUESS

    def batches(step: int) -> Iterator[Any]:
        yield from table.to_batches(max_chunksize=step)

    inp = ArrowInput(path, record, table.num_rows, batches, row_bytes, decoders)
    return with_sizes(inp, table.schema)


def _storage(table: Any) -> Any:
    """A table with each extension-typed column (HF's ``Array2D`` when ``datasets`` is
    imported and has registered it) as its storage (lists of lists), zero copy."""
    pa = pyarrow()
    for i, t in enumerate(table.schema.types):
        if isinstance(t, pa.ExtensionType):
            col = table.column(i)
            plain = pa.chunked_array([c.storage for c in col.chunks], type=t.storage_type)
            table = table.set_column(i, table.schema.field(i).name, plain)
    return table


def open_table(
    path: Any,
    kind: str,
    columns: list[str] | None = None,
    storage_options: Mapping[str, Any] | None = None,
) -> ArrowInput | SizedInput:
    """The ``ArrowInput`` of a file of ``kind`` (``parquet``, ``arrow`` or ``hf``; CSV
    and JSONL are ``_textual``'s)."""
    if kind == "parquet":
        return parquet(path, columns, storage_options)
    if kind == "arrow":
        return arrow(path, columns, storage_options)
    if kind == "hf":
        return hf(path, columns, storage_options)
    raise ValueError(f"{path}: not a table feedline reads (found {kind})")
