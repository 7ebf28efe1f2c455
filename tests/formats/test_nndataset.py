"""The .nndataset and .nnvocab files: bytes, round trips, refusals, and malformed input."""

from __future__ import annotations

import dataclasses
import doctest
import hashlib
import io
import os
import pickle
import re
import struct
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from feedline.errors import BoundsError, FormatError
from feedline.formats import _nnwrite, kvrec
from feedline.formats import nndataset as nnd

DOCS = Path(__file__).resolve().parents[2] / "docs" / "formats-nndataset.md"


def u32(v: int) -> bytes:
    return struct.pack("<I", v)


def u64(*vs: int) -> bytes:
    return struct.pack(f"<{len(vs)}Q", *vs)


def head(key: bytes, kind: int, addr: int) -> bytes:
    """A version 2 field header: [klen u32][key][type u8][addr u64]."""
    return u32(len(key)) + key + bytes((kind,)) + u64(addr)


SENTINEL = u32(13) + b"kvrec_version" + b"\x00" + u32(8) + u64(2)

# The worked example of docs/formats-nndataset.md, computed by hand from the layout:
# two train documents [1, 2] (mask 0 1) and [3] (mask 1), loss_scope "assistant".
WORKED = [
    (0, b"NNDS" + u32(1)),
    (8, u32(4) + SENTINEL),  # root: the sentinel and 3 fields; its table is 91 bytes
    (42, head(b"kind", 0, 99) + head(b"companion", 3, 115) + head(b"train", 3, 560)),
    (99, u64(8, 0)),  # kind = 0, text
    (115, u64(437)),  # companion: a 437-byte record at 123
    (123, u32(4) + SENTINEL),
    (157, head(b"vocab", 3, 210) + head(b"source", 3, 282) + head(b"gen", 3, 416)),
    (210, u64(64)),  # vocab: a 64-byte record at 218
    (218, u32(2) + SENTINEL + head(b"n", 0, 266)),
    (266, u64(8, 3)),
    (282, u64(126)),  # source: a 126-byte record at 290
    (290, u32(4) + SENTINEL),
    (324, head(b"path", 1, 377) + head(b"sha256", 1, 390) + head(b"docs", 0, 400)),
    (377, u64(5) + b"c.txt" + u64(2) + b"ab" + u64(8, 2)),
    (416, u64(136)),  # gen: a 136-byte record at 424
    (424, u32(4) + SENTINEL),
    (458, head(b"loss_scope", 1, 518) + head(b"tool", 1, 535) + head(b"created", 0, 544)),
    (518, u64(9) + b"assistant" + u64(1) + b"t" + u64(8, 1_700_000_000)),
    (560, u64(125)),  # train: a 125-byte record at 568
    (568, u32(3) + SENTINEL + head(b"num_docs", 0, 645) + head(b"doc_index", 2, 661)),
    (645, u64(8, 2) + u64(24, 693, 719, 736)),
    (693, u64(2, 1, 2) + b"\x00\x01"),  # document 1: 2 tokens, then their mask
    (719, u64(1, 3) + b"\x01"),  # document 2
]


def worked_build() -> nnd.Build:
    return nnd.Build(
        {"n": 3},
        "c.txt",
        "ab",
        2,
        loss_scope="assistant",
        train_docs=[[1, 2], [3]],
        train_masks=[[False, True], [True]],
        tool="t",
        created=1_700_000_000,
    )


def test_the_worked_example_is_byte_exact(tmp_path):
    expected = b""
    for offset, piece in WORKED:
        assert offset == len(expected)
        expected += piece
    assert len(expected) == 736
    path = tmp_path / "ex.nndataset"
    nnd.write(path, worked_build())
    assert path.read_bytes() == expected


def test_the_documented_hex_dump_is_the_worked_example():
    text = DOCS.read_text(encoding="utf-8")
    block = text.split("<!-- worked-example -->")[1].split("```")[1]
    data = b""
    for line in block.splitlines()[1:]:
        if not line.strip():
            continue
        offset, hexes = re.split(r"\s{2,}", line.strip())[:2]
        assert int(offset) == len(data), line
        data += bytes.fromhex(hexes)
    assert data == b"".join(piece for _, piece in WORKED)


def test_the_worked_example_reads_back(tmp_path):
    path = tmp_path / "ex.nndataset"
    path.write_bytes(b"".join(piece for _, piece in WORKED))
    with nnd.open(path) as ds:
        info = ds.info
        assert (info.kind, info.num_docs, info.test_docs, info.has_test) == ("text", 2, 0, False)
        assert (info.loss_scope, info.source_path, info.source_sha256, info.source_docs) == (
            "assistant",
            "c.txt",
            "ab",
            2,
        )
        assert (info.tool, info.created, info.license) == ("t", 1_700_000_000, None)
        assert info.vocab == ds.vocab == {"n": 3}
        c = ds.load_text("train")
        assert np.asarray(c.token_flow).tolist() == [1, 2, 3]
        assert np.asarray(c.doc_ids).tolist() == [1, 1, 2]
        assert np.asarray(c.loss_mask).tolist() == [False, True, True]
        assert c.doc_token_offsets.tolist() == [0, 2, 3]
        assert (c.num_docs, c.num_tokens) == (2, 3)


