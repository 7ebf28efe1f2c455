""".flr (feedline's typed record file): layout, round trips, streaming, checks and damage."""

from __future__ import annotations

import json
import mmap
import os
import pickle
import struct
import time
import tracemalloc
import zlib

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import feedline as fl
from feedline.records import make_record

MAGIC = b"\x89FLR\r\n\x1a\n"
# A liveness bound for a fuzzed file's open and reads (a hang fails the test), not a timing.
LIVENESS_S = 30.0
PRE = struct.Struct("<8sIIQQQQQI")
U32, U64 = 2**32 - 1, 2**64 - 1
# Preamble fields: (name, index in PRE, byte offset, size).
FIELDS = [
    ("magic", 0, 0, 8),
    ("version", 1, 8, 4),
    ("flags", 2, 12, 4),
    ("header offset", 3, 16, 8),
    ("header length", 4, 24, 8),
    ("rows", 5, 32, 8),
    ("data offset", 6, 40, 8),
    ("file length", 7, 48, 8),
    ("header crc", 8, 56, 4),
]


class Scalars(fl.Record):
    """One scalar of each kind of dtype."""

    flag = fl.field((), "bool", domain=fl.Mask, doc="a flag")
    small = fl.field((), "int8", domain=fl.Range(-100, 100))
    half = fl.field((), "float16")
    z = fl.field((), "complex64", doc="a complex number")
    count = fl.field((), "uint16", domain=fl.Index(1000))
    big = fl.field((), "int64")
    prob = fl.field((), "float64", domain=fl.Range(0.0, 1.0), doc="a probability")


class Image(fl.Record, dims={"H": 4, "W": 3, "C": 10}):
    """A labelled image, with a mask and a three-axis patch."""

    img = fl.field(("H", "W"), "float32", doc="pixels, row-major")
    label = fl.field((), "int64", domain=fl.Index("C"), doc="the class")
    mask = fl.field("W", "bool", domain=fl.Mask)
    patch = fl.field((2, "H", 2), "int8")


class Waves(fl.Record, dims={"T": 5}):
    signal = fl.field("T", "complex64")
    scale = fl.field((), ">f8")  # declared big-endian: stored little-endian


class Vec(fl.Record):
    """One field: streams take bare values."""

    v = fl.field(7, "float16")


RECORDS = [Scalars, Image, Waves, Vec]


def sample(record: type[fl.Record], n: int, seed: int = 0) -> dict[str, np.ndarray]:
    """Random columns for ``record`` that satisfy every domain."""
    rng = np.random.default_rng(seed)
    cols = {}
    for f in record.fields.values():
        shape = (n, *f.shape)
        kind, dom = f.dtype.kind, f.domain
        if kind == "b":
            a = rng.random(shape) < 0.5
        elif kind in "iu":
            if isinstance(dom, fl.Index):
                lo, hi = 0, dom.bound(dict(record.dims)) - 1
            elif isinstance(dom, fl.Range):
                lo, hi = dom.lo, dom.hi
            else:
                info = np.iinfo(f.dtype)
                lo, hi = int(info.min), int(info.max)
            a = rng.integers(lo, hi, size=shape, endpoint=True)
        elif kind == "f":
            a = rng.random(shape) if isinstance(dom, fl.Range) else rng.standard_normal(shape) * 99
        else:
            a = rng.standard_normal(shape) + 1j * rng.standard_normal(shape)
        cols[f.name] = a.astype(f.dtype)
    return cols


def items(cols: dict[str, np.ndarray], form: str = "dict"):
    """The rows of ``cols`` as a generator of items (dicts, tuples or bare values)."""
    n = len(next(iter(cols.values())))
    for i in range(n):
        if form == "dict":
            yield {k: v[i] for k, v in cols.items()}
        elif form == "tuple":
            yield tuple(v[i] for v in cols.values())
        else:
            (v,) = cols.values()
            yield v[i]


def parse(data: bytes) -> tuple[tuple, dict]:
    """The preamble's fields and the header's JSON of an .flr's bytes."""
    pre = PRE.unpack(data[:60])
    return pre, json.loads(data[pre[3] : pre[3] + pre[4]])


def seal(header: dict | bytes, body: bytes, rows: int, data_offset: int, **fields: int) -> bytes:
    """A file with the given header at 64 and ``body`` at ``data_offset``, every length and
    checksum right (unless given in ``fields``: version, flags, h_off, h_len, f_len, h_crc)."""
    h = (
        header
        if isinstance(header, bytes)
        else json.dumps(header, separators=(",", ":"), sort_keys=True).encode()
    )
    assert data_offset >= 64 + len(h)
    rest = h + b"\0" * (data_offset - 64 - len(h)) + body
    pre = PRE.pack(
        MAGIC,
        fields.get("version", 1),
        fields.get("flags", 0),
        fields.get("h_off", 64),
        fields.get("h_len", len(h)),
        rows,
        data_offset,
        fields.get("f_len", 64 + len(rest)),
        fields.get("h_crc", zlib.crc32(h)),
    )
    return pre + struct.pack("<I", zlib.crc32(pre)) + rest


def relocated(data: bytes, start: int = 8192) -> tuple[dict, bytes, int]:
    """The header of ``data`` with its columns moved to ``start``, and the moved body."""
    pre, doc = parse(data)
    shift = start - pre[6]
    for c in doc["columns"]:
        c["offset"] += shift
    return doc, data[pre[6] :], start


