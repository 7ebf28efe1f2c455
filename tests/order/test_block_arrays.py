"""An order block's arrays: positions and one source's ordinals written into arrays of the
cursor's again once no earlier block views them (``_base.recycle``). A block held (or
any view of it) is never written into."""

from __future__ import annotations

import gc

import numpy as np
import pytest

import feedline as fl
from feedline._base import recycle
from feedline._base.recycle import Recycler
from feedline.order import _order

N = 100_003


def _order_of(seq: fl.Seq) -> fl.Order:
    return fl.Order(seq, seed=5)


def _blocks(order: fl.Order, k: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """The order's blocks of ``k``, each copied at once (what no recycling can touch)."""
    cur, got = order.cursor(0), []
    while len(cur):
        o, r = cur.next_block(k)
        got.append((o.copy(), r.copy()))
    return got


def test_a_recycler_hands_out_an_array_again_only_once_nothing_views_it():
    pool = Recycler(np.int64, keep=3)
    a = pool.get(100)
    base = a.base
    held = a[10:20]  # a view of a view: it holds the array too
    del a
    b = pool.get(100)
    assert b.base is not base  # held: a new array
    del held, b
    c = pool.get(50)
    assert c.base is base or c.base is pool.arrays[-1]  # one of the two, both free
    d = pool.get(100)
    assert d.base is not c.base
    assert len(pool.arrays) <= 3


def test_a_recycler_keeps_at_most_keep_arrays():
    pool = Recycler(np.uint64, keep=2)
    held = [pool.get(8) for _ in range(5)]  # all viewed: five new arrays
    assert len({h.base.__array_interface__["data"][0] for h in held}) == 5
    assert len(pool.arrays) == 2


@pytest.mark.parametrize(
    "seq",
    [
        fl.Seq.source(N).shuffle(3),
        fl.Seq.source(N),
        fl.Seq.source(N).shuffle(3).skip(7),
        fl.Seq.concat([fl.Seq.source(N // 2), fl.Seq.source(N - N // 2)]).shuffle(1),
        fl.Seq.concat([fl.Seq.source(N // 10 + i) for i in range(10)]).shuffle(1),
    ],
    ids=["shuffle", "identity", "skip", "concat", "shards"],
)
def test_blocks_held_are_never_written_by_the_blocks_after_them(seq, numpy_path):
    want = _blocks(_order_of(seq), 4096)
    cur = _order_of(seq).cursor(0)
    held: list[tuple[int, tuple[np.ndarray, np.ndarray]]] = []
    i = 0
    while len(cur):
        o, r = cur.next_block(4096)
        assert np.array_equal(o, want[i][0]) and np.array_equal(r, want[i][1])
        if i % 3 == 0:  # every third block kept (its records, or a slice of them)
            held.append((i, (o, r) if i % 2 else (o[5:], r[5:])))
        del o, r
        gc.collect()
        i += 1
    assert i == len(want)
    for j, (o, r) in held:
        cut = 0 if j % 2 else 5
        assert np.array_equal(r, want[j][1][cut:]), f"block {j} was written into"
        assert np.array_equal(o, want[j][0][cut:])


def test_a_free_blocks_array_is_written_into_again(numpy_path):
    """The point of it: blocks dropped before the next are made in the same arrays."""
    if not recycle.REUSE:
        pytest.skip("reference counts are not exact here: nothing is reused")
    cur = _order_of(fl.Seq.source(N).shuffle(3)).cursor(0)
    addresses = set()
    for _ in range(10):
        _, r = cur.next_block(4096)
        addresses.add(r.__array_interface__["data"][0])
        del r
    assert len(addresses) == 1


def test_one_sources_ordinals_are_the_callers_to_write():
    """A block's ordinals are an array of the cursor's, filled anew each block: written
    into by the caller (as a tensor by DLPack is, whatever numpy's flag), they change no
    later block, of this cursor or of another order."""
    cur = _order_of(fl.Seq.source(N).shuffle(3)).cursor(0)
    o, r = cur.next_block(1000)
    assert o.dtype == np.int64 and not o.any() and len(o) == 1000
    assert len(np.unique(r)) == 1000 and int(r.max()) < N  # the records are written
    assert o.flags.writeable and r.flags.writeable
    o[:] = 7
    del o, r
    gc.collect()
    for _ in range(3):  # the same arrays again, now that nothing views them
        o2, _r2 = cur.next_block(1000)
        assert not o2.any()
        o2 += 5
        del o2, _r2
    other = _order_of(fl.Seq.source(50)).cursor(0).next_block(5)[0]
    assert other.tolist() == [0] * 5


def test_positions_past_the_shared_range_are_made_as_before(numpy_path):
    k = _order._IOTA_LEN + 10
    order = _order_of(fl.Seq.source(k + 5).shuffle(2))
    o, r = order.cursor(0).next_block(k)
    assert len(r) == k and len(o) == k and not o.any()
    assert np.array_equal(
        np.sort(np.concatenate([r, order.cursor(k).next_block(5)[1]])), np.arange(k + 5)
    )
