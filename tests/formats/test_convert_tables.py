"""convert from tables read through Arrow (Parquet, Arrow/Feather, CSV, JSONL, HF
directories) to .flr, and from .flr back to Parquet."""

from __future__ import annotations

import json

import numpy as np
import pytest

import feedline as fl
from feedline.cli import main
from feedline.formats.convert import convert, sniff

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

from ..sources.test_parquet import table as parquet_table  # noqa: E402

N = 2500


def table(n: int = N):
    """The Parquet source tests' table, of ``N`` rows here."""
    return parquet_table(n)


def check_flr(path, n: int = N, names=None) -> None:
    i = np.arange(n)
    with fl.recfile.open(path) as f:
        assert len(f) == n
        cols = f.columns
        names = names or list(cols)
        assert list(f.record.fields) == names
        want = {
            "x": lambda: np.testing.assert_array_equal(cols["x"], i.astype(np.float32)),
            "y": lambda: np.testing.assert_array_equal(cols["y"], i * 2),
            "ok": lambda: np.testing.assert_array_equal(cols["ok"], i % 3 == 0),
            "s": lambda: cols["s"].strings() == [f"r{k}é" for k in i] or pytest.fail("s"),
            "b": lambda: (
                cols["b"].blobs() == [bytes([k % 256]) * (k % 4) for k in i] or pytest.fail("b")
            ),
            "v": lambda: (
                [f[r]["v"].tolist() for r in range(0, n, 97)]
                == [list(range(k % 5)) for k in range(0, n, 97)]
                or pytest.fail("v")
            ),
            "fx": lambda: np.testing.assert_array_equal(
                cols["fx"], np.stack([i, i + 1, i + 2], 1).astype(np.float64)
            ),
        }
        for name in names:
            want[name]()


@pytest.fixture
def parquet(tmp_path):
    p = tmp_path / "t.parquet"
    pq.write_table(table(), p, row_group_size=300)
    return p


def test_a_parquet_file_converts_to_flr_row_group_by_row_group(parquet, tmp_path):
    assert sniff(parquet) == "parquet"
    seen = []
    n = convert(parquet, tmp_path / "t.flr", progress=lambda done, total: seen.append(done))
    assert n == N
    check_flr(tmp_path / "t.flr")
    assert seen[-1] == N


def test_parquet_to_flr_to_parquet_gives_the_same_table(parquet, tmp_path):
    convert(parquet, tmp_path / "t.flr")
    assert convert(tmp_path / "t.flr", tmp_path / "back.parquet") == N
    back = pq.read_table(tmp_path / "back.parquet")
    assert back.replace_schema_metadata(None).equals(pq.read_table(parquet))
    assert back.to_pydict() == table().to_pydict()


def test_columns_choose_the_fields_in_their_order(parquet, tmp_path):
    assert main(["convert", str(parquet), str(tmp_path / "c.flr"), "--columns", "s,x"]) == 0
    check_flr(tmp_path / "c.flr", names=["s", "x"])
    convert(tmp_path / "c.flr", tmp_path / "c.parquet", columns=["x"])
    assert pq.read_table(tmp_path / "c.parquet").column_names == ["x"]


def test_a_glob_or_list_of_parquet_files_converts_as_one_table(tmp_path):
    t = table()
    pq.write_table(t.slice(0, 1000), tmp_path / "a.parquet")
    pq.write_table(t.slice(1000), tmp_path / "b.parquet")
    assert convert(str(tmp_path / "*.parquet"), tmp_path / "g.flr") == N
    check_flr(tmp_path / "g.flr")
    assert convert([tmp_path / "a.parquet", tmp_path / "b.parquet"], tmp_path / "l.flr") == N


