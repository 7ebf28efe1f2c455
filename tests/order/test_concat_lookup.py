"""A concat finds each position's child in a table of buckets (``_child_table``) and
locates a concat of leaves (a manifest's shards) with two per-child tables; groups of
positions by part come from one stable sort where many parts are present
(``by_part``). Each gives what a binary search and a child-by-child walk give."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import feedline as fl
from feedline.order import _child_table, _nodes
from feedline.order._schedule import _SCAN_PARTS, by_part


def _scanned(part: np.ndarray, k: int) -> list[tuple[int, np.ndarray]]:
    present = np.flatnonzero(np.bincount(part, minlength=k))
    return [(int(i), np.flatnonzero(part == i)) for i in present]


def _indices(at, n: int) -> np.ndarray:
    return np.arange(n)[at] if isinstance(at, slice) else at


@settings(max_examples=150, deadline=None)
@given(
    k=st.sampled_from([1, 2, 5, 7, 40, 256, 257, 3000, 70_000]),
    n=st.integers(0, 3000),
    seed=st.integers(0, 2**32 - 1),
    runs=st.booleans(),
)
def test_by_part_gives_each_parts_indices_in_order(k, n, seed, runs):
    rng = np.random.default_rng(seed)
    # few parts present, or many (a sort), or the parts in runs (slices)
    present = rng.choice(k, size=min(k, int(rng.integers(1, 2 * _SCAN_PARTS + 2))), replace=False)
    part = rng.choice(present, size=n).astype(np.int64)
    if runs:
        part.sort()
    got = [(i, _indices(at, n)) for i, at in by_part(part, k)]
    want = _scanned(part, k)
    assert [i for i, _ in got] == [i for i, _ in want]
    for (_, a), (_, b) in zip(got, want):
        assert np.array_equal(a, b)


def _concat(lengths: list[int], skips: list[int] | None = None) -> _nodes.Concat:
    """A concat of leaves of ``lengths`` (source ``3 i + 1``, from record ``skips[i]``)."""
    offsets = np.concatenate(([0], np.cumsum(lengths)[:-1])).tolist()
    skips = skips or [0] * len(lengths)
    leaves = tuple(
        _nodes.Leaf(n, ordinal=3 * i + 1, length=n + s, offset=s)
        for i, (n, s) in enumerate(zip(lengths, skips))
    )
    return _nodes.Concat(int(sum(lengths)), children=leaves, offsets=tuple(offsets))


# shards' lengths: tiny, short and long ones mixed
LENGTHS = st.lists(
    st.one_of(st.integers(1, 3), st.integers(1, 400), st.integers(1000, 50_000)),
    min_size=2,
    max_size=60,
)


@settings(max_examples=200, deadline=None)
@given(lengths=LENGTHS, seed=st.integers(0, 2**32 - 1))
def test_each_positions_child_is_the_binary_searchs(lengths, seed):
    c = _concat(lengths)
    rng = np.random.default_rng(seed)
    pos = np.concatenate(
        (
            rng.integers(0, c.n, 500),
            c._starts.astype(np.int64),  # every child's first position and the one before
            np.maximum(c._starts.astype(np.int64) - 1, 0),
            [c.n - 1],
        )
    ).astype(np.uint64)
    want = np.searchsorted(c._starts, pos, side="right") - 1
    assert np.array_equal(c.children_of(pos), want)


@pytest.mark.parametrize(
    "lengths",
    [
        [1000] * 1024,  # equal shards: one boundary a bucket
        [7] * 300 + [1],  # a short last shard
        [1] * 50 + [100_000] + [1] * 50,  # short shards crowded together
        list(range(1, 400)),
        [3, 5],  # two children: a binary search
    ],
    ids=["equal", "short-last", "crowded", "growing", "two"],
)
def test_every_position_of_many_shards_finds_its_child(lengths):
    c = _concat(lengths)
    pos = np.arange(c.n, dtype=np.uint64)
    want = np.repeat(np.arange(len(lengths)), lengths)
    assert np.array_equal(c.children_of(pos), want)
    if c._which is not None:
        assert c._which[3] <= _child_table._TABLE_PASSES


def _slow(order: fl.Order) -> fl.Order:
    """The same order with every concat located child by child after a binary search
    (the tables switched off)."""
    stack = [order.root]
    found = 0
    while stack:
        node = stack.pop()
        if isinstance(node, _nodes.Concat):
            node._which = node._ordinal = node._shift = None
            found += 1
        stack.extend(getattr(node, "children", ()))
        stack.extend(getattr(node, "parts", ()))
        child = getattr(node, "child", None)
        if child is not None:
            stack.append(child)
    assert found
    return order


def _all_blocks(order: fl.Order, k: int) -> tuple[np.ndarray, np.ndarray]:
    cur, os_, rs = order.cursor(0), [], []
    while len(cur):
        o, r = cur.next_block(k)
        os_.append(o.copy())
        rs.append(r.copy())
    return np.concatenate(os_), np.concatenate(rs)


SHARDS = [
    fl.Seq.concat([fl.Seq.source(300 + 17 * i) for i in range(40)]),
    fl.Seq.concat([fl.Seq.source(300 + 17 * i) for i in range(40)]).shuffle(3),
    fl.Seq.concat([fl.Seq.source(500).skip(i).take(400 - i) for i in range(12)]).shuffle(1),
    fl.Seq.concat([fl.Seq.source(200 + i).shuffle(i) for i in range(20)]).shuffle(2).repeat(2),
    fl.Seq.mix([fl.Seq.concat([fl.Seq.source(100)] * 9).shuffle(1), fl.Seq.source(700)]),
    fl.Seq.concat([fl.Seq.source(1)] * 30 + [fl.Seq.source(5000)]).shuffle(4),
]


@pytest.mark.parametrize(
    "seq", SHARDS, ids=["plain", "shuffled", "ranges", "nested", "mix", "ones"]
)
@pytest.mark.parametrize("k", [1, 777, 100_000])
@pytest.mark.parametrize("native", ["0", "1"], ids=["numpy", "c"])
def test_concats_locate_as_child_by_child(seq, k, native, numpy_path, monkeypatch):
    """By the tables on the numpy path, or in C (``ordering.concat_locate``, where built
    and on), as child by child."""
    monkeypatch.setenv("FEEDLINE_NATIVE", native)
    fast = _all_blocks(fl.Order(seq, seed=6), k)
    slow = _all_blocks(_slow(fl.Order(seq, seed=6)), k)
    assert np.array_equal(fast[0], slow[0]) and np.array_equal(fast[1], slow[1])


def test_a_concat_of_ranges_gives_each_sources_records():
    """Without a shuffle the order is the children's ranges end to end: known without
    any of the code under test."""
    parts = [(0, 500, 3, 400), (1, 60, 0, 60), (2, 9000, 8000, 1000)]  # (source, len, skip, take)
    seq = fl.Seq.concat([fl.Seq.source(n).skip(s).take(t) for _, n, s, t in parts] * 5)
    ords, recs = fl.Order(seq).lookup(np.arange(sum(t for *_, t in parts) * 5))
    want_o = np.concatenate([np.full(t, 3 * j + i) for j in range(5) for i, _, _, t in parts])
    want_r = np.concatenate([np.arange(s, s + t) for _ in range(5) for _, _, s, t in parts])
    assert np.array_equal(ords, want_o) and np.array_equal(recs, want_r)
