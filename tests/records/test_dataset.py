"""``fl.Dataset``: a typed view of every kind of map-style source."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.utils.data import Dataset as TorchDataset
from torch.utils.data import TensorDataset

import feedline as fl

HERE = Path(__file__)
N = 12


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


IMGS = np.arange(N * 4, dtype=np.float64).reshape(N, 4)
LABELS = np.arange(N) % 10


def expected(indices) -> dict[str, np.ndarray]:
    idx = np.asarray(indices, dtype=np.int64)
    return {"img": IMGS[idx].astype(np.float32), "label": LABELS[idx].astype(np.int64)}


# -- sources --------------------------------------------------------------------------------------


class Batched:
    """torch's batched protocol: ``__getitems__`` returns a list of items."""

    def __init__(self, items):
        self.items = items
        self.calls: list[list] = []
        self.item_calls = 0

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        self.item_calls += 1
        return self.items[i]

    def __getitems__(self, indices):
        self.calls.append(indices)
        return [self.items[i] for i in indices]


class Columns:
    """feedline's files: ``getitems(indices)`` returns a batch as columns."""

    def __init__(self, cols):
        self.cols = cols
        self.calls: list = []

    def __len__(self):
        return len(next(iter(self.cols.values())))

    def __getitem__(self, i):
        return {k: v[i] for k, v in self.cols.items()}

    def getitems(self, indices):
        self.calls.append(np.array(indices))
        return {k: v[np.asarray(indices)] for k, v in self.cols.items()}


class TorchItems(TorchDataset):
    def __len__(self):
        return N

    def __getitem__(self, i):
        return torch.tensor(IMGS[i]), torch.tensor(LABELS[i])


class Augmented(TensorDataset):
    """A TensorDataset subclass that changes its items (read item by item)."""

    calls = 0

    def __getitem__(self, i):
        type(self).calls += 1
        return super().__getitem__(i)


class Plain(TensorDataset):
    """A TensorDataset subclass that changes nothing (still in memory)."""


def dict_items():
    return [{"img": IMGS[i], "label": int(LABELS[i]), "path": f"{i}.png"} for i in range(N)]


SOURCES = {
    "dict of numpy arrays": (lambda: {"img": IMGS, "label": LABELS, "extra": np.zeros(3)}, True),
    "dict of torch tensors": (
        lambda: {"img": torch.tensor(IMGS, requires_grad=True), "label": torch.tensor(LABELS)},
        True,
    ),
    "TensorDataset": (lambda: TensorDataset(torch.tensor(IMGS), torch.tensor(LABELS)), True),
    "plain TensorDataset subclass": (lambda: Plain(torch.tensor(IMGS), torch.tensor(LABELS)), True),
    "augmenting TensorDataset subclass": (
        lambda: Augmented(torch.tensor(IMGS), torch.tensor(LABELS)),
        False,
    ),
    "list of dicts": (dict_items, False),
    "list of tuples": (lambda: [(IMGS[i], LABELS[i]) for i in range(N)], False),
    "list of lists": (lambda: [[IMGS[i].tolist(), int(LABELS[i])] for i in range(N)], False),
    "__getitems__": (lambda: Batched(dict_items()), False),
    "getitems columns": (lambda: Columns({"img": IMGS, "label": LABELS}), False),
    "torch Dataset": (TorchItems, False),
}


@pytest.fixture(params=list(SOURCES))
def source_kind(request):
    return request.param


def make(kind: str, **kwargs) -> fl.Dataset:
    return fl.Dataset(Digit, SOURCES[kind][0](), **kwargs)


def assert_columns(got: dict, want: dict) -> None:
    assert list(got) == list(want)
    for k in want:
        assert isinstance(got[k], np.ndarray)
        assert got[k].dtype == want[k].dtype, k
        np.testing.assert_array_equal(got[k], want[k])


# -- every source ---------------------------------------------------------------------------------


def test_every_source_kind_gives_columns_batch_first_with_the_field_dtypes(source_kind):
    ds = make(source_kind)
    assert len(ds) == N
    assert ds.in_memory is SOURCES[source_kind][1]
    assert_columns(ds.getitems([3, 0, 11, 3]), expected([3, 0, 11, 3]))
    assert_columns(ds.getitems(np.array([5])), expected([5]))


def test_every_source_kind_gives_an_empty_batch(source_kind):
    out = make(source_kind).getitems(np.zeros(0, np.int64))
    assert out["img"].shape == (0, 4) and out["img"].dtype == np.float32
    assert out["label"].shape == (0,) and out["label"].dtype == np.int64


def test_every_source_kind_gives_one_item_as_a_dict_of_field_values(source_kind):
    ds = make(source_kind)
    item = ds[7]
    assert list(item) == ["img", "label"]
    assert item["img"].dtype == np.float32 and item["img"].tolist() == IMGS[7].tolist()
    assert item["label"].dtype == np.int64 and item["label"] == LABELS[7]


@pytest.mark.parametrize("i", [N, N + 5, -1, -N])
def test_an_item_outside_the_dataset_is_an_index_error(source_kind, i):
    with pytest.raises(IndexError):
        make(source_kind)[i]


