"""Arrow IPC files (Feather version 2 included) as a typed random-access source,
memory-mapped.

The file is opened with ``pyarrow.memory_map`` and ``ipc.open_file``, and each record
batch's columns are decoded once, at open, into views of the map: a fixed-width column
without nulls is a numpy array over the file's own bytes (zero copy: nothing is read
until a batch touches it), a string, binary or list column a ``Ragged`` whose values
are such a view (its offsets, one int64 a row, are rebased into memory). Bools are the
exception: Arrow packs them in bits, so they are unpacked once.

================  ===============================================================
cost              per batch
================  ===============================================================
one record batch  one ``take`` per field (the pages it touches read from the map)
several           one ``searchsorted``, one ``take`` per field and record batch touched
memory            the ragged columns' offsets; the rest is the page cache's
================  ===============================================================

An Arrow stream (``.arrows``, or an HF dataset's data files), a Feather version 1 file
and a file at a URL are read into memory once (a stream has no footer to map batches
by; a URL no map).

IPC has no checksums, so the record's columns of each record batch are validated at
open (pyarrow's full validation: offsets, lengths, null counts; ``decode`` checks the
strings' UTF-8) before numpy sees their offsets: a corrupt batch is a ``FormatError``
naming the file and the batch. A local file's identity (device, inode, size,
modification time) is recorded then and checked at each read (one ``fstat``) and where
a worker maps the file again: a file written over or truncated in place is a
``FormatError`` naming it, not the new version's rows, nor a SIGBUS from pages past the
file's end.
"""

from __future__ import annotations

import os
import weakref
from typing import Any

import numpy as np

from .._base.files import open_regular
from ..errors import BoundsError, FormatError, RecordError
from ..formats._arrowcols import check_field, decode
from ..formats._arrowtypes import pyarrow, schema_record
from ..formats._remote import is_url, local_path
from ..formats._tabular import ipc_open
from ..records import Ragged, Record
from ._parquet_files import layout_fixed


def _batches(path: str, storage_options: Any) -> tuple[Any, list[Any]]:
    """(schema, record batches) of an Arrow IPC file or stream, or a Feather file
    (``formats._tabular.ipc_open``)."""
    pa = pyarrow()
    try:
        schema, _, every = ipc_open(path, storage_options)
    except pa.ArrowException as e:  # those ipc_open leaves (counting the batches' rows)
        raise FormatError(
            f"expected an Arrow IPC file whose record batches read, found one that does "
            f"not (corrupt?): {e}",
            path,
        ) from e
    batches: list[Any] = []
    try:
        batches.extend(every())
    except (pa.ArrowException, OSError) as e:
        raise FormatError(
            f"expected an Arrow IPC file whose record batches read, found record batch "
            f"{len(batches)} does not (truncated?): {e}",
            path,
        ) from e
    return schema, batches


def _validate(batch: Any, record: type[Record], path: str, k: int) -> None:
    """The record's columns of record batch ``k`` are whole, as ``decode`` trusts them
    (pyarrow's full validation: offsets nondecreasing and inside their buffers, buffers
    as long as the rows need, null counts), a ``FormatError`` naming the batch if not.
    A string column is validated as the bytes it holds: ``decode`` checks its UTF-8,
    naming the row. Columns the record leaves out are not read."""
    pa = pyarrow()
    for name in record.fields:
        col = batch.column(name)
        try:
            if len(col) != batch.num_rows:
                raise pa.ArrowInvalid(f"{len(col):,} rows in a batch of {batch.num_rows:,}")
            if pa.types.is_string(col.type):
                col = col.view(pa.binary())
            elif pa.types.is_large_string(col.type):
                col = col.view(pa.large_binary())
            col.validate(full=True)
        except pa.ArrowException as e:
            raise FormatError(
                f"record batch {k}: column {name!r} does not validate (corrupt: Arrow IPC "
                f"has no checksums): {e}",
                path,
            ) from e


