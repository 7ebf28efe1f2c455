"""Exact resume: ``state_dict`` at any batch boundary continues the uninterrupted stream.

Every resumed loader is built afresh over new ``Dataset`` objects of the same arrays, as a
restarted training process would, and reads the state through a JSON round trip.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

import feedline as fl


class R(fl.Record, dims={"D": 3}):
    """A test example: three features and a label."""

    x = fl.field("D", "float32")
    y = fl.field((), "int64", domain=fl.Index(5))


class Other(fl.Record, dims={"D": 3}):
    """Another record."""

    x = fl.field("D", "float32")
    z = fl.field((), "int64")


class R64(fl.Record, dims={"D": 3}):
    """R with double features."""

    x = fl.field("D", "float64")
    y = fl.field((), "int64", domain=fl.Index(5))


def arrays(n: int, base: int = 0) -> dict[str, np.ndarray]:
    i = np.arange(base, base + n)
    return {"x": (i[:, None] * 10 + np.arange(3)).astype(np.float32), "y": (i % 5).astype(np.int64)}


def mixed(n_a: int = 23, n_b: int = 17, shuffle: int = 1) -> fl.Seq:
    a = fl.Dataset(R, arrays(n_a))
    b = fl.Dataset(R, arrays(n_b, base=1000))
    return fl.Seq.mix([a.shuffle(shuffle), b.to_seq()]).repeat(2)


def plain(n: int = 41) -> fl.Dataset:
    return fl.Dataset(R, arrays(n))


# (source factory, loader options)
CONFIGS = {
    "mix": (mixed, {}),
    "mix-seeded": (mixed, {"seed": 9}),
    "mix-pad": (mixed, {"pad": True, "seed": 3}),
    "mix-drop-last": (mixed, {"drop_last": True}),
    "mix-shard": (mixed, {"shard": (1, 3), "seed": 4}),
    "plain-shuffled": (plain, {"seed": 6}),
    "plain-in-order-shard": (plain, {"shard": (0, 2), "pad": True}),
}


def snap(batch) -> tuple:
    """What identifies a delivered batch: its rows' origin and values."""
    return (
        batch.meta.size,
        len(batch),
        batch.meta.source_ordinals.tolist(),
        batch.meta.record_indices.tolist(),
        batch.meta.positions.tolist(),
        batch.x.tolist(),
        batch.y.tolist(),
    )


def stream(loader, total: int):
    """The next ``total`` batches, as ``for`` loops over successive passes deliver them."""
    got = 0
    idle = 0
    while got < total:
        before = got
        for batch in loader:
            got += 1
            yield batch
            if got == total:
                return
        # A loop may find its pass already delivered (then the next loop starts the next
        # pass), but never two in a row.
        idle = idle + 1 if got == before else 0
        assert idle < 2, "the loader does not start a new pass"


def roundtrip(state: dict) -> dict:
    return json.loads(json.dumps(state))


@pytest.mark.parametrize("config", list(CONFIGS))
@pytest.mark.parametrize("batch_size", [7, 16])
def test_a_state_saved_at_every_batch_boundary_resumes_the_rest_of_the_stream(config, batch_size):
    factory, options = CONFIGS[config]
    loader = fl.Loader(factory(), batch_size, **options)
    passes = 3
    total = passes * len(loader)
    states = [loader.state_dict()]
    want = []
    for batch in stream(loader, total):
        want.append(snap(batch))
        states.append(loader.state_dict())
    assert len(want) == total
    epochs = {s["epoch"] for s in states}
    assert epochs == {0, 1, 2}

    for k, state in enumerate(states):
        fresh = fl.Loader(factory(), batch_size, **options)
        fresh.load_state_dict(roundtrip(state))
        assert fresh.epoch == state["epoch"]
        rest = [snap(b) for b in stream(fresh, total - k)]
        assert rest == want[k:], f"resuming at batch {k} of {total}"
        # The resumed loader is where the original was.
        assert fresh.state_dict() == states[-1]


