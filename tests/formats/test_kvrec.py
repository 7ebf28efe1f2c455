"""The kvrec codec: hand-computed bytes, both versions, and every malformed input."""

from __future__ import annotations

import doctest
import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from feedline.errors import FormatError
from feedline.formats import kvrec

SENTINEL = struct.pack("<I", 13) + b"kvrec_version" + b"\x00" + struct.pack("<IQ", 8, 2)


def plain(value):
    """Records with arrays turned into lists, for comparison."""
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, np.ndarray):
        assert value.dtype == np.uint64
        return value.tolist()
    return value


def v1_field(key: bytes, kind: int, value: bytes) -> bytes:
    return (
        struct.pack("<I", len(key)) + key + bytes((kind,)) + struct.pack("<I", len(value)) + value
    )


def test_the_sentinel_is_30_bytes_and_an_empty_v2_record_34():
    assert len(SENTINEL) == 30
    assert kvrec.encode_v2({}, 8) == struct.pack("<I", 1) + SENTINEL
    assert kvrec.size_v2({}) == 34
    assert kvrec.decode(kvrec.encode_v2({}, 8), 0, 8) == ({}, 34)


def test_a_count_of_zero_is_an_empty_v1_record():
    assert kvrec.encode_v1({}) == b"\0\0\0\0"
    assert kvrec.decode(b"\0\0\0\0xyz") == ({}, 4)


def test_v1_bytes_are_the_inline_layout():
    data = kvrec.encode_v1({"a": 1, "s": "hé", "arr": [1, 2]})
    expected = (
        struct.pack("<I", 3)
        + v1_field(b"a", 0, struct.pack("<Q", 1))
        + v1_field(b"s", 1, "hé".encode())
        + v1_field(b"arr", 2, struct.pack("<QQ", 1, 2))
    )
    assert data == expected
    record, end = kvrec.decode(data)
    assert end == len(data)
    assert plain(record) == {"a": 1, "s": "hé", "arr": [1, 2]}


def test_v2_bytes_of_a_nested_record_are_hand_computed():
    # table = 4 + 30 + (4+1+1+8) * 2 = 62, so the blocks start at 8 + 62 = 70
    nested = (
        struct.pack("<I", 2)
        + SENTINEL
        + struct.pack("<I", 1)
        + b"s"
        + b"\x01"
        + struct.pack("<Q", 142)  # 94 + 48
        + struct.pack("<Q", 2)
        + b"hi"
    )
    assert len(nested) == 58
    expected = (
        struct.pack("<I", 3)
        + SENTINEL
        + struct.pack("<I", 1)
        + b"x"
        + b"\x00"
        + struct.pack("<Q", 70)
        + struct.pack("<I", 1)
        + b"r"
        + b"\x03"
        + struct.pack("<Q", 86)
        + struct.pack("<QQ", 8, 5)
        + struct.pack("<Q", 58)
        + nested
    )  # the nested record's base is 86 + 8 = 94
    record = {"x": 5, "r": {"s": "hi"}}
    assert kvrec.encode_v2(record, 8) == expected
    assert kvrec.size_v2(record) == len(expected) == 144
    assert kvrec.decode(expected, 0, 8) == (record, 144)


def test_decode_reads_a_record_inside_a_larger_buffer_at_its_base():
    data = kvrec.encode_v2({"k": [7, 8], "r": {"u": 1}}, 1000)
    buf = b"junk" + data + b"tail"
    record, end = kvrec.decode(buf, 4, 1000)
    assert plain(record) == {"k": [7, 8], "r": {"u": 1}}
    assert end == 4 + len(data)


def test_a_record_copied_to_another_base_is_rejected():
    data = kvrec.encode_v2({"a": 1}, 8)
    with pytest.raises(FormatError, match="address") as e:
        kvrec.decode(data, 0, 0, path="f.bin")
    assert e.value.offset == 4 + 30  # the field's header
    assert e.value.path == "f.bin"


def test_uint_arrays_decode_to_numpy_uint64():
    record, _ = kvrec.decode(kvrec.encode_v2({"a": np.array([0, 2**64 - 1], dtype=np.uint64)}))
    assert record["a"].dtype == np.uint64
    assert record["a"].tolist() == [0, 2**64 - 1]
    record, _ = kvrec.decode(kvrec.encode_v1({"a": []}))
    assert record["a"].dtype == np.uint64 and len(record["a"]) == 0