def open_error(path) -> fl.FormatError:
    """The FormatError that opening (then verifying) ``path`` raises."""
    with pytest.raises(fl.FormatError) as info, fl.recfile.open(path) as f:
        f.verify()
    err = info.value
    assert err.path == os.fspath(path) and os.fspath(path) in str(err)
    assert isinstance(err.offset, int) and err.offset >= 0
    return err


@pytest.fixture
def image_file(tmp_path):
    """A 5-row Image file, its bytes and columns."""
    cols = sample(Image, 5, seed=3)
    path = tmp_path / "image.flr"
    fl.recfile.write(path, Image, cols)
    return path, path.read_bytes(), cols


# -- round trips ----------------------------------------------------------------------------


@pytest.mark.parametrize("record", RECORDS, ids=lambda r: r.__name__)
def test_round_trips_rebuild_the_record_and_every_value(tmp_path, record):
    cols = sample(record, 50, seed=1)
    path = tmp_path / "rt.flr"
    assert fl.recfile.write(path, record, cols) == 50
    with fl.recfile.open(path) as f:
        rec = f.record
        assert rec.schema() == record.schema()
        assert rec.__name__ == record.__name__
        assert rec.__doc__ == record.__doc__
        assert dict(rec.dims) == dict(record.dims)
        assert [(g.name, g.doc, g.dims, g.shape, g.domain) for g in rec.fields.values()] == [
            (g.name, g.doc, g.dims, g.shape, g.domain) for g in record.fields.values()
        ]
        assert rec.same_schema(record) and record.same_schema(rec)
        assert len(f) == 50
        assert list(f.columns) == list(record.fields)
        for name, col in f.columns.items():
            assert col.shape == (50, *record.fields[name].shape)
            assert np.array_equal(col, cols[name])
        idx = np.array([49, 0, 7, 7, 31])
        batch = f.getitems(idx)
        for name in record.fields:
            assert np.array_equal(batch[name], cols[name][idx])
            assert np.array_equal(f[13][name], cols[name][13])
        f.verify()


def test_the_layout_is_the_documented_one_byte_for_byte(image_file):
    _, data, cols = image_file
    pre, doc = parse(data)
    magic, version, flags, h_off, h_len, rows, d_off, f_len, h_crc = pre
    assert (magic, version, flags, h_off, rows, f_len) == (MAGIC, 1, 0, 64, 5, len(data))
    header = data[64 : 64 + h_len]
    assert zlib.crc32(header) == h_crc
    assert struct.unpack("<I", data[60:64])[0] == zlib.crc32(data[:60])
    assert json.dumps(doc, separators=(",", ":"), sort_keys=True).encode() == header
    assert (doc["format"], doc["version"], doc["rows"]) == ("feedline.recfile", 1, 5)
    assert doc["record"] == Image.schema()
    assert [c["field"] for c in doc["columns"]] == list(Image.fields)
    assert d_off == doc["columns"][0]["offset"] >= 64 + h_len
    end = 64 + h_len
    for c in doc["columns"]:
        f = Image.fields[c["field"]]
        want = np.ascontiguousarray(cols[f.name], dtype=f.dtype.newbyteorder("<")).tobytes()
        assert c["kind"] == "fixed"
        assert c["offset"] % 64 == 0 and c["offset"] >= end
        assert data[end : c["offset"]] == b"\0" * (c["offset"] - end)  # the gaps are zeros
        assert c["length"] == len(want) == 5 * f.dtype.itemsize * int(np.prod(f.shape))
        assert data[c["offset"] : c["offset"] + c["length"]] == want
        assert c["crc32"] == zlib.crc32(want)
        end = c["offset"] + c["length"]
    assert end == len(data)


def test_a_big_endian_field_is_stored_little_endian(tmp_path):
    cols = sample(Waves, 4)
    path = tmp_path / "waves.flr"
    fl.recfile.write(path, Waves, cols)
    data = path.read_bytes()
    _, doc = parse(data)
    col = doc["columns"][1]
    assert data[col["offset"] : col["offset"] + 32] == cols["scale"].astype("<f8").tobytes()
    with fl.recfile.open(path) as f:
        assert np.array_equal(f.columns["scale"], cols["scale"])


def test_columns_are_read_only_memory_maps_shared_by_the_handles(image_file):
    path, _, _ = image_file
    with fl.recfile.open(path) as f:
        for name in ("img", "label", "mask", "patch"):
            col = f.columns[name]
            assert not col.flags.writeable
            with pytest.raises(ValueError):
                col[0] = 0
            base, mapped = col, False
            while base is not None:
                mapped |= isinstance(base, mmap.mmap)
                base = base.obj if isinstance(base, memoryview) else getattr(base, "base", None)
            assert mapped, f"column {name} is not a view of the file's memory map"
        g = f.share()
        assert np.shares_memory(f.columns["img"], g.columns["img"])
        assert not np.shares_memory(f.columns["img"], f.getitems([0, 1])["img"])  # a gather copies
        g.close()


def test_a_share_takes_the_parse_and_lives_on_its_own(image_file, monkeypatch):
    """A share of a local file takes the header already read and checked through the
    same descriptor (a loader shares every shard: reading each header again cost most
    of a loader's start over many shards); each handle then closes on its own."""
    path, _, cols = image_file
    f = fl.recfile.open(path)
    calls = []
    real = fl.recfile.RecFile._parse
    monkeypatch.setattr(fl.recfile.RecFile, "_parse", lambda self: calls.append(1) or real(self))
    g = f.share()
    assert calls == []  # not parsed again
    assert g.record is f.record and len(g) == len(f) and g.path == f.path
    for name in cols:
        assert g.columns[name] is not None
    f.close()  # the original gone: the share reads on, through its own share
    assert f.closed and not g.closed
    for name, want in cols.items():
        got = g.getitems([3, 0])[name]
        want = want[[3, 0]] if isinstance(want, np.ndarray) else [want[3], want[0]]
        assert [np.array_equal(a, b) for a, b in zip(got, want)] == [True, True]
    h = g.share()
    g.close()
    assert np.array_equal(h.getitems([1])["label"], cols["label"][[1]])
    h.close()
    with pytest.raises(ValueError, match="closed"):
        f.share()


