"""Many sources read as one (``loader._many``): a concat or mix of shards with ragged
fields, unmapped or mapped alike (in process or in worker processes), gives, batch for
batch, what the source-by-source read gives; every record once a pass; its errors (a
file truncated under the reader, a string that is not UTF-8, a map's) are that read's;
and what it cannot read goes source by source."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import feedline as fl
from feedline._base import spans
from feedline.loader import _many

pytestmark = pytest.mark.skipif(not spans.available(), reason="no compiled span copies here")


class Doc(fl.Record, dims={"T": fl.Varying(max=40), "P": None}):
    tokens = fl.field("T", "int32", pad=-1)
    tags = fl.field("T", "int8", pad=-100)
    points = fl.field(("P", 3), "float32")  # a fixed inner axis
    title = fl.field((), "str")
    blob = fl.field((), "bytes")
    label = fl.field((), "int64")  # the record's place across all shards
    grid = fl.field((2, 2), "float64")


def _docs(start: int, n: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    lengths = rng.integers(0, 41, n)
    points = rng.integers(0, 5, n)
    return {
        "tokens": [np.arange(k, dtype=np.int32) + i for i, k in enumerate(lengths)],
        "tags": [np.full(k, i % 7, np.int8) for i, k in enumerate(lengths)],
        "points": [rng.standard_normal((p, 3)).astype(np.float32) for p in points],
        "title": ["é" * int(k % 4) + str(start + i) for i, k in enumerate(lengths)],
        "blob": [bytes(range(k % 9)) for k in lengths],
        "label": np.arange(start, start + n),
        "grid": rng.standard_normal((n, 2, 2)),
    }


@pytest.fixture
def shards(tmp_path):
    sizes = [37, 1, 120, 64, 5, 90, 33, 70, 12, 48, 3, 81]
    paths, start = [], 0
    for k, n in enumerate(sizes):
        path = tmp_path / f"s{k:02d}.flr"
        fl.recfile.write(path, Doc, _docs(start, n, k))
        paths.append(path)
        start += n
    return paths, start


def _seq(paths, in_memory=()):
    parts = []
    for k, p in enumerate(paths):
        f = fl.recfile.open(p)
        if k in in_memory:  # a dict of columns: in-memory ragged columns
            cols = f.getitems(np.arange(len(f)))
            f.close()
            parts.append(fl.Seq.source(fl.Dataset(Doc, cols)))
        else:
            parts.append(fl.Seq.source(fl.Dataset(Doc, f)))
    return fl.Seq.concat(parts).shuffle(4)


def _batches(seq, monkeypatch, together: bool, **options) -> list:
    with monkeypatch.context() as m:
        if not together:
            m.setattr(_many, "MIN_SOURCES", 1 << 30)
        loader = fl.Loader(seq.repeat(2), 50, seed=1, workers=0, **options)
        out = [_as_dict(b) for b in loader]
        assert (_many.many_sources(loader) is not None) == together
        loader.close()
    return out


def _as_dict(batch) -> dict:
    out = dict(batch.fields)
    m = batch.meta
    out["meta"] = {
        "mask": np.asarray(m.mask),
        "positions": np.asarray(m.positions),
        "ords": np.asarray(m.source_ordinals),
        "recs": np.asarray(m.record_indices),
        "lengths": {d: np.asarray(v) for d, v in m.lengths.items()},
    }
    return out


def _same(a, b) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert set(x) == set(y)
        for k in x:
            u, v = x[k], y[k]
            if k == "meta":
                for mk in ("mask", "positions", "ords", "recs"):
                    assert np.array_equal(u[mk], v[mk]), mk
                assert u["lengths"].keys() == v["lengths"].keys()
                for d in u["lengths"]:
                    assert np.array_equal(u["lengths"][d], v["lengths"][d]), d
            elif isinstance(u, np.ndarray):
                assert u.dtype == v.dtype and u.shape == v.shape and np.array_equal(u, v), k
            else:
                assert u == v, k


@pytest.mark.parametrize(
    "in_memory", [(), (0, 3, 7), tuple(range(12))], ids=["files", "both", "dicts"]
)
@pytest.mark.parametrize("last", ["short", "drop_last", "pad"])
def test_many_shards_give_the_source_by_source_batches(shards, monkeypatch, in_memory, last):
    drop_last = last == "drop_last"
    options = {"drop_last": True} if drop_last else {"pad": True} if last == "pad" else {}
    paths, total = shards
    seq = _seq(paths, in_memory)
    fast = _batches(seq, monkeypatch, True, **options)
    slow = _batches(seq, monkeypatch, False, **options)
    _same(fast, slow)
    if last == "pad":  # the padded rows hold the fields' pad values
        end = fast[-1]
        assert len(end["label"]) == 50 and (end["tokens"][~end["meta"]["mask"]] == -1).all()
    labels = np.concatenate([b["label"][b["meta"]["mask"]] for b in fast])
    at = np.concatenate([b["meta"]["positions"][b["meta"]["mask"]] for b in fast])
    for e in range(2):  # each record once an epoch (every one but the dropped rows')
        got = labels[(at >= e * total) & (at < (e + 1) * total)]
        assert len(np.unique(got)) == len(got)
        if not drop_last or e == 0:
            assert sorted(got.tolist()) == list(range(total))
    assert len(labels) == (2 * total // 50 * 50 if drop_last else 2 * total)


def _noisy(example, rng):
    """A map of every shard alike: its draws seeded by the example's position."""
    example["grid"] = example["grid"] + rng.standard_normal((2, 2))
    example["tokens"] = example["tokens"][::-1].copy()
    return example