def test_a_state_saved_after_a_finished_pass_resumes_with_the_next_pass():
    loader = fl.Loader(mixed(), 8, seed=2)
    first = [snap(b) for b in loader]
    state = loader.state_dict()
    assert state["ended"] is True and state["epoch"] == 0
    second = [snap(b) for b in loader]
    third = [snap(b) for b in loader]
    assert second != first

    fresh = fl.Loader(mixed(), 8, seed=2)
    fresh.load_state_dict(roundtrip(state))
    assert [snap(b) for b in fresh] == second
    assert fresh.epoch == 1
    assert [snap(b) for b in fresh] == third


def test_a_state_saved_in_pass_one_resumes_in_pass_one():
    loader = fl.Loader(mixed(), 5, seed=7, pad=True)
    list(loader)
    it = iter(loader)
    for _ in range(4):
        next(it)
    state = roundtrip(loader.state_dict())
    assert state["epoch"] == 1 and state["batches"] == 4
    rest = [snap(b) for b in it] + [snap(b) for b in loader]

    fresh = fl.Loader(mixed(), 5, seed=7, pad=True)
    fresh.load_state_dict(state)
    assert [snap(b) for b in fresh] + [snap(b) for b in fresh] == rest


def test_next_into_resumes_exactly():
    def fill(loader, out):
        k = loader.next_into(out)
        return k, out["x"][:k].tolist(), out["y"][:k].tolist()

    def buffers():
        return {"x": np.zeros((6, 3), np.float32), "y": np.zeros(6, np.int64)}

    loader = fl.Loader(mixed(), 6, seed=1)
    out = buffers()
    states, want = [loader.state_dict()], []
    for step in range(2 * (len(loader) + 1)):  # two passes, each closed by a 0
        if step == len(loader) + 1:
            iter(loader)  # a new iteration starts the next pass
        want.append(fill(loader, out))
        states.append(loader.state_dict())
    assert [w[0] for w in want].count(0) == 2
    for k, state in enumerate(states):
        fresh = fl.Loader(mixed(), 6, seed=1)
        fresh.load_state_dict(roundtrip(state))
        mine = buffers()
        got = []
        for step in range(k, len(want)):
            if step == len(loader) + 1:
                iter(fresh)
            got.append(fill(fresh, mine))
        assert got == want[k:]


def test_the_state_is_small_json_ready_data():
    loader = fl.Loader(mixed(), 4, seed=3)
    next(iter(loader))
    state = loader.state_dict()
    assert set(state) >= {"format", "version", "fingerprint", "seed", "epoch", "batches", "ended"}
    assert roundtrip(state) == state
    assert len(json.dumps(state)) < 1000
    assert state["batches"] == 1 and state["epoch"] == 0 and state["seed"] == 3
    # The state is a copy: the loader moving on does not change it.
    next(iter(loader))
    assert state["batches"] == 1


def test_a_state_carries_the_seed_of_the_loader_that_saved_it():
    saved = fl.Loader(plain(), 4, seed=11)
    it = iter(saved)
    next(it)
    state = roundtrip(saved.state_dict())
    rest = [snap(b) for b in it]
    other = fl.Loader(plain(), 4, seed=12)
    other.load_state_dict(state)
    assert [snap(b) for b in other] == rest
    assert other.seed == 11


def test_reset_after_a_load_rewinds_to_pass_zero():
    want = [snap(b) for b in fl.Loader(mixed(), 6, seed=5)]
    loader = fl.Loader(mixed(), 6, seed=5)
    loader.load_state_dict({**loader.state_dict(), "epoch": 3, "batches": 2})
    loader.reset()
    assert loader.epoch == 0
    assert [snap(b) for b in loader] == want


# -- refused states ---------------------------------------------------------------------


def reference_state() -> dict:
    loader = fl.Loader(mixed(), 8, seed=2)
    it = iter(loader)
    next(it)
    next(it)
    return roundtrip(loader.state_dict())