def test_a_pickled_handle_reopens_the_file(image_file):
    path, _, cols = image_file
    with fl.recfile.open(path) as f:
        g = pickle.loads(pickle.dumps(f))
    with g:
        assert g.record.schema() == Image.schema()
        assert np.array_equal(g.getitems([4, 2])["img"], cols["img"][[4, 2]])
        assert repr(g).startswith("RecFile(")


@pytest.mark.parametrize("bad", [-1, 5, 6, 10**6])
def test_rows_out_of_range_are_an_index_error(image_file, bad):
    path, _, _ = image_file
    with fl.recfile.open(path) as f:
        with pytest.raises(IndexError):
            f[bad]
        with pytest.raises(IndexError):
            f.getitems([0, bad])


def test_reading_through_a_closed_handle_is_a_value_error(image_file):
    path, _, _ = image_file
    f = fl.recfile.open(path)
    f.close()
    with pytest.raises(ValueError):
        f.getitems([0])


# -- streaming -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "record, form, n",
    [
        (Scalars, "dict", 10_000),  # crosses the writer's chunks
        (Scalars, "tuple", 3),
        (Image, "dict", 37),
        (Image, "tuple", 1),
        (Waves, "tuple", 20),
        (Vec, "bare", 4097),
        (Vec, "dict", 5),
    ],
    ids=lambda v: getattr(v, "__name__", str(v)),
)
def test_a_streamed_write_equals_the_column_write_byte_for_byte(tmp_path, record, form, n):
    cols = sample(record, n, seed=n)
    fl.recfile.write(tmp_path / "cols.flr", record, cols)
    assert fl.recfile.write(tmp_path / "stream.flr", record, items(cols, form)) == n
    assert (tmp_path / "stream.flr").read_bytes() == (tmp_path / "cols.flr").read_bytes()
    assert sorted(os.listdir(tmp_path)) == ["cols.flr", "stream.flr"]  # no spools left


def test_a_chunked_write_equals_the_column_write_byte_for_byte(tmp_path):
    cols = sample(Image, 1000, seed=2)
    chunks = ({k: v[a : a + 300] for k, v in cols.items()} for a in range(0, 1000, 300))
    fl.recfile.write(tmp_path / "cols.flr", Image, cols)
    assert fl.recfile.write_chunks(tmp_path / "chunks.flr", Image, chunks) == 1000
    assert (tmp_path / "chunks.flr").read_bytes() == (tmp_path / "cols.flr").read_bytes()


def test_streaming_50k_items_does_not_hold_them_in_memory(tmp_path):
    class Wide(fl.Record, dims={"D": 512}):
        x = fl.field("D", "float32")
        y = fl.field((), "int64")

    n = 50_000
    pool = np.random.default_rng(0).random((1000, 512), dtype=np.float32)

    def gen():  # items are views of a small pool: the data are the writer's to hold, or not
        for i in range(n):
            yield {"x": pool[i % 1000], "y": i}

    path = tmp_path / "wide.flr"
    tracemalloc.start()
    try:
        assert fl.recfile.write(path, Wide, gen()) == n
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    size = n * (512 * 4 + 8)
    assert os.path.getsize(path) > size
    assert peak < size / 4, f"peak {peak / 1e6:.1f} MB for {size / 1e6:.1f} MB of data"
    with fl.recfile.open(path) as f:
        assert np.array_equal(f[4321]["x"], pool[321]) and f[4321]["y"] == 4321


@pytest.mark.parametrize("record", RECORDS, ids=lambda r: r.__name__)
def test_empty_files_from_a_stream_work(tmp_path, record):
    assert fl.recfile.write(tmp_path / "stream.flr", record, iter(())) == 0
    with fl.recfile.open(tmp_path / "stream.flr") as f:
        assert len(f) == 0
        assert f.record.schema() == record.schema()
        f.verify()
        for name, g in record.fields.items():
            assert f.columns[name].shape == (0, *g.shape)
            assert f.getitems([])[name].shape == (0, *g.shape)
        with pytest.raises(IndexError):
            f[0]
        assert list(fl.Loader(f, 8, seed=1)) == []


@pytest.mark.parametrize("record", [Scalars, Image, Waves, Vec], ids=lambda r: r.__name__)
def test_empty_files_from_columns_equal_empty_streams(tmp_path, record):
    assert fl.recfile.write(tmp_path / "cols.flr", record, sample(record, 0)) == 0
    fl.recfile.write(tmp_path / "stream.flr", record, iter(()))
    assert (tmp_path / "cols.flr").read_bytes() == (tmp_path / "stream.flr").read_bytes()


class Hollow(fl.Record, dims={"N": 0}):
    """A record with a zero-size field."""

    x = fl.field(3, "float32")
    nothing = fl.field(("N", 2), "float32")