class ArrowSource:
    """An Arrow IPC / Feather file as a typed source: ``len``, ``src[i]``,
    ``src.getitems(indices)`` (columns, batch axis first) and ``.record``.

    Built by ``fl.sources.arrow``. It pickles as its path, record and the file's
    identity: a worker process maps the file again itself, refused if it is not the same
    file (replaced, or written over in place, since).
    """

    def __init__(
        self,
        path: Any,
        record: type[Record] | None = None,
        *,
        columns: list[str] | None = None,
        storage_options: Any = None,
    ) -> None:
        if record is not None and columns is not None:
            raise TypeError("fl.sources.arrow takes record= or columns=, not both")
        if record is not None and not (isinstance(record, type) and issubclass(record, Record)):
            raise TypeError(f"record is a fl.Record subclass, got {record!r}")
        self.path = local_path(os.fspath(path))
        self.storage_options = storage_options
        schema, batches = _batches(self.path, storage_options)
        self.seen = self._hold(None)
        if record is None:
            record = schema_record(schema, "ArrowRow", self.path, columns)
        for name, f in record.fields.items():
            if name not in schema.names:
                raise RecordError(
                    f"{self.path}: {record.__name__} field `{name}` is not a column of the "
                    f"file (it has {schema.names})"
                )
            check_field(f, schema.field(name).type, self.path)
        self.record = record
        self.fixed_layout = layout_fixed(record, schema)
        self.salt = 0
        self._open(batches, validate=True)

    def _hold(self, seen: tuple[int, int, int, int] | None) -> tuple[int, int, int, int] | None:
        """Hold a descriptor on the local file (closed with the source), through which
        each read checks the file is the one mapped; its identity (device, inode, size,
        modification time in ns), checked to be ``seen``'s when given. None at a URL."""
        self._fd: int | None = None
        if is_url(self.path):
            return None
        fd = self._fd = open_regular(self.path)
        weakref.finalize(self, os.close, fd)
        st = os.fstat(fd)
        now = self._opened = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
        if seen is not None and now[:2] != seen[:2]:
            raise FormatError(
                "expected the file the source was made from, found another at its path "
                "(replaced since): this process would read the new version and the "
                "source's own process the old; make the source again",
                self.path,
            )
        if seen is not None:
            self._check(seen, now)
        return now

    def _check(self, seen: tuple[int, int, int, int], now: tuple[int, int, int, int]) -> None:
        if now[2] < seen[2]:
            raise FormatError(
                f"the file was {seen[2]:,} bytes when the source was made and is now "
                f"{now[2]:,}: it was truncated in place while open (rewrite files by "
                f"replacing them, as feedline's writers do)",
                self.path,
            )
        if now != seen:
            raise FormatError(
                f"expected the file as it was when the source was made ({seen[2]:,} bytes, "
                f"modified at {seen[3]} ns), found it written over in place ({now[2]:,} "
                f"bytes, modified at {now[3]} ns): the source's columns are views of its "
                f"map and would read the new version's rows; make the source again (and "
                f"write files by replacing them)",
                self.path,
            )

    def _intact(self) -> None:
        """Before reading through the map: a ``FormatError`` unless the file is as it was
        mapped (one ``fstat``): written over in place, it would give the new version's
        rows; cut short, touching the pages past its end would kill the process
        (SIGBUS)."""
        if self._fd is not None:
            st = os.fstat(self._fd)
            opened = self._opened
            if st.st_size != opened[2] or st.st_mtime_ns != opened[3]:
                self._check(opened, (*opened[:2], st.st_size, st.st_mtime_ns))

    def _open(self, batches: list[Any], validate: bool) -> None:
        """Each record batch's columns decoded (views of the map), and where they start;
        ``validate``: each checked first (not where the file is the one checked when the
        source was made)."""
        sizes = [b.num_rows for b in batches]
        self.starts = np.zeros(len(sizes) + 1, dtype=np.int64)
        np.cumsum(np.asarray(sizes, dtype=np.int64), out=self.starts[1:])
        self.n = int(self.starts[-1])
        self._parts: list[dict[str, Any]] = []
        for k, b in enumerate(batches):
            where = f"{self.path}: record batch {k}"
            first = int(self.starts[k])
            if validate:
                _validate(b, self.record, self.path, k)
            self._parts.append(
                {
                    name: decode(b.column(name), f, where, first)
                    for name, f in self.record.fields.items()
                }
            )

    def __getstate__(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if not k.startswith("_")}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._hold(self.seen)
        # a local file is the one validated where the source was made; a URL may not be
        self._open(_batches(self.path, self.storage_options)[1], validate=self.seen is None)

    def __len__(self) -> int:
        return self.n

    @property
    def n_batches(self) -> int:
        """The file's record batches."""
        return len(self._parts)

    def __getitem__(self, index: int) -> dict[str, Any]:
        from ..records._ragged import example_of

        batch = self.getitems(np.array([int(index)], dtype=np.int64))
        return {k: example_of(self.record.fields[k], v, 0) for k, v in batch.items()}

    def getitems(self, indices: Any, out: dict[str, np.ndarray] | None = None) -> dict[str, Any]:
        """Rows ``indices`` as the record's columns: numpy arrays for fixed fields (into
        ``out``'s first rows when given), a ``Ragged`` for list, ``str`` and ``bytes``.
        The values are the file's: the record's checks (a dim's maximum, ``truncate=True``,
        domains) apply where a ``Loader`` or an ``fl.Dataset`` reads the source."""
        self._intact()
        idx = np.asarray(indices, dtype=np.int64).reshape(-1)
        if len(idx) and (int(idx.min()) < 0 or int(idx.max()) >= self.n):
            bad = int(idx.min()) if int(idx.min()) < 0 else int(idx.max())
            raise BoundsError(f"{self.path}: row {bad} is outside [0, {self.n:,})")
        fields = self.record.fields
        if len(self._parts) == 1 or not len(idx):
            part = self._parts[0] if self._parts else None
            return {k: self._take(k, part, idx, out) for k in fields}
        group = np.searchsorted(self.starts, idx, "right") - 1
        local = idx - self.starts[group]
        touched = np.unique(group)
        if len(touched) == 1:
            part = self._parts[int(touched[0])]
            return {k: self._take(k, part, local, out) for k in fields}
        rows = [np.flatnonzero(group == g) for g in touched.tolist()]
        result: dict[str, Any] = {}
        for k, f in fields.items():
            pieces = [
                self._take(k, self._parts[g], local[r], None)
                for g, r in zip(touched.tolist(), rows)
            ]
            if f.ragged:
                back = np.empty(len(idx), dtype=np.int64)
                back[np.concatenate(rows)] = np.arange(len(idx), dtype=np.int64)
                result[k] = Ragged.concat(pieces).take(back)
                continue
            col = (
                out[k][: len(idx)]
                if out is not None and k in out
                else np.empty((len(idx), *pieces[0].shape[1:]), pieces[0].dtype)
            )
            for r, piece in zip(rows, pieces):
                col[r] = piece
            result[k] = col
        return result

    def _take(self, k: str, part: dict[str, Any] | None, rows: np.ndarray, out: Any) -> Any:
        f = self.record.fields[k]
        if part is None:  # a file of no record batches
            if f.ragged:
                array = f.kind == "array"
                return Ragged.empty(f.shape if array else (None,), f.dtype if array else np.uint8)
            return np.zeros((0, *f.shape), dtype=f.dtype)
        col = part[k]
        if isinstance(col, Ragged):
            return col.take(rows)
        if out is not None and k in out:
            # in range (checked by ``getitems``): "clip" spares numpy a buffered copy of out
            return np.take(col, rows, axis=0, out=out[k][: len(rows)], mode="clip")
        return col.take(rows, axis=0)

    def __repr__(self) -> str:
        return (
            f"ArrowSource({self.path!r}, {self.record.__name__}, {self.n:,} rows in "
            f"{len(self._parts)} record batches)"
        )


