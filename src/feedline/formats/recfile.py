"""feedline's typed record file, ``.flr``: a record's schema, then one column per field.

The layout is specified byte by byte in ``docs/formats.md``. In short::

    0     64 B   preamble: magic, version, flags, header offset and length, rows,
                 data offset, file length, header CRC-32, preamble CRC-32
    64    H B    header: UTF-8 JSON (the record's schema, the columns' offsets,
                 lengths and CRC-32s)
    ...          sections, each starting at a multiple of 64 bytes: a fixed field's
                 values for every row, row-major, little-endian; a ragged field's values,
                 offsets (and shapes, where its sizes do not tell them)

A fixed column memory-maps as a numpy array of shape ``(n, *field.shape)``, a ragged
one (a varying dim, ``bytes``, ``str``: version 2) as a ``Ragged`` over the file; a
batch is one gather per field. Writing is atomic; from an iterable of items it is
streamed (sections are spooled beside the target, so memory stays O(chunk)). Reading
checks every preamble and header field, and every ragged column's offsets and shapes,
against the file before trusting them.
"""

from __future__ import annotations

import json
import math
import os
import zlib
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from ..errors import FeedlineError, FormatError
from ..records import Ragged, Record, record_from_schema
from ..records._ragged import example_of
from ._flr_layout import (
    CRC,
    FIXED_KEYS,
    FORMAT_NAME,
    HEADER_KEYS,
    MAGIC,
    PRE,
    PREAMBLE,
    SLICE,
    VERSION,
    VERSION_RAGGED,
    VERSIONS,
    align,
    column_kind,
    le,
)
from ._flr_open import check_place, check_shared_dims, open_ragged, verify_utf8
from ._flr_write import check_names, item_chunks, write_columns, write_stream
from ._io import SharedFile
from ._open import OpenFile

__all__ = [
    "FORMAT_NAME",
    "MAGIC",
    "VERSION",
    "RecFile",
    "open",
    "write",
    "write_chunks",
]


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


def write(
    path: str | os.PathLike[str], record: type[Record], data: Any, *, check_values: bool = True
) -> int:
    """Write a typed record file atomically; returns the number of rows.

    ``data`` is a dict of columns (batch axis first; a varying, ``bytes`` or ``str``
    field's column a list of its examples or a ``Ragged``; checked as a whole), or an
    iterable of items (dicts, tuples or bare values, of any lengths where a dim varies;
    checked one by one and streamed: memory stays O(chunk)). Values are checked against
    the fields' domains unless ``check_values`` is False. A record with a ragged field
    is written as version 2, any other as version 1. Nothing is written on an error.

    >>> import os, tempfile
    >>> import feedline as fl
    >>> class Doc(fl.Record, dims={"T": None}):
    ...     tokens = fl.field("T", "int32")
    ...     title = fl.field((), "str")
    >>> path = os.path.join(tempfile.mkdtemp(), "docs.flr")
    >>> fl.recfile.write(path, Doc, [{"tokens": [1, 2, 3], "title": "a"},
    ...                              {"tokens": [], "title": "b"}])
    2
    """
    check_names(record)
    if isinstance(data, Mapping):
        return write_columns(path, record, data, check_values)
    return write_stream(path, record, item_chunks(record, data, check_values), check_values)