OTHER_CONFIGS = {
    "batch size": lambda: fl.Loader(mixed(), 9, seed=2),
    "drop_last": lambda: fl.Loader(mixed(), 8, seed=2, drop_last=True),
    "pad": lambda: fl.Loader(mixed(), 8, seed=2, pad=True),
    "dataset length": lambda: fl.Loader(mixed(n_a=24), 8, seed=2),
    "other dataset length": lambda: fl.Loader(mixed(n_b=16), 8, seed=2),
    "shuffle seed in the order": lambda: fl.Loader(mixed(shuffle=2), 8, seed=2),
    "order": lambda: fl.Loader(
        fl.Seq.concat(
            [fl.Dataset(R, arrays(23)).shuffle(1), fl.Dataset(R, arrays(17, 1000)).to_seq()]
        ).repeat(2),
        8,
        seed=2,
    ),
    "no repeat": lambda: fl.Loader(
        fl.Seq.mix(
            [fl.Dataset(R, arrays(23)).shuffle(1), fl.Dataset(R, arrays(17, 1000)).to_seq()]
        ),
        8,
        seed=2,
    ),
    "shard": lambda: fl.Loader(mixed(), 8, seed=2, shard=(0, 2)),
    "record": lambda: fl.Loader(
        fl.Seq.mix(
            [
                fl.Dataset(Other, {"x": arrays(23)["x"], "z": np.zeros(23, np.int64)}).shuffle(1),
                fl.Dataset(Other, {"x": arrays(17)["x"], "z": np.zeros(17, np.int64)}).to_seq(),
            ]
        ).repeat(2),
        8,
        seed=2,
    ),
    "field dtype": lambda: fl.Loader(
        fl.Seq.mix(
            [fl.Dataset(R64, arrays(23)).shuffle(1), fl.Dataset(R64, arrays(17, 1000)).to_seq()]
        ).repeat(2),
        8,
        seed=2,
    ),
}


@pytest.mark.parametrize("other", list(OTHER_CONFIGS))
def test_a_state_from_a_loader_of_another_configuration_is_refused(other):
    state = reference_state()
    loader = OTHER_CONFIGS[other]()
    with pytest.raises(fl.StateError):
        loader.load_state_dict(state)
    # ...and the other way round.
    it = iter(loader)
    next(it)
    own = roundtrip(loader.state_dict())
    same = fl.Loader(mixed(), 8, seed=2)
    with pytest.raises(fl.StateError):
        same.load_state_dict(own)


def test_a_state_of_a_plain_dataset_does_not_fit_a_loader_of_its_seq():
    ds = plain()
    saved = fl.Loader(ds, 4)
    with pytest.raises(fl.StateError):
        fl.Loader(ds.to_seq(), 4).load_state_dict(saved.state_dict())
    with pytest.raises(fl.StateError):
        fl.Loader(plain(40), 4).load_state_dict(saved.state_dict())
    with pytest.raises(fl.StateError):
        fl.Loader(ds, 4, shard=(0, 2)).load_state_dict(saved.state_dict())


def _without(key: str) -> dict:
    state = reference_state()
    del state[key]
    return state


