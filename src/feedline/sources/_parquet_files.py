"""Opening a Parquet source's files: a local file through pyarrow's memory map, held
as ``LocalParquet`` so that every read can check it is the file the source was made
from; a URL through the remote layer. And whether a file's batches decode to a record's
layout as they are (``layout_fixed``), and whether a file's columns can fill a record
(``check_columns``)."""

from __future__ import annotations

import errno
import os
from typing import Any

import numpy as np

from ..errors import FormatError, MissingFileError, RecordError
from ..formats._arrowcols import check_field
from ..formats._arrowtypes import column_field, pyarrow
from ..formats._remote import is_url
from ..formats._tabular import parquet_file
from ..records import Record


def open_file(path: str, storage_options: Any = None, seen: tuple | None = None) -> Any:
    """A ``pyarrow.parquet.ParquetFile`` (read by ranges through fsspec at a URL; a
    local one as ``LocalParquet``); a ``FormatError`` naming the file when it is not
    Parquet or its footer is cut off, or when it is not the file ``seen`` (``seen()``
    when the source was made) any more."""
    pa = pyarrow()
    import pyarrow.parquet as pq

    if is_url(path):  # through the remote layer: its block cache, retries and pinning
        return parquet_file(path, storage_options, cached=True)

    if not os.path.exists(path):
        raise MissingFileError(f"{path}: no such Parquet file")
    try:
        mapped = pa.memory_map(path, "r")
    except OSError as e:
        if not os.path.exists(path):
            raise MissingFileError(f"{path}: no such Parquet file") from e
        if getattr(e, "errno", None) in (errno.EMFILE, errno.ENFILE):
            raise OSError(
                e.errno,
                f"{path}: too many open files (a Parquet source keeps each of its files "
                f"open: raise the limit, `ulimit -n`, or read fewer files at once)",
                path,
            ) from e
        raise
    local = LocalParquet(path, mapped)
    try:
        local.pf = pq.ParquetFile(mapped)
    except (pa.ArrowException, OSError) as e:  # any pyarrow error: a bad file
        mapped.close()
        size = os.path.getsize(path)
        raise FormatError(
            f"expected a Parquet file (PAR1 at both ends, a footer of metadata), "
            f"found {size:,} bytes that pyarrow cannot read as one (truncated, or not "
            f"Parquet): {e}",
            path,
        ) from e
    if seen is not None:
        local.check(seen)
    return local


class LocalParquet:
    """A local Parquet file as pyarrow reads it, through its memory map: ``check`` sees
    the file written over in place since ``seen()`` (its size or modification time
    changed; a touch counts), which would mix row groups of two versions (or, cut
    short, kill the process on a read through the map), and, in a process that opened
    it again, a file replaced since (another inode at the path). A process that made
    the source reads on from a replaced file's old contents."""

    def __init__(self, path: str, mapped: Any) -> None:
        self.path, self.mapped = path, mapped
        self.pf: Any = None

    def __getattr__(self, name: str) -> Any:  # metadata, schema_arrow, read_row_group(s)
        return getattr(self.pf, name)

    def seen(self) -> tuple[int, int, int, int]:
        """(device, inode, size, modification time in ns) of the open file."""
        st = os.fstat(self.mapped.fileno())
        return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns

    def check(self, seen: tuple[int, int, int, int]) -> None:
        """A ``FormatError`` unless the open file is the one ``seen`` (one ``fstat``)."""
        now = self.seen()
        if now[:2] != seen[:2]:
            raise FormatError(
                "expected the file the source was made from, found another at its path "
                "(replaced since): this process would read the new version and the "
                "source's own process the old; make the source again",
                self.path,
            )
        if now != seen:
            raise FormatError(
                f"expected the file as it was when the source was made ({seen[2]:,} bytes, "
                f"modified at {seen[3]} ns), found it written over in place ({now[2]:,} "
                f"bytes, modified at {now[3]} ns): its row groups would mix two versions; "
                f"make the source again (and write files by replacing them)",
                self.path,
            )


def layout_fixed(record: type[Record], schema: Any) -> bool:
    """Whether every batch decodes to the record's dtypes and shapes as they are (no
    cast left to make, no bound to check): a ``Dataset`` then trusts its batches."""
    for name, f in record.fields.items():
        if f.max_bytes is not None or any(record.varying[d].max is not None for d in f.varying):
            return False
        if f.kind == "array":
            _, leaf = column_field(name, schema.field(name).type, "")
            if not np.can_cast(np.dtype(leaf), f.dtype, "safe"):
                return False
    return True


def check_columns(
    record: type[Record], path: str, schema: Any, first: Any, first_path: str
) -> None:
    """A ``RecordError`` unless file ``path`` (of Arrow schema ``schema``) has a column
    for each of the record's fields, of a type that fills it (``check_field``); a
    ``FormatError`` where a column's type is not the one it has in the source's first
    file (``first``, at ``first_path``): the files of one source share their types."""
    for name, f in record.fields.items():
        if name not in schema.names:
            raise RecordError(
                f"{path}: {record.__name__} field `{name}` is not a column of the "
                f"file (it has {schema.names})"
            )
        t = schema.field(name).type
        check_field(f, t, path)
        if path != first_path and t != first.field(name).type:
            raise FormatError(
                f"column {name!r} is {t} here, {first.field(name).type} in "
                f"{first_path}: the files of one source share their columns' types",
                path,
            )
