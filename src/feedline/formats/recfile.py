"""feedline's typed record file, ``.flr``: a record's schema, then one column per field.

The layout is specified byte by byte in ``docs/formats.md``. In short::

    0     64 B   preamble: magic, version, flags, header offset and length, rows,
                 data offset, file length, header CRC-32, preamble CRC-32
    64    H B    header: UTF-8 JSON (the record's schema, the columns' offsets,
                 lengths and CRC-32s)
    ...          columns, each starting at a multiple of 64 bytes: the field's
                 values for every row, row-major, little-endian

Each column memory-maps as a numpy array of shape ``(n, *field.shape)``; a batch is
one gather per field. Writing is atomic; from an iterable of items it is streamed
(columns are spooled beside the target, so memory stays O(chunk)). Reading checks
every preamble and header field against the file before trusting it.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import struct
import zlib
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from .._base.files import atomic_write, scratch_file, scratch_suffix
from ..errors import FeedlineError, FormatError, RecordError
from ..records import Record, record_from_schema
from ._open import OpenFile

__all__ = ["FORMAT_NAME", "MAGIC", "VERSION", "RecFile", "open", "write", "write_chunks"]

MAGIC = b"\x89FLR\r\n\x1a\n"
VERSION = 1
PREAMBLE = 64
ALIGN = 64
_PRE = struct.Struct("<8sIIQQQQQI")  # up to the preamble CRC (60 bytes)
_CRC = struct.Struct("<I")
FORMAT_NAME = "feedline.recfile"
# Items are checked and spooled this many at a time when streaming.
_CHUNK_ITEMS = 4096
# Checksums and copies run over slices of this many bytes.
_SLICE = 8 << 20
_HEADER_KEYS = {"format", "version", "rows", "record", "columns"}
_COLUMN_KEYS = {"field", "kind", "offset", "length", "crc32"}


def _max_ndim() -> int:
    """The most dimensions a numpy array may have (64 in numpy 2, 32 before)."""
    for n in (64, 32):
        try:
            np.empty((1,) * n)
            return n
        except ValueError:
            continue
    return 32


# A column has the batch axis and the field's dims: fields have at most one fewer.
_MAX_FIELD_DIMS = _max_ndim() - 1


def _is_int(v: Any) -> bool:
    return type(v) is int  # not True, not 1.0: JSON's 1 only


def _check_names(record: type[Record]) -> None:
    """Field names are identifiers, as the reader requires (they are attribute names)."""
    for name, f in record.fields.items():
        if not (isinstance(name, str) and name.isidentifier()):
            where = getattr(f, "where", None)
            raise RecordError(
                f"{where + ': ' if where else ''}{record.__name__} field "
                f"{name!r}: an .flr field name is an identifier (a batch "
                f"attribute); rename it"
            )


def _align(x: int) -> int:
    return -(-x // ALIGN) * ALIGN


def _raw(a: np.ndarray) -> memoryview:
    """A C-contiguous array's bytes (also for arrays with a 0 in their shape)."""
    return memoryview(np.ascontiguousarray(a).reshape(-1).view(np.uint8))  # type: ignore[arg-type]  # numpy types its buffer protocol for 3.12+ only


def _crc(buf: Any, crc: int = 0) -> int:
    mv = _raw(buf) if isinstance(buf, np.ndarray) else memoryview(buf).cast("B")
    for a in range(0, len(mv), _SLICE):
        crc = zlib.crc32(mv[a : a + _SLICE], crc)
    return crc


def _le(dtype: np.dtype) -> np.dtype:
    return dtype.newbyteorder("<") if dtype.byteorder == ">" else dtype


def _layout(record: type[Record], n: int, crcs: list[int]) -> tuple[bytes, list[dict], int]:
    """The header JSON and column table for ``n`` rows; returns (header, columns, end)."""
    fields = list(record.fields.values())
    columns: list[dict[str, Any]] = [
        {
            "field": f.name,
            "kind": "fixed",
            "offset": 0,
            "length": n
            * _le(f.dtype).itemsize
            * math.prod(f.fixed_shape(".flr version 1 stores fixed shapes only")),
            "crc32": crc,
        }
        for f, crc in zip(fields, crcs)
    ]
    # The header's size depends on the offsets it records: settle them by iteration.
    data_offset = 0
    for _ in range(8):
        doc = {
            "format": FORMAT_NAME,
            "version": VERSION,
            "rows": n,
            "record": record.schema(),
            "columns": columns,
        }
        header = json.dumps(doc, separators=(",", ":"), sort_keys=True).encode()
        start = _align(PREAMBLE + len(header))
        if start == data_offset:
            break
        data_offset = start
        off = start
        for c in columns:
            c["offset"] = off
            off = _align(off + c["length"])
    end = columns[-1]["offset"] + columns[-1]["length"] if columns else data_offset
    return header, columns, end


