"""A closed loader lets go of its data at once, not when the garbage collector next
runs: the memory map of a file (the file closed, no batch held), the columns it copied to
a device. A loader and its plan refer to each other, so only the collector frees them;
until 2026-12-04 they held the file's columns (``benchmarks/compare.py`` showed each
fresh epoch's map still resident beside the next one's: +3.0 GB for a 1.5 GB file)."""

from __future__ import annotations

import gc
import os
import sys
import weakref

import numpy as np
import pytest

import feedline as fl

from ._rows import Row

needs_proc_maps = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="reads /proc/self/maps"
)


def _mapped(path) -> bool:
    """Whether this process maps ``path`` (its realpath in /proc/self/maps)."""
    real = os.path.realpath(path)
    with open("/proc/self/maps") as f:
        return any(line.rstrip("\n").endswith(real) for line in f)


@pytest.fixture
def no_gc():
    """The collector off: what is freed here is freed by reference counts alone."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


@pytest.fixture
def rows_file(tmp_path):
    path = tmp_path / "rows.flr"
    fl.recfile.write(path, Row, {"y": np.arange(20_000, dtype=np.int64)})
    return path


def _double(row):
    return {"y": row["y"] * 2}


def _double_drawing(row, rng):
    """A map that takes a generator: the state records its seed."""
    rng.random()
    return {"y": row["y"] * 2}


@needs_proc_maps
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("workers", [0, 2])
def test_closing_the_loader_and_the_file_unmaps_it(rows_file, no_gc, threads, workers):
    f = fl.recfile.open(rows_file)
    source = fl.Dataset(f.record, f).map(_double) if workers else f
    loader = fl.Loader(source, 64, seed=1, threads=threads, workers=workers)
    total = 0
    for batch in loader:  # a whole pass, then part of the next
        total += int(batch.y.sum())
    it = iter(loader)
    held = [next(it) for _ in range(6)]  # batches of a pass left part-way
    assert total == (2 if workers else 1) * int(np.arange(20_000).sum())
    del batch, held, it, source
    assert _mapped(rows_file)
    loader.close()
    f.close()
    assert not _mapped(rows_file), "the closed loader still holds views of the file's map"


@needs_proc_maps
def test_a_file_given_to_a_loader_is_unmapped_once_the_loader_closes(rows_file, no_gc):
    with fl.Loader(fl.recfile.open(rows_file), 64, seed=1) as loader:
        got = [b.y.copy() for b in loader]
    assert sum(len(y) for y in got) == 20_000
    del loader
    assert not _mapped(rows_file)


def test_closing_a_device_loader_frees_its_device_columns(no_gc):
    pytest.importorskip("torch")
    ys = np.arange(5_000, dtype=np.int64)
    # check_values: the device path with the CPU as the device (one plain dataset's
    # CPU tensors otherwise take the plain path)
    loader = fl.Loader(fl.Dataset(Row, {"y": ys}), 50, seed=1, output="torch", check_values=True)
    assert type(loader._plan).__name__ == "DevicePlan"
    got = sorted(int(v) for b in loader for v in b.y)
    assert got == list(range(5_000))
    columns = weakref.ref(loader._plan.columns())
    loader.close()
    assert columns() is None, "the closed loader still holds its device columns"
    with pytest.raises(ValueError, match="closed"):
        next(iter(loader))


def test_a_state_saved_after_close_is_the_state_saved_before(no_gc):
    """Saving after the ``with`` block (the loop done, the loader closed) is common: the
    state used to name 0 sources and no map seeds then, and no loader would load it."""
    ds = fl.Dataset(Row, {"y": np.arange(1_000, dtype=np.int64)}).map(_double_drawing, seed=3)
    with fl.Loader(ds, 10, seed=1) as loader:
        it = iter(loader)
        first = [next(it).y.copy() for _ in range(5)]
        inside = loader.state_dict()
    assert loader.state_dict() == inside
    again = fl.Loader(ds, 10, seed=1)
    again.load_state_dict(loader.state_dict())
    whole = [b.y.copy() for b in fl.Loader(ds, 10, seed=1)]
    got = np.concatenate(first + [b.y for b in again])
    np.testing.assert_array_equal(got, np.concatenate(whole))


def test_a_closed_loader_refuses_what_would_need_its_sources(no_gc):
    loader = fl.Loader(fl.Dataset(Row, {"y": np.arange(100, dtype=np.int64)}), 10, seed=1)
    state = loader.state_dict()
    loader.close()
    for call in (lambda: loader.load_state_dict(state), lambda: loader.share_batches(0, 2)):
        with pytest.raises(ValueError, match="closed"):
            call()


@needs_proc_maps
@pytest.mark.parametrize("mapped", [False, True])
def test_a_dataset_over_a_file_dropped_unclosed_unmaps_it(rows_file, no_gc, mapped):
    """A dataset referred to itself (its own unmapped base), so only the collector freed
    one, and its share of the file's map with it."""
    f = fl.recfile.open(rows_file)
    ds = fl.Dataset(f.record, f)
    if mapped:
        ds = ds.map(_double)
    assert int(ds[7]["y"]) == (14 if mapped else 7)
    del f
    assert _mapped(rows_file)
    del ds
    assert not _mapped(rows_file)


