"""neuralnet.cpp's kvrec, the key-value container inside ``.nndataset`` and ``.nnvocab``.

A record is an insertion-ordered ``dict`` from keys (``str``, or ``bytes``) to values:

=====================  ====  ==========================================================
Python value           type  stored as
=====================  ====  ==========================================================
``int`` in u64         0     UInt: 8 bytes, little-endian
``str`` or ``bytes``   1     Str: a byte string (a ``str`` is stored as its UTF-8)
uint64 array/list      2     UIntArray: count x u64 (decodes to a numpy ``uint64`` array)
``dict``               3     Record: a nested record (version 2 only)
=====================  ====  ==========================================================

Strings (Str values and keys) are byte strings, as in C++ (``std::string``): any bytes
are read and written losslessly. A string decodes to ``str`` when its bytes are valid
UTF-8 and to ``bytes`` otherwise (neuralnet.cpp's tokenizer stores raw token bytes);
the writers take ``str``, ``bytes``, ``bytearray`` or ``memoryview``. So bytes that
happen to be valid UTF-8 read back as the ``str`` of the same bytes, and every decoded
record encodes back to exactly the bytes it was decoded from:

>>> decode(encode_v2({"tok": b"\\xc8", "txt": "h\\xe9", "raw": "hi".encode()}))[0]
{'tok': b'\\xc8', 'txt': 'hé', 'raw': 'hi'}

Version 1 (inline)::

    [count u32] then per field [klen u32][key][type u8][vlen u32][value]

Version 2 (addressed)::

    [count u32]                                   count includes the sentinel
    [13]["kvrec_version"][type 0][vlen 8][u64 2]  the sentinel, v1 style (30 bytes)
    per field [klen u32][key][type u8][addr u64]  addr: absolute file offset of its block
    per field [vlen u64][value]                   the data blocks, in field order

A nested Record's value is a complete version 2 record whose own addresses are
absolute, with its base at its data block's start + 8. An empty version 2 record is
34 bytes.

Decoding follows the C++ reader: a count of 0 is an empty version 1 record; field 0
is read in the version 1 style and, if its key is ``kvrec_version``, the record is
version 2 and the sentinel must be UInt, 8 bytes, value 2; every address must equal
the running position (bytes copied to another base are rejected); unknown types are
skipped by their length (type 3 counts as unknown in a version 1 record, as in C++);
a lookup (:func:`lookup`) returns the first field with that key and type, and
:func:`decode`'s dict keeps the first field of each key. feedline is stricter than
the C++ reader where C++ would read garbage: a UInt must be exactly 8 bytes, a nested
record must fill its data block exactly, a skipped value must lie inside the buffer,
and records nest at most :data:`MAX_DEPTH` deep.
Every problem is a :class:`~feedline.errors.FormatError` naming the byte offset.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from ..errors import FormatError

__all__ = [
    "MAX_DEPTH",
    "RECORD",
    "STR",
    "UINT",
    "UINT_ARRAY",
    "Field",
    "decode",
    "decode_fields",
    "encode_v1",
    "encode_v2",
    "lookup",
    "size_v2",
    "to_dict",
]

UINT, STR, UINT_ARRAY, RECORD = 0, 1, 2, 3
TYPE_NAMES = {UINT: "UInt", STR: "Str", UINT_ARRAY: "UIntArray", RECORD: "Record"}
VERSION_KEY = "kvrec_version"
_VERSION_KEY = VERSION_KEY.encode()
SENTINEL = struct.pack("<I13sBIQ", 13, _VERSION_KEY, UINT, 8, 2)  # 30 bytes
EMPTY_V2_SIZE = 4 + len(SENTINEL)  # 34
MAX_DEPTH = 64  # far deeper than any real file; bounds the recursion on crafted input
_U32, _U64 = struct.Struct("<I"), struct.Struct("<Q")
_MAX_U64 = (1 << 64) - 1


class Field(NamedTuple):
    """One decoded field, duplicates and all.

    ``key`` is a ``str`` (or ``bytes`` when it is not UTF-8); ``value`` is an ``int``,
    a ``str`` (or ``bytes`` when it is not UTF-8), a numpy ``uint64`` array, or, for a
    Record, a list of ``Field``; ``offset`` is the absolute file offset of the value's
    bytes (for a Record, the nested record's start).
    """

    key: str | bytes
    type: int
    value: Any
    offset: int


# ---------------------------------------------------------------- encoding


_BYTES_LIKE = (bytes, bytearray, memoryview)


def _kind(key: Any, value: Any) -> int:
    if isinstance(value, Mapping):
        return RECORD
    if isinstance(value, (str, *_BYTES_LIKE)):
        return STR
    if isinstance(value, (bool, np.bool_)):
        raise TypeError(f"kvrec field {key!r}: a bool is not a kvrec value; store 0 or 1")
    if isinstance(value, (int, np.integer)):
        return UINT
    if isinstance(value, (np.ndarray, Sequence)):
        return UINT_ARRAY
    raise TypeError(
        f"kvrec field {key!r}: expected int, str or bytes, a uint64 array or "
        f"list, or a dict, got {type(value).__name__}"
    )


def _str_bytes(value: Any) -> bytes:
    """A Str's bytes: a ``str``'s UTF-8, a bytes-like object's own bytes."""
    return value.encode("utf-8") if isinstance(value, str) else bytes(value)


def _uint(key: str, value: Any) -> int:
    v = int(value)
    if not 0 <= v <= _MAX_U64:
        raise ValueError(f"kvrec field {key!r}: a UInt must be in [0, 2**64), got {v}")
    return v


def u64_array(value: Any, what: str) -> np.ndarray:
    """``value`` as a little-endian ``uint64`` array; a ``ValueError`` for a negative,
    fractional or too-large entry, or for anything not one-dimensional. No copy when
    ``value`` already is one."""
    arr = value if isinstance(value, np.ndarray) else np.asarray(value)
    if arr.dtype.kind not in "iuO" and not isinstance(value, np.ndarray) and arr.ndim == 1:
        arr = np.asarray(value, dtype=object)  # e.g. [-1, 2**64 - 1] came out as float64
    if arr.ndim != 1:
        raise ValueError(f"{what}: expected a 1-D sequence of integers, got shape {arr.shape}")
    if arr.size == 0:
        return np.zeros(0, "<u8")
    kind = arr.dtype.kind
    if kind == "u":
        return arr.astype("<u8", copy=False)
    if kind == "i":
        if int(arr.min()) < 0:
            raise ValueError(f"{what}: entries must be >= 0, found {int(arr.min())}")
        return arr.astype("<u8")
    if kind == "O":
        items = arr.tolist()
        for v in items:
            if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
                raise ValueError(f"{what}: entries must be integers, found {v!r}")
            if not 0 <= int(v) <= _MAX_U64:
                raise ValueError(f"{what}: entries must be in [0, 2**64), found {v}")
        return np.array([int(v) for v in items], dtype="<u8")
    raise ValueError(f"{what}: entries must be integers, got dtype {arr.dtype}")


def _key_bytes(key: Any) -> bytes:
    if not isinstance(key, (str, *_BYTES_LIKE)):
        raise TypeError(f"kvrec keys are str or bytes, got {type(key).__name__}: {key!r}")
    kb = _str_bytes(key)
    if kb == _VERSION_KEY:
        raise ValueError(f"{VERSION_KEY!r} is reserved for the version 2 sentinel")
    if len(kb) > 0xFFFFFFFF:
        raise ValueError("a kvrec key must be shorter than 2**32 bytes")
    return kb


def _keys(record: Mapping[Any, Any]) -> list[bytes]:
    """The stored bytes of ``record``'s keys; a str and a bytes key of the same bytes
    would be one key twice in the file (the second unreadable), so they are refused."""
    keys = [_key_bytes(k) for k in record]
    if len(set(keys)) != len(keys):
        seen: dict[bytes, Any] = {}
        for kb, k in zip(keys, record):
            if kb in seen:
                raise ValueError(
                    f"kvrec keys {seen[kb]!r} and {k!r} are the same key ({kb!r}) once stored"
                )
            seen[kb] = k
    return keys


def encode_v1(record: Mapping[str, Any]) -> bytes:
    """The version 1 (inline) bytes of ``record``. Cost: one pass over the values.

    Version 1 has no nested records (the C++ writer silently drops them); a ``dict``
    value is a ``ValueError`` here. A value longer than 2**32 - 1 bytes too.

    >>> encode_v1({"a": 1}).hex()
    '01000000010000006100080000000100000000000000'
    """
    out = [_U32.pack(len(record))]
    for kb, (key, value) in zip(_keys(record), record.items()):
        kind = _kind(key, value)
        if kind == RECORD:
            raise ValueError(
                f"kvrec field {key!r}: version 1 records cannot hold a nested record; use encode_v2"
            )
        data = _value_bytes(key, kind, value)
        if len(data) > 0xFFFFFFFF:
            raise ValueError(
                f"kvrec field {key!r}: {len(data)} bytes do not fit a version 1 length (u32)"
            )
        out += [_U32.pack(len(kb)), kb, bytes((kind,)), _U32.pack(len(data)), data]
    return b"".join(out)


def _value_bytes(key: str, kind: int, value: Any) -> bytes:
    if kind == UINT:
        return _U64.pack(_uint(key, value))
    if kind == STR:
        return _str_bytes(value)
    return u64_array(value, f"kvrec field {key!r}").tobytes()


def _value_size(key: str, kind: int, value: Any, depth: int) -> int:
    if kind == UINT:
        return 8
    if kind == STR:
        return len(value.encode("utf-8")) if isinstance(value, str) else memoryview(value).nbytes
    if kind == UINT_ARRAY:
        return 8 * len(value)
    return _size(value, depth + 1)


def _table_size(keys: list[bytes]) -> int:
    return EMPTY_V2_SIZE + sum(13 + len(k) for k in keys)


def _size(record: Mapping[str, Any], depth: int) -> int:
    if depth > MAX_DEPTH:
        raise ValueError(f"kvrec records nest at most {MAX_DEPTH} deep")
    size = _table_size(_keys(record))
    for key, value in record.items():
        size += 8 + _value_size(key, _kind(key, value), value, depth)
    return size


def size_v2(record: Mapping[str, Any]) -> int:
    """The length of ``encode_v2(record, base)`` for any base, without encoding it.

    Cost: one pass over the keys and the string values; arrays are only measured.
    """
    return _size(record, 0)


def encode_v2(record: Mapping[str, Any], base: int = 0) -> bytes:
    """The version 2 bytes of ``record`` placed at absolute file offset ``base``.

    Every address written is absolute: base + the position inside the record. Nested
    records are encoded with their base at their data block's start + 8. Cost: one
    pass, plus one copy of each nested record's bytes per level above it.

    >>> len(encode_v2({}, 8))
    34
    """
    return _encode_v2(record, base, 0)


def _encode_v2(record: Mapping[str, Any], base: int, depth: int) -> bytes:
    if depth > MAX_DEPTH:
        raise ValueError(f"kvrec records nest at most {MAX_DEPTH} deep")
    keys = _keys(record)
    cursor = base + _table_size(keys)
    heads, blocks = [_U32.pack(len(record) + 1), SENTINEL], []
    for kb, (key, value) in zip(keys, record.items()):
        kind = _kind(key, value)
        if kind == RECORD:
            data = _encode_v2(value, cursor + 8, depth + 1)
        else:
            data = _value_bytes(key, kind, value)
        heads += [_U32.pack(len(kb)), kb, bytes((kind,)), _U64.pack(cursor)]
        blocks += [_U64.pack(len(data)), data]
        cursor += 8 + len(data)
    return b"".join(heads + blocks)


# ---------------------------------------------------------------- decoding


def _text(data: bytes) -> str | bytes:
    """A kvrec string as read: the ``str`` of valid UTF-8, else the raw ``bytes``."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data


class _Reader:
    """Bounds-checked reads from a buffer whose position ``offset`` is file offset ``base``."""

    __slots__ = ("base", "buf", "end", "offset", "path")

    def __init__(self, buf: Any, offset: int, base: int, path: Any) -> None:
        mv = memoryview(buf)
        self.buf = mv if mv.format == "B" and mv.ndim == 1 else mv.cast("B")
        self.end = len(self.buf)
        self.offset, self.base, self.path = offset, base, path

    def at(self, pos: int) -> int:
        """The absolute file offset of buffer position ``pos``."""
        return self.base + (pos - self.offset)

    def fail(self, message: str, pos: int) -> FormatError:
        return FormatError(message, self.path, self.at(pos))

    def need(self, pos: int, n: int, what: str) -> None:
        if n > self.end - pos:
            raise self.fail(f"{what} needs {n} bytes, only {max(self.end - pos, 0)} remain", pos)

    def u32(self, pos: int, what: str) -> int:
        self.need(pos, 4, what)
        return _U32.unpack_from(self.buf, pos)[0]

    def u64(self, pos: int, what: str) -> int:
        self.need(pos, 8, what)
        return _U64.unpack_from(self.buf, pos)[0]

    def raw(self, pos: int, n: int, what: str) -> bytes:
        self.need(pos, n, what)
        return bytes(self.buf[pos : pos + n])

    def text(self, pos: int, n: int, what: str) -> str | bytes:
        """A string (key or Str): ``str`` when its bytes are UTF-8, else the ``bytes``."""
        return _text(self.raw(pos, n, what))

    def value(self, kind: int, pos: int, n: int, key: str | bytes, depth: int) -> Any:
        """A known non-Record value of ``n`` bytes at ``pos`` (already bounds-checked)."""
        what = f"field {key!r}"
        if kind == UINT:
            if n != 8:
                raise self.fail(f"{what}: a UInt is 8 bytes, found length {n}", pos)
            return _U64.unpack_from(self.buf, pos)[0]
        if kind == STR:
            return _text(bytes(self.buf[pos : pos + n]))
        if n % 8:
            raise self.fail(f"{what}: a UIntArray's length must be a multiple of 8, found {n}", pos)
        return np.frombuffer(self.buf, "<u8", n // 8, pos).astype(np.uint64)


def _decode(r: _Reader, pos: int, depth: int) -> tuple[list[Field], int]:
    if depth > MAX_DEPTH:
        raise r.fail(f"records nest more than {MAX_DEPTH} deep", pos)
    start = pos
    count = r.u32(pos, "a record's field count")
    pos += 4
    if count == 0:
        return [], pos
    # field 0, read in the version 1 style
    klen = r.u32(pos, "field 0's key length")
    key0_raw = r.raw(pos + 4, klen, "field 0's key")
    kpos, pos = pos + 4, pos + 4 + klen
    r.need(pos, 5, "field 0's type and length")
    kind0 = r.buf[pos]
    vlen0 = _U32.unpack_from(r.buf, pos + 1)[0]
    vpos = pos + 5
    r.need(vpos, vlen0, "field 0's value")
    pos = vpos + vlen0
    if key0_raw == _VERSION_KEY:
        if kind0 != UINT or vlen0 != 8:
            raise r.fail(
                f"the kvrec_version sentinel must be UInt (type 0) of 8 bytes, "
                f"found type {kind0} of {vlen0} bytes",
                kpos - 4,
            )
        version = _U64.unpack_from(r.buf, vpos)[0]
        if version != 2:
            raise r.fail(f"expected kvrec version 2, found {version}", vpos)
        return _decode_v2(r, start, pos, count, depth)
    fields: list[Field] = []
    key0 = r.text(kpos, klen, "field 0's key")
    if kind0 in (UINT, STR, UINT_ARRAY):
        fields.append(Field(key0, kind0, r.value(kind0, vpos, vlen0, key0, depth), r.at(vpos)))
    if count - 1 > (r.end - pos) // 9:  # each version 1 field takes at least 9 bytes
        raise r.fail(
            f"the record declares {count} fields, the {r.end - pos} bytes left cannot hold them",
            start,
        )
    for i in range(1, count):
        klen = r.u32(pos, f"field {i}'s key length")
        key = r.text(pos + 4, klen, f"field {i}'s key")
        pos += 4 + klen
        r.need(pos, 5, f"the type and length of {key!r}")
        kind = r.buf[pos]
        vlen = _U32.unpack_from(r.buf, pos + 1)[0]
        vpos = pos + 5
        r.need(vpos, vlen, f"the value of {key!r}")
        pos = vpos + vlen
        if kind in (UINT, STR, UINT_ARRAY):
            fields.append(Field(key, kind, r.value(kind, vpos, vlen, key, depth), r.at(vpos)))
    return fields, pos


def _decode_v2(r: _Reader, start: int, pos: int, count: int, depth: int) -> tuple[list[Field], int]:
    if count - 1 > (r.end - pos) // 21:  # a header (13 + key) and a block (8) per field
        raise r.fail(
            f"the record declares {count} fields, the {r.end - pos} bytes left cannot hold them",
            start,
        )
    heads = []
    for i in range(1, count):
        hpos = pos
        klen = r.u32(pos, f"field {i}'s key length")
        key = r.text(pos + 4, klen, f"field {i}'s key")
        pos += 4 + klen
        r.need(pos, 9, f"the type and address of {key!r}")
        heads.append((key, r.buf[pos], _U64.unpack_from(r.buf, pos + 1)[0], hpos))
        pos += 9
    fields: list[Field] = []
    for key, kind, addr, hpos in heads:
        if addr != r.at(pos):
            raise r.fail(
                f"field {key!r}: expected its data block at byte {r.at(pos)} (right "
                f"after the previous one), its address says {addr}",
                hpos,
            )
        vlen = r.u64(pos, f"the value length of {key!r}")
        vpos = pos + 8
        r.need(vpos, vlen, f"the value of {key!r}")
        pos = vpos + vlen
        if kind == RECORD:
            sub, end = _decode(r, vpos, depth + 1)
            if end != pos:
                raise r.fail(
                    f"field {key!r}: the nested record ends at byte {r.at(end)}, "
                    f"its data block at byte {r.at(pos)}",
                    vpos,
                )
            fields.append(Field(key, kind, sub, r.at(vpos)))
        elif kind in (UINT, STR, UINT_ARRAY):
            fields.append(Field(key, kind, r.value(kind, vpos, vlen, key, depth), r.at(vpos)))
    return fields, pos


def decode_fields(
    buf: Any, offset: int = 0, base: int | None = None, path: Any = None
) -> tuple[list[Field], int]:
    """Every field of the record at ``buf[offset:]``, in order, duplicates kept.

    ``buf`` is any bytes-like object (bytes, a memoryview of a memory map);
    ``base`` is the absolute file offset of ``buf[offset]`` (default ``offset``:
    ``buf`` is the whole file); ``path`` names the file in errors. Returns the fields
    and the buffer position just past the record. Cost: proportional to the record's
    size; UIntArrays are copied out of ``buf``, nothing else is read.
    """
    r = _Reader(buf, offset, offset if base is None else base, path)
    if not 0 <= offset <= r.end:
        raise FormatError(
            f"a record at buffer position {offset} is outside the {r.end}-byte buffer", path, r.base
        )
    return _decode(r, offset, 0)


def to_dict(fields: list[Field]) -> dict[str | bytes, Any]:
    """The dict of ``fields``: the first field of each key wins; Records become dicts."""
    out: dict[str | bytes, Any] = {}
    for f in fields:
        if f.key not in out:
            out[f.key] = to_dict(f.value) if f.type == RECORD else f.value
    return out


def decode(
    buf: Any, offset: int = 0, base: int | None = None, path: Any = None
) -> tuple[dict[str | bytes, Any], int]:
    """The record at ``buf[offset:]`` as a dict, and the buffer position past its end.

    Arguments as in :func:`decode_fields`. Of duplicate keys the first is kept;
    UIntArrays decode to numpy ``uint64`` arrays, Records to dicts.

    >>> decode(encode_v2({"a": 1, "b": {"c": "x"}}, 8), 0, 8)[0]
    {'a': 1, 'b': {'c': 'x'}}
    """
    fields, end = decode_fields(buf, offset, base, path)
    return to_dict(fields), end


def lookup(fields: list[Field], key: str | bytes, kind: int) -> Field | None:
    """The first field named ``key`` of type ``kind`` (the C++ ``get``), or None.

    ``key`` is compared by its bytes: ``b"vocab"`` finds the field ``"vocab"``."""
    if not isinstance(key, str):
        key = _text(bytes(key))
    for f in fields:
        if f.key == key and f.type == kind:
            return f
    return None