def test_v1_unknown_types_and_records_are_skipped_by_their_length():
    data = (
        struct.pack("<I", 4)
        + v1_field(b"future", 9, b"whatever")
        + v1_field(b"a", 0, struct.pack("<Q", 3))
        + v1_field(b"rec", 3, b"\0\0\0\0")  # v1 has no nested records (as in C++)
        + v1_field(b"b", 1, b"x")
    )
    record, end = kvrec.decode(data)
    assert record == {"a": 3, "b": "x"}
    assert end == len(data)


def test_v2_unknown_types_are_skipped_and_addresses_still_chain():
    table = 4 + 30 + (4 + 4 + 1 + 8) + (4 + 6 + 1 + 8)
    data = (
        struct.pack("<I", 3)
        + SENTINEL
        + struct.pack("<I", 4)
        + b"keep"
        + b"\x00"
        + struct.pack("<Q", table)
        + struct.pack("<I", 6)
        + b"future"
        + b"\x07"
        + struct.pack("<Q", table + 16)
        + struct.pack("<QQ", 8, 123)
        + struct.pack("<Q", 3)
        + b"abc"
    )
    assert kvrec.decode(data) == ({"keep": 123}, len(data))


def test_duplicate_keys_keep_the_first_and_lookups_take_the_first_of_the_type():
    data = (
        struct.pack("<I", 3)
        + v1_field(b"k", 1, b"text")
        + v1_field(b"k", 0, struct.pack("<Q", 1))
        + v1_field(b"k", 0, struct.pack("<Q", 2))
    )
    assert kvrec.decode(data)[0] == {"k": "text"}
    fields, _ = kvrec.decode_fields(data)
    assert kvrec.lookup(fields, "k", kvrec.UINT).value == 1
    assert kvrec.lookup(fields, "k", kvrec.STR).value == "text"
    assert kvrec.lookup(fields, "k", kvrec.RECORD) is None
    assert kvrec.lookup(fields, "other", kvrec.UINT) is None


@pytest.mark.parametrize(
    ("kind", "vlen", "value", "message"),
    [
        (1, 8, 2, "sentinel"),
        (0, 4, 2, "sentinel"),
        (0, 8, 3, "version 2"),
    ],
)
def test_a_bad_sentinel_is_rejected(kind, vlen, value, message):
    body = struct.pack("<Q", value)[:vlen]
    data = (
        struct.pack("<I", 1)
        + struct.pack("<I", 13)
        + b"kvrec_version"
        + bytes((kind,))
        + struct.pack("<I", vlen)
        + body
    )
    with pytest.raises(FormatError, match=message) as e:
        kvrec.decode(data)
    assert e.value.offset is not None


def test_a_uint_array_whose_length_is_not_a_multiple_of_8_is_rejected():
    with pytest.raises(FormatError, match="multiple of 8") as e:
        kvrec.decode(struct.pack("<I", 1) + v1_field(b"a", 2, b"\0" * 12))
    assert e.value.offset == 4 + 4 + 1 + 1 + 4
    table = 4 + 30 + 4 + 1 + 1 + 8
    v2 = (
        struct.pack("<I", 2)
        + SENTINEL
        + struct.pack("<I", 1)
        + b"a"
        + b"\x02"
        + struct.pack("<Q", 100 + table)
        + struct.pack("<Q", 4)
        + b"\0" * 4
    )
    with pytest.raises(FormatError, match="multiple of 8") as e:
        kvrec.decode(v2, 0, 100)
    assert e.value.offset == 100 + table + 8


def test_a_uint_of_the_wrong_length_is_rejected():
    with pytest.raises(FormatError, match="UInt is 8 bytes"):
        kvrec.decode(struct.pack("<I", 1) + v1_field(b"a", 0, b"\0" * 4))


def test_a_str_that_is_not_utf8_decodes_to_its_bytes():
    # kvrec strings are byte strings (C++ std::string): raw bytes read back losslessly
    data = struct.pack("<I", 2) + v1_field(b"a", 1, b"\xff\xfe") + v1_field(b"b", 1, b"ok")
    assert kvrec.decode(data) == ({"a": b"\xff\xfe", "b": "ok"}, len(data))
    fields, _ = kvrec.decode_fields(data)
    assert kvrec.lookup(fields, "a", kvrec.STR).value == b"\xff\xfe"


