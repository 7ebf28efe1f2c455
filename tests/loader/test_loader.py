"""The loader: data.nu's DataLoader semantics, padding, mixes, ranks and outputs.

Every item of the test data carries its own index in its values (``x[i] = 10 i + (0, 1,
2)``, ``y[i] = i % 5``), so a batch's values can be checked against its record indices.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

import feedline as fl


class R(fl.Record, dims={"D": 3}):
    """A test example: three features and a label."""

    x = fl.field("D", "float32")
    y = fl.field((), "int64", domain=fl.Index(5))


class Other(fl.Record, dims={"D": 3}):
    """Another record, of the same shapes."""

    x = fl.field("D", "float32")
    z = fl.field((), "int64")


def arrays(n: int, base: int = 0) -> dict[str, np.ndarray]:
    i = np.arange(base, base + n)
    x = (i[:, None] * 10 + np.arange(3)).astype(np.float32)
    return {"x": x, "y": (i % 5).astype(np.int64)}


def dataset(n: int, base: int = 0) -> fl.Dataset:
    return fl.Dataset(R, arrays(n, base))


def items(n: int, base: int = 0) -> list[dict]:
    a = arrays(n, base)
    return [{"x": a["x"][i], "y": int(a["y"][i])} for i in range(n)]


def buffers(rows: int, fill: float = -7) -> dict[str, np.ndarray]:
    return {
        "x": np.full((rows, 3), fill, dtype=np.float32),
        "y": np.full(rows, int(fill), dtype=np.int64),
    }


def records(loader) -> np.ndarray:
    """The record indices of one pass (the rest of the current pass)."""
    got = [b.meta.record_indices[: b.meta.size] for b in loader]
    return np.concatenate(got) if got else np.zeros(0, dtype=np.int64)


def check_values(batch, base: int = 0) -> None:
    """The batch's real rows hold the values of its record indices."""
    i = batch.meta.record_indices[: batch.meta.size] + base
    want_x = (i[:, None] * 10 + np.arange(3)).astype(np.float32)
    np.testing.assert_array_equal(np.asarray(batch.x)[: batch.meta.size], want_x)
    np.testing.assert_array_equal(np.asarray(batch.y)[: batch.meta.size], i % 5)


# -- data.nu's semantics ----------------------------------------------------------------


