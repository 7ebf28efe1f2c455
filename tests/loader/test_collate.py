"""The collation stage (``_collate``): examples stacked, padding rows set to the
fields' pad values, varying dims padded with their lengths in ``meta.lengths``."""

from __future__ import annotations

import numpy as np

import feedline as fl
from feedline.loader import _collate


class R(fl.Record, dims={"D": 3}):
    """Two fields of fixed shapes."""

    x = fl.field("D", "float32")
    y = fl.field((), "int64")


def test_a_batch_has_the_batch_size_of_rows_only_when_the_loader_pads():
    assert _collate.rows_for(3, 8, padded=True) == 8
    assert _collate.rows_for(3, 8, padded=False) == 3
    assert _collate.rows_for(0, 8, padded=True) == 8  # an all-padding step


def test_empty_arrays_have_the_fields_shapes_and_dtypes():
    arrays = _collate.empty(R.fields, 5)
    assert {n: (a.shape, a.dtype) for n, a in arrays.items()} == {
        "x": ((5, 3), np.dtype("float32")),
        "y": ((5,), np.dtype("int64")),
    }
    assert not any(a.any() for a in arrays.values())


def test_padding_rows_are_zeroed_and_the_real_rows_kept():
    # (contract 2: padding rows hold each field's pad value, 0 unless it declares one)
    arrays = {"x": np.ones((4, 3), np.float32), "y": np.arange(4)}
    _collate.fill_padding(arrays, R.fields, 2, 4)
    assert arrays["x"].tolist() == [[1.0] * 3] * 2 + [[0.0] * 3] * 2
    assert arrays["y"].tolist() == [0, 1, 0, 0]
    _collate.fill_padding(arrays, R.fields, 4, 4)  # nothing to pad
    assert arrays["y"].tolist() == [0, 1, 0, 0]


def test_a_padded_loader_batch_is_collated_so():
    ds = fl.Dataset(R, {"x": np.ones((5, 3)), "y": np.arange(1, 6)})
    last = list(fl.Loader(ds, 4, pad=True, workers=0))[-1]
    assert last.y.tolist() == [5, 0, 0, 0]
    assert last.meta.mask.tolist() == [True, False, False, False]
    assert last.meta.lengths == {}  # no variable-length dims yet
