"""A pyarrow.Table and a pandas.DataFrame as sources of fl.Dataset, and the Arrow types'
fields."""

from __future__ import annotations

import datetime

import numpy as np
import pytest

import feedline as fl

pa = pytest.importorskip("pyarrow")
pd = pytest.importorskip("pandas")
pq = pytest.importorskip("pyarrow.parquet")


class Row(fl.Record, dims={"T": None}):
    x = fl.field((), "float32")
    name = fl.field((), "str")
    v = fl.field("T", "int64")


def test_a_table_is_a_source_of_a_dataset_decoded_once():
    t = pa.table(
        {
            "x": np.arange(4, dtype=np.float32),
            "name": list("abcd"),
            "v": [[1], [], [2, 3], [4]],
            "extra": [0] * 4,
        }
    )
    ds = fl.Dataset(Row, t)
    assert ds.in_memory and len(ds) == 4
    batch = ds.getitems([2, 0])
    assert batch["x"].tolist() == [2.0, 0.0] and batch["name"].strings() == ["c", "a"]
    assert ds[2]["v"].tolist() == [2, 3] and ds[1]["name"] == "b"


def test_a_chunked_table_reads_the_same_as_one_chunk():
    t = pa.concat_tables([pa.table({"x": [1.0, 2.0]}), pa.table({"x": [3.0]})])
    assert t.column("x").num_chunks == 2
    ds = fl.sources.table(t)
    assert ds.getitems([2, 1, 0])["x"].tolist() == [3.0, 2.0, 1.0]


def test_a_dataframes_record_is_inferred_with_object_strings_as_str():
    df = pd.DataFrame(
        {
            "a": np.arange(3.0),
            "label": [1, 2, 3],
            "text": ["x", "yy", "zéz"],
            "flag": [True, False, True],
        }
    )
    ds = fl.sources.table(df)
    kinds = {k: (f.kind, f.shape) for k, f in ds.record.fields.items()}
    assert kinds == {
        "a": ("array", ()),
        "label": ("array", ()),
        "text": ("str", ()),
        "flag": ("array", ()),
    }
    assert ds[2]["text"] == "zéz" and ds.getitems([0, 1])["label"].tolist() == [1, 2]
    assert fl.Dataset(ds.record, df).getitems([1])["text"].strings() == ["yy"]


def test_a_dataframe_in_a_loader_gives_every_row_once():
    df = pd.DataFrame({"i": np.arange(100), "s": [str(k) for k in range(100)]})
    seen = []
    for b in fl.Loader(fl.sources.table(df), 16, seed=3):
        seen += [(int(i), s) for i, s in zip(b.i[: b.meta.size], b.s)]
    assert sorted(seen) == [(k, str(k)) for k in range(100)]


def test_columns_choose_the_fields_of_the_inferred_record():
    t = pa.table({"a": [1], "b": [2.0], "when": [datetime.date(2020, 1, 1)]})
    assert list(fl.sources.table(t, columns=["b"]).record.fields) == ["b"]


def test_what_a_table_cannot_give_is_a_record_error_naming_the_column():
    t = pa.table({"a": [1, 2], "when": [datetime.date(2020, 1, 1)] * 2})
    with pytest.raises(fl.RecordError, match=r"column 'when' is date32.*date or time"):
        fl.sources.table(t)

    class Wants(fl.Record):
        b = fl.field((), "float32")

    with pytest.raises(fl.RecordError, match=r"field `b` is not a column of the table"):
        fl.Dataset(Wants, t)
    with pytest.raises(fl.RecordError, match=r"column '0' cannot name a field"):
        fl.sources.table(pd.DataFrame(np.zeros((2, 2))))
    with pytest.raises(fl.RecordError, match=r"DataFrame column is not one Arrow type"):
        fl.sources.table(pd.DataFrame({"m": [1, "a"]}))
    with pytest.raises(fl.RecordError, match=r"columns named twice: \['a'\]"):
        fl.sources.table(pd.DataFrame([[1, 2, 3]], columns=["a", "a", "b"]))
    with pytest.raises(TypeError, match=r"pyarrow\.Table or a pandas\.DataFrame"):
        fl.sources.table({"a": [1]})


def test_a_struct_column_is_refused_with_advice_that_works():
    t = pa.table({"s": [{"a": 1, "b": 2.0}, {"a": 3, "b": 4.0}], "y": [0, 1]})
    with pytest.raises(fl.RecordError, match=r"column 's' is struct.*flatten.*rename") as e:
        fl.sources.table(t)
    assert "rename_columns" in str(e.value)
    flat = t.flatten()  # the advice: one column a child, renamed to identifiers
    flat = flat.rename_columns([c.replace(".", "_") for c in flat.column_names])
    batch = next(iter(fl.Loader(fl.sources.table(flat), 2)))
    assert batch.s_a.tolist() == [1, 3] and batch.s_b.tolist() == [2.0, 4.0]


def test_nulls_in_a_table_are_a_format_error_naming_the_column_and_row():
    df = pd.DataFrame({"x": [1.0, np.nan, 3.0], "s": ["a", None, "c"]})

    class S(fl.Record):
        s = fl.field((), "str")

    with pytest.raises(fl.FormatError, match=r"column 's' has 1 missing .*row 1"):
        fl.Dataset(S, df)


