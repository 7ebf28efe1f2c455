"""Variable-length fields (issue 16, contract 2): dims that vary per example, ``bytes``
and ``str`` fields, pad values, maxima, and the columns (``Ragged``) that carry them."""

from __future__ import annotations

import json
import threading

import numpy as np
import pytest

import feedline as fl
from feedline._base import kernels, spans
from feedline.records import record_from_schema


class Doc(fl.Record, dims={"T": None, "V": 100}):
    """Tokens and tags share the varying dim T."""

    tokens = fl.field("T", "int32", domain=fl.Index("V"))
    tags = fl.field("T", "int8", pad=-1)


class Pic(fl.Record):
    jpeg = fl.field((), "bytes")
    caption = fl.field((), "str", max_bytes=12)


class Capped(fl.Record, dims={"T": fl.Varying(max=4)}):
    x = fl.field("T", "float32")


class Cut(fl.Record, dims={"T": fl.Varying(max=4, truncate=True)}):
    x = fl.field("T", "float32")
    y = fl.field(("T", 2), "int64")


def doc(n: int, start: int = 0) -> dict:
    return {"tokens": np.arange(start, start + n) % 100, "tags": np.ones(n, np.int8)}


# -- declaring ------------------------------------------------------------------------------


def test_a_dim_declared_none_varies_and_fields_say_so():
    assert Doc.dims == {"T": None, "V": 100}
    assert Doc.varying == {"T": fl.Varying()}
    f = Doc.fields["tokens"]
    assert f.shape == (None,) and f.varying == ("T",) and f.ragged and f.kind == "array"
    assert Doc.fields["tags"].pad == -1 and f.pad == 0
    assert "tags: [T] int8 pad -1" in Doc.describe()


def test_the_dims_the_issue_found_refused_are_accepted():
    # issue 16: fl.field((), "bytes") was "dtype |S0 is not a number or bool dtype", and a
    # dim that varies could not be declared at all
    assert Pic.fields["jpeg"].kind == "bytes" and Pic.fields["jpeg"].ragged
    assert Pic.fields["caption"].kind == "str" and Pic.fields["caption"].max_bytes == 12

    class Raw(fl.Record):
        data = fl.field((), bytes)
        text = fl.field((), str)

    assert [f.kind for f in Raw.fields.values()] == ["bytes", "str"]


def test_a_bytes_field_has_shape_nothing_and_no_domain_or_pad():
    with pytest.raises(fl.RecordError, match="one value per example: its shape is"):
        type("B", (fl.Record,), {"b": fl.field(3, "bytes")})
    with pytest.raises(fl.RecordError, match="has no domain"):
        type("B", (fl.Record,), {"b": fl.field((), "str", domain=fl.Index(3))})
    with pytest.raises(fl.RecordError, match="pads with an empty bytes"):
        type("B", (fl.Record,), {"b": fl.field((), "bytes", pad=b"x")})
    with pytest.raises(fl.RecordError, match="max_bytes bounds a bytes or str field"):
        type("B", (fl.Record,), {"b": fl.field((), "int32", max_bytes=3)})


@pytest.mark.parametrize(("pad", "dtype"), [(-1, "uint8"), (300, "int8"), (0.5, "int32")])
def test_a_pad_value_the_dtype_cannot_hold_is_refused(pad, dtype):
    with pytest.raises(fl.RecordError, match="pad value"):
        type("P", (fl.Record,), {"x": fl.field((), dtype, pad=pad)})


def test_a_pad_value_outside_the_domain_is_refused():
    with pytest.raises(fl.RecordError, match="outside its domain"):
        type("P", (fl.Record,), {"x": fl.field((), "int64", domain=fl.Index(5), pad=9)})


def test_an_index_bounded_by_a_varying_dim_is_refused():
    with pytest.raises(fl.RecordError, match="varies per example"):
        type(
            "I",
            (fl.Record,),
            {"x": fl.field("T", "int64", domain=fl.Index("T"))},
            dims={"T": None},
        )


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"max": 0}, ValueError),
        ({"max": 2.5}, TypeError),
        ({"max": True}, TypeError),  # a bool is an int to operator.index, not a length
        ({"truncate": True}, ValueError),
    ],
)
def test_a_varying_dim_with_a_bad_maximum_is_refused(kwargs, error):
    with pytest.raises(error):
        fl.Varying(**kwargs)