@pytest.mark.parametrize(
    ("indices", "bad"), [([-1], -1), ([3, -N], -N), ([0, N], N), ([N + 5, -2], -2)]
)
def test_getitems_outside_the_dataset_is_a_bounds_error_naming_the_index(source_kind, indices, bad):
    # A negative index does not count from the end, in getitems as in ds[i].
    ds = make(source_kind)
    want = f"item {bad} is outside the dataset of {N} items"
    with pytest.raises(fl.BoundsError, match=want):
        ds.getitems(indices)
    out = {"img": np.zeros((4, 4), np.float32), "label": np.zeros(4, np.int64)}
    with pytest.raises(fl.BoundsError, match=want):
        ds.getitems(indices, out=out)
    with pytest.raises(fl.BoundsError, match=want):
        ds.map(lambda ex: ex).getitems(indices)
    with pytest.raises(fl.BoundsError, match=f"item {bad} is outside"):
        ds[bad]
    assert isinstance(fl.BoundsError("x"), IndexError)


def test_an_index_into_an_empty_dataset_is_a_bounds_error():
    ds = fl.Dataset(Digit, [])
    assert ds.getitems([])["label"].shape == (0,)
    with pytest.raises(fl.BoundsError, match="item 0 is outside the dataset of 0 items"):
        ds.getitems([0])


def test_getitems_out_fills_the_given_arrays(source_kind):
    ds = make(source_kind)
    out = {"img": np.full((5, 4), -1, np.float32), "label": np.full(5, -1, np.int64)}
    got = ds.getitems([9, 2, 4], out=out)
    assert_columns(got, expected([9, 2, 4]))
    assert_columns({k: v[:3] for k, v in out.items()}, expected([9, 2, 4]))
    assert (out["img"][3:] == -1).all() and (out["label"][3:] == -1).all()


def test_columns_are_the_checked_arrays_of_an_in_memory_source(source_kind):
    ds = make(source_kind)
    if ds.in_memory:
        assert_columns(ds.columns, expected(np.arange(N)))
    else:
        assert ds.columns is None


def test_one_item_is_a_dict_of_arrays_whatever_the_source():
    for kind in ("list of tuples", "dict of numpy arrays"):
        item = make(kind)[7]
        assert all(isinstance(v, np.ndarray) for v in item.values()), (kind, item)


def test_a_source_that_is_not_map_style_is_a_type_error():
    for source in (5, iter([1, 2]), (x for x in range(3)), object()):
        with pytest.raises(TypeError, match="map-style"):
            fl.Dataset(Digit, source)


def test_the_record_must_be_a_record_class_with_fields():
    class Empty(fl.Record):
        pass

    with pytest.raises(TypeError, match=r"fl\.Record subclass"):
        fl.Dataset(int, [])
    with pytest.raises(TypeError, match=r"fl\.Record subclass"):
        fl.Dataset(Digit.img, [])
    with pytest.raises(TypeError, match="no fields"):
        fl.Dataset(Empty, [])


# -- dict of arrays -------------------------------------------------------------------------------


def count_checks(monkeypatch, record) -> list:
    """The calls of ``record.check_columns`` from now on (one per check of columns)."""
    calls: list = []
    real = record.check_columns.__func__
    monkeypatch.setattr(
        record,
        "check_columns",
        classmethod(lambda cls, *a, **k: calls.append(1) or real(cls, *a, **k)),
    )
    return calls


def test_a_dict_of_arrays_is_checked_once_at_construction(monkeypatch):
    with pytest.raises(fl.ShapeError) as info:
        fl.Dataset(Digit, {"img": np.zeros((N, 5)), "label": LABELS})
    msg = str(info.value)
    assert msg.startswith(declared_at("img") + ": Digit field `img`")
    assert msg.endswith("should be [D] = (4,), got shape (5,)")
    calls = count_checks(monkeypatch, Digit)
    ds = fl.Dataset(Digit, {"img": IMGS, "label": LABELS})
    for _ in range(3):
        ds.getitems([1, 2, 3])
    assert len(calls) == 1  # at construction, not per batch


def test_a_dict_of_arrays_of_the_wrong_kind_is_a_shape_error_at_construction():
    with pytest.raises(fl.ShapeError, match=r"`label` .* should be int64"):
        fl.Dataset(Digit, {"img": IMGS, "label": LABELS.astype(np.float32)})
    with pytest.raises(fl.ShapeError, match="`img`"):
        fl.Dataset(Digit, {"img": IMGS.astype(str), "label": LABELS})


def test_a_dict_of_arrays_of_different_lengths_is_a_shape_error():
    with pytest.raises(fl.ShapeError, match=r"different lengths: \{'img': 12, 'label': 11\}"):
        fl.Dataset(Digit, {"img": IMGS, "label": LABELS[:-1]})


def test_a_dict_missing_a_field_is_a_shape_error():
    with pytest.raises(fl.ShapeError, match="`label` is missing"):
        fl.Dataset(Digit, {"img": IMGS, "labels": LABELS})


def test_a_dict_of_torch_tensors_with_the_wrong_shape_is_a_shape_error():
    with pytest.raises(fl.ShapeError, match=r"got shape \(3,\)"):
        fl.Dataset(Digit, {"img": torch.zeros(N, 3), "label": torch.tensor(LABELS)})


