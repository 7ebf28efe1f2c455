"""The loader's ledger of positions: no batch lost or repeated at the loader's edges.

Each test is one fault found by trying the loader as a hostile user would (issue 14):
an abandoned generator, an interrupt while a batch is made, threads across passes, a
reset during a gather, a read-only output. Exactly-once is checked by counting
``(source, record)`` pairs, not batches.
"""

from __future__ import annotations

import os
import threading
import time
from collections import Counter

import numpy as np
import pytest

import feedline as fl

from ._rows import fork_checking


class R(fl.Record, dims={"D": 2}):
    """A test example: two features and its own index."""

    x = fl.field("D", "float32")
    i = fl.field((), "int64")


def dataset(n: int = 40) -> fl.Dataset:
    idx = np.arange(n)
    return fl.Dataset(R, {"x": np.stack([idx, -idx], 1).astype(np.float32), "i": idx})


def pairs(batch) -> list[tuple[int, int]]:
    m = batch.meta
    return list(
        zip(m.source_ordinals[: m.size].tolist(), m.record_indices[: m.size].tolist(), strict=True)
    )


def pass_through_interrupts(loader) -> tuple[Counter, int]:
    """One pass of ``next(loader)`` calls, going on after each KeyboardInterrupt (as a
    training loop that checkpoints on Ctrl-C would): the pairs delivered and the
    interrupts seen."""
    seen: Counter = Counter()
    interrupts = 0
    while True:
        try:
            batch = next(loader)
        except KeyboardInterrupt:
            interrupts += 1
            continue
        except StopIteration:
            return seen, interrupts
        seen.update(pairs(batch))


# -- iteration is not the loader ---------------------------------------------------------------


def test_an_abandoned_generator_around_the_loader_does_not_close_it():
    loader = fl.Loader(dataset(80), 8, seed=1, workers=0)

    def capped(n):
        for k, b in enumerate(loader):
            if k == n:
                return
            yield b

    first = list(capped(2))
    gen = (b for b in loader)  # a generator delegating to the loader, dropped part-way
    next(gen)
    gen.close()

    def delegate():
        yield from loader

    g = delegate()
    next(g)
    g.close()  # PEP 380: close() reaches the sub-iterator
    rest = list(loader)  # the loader still works: the pass goes on
    assert first and rest
    assert loader.state_dict()["ended"]


def test_the_iterator_of_a_loader_is_not_the_loader():
    loader = fl.Loader(dataset(), 8, workers=0)
    it = iter(loader)
    assert it is not loader
    assert not hasattr(it, "close") or it.close() is None
    assert len(list(loader)) == 5


# -- interrupts ----------------------------------------------------------------------------------


def test_an_interrupt_while_a_batch_is_made_loses_nothing():
    hits = {"n": 0}

    def fn(ex, rng):
        if int(ex["i"]) in (9, 26) and hits["n"] < 2:
            hits["n"] += 1
            raise KeyboardInterrupt
        return ex

    ds = dataset().map(fn, seed=0)
    loader = fl.Loader(ds, 8, seed=3, workers=0)
    seen, interrupts = pass_through_interrupts(loader)
    assert interrupts == 2
    assert seen == Counter((0, i) for i in range(40))


def test_a_state_saved_after_an_interrupt_makes_the_interrupted_batch_again():
    armed = {"on": True}

    def fn(ex, rng):
        if int(ex["i"]) == 20 and armed["on"]:
            armed["on"] = False
            raise KeyboardInterrupt
        return ex

    loader = fl.Loader(dataset().map(fn, seed=0), 8, workers=0)
    got = [next(loader), next(loader)]
    with pytest.raises(KeyboardInterrupt):
        next(loader)
    state = loader.state_dict()
    resumed = fl.Loader(dataset().map(fn, seed=0), 8, workers=0)  # its map's seed too
    resumed.load_state_dict(state)
    rest = list(resumed)
    seen = Counter(p for b in got + rest for p in pairs(b))
    assert seen == Counter((0, i) for i in range(40))


# -- threads across passes, resets during a gather -------------------------------------------


