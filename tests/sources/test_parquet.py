"""fl.sources.parquet: Parquet files read at random by row group, typed and exact."""

from __future__ import annotations

import datetime
import pickle
import threading
from pathlib import Path

import numpy as np
import pytest

import feedline as fl

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

N = 1000


def table(n: int = N, start: int = 0):
    i = np.arange(start, start + n)
    return pa.table(
        {
            "x": i.astype(np.float32),
            "y": i * 2,
            "ok": i % 3 == 0,
            "s": [f"r{k}é" for k in i],
            "b": [bytes([k % 256]) * (k % 4) for k in i],
            "v": pa.array([list(range(k % 5)) for k in i], pa.list_(pa.int32())),
            "fx": pa.array([[k, k + 1, k + 2] for k in i], pa.list_(pa.float64(), 3)),
        }
    )


@pytest.fixture
def path(tmp_path):
    p = tmp_path / "t.parquet"
    pq.write_table(table(), p, row_group_size=100)
    return str(p)


def check_rows(batch: dict, idx: np.ndarray) -> None:
    assert batch["x"].tolist() == idx.astype(np.float32).tolist()
    assert batch["y"].tolist() == (idx * 2).tolist()
    assert batch["ok"].tolist() == (idx % 3 == 0).tolist()
    assert batch["s"].strings() == [f"r{k}é" for k in idx]
    assert batch["b"].blobs() == [bytes([k % 256]) * (k % 4) for k in idx]
    assert [batch["v"].example(r).tolist() for r in range(len(idx))] == [
        list(range(k % 5)) for k in idx
    ]
    assert batch["fx"].tolist() == [[k, k + 1, k + 2] for k in idx]


def test_the_record_is_inferred_from_the_arrow_schema(path):
    rec = fl.sources.parquet(path).record
    shapes = {k: (f.shape, f.kind, str(f.dtype)) for k, f in rec.fields.items()}
    assert shapes == {
        "x": ((), "array", "float32"),
        "y": ((), "array", "int64"),
        "ok": ((), "array", "bool"),
        "s": ((), "str", "object"),
        "b": ((), "bytes", "object"),
        "v": ((None,), "array", "int32"),
        "fx": ((3,), "array", "float64"),
    }


def test_a_shuffled_batch_reads_its_rows_exactly_with_a_small_cache(path):
    src = fl.sources.parquet(path, cache_groups=3)
    rng = np.random.default_rng(0)
    for _ in range(5):  # batches touching more groups than the cache holds
        idx = rng.permutation(N)[:200]
        check_rows(src.getitems(idx), idx)
    assert src._slots == 3 and len(src._lru) <= 3


def test_a_batch_decodes_only_the_row_groups_it_touches(path, monkeypatch):
    src = fl.sources.parquet(path)
    read = []
    real, real_many = pq.ParquetFile.read_row_group, pq.ParquetFile.read_row_groups
    monkeypatch.setattr(
        pq.ParquetFile,
        "read_row_group",
        lambda self, g, **kw: read.append(g) or real(self, g, **kw),
    )
    monkeypatch.setattr(  # the groups one batch misses are read in one call
        pq.ParquetFile,
        "read_row_groups",
        lambda self, gs, *a, **kw: read.extend(gs) or real_many(self, gs, *a, **kw),
    )
    check_rows(src.getitems(np.array([5, 950, 7])), np.array([5, 950, 7]))
    assert sorted(read) == [0, 9]
    src.getitems(np.array([1, 951]))  # cached: nothing decoded again
    assert sorted(read) == [0, 9]


def test_only_the_record_fields_columns_are_decoded(path, monkeypatch):
    class Two(fl.Record):
        y = fl.field((), "int64")
        s = fl.field((), "str")

    seen = []
    real = pq.ParquetFile.read_row_group
    monkeypatch.setattr(
        pq.ParquetFile,
        "read_row_group",
        lambda self, g, columns=None, **kw: seen.append(columns) or real(self, g, columns, **kw),
    )
    src = fl.sources.parquet(path, Two)
    assert list(src.getitems([3])) == ["y", "s"] and src[3]["s"] == "r3é"
    assert seen == [["y", "s"]]
    assert list(fl.sources.parquet(path, columns=["v", "x"]).record.fields) == ["v", "x"]


