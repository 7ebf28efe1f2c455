"""Loaders over files: the file stays open for the loader when the caller closes theirs."""

from __future__ import annotations

import gc
import os

import numpy as np

import feedline as fl


def open_fds(path) -> int:
    target = os.path.realpath(path)
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}") == target:
                count += 1
        except OSError:
            pass
    return count


def test_a_file_closed_early_by_its_caller_stays_usable_by_the_loader(tmp_path):
    path = tmp_path / "rows.ndf"
    fl.ndf.save(path, np.arange(40.0).reshape(20, 2))
    f = fl.ndf.open(path)
    loader = fl.Loader(f, 6, seed=3)
    f.close()
    rows = np.concatenate([b.x[:, 0] for b in loader])
    assert sorted(rows.tolist()) == list(range(0, 40, 2))
    assert open_fds(path) >= 1
    loader.close()
    gc.collect()
    assert open_fds(path) == 0


def test_an_flr_dataset_keeps_its_own_share(tmp_path):
    class P(fl.Record, dims={"D": 2}):
        v = fl.field("D", "float32")

    path = tmp_path / "p.flr"
    fl.recfile.write(path, P, {"v": np.arange(20.0).reshape(10, 2)})
    f = fl.recfile.open(path)
    ds = fl.Dataset(f.record, f)
    f.close()
    assert sorted(ds.getitems(np.arange(10))["v"][:, 1].tolist()) == list(range(1, 20, 2))
    ds.close()
    gc.collect()
    assert open_fds(path) == 0


def test_loaders_over_ndf_and_over_its_arrays_give_the_same_batches(tmp_path):
    x = np.random.default_rng(0).random((33, 3))
    y = np.arange(33.0).reshape(33, 1)
    fl.ndf.save(tmp_path / "a.ndf", x, y)
    with fl.ndf.open(tmp_path / "a.ndf") as f:
        from_file = [(b.x, b.y) for b in fl.Loader(f, 5, seed=9)]
    from_arrays = [(b.x, b.y) for b in fl.Loader(fl.Dataset.from_arrays(x=x, y=y), 5, seed=9)]
    for (a, b), (c, d) in zip(from_file, from_arrays, strict=True):
        np.testing.assert_array_equal(a, c)
        np.testing.assert_array_equal(b, d)


def test_next_into_over_a_mapped_flr_fills_the_callers_arrays_like_iteration(tmp_path):
    class P(fl.Record, dims={"D": 3}):
        v = fl.field("D", "float32")
        k = fl.field((), "int64")

    n = 70_000  # more than one order block
    v = np.random.default_rng(1).random((n, 3), dtype=np.float32)
    fl.recfile.write(tmp_path / "p.flr", P, {"v": v, "k": np.arange(n)})
    with fl.recfile.open(tmp_path / "p.flr") as f:
        want = [(b.v, b.k) for b in fl.Loader(f, 512, seed=4)]
        loader = fl.Loader(f, 512, seed=4)
        out = {"v": np.full((600, 3), -1, np.float32), "k": np.full(600, -1, np.int64)}
        for v_want, k_want in want:
            rows = loader.next_into(out)
            assert rows == len(k_want)
            np.testing.assert_array_equal(out["v"][:rows], v_want)
            np.testing.assert_array_equal(out["k"][:rows], k_want)
            assert (out["k"][rows:] == -1).all() or rows < 512  # rows past the count kept
        assert loader.next_into(out) == 0
        assert loader._plain_source() is not None  # the path without layers was taken
