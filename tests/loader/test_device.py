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
    # check_values: the device path on the CPU too (one plain dataset takes the plain path)
    loader = fl.Loader(ds, 7, seed=3, pad=pad, device="cpu", check_values=True)
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


def test_a_batch_transform_for_an_accelerator_runs_here_after_the_copy():
    # On a CUDA device the transform is given the batch as delivered, on the device: it
    # runs in this process, and the workers only make the batches (each worker would
    # otherwise hold a CUDA context of its own). No device is touched to decide this.
    ds = fl.Dataset.from_arrays(x=np.zeros((20, 2), np.float32))
    gpu = fl.Loader(ds, 4, workers=2, output="torch", device="cuda", batch_transform=abs)
    spec = gpu._plan._spec()
    assert spec is not None and not gpu._plan.transform_in_workers
    gpu.close()
    cpu = fl.Loader(ds, 4, workers=2, output="torch", device="cpu", batch_transform=abs)
    spec = cpu._plan._spec()
    assert spec is not None and cpu._plan.transform_in_workers
    cpu.close()


def test_a_batch_moves_and_keeps_its_metadata():
    class Doc(fl.Record, dims={"T": None}):
        t = fl.field("T", "int32")

    ds = fl.Dataset(Doc, [{"t": np.arange(i, dtype=np.int32)} for i in range(7)])
    b = next(iter(fl.Loader(ds, 3, seed=1, output="torch", pad=True)))
    moved = b.to("cpu")
    assert isinstance(moved, fl.Batch) and moved is not b
    assert moved.t.tolist() == b.t.tolist() and isinstance(moved.t, torch.Tensor)
    m, n = moved.meta, b.meta
    assert m.size == n.size and m.record_indices.tolist() == n.record_indices.tolist()
    assert m.mask.tolist() == n.mask.tolist() and m.lengths["T"].tolist() == n.lengths["T"].tolist()
    plain = next(iter(fl.Loader(ds, 3, seed=1)))  # numpy fields stay as they are
    assert plain.to("cpu").t is plain.t


def _doubled(ex):
    return {"x": ex["x"] * 2, "y": ex["y"]}


@pytest.mark.parametrize("source", ["file", "mapped", "mix"])
@pytest.mark.parametrize("pad", [False, True])
def test_batches_for_a_cuda_device_are_gathered_into_their_own_buffers(
    monkeypatch, tmp_path, pad, source
):
    # To a CUDA device, a file's rows are gathered straight into pinned buffers, one set
    # per batch. Here (no GPU) the CPU stands for the device, the buffers unpinned.
    from feedline.loader import _plan, _util

    monkeypatch.setitem(_util._CUDA, "cpu", True)
    monkeypatch.setattr(_plan, "on_host", lambda device: False)
    real, pins = torch.empty, []

    def empty(*shape, pin_memory=False, **kw):
        pins.append(pin_memory)
        return real(*shape, **kw)

    monkeypatch.setattr(torch, "empty", empty)
    path = str(tmp_path / "r.flr")
    fl.recfile.write(path, R, {"x": np.arange(46.0).reshape(23, 2), "y": np.arange(23)})
    with fl.recfile.open(path) as f:
        ds = fl.Dataset(R, f)
        if source == "mapped":  # a map's results written into the buffers
            ds = ds.map(_doubled)
        elif source == "mix":  # two sources' rows into one batch's buffers
            other = fl.Dataset(R, {"x": -np.ones((9, 2), np.float32), "y": np.arange(9) + 100})
            ds = fl.Seq.mix([ds.shuffle(1), other.shuffle(2)])
        kw = dict(seed=2, pad=pad, output="torch", workers=0)
        want = as_lists(fl.Loader(ds, 5, **kw))
        pins.clear()
        got = list(fl.Loader(ds, 5, device="cpu", **kw))
    assert as_lists(got) == want
    assert pins == [True] * 2 * len(got)  # two fields a batch, each pinned
    assert len({b.x.data_ptr() for b in got}) == len(got)  # no buffer shared