def _preamble(header: bytes, n: int, data_offset: int, file_length: int) -> bytes:
    body = _PRE.pack(
        MAGIC, VERSION, 0, PREAMBLE, len(header), n, data_offset, file_length, zlib.crc32(header)
    )
    return body + _CRC.pack(zlib.crc32(body))


def _write_pad(f: Any, upto: int) -> None:
    pos = f.tell()
    if upto > pos:
        f.write(b"\0" * (upto - pos))


def write(
    path: str | os.PathLike[str], record: type[Record], data: Any, *, check_values: bool = True
) -> int:
    """Write a typed record file atomically; returns the number of rows.

    ``data`` is a dict of column arrays (batch axis first; checked as a whole), or an
    iterable of items (dicts, tuples or bare values, checked one by one and streamed:
    memory stays O(chunk)). Values are checked against the fields' domains unless
    ``check_values`` is False.
    """
    if not (isinstance(record, type) and issubclass(record, Record)):
        raise TypeError(f"record must be a fl.Record subclass, got {record!r}")
    if not record.fields:
        raise TypeError(f"record {record.__name__} has no fields: nothing to write")
    _check_names(record)
    if isinstance(data, Mapping):
        return _write_columns(path, record, data, check_values)
    return _write_stream(path, record, _item_chunks(record, data, check_values), check_values)


def write_chunks(
    path: str | os.PathLike[str],
    record: type[Record],
    chunks: Iterable[Any],
    *,
    check_values: bool = True,
) -> int:
    """Write a typed record file from an iterable of column chunks (dicts of arrays, batch
    axis first), streamed: memory stays O(chunk). Atomic; returns the number of rows."""
    if not (isinstance(record, type) and issubclass(record, Record)):
        raise TypeError(f"record must be a fl.Record subclass, got {record!r}")
    if not record.fields:
        raise TypeError(f"record {record.__name__} has no fields: nothing to write")
    _check_names(record)
    return _write_stream(path, record, chunks, check_values)


def _item_chunks(record: type[Record], items: Iterable[Any], check_values: bool):
    """Items checked one by one (naming each), stacked into column chunks."""
    chunk: list[dict[str, np.ndarray]] = []
    for n, item in enumerate(items):
        chunk.append(record.check(item, n, check_values=check_values))
        if len(chunk) >= _CHUNK_ITEMS:
            yield {f: np.stack([c[f] for c in chunk]) for f in record.fields}
            chunk = []
    if chunk:
        yield {f: np.stack([c[f] for c in chunk]) for f in record.fields}


def _write_columns(
    path: Any, record: type[Record], data: Mapping[str, Any], check_values: bool
) -> int:
    cols = {k: data[k] for k in record.fields if k in data}
    n_rows = len(next(iter(cols.values()))) if cols else 0
    cols = record.check_columns(cols, np.arange(n_rows), check_values=check_values)
    lengths = {len(c) for c in cols.values()}
    if len(lengths) > 1:
        raise ValueError(f"columns of different lengths: { {k: len(v) for k, v in cols.items()} }")
    n = lengths.pop() if lengths else 0
    arrays = [
        np.ascontiguousarray(cols[f], dtype=_le(record.fields[f].dtype)) for f in record.fields
    ]
    crcs = [_crc(a) for a in arrays]
    header, columns, end = _layout(record, n, crcs)
    with atomic_write(path) as f:
        f.write(_preamble(header, n, columns[0]["offset"] if columns else 0, end))
        f.write(header)
        for c, a in zip(columns, arrays):
            _write_pad(f, c["offset"])
            mv = _raw(a)
            for s in range(0, len(mv), _SLICE):
                f.write(mv[s : s + _SLICE])
    return n


