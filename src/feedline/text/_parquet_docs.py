"""Documents from a Parquet file's text column, streamed by row group.

A document is one row's value of a string column (``text_field``). The scan reads the
row count from the footer and hashes the file; the read decodes one row group's column
at a time (``read_row_group(i, columns=[text_field])``) and hands it on in slices of
about ``chunk_bytes`` of text, then hashes the file again, so memory is one row
group's column whatever the file's size. pyarrow (the ``parquet`` extra) is imported
when a Parquet input is read, never with this module.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from typing import Any

from ..errors import FormatError
from ..formats._arrowtypes import pyarrow
from ._docs import CorpusScan, _open

__all__ = ["parquet_blocks", "scan_parquet"]


def _open_parquet(path: str | os.PathLike[str], column: str) -> Any:
    pa = pyarrow()
    import pyarrow.parquet as pq

    with _open(path):  # a missing file or a directory: the text inputs' errors
        pass
    try:
        pf = pq.ParquetFile(os.fspath(path))
    except (pa.ArrowException, OSError) as e:
        raise FormatError(f"expected a Parquet file, pyarrow says: {e}", path) from e
    schema = pf.schema_arrow
    if column not in schema.names:
        raise FormatError(
            f"no column {column!r} (text_field) to read documents from; its columns are "
            f"{schema.names}",
            path,
        )
    t = schema.field(column).type
    if not (pa.types.is_string(t) or pa.types.is_large_string(t)):
        raise FormatError(
            f"column {column!r} (text_field) is {t}, expected a string column of documents",
            path,
        )
    return pf


def _hash_file(path: str | os.PathLike[str], chunk_bytes: int, digest: Any, on_block: Any) -> int:
    size = 0
    with _open(path) as f:
        while block := f.read(chunk_bytes):
            digest.update(block)
            size += len(block)
            if on_block is not None:
                on_block(len(block))
    return size


def scan_parquet(
    path: str | os.PathLike[str], column: str, chunk_bytes: int, on_block: Any
) -> CorpusScan:
    """The file's row count (its footer's) and SHA-256; the column is checked."""
    pf = _open_parquet(path, column)
    digest = hashlib.sha256()
    size = _hash_file(path, chunk_bytes, digest, on_block)
    return CorpusScan(int(pf.metadata.num_rows), size, digest.hexdigest())


def parquet_blocks(
    path: str | os.PathLike[str], column: str, chunk_bytes: int, digest: Any
) -> Iterator[tuple[list[str], int]]:
    """The column's values (``str``) in slices of about ``chunk_bytes`` of text, each
    with its share of the file's bytes (by rows); a null value is a ``FormatError``
    naming the row and the column. The file is hashed into ``digest`` at the end."""
    pf = _open_parquet(path, column)
    size = os.path.getsize(path)
    total = int(pf.metadata.num_rows)
    row = reported = 0
    for g in range(pf.num_row_groups):
        values = pf.read_row_group(g, columns=[column]).column(0).combine_chunks()
        n = len(values)
        # rows a slice: about chunk_bytes of text at this row group's mean length
        step = max(1, int(n * chunk_bytes // max(1, values.nbytes)))
        for a in range(0, n, step):
            part = values.slice(a, step)
            if part.null_count:
                at = row + a + int(part.is_null().index(True).as_py())
                raise FormatError(
                    f"row {at} (row group {g}): column {column!r} is null, expected "
                    "a document's text",
                    path,
                )
            done = row + a + len(part)
            share = size * done // total - reported if total else 0
            reported += share
            try:
                docs = part.to_pylist()
            except UnicodeDecodeError:  # Arrow does not check a file's strings
                raise _not_utf8(path, column, g, row + a, part) from None
            yield docs, share
        row += n
    if digest is not None:
        _hash_file(path, chunk_bytes, digest, None)
    if reported < size:
        yield [], size - reported


def _not_utf8(
    path: str | os.PathLike[str], column: str, group: int, first: int, part: Any
) -> FormatError:
    """The error for the first value of ``part`` (rows from ``first``) that is not UTF-8."""
    raw = part.view(pyarrow().binary()).to_pylist()
    for i, value in enumerate(raw):
        try:
            value.decode("utf-8")
        except UnicodeDecodeError as e:
            return FormatError(
                f"row {first + i} (row group {group}): column {column!r} is not UTF-8 "
                f"text (the byte 0x{value[e.start]:02x} at {e.start} of the value)",
                path,
            )
    return FormatError(f"rows {first}...: column {column!r} is not UTF-8 text", path)
