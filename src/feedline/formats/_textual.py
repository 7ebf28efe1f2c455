"""CSV and JSONL files as ``ArrowInput`` s, streamed: pyarrow parses them a block at a
time, and a bad row is a ``FormatError`` naming the file and its line.

CSV goes through pyarrow's streaming reader; the columns' types are inferred from the
first block (a later value that does not convert is an error naming the column). A
JSONL file is cut into blocks of whole lines, each parsed by ``pyarrow.json`` against
the first block's schema, so a line that is not JSON is named by its number in the
file (pyarrow's own streaming reader counts rows within a block).
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterator, Mapping
from typing import Any

from ..errors import FormatError
from ._arrowtypes import pyarrow
from ._fsinput import open_input
from ._tabular import ArrowInput, record_of

# Bytes of text parsed at a time.
BLOCK_BYTES = 16 << 20


def csv(
    path: str, columns: list[str] | None, storage_options: Mapping[str, Any] | None
) -> ArrowInput:
    pa = pyarrow()
    import pyarrow.csv as pcsv

    bad: list[Any] = []

    def invalid(row: Any) -> str:  # pyarrow's InvalidRow: the line, its columns
        bad.append(row)
        return "error"

    delimiter = "\t" if path.lower().endswith(".tsv") else ","

    def reader() -> Any:
        try:
            return pcsv.open_csv(
                open_input(path, storage_options),
                read_options=pcsv.ReadOptions(block_size=BLOCK_BYTES, use_threads=False),
                parse_options=pcsv.ParseOptions(delimiter=delimiter, invalid_row_handler=invalid),
                convert_options=pcsv.ConvertOptions(include_columns=columns),
            )
        except (pa.ArrowInvalid, pa.ArrowKeyError) as e:
            raise _csv_error(e, bad, path) from e

    first = reader()
    if any(pa.types.is_null(f.type) for f in first.schema) and not _has_rows(reader(), pa):
        # every type comes from the rows: with none, each column reads as null
        raise FormatError("expected rows after the header, found the header only", path)
    record = record_of(first.schema, path, columns)
    names = list(record.fields)

    opened = [first]  # the first pass reads the reader the schema came from

    def batches(step: int) -> Iterator[Any]:
        r = opened.pop() if opened else reader()
        try:
            for b in r:
                for a in range(0, b.num_rows, step):
                    yield b.slice(a, step).select(names)
        except (pa.ArrowInvalid, pa.ArrowKeyError) as e:
            raise _csv_error(e, bad, path) from e

    return ArrowInput(path, record, None, batches)


def _has_rows(reader: Any, pa: Any) -> bool:
    """Whether a CSV reader yields a row (a bad row counts: its error comes later)."""
    try:
        return any(b.num_rows for b in reader)
    except (pa.ArrowInvalid, pa.ArrowKeyError):
        return True


def _csv_error(e: Exception, bad: list[Any], path: str) -> FormatError:
    if bad:
        row = bad[-1]
        line = row.number
        where = f"line {line:,} (row {line - 2:,} of the data, from 0)" if line else "a row"
        return FormatError(
            f"{where} has {row.actual_columns} columns, the header {row.expected_columns}: "
            f"{row.text[:120]!r}",
            path,
        )
    text = str(e)
    if "cannot infer number of columns" in text and not text.startswith("Empty CSV file"):
        # one line with no line break after it (or blank lines): no header pyarrow reads
        return FormatError("expected a header and rows, found no rows (a header at most)", path)
    if "conversion error" in text:
        return FormatError(
            f"a value does not convert to its column's type, inferred from the first "
            f"{BLOCK_BYTES >> 20} MiB of rows: {text}",
            path,
        )
    return FormatError(
        f"expected CSV (a header, then rows), found what pyarrow cannot read: {text}", path
    )


def _blocks(f: Any) -> Iterator[tuple[int, bytes]]:
    """(lines before it, block) of whole lines, about ``BLOCK_BYTES`` each."""
    lines = 0
    rest = b""
    while True:
        data = f.read(BLOCK_BYTES)
        if not data:
            break
        data = rest + data
        cut = data.rfind(b"\n") + 1
        if not cut:
            rest = data
            continue
        block, rest = data[:cut], data[cut:]
        yield lines, block
        lines += block.count(b"\n")
    if rest.strip():
        yield lines, rest + b"\n"


_ROW = re.compile(r"in row (\d+)")


def _line_of(block: bytes, row: int) -> int:
    """The line (from 0, in the block) of pyarrow's ``row`` (it skips blank lines)."""
    seen = -1
    for k, line in enumerate(block.split(b"\n")):
        if line.strip():
            seen += 1
            if seen == row:
                return k
    return row


def jsonl(
    path: str, columns: list[str] | None, storage_options: Mapping[str, Any] | None
) -> ArrowInput:
    pa = pyarrow()
    import pyarrow.json as pjson

    def parse(lines: int, block: bytes, schema: Any) -> Any:
        opts = pjson.ParseOptions(
            explicit_schema=schema,
            unexpected_field_behavior="infer"
            if schema is None
            else ("error" if columns is None else "ignore"),
        )
        try:
            table = pjson.read_json(
                io.BytesIO(block),
                read_options=pjson.ReadOptions(block_size=len(block) + 1, use_threads=True),
                parse_options=opts,
            )
        except pa.ArrowInvalid as e:
            m = _ROW.search(str(e))
            at = f"line {lines + _line_of(block, int(m.group(1))) + 1:,}" if m else "a line"
            raise FormatError(f"{at} is not a JSON object of the file's fields: {e}", path) from e
        return table

    def blocks() -> Iterator[tuple[int, bytes]]:
        with open_input(path, storage_options) as f:
            yield from _blocks(f)

    head = next(blocks(), None)
    if head is None:
        raise FormatError("expected JSON lines (an object a line), found no line", path)
    first = parse(*head, None)
    record = record_of(first.schema, path, columns)
    names = list(record.fields)
    schema = first.schema

    def batches(step: int) -> Iterator[Any]:
        for lines, block in blocks():
            table = parse(lines, block, schema).select(names)
            yield from table.to_batches(max_chunksize=step)

    return ArrowInput(path, record, None, batches)