def _write_stream(
    path: Any, record: type[Record], chunks: Iterable[Any], check_values: bool
) -> int:
    fields = list(record.fields.values())
    spools = []
    try:
        for f in fields:
            fd, name = scratch_file(path, scratch_suffix(f.name, "spool"))
            spools.append((os.fdopen(fd, "w+b"), name))
        crcs = [0] * len(fields)
        n = 0
        for chunk in chunks:
            rows = len(next(iter(chunk.values()))) if chunk else 0
            cols = record.check_columns(chunk, np.arange(n, n + rows), check_values=check_values)
            for k, (f, (spool, _)) in enumerate(zip(fields, spools)):
                block = np.ascontiguousarray(cols[f.name], dtype=_le(f.dtype))
                if len(block) != rows:
                    raise ValueError(
                        f"chunk columns of different lengths ({f.name}: "
                        f"{len(block)}, expected {rows})"
                    )
                crcs[k] = _crc(block, crcs[k])
                spool.write(_raw(block))
            n += rows
        header, columns, end = _layout(record, n, crcs)
        with atomic_write(path) as out:
            out.write(_preamble(header, n, columns[0]["offset"] if columns else 0, end))
            out.write(header)
            for c, (spool, _) in zip(columns, spools):
                _write_pad(out, c["offset"])
                spool.flush()
                spool.seek(0)
                shutil.copyfileobj(spool, out, _SLICE)
        return n
    finally:
        for spool, name in spools:
            spool.close()
            with contextlib.suppress(FileNotFoundError):
                os.unlink(name)