def test_a_change_in_the_middle_of_a_pass_reaches_the_next_batch_of_its_chunk():
    # (on a GPU, batches are cut from chunks of several; a chunk is gathered from the
    # columns as they were, and a change to them makes the next batch gather a new one)
    td = tensor_dataset(40)
    loader = fl.Loader(fl.Dataset(R, td), 4)
    it = iter(loader)
    assert next(it).y.tolist() == [0, 1, 2, 3]
    td.tensors[1].add_(100)
    rest = [b.y.tolist() for b in it]
    assert rest[0] == [104, 105, 106, 107] and rest[-1] == [136, 137, 138, 139]


def frozen(a: np.ndarray) -> np.ndarray:
    """``a`` over memory nothing can write (``bytes``): chunks are gathered ahead."""
    return np.frombuffer(a.tobytes(), a.dtype).reshape(a.shape)


@pytest.mark.parametrize("pad", [False, True])
def test_batches_cut_from_chunks_equal_the_host_batches(pad):
    n = 1000
    cols = {
        "x": frozen(np.arange(2.0 * n, dtype=np.float32).reshape(n, 2)),
        "y": frozen(np.arange(n)),
    }
    ds = fl.Dataset(R, cols)
    want = as_lists(fl.Loader(ds, 7, seed=3, pad=pad))
    loader = fl.Loader(ds, 7, seed=3, pad=pad, device="cpu", check_values=True)
    got = list(loader)
    assert loader._device.chunks and loader._device._chunk is not None
    assert as_lists(got) == want
    assert as_lists(loader) != want and len(list(loader)) == len(want)  # the next passes


def test_threads_taking_batches_from_the_device_get_each_record_once():
    import threading

    n = 5000
    x, y = frozen(np.arange(2.0 * n).reshape(n, 2)), frozen(np.arange(n))
    ds = fl.Dataset.from_arrays(x=x, y=y)
    loader = fl.Loader(ds, 16, seed=4, device="cpu", check_values=True)
    assert loader._plan.columns().chunks  # batches cut from chunks, by three threads
    it, got, lock = iter(loader), [], threading.Lock()

    def take():
        for b in it:
            assert (b.x[:, 0] == 2 * b.y).all()  # each batch's rows are its own records
            assert b.y.tolist() == b.meta.record_indices.tolist()
            with lock:
                got.extend(b.y.tolist())

    threads = [threading.Thread(target=take) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(got) == list(range(n))


@pytest.mark.parametrize(("checked", "plan"), [(False, "PlainPlan"), (True, "DevicePlan")])
def test_a_write_to_arrays_in_memory_reaches_the_next_batch_on_the_cpu(checked, plan):
    # On the CPU the device's tensors are the arrays themselves: batches are gathered one
    # by one (no chunk gathered ahead), so a write in the middle of a pass shows in the
    # next batch, as on the plain path.
    x = np.zeros((40, 2), np.float32)
    ds = fl.Dataset(R, {"x": x, "y": np.arange(40)})
    loader = fl.Loader(ds, 4, output="torch", check_values=checked)
    assert loader._plan.__class__.__name__ == plan
    it = iter(loader)
    assert next(it).x.sum().item() == 0
    x[:] = 1
    assert [b.x.sum().item() for b in it] == [8.0] * 9


def test_torch_tensors_of_one_dataset_in_memory_on_the_cpu_take_the_plain_path():
    # np.take and tensors over the taken arrays: the device path's batches, faster
    n = 3000
    ds = fl.Dataset.from_arrays(x=np.arange(2.0 * n).reshape(n, 2), y=np.arange(n))
    for device in (None, "cpu"):
        plain = fl.Loader(ds, 16, seed=4, output="torch", device=device)
        device_path = fl.Loader(ds, 16, seed=4, output="torch", device=device, check_values=True)
        assert type(plain._plan).__name__ == "PlainPlan"
        assert type(device_path._plan).__name__ == "DevicePlan"
        for _ in range(2):  # two passes
            got, want = list(plain), list(device_path)
            assert len(got) == len(want) == -(-n // 16)
            for g, w in zip(got, want):
                assert isinstance(g.x, torch.Tensor) and isinstance(g.meta.mask, torch.Tensor)
                assert torch.equal(g.x, w.x) and torch.equal(g.y, w.y)
                assert g.meta.record_indices.tolist() == w.meta.record_indices.tolist()