@pytest.mark.parametrize("how", ["columns", "stream"])
def test_a_zero_size_field_round_trips(tmp_path, how):
    cols = sample(Hollow, 4)
    data = cols if how == "columns" else items(cols)
    assert fl.recfile.write(tmp_path / "hollow.flr", Hollow, data) == 4
    with fl.recfile.open(tmp_path / "hollow.flr") as f:
        f.verify()
        assert f.columns["nothing"].shape == (4, 0, 2)
        assert np.array_equal(f.columns["x"], cols["x"])


@pytest.mark.parametrize("data", [{}, "stream"])
def test_a_record_without_fields_is_refused_or_round_trips(tmp_path, data):
    class Nothing(fl.Record):
        """No fields."""

    path = tmp_path / "nothing.flr"
    try:
        n = fl.recfile.write(path, Nothing, iter([{}, {}]) if data == "stream" else data)
    except (TypeError, fl.RecordError):
        return
    with fl.recfile.open(path) as f:
        assert len(f) == n == (2 if data == "stream" else 0)


# -- value checks --------------------------------------------------------------------------


def test_an_out_of_domain_column_is_refused_and_nothing_is_written(tmp_path):
    cols = sample(Image, 20)
    cols["label"][7] = 10  # Index("C") with C = 10
    with pytest.raises(fl.DomainError, match="label"):
        fl.recfile.write(tmp_path / "bad.flr", Image, cols)
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("at", [0, 5000])  # in the first chunk, or after a chunk was spooled
def test_an_out_of_domain_item_in_a_stream_is_refused_and_nothing_is_left(tmp_path, at):
    old = tmp_path / "data.flr"
    fl.recfile.write(old, Scalars, sample(Scalars, 3))
    before = old.read_bytes()
    cols = sample(Scalars, 6000)
    cols["prob"][at] = np.nan  # Range(0, 1) refuses NaN
    with pytest.raises(fl.DomainError, match="prob"):
        fl.recfile.write(old, Scalars, items(cols))
    assert os.listdir(tmp_path) == ["data.flr"]
    assert old.read_bytes() == before


def test_without_value_checks_the_value_is_written_and_a_checking_loader_catches_it(tmp_path):
    cols = sample(Image, 20)
    cols["label"][7] = 10
    path = tmp_path / "unchecked.flr"
    fl.recfile.write(path, Image, cols, check_values=False)
    with fl.recfile.open(path) as f:
        assert f[7]["label"] == 10
        list(fl.Loader(f, 8))  # not checked by default
        with pytest.raises(fl.DomainError):
            list(fl.Loader(f, 8, check_values=True))


@pytest.mark.parametrize(
    "bad",
    [
        {"img": np.zeros((3, 4, 4))},  # wrong shape
        {"label": np.zeros(3, dtype=object)},  # not numbers
        {"mask": None},  # missing field
    ],
)
def test_malformed_columns_are_refused_and_nothing_is_written(tmp_path, bad):
    cols = sample(Image, 3)
    cols.update(bad)
    cols = {k: v for k, v in cols.items() if v is not None}
    with pytest.raises((fl.ShapeError, ValueError)):
        fl.recfile.write(tmp_path / "bad.flr", Image, cols)
    assert os.listdir(tmp_path) == []


def test_the_record_must_be_a_record_class(tmp_path):
    with pytest.raises(TypeError):
        fl.recfile.write(tmp_path / "bad.flr", {"x": 1}, {"x": np.zeros(3)})


# -- verify --------------------------------------------------------------------------------