# The worked example with a vocabulary of raw bytes, as neuralnet.cpp's tokenizer stores
# it: the vocab's "n" is a Str of 8 bytes that are not UTF-8 (the same 64-byte record,
# so every other offset is the worked example's).
RAW = b"\xc8\xff\x80\x00\xfe\xc3\x28\xa0"
WORKED_RAW = [
    (o, u32(2) + SENTINEL + head(b"n", 1, 266))
    if o == 218
    else (o, u64(8) + RAW)
    if o == 266
    else (o, piece)
    for o, piece in WORKED
]


def test_a_vocab_of_raw_bytes_is_written_byte_exact_and_reads_back_equal(tmp_path):
    expected = b"".join(piece for _, piece in WORKED_RAW)
    assert len(expected) == 736
    build = dataclasses.replace(worked_build(), vocab={"n": RAW})
    path = tmp_path / "raw.nndataset"
    nnd.write(path, build)
    assert path.read_bytes() == expected
    with nnd.open(path) as ds:
        assert ds.vocab == {"n": RAW}
        assert ds.load_text("train").token_flow[:].tolist() == [1, 2, 3]
        again = dataclasses.replace(build, vocab=ds.vocab)
    nnd.write(tmp_path / "again.nndataset", again)
    assert (tmp_path / "again.nndataset").read_bytes() == expected


def byte_level_vocab() -> dict:
    """A byte-level vocabulary: token i is the byte i (200 is b"\\xc8"), as it reads back
    (bytes that are UTF-8, the ASCII ones, read back as str)."""
    return {"size": 256, "tokens": {str(i): chr(i) if i < 128 else bytes([i]) for i in range(256)}}


def test_a_dataset_generated_with_a_byte_level_vocab_opens(tmp_path):
    # what neuralnet.cpp's dataset_gen writes: the vocab record holds raw token bytes
    path = tmp_path / "gen.nndataset"
    build = nnd.Build(
        byte_level_vocab(),
        "corpus.txt",
        "ab" * 32,
        2,
        train_docs=[[104, 200], [255]],
        test_docs=[[0]],
        created=5,
    )
    nnd.write(path, build)
    data = path.read_bytes()
    tokens = kvrec.decode(data, 8)[0]["companion"]["vocab"]["tokens"]
    assert tokens["200"] == b"\xc8" and tokens["104"] == "h"
    assert u32(3) + b"200" + b"\x01" in data and u64(1) + b"\xc8" + u64(1) in data
    with nnd.open(path) as ds:
        assert ds.vocab == byte_level_vocab()
        assert ds.text_doc("train", 0).tokens.tolist() == [104, 200]
        assert ds.load_text("test").token_flow[:].tolist() == [0]
    rewritten = tmp_path / "rewritten.nndataset"
    with nnd.open(path) as ds:
        nnd.write(rewritten, dataclasses.replace(build, vocab=ds.vocab))
    assert rewritten.read_bytes() == data


def test_metadata_strings_of_raw_bytes_round_trip(tmp_path):
    build = nnd.Build(
        {},
        b"corp\xffus.txt",
        "f" * 64,
        1,
        train_docs=[[1]],
        tool=b"gen \xfe",
        license=b"\xa9 2024",
        created=0,
    )
    with write_read(tmp_path, build) as ds:
        i = ds.info
        assert (i.source_path, i.tool, i.license) == (b"corp\xffus.txt", b"gen \xfe", b"\xa9 2024")
        assert i.source_sha256 == "f" * 64


def write_read(tmp_path, build, name="d.nndataset"):
    path = tmp_path / name
    nnd.write(path, build)
    return nnd.open(path)


def flows(ds, subset):
    c = ds.load_text(subset)
    return (np.asarray(c.token_flow), np.asarray(c.doc_ids), np.asarray(c.loss_mask))


def test_loss_scope_all_round_trips_with_all_ones_masks(tmp_path):
    docs = [[5, 6, 7], [8], [9, 10]]
    with write_read(tmp_path, nnd.Build({}, "s", "h", 3, train_docs=docs)) as ds:
        tokens, ids, mask = flows(ds, "train")
        assert tokens.dtype == np.uint64 and ids.dtype == np.int64 and mask.dtype == np.bool_
        assert tokens.tolist() == [5, 6, 7, 8, 9, 10]
        assert ids.tolist() == [1, 1, 1, 2, 3, 3]
        assert mask.all() and len(mask) == 6
        for i, doc in enumerate(docs):
            d = ds.text_doc("train", i)
            assert d.doc_id == i + 1 and d.tokens.tolist() == doc and d.loss_mask.all()


def test_loss_scope_assistant_round_trips_its_masks(tmp_path):
    docs = [np.array([1, 2, 3], dtype=np.uint64), np.array([4, 5], dtype=np.int64)]
    masks = [np.array([0, 1, 1], dtype=np.uint8), np.array([True, False])]
    build = nnd.Build({}, "s", "h", 2, loss_scope="assistant", train_docs=docs, train_masks=masks)
    with write_read(tmp_path, build) as ds:
        tokens, _, mask = flows(ds, "train")
        assert tokens.tolist() == [1, 2, 3, 4, 5]
        assert mask.tolist() == [False, True, True, True, False]
        assert ds.text_doc("train", 1).loss_mask.tolist() == [True, False]


