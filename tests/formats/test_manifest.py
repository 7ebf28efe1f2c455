"""Manifests: JSON lists of shard files, written atomically, checked field by field and
against every shard, and opened as one dataset (a concat of the shards)."""

from __future__ import annotations

import hashlib
import json
import os

import numpy as np
import pytest

import feedline as fl
from feedline.formats.manifest import Shard, describe, read_manifest, write_manifest
from feedline.manifest import open_manifest
from feedline.records import record_from_schema


class Point(fl.Record):
    """A point with its row number."""

    xy = fl.field((2,), "float32")
    i = fl.field((), "int64")


# Point's twin with int32 coordinates: its files have the same sizes as Point's.
IntPoint = record_from_schema(
    {
        **Point.schema(),
        "fields": [
            {**f, "dtype": "<i4" if f["name"] == "xy" else f["dtype"]}
            for f in Point.schema()["fields"]
        ],
    },
    "IntPoint",
)


def _flr_shards(d, sizes=(3, 5, 4), prefix="p"):
    paths, start = [], 0
    for k, n in enumerate(sizes):
        p = d / f"{prefix}-{k}.flr"
        fl.recfile.write(
            p, Point, {"xy": np.full((n, 2), k, np.float32), "i": np.arange(start, start + n)}
        )
        paths.append(p)
        start += n
    return paths


@pytest.fixture
def flr_manifest(tmp_path):
    paths = _flr_shards(tmp_path)
    write_manifest(tmp_path / "manifest.json", paths)
    return tmp_path / "manifest.json"


def _edit(path, change):
    doc = json.loads(path.read_text())
    change(doc)
    path.write_text(json.dumps(doc))


def _refused(path, *words):
    with pytest.raises(fl.FormatError) as info:
        open_manifest(path).close()
    assert info.value.path == os.fspath(path)
    for w in words:
        assert w in str(info.value)
    return info.value


# -- round trips ------------------------------------------------------------------------
def test_a_manifest_round_trips_its_shards_in_order(flr_manifest, tmp_path):
    info = read_manifest(flr_manifest)
    assert info.format == "flr" and info.record.same_schema(Point)
    assert [s.name for s in info.shards] == ["p-0.flr", "p-1.flr", "p-2.flr"]
    assert [s.rows for s in info.shards] == [3, 5, 4] and len(info) == 12
    for k, s in enumerate(info.shards):
        assert s == describe(tmp_path / f"p-{k}.flr")
        assert s.size == os.path.getsize(tmp_path / f"p-{k}.flr")
    info.verify()


def test_a_manifest_opens_as_a_concat_of_named_datasets(flr_manifest):
    with open_manifest(flr_manifest) as m:
        assert len(m) == 12 and [ds.name for ds in m.datasets] == ["p-0.flr", "p-1.flr", "p-2.flr"]
        assert [ds.salt for ds in m.datasets] == [fl.salt(f"p-{k}.flr") for k in range(3)]
        order = fl.Order(m.seq())
        assert [order[p].source_ordinal for p in (0, 2, 3, 7, 8, 11)] == [0, 0, 1, 1, 2, 2]
        with fl.Loader(m.seq(), 5) as loader:
            ids = np.concatenate([b.i[: b.meta.size] for b in loader])
        with fl.Loader(m.seq().shuffle(3), 4) as loader:
            shuffled = np.concatenate([b.i[: b.meta.size] for b in loader])
    np.testing.assert_array_equal(ids, np.arange(12))
    assert sorted(shuffled.tolist()) == list(range(12)) and shuffled.tolist() != list(range(12))


def test_a_loader_keeps_the_shards_open_after_the_manifest_closes(flr_manifest):
    m = open_manifest(flr_manifest)
    loader = fl.Loader(m.seq(), 12)
    m.close()
    np.testing.assert_array_equal(next(iter(loader)).i, np.arange(12))
    loader.close()


