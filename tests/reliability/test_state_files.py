"""Saved states, truncated or tampered with: refused with StateError; the loader that
refused them reads on exactly as before (see states.py)."""

from __future__ import annotations

import json

import pytest

import feedline as fl

from . import states
from .states import INVALID, INVALID_SHARDED, fingerprint_variants, refuses, rest, saved, started


@pytest.mark.parametrize("kind", states.KINDS)
def test_an_untampered_state_through_json_resumes_exactly(kind):
    state, want = saved(kind)
    with states.loader(kind) as fresh:
        fresh.load_state_dict(json.loads(json.dumps(state)))
        assert fresh.state_dict() == state
        assert rest(fresh) == want


def test_every_field_changed_to_a_value_no_loader_saves_is_refused_and_the_loader_reads_on():
    state, want = saved()
    with started() as target:
        refused = {label: refuses(target, change(state)) for label, change in INVALID.items()}
        assert {label: what for label, (ok, what) in refused.items() if not ok} == {}
        assert rest(target) == want


def test_the_ranks_of_a_sharded_state_are_checked_and_the_loader_reads_on():
    state, want = saved("shard")
    assert state["world"] == states.RANKS
    with started("shard") as target:
        refused = {
            label: refuses(target, change(state)) for label, change in INVALID_SHARDED.items()
        }
        assert {label: what for label, (ok, what) in refused.items() if not ok} == {}
        assert rest(target) == want


def test_a_fingerprint_with_any_digit_changed_is_refused():
    state, want = saved()
    with started() as target:
        variants = fingerprint_variants(state)
        assert len(variants) == len(state["fingerprint"]) == 64
        assert all(refuses(target, v) == (True, "") for v in variants)
        assert rest(target) == want


def test_a_state_file_cut_short_anywhere_is_refused():
    state, want = saved()
    with started() as target:
        cut = states.truncations(state)
        assert len(cut) == len(json.dumps(state)) + len(state)
        failed = [(bad, what) for bad in cut for ok, what in [refuses(target, bad)] if not ok]
        assert failed == []
        assert rest(target) == want


def test_a_loader_with_workers_that_refuses_a_malformed_state_reads_on_unchanged():
    state, want = saved(workers=2)
    with started(workers=2) as target:
        for label in ("fingerprint truncated", "format changed", "batches text"):
            assert refuses(target, INVALID[label](state)) == (True, ""), label
        assert rest(target) == want


def test_random_json_mutations_are_refused_or_loaded_and_never_crash_the_loader():
    for kind in ("mix", "shard"):
        counts, failures = states.mutations(150, seed=11, kind=kind)
        assert counts["refused"] > 100
        assert [what for _, outcome, what in failures if outcome == "failure"] == []


# -- bugs the campaign found in Resumable.load_state_dict, fixed -----------------------------


def test_a_state_with_an_unknown_key_is_refused():
    state, _ = saved()
    with started() as target:
        assert refuses(target, {**state, "position": 12}) == (True, "")


@pytest.mark.parametrize(
    "kind, key, value",
    [
        ("mix", "seed", True),
        ("mix", "epoch", True),
        ("mix", "batches", True),
        ("mix", "version", 2.0),
        ("shard", "world", True),
    ],
)
def test_a_bool_or_a_float_where_a_state_holds_an_int_is_refused(kind, key, value):
    state, _ = saved(kind)
    with started(kind) as target:
        assert refuses(target, {**state, key: value}) == (True, "")


def test_a_state_that_ended_before_its_pass_did_is_refused():
    state, _ = saved()
    assert state["batches"] < len(states.loader())
    with started() as target:
        assert refuses(target, {**state, "ended": True}) == (True, "")


def test_a_state_whose_batches_do_not_fit_its_number_of_ranks_is_refused():
    state, _ = saved("shard")
    bad = {**state, "world": 64}
    assert not states.plausible(bad)
    with started("shard") as target:
        assert refuses(target, bad) == (True, "")


def test_a_seed_a_plain_dataset_cannot_shuffle_with_is_a_state_error():
    state, want = saved("plain")
    with started("plain") as target:
        with pytest.raises(fl.StateError):
            target.load_state_dict({**state, "seed": 2**64})
        assert rest(target) == want


def test_a_state_of_a_loader_with_workers_refused_for_its_position_leaves_it_unchanged():
    state, want = saved(workers=2)
    with started(workers=2) as target:
        assert refuses(target, INVALID["batches past the pass"](state)) == (True, "")
        assert rest(target) == want