def test_domains_of_arrays_are_checked_on_demand_naming_the_item():
    labels = LABELS.copy()
    labels[8] = 10
    ds = fl.Dataset(Digit, {"img": IMGS, "label": labels})  # no value check yet
    assert ds.getitems([8])["label"].tolist() == [10]
    with pytest.raises(fl.DomainError) as info:
        ds.check_values()
    assert str(info.value) == (
        f"{declared_at('label')}: Digit field `label` of item 8 should "
        f"be in Index[C] = [0, 10), got 10"
    )
    with pytest.raises(fl.DomainError, match="of item 8 "):
        ds.getitems([7, 8], check_values=True)


def test_valid_arrays_pass_the_value_check():
    ds = make("dict of numpy arrays")
    ds.check_values()
    assert_columns(ds.getitems([1, 2], check_values=True), expected([1, 2]))


def test_ragged_arrays_are_a_shape_error_naming_the_field():
    class P(fl.Record, dims={"D": 2}):
        x = fl.field("D", "float32")
        y = fl.field((), "int64")

    with pytest.raises(
        fl.ShapeError,
        match=r"P field `x` of the dict is not a rectangular "
        r"array: .*inhomogeneous",
    ) as info:
        fl.Dataset(P, {"x": [[1, 2], [3]], "y": [1, 2]})
    assert isinstance(info.value.__cause__, ValueError)
    with pytest.raises(fl.ShapeError, match="from_arrays: `x` is not a rectangular array"):
        fl.Dataset.from_arrays(x=[[1, 2], [3]])
    with pytest.raises(fl.ShapeError, match="from_arrays: `y` is not a rectangular array"):
        fl.Dataset.from_arrays(x=np.zeros((2, 2)), y=[[1], [2, 3]])


def test_refresh_checks_a_changed_dict_of_arrays_again():
    labels = LABELS.astype(np.int32)  # converted to int64: the dataset holds a copy
    ds = fl.Dataset(Digit, {"img": IMGS, "label": labels})
    ds.check_values()
    labels[4] = -7
    ds.refresh()
    assert ds.getitems([4])["label"].tolist() == [-7]
    with pytest.raises(fl.DomainError, match=r"`label` of item 4 .* got -7"):
        ds.check_values()


def test_refresh_takes_a_dict_of_arrays_that_changed_length():
    source = {"img": IMGS, "label": LABELS}
    ds = fl.Dataset(Digit, source)
    source["img"], source["label"] = IMGS[:5], LABELS[:5]
    ds.refresh()
    assert len(ds) == 5
    assert_columns(ds.columns, expected(np.arange(5)))
    source["label"] = LABELS[:4]
    with pytest.raises(fl.ShapeError, match="different lengths"):
        ds.refresh()


def test_refresh_takes_a_tensor_dataset_that_changed_length():
    td = TensorDataset(torch.tensor(IMGS), torch.tensor(LABELS))
    ds = fl.Dataset(Digit, td)
    ds.check_values()
    td.tensors = (torch.tensor(IMGS[:3]), torch.tensor([0, 1, 10]))
    ds.refresh()
    assert len(ds) == 3
    with pytest.raises(fl.BoundsError, match="item 3 is outside the dataset of 3 items"):
        ds[3]
    with pytest.raises(fl.DomainError, match=r"`label` of item 2 .* got 10"):
        ds.check_values()  # refresh forgot the earlier value check


def test_refresh_takes_the_length_of_a_list_again():
    items = [(IMGS[i], LABELS[i]) for i in range(N)]
    ds = fl.Dataset(Digit, items)
    items.append((IMGS[0], 99))
    ds.refresh()
    assert len(ds) == N + 1
    with pytest.raises(fl.DomainError, match=rf"`label` of item {N} .* got 99"):
        ds.check_values()


@pytest.mark.parametrize(
    "kind", ["list of dicts", "list of tuples", "list of lists", "__getitems__", "getitems columns"]
)
def test_check_values_reads_a_source_not_in_memory_naming_the_bad_item(kind):
    ds = make(kind)
    ds.check_values()  # every value fits
    source = SOURCES[kind][0]()
    if kind == "getitems columns":
        source.cols = {"img": IMGS, "label": np.where(np.arange(N) == 9, 10, LABELS)}
    elif kind == "__getitems__":
        source.items[9] = {"img": IMGS[9], "label": 10}
    else:
        source[9] = (IMGS[9], 10)
    ds = fl.Dataset(Digit, source)
    with pytest.raises(fl.DomainError) as info:
        ds.check_values()
    assert str(info.value) == (
        f"{declared_at('label')}: Digit field `label` of item 9 should "
        f"be in Index[C] = [0, 10), got 10"
    )
    with pytest.raises(fl.DomainError, match="of item 9 "):
        ds.map(lambda ex: ex).check_values()  # a mapped dataset checks its source's items


def test_check_values_reads_a_source_not_in_memory_in_batches_once(monkeypatch):
    from feedline.sources import _kinds as _dataset  # (the constants moved with check_through)

    monkeypatch.setattr(_dataset, "_CHECK_ITEMS", 5)
    source = Columns({"img": IMGS, "label": LABELS})
    ds = fl.Dataset(Digit, source)
    ds.check_values()
    assert [c.tolist() for c in source.calls] == [
        list(range(0, 5)),
        list(range(5, 10)),
        list(range(10, N)),
    ]
    ds.check_values()  # once, until refresh
    assert len(source.calls) == 3
    ds.refresh()
    ds.check_values()
    assert len(source.calls) == 6