def test_shard_names_may_be_in_subdirectories(tmp_path):
    (tmp_path / "parts").mkdir()
    paths = _flr_shards(tmp_path / "parts", (2, 2))
    info = write_manifest(tmp_path / "manifest.json", paths)
    assert [s.name for s in info.shards] == ["parts/p-0.flr", "parts/p-1.flr"]
    with open_manifest(tmp_path / "manifest.json") as m:
        assert len(m) == 4


def test_a_manifest_is_written_from_entries_and_rewritten_atomically(flr_manifest, tmp_path):
    entries = read_manifest(flr_manifest).shards
    write_manifest(flr_manifest, entries[::-1])
    assert [s.name for s in read_manifest(flr_manifest).shards] == ["p-2.flr", "p-1.flr", "p-0.flr"]
    assert sorted(os.listdir(tmp_path)) == ["manifest.json", "p-0.flr", "p-1.flr", "p-2.flr"]


def test_an_nndataset_manifest_lists_documents_and_tokens_and_gives_windows(tmp_path):
    docs = [[[5, 6, 7], [8, 9]], [[1, 2, 3, 4]], [[10] * 7, [11]]]
    paths = []
    for k, train in enumerate(docs):
        p = tmp_path / f"t-{k}.nndataset"
        test = [[42, 43]] if k == 1 else ()
        fl.nndataset.write(
            p,
            fl.nndataset.Build(
                {}, "c.txt", "", len(train) + len(test), train_docs=train, test_docs=test
            ),
        )
        paths.append(p)
    info = write_manifest(tmp_path / "manifest.json", paths)
    assert [(s.docs, s.tokens, s.test_docs, s.test_tokens) for s in info.shards] == [
        (2, 5, 0, 0),
        (1, 4, 1, 2),
        (2, 8, 0, 0),
    ]
    with open_manifest(tmp_path / "manifest.json") as m:
        assert m.format == "nndataset" and len(m) == 5 and m.tokens == 17
        assert [h.info.num_docs for h in m.handles] == [2, 1, 2]
        order = fl.Order(m.windows(3))
        with fl.Loader(m.windows(3), 8) as loader:
            (batch,) = list(loader)
        with pytest.raises(TypeError, match="windows"):
            m.seq()
    # windows never cross shards: 5 tokens -> 2 windows, 4 -> 1, 8 -> 3
    assert len(order) == 6
    assert batch.input_ids[:, 0].tolist() == [5, 8, 1, 10, 10, 10]
    assert int(batch.loss_mask.sum()) == 4 + 3 + 7


# -- refusals ---------------------------------------------------------------------------
def test_a_missing_shard_is_refused_naming_the_manifest_and_the_shard(flr_manifest, tmp_path):
    os.unlink(tmp_path / "p-1.flr")
    _refused(flr_manifest, "shard 'p-1.flr'", "found none")


def test_a_shard_of_another_size_is_refused(flr_manifest, tmp_path):
    _flr_shards(tmp_path, (3, 6, 4))  # p-1 now holds 6 rows
    _refused(flr_manifest, "shard 'p-1.flr'", "bytes")


def test_a_listed_length_that_the_file_does_not_have_is_refused(flr_manifest):
    _edit(flr_manifest, lambda d: d["shards"][2].update(rows=5))
    _refused(flr_manifest, "shard 'p-2.flr'", "rows = 5", "has 4")


def test_a_shard_holding_another_record_is_refused(flr_manifest, tmp_path):
    fl.recfile.write(
        tmp_path / "p-0.flr", IntPoint, {"xy": np.zeros((3, 2), np.int32), "i": np.arange(3)}
    )
    assert os.path.getsize(tmp_path / "p-0.flr") == read_manifest(flr_manifest).shards[0].size
    _refused(flr_manifest, "shard 'p-0.flr'", "different record")