def test_several_files_and_a_glob_are_one_source_in_order(tmp_path):
    for k in range(3):
        pq.write_table(table(100, 100 * k), tmp_path / f"part{k}.parquet", row_group_size=30)
    src = fl.sources.parquet(str(tmp_path / "part*.parquet"))
    assert len(src) == 300 and src.n_groups == 12
    idx = np.random.default_rng(1).permutation(300)[:64]
    check_rows(src.getitems(idx), idx)
    listed = fl.sources.parquet([tmp_path / "part0.parquet", tmp_path / "part2.parquet"])
    assert listed.getitems([150])["y"].tolist() == [500]


def test_it_pickles_as_its_paths_and_reopens_the_files(path):
    src = fl.sources.parquet(path)
    src.getitems([1, 2, 3])
    data = pickle.dumps(src)
    assert len(data) < 4000  # no decoded row groups travel
    back = pickle.loads(data)
    idx = np.arange(0, N, 37)
    check_rows(back.getitems(idx), idx)


def test_threads_reading_at_once_get_their_own_rows(path):
    src = fl.sources.parquet(path, cache_groups=2)
    errors = []

    def read(seed):
        rng = np.random.default_rng(seed)
        try:
            for _ in range(20):
                idx = rng.integers(0, N, 50)
                check_rows(src.getitems(idx), idx)
        except Exception as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=read, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


def same(example: dict) -> dict:
    return example