MALFORMED = [
    pytest.param(lambda s: {**s, "format": "torch.dataloader"}, id="format"),
    pytest.param(lambda s: {k: v for k, v in s.items() if k != "format"}, id="no format"),
    pytest.param(lambda s: {**s, "version": 5}, id="version 5"),
    pytest.param(lambda s: {**s, "version": 2}, id="version 2 with ahead"),
    pytest.param(lambda s: _without("ahead"), id="version 4 without ahead"),
    pytest.param(lambda s: _without("ordering_version"), id="no ordering version"),
    pytest.param(lambda s: {**s, "ordering_version": 3}, id="ordering version 3"),
    pytest.param(lambda s: {**s, "ahead": None}, id="ahead None"),
    pytest.param(lambda s: {**s, "ahead": [s["batches"]]}, id="ahead at the count"),
    pytest.param(
        lambda s: {**s, "ahead": [s["batches"] + 3, s["batches"] + 2]}, id="ahead decreasing"
    ),
    pytest.param(lambda s: {**s, "ahead": [s["batches"] + 2] * 2}, id="ahead twice"),
    pytest.param(lambda s: {**s, "ahead": [s["batches"] + 1.0]}, id="ahead float"),
    pytest.param(lambda s: {**s, "ahead": [10_000]}, id="ahead past the pass"),
    pytest.param(
        lambda s: {**s, "ahead": [s["batches"] + 1], "ended": True}, id="ahead in an ended pass"
    ),
    pytest.param(lambda s: {**s, "version": 1}, id="version 1"),
    pytest.param(lambda s: {**s, "version": "2.0"}, id="version text"),
    pytest.param(lambda s: {**s, "fingerprint": "0" * 64}, id="fingerprint"),
    pytest.param(lambda s: _without("fingerprint"), id="no fingerprint"),
    pytest.param(lambda s: _without("epoch"), id="no epoch"),
    pytest.param(lambda s: _without("batches"), id="no batches"),
    pytest.param(lambda s: _without("seed"), id="no seed"),
    pytest.param(lambda s: _without("ended"), id="no ended"),
    pytest.param(lambda s: {**s, "epoch": "x"}, id="epoch text"),
    pytest.param(lambda s: {**s, "epoch": 1.5}, id="epoch float"),
    pytest.param(lambda s: {**s, "epoch": -1}, id="epoch negative"),
    pytest.param(lambda s: {**s, "batches": -1}, id="batches negative"),
    pytest.param(lambda s: {**s, "batches": 10_000}, id="batches past the pass"),
    pytest.param(lambda s: {**s, "batches": None}, id="batches None"),
    pytest.param(lambda s: {**s, "seed": "abc"}, id="seed text"),
    pytest.param(lambda s: {**s, "seed": 2.5}, id="seed float"),
    pytest.param(lambda s: {**s, "ended": "no"}, id="ended text"),
    pytest.param(lambda s: [s], id="a list"),
    pytest.param(lambda s: None, id="None"),
    pytest.param(lambda s: json.dumps(s), id="a JSON text"),
]


@pytest.mark.parametrize("corrupt", MALFORMED)
def test_a_malformed_state_is_refused_with_state_error(corrupt):
    loader = fl.Loader(mixed(), 8, seed=2)
    with pytest.raises(fl.StateError):
        loader.load_state_dict(corrupt(reference_state()))


@pytest.mark.parametrize("version", [2, 3])
def test_a_state_saved_under_ordering_version_1_is_refused_naming_both(version):
    # Contract change (issue 13): loader states 2 and 3 counted positions of ordering
    # version 1, whose orders differ from version 2's; they are refused, not resumed.
    state = reference_state()
    assert state["version"] == 4 and state["ordering_version"] == fl.ORDERING_VERSION == 2
    old = {k: v for k, v in state.items() if k != "ordering_version"} | {"version": version}
    with pytest.raises(fl.StateError) as info:
        fl.Loader(mixed(), 8, seed=2).load_state_dict(old)
    assert "ordering version 1" in str(info.value)
    assert "ordering version 2" in str(info.value)


def test_state_error_is_a_value_error():
    assert issubclass(fl.StateError, ValueError)
    assert issubclass(fl.StateError, fl.FeedlineError)


def test_a_refused_state_leaves_the_loader_unchanged_structurally():
    want = [snap(b) for b in fl.Loader(mixed(), 8, seed=2)]
    loader = fl.Loader(mixed(), 8, seed=2)
    with pytest.raises(fl.StateError):
        loader.load_state_dict({**reference_state(), "fingerprint": "x"})
    with pytest.raises(fl.StateError):
        loader.load_state_dict({**reference_state(), "batches": -4})
    assert [snap(b) for b in loader] == want


def test_a_refused_state_does_not_reseed_the_loader():
    want = [snap(b) for b in fl.Loader(mixed(), 8, seed=2)]
    loader = fl.Loader(mixed(), 8, seed=2)
    with pytest.raises(fl.StateError):
        loader.load_state_dict({**reference_state(), "seed": 5, "batches": 10_000})
    assert loader.seed == 2
    assert [snap(b) for b in loader] == want