def test_check_values_reads_large_items_in_smaller_batches(monkeypatch):
    from feedline.sources import _kinds as _dataset  # (the constants moved with check_through)

    monkeypatch.setattr(_dataset, "_CHECK_BYTES", 4 * 4 * 4 + 8 * 4)  # four Digit items
    source = Columns({"img": IMGS, "label": LABELS})
    fl.Dataset(Digit, source).check_values()
    assert [len(c) for c in source.calls] == [4, 4, 4]


# -- TensorDataset --------------------------------------------------------------------------------


def test_a_tensor_dataset_needs_one_tensor_per_field():
    with pytest.raises(fl.ShapeError, match="1 tensors, the record has 2 fields"):
        fl.Dataset(Digit, TensorDataset(torch.tensor(IMGS)))


def test_a_tensor_dataset_of_the_wrong_shape_is_a_shape_error_at_construction():
    with pytest.raises(fl.ShapeError, match=r"`img` .* got shape \(4, 1\)"):
        fl.Dataset(Digit, TensorDataset(torch.zeros(N, 4, 1), torch.tensor(LABELS)))


def test_a_tensor_dataset_is_converted_to_the_field_dtypes_once(monkeypatch):
    calls = count_checks(monkeypatch, Digit)
    ds = make("TensorDataset")
    assert ds.columns["img"].dtype == np.float32
    assert ds.columns["label"].dtype == np.int64
    columns = ds.columns
    for _ in range(3):
        got = ds.getitems([4, 5])
    np.testing.assert_array_equal(got["img"], IMGS[[4, 5]].astype(np.float32))
    assert ds.columns is columns and len(calls) == 1  # converted and checked once


def converted_tensor_dataset() -> TensorDataset:
    """float64 images and int32 labels: the dataset holds converted copies, not views."""
    return TensorDataset(torch.tensor(IMGS), torch.tensor(LABELS, dtype=torch.int32))


def loader_images(loader) -> list:
    return [row for b in loader for row in b.img.tolist()]


def test_an_in_place_change_to_a_converted_tensor_dataset_is_read_by_the_next_pass():
    td = converted_tensor_dataset()
    ds = fl.Dataset(Digit, td)
    loader = ds.batches(5)
    assert loader_images(loader) == IMGS.tolist()
    td.tensors[0][3] = 7  # X[3] = 7, in place
    want = IMGS.copy()
    want[3] = 7
    assert loader_images(loader) == want.tolist()  # the loader's next pass
    assert loader_images(ds.batches(5)) == want.tolist()  # a new loader
    td.tensors[0][3] += 1
    loader.reset()
    assert loader_images(loader) == (want + (np.arange(N) == 3)[:, None]).tolist()
    assert ds[3]["img"].tolist() == [8.0] * 4
    assert ds.getitems([3])["img"].tolist() == [[8.0] * 4]
    assert ds.columns["img"][3].tolist() == [8.0] * 4


def test_tensors_replaced_in_a_tensor_dataset_are_read_by_the_next_pass():
    td = converted_tensor_dataset()
    ds = fl.Dataset(Digit, td)
    assert len(list(ds.batches(5))) == 3
    td.tensors = (torch.zeros(3, 4, dtype=torch.float64), torch.tensor([1, 2, 3]))
    assert len(ds) == 3
    assert [b.label.tolist() for b in ds.batches(5)] == [[1, 2, 3]]


def test_an_unchanged_tensor_dataset_is_not_converted_again(monkeypatch):
    ds = fl.Dataset(Digit, converted_tensor_dataset())
    calls = count_checks(monkeypatch, Digit)
    columns = ds.columns
    for _ in range(2):
        loader_images(ds.batches(5))
    assert ds.columns is columns and calls == []


def test_an_in_place_change_is_checked_again_when_value_checks_are_on():
    td = converted_tensor_dataset()
    ds = fl.Dataset(Digit, td)
    loader = fl.Loader(ds, 5, check_values=True)
    assert len(loader_images(loader)) == N
    td.tensors[1][9] = 10
    with pytest.raises(fl.DomainError) as info:
        list(loader)
    assert str(info.value) == (
        f"{declared_at('label')}: Digit field `label` of item 9 should "
        f"be in Index[C] = [0, 10), got 10"
    )
    with pytest.raises(fl.DomainError, match="of item 9 "):
        list(fl.Loader(ds, 5, check_values=True))
    assert ds.getitems([9])["label"].tolist() == [10]  # rows read without a value check
    with pytest.raises(fl.DomainError, match="of item 9 "):
        ds.columns  # noqa: B018 (the whole data, once checked, is handed out checked)
    td.tensors[1][9] = 9
    loader.reset()
    assert ds.columns["label"][9] == 9 and len(loader_images(loader)) == N


def test_a_tensor_dataset_subclass_that_changes_items_is_read_item_by_item():
    Augmented.calls = 0
    ds = make("augmenting TensorDataset subclass")
    assert not ds.in_memory
    ds.getitems([1, 2, 3])
    assert Augmented.calls == 3


