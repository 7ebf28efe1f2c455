"""feedline inside torch's DataLoader and torchdata's StatefulDataLoader."""

from __future__ import annotations

import numpy as np
import pytest

import feedline as fl

torch = pytest.importorskip("torch")
from torch.utils.data import DataLoader  # noqa: E402

import feedline.torch as flt  # noqa: E402


class Row(fl.Record, dims={"D": 2}):
    x = fl.field("D", "float32")
    y = fl.field((), "int64")


class Items:
    """Read item by item (picklable: torch workers unpickle it)."""

    def __len__(self) -> int:
        return 103

    def __getitem__(self, i: int) -> dict:
        return {"x": [i, -i], "y": i}


def dataset() -> fl.Dataset:
    return fl.Dataset(Row, Items())


def ys(batches) -> list[list[int]]:
    return [b.y.tolist() for b in batches]


def flat(batches) -> list[int]:
    return [y for b in batches for y in b.y.tolist()]


@pytest.mark.parametrize("num_workers", [0, 1, 2])
def test_a_torch_dataloader_yields_the_loaders_own_stream(num_workers):
    want = ys(fl.Loader(dataset(), 10, seed=5))
    it = flt.IterableDataset(dataset(), 10, seed=5, shard=None)
    got = list(DataLoader(it, batch_size=None, num_workers=num_workers))
    assert ys(got) == want
    assert all(isinstance(b.x, torch.Tensor) and b.x.dtype == torch.float32 for b in got)
    assert sorted(flat(got)) == list(range(103))


@pytest.mark.parametrize("num_workers, persistent", [(0, False), (2, False), (2, True)])
def test_epochs_are_the_loaders_passes_with_set_epoch_or_persistent_workers(
    num_workers, persistent
):
    loader = fl.Loader(dataset(), 10, seed=5)
    want = [ys(loader) for _ in range(3)]
    assert want[0] != want[1] != want[2]  # each pass reshuffled
    it = flt.IterableDataset(dataset(), 10, seed=5, shard=None)
    dl = DataLoader(it, batch_size=None, num_workers=num_workers, persistent_workers=persistent)
    got = []
    for epoch in range(3):
        it.set_epoch(epoch)
        got.append(ys(dl))
    assert got == want


@pytest.mark.parametrize("num_workers, persistent", [(0, False), (1, False), (2, False), (2, True)])
def test_epochs_follow_on_as_new_passes_without_set_epoch(num_workers, persistent):
    loader = fl.Loader(dataset(), 10, seed=5)
    want = [ys(loader) for _ in range(3)]
    it = flt.IterableDataset(dataset(), 10, seed=5, shard=None)
    dl = DataLoader(it, batch_size=None, num_workers=num_workers, persistent_workers=persistent)
    assert [ys(dl) for _ in range(3)] == want


def test_an_epoch_left_part_way_is_made_again_by_fresh_workers():
    want = ys(fl.Loader(dataset(), 10, seed=5))
    it = flt.IterableDataset(dataset(), 10, seed=5, shard=None)
    dl = DataLoader(it, batch_size=None, num_workers=2)
    for i, _ in enumerate(dl):  # leave the first epoch after 3 batches
        if i == 2:
            break
    assert ys(dl) == want  # pass 0 again, whole
    with pytest.raises(ValueError, match="epoch"):
        it.set_epoch(-1)


def test_a_deep_copy_keeps_its_own_pass_record():
    import copy
    import gc

    it = flt.IterableDataset(dataset(), 10, seed=5, shard=None)
    dl = DataLoader(it, batch_size=None, num_workers=2)
    first = ys(dl)
    twin = copy.deepcopy(it)
    assert twin._passes.path != it._passes.path
    del it, dl
    gc.collect()  # the original's record goes with it; the copy's stays
    second = ys(DataLoader(twin, batch_size=None, num_workers=2))
    loader = fl.Loader(dataset(), 10, seed=5)
    assert [first, second] == [ys(loader), ys(loader)]


def test_the_pass_record_is_removed_with_the_dataset():
    import gc
    import os

    it = flt.IterableDataset(dataset(), 10, seed=5, shard=None)
    path = it._passes.path
    list(DataLoader(it, batch_size=None, num_workers=2))
    assert os.path.exists(path)
    del it
    gc.collect()
    assert not os.path.exists(path)