def test_empty_documents_keep_their_doc_id(tmp_path):
    docs = [[], [1], [], [], [2, 3], []]
    build = nnd.Build(
        {},
        "s",
        "h",
        6,
        loss_scope="assistant",
        train_docs=docs,
        train_masks=[[], [1], [], [], [0, 1], []],
    )
    with write_read(tmp_path, build) as ds:
        tokens, ids, _ = flows(ds, "train")
        assert ids.tolist() == [2, 5, 5]
        assert tokens.tolist() == [1, 2, 3]
        c = ds.load_text("train")
        assert c.doc_token_offsets.tolist() == [0, 0, 1, 1, 1, 3, 3]
        assert ds.info.num_docs == 6
        d = ds.text_doc("train", 5)
        assert d.doc_id == 6 and len(d.tokens) == 0 and len(d.loss_mask) == 0


def test_train_and_test_subsets_round_trip(tmp_path):
    build = nnd.Build(
        {"v": [1, 2]}, "s", "h", 5, train_docs=[[1], [2, 3]], test_docs=[[4, 5, 6], [], [7]]
    )
    with write_read(tmp_path, build) as ds:
        assert (ds.info.num_docs, ds.info.test_docs, ds.info.has_test) == (2, 3, True)
        tokens, ids, _ = flows(ds, "test")
        assert tokens.tolist() == [4, 5, 6, 7] and ids.tolist() == [1, 1, 1, 3]
        assert ds.text_doc("test", 2).tokens.tolist() == [7]
        assert flows(ds, "train")[0].tolist() == [1, 2, 3]


def test_no_test_documents_writes_no_test_subset(tmp_path):
    with write_read(tmp_path, nnd.Build({}, "s", "h", 1, train_docs=[[1]])) as ds:
        assert not ds.info.has_test and ds.info.test_docs == 0
        # the file lacks the subset: a FormatError naming it and the root record
        with pytest.raises(
            FormatError, match=r"no test subset \(expected one .* found train only\)"
        ) as e:
            ds.load_text("test")
        assert (e.value.path, e.value.offset) == (str(ds.path), 8)
        with pytest.raises(FormatError, match="train only"):
            ds.text_doc("test", 0)
        # a subset that no file can hold is the caller's mistake: a plain ValueError
        with pytest.raises(ValueError, match="subset must be") as bad:
            ds.load_text("validation")
        assert not isinstance(bad.value, FormatError)
    root = kvrec.decode((tmp_path / "d.nndataset").read_bytes(), 8)[0]
    assert list(root) == ["kind", "companion", "train"]


def test_metadata_and_a_license_round_trip(tmp_path):
    vocab = {"tokens": "a b c", "size": 3, "merges": [1, 2], "specials": {"eos": 2}}
    build = nnd.Build(
        vocab,
        "corpus.txt",
        "f" * 64,
        12,
        train_docs=[[0]],
        tool="me v2",
        created=123,
        license="CC0\nline two",
    )
    with write_read(tmp_path, build) as ds:
        i = ds.info
        assert (i.source_path, i.source_sha256, i.source_docs) == ("corpus.txt", "f" * 64, 12)
        assert (i.tool, i.created, i.license, i.loss_scope) == (
            "me v2",
            123,
            "CC0\nline two",
            "all",
        )
        assert i.vocab["tokens"] == "a b c" and i.vocab["merges"].tolist() == [1, 2]
        assert i.vocab["specials"] == {"eos": 2}
        assert "license" in repr(ds.info) and "vocab" not in repr(ds.info)
    root = kvrec.decode((tmp_path / "d.nndataset").read_bytes(), 8)[0]
    assert list(root["companion"]) == ["vocab", "source", "license", "gen"]


@pytest.mark.parametrize("license", [None, ""])
def test_an_absent_or_empty_license_is_not_stored(tmp_path, license):
    with write_read(tmp_path, nnd.Build({}, "s", "h", 0, license=license)) as ds:
        assert ds.info.license is None
    root = kvrec.decode((tmp_path / "d.nndataset").read_bytes(), 8)[0]
    assert list(root["companion"]) == ["vocab", "source", "gen"]


def test_created_defaults_to_the_time_of_writing(tmp_path):
    before = int(time.time())
    with write_read(tmp_path, nnd.Build({}, "s", "h", 0)) as ds:
        assert before <= ds.info.created <= int(time.time())
        assert ds.info.tool == "feedline"


def test_token_ids_use_all_64_bits(tmp_path):
    big = [2**64 - 1, 0, 2**63]
    with write_read(tmp_path, nnd.Build({}, "s", "h", 1, train_docs=[big])) as ds:
        assert ds.text_doc("train", 0).tokens.tolist() == big


