"""Datasets kept on the device (here the CPU): gathered there, checked and copied once."""

from __future__ import annotations

import numpy as np
import pytest

import feedline as fl

torch = pytest.importorskip("torch")
from torch.utils.data import TensorDataset  # noqa: E402


class R(fl.Record, dims={"D": 2}):
    x = fl.field("D", "float32")
    y = fl.field((), "int64")


def tensor_dataset(n: int = 30) -> TensorDataset:
    return TensorDataset(torch.arange(2.0 * n).reshape(n, 2), torch.arange(n))


def as_lists(batches):
    return [(b.x.tolist(), b.y.tolist(), b.meta.mask.tolist()) for b in batches]


@pytest.mark.parametrize("pad", [False, True])
def test_device_batches_equal_host_batches(pad):
    ds = fl.Dataset(R, tensor_dataset())
    host = [
        (b.x.tolist(), b.y.tolist(), b.meta.mask.tolist())
        for b in fl.Loader(ds, 7, seed=3, pad=pad)
    ]
    loader = fl.Loader(ds, 7, seed=3, pad=pad, device="cpu")
    got = list(loader)
    assert loader._device is not None  # gathered on the device, not batch by batch on host
    assert all(isinstance(b.x, torch.Tensor) and b.x.device.type == "cpu" for b in got)
    assert as_lists(got) == host


def test_an_in_place_change_to_the_tensors_is_seen_by_the_next_batches():
    td = tensor_dataset(10)
    loader = fl.Loader(fl.Dataset(R, td), 5, device="cpu")
    assert [b.y.tolist() for b in loader] == [[0, 1, 2, 3, 4], [5, 6, 7, 8, 9]]
    td.tensors[1].add_(100)
    assert [b.y.tolist() for b in loader] == [[100, 101, 102, 103, 104], [105, 106, 107, 108, 109]]


def test_a_subclass_that_changes_item_access_loads_as_any_dataset():
    class Augmented(TensorDataset):
        def __getitem__(self, i):
            x, y = super().__getitem__(i)
            return x * 0, y

    ds = fl.Dataset(R, Augmented(*tensor_dataset(8).tensors))
    loader = fl.Loader(ds, 4, device="cpu")
    got = list(loader)
    assert loader._device is None and not ds.in_memory
    assert all((b.x == 0).all() for b in got)


def test_mixed_datasets_on_the_device_follow_the_order():
    a = fl.Dataset(R, {"x": np.zeros((20, 2), np.float32), "y": np.arange(20)})
    b = fl.Dataset(R, {"x": np.ones((9, 2), np.float32), "y": np.arange(100, 109)})
    seq = fl.Seq.mix([a.shuffle(1), b.shuffle(2)])
    host = [(x.y.tolist(), x.x.tolist()) for x in fl.Loader(seq, 6, pad=True)]
    dev = [(x.y.tolist(), x.x.tolist()) for x in fl.Loader(seq, 6, pad=True, device="cpu")]
    assert dev == host


def test_domains_are_checked_once_on_the_device_path(monkeypatch):
    class Small(fl.Record):
        y = fl.field((), "int64", domain=fl.Index(5))

    bad = fl.Dataset(Small, {"y": np.array([0, 1, 7])})
    with pytest.raises(fl.DomainError, match="got 7"):
        list(fl.Loader(bad, 2, device="cpu", check_values=True))
    good = fl.Dataset(Small, {"y": np.arange(40) % 5})
    checks = []
    real = Small.check_columns.__func__
    monkeypatch.setattr(
        Small,
        "check_columns",
        classmethod(
            lambda cls, *a, **k: checks.append(k.get("check_values")) or real(cls, *a, **k)
        ),
    )
    loader = fl.Loader(good, 4, device="cpu", check_values=True)
    batches = [b.y for b in loader] + [b.y for b in loader]  # two passes, 20 batches
    assert len(batches) == 20
    assert checks == [True]  # one check of the whole dataset, none per batch