def test_a_tensor_dataset_subclass_with_getitems_is_read_by_batch():
    class WithBatches(TensorDataset):
        calls = 0

        def __getitems__(self, indices):
            type(self).calls += 1
            return [self[i] for i in indices]

    ds = fl.Dataset(Digit, WithBatches(torch.tensor(IMGS), torch.tensor(LABELS)))
    assert not ds.in_memory
    assert_columns(ds.getitems([4, 5]), expected([4, 5]))
    assert WithBatches.calls == 1


# -- sources read item by item --------------------------------------------------------------------


def bad_list(item7):
    items = [(IMGS[i], LABELS[i]) for i in range(N)]
    items[7] = item7
    return fl.Dataset(Digit, items)


def test_an_item_of_the_wrong_shape_is_a_shape_error_naming_its_index():
    ds = bad_list((np.zeros(3), 7))
    assert_columns(ds.getitems([5, 6, 8]), expected([5, 6, 8]))
    want = f"{declared_at('img')}: Digit field `img` of item 7 should be [D] = (4,), got shape (3,)"
    with pytest.raises(fl.ShapeError) as info:
        ds.getitems([5, 6, 7, 8])
    assert str(info.value) == want
    with pytest.raises(fl.ShapeError) as info:
        ds[7]
    assert str(info.value) == want


@pytest.mark.parametrize(
    ("item7", "pattern"),
    [
        ((IMGS[7], 7.0), r"`label` of item 7 should be int64 \(integers or booleans\)"),
        ((IMGS[7],), r"item 7 should have 2 fields \(img, label\), got a tuple of 1"),
        ({"img": IMGS[7]}, r"`label` of item 7 is missing"),
        ((np.zeros(4), [7]), r"`label` of item 7 should be \[\] = \(\), got shape \(1,\)"),
        (None, r"item 7 should be a dict or a tuple"),
    ],
)
def test_a_bad_item_in_a_batch_is_named_by_its_index(item7, pattern):
    with pytest.raises(fl.ShapeError, match=pattern):
        bad_list(item7).getitems([6, 7, 8])


def test_every_item_of_the_wrong_shape_names_the_first_in_the_batch():
    ds = fl.Dataset(Digit, [(np.zeros(3), 1)] * N)
    with pytest.raises(fl.ShapeError, match="of item 9 "):
        ds.getitems([9, 2])


@pytest.mark.parametrize("wrap", [list, Batched])
def test_items_of_mixed_integer_types_stack_to_the_field_dtype(wrap):
    # np.stack alone would promote uint64 with int64 to float64.
    items = [
        {"img": IMGS[0], "label": np.uint64(1)},
        {"img": IMGS[1], "label": np.int64(2)},
        {"img": IMGS[2].astype(np.float32), "label": True},
    ]
    ds = fl.Dataset(Digit, wrap(items))
    batch = ds.getitems([0, 1, 2], check_values=True)
    assert batch["label"].dtype == np.int64 and batch["label"].tolist() == [1, 2, 1]
    assert batch["img"].dtype == np.float32
    np.testing.assert_array_equal(batch["img"], IMGS[:3].astype(np.float32))
    assert [ds[i]["label"].item() for i in range(3)] == batch["label"].tolist()


def test_an_item_of_mixed_integer_types_that_does_not_fit_is_named():
    items = [{"img": IMGS[0], "label": np.int64(1)}, {"img": IMGS[1], "label": np.uint64(2**63)}]
    with pytest.raises(
        fl.ShapeError,
        match=r"`label` of item 1: 9223372036854775808 does not "
        r"fit int64",
    ):
        fl.Dataset(Digit, items).getitems([0, 1])


def test_an_item_outside_its_domain_is_a_domain_error_naming_its_index_when_checked():
    ds = bad_list((IMGS[7], 17))
    assert ds.getitems([6, 7])["label"].tolist() == [6, 17]
    assert ds[7]["label"] == 17
    with pytest.raises(fl.DomainError) as info:
        ds.getitems([6, 7, 8], check_values=True)
    assert str(info.value) == (
        f"{declared_at('label')}: Digit field `label` of item 7 should "
        f"be in Index[C] = [0, 10), got 17"
    )


def test_getitems_of_a_batched_source_is_one_call_per_batch():
    src = Batched(dict_items())
    ds = fl.Dataset(Digit, src)
    ds.getitems([1, 2, 3, 4])
    ds.getitems(np.array([0]))
    assert src.calls == [[1, 2, 3, 4], [0]]
    assert src.item_calls == 0
    assert all(type(i) is int for call in src.calls for i in call)


def test_a_bad_item_of_a_batched_source_is_named_without_reading_it_again():
    items = dict_items()
    items[3] = {"img": np.zeros(5), "label": 3}
    src = Batched(items)
    with pytest.raises(fl.ShapeError, match="`img` of item 3 "):
        fl.Dataset(Digit, src).getitems([2, 3, 4])
    assert src.calls == [[2, 3, 4]]
    assert src.item_calls == 0


def test_getitems_of_a_columns_source_is_one_call_per_batch():
    src = Columns({"img": IMGS, "label": LABELS})
    ds = fl.Dataset(Digit, src)
    assert_columns(ds.getitems([8, 1, 1]), expected([8, 1, 1]))
    assert_columns(ds.getitems([2]), expected([2]))
    assert [c.tolist() for c in src.calls] == [[8, 1, 1], [2]]