def test_threads_looping_over_passes_see_every_row_equally_often():
    n, threads, loops = 1000, 4, 5
    loader = fl.Loader(dataset(n), 7, seed=2, workers=0)
    counts: Counter = Counter()
    lock = threading.Lock()
    barrier = threading.Barrier(threads)

    def work():
        barrier.wait()
        local: Counter = Counter()
        for _ in range(loops):
            for b in loader:
                local.update(pairs(b))
        with lock:
            counts.update(local)

    ts = [threading.Thread(target=work) for _ in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(60)
        assert not t.is_alive()
    assert set(counts) == {(0, i) for i in range(n)}
    assert len(set(counts.values())) == 1, Counter(counts.values())


def test_a_batch_claimed_before_a_reset_is_not_counted_in_the_new_pass():
    started, release = threading.Event(), threading.Event()

    def slow(ex, rng):
        if int(ex["i"]) == 0 and not release.is_set():
            started.set()
            release.wait(10)
        return ex

    loader = fl.Loader(dataset().map(slow, seed=0), 4, workers=0)
    result = {}
    t = threading.Thread(target=lambda: result.setdefault("b", next(loader)))
    t.start()
    assert started.wait(10)
    loader.reset()  # while the first batch is being gathered
    release.set()
    t.join(10)
    fresh = list(loader)
    seen = Counter(p for b in fresh for p in pairs(b))
    assert seen == Counter((0, i) for i in range(40))  # the new pass is whole
    assert loader.state_dict()["ended"]


# -- options refused when the loader is built ----------------------------------------------


@pytest.mark.parametrize("seed", [2**64, -(2**63) - 1])
def test_a_seed_outside_the_state_range_is_refused_naming_the_option(seed):
    with pytest.raises(ValueError, match="seed"):
        fl.Loader(fl.Seq.source(dataset()).shuffle(1), 10, seed=seed)


def test_the_largest_seeds_resume_exactly():
    seq = fl.Seq.source(dataset()).shuffle(1)
    for seed in (2**64 - 1, -(2**63)):
        loader = fl.Loader(seq, 10, seed=seed, workers=0)
        next(loader)
        state = loader.state_dict()
        again = fl.Loader(seq, 10, seed=seed, workers=0)
        again.load_state_dict(state)
        assert [pairs(b) for b in again] == [pairs(b) for b in loader]


def test_an_unbounded_prefetch_is_refused_naming_the_option():
    with pytest.raises(ValueError, match="prefetch"):
        fl.Loader(dataset(), 8, prefetch=10**6)


# -- next_into with outputs it cannot fill ----------------------------------------------------


def test_next_into_a_read_only_buffer_loses_no_batch():
    loader = fl.Loader(dataset(), 8, workers=0)
    out = {"x": np.zeros((8, 2), np.float32), "i": np.zeros(8, np.int64)}
    out["i"].flags.writeable = False
    with pytest.raises(ValueError):
        loader.next_into(out)
    out["i"] = np.zeros(8, np.int64)
    got = []
    while rows := loader.next_into(out):
        got.extend(out["i"][:rows].tolist())
    assert sorted(got) == list(range(40))


# -- one meaning per option ------------------------------------------------------------------


def test_shard_deals_a_datasets_shuffled_positions_to_ranks():
    # Contract 2 (section 8): shard=(i, n) deals the shuffled order's positions; data.nu's
    # contiguous slice is split=(i, n).
    ds = dataset(40)
    whole = [p for b in fl.Loader(ds, 5, seed=4, workers=0) for p in pairs(b)]
    for rank in range(2):
        got = [p for b in fl.Loader(ds, 5, seed=4, shard=(rank, 2), workers=0) for p in pairs(b)]
        assert got == whole[rank::2]


def test_split_is_data_nus_contiguous_slice_shuffled_within_itself():
    ds = dataset(40)
    for rank in range(3):
        got = [r for b in fl.Loader(ds, 5, seed=4, split=(rank, 3), workers=0) for _, r in pairs(b)]
        lo, hi = rank * 40 // 3, (rank + 1) * 40 // 3
        assert sorted(got) == list(range(lo, hi))
    plain = [r for b in fl.Loader(ds, 5, split=(1, 3), workers=0) for _, r in pairs(b)]
    assert plain == list(range(13, 26))


def test_a_state_of_another_configuration_names_the_option_that_differs():
    loader = fl.Loader(dataset(), 8, seed=1, workers=0)
    next(loader)
    state = loader.state_dict()
    with pytest.raises(fl.StateError, match="batch_size 8 saved, 4 here"):
        fl.Loader(dataset(), 4, seed=1, workers=0).load_state_dict(state)
    with pytest.raises(fl.StateError, match="drop_last"):
        fl.Loader(dataset(), 8, seed=1, drop_last=True, workers=0).load_state_dict(state)


def test_the_options_are_a_frozen_dataclass():
    import dataclasses

    loader = fl.Loader(dataset(), 8, seed=1, workers=0)
    opts = loader.options
    assert dataclasses.is_dataclass(opts)
    with pytest.raises(dataclasses.FrozenInstanceError):
        opts.batch_size = 3  # type: ignore[misc]
    assert opts.batch_size == 8 and opts.seed == 1


# -- typed sources go straight into orders ----------------------------------------------------


def test_a_typed_source_goes_into_an_order_without_being_wrapped(tmp_path):
    path = tmp_path / "r.flr"
    idx = np.arange(30)
    fl.recfile.write(path, R, {"x": np.stack([idx, idx], 1).astype(np.float32), "i": idx})
    with fl.recfile.open(path) as f:
        seq = fl.Seq.mix([fl.Seq.source(f).shuffle(1), fl.Seq.source(dataset(10)).shuffle(2)])
        got = Counter(p for b in fl.Loader(seq, 7, workers=0) for p in pairs(b))
    assert got == Counter([(0, i) for i in range(30)] + [(1, i) for i in range(10)])


def test_a_new_pass_never_claims_from_the_last_passs_order_block():
    # Review of the rebuild: iter() started the next pass, then dropped the order block
    # after releasing the lock; a claim by another thread in between read the last pass's
    # block. Here the other thread claims in that very window.
    ds = fl.Dataset.from_arrays(x=np.arange(80.0).reshape(40, 2))
    loader = fl.Loader(ds, 4, seed=5, workers=0)
    for _ in loader:
        pass
    led = loader._ledger
    real = type(led).start_next_pass
    got: list = []

    def claim_now():
        out = {"x": np.zeros((4, 2))}
        meta = {"record_indices": np.zeros(4, np.int64)}
        loader.next_into(out, meta=meta)
        got.append(meta["record_indices"].tolist())

    other = threading.Thread(target=claim_now, daemon=True)

    def slow(self, steps):
        out = real(self, steps)
        other.start()  # another thread claims while this one starts the pass
        time.sleep(0.2)
        return out

    type(led).start_next_pass = slow
    try:
        iter(loader)
    finally:
        type(led).start_next_pass = real
    other.join(10)
    ref = fl.Loader(ds, 4, seed=5, workers=0)
    list(ref)
    assert got == [next(iter(ref)).meta.record_indices.tolist()]  # pass 1's first batch


@pytest.mark.parametrize("saver", [0, 1, 2])
def test_the_end_of_pass_state_of_any_rank_resumes_with_another_number_of_ranks(saver):
    ds = dataset(13)
    ranks = [fl.Loader(ds, 2, seed=1, shard=(i, 3), workers=0) for i in range(3)]
    for r in ranks:
        list(r)
    state = ranks[saver].state_dict()
    seen: Counter = Counter()
    for i in range(2):
        r = fl.Loader(ds, 2, seed=1, shard=(i, 2), workers=0)
        r.load_state_dict(state)
        seen.update(p for b in r for p in pairs(b))
    assert seen == Counter((0, i) for i in range(13))


@pytest.mark.parametrize(
    "kw",
    [
        {"drop_last": "no"},
        {"pad": "false"},
        {"even": "False", "shard": (0, 2)},
        {"check_values": 1},
    ],
)
def test_a_yes_no_option_takes_only_a_bool(kw):
    with pytest.raises(TypeError, match=next(iter(kw))):
        fl.Loader(dataset(), 8, **kw)


def test_contradictory_options_are_refused(monkeypatch):
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(ValueError, match="shard and split"):
        fl.Loader(dataset(), 8, shard="auto", split=(0, 2))
    with pytest.raises(ValueError, match="device"):
        fl.Loader(dataset(), 8, output="numpy", device="cpu")
    assert fl.Loader(dataset(), 8, even=True).options.even is False  # no ranks to even


def test_a_state_of_another_length_names_the_lengths():
    loader = fl.Loader(dataset(37), 4, workers=0)
    next(loader)
    state = loader.state_dict()
    with pytest.raises(fl.StateError, match="length 37 saved, 38 here"):
        fl.Loader(dataset(38), 4, workers=0).load_state_dict(state)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork")
def test_a_fork_while_another_thread_holds_the_ledger_waits_for_it():
    # the child would find the lock held by a thread it does not have: its next batch
    # would wait forever; the fork waits for the change to end instead
    ds = fl.Dataset.from_arrays(y=np.arange(10_000))
    want = np.concatenate([b.y for b in fl.Loader(ds, 100, seed=3, threads=1)])
    loader = fl.Loader(ds, 100, seed=3, threads=1)
    it = iter(loader)
    next(it)
    held = threading.Event()

    def hold():
        with loader._ledger.lock:
            held.set()
            time.sleep(0.3)

    th = threading.Thread(target=hold)
    th.start()
    assert held.wait(10)
    # the child: the rest of the pass, as the parent would have had it
    pid = fork_checking(lambda: np.array_equal(np.concatenate([b.y for b in it]), want[100:]))
    th.join(30)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