def test_a_shard_whose_bytes_changed_fails_verification(flr_manifest, tmp_path):
    p = tmp_path / "p-1.flr"
    data = bytearray(p.read_bytes())
    data[-1] ^= 1  # a data byte: the header still parses, the size is the same
    p.write_bytes(bytes(data))
    with open_manifest(flr_manifest) as m, pytest.raises(fl.FormatError, match="sha256"):
        m.verify()


def _flip(path, at):
    data = bytearray(path.read_bytes())
    data[at] ^= 1  # the size stays the same: only opening the shard can notice
    path.write_bytes(bytes(data))


def _sha256_of(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_shard_failing_its_own_checks_is_refused_naming_the_manifest(flr_manifest, tmp_path):
    _flip(tmp_path / "p-1.flr", 9)  # the version: the preamble's checksum no longer holds
    err = _refused(flr_manifest, "shard 'p-1.flr'", "preamble checksum")
    assert isinstance(err.__cause__, fl.FormatError)
    assert err.__cause__.path == os.fspath(tmp_path / "p-1.flr")


def test_an_nndataset_shard_failing_its_own_checks_is_refused_naming_the_manifest(tmp_path):
    p = tmp_path / "t-0.nndataset"
    fl.nndataset.write(p, fl.nndataset.Build({}, "c.txt", "", 1, train_docs=[[1, 2, 3]]))
    write_manifest(tmp_path / "manifest.json", [p])
    _flip(p, 0)
    _refused(tmp_path / "manifest.json", "shard 't-0.nndataset'")


def test_verify_names_the_manifest_when_a_listed_shard_fails_to_open(flr_manifest, tmp_path):
    p = tmp_path / "p-2.flr"
    _flip(p, 9)
    # The manifest lists the damaged bytes' hash, so only the shard's own checks object.
    _edit(flr_manifest, lambda d: d["shards"][2].update(sha256=_sha256_of(p)))
    with pytest.raises(fl.FormatError) as info:
        read_manifest(flr_manifest).verify()
    assert info.value.path == os.fspath(flr_manifest)
    assert "shard 'p-2.flr'" in str(info.value) and "preamble checksum" in str(info.value)


def test_verify_names_the_manifest_when_a_shard_is_gone(flr_manifest, tmp_path):
    info = read_manifest(flr_manifest)
    os.unlink(tmp_path / "p-0.flr")
    with pytest.raises(fl.FormatError) as err:
        info.verify()
    assert err.value.path == os.fspath(flr_manifest)
    assert "shard 'p-0.flr'" in str(err.value) and "found none" in str(err.value)


@pytest.mark.parametrize(
    ("change", "words"),
    [
        (lambda d: d.update(format="parquet"), ["format 'flr' or 'nndataset'", "'parquet'"]),
        (lambda d: d.update(kind="something.else"), ["feedline.manifest"]),
        (lambda d: d.update(version=2), ["version 1", "found 2"]),
        (lambda d: d.update(comment="hi"), ["unknown: ['comment']"]),
        (lambda d: d.pop("record"), ["missing: ['record']"]),
        (lambda d: d.update(shards=[]), ["non-empty list"]),
        (lambda d: d["shards"][0].update(owner="me"), ["shard 'p-0.flr'", "unknown: ['owner']"]),
        (lambda d: d["shards"][1].pop("sha256"), ["shard 'p-1.flr'", "missing: ['sha256']"]),
        (lambda d: d["shards"][1].update(size="12"), ["shard 'p-1.flr'", "`size`"]),
        (lambda d: d["shards"][1].update(rows=-1), ["shard 'p-1.flr'", "`rows`"]),
        (lambda d: d["shards"][1].update(rows=True), ["shard 'p-1.flr'", "`rows`"]),
        (lambda d: d["shards"][1].update(sha256="ABC"), ["shard 'p-1.flr'", "`sha256`"]),
        (lambda d: d["shards"][1].update(name="../p-1.flr"), ["shards[1]", "inside"]),
        (lambda d: d["shards"][1].update(name="/tmp/p-1.flr"), ["shards[1]", "inside"]),
        (lambda d: d["shards"][1].update(name="p-1.nndataset"), ["shards[1]", ".flr files"]),
        (lambda d: d["shards"].append(d["shards"][0]), ["'p-0.flr' is listed twice"]),
        (lambda d: d["record"].update(fields="none"), ["`record`"]),
        (lambda d: d["record"]["fields"][0].update(dims=[float("inf")]), ["`record`", "inf"]),
        (lambda d: d["record"]["fields"][0].update(dims=[2.7]), ["`record`", "2.7"]),
        (lambda d: d["record"]["fields"][0].update(dims=[True]), ["`record`", "True"]),
        (lambda d: d["record"]["fields"][0].update(shape=[3]), ["`record`", "stored shape [3]"]),
        (lambda d: d.update(shards=[3]), ["shards[0]: expected an object"]),
    ],
)
def test_a_tampered_manifest_is_refused(flr_manifest, change, words):
    _edit(flr_manifest, change)
    _refused(flr_manifest, *words)


@pytest.mark.parametrize(
    ("text", "words"),
    [
        (b'{"kind": "feedline.manifest", "version": 1', ["UTF-8 JSON"]),
        (b"\xff\xfe{}", ["UTF-8 JSON"]),
        (b'{"kind": "feedline.manifest", "kind": "feedline.manifest"}', ["appears twice"]),
        (b"[1, 2]", ["expected a JSON object"]),
    ],
)
def test_a_manifest_that_is_not_a_json_object_is_refused(flr_manifest, text, words):
    flr_manifest.write_bytes(text)
    _refused(flr_manifest, *words)


def test_an_nndataset_manifest_with_wrong_counts_or_a_record_is_refused(tmp_path):
    p = tmp_path / "t-0.nndataset"
    fl.nndataset.write(p, fl.nndataset.Build({}, "c.txt", "", 1, train_docs=[[1, 2, 3]]))
    m = tmp_path / "manifest.json"
    write_manifest(m, [p])
    _edit(m, lambda d: d["shards"][0].update(tokens=4))
    _refused(m, "shard 't-0.nndataset'", "tokens = 4", "has 3")
    write_manifest(m, [p])
    _edit(m, lambda d: d.update(record=Point.schema()))
    _refused(m, "unknown: ['record']")


def test_write_manifest_refuses_what_a_reader_would(tmp_path):
    (a,) = _flr_shards(tmp_path, (2,))
    with pytest.raises(ValueError, match="at least one shard"):
        write_manifest(tmp_path / "manifest.json", [])
    (tmp_path / "sub").mkdir()
    with pytest.raises(ValueError, match="not inside the manifest's directory"):
        write_manifest(tmp_path / "sub" / "manifest.json", [a])
    bad = Shard("p-0.flr", 1, "0" * 64, rows=2)
    with pytest.raises(fl.FormatError, match="lists 1 bytes"):
        write_manifest(tmp_path / "manifest.json", [bad], record=Point)
    with pytest.raises(fl.FormatError, match="found none"):
        write_manifest(
            tmp_path / "manifest.json", [Shard("q.flr", 1, "0" * 64, rows=2)], record=Point
        )
    assert sorted(os.listdir(tmp_path)) == ["p-0.flr", "sub"]  # nothing written


def test_a_missing_manifest_is_a_file_not_found_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such manifest"):
        read_manifest(tmp_path / "manifest.json")


def test_the_module_docstring_examples_pass():
    import doctest

    import feedline.formats.manifest

    assert doctest.testmod(feedline.formats.manifest).failed == 0


# -- shards that are not what their names say ------------------------------------------------


def test_a_shard_symlinked_out_of_the_manifests_directory_is_refused(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (secret,) = _flr_shards(outside, sizes=(4,), prefix="secret")
    data = tmp_path / "data"
    data.mkdir()
    paths = _flr_shards(data, sizes=(3,))
    os.symlink(secret, data / "link.flr")
    with pytest.raises(fl.FormatError, match=r"leading to .*secret-0\.flr") as info:
        write_manifest(data / "manifest.json", [*paths, data / "link.flr"])
    assert not (data / "manifest.json").exists()
    # a manifest written by hand, naming the link
    write_manifest(data / "manifest.json", paths)
    link = describe(data / "link.flr", name="link.flr")
    _edit(data / "manifest.json", lambda doc: doc["shards"].append(link.to_json()))
    _refused(data / "manifest.json", "link.flr", "symlink out of the directory")
    assert info.value.path == str(data / "manifest.json")


def test_a_symlink_inside_the_manifests_directory_is_a_shard_like_any_other(tmp_path):
    paths = _flr_shards(tmp_path, sizes=(3, 5))
    (tmp_path / "sub").mkdir()
    os.symlink(paths[1], tmp_path / "sub" / "b.flr")
    info = write_manifest(tmp_path / "manifest.json", [paths[0], tmp_path / "sub" / "b.flr"])
    with open_manifest(tmp_path / "manifest.json") as m:
        assert len(m) == 8 and [s.name for s in info.shards] == ["p-0.flr", "sub/b.flr"]


@pytest.mark.parametrize("how", ["symlink", "hard link"])
def test_one_file_listed_under_two_names_is_refused(tmp_path, how):
    paths = _flr_shards(tmp_path, sizes=(3, 5))
    (tmp_path / "sub").mkdir()
    (os.symlink if how == "symlink" else os.link)(paths[0], tmp_path / "sub" / "s.flr")
    with pytest.raises(fl.FormatError, match=r"same file as shard 'p-0.flr'"):
        write_manifest(tmp_path / "manifest.json", [*paths, tmp_path / "sub" / "s.flr"])
    write_manifest(tmp_path / "manifest.json", paths)
    twin = describe(tmp_path / "sub" / "s.flr", name="sub/s.flr")
    _edit(tmp_path / "manifest.json", lambda doc: doc["shards"].append(twin.to_json()))
    _refused(tmp_path / "manifest.json", "sub/s.flr", "p-0.flr", "inode")


def test_a_shard_name_that_is_not_utf8_is_refused_when_writing_and_reading(tmp_path):
    (good,) = _flr_shards(tmp_path, sizes=(3,))
    bad = os.fsdecode(os.fsencode(str(tmp_path)) + b"/caf\xe9.flr")  # Latin-1 bytes
    fl.recfile.write(bad, Point, {"xy": np.zeros((2, 2), np.float32), "i": np.arange(2)})
    with pytest.raises(fl.FormatError, match="UTF-8 file name"):
        write_manifest(tmp_path / "manifest.json", [good, bad])
    assert not (tmp_path / "manifest.json").exists()
    write_manifest(tmp_path / "manifest.json", [good])
    entry = {**describe(bad).to_json()}
    text = (tmp_path / "manifest.json").read_text()
    doc = json.loads(text)
    doc["shards"].append(entry)
    (tmp_path / "manifest.json").write_text(json.dumps(doc))  # "caf\udce9.flr", escaped
    _refused(tmp_path / "manifest.json", "UTF-8 file name")


@pytest.mark.parametrize("kind", ["fifo", "directory"])
def test_a_manifest_path_that_is_not_a_regular_file_is_refused_without_blocking(tmp_path, kind):
    import signal

    path = tmp_path / "manifest.json"
    os.mkfifo(path) if kind == "fifo" else path.mkdir()

    def hang(signum, frame):
        raise TimeoutError("open_manifest blocked")

    previous = signal.signal(signal.SIGALRM, hang)
    signal.setitimer(signal.ITIMER_REAL, 5.0)
    try:
        _refused(path, "regular file")
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