def test_a_columns_source_with_a_bad_value_names_the_offending_row():
    labels = LABELS.copy()
    labels[5] = -3
    ds = fl.Dataset(Digit, Columns({"img": IMGS, "label": labels}))
    with pytest.raises(fl.DomainError, match=r"`label` of item 5 .* got -3$"):
        ds.getitems([4, 5, 6], check_values=True)


def test_a_columns_source_of_the_wrong_shape_is_a_shape_error():
    ds = fl.Dataset(Digit, Columns({"img": np.zeros((N, 2)), "label": LABELS}))
    with pytest.raises(fl.ShapeError, match=r"`img` of items from item 4 .* got shape \(2,\)"):
        ds.getitems([4, 5, 6])


class OnlyGetitems:
    """A source with ``__len__`` and ``getitems`` only (no ``__getitem__``)."""

    def __len__(self):
        return N

    def getitems(self, indices):
        return expected(indices)


def test_a_getitems_only_source_is_a_dataset():
    ds = fl.Dataset(Digit, OnlyGetitems())
    assert_columns(ds.getitems([3, 4]), expected([3, 4]))


def test_a_getitems_only_source_reads_one_item():
    item = fl.Dataset(Digit, OnlyGetitems())[3]
    assert item["label"] == 3


def test_a_torch_dataset_of_tensors_with_the_wrong_dtype_is_named_by_its_index():
    class Floats(TorchDataset):
        def __len__(self):
            return N

        def __getitem__(self, i):
            return {"img": torch.zeros(4), "label": torch.tensor(float(i))}

    with pytest.raises(fl.ShapeError, match="`label` of item 2 should be int64"):
        fl.Dataset(Digit, Floats()).getitems([2, 3])


def test_huggingface_datasets_are_read_by_batch():
    datasets = pytest.importorskip("datasets")
    hf = datasets.Dataset.from_dict({"img": IMGS.tolist(), "label": LABELS.tolist()})
    ds = fl.Dataset(Digit, hf)
    assert len(ds) == N
    assert_columns(ds.getitems([3, 1]), expected([3, 1]))


def test_huggingface_datasets_give_an_empty_batch_and_check_values():
    datasets = pytest.importorskip("datasets")
    labels = LABELS.tolist()
    ds = fl.Dataset(Digit, datasets.Dataset.from_dict({"img": IMGS.tolist(), "label": labels}))
    empty = ds.getitems([])
    assert empty["img"].shape == (0, 4) and empty["img"].dtype == np.float32
    assert empty["label"].shape == (0,) and empty["label"].dtype == np.int64
    ds.check_values()
    with pytest.raises(fl.BoundsError, match="item -1 is outside the dataset of 12 items"):
        ds.getitems([-1])
    labels[5] = 11
    bad = fl.Dataset(Digit, datasets.Dataset.from_dict({"img": IMGS.tolist(), "label": labels}))
    with pytest.raises(fl.DomainError, match=r"`label` of item 5 .* got 11"):
        bad.check_values()


# -- salt, from_arrays, ordering ------------------------------------------------------------------


def test_the_salt_comes_from_the_name():
    assert make("list of tuples", name="mnist").salt == fl.salt("mnist")
    assert make("dict of numpy arrays", name="mnist").salt == fl.salt("mnist")


def test_the_salt_comes_from_the_sources_salt_attribute_or_method():
    class WithSalt(Batched):
        salt = 1234

    class WithSaltMethod(Batched):
        def salt(self):
            return 99

    assert fl.Dataset(Digit, WithSalt(dict_items())).salt == 1234
    assert fl.Dataset(Digit, WithSaltMethod(dict_items())).salt == 99
    assert fl.Dataset(Digit, WithSalt(dict_items()), name="web").salt == fl.salt("web")
    assert fl.Dataset(Digit, WithSalt(dict_items()), salt=7).salt == 7
    assert make("list of tuples").salt == 0


def test_the_salt_changes_the_shuffle_but_the_seed_fixes_it():
    a, b = make("list of tuples", name="a"), make("list of tuples", name="b")

    def order(ds, seed):
        return [it.record_index for it in fl.Order(ds.shuffle(seed))]

    assert order(a, 3) == order(make("list of tuples", name="a"), 3)
    assert order(a, 3) != order(b, 3) or order(a, 4) != order(b, 4)


def test_from_arrays_builds_a_record_named_by_the_keywords():
    ds = fl.Dataset.from_arrays(
        x=np.zeros((10, 3), np.float32), y=np.arange(10), m=np.ones((10, 2, 2), bool)
    )
    rec = ds.record
    assert issubclass(rec, fl.Record)
    assert list(rec.fields) == ["x", "y", "m"]
    assert [f.shape for f in rec.fields.values()] == [(3,), (), (2, 2)]
    assert [f.dtype for f in rec.fields.values()] == [np.float32, np.int64, np.bool_]
    assert ds.in_memory and len(ds) == 10
    assert ds.getitems([9])["y"].tolist() == [9]


def test_from_arrays_takes_a_name_for_the_record_and_the_salt():
    ds = fl.Dataset.from_arrays(x=torch.zeros(4, 2), name="web")
    assert ds.record.__name__ == "web"
    assert ds.salt == fl.salt("web")
    assert ds.record.x.dtype == np.float32


