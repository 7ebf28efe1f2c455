"""Elastic resume: a state saved by W ranks restores with W' ranks, exactly once."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import feedline as fl


class R(fl.Record):
    """One index per example."""

    i = fl.field((), "int64")


def mixed() -> fl.Seq:
    a = fl.Dataset(R, {"i": np.arange(37)})
    b = fl.Dataset(R, {"i": np.arange(1000, 1023)})
    return fl.Seq.mix([a.shuffle(1), b.to_seq()]).repeat(2)


def rows(batch) -> list[int]:
    return batch.i[: batch.meta.size].tolist()


def ranks(make, world: int) -> list[fl.Loader]:
    return [make((r, world)) for r in range(world)]


def seq_loader(batch_size: int, even: bool):
    seq = mixed()
    return lambda shard: fl.Loader(seq, batch_size, seed=5, shard=shard, even=even)


def plain_loader(batch_size: int, even: bool, monkeypatch):
    ds = fl.Dataset(R, {"i": np.arange(53)})

    def make(shard):
        monkeypatch.setenv("RANK", str(shard[0]))
        monkeypatch.setenv("WORLD_SIZE", str(shard[1]))
        return fl.Loader(ds, batch_size, seed=7, shard="auto", even=even)

    return make


def run_elastic(make, world: int, new_world: int, steps: int) -> tuple[list, list, list]:
    """Every rank of ``world`` takes ``steps`` batches and saves; ``new_world`` ranks
    resume from rank 0's state (JSON round trip) and finish the pass."""
    before, states = [], []
    for loader in ranks(make, world):
        it = iter(loader)
        for _ in range(steps):
            batch = next(it, None)
            if batch is not None:
                before += rows(batch)
        states.append(json.loads(json.dumps(loader.state_dict())))
    # the states of ranks at the same step are interchangeable
    assert all({k: v for k, v in s.items()} == states[0] for s in states)
    after, resumed = [], ranks(make, new_world)
    for loader in resumed:
        loader.load_state_dict(states[0])
        if states[0]["ended"]:  # the pass is over: a loop would start the next one
            continue
        for batch in loader:
            after += rows(batch)
    return before, after, resumed


def one_pass(make) -> list[int]:
    return [x for b in make(None) for x in rows(b)]


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 4), st.integers(1, 5), st.integers(1, 9), st.integers(0, 8), st.booleans())
def test_a_pass_resumed_with_another_number_of_ranks_is_exactly_once(
    world, new_world, batch_size, steps, even
):
    make = seq_loader(batch_size, even)
    before, after, _ = run_elastic(make, world, new_world, steps)
    assert Counter(before + after) == Counter(one_pass(make))


@pytest.mark.parametrize("world,new_world", [(2, 3), (3, 2), (4, 1), (1, 2)])
def test_ranks_from_the_environment_resume_elastically(world, new_world, monkeypatch):
    make = plain_loader(4, True, monkeypatch)
    before, after, resumed = run_elastic(make, world, new_world, 3)
    assert sorted(before + after) == list(range(53))
    # even=True: every new rank takes the same number of steps for the rest of the pass
    assert len({len(loader) for loader in resumed}) == 1


def test_the_pass_after_an_elastic_resume_is_the_new_ranks_usual_pass():
    make = seq_loader(4, False)
    _, _, resumed = run_elastic(make, 2, 3, 5)
    fresh = ranks(make, 3)
    for f in fresh:
        for _ in f:  # pass 0
            pass
    for r, f in zip(resumed, fresh):
        assert [rows(b) for b in r] == [rows(b) for b in f]


def test_a_state_saved_at_the_end_of_a_pass_starts_the_next_pass_with_the_new_ranks():
    make = seq_loader(6, False)
    old = ranks(make, 2)
    for loader in old:
        for _ in loader:
            pass
    state = old[0].state_dict()
    assert state["ended"]
    new = ranks(make, 3)
    fresh = ranks(make, 3)
    for n, f in zip(new, fresh):
        n.load_state_dict(state)
        for _ in f:
            pass
        assert [rows(b) for b in n] == [rows(b) for b in f]


def test_a_change_of_ranks_with_shared_batches_is_refused():
    make = seq_loader(4, False)
    saved = make((0, 2))
    saved.share_batches(0, 2)
    next(iter(saved))
    state = saved.state_dict()
    other = make((0, 3))
    other.share_batches(0, 2)
    with pytest.raises(fl.StateError, match="shared"):
        other.load_state_dict(state)


def test_a_state_with_an_impossible_base_or_world_is_refused():
    make = seq_loader(4, False)
    loader = make((0, 2))
    state = loader.state_dict()
    for bad in (
        {**state, "base": 10**9},
        {**state, "world": 0},
        {**state, "world": None},
        {**state, "base": -1},
        {**state, "base": "3"},
    ):
        with pytest.raises(fl.StateError):
            loader.load_state_dict(bad)
    unsharded = fl.Loader(mixed(), 4, seed=5)
    with pytest.raises(fl.StateError):
        unsharded.load_state_dict({**unsharded.state_dict(), "world": 2})


@pytest.mark.parametrize("world,new_world", [(2, 3), (3, 1)])
def test_a_memory_mapped_mix_gathered_in_chunks_resumes_with_another_number_of_ranks(
    tmp_path, small_chunks, world, new_world
):
    # Each rank's plain path over the mix of two files, its chunks gathered ahead by a
    # second thread: the same exactly-once as the order's positions alone.
    files = []
    for k, (n, base) in enumerate(((900, 0), (400, 10_000))):
        path = tmp_path / f"p{k}.flr"
        fl.recfile.write(path, R, {"i": np.arange(base, base + n)})
        files.append(fl.recfile.open(path))
    seq = fl.Seq.mix([fl.Seq.source(files[0]).shuffle(1), fl.Seq.source(files[1]).shuffle(2)])

    def make(shard):
        return fl.Loader(seq, 8, seed=5, shard=shard, threads=2)

    assert make((0, world))._plan.ahead is not None
    before, after, _ = run_elastic(make, world, new_world, 20)
    want = list(range(900)) + list(range(10_000, 10_400))
    assert Counter(before + after) == Counter(want)
    for f in files:
        f.close()