# -- dropped without close ----------------------------------------------------------------
# A loader whose pass ended and that is dropped (``for batch in fl.Loader(...)``, the
# common way) is freed by reference counts: its plan refers to it strongly only while a
# pass is being iterated.


@needs_proc_maps
@pytest.mark.parametrize("threads", [1, 2])
def test_a_loader_dropped_after_its_pass_lets_go_of_the_file(rows_file, no_gc, threads):
    f = fl.recfile.open(rows_file)
    total = sum(int(b.y.sum()) for b in fl.Loader(f, 64, seed=1, threads=threads))
    assert total == int(np.arange(20_000).sum())
    del f
    assert not _mapped(rows_file), "the dropped loader still holds the file"


def test_a_loader_dropped_after_its_pass_frees_its_device_columns(no_gc):
    pytest.importorskip("torch")
    ds = fl.Dataset(Row, {"y": np.arange(5_000, dtype=np.int64)})
    loader = fl.Loader(ds, 50, seed=1, output="torch", check_values=True)
    assert sum(len(b.y) for b in loader) == 5_000
    columns = weakref.ref(loader._plan.columns())
    del loader
    assert columns() is None, "the dropped loader still holds its device columns"


@pytest.mark.parametrize("threads", [1, 2])
def test_an_iterator_alone_keeps_its_loader_for_the_pass(no_gc, threads):
    """``iter(fl.Loader(...))`` with no other reference: the pass is whole, and the
    exhausted iterator stays exhausted."""
    ys = np.arange(1_000, dtype=np.int64)
    it = iter(fl.Loader(fl.Dataset(Row, {"y": ys}), 10, seed=1, threads=threads))
    got = np.concatenate([b.y.copy() for b in it])
    assert sorted(got.tolist()) == ys.tolist()
    with pytest.raises(StopIteration):
        next(it)


@needs_proc_maps
def test_closing_while_another_thread_iterates_leaves_no_view(rows_file, no_gc):
    """The batch another thread is making as the loader closes is its last: no chunk
    gathered after the close holds a view of the file."""
    import threading

    f = fl.recfile.open(rows_file)
    loader = fl.Loader(f, 16, seed=1, threads=2)
    started, outcome = threading.Event(), []

    def run() -> None:
        try:
            for i, b in enumerate(loader):
                if i == 20:
                    started.set()
                del b
            outcome.append("ended")
        except ValueError as e:
            outcome.append(str(e))
        finally:
            started.set()

    t = threading.Thread(target=run)
    t.start()
    started.wait(10)
    loader.close()
    t.join(10)
    assert not t.is_alive()
    assert outcome in (["ended"], ["the loader is closed"])
    f.close()
    assert not _mapped(rows_file), "a chunk gathered after the close still views the file"