def test_documents_may_come_from_a_generator(tmp_path):
    build = nnd.Build({}, "s", "h", 2, train_docs=(np.arange(n) for n in (3, 4)))
    with write_read(tmp_path, build) as ds:
        assert flows(ds, "train")[0].tolist() == [0, 1, 2, 0, 1, 2, 3]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"loss_scope": "some"}, "loss_scope"),
        ({"train_docs": [[1]], "train_masks": [[1]]}, "stores no masks"),
        ({"test_docs": [[1]], "test_masks": [[1]]}, "stores no masks"),
        (
            {"loss_scope": "assistant", "train_docs": [[1], [2]], "train_masks": [[1]]},
            "one mask per document",
        ),
        ({"loss_scope": "assistant", "train_docs": [[1]]}, "one mask per document"),
        (
            {"loss_scope": "assistant", "test_docs": [[1]], "test_masks": None},
            "one mask per document",
        ),
        ({"loss_scope": "assistant", "test_masks": [[1]]}, "one mask per document"),
        (
            {"loss_scope": "assistant", "train_docs": [[1, 2]], "train_masks": [[1]]},
            "has 1 entries",
        ),
    ],
)
def test_write_refuses_invalid_builds(tmp_path, kwargs, message):
    path = tmp_path / "d.nndataset"
    with pytest.raises(ValueError, match=message):
        nnd.write(path, nnd.Build({}, "s", "h", 0, **kwargs))
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"train_docs": [[1, -2]]}, ValueError, ">= 0"),
        ({"train_docs": [[1.5]]}, ValueError, "integers"),
        ({"train_docs": [[[1, 2]]]}, ValueError, "1-D"),
        (
            {"loss_scope": "assistant", "train_docs": [[1]], "train_masks": [[2]]},
            ValueError,
            "only 0 and 1",
        ),
        (
            {"loss_scope": "assistant", "train_docs": [[1]], "train_masks": [[0.5]]},
            ValueError,
            "bool or 0/1",
        ),
        ({"vocab": ["not", "a", "record"]}, TypeError, "vocab"),
        ({"vocab": {"bad": 1.5}}, TypeError, "bad"),
        ({"source_docs": -1}, ValueError, "source_docs"),
        ({"created": "today"}, TypeError, "created"),
        ({"train_docs": [5]}, TypeError, "train_docs"),
    ],
)
def test_write_refuses_values_the_file_cannot_hold(tmp_path, kwargs, error, message):
    fields = {"vocab": {}, "source_path": "s", "source_sha256": "h", "source_docs": 0, **kwargs}
    path = tmp_path / "d.nndataset"
    with pytest.raises(error, match=message):
        nnd.write(path, nnd.Build(**fields))
    assert list(tmp_path.iterdir()) == []


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path, monkeypatch):
    path = tmp_path / "d.nndataset"
    nnd.write(path, worked_build())
    old = path.read_bytes()
    monkeypatch.setattr(_nnwrite, "_FLUSH", 1)  # every document reaches the temporary file
    calls = []
    real = _nnwrite._mask_bytes

    def failing(*args):
        calls.append(1)
        if len(calls) == 3:
            raise OSError("disk full")
        return real(*args)

    monkeypatch.setattr(_nnwrite, "_mask_bytes", failing)
    build = nnd.Build(
        {}, "s", "h", 4, loss_scope="assistant", train_docs=[[1]] * 4, train_masks=[[1]] * 4
    )
    with pytest.raises(OSError, match="disk full"):
        nnd.write(path, build)
    assert len(calls) == 3
    assert path.read_bytes() == old
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d.nndataset"]


def test_a_document_that_fails_mid_write_leaves_the_target_alone(tmp_path):
    class Boom:
        def __len__(self):
            return 2

        def __array__(self, *args, **kwargs):
            raise RuntimeError("boom")

    path = tmp_path / "d.nndataset"
    with pytest.raises(RuntimeError, match="boom"):
        nnd.write(path, nnd.Build({}, "s", "h", 2, train_docs=[[1, 2], Boom()]))
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------- neuralnet.cpp's helpers

ABC_SHA256 = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"


def test_the_magic_and_version_constants_are_the_file_labels():
    assert (nnd.MAGIC, nnd.VERSION, nnd.VOCAB_MAGIC, nnd.VOCAB_VERSION, nnd.LABEL_SIZE) == (
        b"NNDS",
        1,
        b"NNVC",
        1,
        8,
    )
    assert set(nnd.__all__) >= {
        "MAGIC",
        "VERSION",
        "VOCAB_MAGIC",
        "VOCAB_VERSION",
        "LABEL_SIZE",
        "sha256_hex",
        "write_file_label",
    }


def test_write_file_label_is_the_magic_then_a_u32_version(tmp_path):
    assert nnd.write_file_label(nnd.MAGIC, nnd.VERSION) == b"NNDS" + u32(1)
    assert nnd.write_file_label(nnd.VOCAB_MAGIC, nnd.VOCAB_VERSION) == b"NNVC" + u32(1)
    assert nnd.write_file_label(bytearray(b"ABCD"), 2**32 - 1) == b"ABCD" + u32(2**32 - 1)
    path = tmp_path / "d.nndataset"
    nnd.write(path, worked_build())
    assert path.read_bytes()[: nnd.LABEL_SIZE] == nnd.write_file_label(nnd.MAGIC, nnd.VERSION)
    assert nnd.write_nnvocab({})[:8] == nnd.write_file_label(nnd.VOCAB_MAGIC, 1)


@pytest.mark.parametrize(
    ("magic", "version", "error", "message"),
    [
        (b"NND", 1, ValueError, "4 bytes, got 3"),
        (b"NNDSX", 1, ValueError, "4 bytes, got 5"),
        ("NNDS", 1, TypeError, "bytes"),
        (b"NNDS", -1, ValueError, r"\[0, 2\*\*32\)"),
        (b"NNDS", 2**32, ValueError, r"\[0, 2\*\*32\)"),
        (b"NNDS", 1.0, TypeError, "int"),
        (b"NNDS", True, TypeError, "int"),
    ],
)
def test_write_file_label_refuses_what_a_label_cannot_hold(magic, version, error, message):
    with pytest.raises(error, match=message):
        nnd.write_file_label(magic, version)


def test_sha256_hex_hashes_bytes_or_a_files_content(tmp_path):
    assert nnd.sha256_hex(b"abc") == ABC_SHA256
    assert nnd.sha256_hex(bytearray(b"abc")) == nnd.sha256_hex(memoryview(b"abc")) == ABC_SHA256
    assert nnd.sha256_hex(b"") == (
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    )
    path = tmp_path / "corpus.txt"
    path.write_bytes(b"abc")
    assert nnd.sha256_hex(path) == nnd.sha256_hex(str(path)) == ABC_SHA256
    big = np.random.default_rng(0).integers(0, 256, 3 << 20, dtype=np.uint8).tobytes()
    path.write_bytes(big)
    assert nnd.sha256_hex(path) == nnd.sha256_hex(big) == hashlib.sha256(big).hexdigest()