def xs(loader) -> list[int]:
    return [int(v) for b in loader for v in b.y[: b.meta.size] // 2]


@pytest.mark.parametrize("workers", [0, 2])
def test_a_loader_reads_every_row_once_with_workers_seed_and_shards(path, workers):
    src = fl.sources.parquet(path, cache_groups=4)
    ds = fl.Dataset(src.record, src)
    # a map makes the gathers costly: the loader then reads in its worker processes,
    # which receive the source pickled and open the file themselves
    source = ds.map(same) if workers else src
    seen = []
    for rank in range(3):
        got = xs(fl.Loader(source, 64, seed=4, shard=(rank, 3), workers=workers))
        seen += got
    assert sorted(seen) == list(range(N))
    one = xs(fl.Loader(source, 64, seed=4, workers=workers))
    assert sorted(one) == list(range(N)) and one != list(range(N))
    assert one == xs(fl.Loader(source, 64, seed=4, workers=workers))


def test_a_loader_resumes_where_it_stopped(path):
    src = fl.sources.parquet(path)
    whole = xs(fl.Loader(src, 50, seed=9))
    loader = fl.Loader(src, 50, seed=9)
    it = iter(loader)
    first = [int(v) for _ in range(7) for v in next(it).y // 2]
    state = loader.state_dict()
    again = fl.Loader(fl.sources.parquet(path), 50, seed=9)
    again.load_state_dict(state)
    assert first + xs(again) == whole


def test_a_seq_mixes_two_parquet_sources_with_source_ordinals(tmp_path):
    pq.write_table(table(40), tmp_path / "a.parquet", row_group_size=16)
    pq.write_table(table(60, 1000), tmp_path / "b.parquet", row_group_size=16)
    a = fl.sources.parquet(tmp_path / "a.parquet")
    b = fl.sources.parquet(tmp_path / "b.parquet")
    pairs = []
    for batch in fl.Loader(fl.Seq.concat([fl.Seq.source(a), fl.Seq.source(b)]), 16, seed=2):
        n = batch.meta.size
        pairs += zip(batch.meta.source_ordinals[:n].tolist(), (batch.y[:n] // 2).tolist())
    expected = [(0, k) for k in range(40)] + [(1, k) for k in range(1000, 1060)]
    assert sorted(pairs) == expected


def test_a_file_that_is_not_parquet_is_a_format_error_naming_it(tmp_path):
    p = tmp_path / "not.parquet"
    p.write_bytes(b"name,value\n1,2\n" * 20)
    with pytest.raises(fl.FormatError, match=r"not.parquet.*expected a Parquet file"):
        fl.sources.parquet(p)


def test_a_truncated_file_is_a_format_error_naming_it(path, tmp_path):
    data = Path(path).read_bytes()
    cut = tmp_path / "cut.parquet"
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(fl.FormatError, match=r"cut.parquet"):
        fl.sources.parquet(cut)


def test_a_footer_pyarrow_cannot_interpret_is_a_format_error_naming_the_file(tmp_path):
    """Every pyarrow error on a bad file is a FormatError (here ArrowNotImplementedError:
    the footer's Arrow schema declares an integer of 4 bits)."""
    import base64

    good = tmp_path / "good.parquet"
    pq.write_table(pa.table({"id": np.arange(5)}), good)
    data = good.read_bytes()
    old = pq.read_metadata(good).metadata[b"ARROW:schema"]
    schema = bytearray(base64.b64decode(old))
    assert schema.count(64) == 1  # the int64's bit width
    schema[schema.index(64)] = 4
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(data.replace(old, base64.b64encode(bytes(schema))))
    with pytest.raises(pa.ArrowNotImplementedError):
        pq.ParquetFile(bad)
    with pytest.raises(fl.FormatError, match=r"bad\.parquet: expected a Parquet file") as got:
        fl.sources.parquet(bad)
    assert isinstance(got.value.__cause__, pa.ArrowException)


def test_a_corrupt_row_group_is_a_format_error_naming_the_file_and_the_group(path, tmp_path):
    data = bytearray(Path(path).read_bytes())
    meta = pq.read_metadata(path).row_group(4)
    start = min(meta.column(c).data_page_offset for c in range(meta.num_columns))
    end = max(
        meta.column(c).data_page_offset + meta.column(c).total_compressed_size
        for c in range(meta.num_columns)
    )
    data[start:end] = b"\xff" * (end - start)
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(bytes(data))
    src = fl.sources.parquet(bad)
    check_rows(src.getitems([1, 999]), np.array([1, 999]))  # other groups still read
    with pytest.raises(fl.FormatError, match=r"bad.parquet.*row group 4 \(rows 400 to 500"):
        src.getitems([450])
    # in a batch that misses several groups (read in one call), the bad one is named
    with pytest.raises(fl.FormatError, match=r"bad.parquet.*row group 4 \(rows 400 to 500"):
        fl.sources.parquet(bad).getitems([150, 250, 450, 650])


@pytest.mark.parametrize(
    ("column", "why"),
    [
        (pa.array([{"a": 1}] * 3), "struct"),
        (pa.array([datetime.date(2020, 1, 1)] * 3), "date or time"),
        (pa.array([[("k", 1)]] * 3, pa.map_(pa.string(), pa.int64())), "map"),
        (pa.array([["a"], ["b"], []]), "lists of strings|one str per example"),
        (pa.array(["a", "b", "a"]).dictionary_encode(), "dictionary"),
    ],
)
def test_a_column_with_no_field_is_a_record_error_naming_it(tmp_path, column, why):
    p = tmp_path / "t.parquet"
    pq.write_table(pa.table({"fine": [1, 2, 3], "odd": column}), p)
    with pytest.raises(fl.RecordError, match=f"t.parquet: column 'odd' .*({why})"):
        fl.sources.parquet(p)
    assert len(fl.sources.parquet(p, columns=["fine"])) == 3  # left out: readable


def test_nulls_are_a_format_error_naming_the_file_group_column_and_row(tmp_path):
    p = tmp_path / "t.parquet"
    pq.write_table(pa.table({"x": [1.0, 2.0, None, 4.0]}), p, row_group_size=2)
    src = fl.sources.parquet(p)
    assert src.getitems([0, 1])["x"].tolist() == [1.0, 2.0]
    with pytest.raises(fl.FormatError, match=r"t.parquet: row group 1: column 'x' .*null.*row 0"):
        src.getitems([3])


def test_a_failed_whole_file_load_leaves_the_source_reading_on(tmp_path):
    """A shuffled first batch decodes every group at once; a null in the last field of
    the last group fails it, and the next batches read as if it had not been tried."""
    p = tmp_path / "t.parquet"
    b = list(range(400))
    b[350] = None
    s = [f"r{k}" for k in range(400)]
    pq.write_table(
        pa.table({"a": np.arange(400), "s": s, "b": pa.array(b, pa.int64())}), p, row_group_size=100
    )
    src = fl.sources.parquet(p)
    with pytest.raises(fl.FormatError, match=r"t\.parquet: row group 3: column 'b' .*null"):
        src.getitems(np.arange(0, 400, 7))
    got = src.getitems([1, 2, 3])
    assert got["a"].tolist() == got["b"].tolist() == [1, 2, 3]
    assert got["s"].strings() == ["r1", "r2", "r3"]
    idx = np.arange(0, 300, 7)
    got = src.getitems(idx)
    assert got["a"].tolist() == got["b"].tolist() == idx.tolist()
    assert got["s"].strings() == [f"r{k}" for k in idx]
    with pytest.raises(fl.FormatError, match=r"row group 3: column 'b' .*null.*row 50;"):
        src.getitems(np.arange(0, 400, 7))


@pytest.mark.parametrize("bad", ["a null", "a list of the wrong length"])
def test_a_bad_value_in_a_whole_file_read_names_its_file_group_and_row(tmp_path, bad):
    """A shuffled batch over every group of two files (decoded as one table) names the
    value's own file, row group and row there, as a read of its group alone does."""

    class Pair(fl.Record):
        v = fl.field(2, "int64")

    rows = [[k, k] for k in range(200)]
    pq.write_table(pa.table({"v": rows}), tmp_path / "p0.parquet", row_group_size=100)
    rows[130] = None if bad == "a null" else [7]  # p1.parquet, row group 1, row 30
    pq.write_table(pa.table({"v": rows}), tmp_path / "p1.parquet", row_group_size=100)
    paths = [tmp_path / "p0.parquet", tmp_path / "p1.parquet"]
    why = (
        r"has 1 missing \(null\) values, the first at row 30;"
        if bad == "a null"
        else (r"row 30 is a list of 1, field `v` takes 2")
    )
    for idx in ([330], np.arange(0, 400, 3)):
        with pytest.raises(fl.FormatError, match=rf"p1\.parquet: row group 1: column 'v' {why}"):
            fl.sources.parquet(paths, Pair).getitems(idx)


def test_a_string_that_is_not_utf8_is_a_format_error_naming_its_group_and_row(tmp_path):
    p = tmp_path / "t.parquet"
    raw = [f"row {k}".encode() for k in range(300)]
    raw[123] = b"bad \xff\xfe"
    s = pa.array(raw, pa.binary()).view(pa.string())  # pyarrow does not validate
    pq.write_table(pa.table({"id": np.arange(300), "s": s}), p, row_group_size=100)
    src = fl.sources.parquet(p)
    assert src.getitems([5, 250])["s"].strings() == ["row 5", "row 250"]
    for idx in ([123], np.arange(300)):  # its group alone, then every group at once
        with pytest.raises(fl.FormatError, match=r"t\.parquet: row group 1: column 's' row 23 "):
            fl.sources.parquet(p).getitems(idx)
    with pytest.raises(fl.FormatError, match="not UTF-8"):
        list(fl.Loader(fl.sources.parquet(p), 50, workers=0))


def test_a_record_field_the_file_lacks_or_cannot_fill_is_a_record_error(path):
    class Missing(fl.Record):
        z = fl.field((), "float32")

    class Wrong(fl.Record):
        s = fl.field((), "int32")

    with pytest.raises(fl.RecordError, match=r"field `z` is not a column.*it has"):
        fl.sources.parquet(path, Missing)
    with pytest.raises(fl.RecordError, match=r"field `s` is .*int32.*the column is string"):
        fl.sources.parquet(path, Wrong)


def test_lists_read_into_a_fixed_dim_are_checked_per_row(tmp_path):
    class Fixed(fl.Record):
        v = fl.field(2, "int64")

    p = tmp_path / "t.parquet"
    pq.write_table(pa.table({"v": [[1, 2], [3, 4], [5]]}), p)
    src = fl.sources.parquet(p, Fixed)
    with pytest.raises(fl.FormatError, match=r"column 'v' row 2 is a list of 1, field `v` takes 2"):
        src.getitems([0])


def test_a_cast_the_record_asks_for_is_made_by_the_dataset(path):
    class Wide(fl.Record):
        x = fl.field((), "float64")
        y = fl.field((), "int32")  # int64 to int32: not safe, checked per batch

    src = fl.sources.parquet(path, Wide)
    assert not src.fixed_layout and fl.sources.parquet(path).fixed_layout
    batch = fl.Dataset(Wide, src).getitems([10, 20])
    assert batch["x"].dtype == np.float64 and batch["y"].tolist() == [20, 40]


def test_the_default_cache_holds_as_many_row_groups_as_its_bytes_allow(path, monkeypatch):
    from feedline.sources import _parquet

    assert fl.sources.parquet(path).cache_groups == 10  # a small file: every group
    meta = pq.read_metadata(path)
    leaves = max(
        sum(rg.column(i).total_uncompressed_size for i in range(rg.num_columns))
        for rg in map(meta.row_group, range(meta.num_row_groups))
    )
    monkeypatch.setattr(_parquet, "CACHE_BYTES", 3 * leaves)
    assert fl.sources.parquet(path).cache_groups == 3
    assert fl.sources.parquet(path, columns=["x"]).cache_groups == 10  # fewer bytes a group
    assert fl.sources.parquet(path, cache_groups=2).cache_groups == 2


def test_without_pyarrow_the_error_names_the_extra(path, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "pyarrow", None)
    with pytest.raises(ImportError, match=r"pip install 'feedline\[parquet\]'"):
        fl.sources.parquet(path)


@pytest.mark.parametrize("first", ["in order", "last group first", "uneven groups"])
def test_a_whole_cache_gives_the_same_rows_however_its_groups_were_read(tmp_path, first):
    """Once every row group is cached a batch is one take per field; the rows are those
    of the file whether the groups came in order (their rows in place: no search of the
    groups), out of order, or in groups of several sizes."""
    p = tmp_path / "w.parquet"
    if first == "uneven groups":
        writer = pq.ParquetWriter(p, table(1).schema)
        for lo, n in [(0, 100), (100, 250), (350, 650)]:
            writer.write_table(table(n, lo), row_group_size=n)
        writer.close()
    else:
        pq.write_table(table(), p, row_group_size=100)
    src = fl.sources.parquet(p)
    want = table().to_pydict()
    if first == "last group first":
        src.getitems([N - 1])
    rng = np.random.default_rng(3)
    for _ in range(3):
        idx = rng.permutation(N)[:300]
        got = src.getitems(idx)
        assert got["y"].tolist() == [want["y"][i] for i in idx]
        assert got["s"].strings() == [want["s"][i] for i in idx]
        assert got["fx"].tolist() == [want["fx"][i] for i in idx]
    assert src._direct is (first == "in order")


def _same_size_table(shift: int):
    """A table whose file is byte for byte the size of another shift's (plain encoding,
    no compression or statistics): a file written over in place keeps its size."""
    i = np.arange(N, dtype=np.int64) + shift
    return pa.table({"y": i})


def _write_same_size(p, shift: int) -> None:
    pq.write_table(
        _same_size_table(shift),
        p,
        row_group_size=100,
        compression="none",
        use_dictionary=False,
        write_statistics=False,
    )


def test_a_file_written_over_in_place_while_open_is_a_format_error_not_a_mix(tmp_path):
    """Row groups already decoded are of the old version, the next ones would be of the
    new: the next read is refused, naming the file, in this process and in a worker's
    copy (which opens the file again)."""
    import os

    p = tmp_path / "w.parquet"
    _write_same_size(p, 0)
    src = fl.sources.parquet(str(p), cache_groups=1)
    assert src.getitems(np.arange(0, 10))["y"].tolist() == list(range(10))
    size, ino = os.path.getsize(p), os.stat(p).st_ino
    _write_same_size(p, 10_000)  # truncated and written again: the same inode and size
    assert (os.path.getsize(p), os.stat(p).st_ino) == (size, ino)
    with pytest.raises(fl.FormatError, match=r"w\.parquet.*written over in place"):
        src.getitems(np.arange(500, 510))
    copy = pickle.loads(pickle.dumps(src))
    with pytest.raises(fl.FormatError, match="written over in place"):
        copy.getitems(np.arange(0, 10))


def test_a_file_replaced_while_open_reads_on_as_it_was(tmp_path):
    """A rename over the file (as writers should) leaves the open source its old rows."""
    import os

    p = tmp_path / "r.parquet"
    _write_same_size(p, 0)
    src = fl.sources.parquet(str(p), cache_groups=1)
    assert src.getitems(np.arange(0, 10))["y"].tolist() == list(range(10))
    _write_same_size(tmp_path / "new.parquet", 10_000)
    os.replace(tmp_path / "new.parquet", p)
    assert src.getitems(np.arange(500, 510))["y"].tolist() == list(range(500, 510))
    assert src.getitems(np.arange(0, 10))["y"].tolist() == list(range(10))


class Narrow(fl.Record):
    y = fl.field((), "int32")


@pytest.mark.parametrize("workers", [0, 1])
def test_a_value_the_record_cannot_hold_names_its_file_row_group_and_row(tmp_path, workers):
    """An int64 column read as int32 by ``record=``: the row that does not fit is named by
    its item and by where it lies in the files, from a Loader (also from a worker)."""
    p = tmp_path / "big.parquet"
    y = np.arange(1000, dtype=np.int64)
    y[730] = 2**40
    pq.write_table(pa.table({"y": y}), p, row_group_size=100)
    src = fl.sources.parquet(str(p), record=Narrow)
    with pytest.raises(
        fl.ShapeError,
        match=r"item 730: 1099511627776 does not fit int32; "
        r"the item is row 30 of row group 7 of .*big\.parquet",
    ):
        for _ in fl.Loader(src, 64, seed=1, workers=workers):
            pass


class TwoNarrow(fl.Record):
    a = fl.field((), "int32")
    b = fl.field((), "int32")


class TokensAndLabel(fl.Record, dims={"T": fl.Varying(max=4), "C": 10}):
    tokens = fl.field("T", "int64")
    label = fl.field((), "int64", domain=fl.Index("C"))


class Label(fl.Record, dims={"C": 10}):
    label = fl.field((), "int64", domain=fl.Index("C"))


def test_the_location_is_the_row_the_error_names(tmp_path):
    """Field `a` fails at row 5 and `b` at row 2: the error is `a`'s, and so is its row;
    a field failing in another way at an earlier row (a domain) does not displace it."""
    p = tmp_path / "two.parquet"
    a = np.arange(1000, dtype=np.int64)
    b = a.copy()
    a[5] = b[2] = 2**40
    pq.write_table(pa.table({"a": a, "b": b}), p, row_group_size=100)
    with pytest.raises(fl.ShapeError, match=r"field `a` of item 5: .*; the item is row 5 of row"):
        list(fl.Loader(fl.sources.parquet(str(p), record=TwoNarrow), 64))
    p = tmp_path / "m.parquet"
    toks = [[1, 2]] * 1000
    toks[5] = [1] * 9
    lab = np.zeros(1000, np.int64)
    lab[2] = 99
    tokens = pa.array(toks, pa.list_(pa.int64()))
    pq.write_table(pa.table({"tokens": tokens, "label": lab}), p, row_group_size=100)
    src = fl.sources.parquet(str(p), record=TokensAndLabel)
    with pytest.raises(
        fl.ShapeError, match=r"item 5 has T = 9.*; the item is row 5 of row group 0"
    ):
        list(fl.Loader(src, 64, check_values=True))


def test_a_domain_error_is_located_when_the_file_has_the_records_types(tmp_path):
    """The file's types are the record's (its batches are trusted as they decode): the
    domain check's error is located too."""
    p = tmp_path / "dom.parquet"
    lab = np.arange(1000, dtype=np.int64) % 10
    lab[730] = 15
    pq.write_table(pa.table({"label": lab}), p, row_group_size=100)
    src = fl.sources.parquet(str(p), record=Label)
    with pytest.raises(
        fl.DomainError, match=r"item 730 .*got 15; the item is row 30 of row group 7"
    ):
        list(fl.Loader(src, 64, check_values=True))


def test_locate_names_a_row_in_range_or_refuses_it(path):
    src = fl.sources.parquet(path)
    assert src.locate(0) == f"row 0 of row group 0 of {path}"
    assert src.locate(999) == f"row 99 of row group 9 of {path}"
    for bad in (-1, 1000):
        with pytest.raises(fl.BoundsError, match="outside"):
            src.locate(bad)


def test_after_a_refused_read_the_next_reads_are_refused_alike(tmp_path):
    """A read that fails loses no cache slot: the next ones fail the same way (they were
    KeyErrors once the slots ran out), and a Loader goes on reporting it per batch."""
    p = tmp_path / "w.parquet"
    _write_same_size(p, 0)
    src = fl.sources.parquet(str(p), cache_groups=1)
    src.getitems(np.arange(3))
    _write_same_size(p, 10_000)
    for _ in range(3):
        with pytest.raises(fl.FormatError, match="written over in place"):
            src.getitems(np.arange(500, 503))
    loader = fl.Loader(src, 100)
    for _ in range(3):
        with pytest.raises(fl.FormatError, match="written over in place"):
            next(loader)


def test_a_source_holds_one_descriptor_a_file(tmp_path):
    import os

    if not os.path.isdir("/proc/self/fd"):
        pytest.skip("needs /proc/self/fd")
    import gc

    for k in range(40):
        _write_same_size(tmp_path / f"p{k:02}.parquet", k)
    gc.collect()  # descriptors of earlier tests' dropped objects
    before = len(os.listdir("/proc/self/fd"))
    src = fl.sources.parquet(str(tmp_path / "p*.parquet"))
    assert len(os.listdir("/proc/self/fd")) - before == 40
    del src
    gc.collect()
    assert len(os.listdir("/proc/self/fd")) == before


def test_a_file_replaced_while_open_is_refused_where_a_worker_opens_it_again(tmp_path):
    """The source's own process reads the old rows on; a pickled copy (a worker's) would
    read the new file, and says the file was replaced, even one of the same size and
    modification time."""
    import os

    p = tmp_path / "r.parquet"
    _write_same_size(p, 0)
    src = fl.sources.parquet(str(p), cache_groups=1)
    src.getitems(np.arange(3))
    _write_same_size(tmp_path / "new.parquet", 10_000)
    st = os.stat(p)
    os.utime(tmp_path / "new.parquet", ns=(st.st_atime_ns, st.st_mtime_ns))
    os.replace(tmp_path / "new.parquet", p)
    assert src.getitems(np.arange(500, 503))["y"].tolist() == [500, 501, 502]
    copy = pickle.loads(pickle.dumps(src))
    with pytest.raises(fl.FormatError, match=r"r\.parquet: .*another at its path \(replaced"):
        copy.getitems(np.arange(3))


def test_an_error_of_a_source_without_locate_is_raised_as_it_was():
    """Only a source that says where its items lie changes the error: another's is the
    check's own, not a copy caused by itself."""

    class Plain:
        record = Narrow

        def __len__(self):
            return 4

        def getitems(self, idx):
            return {"y": np.array([1, 2, 2**40, 3], dtype=np.int64)[np.asarray(idx)]}

    ds = fl.Dataset(Narrow, Plain())
    with pytest.raises(fl.ShapeError, match="item 2: 1099511627776 does not fit int32") as got:
        ds.getitems(np.arange(4))
    assert got.value.__cause__ is None and "the item is" not in str(got.value)