@pytest.mark.parametrize("how", ["file", "feather", "stream"])
def test_arrow_ipc_files_and_streams_convert(tmp_path, how):
    import pyarrow.feather as feather
    import pyarrow.ipc as ipc

    t = table()
    p = tmp_path / (
        "t.arrows" if how == "stream" else f"t.{'feather' if how != 'file' else 'arrow'}"
    )
    if how == "feather":
        feather.write_feather(t, p, chunksize=700)
    else:
        opener = ipc.new_stream if how == "stream" else ipc.new_file
        with pa.OSFile(str(p), "wb") as sink, opener(sink, t.schema) as w:
            for b in t.to_batches(max_chunksize=700):
                w.write_batch(b)
    assert convert(p, tmp_path / "t.flr") == N
    check_flr(tmp_path / "t.flr")


def test_a_csv_file_converts_with_types_inferred(tmp_path):
    import pyarrow.csv as pcsv

    t = table().select(["x", "y", "ok", "s"])
    pcsv.write_csv(t, tmp_path / "t.csv")
    assert main(["convert", str(tmp_path / "t.csv"), str(tmp_path / "t.flr")]) == 0
    with fl.recfile.open(tmp_path / "t.flr") as f:
        assert f.record.fields["y"].dtype == np.int64 and f.record.fields["s"].kind == "str"
    check_flr(tmp_path / "t.flr", names=["x", "y", "ok", "s"])


def test_a_csv_row_with_the_wrong_number_of_columns_names_the_file_and_line(tmp_path, capsys):
    lines = ["a,b,c"] + [f"{k},{k * 2},x{k}" for k in range(50_000)]
    lines[30_001] = "1,2,3,4"
    (tmp_path / "bad.csv").write_text("\n".join(lines) + "\n")
    with pytest.raises(fl.FormatError, match=r"bad\.csv: line 30,002 .*4 columns, the header 3"):
        convert(tmp_path / "bad.csv", tmp_path / "bad.flr")
    assert not (tmp_path / "bad.flr").exists()
    assert main(["convert", str(tmp_path / "bad.csv"), str(tmp_path / "bad.flr")]) != 0
    assert "line 30,002" in capsys.readouterr().err


def test_a_csv_of_a_header_only_is_refused_as_having_no_rows(tmp_path):
    """Not as "a column of nulls only" with advice to pick the same columns again."""
    (tmp_path / "h.csv").write_text("a,b\n")
    with pytest.raises(
        fl.FormatError, match=r"h\.csv: expected rows after the header, found the header only"
    ):
        convert(tmp_path / "h.csv", tmp_path / "h.flr")
    assert not (tmp_path / "h.flr").exists()
    (tmp_path / "h2.csv").write_text("a,b")  # no line break after the header
    with pytest.raises(fl.FormatError, match=r"h2\.csv: expected a header and rows, found no rows"):
        convert(tmp_path / "h2.csv", tmp_path / "h2.flr")
    # a column empty in every row of a file that has rows keeps its own explanation
    (tmp_path / "n.csv").write_text("a,b\n1,\n2,\n")
    with pytest.raises(fl.FormatError, match="column 'b' is null"):
        convert(tmp_path / "n.csv", tmp_path / "n.flr")


def test_a_jsonl_file_converts_and_a_line_that_is_not_json_is_named(tmp_path, monkeypatch):
    from feedline.formats import _textual

    monkeypatch.setattr(_textual, "BLOCK_BYTES", 4096)  # many blocks
    rows = [{"a": k, "s": f"t{k}", "v": list(range(k % 3))} for k in range(3000)]
    text = "\n".join(json.dumps(r) for r in rows) + "\n"
    (tmp_path / "t.jsonl").write_text(text)
    assert convert(tmp_path / "t.jsonl", tmp_path / "t.flr") == 3000
    with fl.recfile.open(tmp_path / "t.flr") as f:
        assert f.columns["a"].tolist() == list(range(3000))
        assert f.columns["s"].strings()[2999] == "t2999" and f[5]["v"].tolist() == [0, 1]
    lines = text.splitlines()
    lines[2345] = "{not json"
    (tmp_path / "bad.jsonl").write_text("\n".join(lines) + "\n")
    with pytest.raises(fl.FormatError, match=r"bad\.jsonl: line 2,346 is not a JSON object"):
        convert(tmp_path / "bad.jsonl", tmp_path / "bad.flr")
    assert not (tmp_path / "bad.flr").exists()