def test_a_key_that_is_not_utf8_decodes_to_its_bytes():
    data = struct.pack("<I", 1) + v1_field(b"\xc3", 0, b"\0" * 8)
    assert kvrec.decode(data) == ({b"\xc3": 0}, len(data))
    fields, _ = kvrec.decode_fields(data)
    assert kvrec.lookup(fields, b"\xc3", kvrec.UINT).value == 0
    v2 = kvrec.encode_v2({b"\xc8": 1, "r": {b"\xff\x00": b"\x80"}}, 8)
    assert kvrec.decode(v2, 0, 8)[0] == {b"\xc8": 1, "r": {b"\xff\x00": b"\x80"}}


def test_bytes_encode_as_str_byte_for_byte_in_both_versions():
    raw = bytes(range(256))
    assert kvrec.encode_v1({"s": raw}) == struct.pack("<I", 1) + v1_field(b"s", 1, raw)
    v2 = kvrec.encode_v2({"s": raw, "k": bytearray(b"\xc8"), "m": memoryview(b"\xc9")}, 8)
    table = 4 + 30 + 3 * 14
    assert v2 == (
        struct.pack("<I", 4)
        + SENTINEL
        + struct.pack("<I", 1)
        + b"s"
        + b"\x01"
        + struct.pack("<Q", 8 + table)
        + struct.pack("<I", 1)
        + b"k"
        + b"\x01"
        + struct.pack("<Q", 8 + table + 264)
        + struct.pack("<I", 1)
        + b"m"
        + b"\x01"
        + struct.pack("<Q", 8 + table + 273)
        + struct.pack("<Q", 256)
        + raw
        + struct.pack("<Q", 1)
        + b"\xc8"
        + struct.pack("<Q", 1)
        + b"\xc9"
    )
    assert kvrec.size_v2({"s": raw, "k": b"\xc8", "m": b"\xc9"}) == len(v2)
    assert kvrec.decode(v2, 0, 8)[0] == {"s": raw, "k": b"\xc8", "m": b"\xc9"}


def test_bytes_that_are_utf8_read_back_as_str_with_the_same_bytes():
    data = kvrec.encode_v2({"a": "hé".encode(), b"key": b""}, 8)
    assert data == kvrec.encode_v2({"a": "hé", "key": ""}, 8)
    assert kvrec.decode(data, 0, 8)[0] == {"a": "hé", "key": ""}


def test_a_str_key_and_a_bytes_key_of_the_same_bytes_are_refused():
    with pytest.raises(ValueError, match="same key"):
        kvrec.encode_v2({"a": 1, b"a": 2})
    with pytest.raises(ValueError, match="reserved"):
        kvrec.encode_v2({b"kvrec_version": 2})


def test_every_truncation_is_a_format_error():
    for data, base in (
        (kvrec.encode_v2({"a": 1, "b": {"c": [1, 2, 3], "d": "xyz"}}, 8), 8),
        (kvrec.encode_v1({"a": 1, "s": "text", "arr": [4, 5]}), 0),
    ):
        for cut in range(len(data)):
            with pytest.raises(FormatError):
                kvrec.decode(data[:cut], 0, base)


def test_a_huge_length_is_a_format_error_not_an_allocation():
    v1 = struct.pack("<I", 1) + struct.pack("<I", 1) + b"a" + b"\x01" + struct.pack("<I", 2**32 - 1)
    with pytest.raises(FormatError, match="needs 4294967295 bytes"):
        kvrec.decode(v1 + b"xx")
    v2 = (
        struct.pack("<I", 2)
        + SENTINEL
        + struct.pack("<I", 1)
        + b"a"
        + b"\x02"
        + struct.pack("<Q", 48)
        + struct.pack("<Q", 2**63)
    )
    with pytest.raises(FormatError, match="needs 9223372036854775808 bytes"):
        kvrec.decode(v2)
    many = struct.pack("<I", 2**32 - 1) + struct.pack("<I", 1) + b"a" + b"\x00" + b"\x08\0\0\0"
    with pytest.raises(FormatError, match="cannot hold them"):
        kvrec.decode(many + b"\0" * 8)


def test_a_nested_record_must_fill_its_block():
    data = bytearray(kvrec.encode_v2({"r": {}, "z": 1}, 0))
    # grow r's block by 8 bytes of padding: patch its length and z's address
    table = 4 + 30 + 2 * 14
    r_len_at = table
    struct.pack_into("<Q", data, r_len_at, 34 + 8)
    z_addr_at = 4 + 30 + 14 + 4 + 1 + 1
    struct.pack_into("<Q", data, z_addr_at, table + 8 + 42)
    data[table + 8 + 34 : table + 8 + 34] = b"\0" * 8
    with pytest.raises(FormatError, match="nested record ends"):
        kvrec.decode(bytes(data))