class RecFile(OpenFile):
    """An open ``.flr``: a typed, memory-mapped source.

    ``record`` is the ``Record`` class rebuilt from the file; ``len``, ``f[i]`` (a dict),
    ``getitems(indices)`` (one gather per field), ``columns`` (read-only memory-mapped
    arrays), ``verify()`` (checksums), ``share()`` and ``close()``.
    """

    # Every row has the record's shapes and dtypes by construction: datasets need not
    # check each batch, and its gathers are plain copies from the memory map.
    fixed_layout = True

    def _fail(self, message: str, offset: int) -> FormatError:
        return FormatError(message, self.path, offset)

    def _parse(self) -> None:
        size = self._file.size
        if size < PREAMBLE:
            raise self._fail(f"an .flr preamble is {PREAMBLE} bytes, the file has {size}", 0)
        pre = self._file.pread(PREAMBLE, 0, "the .flr preamble")
        magic, version, flags, h_off, h_len, n, d_off, f_len, h_crc = _PRE.unpack(pre[:60])
        if magic != MAGIC:
            raise self._fail(f"expected the .flr magic {MAGIC!r}, found {magic!r}", 0)
        (p_crc,) = _CRC.unpack(pre[60:])
        if zlib.crc32(pre[:60]) != p_crc:
            raise self._fail(
                f"preamble checksum {zlib.crc32(pre[:60]):#010x} does not match the "
                f"stored {p_crc:#010x}",
                60,
            )
        if version != VERSION:
            raise self._fail(
                f"this feedline reads .flr version {VERSION}, the file is version {version}", 8
            )
        if n >= 1 << 62:
            raise self._fail(f"{n} rows is more than an array can index", 32)
        if flags != 0:
            raise self._fail(f"unknown flags {flags:#x} (this version writes 0)", 12)
        if f_len != size:
            raise self._fail(
                f"the preamble records a file of {f_len} bytes, the file has {size}"
                f" (truncated or appended to)",
                48,
            )
        if h_off != PREAMBLE or h_len > size - PREAMBLE:
            raise self._fail(
                f"header at {h_off} of {h_len} bytes does not fit a file of {size}", 16
            )
        header = self._file.pread(h_len, h_off, "the .flr header")
        if zlib.crc32(header) != h_crc:
            raise self._fail("header checksum does not match", h_off)
        try:
            doc = json.loads(header.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError) as e:
            raise self._fail(f"the header is not UTF-8 JSON: {e}", h_off) from e
        if not isinstance(doc, dict) or doc.get("format") != FORMAT_NAME:
            raise self._fail(f"the header is not a {FORMAT_NAME} header", h_off)
        version, rows = doc.get("version"), doc.get("rows")
        if not (_is_int(version) and version == VERSION and _is_int(rows) and rows == n):
            raise self._fail(
                f"the header's version {version!r} and rows {rows!r} disagree "
                f"with the preamble ({VERSION}, {n}; JSON integers)",
                h_off,
            )
        if set(doc) != _HEADER_KEYS:
            raise self._fail(
                f"the header has the keys {sorted(_HEADER_KEYS)}; found unknown "
                f"{sorted(set(doc) - _HEADER_KEYS)}, missing "
                f"{sorted(_HEADER_KEYS - set(doc))}",
                h_off,
            )
        try:
            self.record = record_from_schema(doc["record"], os.path.basename(self.path))
        except (FeedlineError, KeyError, TypeError, ValueError, AttributeError) as e:
            raise self._fail(
                f"the header's record does not declare a valid record: {e}", h_off
            ) from e
        self._check_schema(doc["record"], h_off)
        columns = doc.get("columns")
        fields = list(self.record.fields.values())
        if not isinstance(columns, list) or len(columns) != len(fields):
            raise self._fail(
                f"expected {len(fields)} columns in the header, found "
                f"{len(columns) if isinstance(columns, list) else columns!r}",
                h_off,
            )
        if not fields:
            raise self._fail("the header's record has no fields", h_off)
        if not all(isinstance(c, dict) for c in columns):
            raise self._fail("every column entry of the header must be an object", h_off)
        for c in columns:
            if set(c) != _COLUMN_KEYS:
                raise self._fail(
                    f"a column entry has the keys {sorted(_COLUMN_KEYS)}; found {sorted(c)}", h_off
                )
        self.n = n
        self._columns: dict[str, np.ndarray] = {}
        self._crcs: dict[str, tuple[int, int, int]] = {}
        low = _align(PREAMBLE + h_len)
        if fields and d_off != columns[0].get("offset"):
            raise self._fail(
                f"the preamble's data offset {d_off} is not the first column's "
                f"{columns[0].get('offset')!r}",
                40,
            )
        for f, c in zip(fields, columns):
            if not isinstance(c, dict) or c.get("field") != f.name:
                raise self._fail(f"column for field `{f.name}` expected, found {c!r}", h_off)
            if c.get("kind") != "fixed":
                raise self._fail(
                    f"column `{f.name}` is of kind {c.get('kind')!r}; this feedline "
                    f"reads fixed-shape columns only",
                    h_off,
                )
            if f.ragged:
                raise self._fail(
                    f"field `{f.name}` is {f.declared} {f.type_name} (ragged), but its "
                    f"column is of kind 'fixed'",
                    h_off,
                )
            shape = f.fixed_shape("")
            off, length, crc = c["offset"], c["length"], c["crc32"]  # all keys: checked above
            if not all(_is_int(v) and v >= 0 for v in (off, length, crc)):
                raise self._fail(
                    f"column `{f.name}` has a malformed offset, length or crc32", h_off
                )
            dtype = _le(f.dtype)
            elements = math.prod(shape)  # Python ints: a crafted shape cannot overflow
            per_row = dtype.itemsize * elements
            if per_row > size:
                raise self._fail(f"field `{f.name}` of shape {shape} cannot fit the file", h_off)
            # numpy sizes even an empty array by its nonzero dims ((2**62 - 1, 0) floats are
            # "too big"), so a zero-size field bounds the rows too, though it holds no bytes.
            nominal = dtype.itemsize * math.prod(d for d in shape if d)
            if nominal >= 1 << 62:
                raise self._fail(
                    f"field `{f.name}` of shape {shape} is more than an array can index", h_off
                )
            if n * nominal >= 1 << 62:
                raise self._fail(
                    f"{n} rows of field `{f.name}` ({dtype}, shape {shape}) are "
                    f"more than an array can index",
                    32,
                )
            if length != n * per_row:
                raise self._fail(
                    f"column `{f.name}` should hold {n} rows of {per_row} bytes = "
                    f"{n * per_row}, its length is {length}",
                    h_off,
                )
            if off % ALIGN or off < low or off + length > size:
                raise self._fail(
                    f"column `{f.name}` at [{off}, {off + length}) is not an "
                    f"aligned range after the header inside the file of {size}",
                    h_off,
                )
            low = off + length
            count = n * elements
            self._columns[f.name] = self._file.array(dtype, off, count, (n, *shape))
            self._crcs[f.name] = (off, length, crc)
        self.salt = 0

    def _check_schema(self, stored: dict, h_off: int) -> None:
        """What ``record_from_schema`` takes on trust: no key it would ignore, field names
        that are identifiers, little-endian dtypes, dims an array can have."""
        try:
            known = self.record.schema()
        except (FeedlineError, TypeError, ValueError, AttributeError) as e:
            raise self._fail(
                f"the header's record does not declare a valid record: {e}", h_off
            ) from e
        unknown = set(stored) - set(known)
        if unknown:
            raise self._fail(
                f"the header's record has unknown keys {sorted(unknown)} (known: {sorted(known)})",
                h_off,
            )
        for spec, want in zip(stored["fields"], known["fields"]):  # a list of dicts
            name = spec["name"]
            unknown = set(spec) - set(want)
            if unknown:
                raise self._fail(
                    f"field {name!r} has unknown keys {sorted(unknown)} (known: {sorted(want)})",
                    h_off,
                )
            if not (isinstance(name, str) and name.isidentifier()):
                raise self._fail(
                    f"expected a field name that is an identifier, found {name!r}", h_off
                )
            if np.dtype(spec["dtype"]).byteorder == ">":
                raise self._fail(
                    f"field `{name}` has the big-endian dtype "
                    f"{spec['dtype']!r}; .flr columns are little-endian",
                    h_off,
                )
        for f in self.record.fields.values():
            if len(f.shape) > _MAX_FIELD_DIMS:
                raise self._fail(
                    f"field `{f.name}` has {len(f.shape)} dims; a column (rows "
                    f"first) can have at most {_MAX_FIELD_DIMS}",
                    h_off,
                )

    # -- reading ------------------------------------------------------------------------
    def __len__(self) -> int:
        return self.n

    @property
    def columns(self) -> dict[str, np.ndarray]:
        """The columns as read-only memory-mapped arrays (batch axis first)."""
        return dict(self._columns)

    def __getitem__(self, i: int) -> dict[str, np.ndarray]:
        self._check_open()
        i = int(i)
        if not 0 <= i < self.n:
            raise IndexError(f"row {i} is outside the file's {self.n} rows")
        return {k: np.array(v[i]) for k, v in self._columns.items()}

    def _check_open(self) -> None:
        if self._file.closed:
            raise ValueError(f"{self.path}: this handle is closed")
        self._file.check_intact()  # a file truncated under us: an error, not SIGBUS

    def getitems(
        self, indices: Any, out: dict[str, np.ndarray] | None = None
    ) -> dict[str, np.ndarray]:
        """Rows ``indices`` as columns: one gather per field from the memory map (into
        ``out``'s first rows when given)."""
        self._check_open()
        idx = np.asarray(indices, dtype=np.int64)
        if len(idx) and (int(idx.min()) < 0 or int(idx.max()) >= self.n):
            raise IndexError(f"row indices must be in [0, {self.n})")
        if out is None:
            return {k: np.take(v, idx, axis=0) for k, v in self._columns.items()}
        # mode="clip": the bounds are checked above, so numpy need not buffer ``out``.
        return {
            k: np.take(v, idx, axis=0, out=out[k][: len(idx)], mode="clip")
            for k, v in self._columns.items()
        }

    def verify(self) -> None:
        """Check every column's CRC-32; a ``FormatError`` names the first bad column."""
        for name, (off, length, crc) in self._crcs.items():
            column = self._file.array(np.uint8, off, length)
            got = 0
            for a in range(0, length, _SLICE):  # slices: a remote column is fetched in parts
                self._check_open()
                got = zlib.crc32(np.ascontiguousarray(column[a : a + _SLICE]), got)  # type: ignore[arg-type]  # numpy: buffer typed for 3.12+
            if got != crc:
                raise self._fail(
                    f"column `{name}` checksum {got:#010x} does not match the stored {crc:#010x}",
                    off,
                )

    def _release(self) -> None:
        self._columns = {}

    def __repr__(self) -> str:
        return f"RecFile({self.path!r}, {self.record.__name__}, {self.n:,} rows)"


def open(path: str | os.PathLike[str]) -> RecFile:
    """Open an ``.flr``: the record is rebuilt from the file; every field is checked first."""
    return RecFile(path)