def test_sha256_hex_of_a_missing_file_or_a_non_bytes_value_says_what_it_expected(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"nope\.txt.*a str is a path"):
        nnd.sha256_hex(str(tmp_path / "nope.txt"))
    with pytest.raises(FormatError, match="expected a regular file, found a directory"):
        nnd.sha256_hex(tmp_path)
    with pytest.raises(TypeError, match="bytes or a path, got int"):
        nnd.sha256_hex(12)


# ---------------------------------------------------------------- writing to a stream


def worked_bytes() -> bytes:
    return b"".join(piece for _, piece in WORKED)


def test_write_takes_a_binary_stream_as_well_as_a_path(tmp_path):
    buf = io.BytesIO()
    nnd.write(buf, worked_build())
    assert buf.getvalue() == worked_bytes()
    path = tmp_path / "s.nndataset"
    with path.open("wb") as f:
        nnd.write(f, worked_build())
        assert not f.closed  # the stream is the caller's
    assert path.read_bytes() == worked_bytes()


def test_the_seed_idiom_writes_the_label_then_the_dataset(tmp_path):
    # ofs << write_file_label(NNDATASET_MAGIC, NNDATASET_FILE_VERSION);
    # write_nndataset(ofs, b);
    path = tmp_path / "seed.nndataset"
    with path.open("wb") as f:
        f.write(nnd.write_file_label(nnd.MAGIC, nnd.VERSION))
        nnd.write(f, worked_build(), label=False)
    assert path.read_bytes() == worked_bytes()
    with nnd.open(path) as ds:
        assert ds.load_text("train").token_flow[:].tolist() == [1, 2, 3]


class Trickle:
    """A raw, unseekable stream that takes at most 5 bytes a call (as a pipe may)."""

    def __init__(self):
        self.data = bytearray()

    def write(self, b):
        chunk = bytes(memoryview(b).cast("B")[:5])
        self.data += chunk
        return len(chunk)


def test_a_stream_that_takes_part_of_each_write_still_gets_every_byte():
    out = Trickle()
    big = nnd.Build({}, "s", "h", 1, train_docs=[np.arange(1000)], created=0)
    nnd.write(out, big)
    assert bytes(out.data) == _written(big)
    out = Trickle()
    nnd.write(out, worked_build())
    assert bytes(out.data) == worked_bytes()