def test_a_column_with_no_field_is_named_with_its_type_and_columns_suggested(tmp_path):
    t = table().append_column("when", pa.array(np.arange(N).astype("datetime64[s]")))
    pq.write_table(t, tmp_path / "d.parquet")
    with pytest.raises(fl.FormatError) as e:
        convert(tmp_path / "d.parquet", tmp_path / "d.flr")
    msg = str(e.value)
    assert "d.parquet" in msg and "'when'" in msg and "timestamp[" in msg
    assert "--columns" in msg and not (tmp_path / "d.flr").exists()
    assert convert(tmp_path / "d.parquet", tmp_path / "d.flr", columns=["x", "s"]) == N


def test_a_file_that_is_not_parquet_is_a_format_error_naming_it(tmp_path):
    (tmp_path / "no.parquet").write_bytes(b"PAR1" + b"\0" * 100)
    with pytest.raises(fl.FormatError, match=r"no\.parquet: expected a Parquet file"):
        convert(tmp_path / "no.parquet", tmp_path / "no.flr")
    assert not (tmp_path / "no.flr").exists()


def test_a_corrupt_row_group_is_named_and_leaves_no_output(tmp_path):
    p = tmp_path / "c.parquet"
    pq.write_table(table(), p, row_group_size=1000, compression="snappy")
    meta = pq.ParquetFile(p).metadata
    col = meta.row_group(1).column(3)  # the strings of rows 1000-2000
    data = bytearray(p.read_bytes())
    start = col.data_page_offset
    data[start + 8 : start + col.total_compressed_size] = b"\xff" * (col.total_compressed_size - 8)
    p.write_bytes(bytes(data))
    with pytest.raises(fl.FormatError, match=r"c\.parquet: row group 1 \(rows 1,000 to 2,000"):
        convert(p, tmp_path / "c.flr")
    assert not (tmp_path / "c.flr").exists()


def test_nulls_are_named_by_column_and_row_of_the_file(tmp_path):
    x = pa.array([1.0] * 1500 + [None] + [2.0] * 10)
    pq.write_table(pa.table({"x": x}), tmp_path / "n.parquet", row_group_size=1000)
    with pytest.raises(fl.FormatError, match=r"column 'x' has 1 missing .* first at row 1,500"):
        convert(tmp_path / "n.parquet", tmp_path / "n.flr")


def test_an_hf_directory_with_strings_and_lists_converts_with_columns(tmp_path):
    datasets = pytest.importorskip("datasets")
    hf = datasets.Dataset.from_dict(
        {
            "text": [f"doc {k}" for k in range(N)],
            "ids": [list(range(k % 7)) for k in range(N)],
            "mask": [[1] * (k % 7) for k in range(N)],
            "label": list(range(N)),
            "tags": [["a"] * (k % 2) for k in range(N)],
        }
    ).shuffle(seed=0)
    hf.save_to_disk(str(tmp_path / "hf"))
    order = hf["label"]
    cols = ["text", "ids", "mask", "label"]
    assert convert(tmp_path / "hf", tmp_path / "hf.flr", columns=cols) == N
    with fl.recfile.open(tmp_path / "hf.flr") as f:
        assert f.record.fields["ids"].dims == f.record.fields["mask"].dims  # one dim
        assert f.columns["label"].tolist() == order
        assert f.columns["text"].strings() == [f"doc {k}" for k in order]
        assert f[9]["ids"].tolist() == list(range(order[9] % 7))
    with pytest.raises(fl.FormatError, match="'tags' holds lists of str"):
        convert(tmp_path / "hf", tmp_path / "all.flr")
    assert not (tmp_path / "all.flr").exists()


def test_a_table_converts_only_to_flr_and_says_so(parquet, tmp_path):
    with pytest.raises(ValueError, match=r"converts to a \.flr"):
        convert(parquet, tmp_path / "t.npz")