def test_from_arrays_refuses_what_has_no_example_axis_or_different_lengths():
    with pytest.raises(TypeError):
        fl.Dataset.from_arrays()
    with pytest.raises(fl.ShapeError, match="`x`"):
        fl.Dataset.from_arrays(x=np.float32(3))
    with pytest.raises(fl.ShapeError, match="different lengths"):
        fl.Dataset.from_arrays(x=np.zeros((10, 3)), y=np.zeros(9))
    with pytest.raises(fl.RecordError):
        fl.Dataset.from_arrays(x=np.array(["a", "b"]))


def assert_same_dataset(got: fl.Dataset, want: fl.Dataset) -> None:
    assert got.record.schema() == want.record.schema()
    assert len(got) == len(want)
    assert_columns(got.columns, want.columns)
    got_batches, want_batches = list(got.batches(3)), list(want.batches(3))
    assert len(got_batches) == len(want_batches)
    for g, w in zip(got_batches, want_batches):
        assert_columns(dict(g.fields), dict(w.fields))


def test_from_arrays_takes_data_nus_flat_vectors_given_n_d_and_l():
    # data.nu's data_new(x, y, n, d, l): x holds n*d numbers, y n*l, row by row.
    n, d, labels = 5, 3, 2
    flat_x = np.arange(n * d, dtype=np.float64)
    flat_y = np.arange(n * labels, dtype=np.float64) / 10
    got = fl.Dataset.from_arrays(x=flat_x, y=flat_y, n=n, d=d, l=labels)
    want = fl.Dataset.from_arrays(x=flat_x.reshape(n, d), y=flat_y.reshape(n, labels))
    assert_same_dataset(got, want)
    assert got.getitems([1])["x"].tolist() == [[3.0, 4.0, 5.0]]
    assert got.getitems([4])["y"].tolist() == [[0.8, 0.9]]
    assert_same_dataset(
        fl.Dataset.from_arrays(
            x=torch.tensor(flat_x), y=list(flat_y), n=np.int64(n), d=d, l=labels, name="nu"
        ),
        fl.Dataset.from_arrays(x=flat_x.reshape(n, d), y=flat_y.reshape(n, labels), name="nu"),
    )


def test_from_arrays_flat_without_labels_is_the_2d_form_without_labels():
    flat_x = np.arange(8.0)
    assert_same_dataset(
        fl.Dataset.from_arrays(x=flat_x, n=4, d=2), fl.Dataset.from_arrays(x=flat_x.reshape(4, 2))
    )
    assert_same_dataset(
        fl.Dataset.from_arrays(x=flat_x, n=4, d=2, l=0),
        fl.Dataset.from_arrays(x=flat_x.reshape(4, 2)),
    )
    # l = 0 with a y of no numbers: labels of no values, as data.nu's empty y
    assert_same_dataset(
        fl.Dataset.from_arrays(x=flat_x, y=np.zeros(0), n=4, d=2, l=0),
        fl.Dataset.from_arrays(x=flat_x.reshape(4, 2), y=np.zeros((4, 0))),
    )


@pytest.mark.parametrize(
    ("arrays", "error", "message"),
    [
        (
            dict(x=np.zeros(11), n=4, d=3),
            fl.ShapeError,
            "from_arrays: `x` should hold n*d = 4*3 = 12 numbers, got 11",
        ),
        (
            dict(x=np.zeros(12), y=np.zeros(7), n=4, d=3, l=2),
            fl.ShapeError,
            "from_arrays: `y` should hold n*l = 4*2 = 8 numbers, got 7",
        ),
        (
            dict(x=np.zeros((4, 3)), n=4, d=3),
            fl.ShapeError,
            "from_arrays: `x` should be a flat vector of n*d = 4*3 = 12 numbers, got shape (4, 3)",
        ),
        (
            dict(x=np.zeros(12), n=4, d=3, l=2),
            fl.ShapeError,
            "from_arrays: l = 2 labels per example, but no `y`",
        ),
        (
            dict(x=np.zeros(12), y=np.zeros(8), n=4, d=3),
            fl.RecordError,
            "from_arrays: the flat form (n=...) needs l, the labels per example of `y`",
        ),
        (
            dict(x=np.zeros(12), n=4),
            fl.RecordError,
            "from_arrays: the flat form (n=...) needs d, the features per example of `x`",
        ),
        (
            dict(x=np.zeros(12), d=3),
            fl.RecordError,
            "from_arrays: the flat form needs n, the number of examples (given: d)",
        ),
        (
            dict(x=np.zeros(12), n=4.0, d=3),
            fl.RecordError,
            "from_arrays: n must be an int, got 4.0",
        ),
        (
            dict(x=np.zeros(12), n=True, d=3),
            fl.RecordError,
            "from_arrays: n must be an int, got True",
        ),
        (
            dict(x=np.zeros(12), n=4, d=np.zeros(3)),
            fl.RecordError,
            "from_arrays: d must be an int, got an array of shape (3,)",
        ),
        (dict(x=np.zeros(12), n=-4, d=-3), fl.ShapeError, "from_arrays: n must be >= 0, got -4"),
    ],
)
def test_from_arrays_flat_vectors_that_do_not_fit_n_d_l_are_refused(arrays, error, message):
    with pytest.raises(error) as info:
        fl.Dataset.from_arrays(**arrays)
    assert str(info.value) == message
    assert isinstance(info.value, fl.FeedlineError)