def test_write_refuses_a_text_stream_and_a_path_without_its_label(tmp_path):
    with pytest.raises(TypeError, match="binary stream"):
        nnd.write(io.StringIO(), worked_build())
    with (tmp_path / "t.txt").open("w") as f, pytest.raises(TypeError, match="binary stream"):
        nnd.write(f, worked_build())
    with pytest.raises(ValueError, match="label=False"):
        nnd.write(tmp_path / "d.nndataset", worked_build(), label=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.txt"]
    with pytest.raises(TypeError, match="a path or a binary stream"):
        nnd.write(12, worked_build())


def test_a_stream_gets_the_bytes_written_before_an_error(monkeypatch):
    monkeypatch.setattr(_nnwrite, "_FLUSH", 1)  # every document reaches the stream
    buf = io.BytesIO()
    with pytest.raises(ValueError, match=">= 0"):
        nnd.write(buf, nnd.Build({}, "s", "h", 1, train_docs=[[1], [-1]]))
    assert buf.getvalue()[:8] == b"NNDS" + u32(1)  # no atomicity for a stream: documented


# ---------------------------------------------------------------- slicing


@pytest.fixture(scope="module")
def corpus_file(tmp_path_factory):
    rng = np.random.default_rng(7)
    lengths = rng.integers(0, 40, size=300)
    lengths[::17] = 0
    lengths[5] = 3000  # one long document takes the copy-per-document path
    docs = [rng.integers(0, 2**64, size=n, dtype=np.uint64) for n in lengths]
    masks = [rng.integers(0, 2, size=n).astype(bool) for n in lengths]
    path = tmp_path_factory.mktemp("corpus") / "c.nndataset"
    nnd.write(
        path,
        nnd.Build(
            {}, "s", "h", len(docs), loss_scope="assistant", train_docs=docs, train_masks=masks
        ),
    )
    flow = np.concatenate(docs)
    ids = np.repeat(np.arange(1, len(docs) + 1), lengths)
    return path, flow, ids, np.concatenate(masks), lengths


def test_the_materialised_columns_equal_the_documents(corpus_file):
    path, flow, ids, mask, lengths = corpus_file
    with nnd.open(path) as ds:
        c = ds.load_text("train")
        assert np.array_equal(np.asarray(c.token_flow), flow)
        assert np.array_equal(np.asarray(c.doc_ids), ids)
        assert np.array_equal(np.asarray(c.loss_mask), mask)
        assert c.doc_token_offsets.tolist() == [0, *np.cumsum(lengths).tolist()]
        assert len(c.token_flow) == c.token_flow.shape[0] == c.token_flow.size == len(flow)
        assert np.asarray(c.token_flow, dtype=np.float64).dtype == np.float64
        assert list(c.doc_ids) == ids.tolist()


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_slices_equal_the_materialised_array(corpus_file, data):
    path, flow, ids, mask, _ = corpus_file
    n = len(flow)
    a = data.draw(st.integers(-n - 5, n + 5))
    b = data.draw(st.integers(-n - 5, n + 5))
    step = data.draw(st.sampled_from([None, 1, 2, 7, -1, -3]))
    with nnd.open(path) as ds:
        c = ds.load_text("train")
        for col, full in ((c.token_flow, flow), (c.doc_ids, ids), (c.loss_mask, mask)):
            got = col[a:b:step]
            assert got.dtype == full.dtype and np.array_equal(got, full[a:b:step])


def test_integer_and_boolean_indexing_equal_numpy(corpus_file):
    path, flow, ids, mask, _ = corpus_file
    rng = np.random.default_rng(1)
    idx = rng.integers(-len(flow), len(flow), size=(5, 7))
    pick = rng.random(len(flow)) < 0.3
    with nnd.open(path) as ds:
        c = ds.load_text("train")
        for col, full in ((c.token_flow, flow), (c.doc_ids, ids), (c.loss_mask, mask)):
            assert np.array_equal(col[idx], full[idx])
            assert np.array_equal(col[pick], full[pick])
            assert col[-1] == full[-1] and col[3] == full[3]
        with pytest.raises(BoundsError):
            c.token_flow[len(flow)]
        with pytest.raises(BoundsError):
            c.token_flow[[0, len(flow)]]
        with pytest.raises(TypeError):
            c.token_flow[1.5]
        with pytest.raises(ValueError, match="copied"):
            np.asarray(c.token_flow, copy=False)


def test_text_doc_tokens_are_read_only_views_of_the_map(corpus_file):
    path, flow, _, _, lengths = corpus_file
    with nnd.open(path) as ds:
        d = ds.text_doc("train", 5)
        assert d.doc_id == 6 and len(d.tokens) == 3000
        assert not d.tokens.flags.owndata and not d.tokens.flags.writeable
        start = int(np.sum(lengths[:5]))
        assert np.array_equal(d.tokens, flow[start : start + 3000])
        for bad in (-1, len(lengths)):
            with pytest.raises(BoundsError):
                ds.text_doc("train", bad)


def test_handles_share_close_and_pickle(corpus_file):
    path, flow, _, _, _ = corpus_file
    ds = nnd.open(path)
    other = ds.share()
    corpus = ds.load_text("train")
    ds.close()
    ds.close()
    assert ds.closed and not other.closed
    with pytest.raises(ValueError, match="closed"):
        corpus.token_flow[0:3]
    with pytest.raises(ValueError, match="closed"):
        ds.load_text("train")
    assert np.array_equal(other.load_text("train").token_flow[10:20], flow[10:20])
    again = pickle.loads(pickle.dumps(other))
    assert again.info.num_docs == other.info.num_docs
    moved = pickle.loads(pickle.dumps(other.load_text("train")))
    assert np.array_equal(moved.token_flow[:50], flow[:50])
    assert "LazyColumn(tokens" in repr(moved.token_flow) and "Nndataset(" in repr(again)
    for h in (other, again):
        h.close()


# ---------------------------------------------------------------- malformed files


def good_bytes(**kwargs) -> bytes:
    fields = {
        "vocab": {"n": 1},
        "source_path": "s",
        "source_sha256": "h",
        "source_docs": 3,
        "train_docs": [[1, 2], [3], [4, 5, 6]],
        "created": 0,
        **kwargs,
    }
    return _written(nnd.Build(**fields))


def _written(build: nnd.Build) -> bytes:
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "x.nndataset"
        nnd.write(p, build)
        return p.read_bytes()


def doc_index_at(data: bytes, subset: str = "train") -> int:
    """The byte offset of the subset's doc_index values."""
    fields, _ = kvrec.decode_fields(data, 8)
    sub = kvrec.lookup(fields, subset, kvrec.RECORD)
    return kvrec.lookup(sub.value, "doc_index", kvrec.UINT_ARRAY).offset


def open_error(tmp_path, data: bytes) -> FormatError:
    path = tmp_path / "bad.nndataset"
    path.write_bytes(data)
    with pytest.raises(FormatError) as e:
        nnd.open(path)
    assert e.value.path == os.fspath(path)
    return e.value


def patched(data: bytes, offset: int, fmt: str, *values: int) -> bytes:
    out = bytearray(data)
    struct.pack_into(fmt, out, offset, *values)
    return bytes(out)


def test_a_bad_magic_is_a_format_error_at_byte_0(tmp_path):
    e = open_error(tmp_path, b"NNXX" + good_bytes()[4:])
    assert e.offset == 0 and "magic" in str(e)
    e = open_error(tmp_path, b'{"vocab": []}')
    assert "JSON" in str(e)


def test_a_bad_version_is_a_format_error_at_byte_4(tmp_path):
    e = open_error(tmp_path, patched(good_bytes(), 4, "<I", 2))
    assert e.offset == 4 and "version 1, found 2" in str(e)


@pytest.mark.parametrize("size", range(8))
def test_a_file_shorter_than_its_label_is_a_format_error(tmp_path, size):
    e = open_error(tmp_path, good_bytes()[:size])
    assert e.offset == 0 and "8-byte" in str(e)


def test_a_truncated_arena_is_a_format_error_at_its_doc_index_entry(tmp_path):
    data = good_bytes()
    e = open_error(tmp_path, data[:-1])
    assert e.offset == doc_index_at(data) + 8 * 3 and "past the end" in str(e)


def test_a_truncated_root_record_is_a_format_error(tmp_path):
    data = good_bytes()
    for cut in range(8, doc_index_at(data) + 32, 7):
        e = open_error(tmp_path, data[:cut])
        assert e.offset is not None


def test_doc_index_that_does_not_increase_is_a_format_error(tmp_path):
    data = good_bytes()
    at = doc_index_at(data)
    first = struct.unpack_from("<Q", data, at)[0]
    e = open_error(tmp_path, patched(data, at + 8, "<Q", first))
    assert e.offset == at + 8 and "increase" in str(e)


def test_a_gap_that_is_not_its_block_is_a_format_error_at_the_block(tmp_path):
    data = good_bytes()
    at = doc_index_at(data)
    first = struct.unpack_from("<Q", data, at)[0]
    e = open_error(tmp_path, patched(data, first, "<Q", 3))  # doc 0 says 3 tokens, holds 2
    assert e.offset == first and "says 3 tokens" in str(e)
    e = open_error(tmp_path, patched(data, first, "<Q", 2**64 - 1))
    assert e.offset == first


def test_an_offset_past_the_end_is_a_format_error(tmp_path):
    data = good_bytes()
    at = doc_index_at(data)
    e = open_error(tmp_path, patched(data, at + 16, "<Q", len(data) + 8))
    assert e.offset == at + 16 and "past the end" in str(e)


def test_documents_that_do_not_start_after_the_root_are_a_format_error(tmp_path):
    data = good_bytes()
    at = doc_index_at(data)
    e = open_error(tmp_path, patched(data, at, "<Q", 8))
    assert e.offset == at and "start at byte" in str(e)


def test_trailing_bytes_after_the_documents_are_a_format_error(tmp_path):
    data = good_bytes()
    e = open_error(tmp_path, data + b"\0")
    assert e.offset == len(data) and "documents end" in str(e)


def crafted(root_of, arena: bytes = b"") -> bytes:
    """A dataset whose root record is ``root_of(arena_start)``."""
    size = kvrec.size_v2(root_of(0))
    return b"NNDS" + u32(1) + kvrec.encode_v2(root_of(8 + size), 8) + arena


def subset(start: int, *counts: int) -> dict:
    offsets = np.concatenate(([0], np.cumsum([8 + 8 * c for c in counts]))) + start
    return {"num_docs": len(counts), "doc_index": offsets.astype(np.uint64)}


ARENA = u64(1, 42)


@pytest.mark.parametrize(
    ("root_of", "message"),
    [
        (lambda s: {"train": subset(s, 1)}, "no companion"),
        (lambda s: {"companion": {"vocab": 1}, "train": subset(s, 1)}, "no vocab"),
        (lambda s: {"companion": {"vocab": {}}}, "no train"),
        (lambda s: {"companion": {"vocab": {}}, "train": {"doc_index": [s, s + 16]}}, "num_docs"),
        (lambda s: {"companion": {"vocab": {}}, "train": {"num_docs": 1}}, "doc_index"),
        (
            lambda s: {
                "companion": {"vocab": {}},
                "train": {"num_docs": 2, "doc_index": [s, s + 16]},
            },
            "needs 3 entries",
        ),
        (
            lambda s: {
                "companion": {"vocab": {}, "gen": {"loss_scope": "some"}},
                "train": subset(s, 1),
            },
            "loss_scope",
        ),
    ],
)
def test_missing_or_wrong_root_fields_are_format_errors(tmp_path, root_of, message):
    data = crafted(root_of, ARENA)
    e = open_error(tmp_path, data)
    assert message in str(e) and e.offset is not None and 8 <= e.offset < len(data)


def test_a_minimal_root_reads_with_the_cpp_defaults(tmp_path):
    data = crafted(lambda s: {"companion": {"vocab": {}}, "train": subset(s, 1)}, ARENA)
    path = tmp_path / "min.nndataset"
    path.write_bytes(data)
    with nnd.open(path) as ds:
        i = ds.info
        assert (i.kind, i.loss_scope, i.source_path, i.tool, i.created) == (
            "text",
            "all",
            None,
            None,
            None,
        )
        assert ds.text_doc("train", 0).tokens.tolist() == [42]


def test_a_tabular_dataset_opens_but_does_not_load_as_text(tmp_path):
    data = crafted(lambda s: {"kind": 1, "companion": {"vocab": {}}, "train": subset(s, 1)}, ARENA)
    path = tmp_path / "tab.nndataset"
    path.write_bytes(data)
    with nnd.open(path) as ds:
        assert ds.info.kind == "tabular"
        with pytest.raises(
            FormatError,
            match=r"expected a text dataset .* found kind 1 "
            r"\(tabular\)",
        ) as e:
            ds.load_text("train")
        assert (e.value.path, e.value.offset) == (str(path), 8)
        with pytest.raises(FormatError, match="tabular"):
            ds.text_doc("train", 0)


def test_fields_of_the_wrong_type_are_looked_past(tmp_path):
    # a lookup takes the first field with the key and the expected type, as in C++:
    # a Str "kind" is no kind at all, so the dataset is text
    def root_of(s):
        return {"kind": "tabular", "companion": {"vocab": {}}, "train": subset(s, 1)}

    path = tmp_path / "t.nndataset"
    path.write_bytes(crafted(root_of, ARENA))
    with nnd.open(path) as ds:
        assert ds.info.kind == "text"


# ---------------------------------------------------------------- .nnvocab


def test_nnvocab_bytes_round_trip_through_parse_nnvocab():
    vocab = {"size": 4, "pieces": "a\nb", "ids": [1, 2], "meta": {"x": 1}}
    data = nnd.write_nnvocab(vocab)
    assert data[:8] == b"NNVC" + u32(1)
    assert data[8:] == kvrec.encode_v2(vocab, 8)
    parsed = nnd.parse_nnvocab(data)
    assert parsed["ids"].tolist() == [1, 2]
    assert {k: v for k, v in parsed.items() if k != "ids"} == {
        "size": 4,
        "pieces": "a\nb",
        "meta": {"x": 1},
    }


def test_an_nnvocab_of_raw_token_bytes_is_byte_exact_both_ways():
    # Tokenizer::to_kvrec keeps the tokens as one Str of raw bytes: a u32 length, then
    # the bytes, per token (the content is opaque here: only its bytes matter)
    blob = b"".join(u32(1) + bytes([i]) for i in range(256))
    table = 4 + 30 + (4 + 5 + 1 + 8) + (4 + 4 + 1 + 8)
    hand = (
        b"NNVC"
        + u32(1)
        + u32(3)
        + SENTINEL
        + head(b"vocab", 1, 8 + table)
        + head(b"size", 0, 8 + table + 8 + len(blob))
        + u64(len(blob))
        + blob
        + u64(8, 256)
    )
    assert nnd.parse_nnvocab(hand) == {"vocab": blob, "size": 256}
    assert nnd.write_nnvocab({"vocab": blob, "size": 256}) == hand


def test_a_byte_level_nnvocab_opens_and_round_trips(tmp_path):
    data = nnd.write_nnvocab(byte_level_vocab())
    assert nnd.parse_nnvocab(data) == byte_level_vocab()
    assert nnd.write_nnvocab(nnd.parse_nnvocab(data)) == data
    path = tmp_path / "bytes.nnvocab"
    path.write_bytes(data)
    with nnd.open(path) as ds:
        assert ds.info.kind == "vocab" and ds.vocab["tokens"]["200"] == b"\xc8"


def test_an_nnvocab_opens_as_a_vocabulary_without_subsets(tmp_path):
    path = tmp_path / "v.nnvocab"
    path.write_bytes(nnd.write_nnvocab({"size": 3}))
    with nnd.open(path) as ds:
        assert ds.info.kind == "vocab" and ds.vocab == {"size": 3}
        assert (ds.info.num_docs, ds.info.has_test) == (0, False)
        with pytest.raises(FormatError, match="vocabulary"):
            ds.load_text("train")
        with pytest.raises(FormatError, match="vocabulary"):
            ds.text_doc("train", 0)


@pytest.mark.parametrize(
    ("data", "offset", "message"),
    [
        (b"NNDS" + u32(1) + kvrec.encode_v2({}, 8), 0, "found a dataset"),
        (b"NNVC" + u32(3) + kvrec.encode_v2({}, 8), 4, "version 1, found 3"),
        (b"NNVC" + u32(1) + kvrec.encode_v2({}, 8) + b"x", 42, "ends at byte 42"),
        (b"NNVC" + u32(1) + kvrec.encode_v2({"a": 1}, 0), 42, "address"),
        (b"NNVC", 0, "8-byte"),
        (b'{"a": 1}', 0, "JSON"),
    ],
)
def test_parse_nnvocab_rejects_malformed_bytes(data, offset, message):
    with pytest.raises(FormatError, match=message) as e:
        nnd.parse_nnvocab(data, path="v.nnvocab")
    assert e.value.offset == offset and e.value.path == "v.nnvocab"


def test_the_module_examples_pass():
    assert doctest.testmod(nnd).failed == 0


# ---------------------------------------------------------------- fuzzing

FUZZ_SEEDS = [
    _written(worked_build()),
    b"".join(piece for _, piece in WORKED_RAW),
    good_bytes(test_docs=[[7], [], [8, 9]], license="L"),
    nnd.write_nnvocab({"size": 3, "r": {"a": [1]}}),
]


@pytest.fixture(scope="module")
def fuzz_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("fuzz")


def read_everything(ds: nnd.Nndataset) -> None:
    if ds.info.kind != "text":
        return
    for name in ("train", "test") if ds.info.has_test else ("train",):
        c = ds.load_text(name)
        for col in (c.token_flow, c.doc_ids, c.loss_mask):
            np.asarray(col)
            col[1:5]
        for i in range(c.num_docs):
            ds.text_doc(name, i)


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_mutated_and_truncated_files_open_or_raise_format_error(fuzz_dir, data):
    raw = bytearray(data.draw(st.sampled_from(FUZZ_SEEDS)))
    for _ in range(data.draw(st.integers(0, 4))):
        i = data.draw(st.integers(0, len(raw) - 1))
        raw[i] = data.draw(st.integers(0, 255))
    raw = raw[: data.draw(st.integers(0, len(raw)))] if data.draw(st.booleans()) else raw
    path = fuzz_dir / "f.nndataset"
    path.write_bytes(bytes(raw))
    try:
        with nnd.open(path) as ds:
            read_everything(ds)
    except FormatError as e:
        assert e.offset is not None and e.path == os.fspath(path)
    try:
        nnd.parse_nnvocab(bytes(raw))
    except FormatError as e:
        assert e.offset is not None


def test_sha256_hex_of_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(FormatError, match="FIFO"):
        nnd.sha256_hex(fifo)