def test_the_schema_round_trips_varying_dims_bytes_str_pad_and_maxima():
    for rec in (Doc, Pic, Capped, Cut):
        schema = json.loads(json.dumps(rec.schema()))
        again = record_from_schema(schema, "test")
        assert again.same_schema(rec), rec
        assert dict(again.varying) == {
            k: v for k, v in rec.varying.items() if any(k in f.dims for f in rec.fields.values())
        }
    assert Doc.schema()["dims"] == {"T": None, "V": 100}
    assert Cut.schema()["dims"] == {"T": {"max": 4, "truncate": True}}
    assert Pic.schema()["fields"][0]["dtype"] == "bytes"


def test_a_fixed_records_schema_is_what_it_always_was():
    class Old(fl.Record, dims={"D": 3}):
        x = fl.field("D", "float32")

    assert Old.schema()["fields"][0] == {
        "name": "x",
        "dims": ["D"],
        "shape": [3],
        "dtype": "<f4",
        "domain": None,
        "doc": None,
    }


def test_same_schema_tells_pad_values_and_kinds_apart():
    class A(fl.Record, dims={"T": None}):
        x = fl.field("T", "int32")

    class B(fl.Record, dims={"T": None}):
        x = fl.field("T", "int32", pad=7)

    class C(fl.Record, dims={"T": fl.Varying(max=8)}):
        x = fl.field("T", "int32")

    assert not A.same_schema(B) and not A.same_schema(C)


# -- checking one item ------------------------------------------------------------------------


def test_an_item_of_any_length_is_checked_and_converted():
    item = Doc.check({"tokens": [1, 2, 3], "tags": [0, 1, 0]}, 5)
    assert item["tokens"].dtype == np.int32 and item["tokens"].tolist() == [1, 2, 3]
    empty = Doc.check({"tokens": [], "tags": []}, 6)
    assert empty["tokens"].shape == (0,) and empty["tags"].dtype == np.int8


def test_fields_sharing_a_dim_must_agree_in_each_item():
    with pytest.raises(fl.ShapeError) as info:
        Doc.check({"tokens": [1, 2, 3], "tags": [0, 1]}, 7)
    message = str(info.value)
    assert "`tokens` and `tags`" in message and "item 7" in message
    assert "T = 3" in message and "T = 2" in message


def test_a_fixed_axis_of_a_varying_field_is_still_checked():
    with pytest.raises(fl.ShapeError, match=r"\[T 2\] = \(\*, 2\), got shape \(3, 3\)"):
        Cut.check({"x": np.zeros(3), "y": np.zeros((3, 3), np.int64)}, 0)


def test_an_item_longer_than_the_maximum_is_refused_or_cut():
    with pytest.raises(fl.ShapeError, match=r"item 2 has T = 5, longer than T's maximum 4"):
        Capped.check({"x": np.zeros(5)}, 2)
    cut = Cut.check({"x": np.arange(6.0), "y": np.arange(12).reshape(6, 2)}, 0)
    assert cut["x"].tolist() == [0, 1, 2, 3] and cut["y"].shape == (4, 2)


def test_domains_work_on_varying_fields():
    with pytest.raises(fl.DomainError, match=r"item 3 should be in Index\[V\]"):
        Doc.check({"tokens": [1, 100], "tags": [0, 0]}, 3)


def test_bytes_and_str_items_are_checked():
    item = Pic.check({"jpeg": bytearray(b"\xff\xd8"), "caption": "a cat"}, 0)
    assert item == {"jpeg": b"\xff\xd8", "caption": "a cat"}
    with pytest.raises(fl.ShapeError, match="should be a str, got bytes"):
        Pic.check({"jpeg": b"", "caption": b"a cat"}, 1)
    with pytest.raises(fl.ShapeError, match="should be bytes, got str"):
        Pic.check({"jpeg": "x", "caption": ""}, 1)
    with pytest.raises(fl.ShapeError, match="not a string UTF-8 can hold"):
        Pic.check({"jpeg": b"", "caption": "\udcff"}, 4)
    with pytest.raises(fl.ShapeError, match="14 bytes, more than the field's max_bytes=12"):
        Pic.check({"jpeg": b"", "caption": "ééééééé"}, 9)  # 7 characters, 14 bytes


# -- columns ----------------------------------------------------------------------------------