def test_the_length_is_the_loaders():
    it = flt.IterableDataset(dataset(), 10, seed=5, shard=None)
    assert len(it) == 11


def test_a_stateful_dataloader_checkpoint_resumes_exactly():
    stateful = pytest.importorskip("torchdata.stateful_dataloader")
    want = ys(fl.Loader(dataset(), 8, seed=2))
    for workers in (0, 2):
        loader = stateful.StatefulDataLoader(
            flt.IterableDataset(dataset(), 8, seed=2, shard=None),
            batch_size=None,
            num_workers=workers,
        )
        it = iter(loader)
        head = [next(it) for _ in range(5)]
        state = loader.state_dict()
        fresh = stateful.StatefulDataLoader(
            flt.IterableDataset(dataset(), 8, seed=2, shard=None),
            batch_size=None,
            num_workers=workers,
        )
        fresh.load_state_dict(state)
        assert ys(head) + ys(fresh) == want, workers


def real(batches) -> list[int]:
    """The examples of the batches, without the padding of even steps."""
    out = []
    for b in batches:
        keep = b.meta.mask.cpu().numpy()  # a tensor, as the fields are
        out.extend(b.y.numpy()[keep].tolist())
    return out


def test_shard_auto_takes_this_ranks_share(monkeypatch):
    # Even steps are the default under ranks (issue 14): the short rank's last batch is
    # padded, so the examples are compared without the masked padding.
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    batches = list(DataLoader(flt.IterableDataset(dataset(), 10, seed=5), batch_size=None))
    got = real(batches)
    monkeypatch.setenv("RANK", "0")
    other_batches = list(DataLoader(flt.IterableDataset(dataset(), 10, seed=5), batch_size=None))
    other = real(other_batches)
    assert len(batches) == len(other_batches)
    assert sorted(got + other) == list(range(103))
    assert not set(got) & set(other)


def test_numpy_arrays_from_memory_work_in_torch_workers():
    ds = fl.Dataset(Row, {"x": np.zeros((50, 2), np.float32), "y": np.arange(50)})
    got = list(DataLoader(flt.IterableDataset(ds, 7, shard=None), batch_size=None, num_workers=2))
    assert sorted(flat(got)) == list(range(50))


@pytest.mark.parametrize("num_workers", [0, 2])
def test_a_mix_of_files_in_torch_workers_gives_the_loaders_stream(tmp_path, num_workers):
    # Each worker builds its loader (the plain path over the mix, its share of the batches)
    # from the files' paths: every (source, record) pair once a pass, in the loader's
    # batches, with the general path's rows.
    paths = []
    for k, n in enumerate((70, 45)):
        paths.append(tmp_path / f"part{k}.flr")
        y = np.arange(n) + 1000 * k
        fl.recfile.write(paths[-1], Row, {"x": np.stack([y, -y], 1).astype(np.float32), "y": y})
    files = [fl.recfile.open(p) for p in paths]
    seq = fl.Seq.mix([fl.Seq.source(files[0]).shuffle(1), fl.Seq.source(files[1]).shuffle(2)])
    want = ys(fl.Loader(seq, 8, seed=5, check_values=True))  # the general path
    it = flt.IterableDataset(seq, 8, seed=5, shard=None)
    got = list(DataLoader(it, batch_size=None, num_workers=num_workers))
    assert sorted(map(tuple, ys(got))) == sorted(map(tuple, want))  # workers interleave
    if num_workers == 0:
        assert ys(got) == want
    for b in got:
        m = b.meta
        np.testing.assert_array_equal(
            b.y.numpy(), 1000 * m.source_ordinals.numpy() + m.record_indices.numpy()
        )
    for f in files:
        f.close()


# -- a TensorDataset kept on the device --------------------------------------------------------


class Labelled(fl.Record, dims={"D": 2, "C": 10}):
    x = fl.field("D", "float32")
    y = fl.field((), "int64", domain=fl.Index("C"))


def converted_tensors(n: int = 6):
    """float64 features and int32 labels: the dataset converts them (copies, not views)."""
    from torch.utils.data import TensorDataset

    return TensorDataset(torch.zeros(n, 2, dtype=torch.float64), torch.arange(n, dtype=torch.int32))