def _mapped(paths, fn=_noisy):
    parts = [fl.Seq.source(fl.Dataset(Doc, fl.recfile.open(p)).map(fn, seed=3)) for p in paths]
    return fl.Seq.concat(parts).shuffle(4)


@pytest.mark.parametrize("drop_last", [False, True])
def test_shards_mapped_alike_give_the_source_by_source_batches(shards, monkeypatch, drop_last):
    paths, _ = shards
    seq = _mapped(paths)
    fast = _batches(seq, monkeypatch, True, drop_last=drop_last)
    slow = _batches(seq, monkeypatch, False, drop_last=drop_last)
    _same(fast, slow)
    plain = _batches(_seq(paths), monkeypatch, True, drop_last=drop_last)
    for b, p in zip(fast, plain):  # the map ran: reversed tokens, noisy grids
        assert np.array_equal(b["label"], p["label"]) and not np.array_equal(b["grid"], p["grid"])
        lengths = b["meta"]["lengths"]["T"]
        r = int(np.argmax(lengths))
        assert b["tokens"][r, : lengths[r]].tolist() == p["tokens"][r, : lengths[r]][::-1].tolist()


def test_shards_mapped_alike_in_worker_processes_give_the_same_batches(shards, monkeypatch):
    paths, _ = shards
    seq = _mapped(paths)
    here = _batches(seq, monkeypatch, True)
    loader = fl.Loader(seq.repeat(2), 50, seed=1, workers=2)
    _same([_as_dict(b) for b in loader], here)
    # what a worker receives (the datasets pickled together) is read as one there too
    shipped = pickle.loads(pickle.dumps(loader._datasets))
    fields = shipped[0].record.fields
    assert _many.ManyCache().get(shipped, fields, False) is not None
    loader.close()


def test_a_map_error_names_the_item_as_source_by_source(shards, monkeypatch):
    paths, _ = shards

    def fails(example):
        if int(example["label"]) == 100:
            raise ValueError("no 100")
        return example

    errors = []
    for together in (True, False):
        with monkeypatch.context() as m:
            if not together:
                m.setattr(_many, "MIN_SOURCES", 1 << 30)
            loader = fl.Loader(_mapped(paths, fails), 600, seed=1, workers=0)
            with pytest.raises(ValueError, match="no 100") as e:
                next(iter(loader))
            errors.append(e.value.__notes__)
            loader.close()
    assert errors[0] == errors[1] and "in the map" in errors[0][0]


