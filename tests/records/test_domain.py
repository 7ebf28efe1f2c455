"""Domains (Index, Mask, Range), value checks, and checking a whole batch as columns."""

from __future__ import annotations

import re
import sys
import types
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import feedline as fl

HERE = Path(__file__)


def declared_at(marker: str) -> str:
    """``file:line:column`` of the line of this file that carries the comment ``# <marker>``,
    the column that of its first character (the field's name); ``file:line`` on Python 3.10,
    which gives no columns."""
    for number, text in enumerate(HERE.read_text().splitlines(), start=1):
        if text.rstrip().endswith(f"# <{marker}>"):
            if sys.version_info < (3, 11):
                return f"{HERE.name}:{number}"
            return f"{HERE.name}:{number}:{len(text) - len(text.lstrip()) + 1}"
    raise AssertionError(f"no line is marked <{marker}>")


class Digit(fl.Record, dims={"D": 4, "C": 10}):
    """One labelled image."""

    img = fl.field("D", "float32")  # <img>
    label = fl.field((), "int64", domain=fl.Index("C"))  # <label>


class Tokens(fl.Record, dims={"T": 3, "V": 5}):
    ids = fl.field("T", "int32", domain=fl.Index("V"))
    mask = fl.field("T", "bool", domain=fl.Mask)
    prob = fl.field((), "float64", domain=fl.Range(0, 1))


def one(dtype, domain, dims=None, shape=()):
    """A one-field record ``a`` with the given dtype and domain."""
    body = {"a": fl.field(shape, dtype, domain=domain)}
    kwds = {"dims": dims} if dims else {}
    return types.new_class("One", (fl.Record,), kwds, lambda ns: ns.update(body))


def domain_error(record, item, index=None) -> str:
    with pytest.raises(fl.DomainError) as info:
        record.check(item, index)
    assert isinstance(info.value, ValueError)
    return str(info.value)


# -- Index ----------------------------------------------------------------------------------------


def test_an_index_error_reads_like_shapescripts():
    msg = domain_error(Digit, (np.zeros(4), 12), 37)
    assert msg == (
        f"{declared_at('label')}: Digit field `label` of item 37 should be in "
        f"Index[C] = [0, 10), got 12"
    )


def test_an_index_error_without_an_index_speaks_of_an_item():
    msg = domain_error(Digit, (np.zeros(4), -1))
    assert "field `label` of an item should be in Index[C]" in msg


@pytest.mark.parametrize("value", [0, 1, 9, True, np.uint8(9)])
def test_an_index_takes_integers_from_zero_below_its_bound(value):
    assert Digit.check((np.zeros(4), value))["label"] == int(value)


@pytest.mark.parametrize("value", [-1, 10, 11, 2**40, np.int8(-128)])
def test_an_index_refuses_integers_outside_zero_to_its_bound(value):
    assert msg_value(domain_error(Digit, (np.zeros(4), value), 0)) == int(value)


def msg_value(msg: str):
    return int(msg.rsplit("got ", 1)[1])


def test_an_index_with_an_int_bound():
    R = one("int64", fl.Index(3))
    assert R.check(2)["a"] == 2
    assert domain_error(R, 3, 1).endswith("field `a` of item 1 should be in Index[3], got 3")


def test_an_index_names_the_first_bad_value_of_a_field_with_axes():
    msg = domain_error(Tokens, {"ids": [1, 7, 9], "mask": [True] * 3, "prob": 0.5}, 2)
    assert msg.endswith("`ids` of item 2 should be in Index[V] = [0, 5), got 7")


def test_an_index_fits_unsigned_and_bool_fields():
    assert one("uint8", fl.Index(300)).check(255)["a"] == 255
    assert one("bool", fl.Index(2)).check(True)["a"]


@pytest.mark.parametrize("dtype", ["float32", "float64", "complex64"])
def test_an_index_on_a_float_field_is_a_record_error(dtype):
    with pytest.raises(fl.RecordError, match="Index needs an integer dtype"):
        one(dtype, fl.Index(3))