@pytest.mark.parametrize(("device", "output"), [(None, "numpy"), (None, "torch"), ("cpu", "torch")])
def test_an_in_place_change_to_a_tensor_dataset_is_read_by_the_next_pass(device, output):
    td = converted_tensors()
    ds = fl.Dataset(Labelled, td)
    loader = fl.Loader(ds, 3, device=device, output=output)
    assert [b.x.sum().item() for b in loader] == [0.0, 0.0]
    td.tensors[0][3] = 7  # X[3] = 7
    assert [b.x[:, 0].tolist() for b in loader] == [[0, 0, 0], [7, 0, 0]]
    assert [b.x[:, 0].tolist() for b in ds.batches(3, device=device, output=output)] == [
        [0, 0, 0],
        [7, 0, 0],
    ]


@pytest.mark.parametrize(("device", "output"), [(None, "numpy"), (None, "torch"), ("cpu", "torch")])
def test_an_in_place_change_out_of_its_domain_is_refused_when_value_checks_are_on(device, output):
    td = converted_tensors()
    loader = fl.Loader(fl.Dataset(Labelled, td), 3, device=device, output=output, check_values=True)
    assert [b.y.tolist() for b in loader] == [[0, 1, 2], [3, 4, 5]]
    td.tensors[1][2] = 50
    with pytest.raises(
        fl.DomainError,
        match=r"`y` of item 2 should be in Index\[C\] = "
        r"\[0, 10\), got 50$",
    ):
        list(loader)
    td.tensors[1][2] = 9  # back in its domain: a new pass reads it
    loader.reset()
    assert [b.y.tolist() for b in loader] == [[0, 1, 9], [3, 4, 5]]


def test_ranks_take_even_steps_by_default_so_ddp_never_hangs():
    # Issue 14: with 1,025 rows and batches of 16 on 2 ranks, rank 0 took 33 batches and
    # rank 1 32, and a DDP job hangs at the last collective. Even steps are the default
    # (as fl.jax has them); padding examples are masked.
    ds = fl.Dataset.from_arrays(x=np.arange(1025.0).reshape(-1, 1))
    counts, real = [], []
    for rank in range(2):
        batches = list(DataLoader(flt.IterableDataset(ds, 16, shard=(rank, 2)), batch_size=None))
        counts.append(len(batches))
        for b in batches:
            keep = b.meta.mask.cpu().numpy()  # a tensor, as the fields are
            real.extend(b.x.numpy()[keep].reshape(-1).tolist())
    assert counts[0] == counts[1]
    seen = sorted(real)
    assert seen == list(range(1025))
    uneven = [len(list(flt.IterableDataset(ds, 16, shard=(r, 2), even=False))) for r in range(2)]
    assert uneven[0] != uneven[1]


class Doc(fl.Record, dims={"T": None}):
    tokens = fl.field("T", "int64", pad=-100)
    text = fl.field((), "str")


class Docs:
    """Variable-length items (picklable: torch workers unpickle it)."""

    def __len__(self) -> int:
        return 57

    def __getitem__(self, i: int) -> dict:
        return {"tokens": list(range(i % 9)), "text": "x" * (i % 5)}


@pytest.mark.parametrize("num_workers", [0, 2])
def test_a_torch_dataloader_pads_variable_length_batches_as_the_loader_does(num_workers):
    want = list(fl.Loader(fl.Dataset(Doc, Docs()), 8, seed=2, output="torch"))
    it = flt.IterableDataset(fl.Dataset(Doc, Docs()), 8, seed=2, shard=None)
    got = list(DataLoader(it, batch_size=None, num_workers=num_workers))
    assert len(got) == len(want)
    seen = []
    for g, w in zip(got, want):
        assert isinstance(g.tokens, torch.Tensor) and torch.equal(g.tokens, w.tokens)
        assert torch.equal(g.meta.lengths["T"], w.meta.lengths["T"])
        assert g.text == w.text and isinstance(g.text, list)
        for r, rec in enumerate(g.meta.record_indices.tolist()):
            n = rec % 9
            assert g.tokens[r, :n].tolist() == list(range(n))
            assert (g.tokens[r, n:] == -100).all()
            seen.append(rec)
    assert sorted(seen) == list(range(57))
