""".flr version 2: ragged, blob and string columns: round trips, streaming, checks, damage."""

from __future__ import annotations

import doctest
import gc
import itertools
import json
import os
import pickle
import re
import struct
import time
import tracemalloc
import zlib
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import feedline as fl
from feedline._base import kernels
from feedline.formats import recfile

ROOT = Path(__file__).resolve().parents[2]

PRE = struct.Struct("<8sIIQQQQQI")
LIVENESS_S = 30.0  # a liveness bound for a fuzzed file's open and reads, not a timing


class Doc(fl.Record, dims={"T": None, "V": 1000}):
    """Tokens and tags of one length per example, a title and raw bytes."""

    tokens = fl.field("T", "int32", domain=fl.Index("V"))
    tags = fl.field("T", "int8")
    title = fl.field((), "str")
    raw = fl.field((), "bytes", max_bytes=40)
    score = fl.field((), "float32")


class Grid(fl.Record, dims={"H": fl.Varying(max=6), "W": None}):
    """Two varying axes, one of them twice; a varying axis that is not the first."""

    square = fl.field(("H", 3, "H"), "float32")
    wide = fl.field((2, "W"), "int16")
    plane = fl.field(("H", "W"), "uint8")


class Hollow(fl.Record, dims={"T": None}):
    """A varying axis beside a zero-size one: sizes cannot tell the lengths."""

    none = fl.field(("T", 0), "float64")
    also = fl.field("T", "bool")


RECORDS = [Doc, Grid, Hollow]


def doc_items(n: int, seed: int = 0, long: int = 12):
    rng = np.random.default_rng(seed)
    words = ["", "a", "héllo", "日本語", "emoji 🙂", "plain text"]
    for i in range(n):
        length = int(rng.integers(0, long + 1))
        yield {
            "tokens": rng.integers(0, 1000, length).astype(np.int32),
            "tags": rng.integers(-5, 5, length).astype(np.int8),
            "title": words[i % len(words)] * int(rng.integers(0, 3)),
            "raw": bytes(rng.integers(0, 256, int(rng.integers(0, 41))).astype(np.uint8)),
            "score": np.float32(rng.standard_normal()),
        }