@pytest.mark.parametrize("seed", [None, 0, 7])
@pytest.mark.parametrize("shard", [None, (0, 3), (2, 3)])
def test_one_epoch_yields_every_example_of_the_shard_exactly_once(seed, shard):
    # Contract 2: data.nu's contiguous slice is split=(i, n); shard=(i, n) deals positions.
    n = 101
    loader = fl.Loader(dataset(n), 8, seed=seed, split=shard)
    lo, hi = (0, n) if shard is None else (shard[0] * n // shard[1], (shard[0] + 1) * n // shard[1])
    got = []
    for batch in loader:
        check_values(batch)
        got.append(batch.meta.record_indices)
    got = np.concatenate(got)
    assert sorted(got.tolist()) == list(range(lo, hi))


@pytest.mark.parametrize("seed", [None, 0, -1, -(2**40)])
def test_seed_none_or_non_positive_gives_the_identity_order(seed):
    loader = fl.Loader(dataset(50), 6, seed=seed)
    assert records(loader).tolist() == list(range(50))
    # ...in every pass.
    assert records(loader).tolist() == list(range(50))
    assert loader.epoch == 1


def test_different_positive_seeds_give_different_orders():
    ds = dataset(200)
    orders = [tuple(records(fl.Loader(ds, 16, seed=s))) for s in (1, 2, 3, 4, 5, 2**62)]
    assert len(set(orders)) == len(orders)
    for order in orders:
        assert sorted(order) == list(range(200))
        assert list(order) != list(range(200))
    # The same seed gives the same order.
    assert tuple(records(fl.Loader(ds, 16, seed=3))) == orders[2]


def test_the_order_does_not_depend_on_the_batch_size():
    ds = dataset(97)
    first = records(fl.Loader(ds, 1, seed=4))
    for b in (2, 7, 96, 97, 200):
        np.testing.assert_array_equal(records(fl.Loader(ds, b, seed=4)), first)


def test_reset_with_a_seed_is_a_pure_function_of_the_seed_whatever_the_history():
    ds = dataset(60)
    fresh = fl.Loader(ds, 7, seed=9)
    want = [records(fresh) for _ in range(3)]

    loader = fl.Loader(ds, 7, seed=3)
    records(loader)
    it = iter(loader)
    next(it)
    next(it)
    assert loader.epoch == 1
    loader.reset(9)
    assert loader.epoch == 0
    assert loader.seed == 9
    for w in want:
        np.testing.assert_array_equal(records(loader), w)

    # Again after a partial pass, state loads and next_into calls.
    loader.load_state_dict(fl.Loader(ds, 7, seed=1).state_dict())
    loader.next_into(buffers(7))
    loader.reset(9)
    np.testing.assert_array_equal(records(loader), want[0])

    # reset() keeps the current seed; reset(0) is the identity order.
    next(iter(loader))
    loader.reset()
    np.testing.assert_array_equal(records(loader), want[0])
    loader.reset(0)
    assert records(loader).tolist() == list(range(60))


def test_a_finished_pass_is_followed_by_a_reshuffled_pass_of_the_same_items():
    ds = dataset(300)
    loader = fl.Loader(ds, 32, seed=5)
    passes = []
    for epoch in range(4):
        passes.append(records(loader))
        assert loader.epoch == epoch  # the next loop starts the next pass
    for p in passes:
        assert sorted(p.tolist()) == list(range(300))
    assert len({tuple(p) for p in passes}) == 4
    # The passes are a pure function of the seed.
    again = fl.Loader(ds, 32, seed=5)
    for p in passes:
        np.testing.assert_array_equal(records(again), p)


def test_a_for_loop_continues_where_the_last_one_stopped():
    ds = dataset(50)
    want = records(fl.Loader(ds, 4, seed=2))
    loader = fl.Loader(ds, 4, seed=2)
    got = []
    for i, batch in enumerate(loader):
        got.append(batch.meta.record_indices)
        if i == 2:
            break
    assert loader.epoch == 0
    got.extend(b.meta.record_indices for b in loader)
    np.testing.assert_array_equal(np.concatenate(got), want)
    assert loader.epoch == 0
    assert len(list(loader)) == len(loader)
    assert loader.epoch == 1


@pytest.mark.parametrize("n, b", [(10, 3), (9, 3), (1, 5), (64, 64), (65, 64), (1000, 7)])
def test_batches_are_all_full_but_the_last(n, b):
    loader = fl.Loader(dataset(n), b, seed=1)
    sizes = [batch.meta.size for batch in loader]
    assert all(s == b for s in sizes[:-1])
    assert sizes[-1] == n - b * (len(sizes) - 1)
    assert 0 < sizes[-1] <= b
    assert sum(sizes) == n


@pytest.mark.parametrize("n, b", [(10, 3), (9, 3), (2, 5), (65, 64), (1000, 7)])
def test_drop_last_never_yields_the_remainder(n, b):
    loader = fl.Loader(dataset(n), b, seed=1, drop_last=True)
    full = fl.Loader(dataset(n), b, seed=1)
    for _ in range(2):
        want = records(full)[: n // b * b]
        got = []
        for batch in loader:
            assert batch.meta.size == len(batch) == b
            assert batch.meta.mask.all()
            got.append(batch.meta.record_indices)
        got = np.concatenate(got) if got else np.zeros(0, dtype=np.int64)
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("n", [0, 1, 6, 7, 8, 100])
@pytest.mark.parametrize("b", [1, 3, 7, 8])
def test_the_number_of_batches_is_n_over_b_rounded_down_with_drop_last_else_up(n, b):
    ds = dataset(n)
    assert len(fl.Loader(ds, b)) == -(-n // b)
    assert len(fl.Loader(ds, b, drop_last=True)) == n // b
    assert len(fl.Loader(ds, b, pad=True)) == -(-n // b)
    for kw in ({}, {"drop_last": True}, {"pad": True}):
        loader = fl.Loader(ds, b, seed=3, **kw)
        assert len(list(loader)) == len(loader)


@pytest.mark.parametrize("n, count", [(10, 3), (100, 7), (5, 5), (3, 1), (1000, 4)])
def test_splits_are_data_nu_contiguous_slices_that_partition_the_items(n, count):
    # Contract 2: data.nu's contiguous slices are split=(i, n) (shard deals positions).
    ds = dataset(n)
    sizes, seen = [], []
    for i in range(count):
        in_order = records(fl.Loader(ds, 4, split=(i, count)))
        assert in_order.tolist() == list(range(i * n // count, (i + 1) * n // count))
        # The slice is taken before shuffling.
        shuffled = records(fl.Loader(ds, 4, seed=11, split=(i, count)))
        assert sorted(shuffled.tolist()) == in_order.tolist()
        sizes.append(len(in_order))
        seen.extend(shuffled.tolist())
    assert max(sizes) - min(sizes) <= 1
    assert sorted(seen) == list(range(n))


def test_with_more_splits_than_items_some_splits_are_empty():
    n, count = 3, 8
    ds = dataset(n)
    empty = 0
    seen = []
    for i in range(count):
        loader = fl.Loader(ds, 2, seed=5, split=(i, count))
        size = (i + 1) * n // count - i * n // count
        assert len(loader) == -(-size // 2)
        if size == 0:
            empty += 1
            assert len(loader) == 0
            assert list(loader) == []
            assert loader.next_into(buffers(2)) == 0
            assert loader.next_into(buffers(2)) == 0
        seen.extend(records(loader).tolist())
    assert empty == count - n
    assert sorted(seen) == list(range(n))


def test_next_into_overwrites_caller_buffers_and_returns_row_counts():
    n, b = 10, 4
    want = [batch for batch in fl.Loader(dataset(n), b, seed=6)]
    loader = fl.Loader(dataset(n), b, seed=6)
    out = buffers(b + 3)
    counts = []
    for batch in want:
        out["x"][:] = np.nan
        out["y"][:] = -99
        k = loader.next_into(out)
        counts.append(k)
        np.testing.assert_array_equal(out["x"][:k], batch.x)
        np.testing.assert_array_equal(out["y"][:k], batch.y)
        # Rows past the count are not touched.
        assert np.isnan(out["x"][k:]).all()
        assert (out["y"][k:] == -99).all()
    assert counts == [4, 4, 2]
    assert loader.next_into(out) == 0
    # The pass stays over until a new iteration (or reset) starts the next one.
    assert loader.next_into(out) == 0
    assert loader.epoch == 0
    iter(loader)
    assert loader.next_into(out) == 4
    assert loader.epoch == 1


def test_next_into_and_iteration_give_the_same_stream_across_passes():
    ds = dataset(45)
    it_loader = fl.Loader(ds, 8, seed=12)
    into_loader = fl.Loader(ds, 8, seed=12)
    out = buffers(8)
    for _ in range(3):
        iter(into_loader)  # starts the next pass once the last one is over
        for batch in it_loader:
            k = into_loader.next_into(out)
            assert k == batch.meta.size
            np.testing.assert_array_equal(out["x"][:k], batch.x)
            np.testing.assert_array_equal(out["y"][:k], batch.y)
        assert into_loader.next_into(out) == 0


@pytest.mark.parametrize(
    "kind",
    [
        "in memory",
        "streamed",
    ],
)
def test_a_buffer_of_another_dtype_never_loses_a_batch(kind):
    ds = dataset(10) if kind == "in memory" else fl.Dataset(R, items(10))
    loader = fl.Loader(ds, 4)
    out = {"x": np.zeros((4, 3), np.float64), "y": np.zeros(4, np.int64)}
    try:
        k = loader.next_into(out)
    except (TypeError, ValueError):  # refusing the buffer is fine, if nothing is consumed
        out = buffers(4)
        k = loader.next_into(out)
    assert k == 4
    np.testing.assert_array_equal(out["x"], arrays(4)["x"])
    np.testing.assert_array_equal(out["y"], arrays(4)["y"])


def test_next_into_checks_the_buffers():
    loader = fl.Loader(dataset(10), 4)
    with pytest.raises(ValueError):
        loader.next_into({"x": np.zeros((3, 3), np.float32), "y": np.zeros(3, np.int64)})
    with pytest.raises(ValueError):
        loader.next_into({"x": np.zeros((4, 2), np.float32), "y": np.zeros(4, np.int64)})
    with pytest.raises(ValueError):
        loader.next_into({"x": np.zeros((4, 3), np.float32)})
    # Nothing was consumed.
    assert loader.next_into(buffers(4)) == 4
    assert loader.state_dict()["batches"] == 1


@pytest.mark.parametrize("seed", [None, 0, 13])
@pytest.mark.parametrize("shard", [None, (1, 3)])
def test_streamed_and_in_memory_sources_give_the_same_order_and_values(seed, shard):
    n = 77
    in_memory = fl.Loader(fl.Dataset(R, arrays(n)), 10, seed=seed, shard=shard)
    streamed = fl.Loader(fl.Dataset(R, items(n)), 10, seed=seed, shard=shard)
    tuples = fl.Loader(
        fl.Dataset(R, [(d["x"], d["y"]) for d in items(n)]), 10, seed=seed, shard=shard
    )
    for _ in range(2):
        for a, b, c in zip(in_memory, streamed, tuples, strict=True):
            for other in (b, c):
                np.testing.assert_array_equal(a.meta.record_indices, other.meta.record_indices)
                np.testing.assert_array_equal(a.x, other.x)
                np.testing.assert_array_equal(a.y, other.y)
                assert a.x.dtype == other.x.dtype == np.float32
                assert a.y.dtype == other.y.dtype == np.int64
            check_values(a)


def test_a_dict_of_arrays_and_from_arrays_are_accepted_as_sources():
    a = arrays(20)
    loader = fl.Loader(a, 6, seed=2)
    want = fl.Loader(dataset(20), 6, seed=2)
    for got, w in zip(loader, want, strict=True):
        np.testing.assert_array_equal(got.x, w.x)
        np.testing.assert_array_equal(got.y, w.y)
    ds = fl.Dataset.from_arrays(x=a["x"], y=a["y"])
    assert [b.meta.size for b in fl.Loader(ds, 6)] == [6, 6, 6, 2]
    batch = next(iter(ds.batches(6, seed=2)))
    np.testing.assert_array_equal(batch.x, next(iter(fl.Loader(a, 6, seed=2))).x)


def test_batch_metadata_follows_the_order():
    ds = dataset(23)
    loader = fl.Loader(ds, 5, seed=8)
    order_recs = records(fl.Loader(ds, 23, seed=8))
    start = 0
    for batch in loader:
        assert len(batch) == batch.meta.size
        assert batch.meta.mask.dtype == np.bool_ and batch.meta.mask.all()
        np.testing.assert_array_equal(
            batch.meta.positions, np.arange(start, start + batch.meta.size)
        )
        np.testing.assert_array_equal(batch.meta.source_ordinals, np.zeros(batch.meta.size))
        np.testing.assert_array_equal(
            batch.meta.record_indices, order_recs[start : start + batch.meta.size]
        )
        assert set(batch.keys()) == {"x", "y"}
        np.testing.assert_array_equal(batch["x"], batch.x)
        with pytest.raises(AttributeError):
            _ = batch.nope
        start += batch.meta.size
    assert start == 23


# -- padding ----------------------------------------------------------------------------


@pytest.mark.parametrize("streamed", [False, True])
@pytest.mark.parametrize("seed", [None, 4])
def test_pad_fills_the_last_batch_to_full_size_with_masked_zero_rows(seed, streamed):
    n, b = 10, 4
    a = {"x": arrays(n)["x"] + 1, "y": np.full(n, 3)}
    ds = fl.Dataset(R, [{"x": a["x"][i], "y": 3} for i in range(n)] if streamed else a)
    loader = fl.Loader(ds, b, seed=seed, pad=True)
    batches = list(loader)
    assert [x.meta.size for x in batches] == [4, 4, 2]
    assert all(len(x) == b for x in batches)
    for batch in batches[:-1]:
        assert batch.meta.mask.all()
    last = batches[-1]
    assert last.meta.mask.tolist() == [True, True, False, False]
    assert last.x.shape == (4, 3) and last.y.shape == (4,)
    assert (last.x[2:] == 0).all() and (last.y[2:] == 0).all()
    assert (last.x[:2] != 0).all() and (last.y[:2] == 3).all()
    assert last.meta.record_indices[2:].tolist() == [-1, -1]
    assert last.meta.source_ordinals[2:].tolist() == [-1, -1]
    assert last.meta.positions.tolist() == [8, 9, -1, -1]
    real = np.concatenate([x.meta.record_indices[x.meta.mask] for x in batches])
    assert sorted(real.tolist()) == list(range(n))
    # next_into zeroes the padding rows.
    loader.reset()
    out = buffers(b, fill=5)
    assert [loader.next_into(out) for _ in range(3)] == [4, 4, 2]
    assert (out["x"][2:] == 0).all() and (out["y"][2:] == 0).all()
    np.testing.assert_array_equal(out["x"][:2], last.x[:2])


def test_pad_changes_nothing_when_the_batches_divide_the_items():
    loader = fl.Loader(dataset(12), 4, seed=1, pad=True)
    for batch in loader:
        assert batch.meta.size == len(batch) == 4 and batch.meta.mask.all()
        assert (batch.meta.record_indices >= 0).all()


# -- mixes ------------------------------------------------------------------------------


def mix_seq(a: fl.Dataset, b: fl.Dataset) -> fl.Seq:
    return fl.Seq.mix([a.shuffle(1), b.to_seq()]).repeat(2)


@pytest.mark.parametrize("seed", [None, 5])
@pytest.mark.parametrize("batch_size", [1, 7, 16, 200])
def test_a_mix_of_two_datasets_follows_its_order_exactly(seed, batch_size):
    a, b = dataset(23), dataset(17, base=1000)
    seq = mix_seq(a, b)
    order = fl.Order(seq, seed=seed or 0)
    assert len(order) == 80
    ords, recs = order.lookup(np.arange(len(order), dtype=np.int64))
    loader = fl.Loader(seq, batch_size, seed=seed)
    assert len(loader) == -(-80 // batch_size)
    start = 0
    for batch in loader:
        s = slice(start, start + batch.meta.size)
        np.testing.assert_array_equal(batch.meta.source_ordinals, ords[s])
        np.testing.assert_array_equal(batch.meta.record_indices, recs[s])
        np.testing.assert_array_equal(batch.meta.positions, np.arange(start, s.stop))
        want_x = np.where(
            (ords[s] == 0)[:, None], a.columns["x"][recs[s] % 23], b.columns["x"][recs[s] % 17]
        )
        want_y = np.where(ords[s] == 0, a.columns["y"][recs[s] % 23], b.columns["y"][recs[s] % 17])
        np.testing.assert_array_equal(batch.x, want_x)
        np.testing.assert_array_equal(batch.y, want_y)
        start = s.stop
    assert start == 80
    # Each dataset's items twice.
    assert Counter(zip(ords.tolist(), recs.tolist())) == Counter(
        {**{(0, i): 2 for i in range(23)}, **{(1, i): 2 for i in range(17)}}
    )


@pytest.mark.parametrize("pad", [False, True])
def test_a_mix_of_an_in_memory_and_a_streamed_dataset_gathers_from_each(pad):
    a, b = dataset(23), fl.Dataset(R, items(17, base=1000))
    seq = mix_seq(a, b)
    ords, recs = fl.Order(seq, seed=3).lookup(np.arange(80, dtype=np.int64))
    loader = fl.Loader(seq, 7, seed=3, pad=pad)
    out = buffers(7)
    into = fl.Loader(seq, 7, seed=3, pad=pad)
    start = 0
    for batch in loader:
        s = slice(start, start + batch.meta.size)
        np.testing.assert_array_equal(batch.meta.source_ordinals[: batch.meta.size], ords[s])
        np.testing.assert_array_equal(batch.meta.record_indices[: batch.meta.size], recs[s])
        base = np.where(ords[s] == 0, 0, 1000)
        i = recs[s] + base
        np.testing.assert_array_equal(
            batch.x[: batch.meta.size], (i[:, None] * 10 + np.arange(3)).astype(np.float32)
        )
        np.testing.assert_array_equal(batch.y[: batch.meta.size], i % 5)
        assert len(batch) == (7 if pad else batch.meta.size)
        assert (batch.x[batch.meta.size :] == 0).all()
        k = into.next_into(out)
        assert k == batch.meta.size
        np.testing.assert_array_equal(out["x"][:k], batch.x[:k])
        np.testing.assert_array_equal(out["y"][:k], batch.y[:k])
        start = s.stop
    assert start == 80


def test_a_loader_over_an_order_follows_it_and_its_seed():
    a, b = dataset(23), dataset(17, base=1000)
    order = fl.Order(mix_seq(a, b), seed=42)
    ords, recs = order.lookup(np.arange(len(order), dtype=np.int64))
    got = list(fl.Loader(order, 9))
    np.testing.assert_array_equal(np.concatenate([x.meta.source_ordinals for x in got]), ords)
    np.testing.assert_array_equal(np.concatenate([x.meta.record_indices for x in got]), recs)
    same = list(mix_seq(a, b).batches(9, seed=42))
    np.testing.assert_array_equal(np.concatenate([x.meta.record_indices for x in same]), recs)


def test_a_seed_reseeds_every_shuffle_of_a_seq():
    a = dataset(50)
    seq = fl.Seq.concat([a.shuffle(1), a.shuffle(2)])
    first = records(fl.Loader(seq, 10, seed=1))
    second = records(fl.Loader(seq, 10, seed=2))
    assert first.tolist() != second.tolist()
    assert Counter(first.tolist()) == Counter(second.tolist())


def test_seq_shards_deal_the_positions_round_robin():
    a, b = dataset(23), dataset(17, base=1000)
    seq = mix_seq(a, b)
    order = fl.Order(seq)
    ords, recs = order.lookup(np.arange(len(order), dtype=np.int64))
    for i in range(3):
        got = list(fl.Loader(seq, 4, shard=(i, 3)))
        np.testing.assert_array_equal(
            np.concatenate([x.meta.source_ordinals for x in got]), ords[i::3]
        )
        np.testing.assert_array_equal(
            np.concatenate([x.meta.record_indices for x in got]), recs[i::3]
        )
        want = list(seq.shard(i, 3).batches(4))
        for x, w in zip(got, want, strict=True):
            np.testing.assert_array_equal(x.x, w.x)


def test_a_repeated_seq_reshuffles_every_pass_but_keeps_the_items():
    a, b = dataset(23), dataset(17, base=1000)
    loader = fl.Loader(mix_seq(a, b), 8, seed=3)
    passes = []
    for _ in range(3):
        got = list(loader)
        passes.append(
            list(
                zip(
                    np.concatenate([x.meta.source_ordinals for x in got]).tolist(),
                    np.concatenate([x.meta.record_indices for x in got]).tolist(),
                )
            )
        )
    assert Counter(passes[0]) == Counter(passes[1]) == Counter(passes[2])
    assert passes[0] != passes[1] != passes[2]


# -- ranks ------------------------------------------------------------------------------


def rank_loaders(monkeypatch, source, world: int, b: int, **kw) -> list:
    out = []
    for rank in range(world):
        monkeypatch.setenv("RANK", str(rank))
        monkeypatch.setenv("WORLD_SIZE", str(world))
        out.append(fl.Loader(source, b, shard="auto", **kw))
    return out


@pytest.mark.parametrize(
    "n, world, b", [(10, 3, 2), (37, 4, 5), (5, 4, 1), (3, 5, 2), (64, 4, 16), (101, 8, 3)]
)
@pytest.mark.parametrize("kind", ["dataset", "seq"])
def test_shard_auto_with_even_gives_every_rank_the_same_steps_and_each_item_once(
    monkeypatch, n, world, b, kind
):
    ds = dataset(n)
    source = ds if kind == "dataset" else ds.shuffle(4)
    loaders = rank_loaders(monkeypatch, source, world, b, even=True, seed=2)
    longest = -(-n // world)
    steps = -(-longest // b)
    seen = []
    for loader in loaders:
        assert len(loader) == steps
        batches = list(loader)
        assert len(batches) == steps
        for batch in batches:
            assert len(batch) == b
            assert batch.meta.mask.sum() == batch.meta.size
            assert (batch.meta.record_indices[~batch.meta.mask] == -1).all()
            assert (batch.meta.positions[~batch.meta.mask] == -1).all()
            assert (batch.x[~batch.meta.mask] == 0).all() and (batch.y[~batch.meta.mask] == 0).all()
            check_values(batch)
            seen.extend(batch.meta.record_indices[batch.meta.mask].tolist())
        # Padding comes last.
        mask = np.concatenate([x.meta.mask for x in batches])
        assert not np.any(mask[1:] > mask[:-1])
    assert sorted(seen) == list(range(n))


@pytest.mark.parametrize("kind", ["dataset", "seq"])
def test_shard_auto_without_even_covers_each_item_once(monkeypatch, kind):
    ds = dataset(50)
    source = ds if kind == "dataset" else ds.shuffle(4)
    seen = []
    for loader in rank_loaders(monkeypatch, source, 3, 4):
        sizes = [x.meta.size for x in loader]
        assert all(s == 4 for s in sizes[:-1])
        seen.extend(records(loader).tolist())
    # records() ran each rank's second pass.
    assert sorted(seen) == list(range(50))


def test_shard_auto_without_a_job_is_one_rank(monkeypatch):
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    loader = fl.Loader(dataset(10), 3, shard="auto")
    assert records(loader).tolist() == list(range(10))


def test_shard_auto_rejects_a_rank_outside_the_world(monkeypatch):
    monkeypatch.setenv("RANK", "4")
    monkeypatch.setenv("WORLD_SIZE", "4")
    with pytest.raises(ValueError):
        fl.Loader(dataset(10), 3, shard="auto")


def test_even_gives_short_ranks_an_all_padding_step_when_iterating(monkeypatch):
    # 5 items over 4 ranks in batches of 1: the longest rank has 2, so every rank takes 2
    # steps and the short ranks' second batch is all padding.
    loaders = rank_loaders(monkeypatch, dataset(5), 4, 1, even=True)
    for loader in loaders:
        batches = list(loader)
        assert len(batches) == len(loader) == 2
        assert [len(x) for x in batches] == [1, 1]
    sizes = [[x.meta.size for x in loader] for loader in loaders]
    assert sorted(sizes) == [[1, 0], [1, 0], [1, 0], [1, 1]]


def test_even_ranks_looping_on_next_into_take_the_same_number_of_steps(monkeypatch):
    loaders = rank_loaders(monkeypatch, dataset(5), 4, 1, even=True)
    real = 0
    for loader in loaders:
        out, mask = buffers(1), np.zeros(1, bool)
        steps = 0
        while loader.next_into(out, meta={"mask": mask}):
            steps += 1
            real += int(mask.sum())
        assert steps == len(loader) == 2
    assert real == 5


def test_next_into_with_even_needs_a_mask_buffer(monkeypatch):
    (loader, *_) = rank_loaders(monkeypatch, dataset(5), 4, 1, even=True)
    with pytest.raises(ValueError, match="mask"):
        loader.next_into(buffers(1))


def test_drop_last_with_even_never_yields_a_partial_batch(monkeypatch):
    for loader in rank_loaders(monkeypatch, dataset(10), 3, 2, even=True, drop_last=True):
        for batch in loader:
            assert batch.meta.size == 2


# -- outputs ----------------------------------------------------------------------------


def test_torch_output_gives_tensors_with_the_field_dtypes():
    torch = pytest.importorskip("torch")
    ds = dataset(10)
    want = list(fl.Loader(ds, 4, seed=3, pad=True))
    for kw in ({"output": "torch"}, {"device": "cpu"}):
        got = list(fl.Loader(ds, 4, seed=3, pad=True, **kw))
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert isinstance(g.x, torch.Tensor) and isinstance(g.y, torch.Tensor)
            assert g.x.dtype == torch.float32 and g.y.dtype == torch.int64
            assert tuple(g.x.shape) == (4, 3) and tuple(g.y.shape) == (4,)
            np.testing.assert_array_equal(g.x.numpy(), w.x)
            np.testing.assert_array_equal(g.y.numpy(), w.y)
            np.testing.assert_array_equal(g.meta.mask, w.meta.mask)
            assert g.meta.size == w.meta.size


def test_batch_transform_result_is_what_iteration_yields():
    seen = []

    def transform(batch):
        seen.append(batch)
        return (batch.x.sum(), batch.meta.size)

    loader = fl.Loader(dataset(10), 4, seed=2, batch_transform=transform)
    got = list(loader)
    assert [g[1] for g in got] == [4, 4, 2]
    assert all(isinstance(b, fl.Batch) for b in seen)
    assert [g[0] for g in got] == [b.x.sum() for b in seen]


def test_batch_transform_sees_torch_tensors():
    torch = pytest.importorskip("torch")
    loader = fl.Loader(
        dataset(9), 3, output="torch", batch_transform=lambda b: {"x": b.x * 2, "y": b.y}
    )
    got = list(loader)
    assert len(got) == 3
    assert isinstance(got[0]["x"], torch.Tensor)
    np.testing.assert_array_equal(got[0]["x"].numpy(), arrays(3)["x"] * 2)


# -- value checks -----------------------------------------------------------------------


def test_check_values_raises_domain_error_for_an_out_of_domain_label():
    a = arrays(20)
    a["y"][17] = 5  # Index(5) holds 0..4
    ds = fl.Dataset(R, a)
    # Off: no check.
    assert sum(b.meta.size for b in fl.Loader(ds, 4)) == 20
    # In memory: checked once as a whole, so the first batch already fails.
    loader = fl.Loader(ds, 4, check_values=True)
    with pytest.raises(fl.DomainError):
        next(iter(loader))
    with pytest.raises(fl.DomainError):
        fl.Loader(ds, 4, check_values=True).next_into(buffers(4))


def test_check_values_on_a_streamed_source_fails_on_the_bad_batch():
    its = items(20)
    its[17]["y"] = -1
    loader = fl.Loader(fl.Dataset(R, its), 4, check_values=True)
    it = iter(loader)
    for _ in range(4):
        assert next(it).meta.size == 4
    with pytest.raises(fl.DomainError):
        next(it)
    assert sum(b.meta.size for b in fl.Loader(fl.Dataset(R, its), 4)) == 20


def test_check_values_passes_valid_data():
    assert sum(b.meta.size for b in fl.Loader(dataset(20), 4, check_values=True, seed=1)) == 20
    assert sum(b.meta.size for b in fl.Loader(fl.Dataset(R, items(20)), 4, check_values=True)) == 20


# -- arguments and lifetime -------------------------------------------------------------


@pytest.mark.parametrize(
    "kw, error",
    [
        ({"batch_size": 0}, ValueError),
        ({"batch_size": -3}, ValueError),
        ({"batch_size": 2.0}, TypeError),
        ({"batch_size": "4"}, TypeError),
        ({"batch_size": None}, TypeError),
        ({"shard": (3, 3)}, ValueError),
        ({"shard": (5, 2)}, ValueError),
        ({"shard": (-1, 2)}, ValueError),
        ({"shard": (0, 0)}, ValueError),
        ({"drop_last": True, "pad": True}, ValueError),
        ({"workers": -1}, ValueError),
        ({"output": "jax"}, ValueError),
        ({"output": "tensorflow"}, ValueError),
    ],
)
def test_invalid_arguments_are_refused(kw, error):
    kw = {"batch_size": 4, **kw}
    b = kw.pop("batch_size")
    with pytest.raises(error):
        fl.Loader(dataset(10), b, **kw)
    with pytest.raises(error):
        fl.Loader(dataset(10).shuffle(1), b, **kw)


def test_datasets_of_different_records_are_refused():
    a = dataset(5)
    b = fl.Dataset(Other, {"x": arrays(5)["x"], "z": np.zeros(5, np.int64)})
    with pytest.raises(fl.RecordError):
        fl.Loader(fl.Seq.concat([a.to_seq(), b.to_seq()]), 2)
    with pytest.raises(fl.RecordError):
        fl.Loader(fl.Seq.mix([a.shuffle(1), b.to_seq()]), 2)


def test_a_seq_over_plain_lengths_is_refused():
    with pytest.raises(TypeError):
        fl.Loader(fl.Seq.source(10).shuffle(1), 2)
    with pytest.raises(TypeError):
        fl.Loader(fl.Order(fl.Seq.source(10)), 2)
    with pytest.raises(TypeError):
        fl.Loader(fl.Seq.concat([dataset(3).to_seq(), fl.Seq.source(4)]), 2)


def test_dataset_and_seq_batches_are_loaders():
    ds = dataset(30)
    a = ds.batches(4, seed=3, drop_last=True)
    b = ds.shuffle(7).batches(4, pad=True)
    assert isinstance(a, fl.Loader) and isinstance(b, fl.Loader)
    assert len(a) == 7 and len(b) == 8
    np.testing.assert_array_equal(records(a), records(fl.Loader(ds, 4, seed=3, drop_last=True)))
    np.testing.assert_array_equal(records(b), records(fl.Loader(ds.shuffle(7), 4, pad=True)))


def test_a_closed_loader_refuses_use():
    loader = fl.Loader(dataset(10), 4)
    next(iter(loader))
    loader.close()
    with pytest.raises(ValueError):
        next(iter(loader))
    with pytest.raises(ValueError):
        loader.next_into(buffers(4))
    loader.close()  # closing twice is harmless

    with fl.Loader(dataset(10), 4) as loader:
        assert sum(b.meta.size for b in loader) == 10
    with pytest.raises(ValueError):
        list(loader)


def test_every_batch_has_arrays_of_its_own():
    # Memory another library may still read (JAX, asynchronous copies) is never reused.
    loader = fl.Loader(dataset(100), 10, seed=1)
    batches = []
    for batch in loader:
        batches.append((id(batch.x), batch.x.__array_interface__["data"][0]))
        del batch
    assert len({address for _, address in batches}) >= 1
    kept = [(b, b.x.copy()) for b in fl.Loader(dataset(100), 10, seed=1)]
    for b, copy in kept:
        np.testing.assert_array_equal(b.x, copy)


def shifted(example):
    """A map (importable, so workers run it)."""
    return {"x": example["x"] + 1, "y": example["y"]}


@pytest.mark.parametrize("mapped, workers", [(False, 0), (True, 0), (True, 2)])
def test_last_rows_is_the_real_rows_of_the_batch_delivered_last_as_in_data_nu(mapped, workers):
    ds = dataset(10).map(shifted) if mapped else dataset(10)
    out = {"x": np.zeros((4, 3), np.float32), "y": np.zeros(4, np.int64)}
    loader = fl.Loader(ds, 4, seed=2, workers=workers)
    assert loader.last_rows == 0  # dl_new sets it to 0
    seen = []
    while rows := loader.next_into(out):
        seen.append((rows, loader.last_rows))
    assert seen == [(4, 4), (4, 4), (2, 2)]
    assert loader.last_rows == 0  # the dl_next that returned 0 set it to 0
    sizes = []
    for batch in loader:  # the next pass, iterated
        sizes.append((batch.meta.size, loader.last_rows))
    assert sizes == [(4, 4), (4, 4), (2, 2)] and loader.last_rows == 0
    loader.close()


def test_last_rows_counts_real_rows_not_padding_and_drop_last_ends_at_zero():
    padded = fl.Loader(dataset(10), 4, pad=True)
    assert [(len(b), padded.last_rows) for b in padded][-1] == (4, 2)
    dropped = fl.Loader(dataset(10), 4, drop_last=True)
    assert [dropped.last_rows for _ in dropped] == [4, 4]
    assert dropped.last_rows == 0  # data.nu drops the remainder: dl_next returns 0
    even = fl.Loader(fl.Seq.source(dataset(5)), 2, shard=(1, 2), even=True)
    out = {"x": np.zeros((2, 3), np.float32), "y": np.zeros(2, np.int64)}
    got = []
    while even.next_into(out, meta={"mask": np.zeros(2, bool)}):
        got.append(even.last_rows)
    assert got == [2, 0]  # rank 1 has positions 1 and 3, then a step of padding only