def test_a_truncated_parquet_file_is_named_and_leaves_no_output(parquet, tmp_path):
    data = parquet.read_bytes()
    (tmp_path / "cut.parquet").write_bytes(data[: len(data) // 2])
    with pytest.raises(fl.FormatError, match=r"cut\.parquet: expected a Parquet file"):
        convert(tmp_path / "cut.parquet", tmp_path / "cut.flr")
    assert not (tmp_path / "cut.flr").exists()


def test_a_csv_value_that_does_not_convert_names_the_file_and_column(tmp_path, monkeypatch):
    from feedline.formats import _textual

    monkeypatch.setattr(_textual, "BLOCK_BYTES", 1024)  # types inferred from the first KiB
    lines = ["a,b"] + [f"{k},{k}" for k in range(2000)] + ["x,1"]
    (tmp_path / "t.csv").write_text("\n".join(lines) + "\n")
    with pytest.raises(fl.FormatError, match=r"t\.csv: a value does not convert .* column"):
        convert(tmp_path / "t.csv", tmp_path / "t.flr")
    assert not (tmp_path / "t.flr").exists()


def test_a_jsonl_object_column_is_named_and_columns_leave_it_out(tmp_path):
    rows = [{"a": k, "meta": {"k": k}} for k in range(10)]
    (tmp_path / "o.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(fl.FormatError, match=r"o\.jsonl: column 'meta' is struct.*--columns"):
        convert(tmp_path / "o.jsonl", tmp_path / "o.flr")
    assert convert(tmp_path / "o.jsonl", tmp_path / "o.flr", columns=["a"]) == 10


def test_flr_fields_become_parquet_columns_of_their_types(tmp_path):
    class Rec(fl.Record, dims={"T": None, "U": None}):
        img = fl.field((2, 3), "uint8")
        seq = fl.field(("T", 2), "float32")
        small = fl.field((), "uint16")

    img = np.arange(4 * 6, dtype=np.uint8).reshape(4, 2, 3)
    seqs = [np.full((k, 2), k, np.float32) for k in range(4)]
    items = [{"img": img[k], "seq": seqs[k], "small": k} for k in range(4)]
    fl.recfile.write(tmp_path / "r.flr", Rec, items)
    assert convert(tmp_path / "r.flr", tmp_path / "r.parquet") == 4
    t = pq.read_table(tmp_path / "r.parquet")
    assert str(t.schema.field("img").type) == (
        "fixed_size_list<element: fixed_size_list<element: uint8>[3]>[2]"
    )
    assert str(t.schema.field("seq").type) == ("list<element: fixed_size_list<element: float>[2]>")
    assert t.schema.field("small").type == pa.uint16()
    assert t.column("img").to_pylist()[3] == img[3].tolist()
    assert t.column("seq").to_pylist() == [s.tolist() for s in seqs]
    meta = json.loads(t.schema.metadata[b"feedline.record"])
    assert meta["dims"] == {"T": None, "U": None}


def test_a_field_varying_in_two_dims_cannot_be_a_parquet_column(tmp_path):
    class Two(fl.Record, dims={"T": None, "U": None}):
        grid = fl.field(("T", "U"), "int32")

    fl.recfile.write(tmp_path / "g.flr", Two, [{"grid": np.zeros((2, 3), np.int32)}])
    with pytest.raises(ValueError, match=r"field `grid` .*first dim only"):
        convert(tmp_path / "g.flr", tmp_path / "g.parquet")
    assert not (tmp_path / "g.parquet").exists()


def test_the_progress_line_counts_rows_of_a_table_of_unknown_length(tmp_path, monkeypatch):
    import builtins
    import io
    import sys

    from feedline.cli import files

    err = io.StringIO()
    err.isatty = lambda: True  # type: ignore[method-assign]
    monkeypatch.setattr(sys, "stderr", err)
    real = builtins.__import__

    def no_tqdm(name, *args, **kwargs):
        if name == "tqdm":
            raise ImportError("no tqdm")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_tqdm)
    bar = files._Bar("t.csv -> t.flr")
    bar(1000, 0)
    bar.last = -1.0  # past the tenth of a second between lines
    bar(5000, 10_000)
    text = err.getvalue()
    assert "t.csv -> t.flr: 1,000 rows (" in text and "%" not in text.split("\r")[1]
    assert "5,000/10,000 rows ( 50.0%" in text


def test_a_flr_through_parquet_comes_back_with_its_record(tmp_path):
    class Doc(fl.Record, dims={"T": None, "V": 50}):
        """A document."""

        tokens = fl.field("T", "int32", domain=fl.Index("V"))
        title = fl.field((), "str", doc="its title")

    items = [{"tokens": list(range(k % 9)), "title": f"t{k}"} for k in range(100)]
    fl.recfile.write(tmp_path / "d.flr", Doc, items)
    convert(tmp_path / "d.flr", tmp_path / "d.parquet")
    convert(tmp_path / "d.parquet", tmp_path / "again.flr")
    with fl.recfile.open(tmp_path / "d.flr") as a, fl.recfile.open(tmp_path / "again.flr") as b:
        assert b.record.schema() == a.record.schema()
        assert b[42]["tokens"].tolist() == list(range(42 % 9)) and b[42]["title"] == "t42"


def test_inspect_shows_a_parquet_or_arrow_files_rows_and_record(parquet, tmp_path, capsys):
    import pyarrow.feather as feather

    assert main(["inspect", str(parquet)]) == 0
    out = capsys.readouterr().out
    assert f"{parquet}: parquet" in out and "rows 2,500 in 9 row groups" in out
    assert "s" in out and "str" in out
    feather.write_feather(table(), tmp_path / "t.feather", chunksize=1000)
    assert main(["inspect", str(tmp_path / "t.feather")]) == 0
    assert "rows 2,500 in 3 record batches" in capsys.readouterr().out


def test_a_dataset_dict_directory_is_named_with_its_splits(tmp_path, capsys):
    datasets = pytest.importorskip("datasets")
    one = datasets.Dataset.from_dict({"x": [1, 2]})
    datasets.DatasetDict({"train": one, "test": one}).save_to_disk(str(tmp_path / "dd"))
    assert main(["convert", str(tmp_path / "dd"), str(tmp_path / "dd.flr")]) != 0
    err = capsys.readouterr().err
    assert "a DatasetDict of splits" in err and str(tmp_path / "dd" / "train") in err
    assert not (tmp_path / "dd.flr").exists()
    assert convert(tmp_path / "dd" / "train", tmp_path / "train.flr") == 2


def test_a_column_asked_for_that_is_not_there_is_named_with_the_columns(parquet, tmp_path):
    with pytest.raises(fl.FormatError, match=r"t\.parquet: no column 'zz' \(it has \['x', 'y'"):
        convert(parquet, tmp_path / "z.flr", columns=["x", "zz"])
    with pytest.raises(TypeError, match="a list of column names"):
        convert(parquet, tmp_path / "z.flr", columns="x,y")


def test_hf_arrays_convert_and_ragged_lists_inside_a_row_are_named(tmp_path):
    datasets = pytest.importorskip("datasets")
    features = datasets.Features(
        {
            "m": datasets.Array2D((2, 3), "float32"),
            "seq": datasets.Sequence(datasets.Value("int64"), length=4),
            "nested": datasets.Sequence(datasets.Sequence(datasets.Value("int32"))),
        }
    )
    data = {
        "m": [np.full((2, 3), k, np.float32) for k in range(5)],
        "seq": [[k] * 4 for k in range(5)],
        "nested": [[[1] * k, [2]] for k in range(5)],
    }
    datasets.Dataset.from_dict(data, features=features).save_to_disk(str(tmp_path / "hf"))
    with pytest.raises(fl.FormatError, match=r"HF column 'nested' row 0 holds lists of diff"):
        convert(tmp_path / "hf", tmp_path / "o.flr")
    assert not (tmp_path / "o.flr").exists()
    assert convert(tmp_path / "hf", tmp_path / "o.flr", columns=["m", "seq"]) == 5
    with fl.recfile.open(tmp_path / "o.flr") as f:
        assert f.record.fields["m"].shape == (2, 3) and f.record.fields["seq"].shape == (4,)
        np.testing.assert_array_equal(f.columns["m"][3], np.full((2, 3), 3, np.float32))