def test_a_ragged_column_takes_rows_with_one_gather():
    col = fl.Ragged.from_examples(
        [np.arange(3), np.arange(0), np.arange(10, 15)], (None,), np.int64
    )
    assert len(col) == 3 and col.offsets.tolist() == [0, 3, 3, 8]
    part = col.take(np.array([2, 0, 2]))
    assert [part.example(i).tolist() for i in range(3)] == [
        [10, 11, 12, 13, 14],
        [0, 1, 2],
        [10, 11, 12, 13, 14],
    ]
    assert part.shapes[:, 0].tolist() == [5, 3, 5]


def test_a_take_gives_int64_lengths_and_offsets_whatever_the_columns_offsets_are():
    # a column built by hand with int32 offsets: a take's shapes are still int64
    col = fl.Ragged(
        np.arange(10, dtype=np.int32),
        np.array([0, 3, 3, 7, 10], dtype=np.int32),
        np.array([[3], [0], [4], [3]], dtype=np.int64),
        (None,),
    )
    part = col.take(np.array([2, 0, 1]))
    assert part.shapes.dtype == np.int64 and part.offsets.dtype == np.int64
    assert part.shapes[:, 0].tolist() == [4, 3, 0]
    assert part.take(np.array([1, 0])).shapes[:, 0].tolist() == [3, 4]  # a view's view


def test_padding_places_each_example_in_its_corner_for_any_varying_axes():
    rng = np.random.default_rng(0)
    examples = [rng.integers(0, 9, (h, 3, w)) for h, w in [(2, 4), (1, 1), (3, 2), (0, 5)]]
    col = fl.Ragged.from_examples(examples, (None, 3, None), np.int64)
    out = col.padded(6, {0: 4, 2: 5}, pad=-1)
    assert out.shape == (6, 4, 3, 5)
    for r, e in enumerate(examples):
        expect = np.full((4, 3, 5), -1)
        expect[: e.shape[0], :, : e.shape[2]] = e
        assert np.array_equal(out[r], expect), r
    assert (out[4:] == -1).all()


def test_check_columns_makes_ragged_columns_from_lists_arrays_and_raggeds():
    lists = Doc.check_columns({"tokens": [[1, 2], [3]], "tags": [[0, 0], [1]]}, np.arange(2))
    assert isinstance(lists["tokens"], fl.Ragged) and lists["tokens"].dtype == np.int32
    dense = Doc.check_columns(
        {"tokens": np.zeros((4, 3), np.int64), "tags": np.zeros((4, 3), np.int8)}
    )
    assert dense["tokens"].shapes[:, 0].tolist() == [3, 3, 3, 3]
    again = Doc.check_columns(lists, np.arange(2))
    assert again["tokens"].values.tolist() == [1, 2, 3]


def test_check_columns_finds_disagreeing_lengths_and_names_the_item():
    with pytest.raises(fl.ShapeError, match=r"in item 11 `tokens` has T = 1 and `tags` has T = 2"):
        Doc.check_columns({"tokens": [[1, 2], [3]], "tags": [[0, 0], [1, 1]]}, np.array([10, 11]))


def test_check_columns_refuses_a_long_example_and_cuts_where_the_dim_truncates():
    with pytest.raises(fl.ShapeError, match="item 21 has T = 5"):
        Capped.check_columns({"x": [np.zeros(2), np.zeros(5)]}, np.array([20, 21]))
    col = fl.Ragged.from_examples([np.arange(6.0), np.arange(2.0)], (None,), np.float32)
    ys = fl.Ragged.from_examples(
        [np.zeros((6, 2), np.int64), np.zeros((2, 2), np.int64)], (None, 2), np.int64
    )
    cut = Cut.check_columns({"x": col, "y": ys}, np.arange(2))
    assert cut["x"].shapes[:, 0].tolist() == [4, 2] and cut["y"].shapes[:, 0].tolist() == [4, 2]


def test_check_columns_checks_domains_of_ragged_columns():
    with pytest.raises(fl.DomainError, match="item 31 should be in"):
        Doc.check_columns(
            {"tokens": [[1], [2, 200]], "tags": [[0], [0, 0]]},
            np.array([30, 31]),
            check_values=True,
        )