def test_an_index_over_an_unknown_dim_is_a_record_error():
    with pytest.raises(fl.RecordError, match="`K`"):
        one("int64", fl.Index("K"), dims={"C": 3})


@pytest.mark.parametrize("n", [1.5, -1, True, None])
def test_an_index_whose_bound_is_not_a_count_or_a_dim_is_a_record_error(n):
    with pytest.raises(fl.RecordError):
        one("int64", fl.Index(n))


def test_an_index_with_a_numpy_int_bound_is_an_int_bound():
    R = one("int64", fl.Index(np.int64(3)))
    assert R.check(2)["a"] == 2
    with pytest.raises(fl.DomainError):
        R.check(3)


@pytest.mark.parametrize(("dtype", "value"), [("int8", 300), ("uint8", -1)])
def test_an_integer_that_does_not_fit_the_field_dtype_does_not_pass_its_domain(dtype, value):
    R = one(dtype, fl.Index(256 if dtype == "uint8" else 100))
    with pytest.raises((fl.ShapeError, fl.DomainError)):
        R.check(value, 0)


# -- Mask -----------------------------------------------------------------------------------------


def test_a_mask_takes_booleans():
    out = Tokens.check({"ids": [0, 1, 2], "mask": np.array([True, False, True]), "prob": 0})
    assert out["mask"].tolist() == [True, False, True]
    assert one("bool", fl.Mask).check(False)["a"].dtype == np.bool_


def test_a_mask_field_refuses_integers_as_a_kind_error():
    with pytest.raises(fl.ShapeError, match=r"\(booleans\)"):
        Tokens.check({"ids": [0, 1, 2], "mask": [1, 0, 1], "prob": 0})


def test_a_mask_on_an_integer_field_takes_zero_and_one_only():
    R = one("int64", fl.Mask, shape=2)
    assert R.check([0, 1])["a"].tolist() == [0, 1]
    assert domain_error(R, [1, 2], 3).endswith("field `a` of item 3 should be in Mask, got 2")


def test_a_mask_on_a_float_field_is_a_record_error():
    with pytest.raises(fl.RecordError, match="Mask"):
        one("float32", fl.Mask)


def test_mask_is_one_value():
    assert repr(fl.Mask) == "Mask"
    assert type(fl.Mask)() is fl.Mask


# -- Range ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", [0, 0.0, 0.5, 1, 1.0, True])
def test_a_range_is_closed_at_both_ends(value):
    assert Tokens.check({"ids": [0, 0, 0], "mask": [True] * 3, "prob": value})["prob"] == value


@pytest.mark.parametrize("value", [-0.001, 1.0001, -1, 2, float("inf"), float("-inf")])
def test_a_range_refuses_values_outside(value):
    msg = domain_error(Tokens, {"ids": [0, 0, 0], "mask": [True] * 3, "prob": value}, 8)
    assert msg.endswith(f"`prob` of item 8 should be in Range[0, 1], got {float(value)!r}")


@pytest.mark.parametrize("domain", [fl.Range(0, 1), fl.Range(None, None), fl.Range(None, 5)])
def test_nan_is_outside_every_range(domain):
    assert domain_error(one("float32", domain), float("nan"), 0).endswith("got nan")


def test_a_range_may_be_open_on_either_side():
    below = one("float64", fl.Range(None, 0))
    above = one("float64", fl.Range(0, None))
    assert below.check(-1e300)["a"] == -1e300
    assert above.check(1e300)["a"] == 1e300
    assert domain_error(below, 0.5).endswith("should be in Range[None, 0], got 0.5")
    assert domain_error(above, -0.5).endswith("should be in Range[0, None], got -0.5")


def test_a_range_fits_an_integer_field():
    R = one("int16", fl.Range(-2, 2), shape=3)
    assert R.check([-2, 0, 2])["a"].tolist() == [-2, 0, 2]
    assert domain_error(R, [0, 3, -3]).endswith("got 3")