def test_the_rows_are_the_records_values(shards, monkeypatch):
    paths, _ = shards
    want = {}
    start = 0
    for k, p in enumerate(paths):
        n = len(fl.recfile.open(p))
        cols = _docs(start, n, k)
        for i in range(n):
            want[start + i] = {name: cols[name][i] for name in cols}
        start += n
    for b in _batches(_seq(paths), monkeypatch, True):
        lengths = b["meta"]["lengths"]
        for r in np.flatnonzero(b["meta"]["mask"]):
            w = want[int(b["label"][r])]
            k = len(w["tokens"])
            assert lengths["T"][r] == k and lengths["P"][r] == len(w["points"])
            assert b["tokens"][r, :k].tolist() == w["tokens"].tolist()
            assert (b["tokens"][r, k:] == -1).all() and (b["tags"][r, k:] == -100).all()
            assert np.array_equal(b["points"][r, : len(w["points"])], w["points"])
            assert b["title"][r] == w["title"] and b["blob"][r] == w["blob"]
            assert np.array_equal(b["grid"][r], w["grid"])


def test_what_cannot_be_read_as_one_goes_source_by_source(shards, monkeypatch):
    paths, _ = shards
    seq = _seq(paths)
    for options in ({"check_values": True},):
        loader = fl.Loader(seq, 50, seed=1, workers=0, **options)
        assert _many.many_sources(loader) is None
        next(iter(loader))
        loader.close()
    mapped = fl.Seq.concat(  # each shard its own function: mapped differently
        [fl.Seq.source(fl.Dataset(Doc, fl.recfile.open(p)).map(lambda ex: ex)) for p in paths]
    )
    loader = fl.Loader(mapped, 50, seed=1, workers=0)
    assert _many.many_sources(loader) is None
    loader.close()
    one = fl.Dataset(Doc, fl.recfile.open(paths[0])).shuffle(1)
    loader = fl.Loader(one, 50, seed=1, workers=0)
    assert _many.many_sources(loader) is None  # one source: read as it is
    loader.close()
    two = fl.Seq.concat([fl.Seq.source(fl.Dataset(Doc, fl.recfile.open(p))) for p in paths[:2]])
    loader = fl.Loader(two, 50, seed=1, workers=0)
    assert _many.many_sources(loader) is not None  # two already pay
    loader.close()


class Grid(fl.Record, dims={"H": None, "W": None}):
    img = fl.field(("H", "W"), "uint8")


def test_a_field_of_two_varying_axes_goes_source_by_source(tmp_path, monkeypatch):
    rng = np.random.default_rng(0)
    parts = []
    for k in range(10):
        imgs = [rng.integers(0, 255, (h, w), dtype=np.uint8) for h, w in rng.integers(1, 5, (9, 2))]
        fl.recfile.write(tmp_path / f"{k}.flr", Grid, {"img": imgs})
        parts.append(fl.Seq.source(fl.Dataset(Grid, fl.recfile.open(tmp_path / f"{k}.flr"))))
    loader = fl.Loader(fl.Seq.concat(parts).shuffle(1), 16, seed=1, workers=0)
    assert _many.many_sources(loader) is None
    assert sum(int(b.meta.mask.sum()) for b in loader) == 90


def test_a_refreshed_source_is_read_again(monkeypatch):
    cols = [
        {
            "x": fl.Ragged.from_examples(
                [np.full(k % 3 + 1, s, np.int16) for k in range(4)], (None,), np.int16
            )
        }
        for s in range(10)
    ]

    class R(fl.Record, dims={"T": None}):
        x = fl.field("T", "int16")

    datasets = [fl.Dataset(R, c) for c in cols]
    loader = fl.Loader(fl.Seq.concat([fl.Seq.source(d) for d in datasets]), 40, seed=0, workers=0)
    first = next(iter(loader))
    assert sorted(set(first.x[first.x >= 0].tolist())) == list(range(10))
    many = _many.many_sources(loader)
    assert many is not None
    datasets[4].source["x"] = fl.Ragged.from_examples(
        [np.full(2, 99, np.int16) for _ in range(4)], (None,), np.int16
    )
    datasets[4].refresh()
    assert _many.many_sources(loader) is not many  # the columns were taken again
    loader.reset()
    again = next(iter(loader))
    assert 99 in again.x and 4 not in again.x