def test_from_arrays_fields_named_n_d_or_l_are_arrays_of_the_2d_form():
    ds = fl.Dataset.from_arrays(x=np.zeros((4, 2)), n=np.arange(4), d=np.ones((4, 3)))
    assert list(ds.record.fields) == ["x", "n", "d"]
    assert ds.getitems([3])["n"].tolist() == [3]


def test_shuffle_is_a_seeded_seq_over_every_item():
    ds = make("dict of numpy arrays")
    seq = ds.shuffle(1)
    assert isinstance(seq, fl.Seq)
    order = fl.Order(seq)
    assert len(order) == len(ds)
    assert sorted(it.record_index for it in order) == list(range(N))
    assert [it.record_index for it in order] == [it.record_index for it in fl.Order(ds.shuffle(1))]
    assert fl.Order(ds.shuffle(np.int64(1))).lookup(np.arange(N))[1].tolist() == [
        it.record_index for it in order
    ]


@pytest.mark.parametrize("seed", [1.5, True, False, "1", None, 1.0])
def test_shuffle_takes_only_an_int_seed(seed):
    with pytest.raises(TypeError, match="seed must be an int"):
        make("list of tuples").shuffle(seed)


def test_to_seq_is_the_dataset_in_order():
    ds = make("list of tuples")
    seq = ds.to_seq()
    assert isinstance(seq, fl.Seq)
    assert [it.record_index for it in fl.Order(seq)] == list(range(N))


def test_batches_is_a_loader_in_order():
    ds = make("dict of numpy arrays")
    loader = ds.batches(5)
    assert isinstance(loader, fl.Loader)
    labels = [b.label[: b.meta.size].tolist() for b in loader]
    assert [x for b in labels for x in b] == LABELS.tolist()
    assert [len(x) for x in labels] == [5, 5, 2]


def labels_of(loader) -> list[list[int]]:
    return [b.label.tolist() for b in loader]


def test_batches_takes_the_batch_size_as_n_by_position_or_by_name():
    # ShapeScript: "n by position or as n=".
    ds = make("dict of numpy arrays")
    want = labels_of(ds.batches(5))
    assert [len(b) for b in want] == [5, 5, 2]
    assert labels_of(ds.batches(n=5)) == want
    assert labels_of(ds.batches(batch_size=5)) == want
    assert labels_of(ds.batches(n=5, drop_last=True)) == want[:2]


def test_a_shuffles_batches_take_the_batch_size_as_n_by_position_or_by_name():
    ds = make("dict of numpy arrays")
    for epoch in range(2):
        want = labels_of(ds.shuffle(seed=epoch).batches(5))
        assert labels_of(ds.shuffle(seed=epoch).batches(n=5)) == want
        assert labels_of(ds.shuffle(seed=epoch).batches(batch_size=5)) == want


@pytest.mark.parametrize("batches", [lambda ds: ds.batches, lambda ds: ds.shuffle(1).batches])
def test_batches_takes_the_batch_size_once(batches):
    ds = make("dict of numpy arrays")
    with pytest.raises(TypeError, match="batch size"):
        batches(ds)(4, batch_size=4)
    with pytest.raises(TypeError, match="batch size"):
        batches(ds)(n=4, batch_size=4)
    with pytest.raises(TypeError, match="batch size"):
        batches(ds)()


def test_the_repr_says_what_the_dataset_is():
    assert repr(make("dict of numpy arrays")) == "Dataset(Digit, 12 items, in memory)"
    assert repr(make("__getitems__")) == "Dataset(Digit, 12 items, Batched)"


# -- hostile indices and names (issue 15) -----------------------------------------------------


@pytest.mark.parametrize(
    "indices", [[1.5], np.array([1.0]), [True], ["1"]], ids=["float", "float array", "bool", "str"]
)
def test_getitems_refuses_indices_that_are_not_integers(indices):
    ds = fl.Dataset.from_arrays(x=np.arange(10.0).reshape(5, 2))
    with pytest.raises(TypeError, match="integer"):
        ds.getitems(indices)


@pytest.mark.parametrize("index", [2**63, 2**64 - 1, 2**70, -(2**63) - 1])
def test_getitems_of_an_index_past_int64_is_a_bounds_error(index):
    ds = fl.Dataset.from_arrays(x=np.arange(10.0).reshape(5, 2))
    with pytest.raises(fl.BoundsError, match=str(index)):
        ds.getitems([index])
    with pytest.raises(fl.BoundsError):
        ds.getitems(np.array([index], dtype=object))


def test_getitems_takes_unsigned_and_empty_indices():
    ds = fl.Dataset.from_arrays(x=np.arange(10.0).reshape(5, 2))
    assert ds.getitems(np.array([4], dtype=np.uint64))["x"].tolist() == [[8.0, 9.0]]
    assert ds.getitems([])["x"].shape == (0, 2)


@pytest.mark.parametrize("name", ["", "a b", "1x", "x-y"])
def test_a_field_name_that_is_not_an_identifier_is_refused(name):
    with pytest.raises(fl.RecordError, match="identifier"):
        fl.Dataset.from_arrays(**{name: np.zeros((3, 2))})