def test_byte_and_string_columns():
    cols = Pic.check_columns({"jpeg": [b"ab", b""], "caption": ["x", "é"]}, np.arange(2))
    assert cols["jpeg"].blobs() == [b"ab", b""] and cols["caption"].strings() == ["x", "é"]
    with pytest.raises(fl.ShapeError, match="item 1 has 13 bytes"):
        Pic.check_columns({"jpeg": [b"", b""], "caption": ["", "x" * 13]}, np.arange(2))


@pytest.mark.parametrize("dtype", ["int32", "float32", "uint8", "bool", "int64"])
@pytest.mark.parametrize("inner", [(), (3,)])
def test_the_compiled_padding_is_the_numpy_padding(monkeypatch, dtype, inner):
    # three ways: C (``_base.spans``), numba's kernel (without C), numpy's masks (neither)
    rng = np.random.default_rng(5)
    examples = [rng.integers(0, 2, (n, *inner)).astype(dtype) for n in (4, 0, 9, 1, 6)]
    col = fl.Ragged.from_examples(examples, (None, *inner), np.dtype(dtype))
    pad = True if dtype == "bool" else 7
    views = [col.take(np.array([3, 0, 2])), col, col.take(np.array([1]))]
    in_c = [v.padded(5, {0: 10}, pad) for v in views] if spans.available() else []
    monkeypatch.setattr(spans, "available", lambda: False)
    compiled = []
    if kernels.get() is not None:  # numba installed and on: load the kernel, then use it
        from feedline.records._ragged import _warm

        key = np.dtype(dtype).str
        if kernels.when_ready("pad_spans", key, _warm(np.dtype(dtype))) is None:
            kernels._warming[("pad_spans", key)].join()
        assert kernels.when_ready("pad_spans", key, _warm(np.dtype(dtype))) is not None
        compiled = [v.padded(5, {0: 10}, pad) for v in views]
    monkeypatch.setattr(kernels, "when_ready", lambda *a: None)
    plain = [v.padded(5, {0: 10}, pad) for v in views]
    for a, b in zip([*compiled, *in_c], plain + plain):
        assert a.dtype == b.dtype and np.array_equal(a, b)
    expect = np.full((5, 10, *inner), pad, dtype=dtype)
    for r, i in enumerate([3, 0, 2]):
        expect[r, : len(examples[i])] = examples[i]
    assert np.array_equal(plain[0], expect)


def test_a_dtype_the_compiled_kernel_cannot_take_stays_on_the_numpy_path(monkeypatch):
    # numba has no float16: the thread loading the kernel for it must not die with an
    # uncaught error (a traceback on stderr, a failure under pytest's -W error), and the
    # padding stays numpy's, for good
    if kernels.get() is None:
        pytest.skip("numba is not installed or is turned off")
    from feedline.records._ragged import _warm

    died = []
    monkeypatch.setattr(threading, "excepthook", died.append)
    monkeypatch.setattr(spans, "available", lambda: False)  # numba's way, not C's
    key = np.dtype(np.float16).str
    col = fl.Ragged.from_examples(
        [np.arange(n, dtype=np.float16) for n in (1, 3, 2)], (None,), np.float16
    )
    for _ in range(2):
        assert kernels.when_ready("pad_spans", key, _warm(np.dtype(np.float16))) is None
        kernels._warming[("pad_spans", key)].join()
        out = col.take(np.array([1, 0, 2])).padded(3, {0: 4}, np.float16(-1))
        assert out.tolist() == [[0, 1, 2, -1], [0, -1, -1, -1], [0, 1, -1, -1]]
    assert died == []


class Tokens(fl.Record, dims={"T": None}):
    tokens = fl.field("T", "int32")
    title = fl.field((), "str")


def _tokens(offsets, shapes, n_values=9):
    return fl.Ragged(
        np.arange(n_values, dtype=np.int32),
        np.array(offsets, dtype=np.int64),
        np.array(shapes, dtype=np.int64).reshape(-1, 1),
        (None,),
    )


BAD_RAGGED = {
    "offsets start below 0": (_tokens([-4, 0, 3, 9], [4, 3, 6]), "item 0", "below 0"),
    "offsets decrease": (_tokens([0, 5, 3, 9], [5, -2, 6]), "item 1", "decrease"),
    "offsets past the values": (_tokens([0, 5, 7, 30], [5, 2, 23]), "item 2", "past"),
    "shapes that do not hold the values": (_tokens([0, 3, 3, 9], [3, 1, 6]), "item 1", "holds"),
    "a shapes row missing": (_tokens([0, 3, 3, 9], [3, 0]), "3 x 1", "shapes"),
}