def grid_items(n: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    for _ in range(n):
        h, w = int(rng.integers(0, 7)), int(rng.integers(0, 5))
        yield {
            "square": rng.standard_normal((h, 3, h)).astype(np.float32),
            "wide": rng.integers(-9, 9, (2, w)).astype(np.int16),
            "plane": rng.integers(0, 255, (h, w)).astype(np.uint8),
        }


def hollow_items(n: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    for _ in range(n):
        t = int(rng.integers(0, 9))
        yield {"none": np.zeros((t, 0)), "also": rng.random(t) < 0.5}


ITEMS = {Doc: doc_items, Grid: grid_items, Hollow: hollow_items}


def same(a, b) -> bool:
    if isinstance(b, (bytes, str)):
        return type(a) is type(b) and a == b
    b = np.asarray(b)
    return a.shape == b.shape and a.dtype == b.dtype and np.array_equal(a, b)


def as_columns(record, items):
    return {k: [it[k] for it in items] for k in record.fields}


def header(data: bytes) -> tuple[tuple, dict]:
    pre = PRE.unpack(data[:60])
    return pre, json.loads(data[pre[3] : pre[3] + pre[4]])


def sections(data: bytes) -> dict[str, dict]:
    """``field.section`` -> its header entry, for every ragged column."""
    _, doc = header(data)
    out = {}
    for c in doc["columns"]:
        for s in ("values", "offsets", "shapes"):
            if s in c:
                out[f"{c['field']}.{s}"] = c[s]
    return out


def open_error(path) -> fl.FormatError:
    with pytest.raises(fl.FormatError) as info, fl.recfile.open(path) as f:
        f.verify()
        f.getitems(np.arange(len(f)))
    err = info.value
    assert err.path == os.fspath(path) and os.fspath(path) in str(err)
    assert isinstance(err.offset, int) and err.offset >= 0
    return err


def left_in(directory) -> list[str]:
    return sorted(os.listdir(directory))


@pytest.fixture
def doc_file(tmp_path):
    items = list(doc_items(40, seed=2))
    path = tmp_path / "doc.flr"
    fl.recfile.write(path, Doc, items)
    return path, path.read_bytes(), items


# -- round trips ----------------------------------------------------------------------------


@pytest.mark.parametrize("record", RECORDS, ids=lambda r: r.__name__)
@pytest.mark.parametrize("n", [0, 1, 57])
def test_every_column_kind_round_trips_by_item_batch_and_column(tmp_path, record, n):
    items = list(ITEMS[record](n, seed=n))
    path = tmp_path / "rt.flr"
    assert fl.recfile.write(path, record, items) == n
    with fl.recfile.open(path) as f:
        f.verify()
        assert f.record.schema() == record.schema() and len(f) == n
        assert PRE.unpack(path.read_bytes()[:60])[1] == 2
        for i in range(n):
            got = f[i]
            for name in record.fields:
                assert same(got[name], items[i][name]), (i, name)
        order = np.random.default_rng(1).permutation(n)
        batch = f.getitems(order)
        for name, field in record.fields.items():
            col = batch[name]
            if not field.ragged:
                assert np.array_equal(col, [items[i][name] for i in order])
                continue
            assert isinstance(col, fl.Ragged) and len(col) == n
            for r, i in enumerate(order):
                want = items[i][name]
                if field.kind == "bytes":
                    assert col.blobs()[r] == want
                elif field.kind == "str":
                    assert col.strings()[r] == want
                else:
                    assert same(col.example(r), want)
        for col in f.columns.values():
            if isinstance(col, fl.Ragged):
                assert len(col) == n and len(col.shapes) == n


def test_a_ragged_files_columns_are_views_of_the_file(doc_file):
    path, _, _ = doc_file
    with fl.recfile.open(path) as f:
        col = f.columns["tokens"]
        for a in (col.values, col.offsets):
            assert isinstance(a, np.ndarray) and not a.flags.writeable and not a.flags.owndata
        assert col.shapes.nbytes == 0  # one varying axis: computed from the offsets
        assert np.array_equal(np.asarray(col.shapes)[:, 0], np.diff(col.offsets))
        assert col.shapes[3, 0] == col.offsets[4] - col.offsets[3]


@pytest.mark.parametrize("record", RECORDS, ids=lambda r: r.__name__)
def test_items_columns_and_chunks_of_raggeds_write_the_same_bytes(tmp_path, record):
    items = list(ITEMS[record](300, seed=4))
    fl.recfile.write(tmp_path / "a.flr", record, iter(items))
    fl.recfile.write(tmp_path / "b.flr", record, as_columns(record, items))
    chunks = []
    for a, b in [(0, 7), (7, 7), (7, 150), (150, 300)]:
        chunk = record.check_columns(as_columns(record, items[a:b]), np.arange(a, b))
        chunks.append(chunk)
    fl.recfile.write_chunks(tmp_path / "c.flr", record, chunks)
    data = (tmp_path / "a.flr").read_bytes()
    assert (tmp_path / "b.flr").read_bytes() == data == (tmp_path / "c.flr").read_bytes()


def test_a_ragged_column_that_views_part_of_its_values_is_written_as_its_examples(tmp_path):
    class One(fl.Record, dims={"T": None}):
        t = fl.field("T", "int64")

    whole = fl.Ragged(np.arange(10), np.array([2, 4, 4, 9]), np.array([[2], [0], [5]]), (None,))
    fl.recfile.write(tmp_path / "r.flr", One, {"t": whole})
    with fl.recfile.open(tmp_path / "r.flr") as f:
        assert [f[i]["t"].tolist() for i in range(3)] == [[2, 3], [], [4, 5, 6, 7, 8]]


def test_shapes_are_stored_only_where_sizes_cannot_tell_them(tmp_path):
    fl.recfile.write(tmp_path / "g.flr", Grid, list(grid_items(5)))
    fl.recfile.write(tmp_path / "h.flr", Hollow, list(hollow_items(5)))
    fl.recfile.write(tmp_path / "d.flr", Doc, list(doc_items(5)))
    kinds = {}
    for name in ("g", "h", "d"):
        _, doc = header((tmp_path / f"{name}.flr").read_bytes())
        for c in doc["columns"]:
            kinds[c["field"]] = (c["kind"], "shapes" in c)
    assert kinds == {
        "square": ("ragged", True),  # two varying axes (H twice)
        "wide": ("ragged", False),  # one, not the first: its size over 2 tells it
        "plane": ("ragged", True),
        "none": ("ragged", True),  # its fixed axes hold nothing
        "also": ("ragged", False),
        "tokens": ("ragged", False),
        "tags": ("ragged", False),
        "title": ("string", False),
        "raw": ("blob", False),
        "score": ("fixed", False),
    }


def test_every_section_is_aligned_and_in_order(doc_file):
    _, data, _ = doc_file
    _, doc = header(data)
    places = []
    for c in doc["columns"]:
        places += [c] if c["kind"] == "fixed" else [c[s] for s in ("values", "offsets") if s in c]
    assert all(p["offset"] % 64 == 0 for p in places)
    assert all(a["offset"] + a["length"] <= b["offset"] for a, b in itertools.pairwise(places))
    assert PRE.unpack(data[:60])[6] == places[0]["offset"]  # the data offset
    for p in places:
        assert zlib.crc32(data[p["offset"] : p["offset"] + p["length"]]) == p["crc32"]


def test_a_fixed_record_is_still_written_as_version_1(tmp_path):
    class Fixed(fl.Record):
        x = fl.field(3, "float32")

    fl.recfile.write(tmp_path / "f.flr", Fixed, {"x": np.zeros((4, 3))})
    pre, doc = header((tmp_path / "f.flr").read_bytes())
    assert pre[1] == 1 and doc["version"] == 1


def test_the_version_2_worked_example_is_byte_exact(tmp_path, monkeypatch):
    text = (ROOT / "docs" / "formats.md").read_text(encoding="utf-8")
    code = re.search(r"### A worked example of version 2\n\n```python\n(.*?)```", text, re.S)
    dump = re.search(r"```text flr2-worked-example\n(.*?)```", text, re.S)
    expected = bytes.fromhex("".join(line[6:] for line in dump.group(1).strip().splitlines()))
    monkeypatch.chdir(tmp_path)
    exec(compile(code.group(1), "<formats.md>", "exec"), {"__name__": "__example__"})
    data = (tmp_path / "doc.flr").read_bytes()
    assert data == expected
    secs = sections(data)  # the table of sections in the text
    assert [(e["offset"], e["length"]) for e in secs.values()] == [
        (640, 8),
        (704, 32),
        (768, 5),
        (832, 32),
    ]


def test_the_write_docstring_example_runs():
    assert doctest.testmod(recfile, verbose=False).failed == 0


def test_a_pickled_ragged_handle_and_dataset_reopen_the_file(doc_file):
    path, _, items = doc_file
    with fl.recfile.open(path) as f:
        ds = fl.Dataset(f.record, f)
        for again in (pickle.loads(pickle.dumps(f)), pickle.loads(pickle.dumps(ds))):
            batch = again.getitems(np.array([5, 0]))
            assert batch["title"].strings() == [items[5]["title"], items[0]["title"]]


# -- the loader over a ragged file -----------------------------------------------------------


@pytest.mark.parametrize("shards, drop_last", [(1, False), (3, False), (1, True)])
def test_a_loader_over_a_ragged_file_delivers_each_record_once_with_its_values(
    tmp_path, shards, drop_last
):
    items = list(doc_items(1000, seed=7, long=30))
    path = tmp_path / "l.flr"
    fl.recfile.write(path, Doc, items)
    with fl.recfile.open(path) as f:
        ds = fl.Dataset(f.record, f)
        assert ds._trusted and ds._mapped_columns is not None
        seen = []
        for rank in range(shards):
            shard = {"shard": (rank, shards)} if shards > 1 else {}
            for batch in fl.Loader(f, 64, seed=11, drop_last=drop_last, **shard):
                lengths = batch.meta.lengths["T"]
                for r in range(batch.meta.size):
                    i = int(batch.meta.record_indices[r])
                    seen.append((int(batch.meta.source_ordinals[r]), i))
                    want = items[i]
                    assert lengths[r] == len(want["tokens"])
                    assert np.array_equal(batch.tokens[r, : lengths[r]], want["tokens"])
                    assert not batch.tokens[r, lengths[r] :].any()
                    assert batch.title[r] == want["title"] and batch.raw[r] == want["raw"]
        assert len(seen) == len(set(seen)) == (960 if drop_last else 1000)
        assert {s for s, _ in seen} == {0}


# -- streaming: bounded memory, and the size of the file -------------------------------------


def test_streaming_100k_ragged_items_holds_a_chunk_not_the_stream(tmp_path):
    class Seq(fl.Record, dims={"T": None}):
        ids = fl.field("T", "int32")
        text = fl.field((), "str")

    def stream(n):
        rng = np.random.default_rng(0)
        for k in rng.integers(0, 64, n):
            yield {"ids": np.arange(k, dtype=np.int32), "text": "x" * int(k % 7)}

    # tracemalloc counts every thread's allocations: the compiled kernels that an earlier
    # test started loading on a background thread (numba's import: 10 MB and more) are
    # loaded before the trace, not in it
    kernels._finish_loading()
    kernels._finish_warming()
    peaks = {}
    for n in (25_000, 100_000):
        gc.collect()
        tracemalloc.start()
        try:
            assert fl.recfile.write(tmp_path / "s.flr", Seq, stream(n)) == n
            _, peaks[n] = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    size = os.path.getsize(tmp_path / "s.flr")
    assert size > 12 << 20  # the stream holds ~13 MB ...
    assert peaks[100_000] < 8 << 20  # ... of which a chunk is held at a time,
    assert peaks[100_000] < peaks[25_000] + (2 << 20)  # whatever the stream's length
    with fl.recfile.open(tmp_path / "s.flr") as f:
        assert f[99_999]["ids"].tolist() == list(range(len(f[99_999]["ids"])))
    assert left_in(tmp_path) == ["s.flr"]


def test_a_ragged_file_is_within_five_percent_of_its_values_and_offsets(tmp_path):
    class Tokens(fl.Record, dims={"T": None}):
        ids = fl.field("T", "int32")

    rng = np.random.default_rng(0)
    lengths = np.clip(rng.lognormal(np.log(256), 0.6, 5000).astype(np.int64), 1, 4096)
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    values = rng.integers(0, 50_000, int(offsets[-1])).astype(np.int32)
    column = fl.Ragged(values, offsets, lengths[:, None], (None,))
    fl.recfile.write(tmp_path / "t.flr", Tokens, {"ids": column})
    size = os.path.getsize(tmp_path / "t.flr")
    assert size <= 1.05 * (values.nbytes + offsets.nbytes)


# -- bad input: a ShapeError naming the field and the item, and nothing written --------------


def _bad(kind: str):
    items = list(doc_items(6000, seed=1))
    at = 5000  # past the first chunk: spools were written already
    if kind == "ragged where fixed":
        items[at]["score"] = np.zeros(2, np.float32)
    elif kind == "lengths disagree":
        items[at]["tags"] = np.zeros(len(items[at]["tokens"]) + 1, np.int8)
    elif kind == "not utf-8":
        items[at]["title"] = "bad \udcff surrogate"
    elif kind == "bytes for str":
        items[at]["title"] = b"bytes"
    elif kind == "blob over max_bytes":
        items[at]["raw"] = bytes(41)
    elif kind == "index out of domain":
        items[at]["tokens"] = np.full(len(items[at]["tags"]), 1000, np.int32)
    return items, at


BAD = [
    "ragged where fixed",
    "lengths disagree",
    "not utf-8",
    "bytes for str",
    "blob over max_bytes",
    "index out of domain",
]
FIELD_OF = {
    "ragged where fixed": "score",
    "lengths disagree": "tags",
    "not utf-8": "title",
    "bytes for str": "title",
    "blob over max_bytes": "raw",
    "index out of domain": "tokens",
}


@pytest.mark.parametrize("kind", BAD)
@pytest.mark.parametrize("form", ["items", "columns"])
def test_each_bad_input_names_field_and_item_and_writes_nothing(tmp_path, kind, form):
    items, at = _bad(kind)
    data = iter(items) if form == "items" else as_columns(Doc, items)
    with pytest.raises((fl.ShapeError, fl.DomainError)) as info:
        fl.recfile.write(tmp_path / "bad.flr", Doc, data)
    message = str(info.value)
    assert f"`{FIELD_OF[kind]}`" in message and f"item {at}" in message
    assert left_in(tmp_path) == []


def test_a_longer_example_than_its_dims_maximum_is_refused(tmp_path):
    items = list(grid_items(20))
    items[13]["square"] = np.zeros((7, 3, 7), np.float32)
    items[13]["plane"] = np.zeros((7, 0), np.uint8)
    with pytest.raises(fl.ShapeError, match=r"`square` of item 13 has H = 7, longer than"):
        fl.recfile.write(tmp_path / "g.flr", Grid, items)
    assert left_in(tmp_path) == []


def _ragged_chunk(values, offsets, shapes, template=(None,)):
    return fl.Ragged(
        np.asarray(values), np.asarray(offsets, np.int64), np.asarray(shapes, np.int64), template
    )


class Text(fl.Record):
    s = fl.field((), "str")


class Toks(fl.Record, dims={"T": None}):
    t = fl.field(("T", 2), "int16")


@pytest.mark.parametrize(
    "record, column, match",
    [
        (
            Text,
            _ragged_chunk(np.frombuffer(b"ab\xff", np.uint8), [0, 2, 3], [[2], [1]]),
            r"`s` of item 11 is not UTF-8",
        ),
        # "é" is two bytes: a string that starts inside it is not UTF-8 on its own
        (
            Text,
            _ragged_chunk(np.frombuffer("aé".encode(), np.uint8), [0, 2, 3], [[2], [1]]),
            r"`s` of item 11 is not UTF-8",
        ),
        (
            Toks,
            _ragged_chunk(np.zeros(6, np.int16), [0, 4, 2, 6], [[2], [-1], [2]], (None, 2)),
            r"`t` of item 1\d?: an inconsistent column",
        ),
        (
            Toks,
            _ragged_chunk(np.zeros(6, np.int16), [0, 2, 4, 6], [[1], [1], [2]], (None, 2)),
            r"`t` of item 12: an inconsistent column",
        ),
    ],
    ids=["bad byte", "split character", "offsets decrease", "shape not its size"],
)
def test_a_ragged_chunk_that_lies_is_refused_naming_the_item(tmp_path, record, column, match):
    name = next(iter(record.fields))
    first = {name: ["" if record is Text else np.zeros((0, 2))] * 10}  # items 0 to 9
    with pytest.raises(fl.ShapeError, match=match):
        fl.recfile.write_chunks(tmp_path / "x.flr", record, [first, {name: column}])
    assert left_in(tmp_path) == []


# -- damage: a lying file is a FormatError naming the path and the byte ----------------------


def _put(data: bytes, at: int, value: int, fmt: str = "<q") -> bytes:
    buf = bytearray(data)
    struct.pack_into(fmt, buf, at, value)
    return bytes(buf)


@pytest.mark.parametrize(
    "case",
    [
        "first offset not 0",
        "offsets decrease",
        "last offset past the values",
        "lengths of a shared dim disagree",
        "blob over max_bytes",
        "not a whole example",
    ],
)
def test_offsets_that_lie_are_a_format_error_at_their_byte(doc_file, case):
    path, data, items = doc_file
    secs = sections(data)
    tok = secs["tokens.offsets"]["offset"]
    if case == "first offset not 0":
        bad, at = _put(data, tok, 1), tok
    elif case == "offsets decrease":
        bad, at = _put(data, tok + 8 * 5, -1), tok + 8 * 5
    elif case == "last offset past the values":
        bad, at = _put(data, tok + 8 * 40, 10**9), tok + 8 * 40
    elif case == "lengths of a shared dim disagree":
        tags = secs["tags.offsets"]["offset"]
        # move the boundary between rows 2 and 3 of `tags` only (sizes still add up)
        o = struct.unpack_from("<q", data, tags + 8 * 3)[0]
        row = 2 if len(items[2]["tags"]) else 3
        bad = _put(data, tags + 8 * 3, o + (1 if len(items[3]["tags"]) else -1))
        at = tags + 8 * row
    elif case == "blob over max_bytes":
        raw = secs["raw.offsets"]["offset"]
        total = struct.unpack_from("<q", data, raw + 8 * 40)[0]
        bad = data
        for r in range(1, 40):
            bad = _put(bad, raw + 8 * r, 0)  # every byte in the last blob: over 40
        at = raw + 8 * 39
        assert total > 40
    else:

        class Pairs(fl.Record, dims={"T": None}):
            p = fl.field(("T", 2), "int32")

        fl.recfile.write(
            path, Pairs, [{"p": np.zeros((2, 2), np.int32)}, {"p": np.zeros((1, 2), np.int32)}]
        )
        data = path.read_bytes()
        off = sections(data)["p.offsets"]["offset"]
        bad, at = _put(data, off + 8, 3), off  # row 0 would hold 3 values: 1.5 pairs
    path.write_bytes(bad)
    err = open_error(path)
    assert err.offset == at, str(err)


def test_shapes_that_lie_are_a_format_error(tmp_path):
    path = tmp_path / "g.flr"
    items = list(grid_items(10, seed=3))
    fl.recfile.write(path, Grid, items)
    data = path.read_bytes()
    secs = sections(data)
    sq = secs["square.shapes"]["offset"]  # (10, 2): H and H again
    h = len(items[4]["square"])
    for lie in ([h, h + 1], [-1, -1], [7, 7], [h + 1, h + 1]):
        bad = _put(_put(data, sq + 16 * 4, lie[0]), sq + 16 * 4 + 8, lie[1])
        path.write_bytes(bad)
        err = open_error(path)
        assert err.offset in (sq + 16 * 4, 64), (lie, str(err))


def test_a_string_that_is_not_utf8_is_a_format_error_when_read_and_verified(doc_file):
    path, data, items = doc_file
    row = next(i for i, it in enumerate(items) if it["title"])
    secs = sections(data)
    start = struct.unpack_from("<q", data, secs["title.offsets"]["offset"] + 8 * row)[0]
    at = secs["title.values"]["offset"] + start
    path.write_bytes(data[:at] + b"\xff" + data[at + 1 :])
    with fl.recfile.open(path) as f:  # checked lazily: opening costs no pass over strings
        f.getitems([i for i in range(40) if i != row])
        for read in (lambda: f[row], lambda: f.getitems([0, row])):
            with pytest.raises(fl.FormatError, match=f"row {row} of a string") as info:
                read()
            assert info.value.offset == at
        with pytest.raises(fl.FormatError) as info:
            f.verify()
        assert info.value.offset == secs["title.values"]["offset"]  # its CRC first


def test_a_string_cut_inside_a_character_is_a_format_error(tmp_path):
    path = tmp_path / "s.flr"
    fl.recfile.write(path, Text, [{"s": "é"}, {"s": "x"}])
    data = path.read_bytes()
    secs = sections(data)
    off = secs["s.offsets"]["offset"]
    bad = _put(data, off + 8, 1)  # "é" is c3 a9: rows b"\xc3" and b"\xa9x"
    # reseal the CRC so that only the UTF-8 check is left to catch it
    pre, doc = header(bad)
    new_crc = zlib.crc32(bad[off : off + secs["s.offsets"]["length"]])
    doc["columns"][0]["offsets"]["crc32"] = new_crc
    h = json.dumps(doc, separators=(",", ":"), sort_keys=True).encode()
    assert len(h) <= pre[4]
    h = h.ljust(pre[4], b" ")
    body = PRE.pack(*pre[:8], zlib.crc32(h))
    bad = body + struct.pack("<I", zlib.crc32(body)) + h + bad[64 + pre[4] :]
    path.write_bytes(bad)
    with fl.recfile.open(path) as f:
        with pytest.raises(fl.FormatError, match="not UTF-8"):
            f.getitems([0])
        with pytest.raises(fl.FormatError, match="UTF-8"):
            f.verify()


def _reseal(data: bytes, change) -> bytes:
    """``data`` with its header changed by ``change(doc)``, columns moved to 8192."""
    pre, doc = header(data)
    shift = 8192 - pre[6]
    for c in doc["columns"]:
        for p in (
            [c]
            if c["kind"] == "fixed"
            else [c[s] for s in ("values", "offsets", "shapes") if s in c]
        ):
            p["offset"] += shift
    doc = change(doc) or doc
    h = json.dumps(doc, separators=(",", ":"), sort_keys=True).encode()
    body = data[pre[6] :]
    rest = h + b"\0" * (8192 - 64 - len(h)) + body
    fields = (
        pre[0],
        doc.get("version", 2) if isinstance(doc.get("version"), int) else 2,
        0,
        64,
        len(h),
        pre[5],
        8192,
        64 + len(rest),
        zlib.crc32(h),
    )
    pre_bytes = PRE.pack(*fields)
    return pre_bytes + struct.pack("<I", zlib.crc32(pre_bytes)) + rest


def _col(doc, name):
    return next(c for c in doc["columns"] if c["field"] == name)


HEADER_LIES = {
    "unchanged": lambda d: None,
    "version 1 with ragged columns": lambda d: d.update(version=1),
    "kind fixed for a ragged field": lambda d: _col(d, "tokens").update(kind="fixed"),
    "kind blob for a string": lambda d: _col(d, "title").update(kind="blob"),
    "kind ragged for a fixed field": lambda d: _col(d, "score").update(kind="ragged"),
    "a shapes section where none belongs": lambda d: _col(d, "tokens").update(
        shapes=dict(_col(d, "tokens")["offsets"])
    ),
    "no offsets": lambda d: _col(d, "tokens").pop("offsets"),
    "an unknown section key": lambda d: _col(d, "tokens")["values"].update(extra=1),
    "a section not an object": lambda d: _col(d, "raw").update(values=[1, 2]),
    "a float offset": lambda d: _col(d, "raw")["values"].update(offset=8192.0),
    "misaligned values": lambda d: _col(d, "tokens")["values"].update(
        offset=_col(d, "tokens")["values"]["offset"] + 4
    ),
    "offsets before values": lambda d: _col(d, "tokens")["offsets"].update(
        offset=_col(d, "tokens")["values"]["offset"]
    ),
    "offsets too short": lambda d: _col(d, "tags")["offsets"].update(length=8 * 40),
    "values not whole items": lambda d: _col(d, "tokens")["values"].update(
        length=_col(d, "tokens")["values"]["length"] - 2
    ),
    "values past the end": lambda d: _col(d, "score").update(offset=2**40),
    "a huge length": lambda d: _col(d, "title")["values"].update(length=2**70),
}


@pytest.mark.parametrize("case", list(HEADER_LIES))
def test_a_header_that_lies_about_ragged_columns_is_a_format_error(doc_file, case):
    path, data, items = doc_file
    path.write_bytes(_reseal(data, HEADER_LIES[case]))
    if case == "unchanged":
        with fl.recfile.open(path) as f:
            f.verify()
            assert f[3]["title"] == items[3]["title"]
        return
    assert open_error(path).offset in (8, 40, 64)


def test_a_header_saying_a_varying_dims_maximum_is_true_is_a_format_error(tmp_path):
    # JSON's true is refused wherever the header holds an integer: a dim's maximum too
    path = tmp_path / "grid.flr"
    fl.recfile.write(path, Grid, list(grid_items(5)))
    data = path.read_bytes()
    assert header(data)[1]["record"]["dims"]["H"] == {"max": 6, "truncate": False}
    path.write_bytes(_reseal(data, lambda d: d["record"]["dims"]["H"].update(max=True)))
    err = open_error(path)
    assert "H" in str(err) and "true" in str(err).lower()


def test_a_header_whose_first_field_is_fixed_over_a_ragged_column_names_the_kind(doc_file):
    # the first field made fixed ([7]) while its column entry stays ragged: the error says
    # the column's kind disagrees with the field, not that the data offset is "None"
    path, data, _ = doc_file

    def fixed_tokens(d):
        d["record"]["dims"]["T"] = 7
        for f in d["record"]["fields"]:
            if f["dims"] == ["T"]:
                f["shape"] = [7]

    path.write_bytes(_reseal(data, fixed_tokens))
    message = str(open_error(path))
    assert "None" not in message
    assert "tokens" in message and "ragged" in message and "fixed" in message


def test_a_file_truncated_at_any_length_is_a_format_error(doc_file):
    path, data, _ = doc_file
    for size in sorted({*range(0, len(data), 37), len(data) - 1}):
        path.write_bytes(data[:size])
        open_error(path)


def test_a_file_truncated_while_open_is_an_error_not_a_crash(doc_file):
    path, _, _ = doc_file
    with fl.recfile.open(path) as f:
        col = f.columns["tokens"]
        os.truncate(path, 200)
        with pytest.raises(fl.FormatError, match="truncated in place"):
            col.take(np.arange(40))
        with pytest.raises(fl.FormatError, match="truncated in place"):
            f.getitems([1])


FUZZ = settings(
    max_examples=200,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@FUZZ
@given(data=st.data())
def test_fuzz_damaged_ragged_files_open_and_read_or_raise_a_format_error(doc_file, data):
    path, base, _ = doc_file
    buf = bytearray(base)
    secs = sections(base)
    hot = [(e["offset"], e["length"]) for e in secs.values() if e["length"]]
    for _ in range(data.draw(st.integers(1, 4), "flips")):
        where = data.draw(st.sampled_from(hot), "section")
        pos = data.draw(st.integers(where[0], where[0] + where[1] - 1), "pos")
        buf[pos] = data.draw(st.integers(0, 255), "byte")
    if data.draw(st.booleans(), "truncate"):
        buf = buf[: data.draw(st.integers(0, len(buf)), "size")]
    path.write_bytes(bytes(buf))
    t0 = time.perf_counter()
    try:
        with fl.recfile.open(path) as f:
            f.getitems(np.arange(len(f)))  # no check_values: a flipped token may be any int
            f.verify()
    except fl.FormatError as e:
        assert e.path == os.fspath(path) and e.offset is not None
    assert time.perf_counter() - t0 < LIVENESS_S


# -- remote files ----------------------------------------------------------------------------


def test_a_ragged_file_at_a_url_reads_as_the_local_one(tmp_path):
    pytest.importorskip("s3fs")
    pytest.importorskip("moto")
    from .s3_endpoint import S3Endpoint

    endpoint = S3Endpoint()
    try:
        fs = endpoint.bucket("ragged")
        items = list(doc_items(500, seed=5, long=300))
        fl.recfile.write(tmp_path / "d.flr", Doc, items)
        fs.put(str(tmp_path / "d.flr"), "ragged/d.flr")
        url = fl.remote.open(
            "s3://ragged/d.flr", storage_options=endpoint.options(), block_size=4096
        )
        with fl.recfile.open(url) as f, fl.recfile.open(tmp_path / "d.flr") as local:
            f.verify()
            idx = np.random.default_rng(0).permutation(500)[:100]
            got, want = f.getitems(idx), local.getitems(idx)
            for name in Doc.fields:
                if isinstance(want[name], fl.Ragged):
                    assert np.array_equal(got[name].values, want[name].values)
                    assert np.array_equal(got[name].offsets, want[name].offsets)
                    assert np.array_equal(got[name].shapes, want[name].shapes)
                else:
                    assert np.array_equal(got[name], want[name])
            batches = list(fl.Loader(f, 50, seed=2))
            assert sorted(int(i) for b in batches for i in b.meta.record_indices) == list(
                range(500)
            )
    finally:
        endpoint.close()


def test_shapes_computed_from_offsets_index_as_an_array_of_them_does():
    from feedline.formats._flr_ragged import SizeShapes

    offsets = np.array([0, 6, 6, 15, 18, 30], dtype=np.int64)
    computed = SizeShapes(offsets, 3)  # lengths 2, 0, 3, 1, 4
    array = np.asarray(computed)
    assert array.tolist() == [[2], [0], [3], [1], [4]]
    keys = [
        (slice(None), 0),  # a column of lengths (bucketing took row 0 for it)
        (slice(1, 4), 0),
        (np.array([4, 0, 4]), 0),
        (np.array([True, False, True, False, True]), 0),
        (slice(None), slice(None)),
        3,
        (3, 0),
        (-1, 0),
        np.array([2, 1]),
    ]
    for key in keys:
        np.testing.assert_array_equal(computed[key], array[key])
