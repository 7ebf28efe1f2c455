"""The loader makes the next order block on a look-ahead thread while it gathers the
current one: the stream must be the order's, whatever the timing, after a fork, a
reset, a restore, and when making a block fails."""

from __future__ import annotations

import os

import numpy as np
import pytest

import feedline as fl
from feedline.loader import _ahead, _blocks
from feedline.order import Order, Schedule, Seq

N = 300_000  # about five blocks of 64k positions


def records_of(loader) -> np.ndarray:
    return np.concatenate([b.meta.record_indices for b in loader])


@pytest.fixture
def ds():
    return fl.Dataset.from_arrays(x=np.arange(N, dtype=np.int64))


def test_a_shuffled_pass_is_the_orders_positions_with_blocks_made_ahead(ds):
    loader = fl.Loader(ds, 1000, seed=7)
    first = next(loader)
    assert loader._ahead is not None and loader._ahead.start == loader._block[4]
    got = np.concatenate([first.x] + [b.x for b in loader])
    want = Order(Seq.source(ds).shuffle(7)).lookup(np.arange(N))[1]
    np.testing.assert_array_equal(got, want)
    # the next pass is reshuffled, block for block, from its own order
    again = np.concatenate([b.x for b in loader])
    assert sorted(again.tolist()) == list(range(N)) and not np.array_equal(again, got)


def test_a_mix_continues_its_walk_across_blocks_and_matches_lookups():
    a = fl.Dataset.from_arrays(x=np.arange(200_000, dtype=np.int64))
    b = fl.Dataset.from_arrays(x=np.arange(200_000, 300_000, dtype=np.int64))
    seq = Seq.mix([(Seq.source(a).shuffle(1), Schedule.ramp(0.2, 0.8)), Seq.source(b).shuffle(2)])
    order = Order(seq, seed=3)
    loader = fl.Loader(order, 4096)
    got = np.concatenate([batch.x for batch in loader])
    ords, recs = order.lookup(np.arange(len(order)))
    want = np.where(ords == 0, recs, recs + 200_000)
    np.testing.assert_array_equal(got, want)


def test_reset_and_restore_mid_pass_drop_the_block_made_ahead(ds):
    loader = fl.Loader(ds, 1000, seed=5)
    full = records_of(fl.Loader(ds, 1000, seed=5))
    for _ in range(70):  # past the first block, so a second is being made
        next(loader)
    state = loader.state_dict()
    loader.reset(9)
    other = records_of(loader)
    np.testing.assert_array_equal(np.sort(other), np.arange(N))
    loader.load_state_dict(state)
    np.testing.assert_array_equal(records_of(loader), full[70_000:])


def test_a_forked_child_makes_its_own_blocks(ds):
    loader = fl.Loader(ds, 1000, seed=11)
    full = records_of(fl.Loader(ds, 1000, seed=11))
    for _ in range(60):
        next(loader)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its copy of the block made ahead belongs to the parent
        try:
            ok = np.array_equal(records_of(loader), full[60_000:])
            os.write(write, b"1" if ok else b"0")
        finally:
            os._exit(0)
    os.close(write)
    try:
        assert os.read(read, 1) == b"1"
    finally:
        os.close(read)
        os.waitpid(pid, 0)
    np.testing.assert_array_equal(records_of(loader), full[60_000:])


def test_a_failure_making_a_block_ahead_reaches_the_caller_and_loses_no_batch(ds, monkeypatch):
    full = records_of(fl.Loader(ds, 1000, seed=3))
    real = _ahead.Ahead.make
    calls = {"n": 0}

    def flaky(cursor, length):
        calls["n"] += 1
        if calls["n"] == 2:  # the first block made ahead
            raise OSError("the order's storage went away")
        return real(cursor, length)

    monkeypatch.setattr(_ahead.Ahead, "make", staticmethod(flaky))
    loader = fl.Loader(ds, 1000, seed=3)
    per_block = -(-_blocks._FIRST_BLOCK // 1000)  # batches in the first block
    got = [next(loader).meta.record_indices for _ in range(per_block)]
    with pytest.raises(OSError, match="went away"):
        next(loader)
    got += [b.meta.record_indices for b in loader]  # made again, in the calling thread
    np.testing.assert_array_equal(np.concatenate(got), full)


@pytest.mark.parametrize("share", [(0, 2), (1, 3), (2, 5)])
def test_a_share_of_the_batches_uses_every_block_made_ahead(ds, share, monkeypatch):
    made = []
    real = _ahead.Ahead.make
    monkeypatch.setattr(
        _ahead.Ahead,
        "make",
        staticmethod(lambda cursor, length: made.append(cursor.offset) or real(cursor, length)),
    )
    whole = [b.meta.record_indices.tolist() for b in fl.Loader(ds, 1000, seed=6)]
    made.clear()
    loader = fl.Loader(ds, 1000, seed=6)
    loader.share_batches(*share)
    got = [b.meta.record_indices.tolist() for b in loader]
    assert got == whole[share[0] :: share[1]]
    assert len(made) == len(set(made))  # no block made twice (a look-ahead that missed)
    first = -(-_blocks._FIRST_BLOCK // 1000) * 1000  # the first block, then longer ones
    blocks = 1 + -(-(N - first) // (-(-_blocks._BLOCK // 1000) * 1000))
    assert len(made) <= blocks


def test_a_fork_waits_for_the_block_being_made_ahead(ds, monkeypatch):
    import time

    real = _ahead.Ahead.make

    def slow(cursor, length):  # a block that takes a while (a first kernel load would)
        time.sleep(0.3)
        return real(cursor, length)

    monkeypatch.setattr(_ahead.Ahead, "make", staticmethod(slow))
    loader = fl.Loader(ds, 1000, seed=2)
    next(loader)  # the second block is now being made on the look-ahead thread
    pending = loader._ahead.future
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    done = pending.done()  # at once, in the parent
    os.waitpid(pid, 0)
    assert done  # it finished before the fork: no lock of its thread crossed