@pytest.mark.parametrize("case", list(BAD_RAGGED))
def test_a_dataset_refuses_a_ragged_column_whose_offsets_and_shapes_disagree(case):
    # the writer's refusal (fl.recfile.write) holds for a column given in memory too: a
    # column "checked once as a whole" was taken as it came, and a batch read row 0 from
    # the end of the values, or failed inside numpy
    col, where, what = BAD_RAGGED[case]
    titles = ["a", "b", "c"][: len(col.offsets) - 1]
    with pytest.raises(fl.ShapeError) as info:
        fl.Dataset(Tokens, {"tokens": col, "title": titles})
    message = str(info.value)
    assert "`tokens`" in message and where in message and what in message, message


def test_a_dataset_refuses_a_str_column_that_is_not_utf8():
    title = fl.Ragged.from_blobs([b"ok", b"\xff\xfe", b""])
    with pytest.raises(fl.ShapeError, match=r"`title`.* item 1 .*UTF-8"):
        fl.Dataset(Tokens, {"tokens": [[1], [2], [3]], "title": title})


def test_a_ragged_column_over_a_slice_of_its_values_is_read_as_given():
    # offsets need not start at 0: a column over part of a larger array is whole
    col = fl.Ragged(
        np.arange(20, dtype=np.int32),
        np.array([2, 5, 5, 9], dtype=np.int64),
        np.array([[3], [0], [4]], dtype=np.int64),
        (None,),
    )
    ds = fl.Dataset(Tokens, {"tokens": col, "title": ["a", "b", "c"]})
    assert [ds[i]["tokens"].tolist() for i in range(3)] == [[2, 3, 4], [], [5, 6, 7, 8]]
    batch = next(iter(fl.Loader(ds, 3)))
    assert sorted(
        map(tuple, (r[:n] for r, n in zip(batch.tokens.tolist(), batch.meta.lengths["T"])))
    ) == [
        (),
        (2, 3, 4),
        (5, 6, 7, 8),
    ]


def test_a_view_reads_its_values_once_and_pickles_as_values():
    import pickle

    col = fl.Ragged.from_examples([np.arange(3), np.arange(5)], (None,), np.int64)
    view = col.take(np.array([1, 1, 0]))
    assert view.values.tolist() == [0, 1, 2, 3, 4, 0, 1, 2, 3, 4, 0, 1, 2]
    again = pickle.loads(pickle.dumps(col.take(np.array([1]))))
    assert again.values.tolist() == [0, 1, 2, 3, 4] and again.offsets.tolist() == [0, 5]
    assert view.take(np.array([2, 0])).example(1).tolist() == [0, 1, 2, 3, 4]


def test_strings_decode_once_and_slice_at_characters():
    texts = ["héllo", "", "abc", "ü" * 10, "日本語", "x", "𝄞 clef"]
    col = fl.Ragged.from_blobs([t.encode("utf-8") for t in texts])
    assert col.strings() == texts
    assert col.take(np.array([4, 0, 1, 6])).strings() == ["日本語", "héllo", "", "𝄞 clef"]
    ascii_only = fl.Ragged.from_blobs([b"ab", b"", b"cde"])
    assert ascii_only.strings() == ["ab", "", "cde"]


@pytest.mark.parametrize("arrow", [False, True])
def test_strings_are_the_same_with_or_without_arrow_loaded(arrow, monkeypatch):
    """With pyarrow loaded (a Parquet or Arrow source), a batch's strings are made by
    Arrow in C; without, by one decode and slices: the same strings either way, and
    bytes that are not UTF-8 the same UnicodeDecodeError."""
    import sys

    if arrow:
        pytest.importorskip("pyarrow")
    else:
        monkeypatch.setitem(sys.modules, "pyarrow", None)
    texts = ["héllo", "", "abc", "ü" * 10, "日本語", "x", "𝄞 clef"] * 20  # past 32 rows
    col = fl.Ragged.from_blobs([t.encode("utf-8") for t in texts])
    assert col.strings() == texts
    idx = np.arange(len(texts))[::-3]
    assert col.take(idx).strings() == [texts[i] for i in idx]
    bad = fl.Ragged.from_blobs([b"ok"] * 40 + [b"\xff\xfe"])
    with pytest.raises(UnicodeDecodeError):
        bad.strings()