@pytest.mark.parametrize("dtype", ["complex64", "complex128", "bool"])
def test_a_range_on_a_complex_or_bool_field_is_a_record_error(dtype):
    with pytest.raises(fl.RecordError, match=rf"`a`: Range\[0, 1\] does not fit {dtype}"):
        one(dtype, fl.Range(0, 1))


@pytest.mark.parametrize("dtype", ["int8", "uint16", "float16", "float64"])
def test_a_range_fits_integer_and_float_fields(dtype):
    assert one(dtype, fl.Range(0, 1)).check(1)["a"] == 1


def test_a_range_with_a_bound_that_is_not_a_number_is_a_record_error():
    with pytest.raises(fl.RecordError):
        one("float32", fl.Range("a", 1))


# -- domain declarations and switching checks off -------------------------------------------------


@pytest.mark.parametrize("domain", ["Index", fl.Index, (0, 10), 3, range(10), object()])
def test_a_domain_that_is_not_index_mask_or_range_is_a_record_error(domain):
    with pytest.raises(fl.RecordError, match="a domain is"):
        one("int64", domain)


def test_value_checks_off_skip_domains_but_not_shapes_or_kinds():
    assert Digit.check((np.zeros(4), 12), 3, check_values=False)["label"] == 12
    with pytest.raises(fl.ShapeError):
        Digit.check((np.zeros(5), 12), 3, check_values=False)
    with pytest.raises(fl.ShapeError):
        Digit.check((np.zeros(4), 1.5), 3, check_values=False)


def test_shapes_are_checked_before_domains():
    with pytest.raises(fl.ShapeError):
        Digit.check((np.zeros(5), 12), 3)


def test_an_empty_field_has_no_values_to_check():
    R = one("int64", fl.Index(1), dims={"N": 0}, shape="N")
    assert R.check(np.zeros(0, np.int64))["a"].shape == (0,)


# -- check_columns -------------------------------------------------------------------------------


def columns(n=3, labels=None):
    return {"img": np.zeros((n, 4)), "label": np.arange(n) if labels is None else labels}


def test_columns_are_checked_and_converted_batch_first():
    out = Digit.check_columns(columns(3), np.array([5, 6, 7]))
    assert out["img"].shape == (3, 4) and out["img"].dtype == np.float32
    assert out["label"].tolist() == [0, 1, 2] and out["label"].dtype == np.int64


def test_columns_take_torch_tensors_and_lists():
    out = Digit.check_columns(
        {"img": torch.ones(2, 4, dtype=torch.float64), "label": [3, 4]}, check_values=True
    )
    assert out["img"].dtype == np.float32 and out["label"].tolist() == [3, 4]


def test_columns_skip_domains_unless_asked():
    out = Digit.check_columns(columns(3, np.array([1, 12, 13])), np.array([5, 6, 7]))
    assert out["label"].tolist() == [1, 12, 13]


def test_a_column_domain_error_names_the_first_offending_rows_item():
    with pytest.raises(fl.DomainError) as info:
        Digit.check_columns(
            columns(3, np.array([1, 13, 12])), np.array([5, 6, 7]), check_values=True
        )
    assert str(info.value) == (
        f"{declared_at('label')}: Digit field `label` of item 6 should "
        f"be in Index[C] = [0, 10), got 13"
    )


def test_the_first_offending_row_is_first_in_the_batch_not_lowest_in_the_source():
    with pytest.raises(fl.DomainError, match=r"of item 9 .* got -1$"):
        Digit.check_columns(
            columns(3, np.array([1, -1, 10])), np.array([4, 9, 2]), check_values=True
        )


