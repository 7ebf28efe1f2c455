"""ShapeScript's workers: 4 by default (fewer CPUs, fewer), ``loader_workers(n)``, and
"started once per dataset parameter and kept for the loops over it"."""

from __future__ import annotations

import gc
import os
import signal

import numpy as np
import pytest

import feedline as fl
from feedline.loader import _config, _pools

from .test_workers import ItemSource, Rows


def tag_pid(example):
    """A map that records which process made the example (in y)."""
    return {"x": example["x"], "y": os.getpid()}


def pid_and_sum(batch):
    """A batch transform that says where it ran."""
    return {"pid": os.getpid(), "sum": int(batch.y.sum())}


def pids(loader) -> set[int]:
    return {int(y) for b in loader for y in b.y}


def records(loader) -> list[list[int]]:
    return [b.meta.record_indices.tolist() for b in loader]


@pytest.fixture(scope="module")
def mapped():
    """One mapped dataset for the tests that only read it: its workers start once."""
    return fl.Dataset(Rows, ItemSource(40)).map(tag_pid)


@pytest.fixture
def setting():
    """Leaves the process-wide setting as it found it."""
    previous = fl.loader_workers(None)
    fl.loader_workers(previous)
    yield
    fl.loader_workers(previous)


def test_the_default_is_four_workers_unless_the_machine_has_fewer_cpus(setting):
    fl.loader_workers(None)
    assert fl.loader_workers() == min(4, _config.usable_cpus())
    assert fl.Loader(fl.Dataset(Rows, ItemSource(8)), 4).workers == fl.loader_workers()


def test_loader_workers_sets_the_default_and_returns_the_previous_setting(setting):
    fl.loader_workers(None)
    assert fl.loader_workers(3) is None
    assert fl.loader_workers() == 3
    assert fl.Loader(fl.Dataset(Rows, ItemSource(8)), 4).workers == 3
    assert fl.Loader(fl.Dataset(Rows, ItemSource(8)), 4, workers=1).workers == 1
    assert fl.loader_workers(0) == 3
    assert fl.loader_workers(None) == 0
    assert fl.loader_workers() == min(4, _config.usable_cpus())
    with pytest.raises(ValueError, match=">= 0"):
        fl.loader_workers(-1)
    with pytest.raises(TypeError):
        fl.loader_workers(2.0)


def test_a_mapped_dataset_is_loaded_by_workers_by_default(setting, mapped):
    fl.loader_workers(None)
    got = pids(mapped.shuffle(1).batches(8))
    assert got and os.getpid() not in got
    assert len(got) <= fl.loader_workers()


def test_a_batch_transform_runs_in_workers_by_default(setting):
    fl.loader_workers(None)
    ds = fl.Dataset.from_arrays(y=np.arange(30))
    out = list(ds.batches(10, batch_transform=pid_and_sum))
    assert [o["sum"] for o in out] == [45, 145, 245]
    assert os.getpid() not in {o["pid"] for o in out}


def test_an_item_by_item_source_is_loaded_by_workers_by_default(setting):
    fl.loader_workers(None)
    loader = fl.Loader(fl.Dataset(Rows, ItemSource(40)), 8, seed=1)
    assert sorted(r for b in records(loader) for r in b) == list(range(40))
    assert loader._pool is not None and len(loader._pool.workers) == fl.loader_workers()


def test_plain_gathers_stay_in_the_calling_process_by_default(setting, tmp_path):
    fl.loader_workers(None)
    ds = fl.Dataset.from_arrays(x=np.arange(30.0).reshape(10, 3))
    fl.recfile.write(
        tmp_path / "r.flr", Rows, {"x": np.zeros((10, 3), np.float32), "y": np.arange(10)}
    )
    with fl.recfile.open(tmp_path / "r.flr") as f:
        for source in (ds, f):
            loader = fl.Loader(source, 4, seed=2)
            assert len(list(loader)) == 3
            assert loader._pool is None


def test_loader_workers_zero_loads_in_the_calling_process(setting, mapped):
    ds = mapped
    fl.loader_workers(0)
    assert pids(ds.batches(8)) == {os.getpid()}
    fl.loader_workers(2)
    assert pids(ds.batches(8, workers=0)) == {os.getpid()}
    assert os.getpid() not in pids(ds.batches(8))


def test_the_seeds_epoch_loop_starts_its_workers_once_and_stays_exact(setting, mapped):
    fl.loader_workers(2)
    ds = mapped
    by_epoch, streams = [], []
    for epoch in range(3):
        seen, stream = set(), []
        for b in ds.shuffle(seed=epoch).batches(8):
            seen |= {int(y) for y in b.y}
            stream.append(b.meta.record_indices.tolist())
        by_epoch.append(seen)
        streams.append(stream)
    assert len(by_epoch[0]) == 2 and os.getpid() not in by_epoch[0]
    assert by_epoch[1] == by_epoch[0] == by_epoch[2]  # the same worker processes
    for epoch, stream in enumerate(streams):
        assert stream == records(ds.shuffle(seed=epoch).batches(8, workers=0))
        assert sorted(r for b in stream for r in b) == list(range(40))