def arrow(
    path: Any,
    record: type[Record] | None = None,
    *,
    columns: list[str] | None = None,
    storage_options: Any = None,
) -> ArrowSource:
    """An Arrow IPC file (``.arrow``, Feather ``.feather``) read at random, memory-mapped:
    a typed source for ``fl.Loader``, ``fl.Seq.source`` or ``fl.Dataset``.

    Fixed-width columns without nulls are numpy views of the map (zero copy), string,
    binary and list columns ``Ragged`` s over it. ``record`` chooses the fields (each a
    column of that name); without one it is inferred as ``fl.sources.parquet`` infers
    it (numbers and bools scalars, fixed-size lists fixed dims, lists a varying dim,
    strings ``str``, binary ``bytes``; a column with no field a ``RecordError`` naming
    it). A file that is not Arrow is a ``FormatError`` naming it, a null a
    ``FormatError`` naming the column and row. A URL (``storage_options`` fsspec's) or
    an Arrow stream is read into memory once.

    >>> import os, tempfile, pyarrow as pa, pyarrow.feather as feather, feedline as fl
    >>> p = os.path.join(tempfile.mkdtemp(), "t.feather")
    >>> feather.write_feather(pa.table({"x": [0.5, 1.5, 2.5], "s": ["a", "bc", "d"]}), p)
    >>> src = fl.sources.arrow(p)
    >>> len(src), src.getitems([2, 0])["x"].tolist(), src[1]["s"]
    (3, [2.5, 0.5], 'bc')
    """
    return ArrowSource(path, record, columns=columns, storage_options=storage_options)
