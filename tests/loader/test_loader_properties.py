"""Property tests of the loader over random sizes, batch sizes, shards and seeds."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import feedline as fl

FAST = settings(max_examples=60, deadline=None)

SIZES = st.integers(0, 300)
BATCHES = st.integers(1, 64)
COUNTS = st.integers(1, 5)
SEEDS = st.one_of(st.none(), st.integers(-3, 0), st.integers(1, 2**63 - 1))
TAILS = st.sampled_from(["keep", "drop_last", "pad"])


class R(fl.Record, dims={"D": 2}):
    """A test example: two features and a label."""

    x = fl.field("D", "float32")
    y = fl.field((), "int64")


def dataset(n: int, base: int = 0) -> fl.Dataset:
    i = np.arange(base, base + n)
    return fl.Dataset(
        R, {"x": (i[:, None] * 10 + np.arange(2)).astype(np.float32), "y": i.astype(np.int64)}
    )


def tail_options(tail: str) -> dict:
    return {} if tail == "keep" else {tail: True}


def one_pass(loader, b: int, tail: str) -> list[tuple[int, int]]:
    """The (ordinal, record) pairs of the loader's next pass, checking each batch's shape."""
    got = []
    batches = list(loader)
    assert len(batches) == len(loader)
    for k, batch in enumerate(batches):
        last = k == len(batches) - 1
        if not last or tail == "drop_last":
            assert batch.meta.size == b
        assert 0 < batch.meta.size <= b
        assert len(batch) == (b if tail == "pad" else batch.meta.size)
        assert batch.meta.mask.sum() == batch.meta.size
        recs = batch.meta.record_indices[: batch.meta.size]
        ords = batch.meta.source_ordinals[: batch.meta.size]
        # Values come from the named item (y is the global item number).
        k = batch.meta.size
        np.testing.assert_array_equal(batch.x[:k, 0], batch.y[:k] * 10)
        got.extend(zip(ords.tolist(), recs.tolist()))
    return got


@FAST
@given(n=SIZES, b=BATCHES, count=COUNTS, seed=SEEDS, tail=TAILS)
def test_every_pass_of_every_shard_yields_its_items_once_and_the_shards_cover_all(
    n, b, count, seed, tail
):
    ds = dataset(n)
    union: Counter = Counter()
    for i in range(count):
        lo, hi = i * n // count, (i + 1) * n // count
        size = hi - lo
        # Contract 2: data.nu's contiguous slice is split (shard deals the positions).
        loader = fl.Loader(ds, b, seed=seed, split=(i, count), **tail_options(tail))
        assert len(loader) == (size // b if tail == "drop_last" else -(-size // b))
        first = one_pass(loader, b, tail)
        second = one_pass(loader, b, tail)
        kept = size // b * b if tail == "drop_last" else size
        for p in (first, second):
            assert len(p) == kept == len(set(p))
            assert all(o == 0 and lo <= r < hi for o, r in p)
        if tail != "drop_last":
            assert sorted(r for _, r in first) == list(range(lo, hi))
            assert sorted(first) == sorted(second)
        if seed is None or seed <= 0:
            assert [r for _, r in first] == list(range(lo, lo + kept))
        union.update(r for _, r in first)
    if tail != "drop_last":
        assert union == Counter(range(n))


@FAST
@given(
    n_a=st.integers(1, 150),
    n_b=st.integers(0, 150),
    b=BATCHES,
    count=COUNTS,
    seed=st.integers(0, 2**63 - 1),
    repeat=st.integers(1, 2),
)
def test_shards_of_a_mix_deal_its_order_round_robin_and_cover_it_once(
    n_a, n_b, b, count, seed, repeat
):
    a, c = dataset(n_a), dataset(n_b, base=10_000)
    parts = [a.shuffle(1)] + ([c.shuffle(2)] if n_b else [])
    seq = fl.Seq.mix(parts).repeat(repeat)
    order = fl.Order(seq, seed=seed)
    ords, recs = order.lookup(np.arange(len(order), dtype=np.int64))
    union: Counter = Counter()
    for i in range(count):
        loader = fl.Loader(seq, b, seed=seed, shard=(i, count))
        got = one_pass(loader, b, "keep")
        assert got == list(zip(ords[i::count].tolist(), recs[i::count].tolist()))
        union.update(got)
    want = Counter({**{(0, r): repeat for r in range(n_a)}, **{(1, r): repeat for r in range(n_b)}})
    assert union == want


@FAST
@given(
    n=st.integers(0, 200),
    world=st.integers(1, 6),
    b=st.integers(1, 16),
    seed=SEEDS,
    kind=st.sampled_from(["dataset", "seq"]),
)
def test_even_ranks_take_the_same_steps_and_cover_every_item_once(n, world, b, seed, kind):
    ds = dataset(n)
    source = ds if kind == "dataset" else ds.shuffle(3)
    longest = -(-n // world)
    steps = -(-longest // b)
    union: Counter = Counter()
    with pytest.MonkeyPatch.context() as mp:
        for rank in range(world):
            mp.setenv("RANK", str(rank))
            mp.setenv("WORLD_SIZE", str(world))
            loader = fl.Loader(source, b, seed=seed, shard="auto", even=True)
            batches = list(loader)
            assert len(batches) == len(loader) == steps
            for batch in batches:
                assert len(batch) == b
                pad = ~batch.meta.mask
                assert (batch.meta.record_indices[pad] == -1).all()
                assert (batch.y[pad] == 0).all()
                union.update(batch.meta.record_indices[batch.meta.mask].tolist())
    assert union == Counter(range(n))


@FAST
@given(n=st.integers(0, 120), b=st.integers(1, 20), seed=SEEDS, tail=TAILS, data=st.data())
def test_a_state_saved_anywhere_resumes_the_rest_of_two_passes(n, b, seed, tail, data):
    def make():
        return fl.Loader(
            fl.Seq.mix([dataset(n).to_seq(), dataset(7, 500).shuffle(9)]),
            b,
            seed=seed,
            **tail_options(tail),
        )

    loader = make()
    steps = len(loader)
    stream = []
    for _ in range(2):
        stream.extend(
            (x.meta.source_ordinals.tolist(), x.meta.record_indices.tolist(), x.y.tolist())
            for x in loader
        )
    assert len(stream) == 2 * steps
    k = data.draw(st.integers(0, 2 * steps), label="batches before the save")
    loader = make()
    it = iter(loader)
    for _ in range(min(k, steps)):
        next(it)
    if k >= steps:
        assert next(it, None) is None
        it = iter(loader)
        for _ in range(k - steps):
            next(it)
    state = json.loads(json.dumps(loader.state_dict()))
    fresh = make()
    fresh.load_state_dict(state)
    rest = []
    for _ in range(2 if k < steps else 1):
        rest.extend(
            (x.meta.source_ordinals.tolist(), x.meta.record_indices.tolist(), x.y.tolist())
            for x in fresh
        )
    assert rest == stream[k:]


@FAST
@given(n=st.integers(0, 150), b=BATCHES, seed=SEEDS, tail=TAILS)
def test_next_into_delivers_the_same_rows_as_iteration(n, b, seed, tail):
    ds = dataset(n)
    it_loader = fl.Loader(ds, b, seed=seed, **tail_options(tail))
    into_loader = fl.Loader(ds, b, seed=seed, **tail_options(tail))
    out = {"x": np.full((b + 1, 2), -1, np.float32), "y": np.full(b + 1, -1, np.int64)}
    for _ in range(2):
        iter(into_loader)  # starts the next pass once the last one is over
        for batch in it_loader:
            k = into_loader.next_into(out)
            assert k == batch.meta.size
            np.testing.assert_array_equal(out["y"][: len(batch)], batch.y)
            np.testing.assert_array_equal(out["x"][: len(batch)], batch.x)
        assert into_loader.next_into(out) == 0


@FAST
@given(
    n=st.integers(2, 200),
    b=BATCHES,
    first=st.integers(1, 2**63 - 1),
    second=st.integers(1, 2**63 - 1),
    history=st.integers(0, 30),
)
def test_reset_is_a_pure_function_of_the_seed(n, b, first, second, history):
    ds = dataset(n)
    loader = fl.Loader(ds, b, seed=first)
    it = iter(loader)
    for _ in range(history):
        if next(it, None) is None:
            it = iter(loader)
    loader.reset(second)
    fresh = fl.Loader(ds, b, seed=second)
    for _ in range(2):
        assert [x.y.tolist() for x in loader] == [x.y.tolist() for x in fresh]