def test_verify_names_the_column_of_each_flipped_byte(image_file):
    path, data, _ = image_file
    _, doc = parse(data)
    with fl.recfile.open(path) as f:
        f.verify()
    for c in doc["columns"]:
        if not c["length"]:
            continue
        for pos in (c["offset"], c["offset"] + c["length"] // 2, c["offset"] + c["length"] - 1):
            bad = bytearray(data)
            bad[pos] ^= 0x01
            path.write_bytes(bytes(bad))
            # Opening does not read the columns: verify finds the flip.
            with fl.recfile.open(path) as f, pytest.raises(fl.FormatError) as info:
                f.verify()
            assert f"`{c['field']}`" in str(info.value)
            assert info.value.offset == c["offset"] and info.value.path == os.fspath(path)
    path.write_bytes(data)
    with fl.recfile.open(path) as f:
        f.verify()


# -- damage: every corruption is a FormatError at open ---------------------------------------


def test_every_byte_of_the_preamble_flipped_is_a_format_error(image_file):
    path, data, _ = image_file
    for pos in range(64):
        bad = bytearray(data)
        bad[pos] ^= 0xFF
        path.write_bytes(bytes(bad))
        err = open_error(path)
        assert err.offset == (0 if pos < 8 else 60)  # the magic, else the preamble checksum


def resealed_cases():
    """(field, value) for each preamble field: wrong values with the preamble CRC redone."""
    for name, index, _, size in FIELDS:
        top = U32 if size == 4 else U64
        values = {0, 1, 2, 63, 64, 65, 128, top, top - 1, 2**31}
        if name == "magic":
            values = {b"\x89FLR\r\n\x1a\0", b"\x89FLR\n\x1a\n\0", b"NDF1\0\0\0\0", b"\0" * 8}
        right = {"version": 1, "flags": 0, "header offset": 64}.get(name)
        for v in sorted(values - {right}, key=repr):
            yield pytest.param(index, v, id=f"{name}={v!r}")


@pytest.mark.parametrize("index, value", list(resealed_cases()))
def test_each_preamble_field_resealed_with_a_wrong_value_is_a_format_error(
    image_file, index, value
):
    path, data, _ = image_file
    fields = list(PRE.unpack(data[:60]))
    assert fields[index] != value
    fields[index] = value
    pre = PRE.pack(*fields)
    path.write_bytes(pre + struct.pack("<I", zlib.crc32(pre)) + data[64:])
    err = open_error(path)
    offsets = {0: 0, 1: 8, 2: 12, 7: 48}
    if index == 1 and value == 2:  # a version this reader knows: the header's 1 disagrees
        offsets[1] = 64
    if index in offsets:
        assert err.offset == offsets[index]


def test_every_byte_of_the_header_flipped_is_a_format_error(image_file):
    path, data, _ = image_file
    h_len = PRE.unpack(data[:60])[4]
    for pos in range(64, 64 + h_len):
        bad = bytearray(data)
        bad[pos] ^= 0x20
        path.write_bytes(bytes(bad))
        assert open_error(path).offset == 64


def test_a_resealed_unchanged_header_with_moved_columns_opens(image_file):
    path, data, cols = image_file
    doc, body, start = relocated(data)
    path.write_bytes(seal(doc, body, 5, start))
    with fl.recfile.open(path) as f:
        f.verify()
        assert np.array_equal(f.columns["img"], cols["img"])


def _set(*keys_and_value):
    *keys, value = keys_and_value

    def mutate(doc):
        target = doc
        for k in keys[:-1]:
            target = target[k]
        if value is _DELETE:
            del target[keys[-1]]
        else:
            target[keys[-1]] = value
        return doc

    return mutate


_DELETE = object()


def _raw(data: bytes):
    return lambda doc: data


HEADER_DAMAGE = {
    "not utf-8": _raw(b'{"format":"\xff"}'),
    "not json": _raw(b'{"format": "feedline.recfile"'),
    "a json list": _raw(b"[]"),
    "json null": _raw(b"null"),
    "empty": _raw(b""),
    "a nul byte": _raw(b"\0"),
    "no format": _set("format", _DELETE),
    "another format": _set("format", "feedline.kvrec"),
    "version 2": _set("version", 2),
    "version as text": _set("version", "1"),
    "rows disagree": _set("rows", 6),
    "rows missing": _set("rows", _DELETE),
    "rows as text": _set("rows", "5"),
    "no record": _set("record", _DELETE),
    "record a list": _set("record", []),
    "record name not an identifier": _set("record", "name", "an image"),
    "fields not a list": _set("record", "fields", 5),
    "field without dtype": _set("record", "fields", 0, "dtype", _DELETE),
    "object dtype": _set("record", "fields", 0, "dtype", "|O"),
    "string dtype": _set("record", "fields", 0, "dtype", "<U4"),
    "datetime dtype": _set("record", "fields", 0, "dtype", "<M8[s]"),
    "unknown dtype": _set("record", "fields", 0, "dtype", "float128x"),
    "unknown dim": _set("record", "fields", 0, "dims", ["Q", "W"]),
    "negative dim": _set("record", "dims", "H", -4),
    "dim not an int": _set("record", "dims", "H", "four"),
    "unknown domain": _set("record", "fields", 1, "domain", {"between": [0, 1]}),
    "index domain on floats": _set("record", "fields", 0, "domain", {"index": 3}),
    "bad range": _set("record", "fields", 0, "domain", {"range": [2, 1]}),
    "two fields of one name": _set("record", "fields", 1, "name", "img"),
    "field name with an underscore": _set("record", "fields", 0, "name", "_img"),
    "dtype changed": _set("record", "fields", 0, "dtype", "<f8"),
    "shape changed": _set("record", "dims", "H", 5),
    "no columns": _set("columns", _DELETE),
    "columns a dict": _set("columns", {}),
    "a column missing": lambda doc: doc["columns"].pop() and doc,
    "a column too many": lambda doc: doc["columns"].append(dict(doc["columns"][-1])) or doc,
    "columns swapped": lambda doc: doc["columns"].insert(0, doc["columns"].pop(1)) or doc,
    "column of another field": _set("columns", 1, "field", "img"),
    "ragged column": _set("columns", 0, "kind", "ragged"),
    "column offset misaligned": _set("columns", 1, "offset", None),  # filled in below
    "column offset negative": _set("columns", 1, "offset", -64),
    "column offset a float": _set("columns", 1, "offset", 8256.0),
    "column offset in the header": _set("columns", 0, "offset", 64),
    "column offset past the end": _set("columns", 3, "offset", 2**40),
    "column offset huge": _set("columns", 3, "offset", 2**64 + 64),
    "columns overlap": _set("columns", 1, "offset", None),  # filled in below
    "column length wrong": _set("columns", 0, "length", 16),
    "column length huge": _set("columns", 0, "length", 2**70),
    "column crc negative": _set("columns", 0, "crc32", -1),
    "column crc text": _set("columns", 0, "crc32", "0"),
    "column not an object": _set("columns", 2, 5),
}


@pytest.mark.parametrize("case", list(HEADER_DAMAGE))
def test_each_resealed_header_corruption_is_a_format_error(image_file, case):
    path, data, _ = image_file
    doc, body, start = relocated(data)
    if case == "column offset misaligned":
        doc["columns"][1]["offset"] += 8
    elif case == "columns overlap":
        doc["columns"][1]["offset"] = doc["columns"][0]["offset"]
    else:
        doc = HEADER_DAMAGE[case](doc)
    path.write_bytes(seal(doc, body, 5, start))
    assert open_error(path).offset in (40, 64)


def test_a_header_lying_about_its_length_is_a_format_error(image_file):
    path, data, _ = image_file
    doc, body, start = relocated(data)
    h = json.dumps(doc, separators=(",", ":"), sort_keys=True).encode()
    for h_len in (len(h) - 1, len(h) + 1, start - 64, start, 2**40, U64):
        path.write_bytes(
            seal(
                doc,
                body,
                5,
                start,
                h_len=h_len,
                h_crc=zlib.crc32((h + b"\0" * start)[: min(h_len, start)]),
            )
        )
        open_error(path)


CRAFTED_HEADERS = {
    "first column not an object (AttributeError)": lambda doc: _set("columns", 0, 5)(doc),
    "header nested 100000 deep (RecursionError)": _raw(b"[" * 100_000 + b"]" * 100_000),
    "dims whose product wraps int64 to 0 (ValueError)": lambda doc: _set(
        "record", "fields", 3, "dims", [2**32, 2**32]
    )(_set("columns", 3, "length", 0)(doc)),
    "a dim past int64 (OverflowError)": lambda doc: _set("record", "fields", 3, "dims", [2**70])(
        doc
    ),
    "a zero-size field with 2**64-1 rows (ValueError)": "rows",
    "a field named like a Record method (opens a broken record)": lambda doc: _set(
        "record", "fields", 0, "name", "schema"
    )(_set("columns", 0, "field", "schema")(doc)),
}


@pytest.mark.parametrize("case", list(CRAFTED_HEADERS))
def test_a_crafted_header_is_a_format_error(tmp_path, image_file, case):
    path, data, _ = image_file
    doc, body, start = relocated(data)
    rows = 5
    if CRAFTED_HEADERS[case] == "rows":
        doc = {
            "format": "feedline.recfile",
            "version": 1,
            "rows": U64,
            "record": {
                "name": "R",
                "doc": None,
                "dims": {},
                "fields": [
                    {
                        "name": "x",
                        "dims": [0],
                        "shape": [0],
                        "dtype": "<f4",
                        "domain": None,
                        "doc": None,
                    }
                ],
            },
            "columns": [{"field": "x", "kind": "fixed", "offset": start, "length": 0, "crc32": 0}],
        }
        rows, body = U64, b""
    else:
        doc = CRAFTED_HEADERS[case](doc)
    if isinstance(doc, bytes):
        start, body = -(-(64 + len(doc)) // 64) * 64, b""
    path.write_bytes(seal(doc, body, rows, start))
    with pytest.raises(fl.FormatError), fl.recfile.open(path) as f:
        f.record.schema()
        f.record.check_columns(f.getitems([0]))


def one_field_file(tmp_path, rows: int, body: bytes, **entry) -> os.PathLike:
    """A file of one field `x` (a float32 scalar unless ``entry`` says otherwise) whose
    column is ``body``: every length and checksum right."""
    f = {"name": "x", "dims": [], "shape": [], "dtype": "<f4", "domain": None, "doc": None, **entry}
    doc = {
        "format": "feedline.recfile",
        "version": 1,
        "rows": rows,
        "record": {"name": "R", "doc": None, "dims": {}, "fields": [f]},
        "columns": [
            {
                "field": f["name"],
                "kind": "fixed",
                "offset": 1024,
                "length": len(body),
                "crc32": zlib.crc32(body),
            }
        ],
    }
    path = tmp_path / "one.flr"
    path.write_bytes(seal(doc, body, rows, 1024))
    return path


def test_a_crafted_one_field_file_opens_when_its_header_is_consistent(tmp_path):
    path = one_field_file(tmp_path, 1, np.arange(2, dtype="<f4").tobytes(), dims=[2], shape=[2])
    with fl.recfile.open(path) as f:
        assert f.columns["x"].tolist() == [[0.0, 1.0]]


@pytest.mark.parametrize("dtype", [">f4", ">i4", ">u8"])
def test_a_big_endian_dtype_in_the_header_is_refused(tmp_path, dtype):
    path = one_field_file(tmp_path, 1, bytes(np.dtype(dtype).itemsize), dtype=dtype)
    with pytest.raises(fl.FormatError, match=r"big-endian dtype .* little-endian") as info:
        fl.recfile.open(path)
    assert info.value.offset == 64


# Each column holds what int() of the bad dim would make of it, so only the dims object.
@pytest.mark.parametrize(
    ("dims", "body"),
    [
        ([float("inf")], b""),  # was an OverflowError from int(inf)
        ([float("-inf")], b""),
        ([float("nan")], b""),
        ([2.7], bytes(8)),  # was read as shape (2,)
        ([2.0], bytes(8)),
        ([True], bytes(4)),  # was read as shape (1,)
        ([None], b""),
        ([[2]], bytes(8)),
    ],
    ids=repr,
)
def test_a_dim_that_is_not_a_name_or_an_int_is_a_format_error_at_the_header(tmp_path, dims, body):
    path = one_field_file(tmp_path, 1, body, dims=dims, shape=dims)
    err = open_error(path)
    assert err.offset == 64 and "dims" in str(err)


@pytest.mark.parametrize("shape", [[3], [2, 1], [], [2.0], [True, 2], "2", None], ids=repr)
def test_a_stored_shape_that_is_not_the_one_the_dims_resolve_to_is_a_format_error(tmp_path, shape):
    path = one_field_file(tmp_path, 1, bytes(8), dims=[2], shape=shape)
    err = open_error(path)
    assert err.offset == 64 and "stored shape" in str(err)


def test_a_stored_shape_is_checked_against_named_dims_too(image_file):
    path, data, _ = image_file
    doc, body, start = relocated(data)
    assert doc["record"]["fields"][0]["dims"] == ["H", "W"]
    doc["record"]["fields"][0]["shape"] = [3, 4]  # the same bytes a row, transposed
    path.write_bytes(seal(doc, body, 5, start))
    err = open_error(path)
    assert err.offset == 64 and "[3, 4] is not [4, 3]" in str(err)


@pytest.mark.parametrize(
    ("rows", "dtype", "dims"),
    [
        (2**62 - 1, "<f4", [0]),  # was numpy's ValueError "array is too big"
        (2**61, "<f8", [0, 1]),
        (2**40, "<f4", [3, 0, 2**20]),
    ],
)
def test_a_zero_size_field_with_more_rows_than_an_array_can_index_is_a_format_error(
    tmp_path, rows, dtype, dims
):
    path = one_field_file(tmp_path, rows, b"", dims=dims, shape=dims, dtype=dtype)
    err = open_error(path)
    assert err.offset == 32 and f"{rows} rows" in str(err)


def test_a_zero_size_field_of_a_shape_no_array_can_index_is_a_format_error(tmp_path):
    path = one_field_file(tmp_path, 1, b"", dims=[0, 2**62], shape=[0, 2**62])
    assert open_error(path).offset == 64


def test_a_zero_size_field_may_have_many_rows(tmp_path):
    path = one_field_file(tmp_path, 2**40, b"", dims=[0, 3], shape=[0, 3])
    with fl.recfile.open(path) as f:
        assert f.columns["x"].shape == (2**40, 0, 3) and len(f) == 2**40


@pytest.mark.parametrize("name", ["1 bad", "", "a b", "a-b", "x.y"])
def test_a_field_name_that_is_not_an_identifier_is_refused_by_the_writer(tmp_path, name):
    # a field is a batch attribute: the writer refuses what the reader would refuse (a
    # run-time record of such a name is refused already where it is made)
    with pytest.raises(fl.RecordError, match=r"identifier"):
        make_record("Odd", {name: ((2,), np.float32)})
    record = make_record("Odd", {"ok": ((2,), np.float32)})
    record.fields = {name: record.fields["ok"]}  # a record changed behind the checks
    with pytest.raises(fl.RecordError, match=r"identifier"):
        fl.recfile.write(tmp_path / "odd.flr", record, {name: np.ones((3, 2))})
    with pytest.raises(fl.RecordError, match=r"identifier"):
        fl.recfile.write(tmp_path / "odd.flr", record, iter([{name: np.ones(2)}]))
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("name", ["", "a b", "1x", "a-b", "\u00e9 t"])
def test_a_field_name_that_is_not_an_identifier_in_a_header_is_a_format_error(tmp_path, name):
    path = one_field_file(tmp_path, 1, bytes(4), name=name)
    err = open_error(path)
    assert err.offset == 64 and "identifier" in str(err) and err.path == str(path)


@pytest.mark.parametrize(
    ("key", "value"), [("version", 1.0), ("version", True), ("rows", 1.0), ("rows", True)], ids=repr
)
def test_a_header_version_or_rows_that_is_not_a_json_integer_is_a_format_error(
    tmp_path, key, value
):
    path = one_field_file(tmp_path, 1, bytes(4))
    doc, body, start = relocated(path.read_bytes(), 1024)
    doc[key] = value
    path.write_bytes(seal(doc, body, 1, start))
    err = open_error(path)
    assert err.offset == 64 and f"{key}" in str(err)


@pytest.mark.parametrize("where", ["top", "record", "field", "column"])
def test_unknown_keys_in_a_header_are_a_format_error(tmp_path, where):
    path = one_field_file(tmp_path, 1, bytes(4))
    doc, body, start = relocated(path.read_bytes(), 1024)
    target = {
        "top": doc,
        "record": doc["record"],
        "field": doc["record"]["fields"][0],
        "column": doc["columns"][0],
    }[where]
    target["compression"] = "zstd"  # a key this reader would silently ignore
    path.write_bytes(seal(doc, body, 1, start))
    err = open_error(path)
    assert err.offset == 64 and "compression" in str(err)


@pytest.mark.parametrize("ndims", [63, 64, 65, 100])
def test_a_field_of_more_dims_than_a_column_can_have_is_a_format_error(tmp_path, ndims):
    # a column has the rows axis too: numpy's 64 dims leave a field 63 (numpy's raw
    # ValueError "maximum supported dimension" before)
    dims = [1] * ndims
    path = one_field_file(tmp_path, 1, bytes(4), dims=dims, shape=dims)
    if ndims <= 63:
        with fl.recfile.open(path) as f:
            assert f.getitems([0])["x"].shape == (1, *dims)
        return
    err = open_error(path)
    assert err.offset == 64 and f"{ndims} dims" in str(err) and err.path == str(path)


def test_a_file_truncated_at_any_length_is_a_format_error(image_file):
    path, data, _ = image_file
    for size in range(len(data)):
        path.write_bytes(data[:size])
        open_error(path)


@pytest.mark.parametrize("extra", [b"\0", b"\0" * 63, b"\0" * 64, b"x" * 4096])
def test_extra_bytes_appended_are_a_format_error(image_file, extra):
    path, data, _ = image_file
    path.write_bytes(data + extra)
    assert open_error(path).offset == 48


def test_two_files_concatenated_are_a_format_error(image_file):
    path, data, _ = image_file
    path.write_bytes(data + data)
    open_error(path)


# -- as a loader source --------------------------------------------------------------------


@pytest.mark.parametrize(
    "seed, options", [(1, {}), (None, {}), (5, {"drop_last": True}), (2, {"shard": (0, 2)})]
)
def test_a_loader_over_an_flr_equals_one_over_the_same_arrays(tmp_path, seed, options):
    cols = sample(Image, 1000, seed=9)
    path = tmp_path / "loader.flr"
    fl.recfile.write(path, Image, cols)
    with fl.recfile.open(path) as f:
        got = list(fl.Loader(f, 64, seed=seed, **options))
        typed = list(fl.Loader(fl.Dataset(f.record, f), 64, seed=seed, **options))
        want = list(fl.Loader(fl.Dataset.from_arrays(**cols), 64, seed=seed, **options))
        assert len(got) == len(typed) == len(want) > 0
        for g, t, w in zip(got, typed, want):
            assert np.array_equal(g.meta.record_indices, w.meta.record_indices)
            for name in Image.fields:
                assert np.array_equal(g[name], w[name]) and np.array_equal(t[name], w[name])
                assert g[name].dtype == Image.fields[name].dtype


# -- fuzz: damaged files open (and verify) or raise a FormatError, nothing else -------------

FUZZ = settings(
    max_examples=200,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def open_and_verify_or_format_error(path) -> None:
    t0 = time.perf_counter()
    try:
        with fl.recfile.open(path) as f:
            f.verify()
            if len(f):
                f.getitems([0, len(f) - 1])
    except fl.FormatError as e:
        assert e.path == os.fspath(path) and e.offset is not None
    assert time.perf_counter() - t0 < LIVENESS_S  # a hang would fail, not time


@FUZZ
@given(data=st.data())
def test_fuzz_mutated_truncated_or_extended_flr_files(image_file, data):
    path, base, _ = image_file
    buf = bytearray(base)
    for _ in range(data.draw(st.integers(0, 4), "flips")):
        pos = data.draw(st.integers(0, len(buf) - 1) | st.integers(0, 63), "pos")
        buf[pos] = data.draw(st.integers(0, 255), "byte")
    kind = data.draw(st.sampled_from(["none", "truncate", "append"]), "kind")
    if kind == "truncate":
        buf = buf[: data.draw(st.integers(0, len(buf)), "size")]
    elif kind == "append":
        buf += data.draw(st.binary(min_size=1, max_size=128), "tail")
    path.write_bytes(bytes(buf))
    open_and_verify_or_format_error(path)


@FUZZ
@given(
    changes=st.lists(
        st.tuples(
            st.integers(1, 8),
            st.sampled_from([0, 1, 2, 63, 64, 65, 2**31, 2**32 - 1, 2**63, 2**64 - 1])
            | st.integers(0, 2**64 - 1),
        ),
        min_size=1,
        max_size=3,
    )
)
def test_fuzz_resealed_preamble_field_values(image_file, changes):
    path, base, _ = image_file
    fields = list(PRE.unpack(base[:60]))
    for index, value in changes:
        fields[index] = value % (2**32 if FIELDS[index][3] == 4 else 2**64)
    pre = PRE.pack(*fields)
    path.write_bytes(pre + struct.pack("<I", zlib.crc32(pre)) + base[64:])
    open_and_verify_or_format_error(path)


# -- the writes that reach the kernel ---------------------------------------------------


class _Recording(__import__("io").RawIOBase):
    """A raw file that records each write's (offset, length) and passes it on."""

    def __init__(self, raw, writes):
        self.inner, self.writes = raw, writes

    def writable(self):
        return True

    def write(self, b):
        self.writes.append((self.inner.tell(), len(b)))
        return self.inner.write(b)

    def tell(self):
        return self.inner.tell()

    def seek(self, *a):
        return self.inner.seek(*a)

    def close(self):  # the atomic writer closes the real file
        pass


@pytest.mark.parametrize("streamed", [False, True])
def test_a_file_reaches_the_kernel_in_writes_on_2_mib_offsets(tmp_path, monkeypatch, streamed):
    """The page cache keeps a written file in folios no larger than the writes' alignment
    allows, and a memory map maps a 2 MiB folio as one huge page: every write after a
    section's first starts on a multiple of 2 MiB, and the first ends on one (the file's
    last write excepted). The file reads back the same."""
    import contextlib
    import io

    from feedline.formats import _flr_write

    writes: list[tuple[int, int]] = []
    real = _flr_write.atomic_write

    @contextlib.contextmanager
    def recording(path):
        with real(path) as f:
            f.flush()
            buf = io.BufferedWriter(_Recording(f.raw, writes))
            yield buf
            buf.flush()

    monkeypatch.setattr(_flr_write, "atomic_write", recording)

    class Wide(fl.Record):
        x = fl.field((1000,), "float32")  # 4,000 bytes a row: sections of 12 MB and 12 kB
        y = fl.field((3,), "int32")

    n = 3000
    x = np.arange(n * 1000, dtype=np.float32).reshape(n, 1000)
    y = np.arange(n * 3, dtype=np.int32).reshape(n, 3)
    path = str(tmp_path / "w.flr")
    data = ({"x": a, "y": b} for a, b in zip(x, y)) if streamed else {"x": x, "y": y}
    fl.recfile.write(path, Wide, data)
    fold = 2 << 20
    assert sum(k for _, k in writes) == os.path.getsize(path)
    assert max(k for _, k in writes) >= fold  # the large column went in large writes
    for at, k in writes[:-1]:
        assert at % fold == 0 or (at + k) % fold == 0, (at, k, writes)
    with fl.recfile.open(path) as f:
        got = f.getitems(np.arange(n))
        assert np.array_equal(got["x"], x) and np.array_equal(got["y"], y)