@pytest.mark.parametrize(
    "col, row",
    [
        (pa.array([[1], [2, 3], [4, None], [5]], pa.list_(pa.int64())), 2),
        (pa.array([[1.0, 2.0], [3.0, None], [5.0, 6.0]], pa.list_(pa.float32(), 2)), 1),
        (pa.array([[[1, 2]], [[3, 4], [5, 6]], [[7, None]]], pa.list_(pa.list_(pa.int8(), 2))), 2),
        (pa.array([[[1, 2]], [None, [5, 6]]], pa.list_(pa.list_(pa.int8(), 2))), 1),
    ],
    ids=["list", "fixed-list", "list-of-fixed-lists", "a-missing-inner-list"],
)
def test_a_null_inside_a_list_is_a_format_error_naming_the_row(tmp_path, col, row):
    # read as numpy, the null was NaN (or the whole column floats), with no error
    t = pa.table({"x": col, "y": pa.array(range(len(col)), pa.int64())})
    with pytest.raises(fl.FormatError, match=rf"column 'x' row {row} has a missing \(null\) value"):
        fl.sources.table(t)
    path = tmp_path / "nulls.parquet"
    pq.write_table(t, path)
    with pytest.raises(fl.FormatError, match=rf"nulls\.parquet.*column 'x' row {row} has a miss"):
        fl.sources.parquet(path)[0]
    assert fl.sources.parquet(path, columns=["y"])[row]["y"] == row  # the other column reads


def test_fixed_size_lists_of_fixed_size_lists_are_fixed_dims():
    inner = pa.list_(pa.float32(), 2)
    col = pa.array([[[1, 2], [3, 4], [5, 6]], [[7, 8], [9, 10], [11, 12]]], pa.list_(inner, 3))
    ds = fl.sources.table(pa.table({"m": col}))
    assert ds.record.fields["m"].shape == (3, 2)
    assert ds.getitems([1])["m"].tolist() == [[[7, 8], [9, 10], [11, 12]]]
    varying = pa.array([[[1, 2]], [[3, 4], [5, 6]]], pa.list_(inner))
    ds = fl.sources.table(pa.table({"m": varying}))
    assert ds.record.fields["m"].shape == (None, 2)
    assert ds[1]["m"].tolist() == [[3, 4], [5, 6]]


def test_a_sliced_table_reads_its_own_rows():
    t = pa.table({"s": ["a", "bb", "ccc", "dddd"], "v": [[1], [2, 2], [3, 3, 3], [4]]}).slice(1, 2)
    ds = fl.sources.table(t)
    assert ds.getitems([0, 1])["s"].strings() == ["bb", "ccc"]
    assert ds[1]["v"].tolist() == [3, 3, 3]


def test_the_docstring_examples_pass():
    import doctest

    from feedline.sources import _parquet, _table

    for mod in (_parquet, _table):
        assert doctest.testmod(mod).failed == 0, mod.__name__


def hf_rows(n: int = 40):
    return {
        "x": [i * 0.5 for i in range(n)],  # HF stores these as float64
        "name": [f"row {i} é" for i in range(n)],
        "v": [list(range(i % 5)) for i in range(n)],
    }


def double(example):
    """A map (importable: it runs in the workers)."""
    return {**example, "x": example["x"] * 2}


def test_an_hf_dataset_is_read_as_its_arrow_table_not_item_by_item(monkeypatch):
    """An HF dataset with string and list columns, shuffled (an indices mapping), is read
    as the Arrow table it is: the same batches as HF's own items, without one call of
    its __getitem__; a map in worker processes decodes the table there."""
    datasets = pytest.importorskip("datasets")
    hf = datasets.Dataset.from_dict(hf_rows()).shuffle(seed=3)
    want = hf[:]  # HF's own rows, in its shuffled order
    monkeypatch.setattr(type(hf), "__getitem__", lambda *a, **k: pytest.fail("read item by item"))
    ds = fl.Dataset(Row, hf)
    assert type(ds.source).__name__ == "HFSource"
    got = ds.getitems(np.array([5, 0, 39]))
    assert got["x"].dtype == np.float32
    assert got["x"].tolist() == [want["x"][i] for i in (5, 0, 39)]
    assert got["name"].strings() == [want["name"][i] for i in (5, 0, 39)]
    assert got["v"].take(np.array([0])).values.tolist() == want["v"][5]
    rows = {}
    for b in fl.Loader(ds, 8, seed=1, workers=0):
        for r, x, name in zip(b.meta.record_indices, b.x, b.name):
            rows[int(r)] = (float(x), name)
    assert rows == {i: (want["x"][i], want["name"][i]) for i in range(40)}
    inferred = fl.sources.table(hf)  # the record from its Arrow schema
    assert type(inferred.source).__name__ == "HFSource"
    assert list(inferred.record.fields) == ["x", "name", "v"]
    assert inferred.getitems([5])["name"].strings() == [want["name"][5]]
    mapped = ds.map(double)
    here = [b.x.tolist() for b in fl.Loader(mapped, 8, seed=1, workers=0)]
    assert [b.x.tolist() for b in fl.Loader(mapped, 8, seed=1, workers=2)] == here


def test_an_hf_column_the_record_must_check_value_by_value_is_read_by_item():
    datasets = pytest.importorskip("datasets")

    class Narrow(fl.Record):
        y = fl.field((), "int8")  # HF's int64: each value must fit

    hf = datasets.Dataset.from_dict({"y": [1, 2, 3]})
    ds = fl.Dataset(Narrow, hf)
    assert type(ds.source).__name__ != "HFSource"
    assert ds.getitems([2])["y"].tolist() == [3]


def test_a_field_that_is_no_column_of_an_hf_dataset_is_refused_when_it_is_made():
    datasets = pytest.importorskip("datasets")

    class Wants(fl.Record):
        b = fl.field((), "int64")

    hf = datasets.Dataset.from_dict({"a": [1, 2]})
    with pytest.raises(fl.RecordError, match=r"field `b` is not a column of the dataset"):
        fl.Dataset(Wants, hf)
    made = hf.with_transform(lambda batch: {"b": batch["a"]})  # a transform may make it
    assert fl.Dataset(Wants, made)[1]["b"] == 2