def test_nesting_deeper_than_the_limit_is_refused(monkeypatch):
    monkeypatch.setattr(kvrec, "MAX_DEPTH", 2)
    deep = {"a": {"b": {"c": {}}}}
    with pytest.raises(ValueError, match="nest"):
        kvrec.encode_v2(deep)
    monkeypatch.setattr(kvrec, "MAX_DEPTH", 64)
    data = kvrec.encode_v2(deep)
    monkeypatch.setattr(kvrec, "MAX_DEPTH", 2)
    with pytest.raises(FormatError, match="nest"):
        kvrec.decode(data)


@pytest.mark.parametrize(
    ("record", "error"),
    [
        ({"a": True}, TypeError),
        ({"a": -1}, ValueError),
        ({"a": 2**64}, ValueError),
        ({"a": 1.5}, TypeError),
        ({"a": 1j}, TypeError),
        ({"a": None}, TypeError),
        ({1: 1}, TypeError),
        ({"kvrec_version": 2}, ValueError),
        ({"a": [1, -2]}, ValueError),
        ({"a": [1.5]}, ValueError),
        ({"a": np.zeros((2, 2), dtype=np.uint64)}, ValueError),
        ({"a": [-1, 2**64 - 1]}, ValueError),
    ],
)
def test_values_kvrec_cannot_hold_are_refused(record, error):
    with pytest.raises(error):
        kvrec.encode_v2(record)


def test_version_1_refuses_nested_records():
    with pytest.raises(ValueError, match="nested"):
        kvrec.encode_v1({"r": {}})


def test_large_uints_and_signed_arrays_encode():
    record = {
        "a": 2**64 - 1,
        "b": np.array([1, 2], dtype=np.int32),
        "c": [2**64 - 1, 0],
        "d": np.uint64(7),
    }
    assert plain(kvrec.decode(kvrec.encode_v2(record))[0]) == {
        "a": 2**64 - 1,
        "b": [1, 2],
        "c": [2**64 - 1, 0],
        "d": 7,
    }


def test_the_module_examples_pass():
    assert doctest.testmod(kvrec).failed == 0


def canonical(value):
    """What a record reads back as: bytes that are valid UTF-8 become str."""
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            return value
    if isinstance(value, dict):
        return {canonical(k): canonical(v) for k, v in value.items()}
    return value


keys = st.one_of(st.text(max_size=6), st.binary(max_size=4))
leaves = st.one_of(
    st.integers(0, 2**64 - 1),
    st.text(max_size=8),
    st.binary(max_size=8),
    st.lists(st.integers(0, 2**64 - 1), max_size=4),
)


def _plain_keys(d):  # no key twice once encoded, none the reserved one
    return len({k.encode() if isinstance(k, str) else k for k in d} - {b"kvrec_version"}) == len(d)


v1_records = st.dictionaries(keys, leaves, max_size=5).filter(_plain_keys)
v2_records = st.recursive(
    v1_records,
    lambda inner: st.dictionaries(keys, st.one_of(leaves, inner), max_size=4).filter(_plain_keys),
    max_leaves=12,
)


@settings(max_examples=200, deadline=None)
@given(v2_records, st.integers(0, 2**40))
def test_v2_records_round_trip_at_any_base(record, base):
    data = kvrec.encode_v2(record, base)
    assert len(data) == kvrec.size_v2(record)
    decoded, end = kvrec.decode(data, 0, base)
    assert end == len(data)
    assert plain(decoded) == canonical(record)
    assert kvrec.encode_v2(decoded, base) == data


@settings(max_examples=200, deadline=None)
@given(v1_records)
def test_v1_records_round_trip(record):
    data = kvrec.encode_v1(record)
    decoded, end = kvrec.decode(data)
    assert (plain(decoded), end) == (canonical(record), len(data))
    assert kvrec.encode_v1(decoded) == data


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_mutated_records_decode_or_raise_format_error(data):
    record = data.draw(v2_records)
    raw = bytearray(kvrec.encode_v2(record, 8))
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(raw) - 1))
        raw[i] = data.draw(st.integers(0, 255))
    raw = raw[: data.draw(st.integers(0, len(raw)))]
    try:
        kvrec.decode(bytes(raw), 0, 8)
    except FormatError as e:
        assert e.offset is not None
