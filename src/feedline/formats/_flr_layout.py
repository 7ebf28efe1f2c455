"""The ``.flr`` layout shared by its writer and reader: the preamble, the header's column
table and the sections of each column kind (``docs/formats.md`` specifies them).

A column is one section (``fixed``: the rows' values) or, for a ragged field, two or
three (``ragged``: ``values``, ``offsets`` and, where an example's shape cannot be told
from its size, ``shapes``; ``blob`` and ``string``: ``values`` and ``offsets``). Every
section starts at a multiple of 64 bytes and carries its own length and CRC-32.
"""

from __future__ import annotations

import json
import math
import struct
import zlib
from typing import Any

import numpy as np

from ..records import Record

MAGIC = b"\x89FLR\r\n\x1a\n"
VERSION = 1  # fixed-shape records only: byte for byte what feedline always wrote
VERSION_RAGGED = 2  # any field varies per example (a varying dim, bytes or str)
VERSIONS = (VERSION, VERSION_RAGGED)
PREAMBLE = 64
ALIGN = 64
PRE = struct.Struct("<8sIIQQQQQI")  # up to the preamble CRC (60 bytes)
CRC = struct.Struct("<I")
FORMAT_NAME = "feedline.recfile"
# Checksums and copies run over slices of this many bytes.
SLICE = 8 << 20
HEADER_KEYS = {"format", "version", "rows", "record", "columns"}
FIXED_KEYS = {"field", "kind", "offset", "length", "crc32"}
SECTION_KEYS = {"offset", "length", "crc32"}
# Offsets and shapes are int64, little-endian, in elements (bytes for blobs and strings).
INDEX_DTYPE = np.dtype("<i8")
# What an array's byte size must stay below (numpy indexes with signed 64-bit ints).
LIMIT = 1 << 62


def column_kind(f: Any) -> str:
    """A field's column kind: ``fixed``, ``ragged`` (a varying dim), ``blob`` (bytes) or
    ``string`` (str)."""
    if f.kind == "bytes":
        return "blob"
    if f.kind == "str":
        return "string"
    return "ragged" if f.ragged else "fixed"


def fixed_size(f: Any) -> int:
    """The product of a field's fixed axes (1 for a blob or a string: bytes)."""
    return math.prod(d for d in f.shape if d is not None) if f.kind == "array" else 1


def has_shapes(f: Any) -> bool:
    """Whether a ragged column stores its examples' shapes: when its size does not tell
    them, i.e. it has more than one varying axis, or its fixed axes hold no values."""
    return column_kind(f) == "ragged" and (len(f.varying) != 1 or fixed_size(f) == 0)


def section_names(f: Any) -> tuple[str, ...]:
    """The sections of a field's column, in file order (``()`` for a fixed column)."""
    kind = column_kind(f)
    if kind == "fixed":
        return ()
    return ("values", "offsets", "shapes") if has_shapes(f) else ("values", "offsets")


def value_dtype(f: Any) -> np.dtype:
    """The dtype a field's values are stored in (uint8 for blobs and strings)."""
    return np.dtype(np.uint8) if f.kind != "array" else le(f.dtype)


def version_of(record: type[Record]) -> int:
    return VERSION_RAGGED if any(f.ragged for f in record.fields.values()) else VERSION


def align(x: int) -> int:
    return -(-x // ALIGN) * ALIGN


def le(dtype: np.dtype) -> np.dtype:
    return dtype.newbyteorder("<") if dtype.byteorder == ">" else dtype


def raw(a: np.ndarray) -> memoryview:
    """A C-contiguous array's bytes (also for arrays with a 0 in their shape)."""
    return memoryview(np.ascontiguousarray(a).reshape(-1).view(np.uint8))  # type: ignore[arg-type]  # numpy types its buffer protocol for 3.12+ only


def crc(buf: Any, value: int = 0) -> int:
    mv = raw(buf) if isinstance(buf, np.ndarray) else memoryview(buf).cast("B")
    for a in range(0, len(mv), SLICE):
        value = zlib.crc32(mv[a : a + SLICE], value)
    return value


def layout(
    record: type[Record], n: int, sections: list[list[tuple[int, int]]]
) -> tuple[bytes, list[dict], list[tuple[int, int]], int]:
    """The header and column table of ``n`` rows whose fields' sections have the given
    (length, crc32) each, in field and section order.

    Returns (header, columns, placed, end): ``placed`` is each section's (offset, length)
    in file order, ``end`` the file's length.
    """
    fields = list(record.fields.values())
    columns: list[dict[str, Any]] = []
    for f, secs in zip(fields, sections):
        kind = column_kind(f)
        if kind == "fixed":
            ((length, c),) = secs
            columns.append(
                {"field": f.name, "kind": kind, "offset": 0, "length": length, "crc32": c}
            )
        else:
            entry: dict[str, Any] = {"field": f.name, "kind": kind}
            for name, (length, c) in zip(section_names(f), secs):
                entry[name] = {"offset": 0, "length": length, "crc32": c}
            columns.append(entry)

    def places() -> list[dict]:
        """The objects holding an offset and a length, in file order."""
        out = []
        for f, c in zip(fields, columns):
            out.extend([c] if column_kind(f) == "fixed" else [c[s] for s in section_names(f)])
        return out

    # The header's size depends on the offsets it records: settle them by iteration.
    data_offset = 0
    for _ in range(8):
        doc = {
            "format": FORMAT_NAME,
            "version": version_of(record),
            "rows": n,
            "record": record.schema(),
            "columns": columns,
        }
        header = json.dumps(doc, separators=(",", ":"), sort_keys=True).encode()
        start = align(PREAMBLE + len(header))
        if start == data_offset:
            break
        data_offset = start
        off = start
        for p in places():
            p["offset"] = off
            off = align(off + p["length"])
    placed = [(p["offset"], p["length"]) for p in places()]
    end = placed[-1][0] + placed[-1][1] if placed else data_offset
    return header, columns, placed, end


def preamble(version: int, header: bytes, n: int, data_offset: int, file_length: int) -> bytes:
    body = PRE.pack(
        MAGIC, version, 0, PREAMBLE, len(header), n, data_offset, file_length, zlib.crc32(header)
    )
    return body + CRC.pack(zlib.crc32(body))