def test_a_finished_loaders_workers_serve_the_next_loader_and_a_closed_ones_stop(setting, mapped):
    ds = mapped
    got = pids(ds.batches(8, seed=1, workers=2))
    second = ds.batches(8, seed=2, workers=2)
    assert pids(second) == got  # the first one's pass ended: its workers went on
    procs = [w.proc for w in second._pool.workers]
    segments = {s.name.lstrip("/") for s in second._pool.slots}
    second.close()  # close frees everything, as it always did
    assert all(p.poll() is not None for p in procs)
    assert not segments & set(os.listdir("/dev/shm"))
    third = pids(ds.batches(8, seed=3, workers=2))
    assert third and not third & got
    # other settings are other workers
    assert not pids(ds.batches(4, workers=2)) & third


def test_a_loader_in_the_middle_of_a_pass_keeps_its_workers(setting, mapped):
    ds = mapped
    want = records(ds.batches(8, seed=3, workers=0))
    a = ds.batches(8, seed=3, workers=2, prefetch=2)
    it = iter(a)
    head = [next(it) for _ in range(2)]
    b = ds.batches(8, seed=3, workers=2, prefetch=2)
    b_stream = [(x.meta.record_indices.tolist(), {int(y) for y in x.y}) for x in b]
    a_stream = [(x.meta.record_indices.tolist(), {int(y) for y in x.y}) for x in [*head, *it]]
    a_pids = set().union(*(p for _, p in a_stream))
    b_pids = set().union(*(p for _, p in b_stream))
    assert not a_pids & b_pids  # b could not take a's workers: a had batches in flight
    assert [r for r, _ in a_stream] == want and [r for r, _ in b_stream] == want


def test_a_resumed_loader_takes_over_the_workers_of_a_dropped_one_exactly(setting):
    ds = fl.Dataset(Rows, ItemSource(80)).map(tag_pid)
    want = records(ds.batches(8, seed=4, workers=0))
    loader = ds.batches(8, seed=4, workers=2, prefetch=3)
    it = iter(loader)
    head = [next(it).meta.record_indices.tolist() for _ in range(3)]
    state = loader.state_dict()
    before = {w.proc.pid for w in loader._pool.workers}
    del it, loader  # dropped with batches in flight: they are waited out, not delivered
    gc.collect()
    resumed = ds.batches(8, seed=4, workers=2, prefetch=3)
    resumed.load_state_dict(state)
    rest = [(b.meta.record_indices.tolist(), {int(y) for y in b.y}) for b in resumed]
    assert head + [r for r, _ in rest] == want
    assert set().union(*(p for _, p in rest)) == before


def test_the_workers_stop_when_the_dataset_is_no_longer_used(setting):
    ds = fl.Dataset(Rows, ItemSource(41)).map(tag_pid)
    loader = ds.batches(8, workers=2)
    list(loader)
    pool = loader._pool
    procs = [w.proc for w in pool.workers]
    segments = {s.name for s in pool.slots}
    assert pool in _pools.live_pools()
    del loader
    gc.collect()
    assert all(p.poll() is None for p in procs)  # ds still has them
    del ds
    gc.collect()
    assert all(p.poll() is not None for p in procs)
    assert pool not in _pools.live_pools()
    assert not {n.lstrip("/") for n in segments} & set(os.listdir("/dev/shm"))


def test_a_source_changed_in_place_gets_new_workers_not_stale_examples(setting):
    items = [{"x": [i, i, i], "y": i} for i in range(12)]
    ds = fl.Dataset(Rows, items)
    assert [int(y) for b in ds.batches(4, workers=2) for y in b.y] == list(range(12))
    items[3] = {"x": [0, 0, 0], "y": 99}
    assert [int(y) for b in ds.batches(4, workers=2) for y in b.y][3] == 99


def test_a_worker_dead_between_passes_is_a_worker_error_then_reset_starts_new_ones(setting):
    ds = fl.Dataset(Rows, ItemSource(42)).map(tag_pid)
    want = records(ds.batches(8, seed=5, workers=0))
    loader = ds.batches(8, seed=5, workers=2)
    assert records(loader) == want
    victim = loader._pool.workers[1].proc  # a dataset of its own: no other test's workers
    os.kill(victim.pid, signal.SIGKILL)
    victim.wait(timeout=10)
    with pytest.raises(fl.WorkerError, match="SIGKILL"):
        list(loader)
    with pytest.raises(fl.WorkerError, match="reset"):
        list(loader)
    loader.reset()
    assert records(loader) == want
    assert victim.pid not in {w.proc.pid for w in loader._pool.workers}


def test_a_worker_dead_in_an_idle_pool_is_replaced_for_the_next_loader(setting):
    ds = fl.Dataset(Rows, ItemSource(43)).map(tag_pid)
    first = ds.batches(8, workers=2)
    got = pids(first)
    victim = first._pool.workers[0].proc
    del first
    os.kill(victim.pid, signal.SIGKILL)
    victim.wait(timeout=10)
    second = ds.batches(8, workers=2)
    assert sorted(r for b in records(second) for r in b) == list(range(43))
    assert victim.pid not in {w.proc.pid for w in second._pool.workers}
    assert len(got) == 2
