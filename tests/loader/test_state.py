"""The state stage (``_state``): pure functions of a ledger's values, its options and the
pass's geometry; the elastic rebase is a function of (state, ranks)."""

from __future__ import annotations

import numpy as np
import pytest

import feedline as fl
from feedline.loader import _state
from feedline.loader._ledger import Ledger


def geometry(n: int, b: int, shard=None, even=False, drop_last=False) -> _state.Geometry:
    def order_len(base: int) -> int:
        rest = n - base
        if shard is None:
            return rest
        i, k = shard
        return max(0, -(-(rest - i) // k))

    return _state.Geometry(b, drop_last, even, shard, n if shard else -1, order_len)


@pytest.mark.parametrize(
    ("n", "b", "drop_last", "want"),
    [
        (10, 3, False, 4),
        (10, 3, True, 3),
        (9, 3, False, 3),
        (0, 3, False, 0),
    ],
)
def test_the_steps_of_a_pass_follow_the_batch_size_and_the_tail(n, b, drop_last, want):
    assert geometry(n, b, drop_last=drop_last).steps() == want


def test_even_ranks_take_the_steps_of_the_longest_and_drop_last_those_of_the_shortest():
    # 1,025 rows, batches of 16, 2 ranks: 513 and 512 positions
    assert geometry(1025, 16, (1, 2), even=True).steps() == 33
    assert geometry(1025, 16, (1, 2)).steps() == 32
    assert geometry(1025, 16, (1, 2), even=True, drop_last=True).steps() == 32
    # rank 0 of another number of ranks: the one with the most positions
    assert geometry(1025, 16, (1, 2)).steps(world=3) == 22


def _state_of(n=100, b=10, seed=3, delivered=4, ahead=(), ended=False, shard=None):
    led = Ledger(seed, geometry(n, b, shard).steps())
    led.delivered, led.next, led.ahead, led.ended = (
        delivered,
        delivered + len(ahead),
        set(ahead),
        ended,
    )
    opts = {
        "batch_size": b,
        "drop_last": False,
        "pad": False,
        "even": False,
        "split": None,
        "sharded": shard is not None,
    }
    return _state.to_dict(led, "f" * 64, opts, shard[1] if shard else None), opts


def test_a_state_parses_back_to_the_ledger_it_came_from():
    state, opts = _state_of(delivered=4, ahead=(6,))
    got = _state.parse(state, "f" * 64, opts, geometry(100, 10), (0, 1))
    assert (got.seed, got.epoch, got.base, got.steps, got.batches, got.ahead, got.ended) == (
        3,
        0,
        0,
        10,
        4,
        (6,),
        False,
    )


def test_a_refusal_names_every_option_that_differs():
    state, opts = _state_of()
    with pytest.raises(fl.StateError) as info:
        _state.parse(
            state, "f" * 64, {**opts, "batch_size": 20, "pad": True}, geometry(100, 20), (0, 1)
        )
    assert "batch_size 10 saved, 20 here" in str(info.value)
    assert "pad false saved, true here" in str(info.value)


def test_a_state_of_another_order_names_what_may_differ():
    state, opts = _state_of()
    with pytest.raises(fl.StateError, match="order, its sources"):
        _state.parse(state, "e" * 64, opts, geometry(100, 10), (0, 1))


def test_an_elastic_rebase_is_a_function_of_the_state_and_the_ranks():
    # 2 ranks delivered 3 batches of 10 each: 60 positions of the pass are consumed
    state, opts = _state_of(n=1000, b=10, delivered=3, shard=(0, 2))
    for k in (1, 3, 4):
        got = _state.parse(state, "f" * 64, opts, geometry(1000, 10, (0, k)), (0, 1))
        assert (got.base, got.batches) == (60, 0)
        assert got.steps == geometry(1000, 10, (0, k)).steps(60)


def test_a_change_of_ranks_with_batches_out_of_order_is_refused():
    state, opts = _state_of(n=1000, b=10, delivered=3, ahead=(5,), shard=(0, 2))
    with pytest.raises(fl.StateError, match="out of order"):
        _state.parse(state, "f" * 64, opts, geometry(1000, 10, (0, 3)), (0, 1))


def _jitter(ex, rng):
    """An augmentation: each example's random draw (module level: workers import it)."""
    return {"x": ex["x"] + rng.integers(0, 1_000_000)}


def _augmented(seed: int) -> fl.Dataset:
    return fl.Dataset.from_arrays(x=np.arange(60)).map(_jitter, seed=seed)


def _values(batches) -> list[int]:
    return [int(v) for b in batches for v in b.x]


def test_a_state_resumes_only_under_the_maps_seeds_it_was_saved_with():
    # The maps' seeds decide the random draws: under other seeds the resumed stream is
    # not the one the state was saved from, and the refusal says how to do it anyway.
    first = fl.Loader(_augmented(1), 8, seed=3, workers=0)
    it = iter(first)
    head = [next(it) for _ in range(3)]
    state = first.state_dict()
    assert state["options"]["map_seeds"] == [[1]]
    whole = _values(fl.Loader(_augmented(1), 8, seed=3, workers=0))
    same = fl.Loader(_augmented(1), 8, seed=3, workers=0)
    same.load_state_dict(state)
    assert _values(head) + _values(same) == whole
    other = fl.Loader(_augmented(2), 8, seed=3, workers=0)
    refusal = r"map_seeds \[\[1\]\] saved, \[\[2\]\] here.*on purpose"
    with pytest.raises(fl.StateError, match=refusal):
        other.load_state_dict(state)
    plain = fl.Loader(fl.Dataset.from_arrays(x=np.arange(60)), 8, seed=3)
    with pytest.raises(fl.StateError, match=r"map_seeds \[\[1\]\] saved, \[\[\]\] here"):
        plain.load_state_dict(state)
    # on purpose: the state's seeds set to the new ones
    state["options"]["map_seeds"] = [[2]]
    other.load_state_dict(state)
    rest = _values(other)
    assert len(rest) == 60 - 24 and rest != _values(same)


def test_a_state_saved_before_map_seeds_were_recorded_still_loads():
    first = fl.Loader(_augmented(1), 8, seed=3, workers=0)
    it = iter(first)
    head = [next(it) for _ in range(2)]
    state = first.state_dict()
    del state["options"]["map_seeds"]  # as the loader of the last release saved it
    again = fl.Loader(_augmented(1), 8, seed=3, workers=0)
    again.load_state_dict(state)
    assert _values(head) + _values(again) == _values(fl.Loader(_augmented(1), 8, seed=3))


def test_a_map_that_draws_nothing_records_no_seed():
    # a decoder's seed decides nothing: added or removed between runs, the state loads
    decoded = fl.Dataset.from_arrays(x=np.arange(60)).map(lambda ex: ex, seed=5)
    first = fl.Loader(decoded, 8, seed=3, workers=0)
    it = iter(first)
    head = [next(it) for _ in range(2)]
    state = first.state_dict()
    assert state["options"]["map_seeds"] == [[]]
    plain = fl.Loader(fl.Dataset.from_arrays(x=np.arange(60)), 8, seed=3)
    plain.load_state_dict(state)
    assert sorted(_values(head) + _values(plain)) == list(range(60))