_TRUNCATE = textwrap.dedent("""
    import os, sys, numpy as np, feedline as fl
    from feedline.loader import _many
    class R(fl.Record, dims={"T": None}):
        x = fl.field("T", "int32")
    paths = []
    for k in range(10):
        p = os.path.join(sys.argv[1], f"{k}.flr")
        fl.recfile.write(p, R, {"x": [np.arange(50 + k, dtype=np.int32)] * 2000})
        paths.append(p)
    seq = fl.Seq.concat([fl.Seq.source(fl.Dataset(R, fl.recfile.open(p))) for p in paths])
    loader = fl.Loader(seq.shuffle(1), 64, seed=1, workers=0)
    it = iter(loader)
    next(it)
    assert _many.many_sources(loader) is not None
    os.truncate(paths[6], 300)  # in place, under the open reader: its pages past 300 are gone
    try:
        next(it)
    except fl.FormatError as e:
        assert e.path == paths[6] and "truncated" in str(e), str(e)
        print("ok")
""")


def test_a_shard_truncated_under_the_reader_is_its_format_error_not_sigbus(tmp_path):
    done = subprocess.run(
        [sys.executable, "-c", _TRUNCATE, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", (
        done.returncode,
        done.stderr[-2000:],
    )


def test_a_shard_string_that_is_not_utf8_is_its_format_error(tmp_path, monkeypatch):
    class T(fl.Record):
        s = fl.field((), "str")

    parts = []
    for k in range(10):
        path = tmp_path / f"{k}.flr"
        fl.recfile.write(path, T, {"s": [f"QQQQ{k}-{i}" for i in range(20)]})
        if k == 3:
            data = path.read_bytes()
            path.write_bytes(data.replace(b"QQQQ3-7", b"\xffQQQ3-7"))  # opened lazily
        parts.append(fl.Seq.source(fl.Dataset(T, fl.recfile.open(path))))
    seq = fl.Seq.concat(parts).shuffle(2)
    errors = []
    for together in (True, False):
        with monkeypatch.context() as m:
            if not together:
                m.setattr(_many, "MIN_SOURCES", 1 << 30)
            loader = fl.Loader(seq, 200, seed=1, workers=0)
            with pytest.raises(fl.FormatError, match="row 7 of a string column is not UTF-8") as e:
                next(iter(loader))
            errors.append((str(e.value), e.value.path, e.value.offset))
            loader.close()
    assert errors[0] == errors[1] and errors[0][1] == str(tmp_path / "3.flr")
    assert os.path.exists(errors[0][1])


def test_sources_mapped_alike_over_records_of_other_kinds_are_read_apart(monkeypatch):
    # A str field, a bytes field and a uint8 (T,) field are all columns of uint8 spans:
    # read as one, every source's rows reached the map as the first source's kind (a
    # hostile review's reproducer: the bytes rows' lengths came out as the str rows').
    class A(fl.Record):
        s = fl.field((), "str")

    class B(fl.Record):
        s = fl.field((), "bytes")

    class Out(fl.Record):
        n = fl.field((), "int64")

    def count(ex):
        return {"n": len(ex["s"])}

    words = ["é" * k + "x" for k in range(6)]
    parts = [
        fl.Seq.source(fl.Dataset(A, {"s": words}).map(count, record=Out)),
        fl.Seq.source(fl.Dataset(B, {"s": [w.encode() for w in words]}).map(count, record=Out)),
    ]
    loader = fl.Loader(fl.Seq.concat(parts), 12, seed=1, workers=0)
    assert next(iter(loader)).n.tolist() == [1, 2, 3, 4, 5, 6, 1, 3, 5, 7, 9, 11]
    assert _many.many_sources(loader) is None