def test_a_column_domain_error_in_a_field_with_axes_names_the_row_and_its_value():
    cols = {
        "ids": np.array([[0, 1, 2], [4, 4, 4], [0, 1, 7]]),
        "mask": np.ones((3, 3), bool),
        "prob": np.array([0.1, 0.2, 0.3]),
    }
    with pytest.raises(fl.DomainError, match=r"`ids` of item 12 should be in .* got 7$"):
        Tokens.check_columns(cols, np.array([10, 11, 12]), check_values=True)


def test_a_column_domain_error_without_indices_speaks_of_an_item():
    with pytest.raises(fl.DomainError, match="`label` of an item should be in"):
        Digit.check_columns(columns(2, np.array([1, 10])), check_values=True)


def test_an_empty_batch_of_columns_is_fine():
    out = Digit.check_columns(
        {"img": np.zeros((0, 4)), "label": np.zeros(0, np.int64)},
        np.zeros(0, np.int64),
        check_values=True,
    )
    assert out["img"].shape == (0, 4) and out["label"].shape == (0,)


def test_a_column_with_the_wrong_item_shape_is_a_batch_shape_error():
    with pytest.raises(fl.ShapeError) as info:
        Digit.check_columns({"img": np.zeros((3, 5)), "label": np.arange(3)}, np.array([5, 6, 7]))
    assert str(info.value) == (
        f"{declared_at('img')}: Digit field `img` of items from item 5 "
        f"should be [D] = (4,), got shape (5,)"
    )


@pytest.mark.parametrize("img", [np.zeros(4), np.zeros((3,)), np.zeros((3, 4, 1)), np.float32(1)])
def test_a_column_without_a_batch_axis_or_with_an_extra_axis_is_a_shape_error(img):
    with pytest.raises(fl.ShapeError, match="`img`"):
        Digit.check_columns({"img": img, "label": np.arange(3)})


def test_columns_with_different_row_counts_are_a_shape_error():
    with pytest.raises(fl.ShapeError, match="`label`"):
        Digit.check_columns({"img": np.zeros((3, 4)), "label": np.arange(2)})


def test_a_row_count_error_says_how_many_rows_each_column_has():
    with pytest.raises(fl.ShapeError) as info:
        Digit.check_columns({"img": np.zeros((3, 4)), "label": np.arange(2)})
    text = str(info.value).split(": ", 1)[1]
    assert re.search(r"\b3\b", text) and re.search(r"\b2\b", text), text


def test_a_missing_column_is_a_shape_error_naming_the_field():
    with pytest.raises(fl.ShapeError, match=r"`label` is missing from the batch \(it has \['img'"):
        Digit.check_columns({"img": np.zeros((3, 4)), "other": np.arange(3)})


def test_a_column_of_the_wrong_kind_is_a_shape_error_naming_the_batch():
    with pytest.raises(
        fl.ShapeError, match=r"`label` of the batch of items from 5 should be int64"
    ):
        Digit.check_columns(columns(3, np.arange(3.0)), np.array([5, 6, 7]))


@settings(max_examples=60, deadline=None)
@given(
    labels=hnp.arrays(np.int64, st.integers(0, 6), elements=st.integers(-3, 12)),
    start=st.integers(0, 1000),
)
def test_checking_columns_agrees_with_checking_each_row(labels, start):
    n = len(labels)
    imgs = np.arange(n * 4, dtype=np.float64).reshape(n, 4)
    idx = np.arange(start, start + n)
    try:
        batch = Digit.check_columns({"img": imgs, "label": labels}, idx, check_values=True)
    except fl.DomainError as e:
        batch_error = str(e)
    else:
        batch_error = None
    row_error = None
    rows = []
    for i in range(n):
        try:
            rows.append(Digit.check((imgs[i], labels[i]), int(idx[i])))
        except fl.DomainError as e:
            row_error = str(e)
            break
    assert batch_error == row_error
    if batch_error is None:
        for k in ("img", "label"):
            expected = np.stack([r[k] for r in rows]) if rows else batch[k][:0]
            np.testing.assert_array_equal(batch[k], expected)
            assert batch[k].dtype == Digit.fields[k].dtype