def write_chunks(
    path: str | os.PathLike[str],
    record: type[Record],
    chunks: Iterable[Any],
    *,
    check_values: bool = True,
) -> int:
    """Write a typed record file from an iterable of column chunks (dicts of columns,
    batch axis first, as ``write`` takes), streamed: memory stays O(chunk). Atomic;
    returns the number of rows."""
    check_names(record)
    return write_stream(path, record, chunks, check_values)


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
        magic, version, flags, h_off, h_len, n, d_off, f_len, h_crc = PRE.unpack(pre[:60])
        if magic != MAGIC:
            raise self._fail(f"expected the .flr magic {MAGIC!r}, found {magic!r}", 0)
        (p_crc,) = CRC.unpack(pre[60:])
        if zlib.crc32(pre[:60]) != p_crc:
            raise self._fail(
                f"preamble checksum {zlib.crc32(pre[:60]):#010x} does not match the "
                f"stored {p_crc:#010x}",
                60,
            )
        if version not in VERSIONS:
            raise self._fail(
                f"this feedline reads .flr versions {VERSION} and {VERSION_RAGGED}, the file "
                f"is version {version}",
                8,
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
        rows = doc.get("rows")
        stored_version, version = version, doc.get("version")
        if not (_is_int(version) and version == stored_version and _is_int(rows) and rows == n):
            raise self._fail(
                f"the header's version {version!r} and rows {rows!r} disagree "
                f"with the preamble ({stored_version}, {n}; JSON integers)",
                h_off,
            )
        if set(doc) != HEADER_KEYS:
            raise self._fail(
                f"the header has the keys {sorted(HEADER_KEYS)}; found unknown "
                f"{sorted(set(doc) - HEADER_KEYS)}, missing "
                f"{sorted(HEADER_KEYS - set(doc))}",
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
        self.n = n
        self._columns: dict[str, Any] = {}
        self._crcs: dict[str, tuple[int, int, int]] = {}
        self._strings: list[str] = []
        low = align(PREAMBLE + h_len)
        self._check_entry(fields[0], columns[0], h_off)  # its kind tells where its data starts
        first = columns[0].get("offset" if column_kind(fields[0]) == "fixed" else "values")
        if isinstance(first, dict):
            first = first.get("offset")
        if d_off != first:
            raise self._fail(
                f"the preamble's data offset {d_off} is not the first column's {first!r}", 40
            )
        for f, c in zip(fields, columns):
            self._check_entry(f, c, h_off)
            kind = column_kind(f)
            if kind != "fixed" and version == VERSION:
                raise self._fail(
                    f"column `{f.name}` is of kind {kind!r}; .flr version {VERSION} stores "
                    f"fixed columns only (a ragged field needs version {VERSION_RAGGED})",
                    8,
                )
            if kind == "fixed":
                low = self._open_fixed(f, c, n, low, size, h_off)
            else:
                col, placed, low = open_ragged(self, f, c, n, low, h_off)
                self._columns[f.name] = col
                for name, where in placed.items():
                    self._crcs[f"{f.name}.{name}"] = where
                if f.kind == "str":
                    self._strings.append(f.name)
        offsets_at = {k[:-8]: v[0] for k, v in self._crcs.items() if k.endswith(".offsets")}
        check_shared_dims(self.path, self.record, self._columns, offsets_at, n)
        self.salt = 0

    def _check_entry(self, f: Any, c: dict, h_off: int) -> None:
        """A column entry is of its field, and of the field's kind of column."""
        if c.get("field") != f.name:
            raise self._fail(f"column for field `{f.name}` expected, found {c!r:.200}", h_off)
        kind = column_kind(f)
        if c.get("kind") != kind:
            raise self._fail(
                f"field `{f.name}` is {f.declared} {f.type_name}: its column is of kind "
                f"{kind!r}, found {c.get('kind')!r:.40}",
                h_off,
            )

    def _open_fixed(self, f: Any, c: dict, n: int, low: int, size: int, h_off: int) -> int:
        """Check a fixed column's entry and map it; returns where the next may start."""
        if set(c) != FIXED_KEYS:
            raise self._fail(
                f"a fixed column entry has the keys {sorted(FIXED_KEYS)}; found {sorted(c)}",
                h_off,
            )
        shape = f.fixed_shape("")
        off, length, crc = c["offset"], c["length"], c["crc32"]
        if not all(_is_int(v) and v >= 0 for v in (off, length, crc)):
            raise self._fail(f"column `{f.name}` has a malformed offset, length or crc32", h_off)
        dtype = le(f.dtype)
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
        check_place(self.path, f"column `{f.name}`", off, length, low, size, h_off)
        self._columns[f.name] = self._file.array(dtype, off, n * elements, (n, *shape))
        self._crcs[f.name] = (off, length, crc)
        return off + length

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
    def columns(self) -> dict[str, Any]:
        """The columns, batch axis first: read-only memory-mapped arrays, and for a
        ragged field a ``Ragged`` whose values, offsets and shapes are views of the file
        (shapes computed from the offsets where the file stores none)."""
        return dict(self._columns)

    def __getitem__(self, i: int) -> dict[str, Any]:
        self._check_open()
        i = int(i)
        if not 0 <= i < self.n:
            raise IndexError(f"row {i} is outside the file's {self.n} rows")
        one = np.array([i], dtype=np.int64)
        return {
            k: example_of(self.record.fields[k], v.take(one), 0)
            if isinstance(v, Ragged)
            else np.array(v[i])
            for k, v in self._columns.items()
        }

    def _check_open(self) -> None:
        if self._file.closed:
            raise ValueError(f"{self.path}: this handle is closed")
        self._file.check_intact()  # a file truncated under us: an error, not SIGBUS

    def getitems(self, indices: Any, out: dict[str, np.ndarray] | None = None) -> dict[str, Any]:
        """Rows ``indices`` as columns: one gather per field from the memory map (a fixed
        field's into ``out``'s first rows when given; a ragged field's is a ``Ragged``)."""
        self._check_open()
        idx = np.asarray(indices, dtype=np.int64)
        if len(idx) and (int(idx.min()) < 0 or int(idx.max()) >= self.n):
            raise IndexError(f"row indices must be in [0, {self.n})")
        batch: dict[str, Any] = {}
        for k, v in self._columns.items():
            if isinstance(v, Ragged):
                batch[k] = v.take(idx)
            elif out is None:
                batch[k] = np.take(v, idx, axis=0)
            else:
                # mode="clip": the bounds are checked above, so numpy need not buffer ``out``.
                batch[k] = np.take(v, idx, axis=0, out=out[k][: len(idx)], mode="clip")
        return batch

    def verify(self) -> None:
        """Check every section's CRC-32, and that every string column is UTF-8; a
        ``FormatError`` names the first bad column and byte."""
        for name, (off, length, crc) in self._crcs.items():
            column = self._file.array(np.uint8, off, length)
            got = 0
            for a in range(0, length, SLICE):  # slices: a remote column is fetched in parts
                self._check_open()
                got = zlib.crc32(np.ascontiguousarray(column[a : a + SLICE]), got)  # type: ignore[arg-type]  # numpy: buffer typed for 3.12+
            if got != crc:
                raise self._fail(
                    f"column `{name}` checksum {got:#010x} does not match the stored {crc:#010x}",
                    off,
                )
        for name in self._strings:
            at = self._crcs[f"{name}.values"][0]
            verify_utf8(self.path, name, self._columns[name], at, self.n, self._check_open)

    def share(self) -> RecFile:
        """Another handle on the same open file. A local file's header was read and
        checked through the same descriptor when it was opened: the share takes that
        parse (the record, the columns: views of the one memory map) instead of reading
        it again (a loader shares each source's file: 256 shards of a manifest took
        37 ms a loader, most of it parsing headers and rebuilding records)."""
        if not isinstance(self._file, SharedFile):  # a URL's arrays read through a handle
            return super().share()
        handle = self._file.share()  # refused once this handle is closed
        other = object.__new__(type(self))
        other.__dict__.update(self.__dict__)
        other._file = handle
        other._columns = dict(self._columns)  # each handle's own (``_release``)
        other._crcs = dict(self._crcs)
        other._strings = list(self._strings)
        return other

    def _release(self) -> None:
        self._columns = {}

    def __repr__(self) -> str:
        return f"RecFile({self.path!r}, {self.record.__name__}, {self.n:,} rows)"


def open(path: str | os.PathLike[str]) -> RecFile:
    """Open an ``.flr``: the record is rebuilt from the file; every field is checked first."""
    return RecFile(path)
