"""The four ordering rules of the dataorder crate 0.4 that ordering version 2 follows.

Each test states one rule of the seed's README ("Things to know"), checked two ways:
by an invariant the rule promises (nested repeats equal flat ones, a mix's parts keep
their streams whatever their siblings) and by orders computed independently of
feedline, by ``tools/order_oracle.py`` (plain Python from the corrected reference) or
by the crate's own golden tests.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

import feedline as fl
from feedline.order import LengthSource

M64 = (1 << 64) - 1
ROOT = Path(__file__).resolve().parents[2]


def _load_oracle():
    path = ROOT / "tools" / "order_oracle.py"
    spec = importlib.util.spec_from_file_location("order_oracle", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("order_oracle", module)
    spec.loader.exec_module(module)
    return module


oracle = _load_oracle()


class Src:
    """A dataset stand-in: an id (also its salt) and a length."""

    def __init__(self, id_: int, length: int) -> None:
        self.id = id_
        self.salt = id_
        self.length = length

    def __len__(self) -> int:
        return self.length


def src(id_: int, length: int) -> fl.Seq:
    """A shuffled source, as the crate's epoch tests build them."""
    return fl.Seq.source(Src(id_, length)).shuffle(7)


def records(order: fl.Order) -> list[tuple[int, int]]:
    ords, recs = order.lookup(np.arange(len(order)))
    ids = [order.sources[o].id for o in ords.tolist()]
    return list(zip(ids, recs.tolist(), strict=True))


def stream(items: list[tuple[int, int]], id_: int) -> list[int]:
    return [r for s, r in items if s == id_]


def check_access(order: fl.Order, expected: list[tuple[int, int]]) -> None:
    """Lookup, iteration and seeked cursors all give ``expected``."""
    assert records(order) == expected
    n = len(expected)
    for pos in (n - 1, 0, n // 2, 1):
        cursor = order.cursor(pos)
        got = [(order.sources[it.source_ordinal].id, it.record_index) for it in list(cursor)[:9]]
        assert got == expected[pos : pos + 9]
    walked = [(order.sources[it.source_ordinal].id, it.record_index) for it in order]
    assert walked == expected


SEEDS = (0, 51, M64)

# -- rule 1: nested repeats count total epochs -------------------------------------------------


def test_nested_repeats_of_a_shuffle_equal_one_flat_repeat() -> None:
    seq = fl.Seq.source(100).shuffle(3)
    flat = fl.Order(seq.repeat(6))
    nested = fl.Order(seq.repeat(3).repeat(2))
    assert records_plain(nested) == records_plain(flat)


def records_plain(order: fl.Order) -> list[int]:
    return order.lookup(np.arange(len(order)))[1].tolist()


@pytest.mark.parametrize("base", ["source", "shuffled-concat", "scheduled-mix"])
@pytest.mark.parametrize("seed", SEEDS)
def test_nested_repeats_match_flat_repeats(base: str, seed: int) -> None:
    # The crate's tests/epochs.rs, nested_repeats_match_flat_repeats.
    bases = {
        "source": lambda: src(0, 37),
        "shuffled-concat": lambda: fl.Seq.concat([src(0, 37), src(1, 19).repeat(2)]).shuffle(11),
        "scheduled-mix": lambda: fl.Seq.mix(
            [(src(0, 37).repeat(2), fl.Schedule.uniform()), (src(1, 19), fl.Schedule.delayed(0.3))]
        ),
    }
    build = bases[base]
    expected = records(fl.Order(build().repeat(24), seed=seed))
    for nested in (build().repeat(3).repeat(8), build().repeat(3).repeat(2).repeat(4)):
        check_access(fl.Order(nested, seed=seed), expected)


def test_an_outer_repeat_keeps_the_whole_first_pass() -> None:
    inner = fl.Seq.concat([src(0, 13).repeat(3), src(1, 5).cycle_to(12)])
    once = records(fl.Order(inner))
    twice = records(fl.Order(inner.repeat(2)))
    assert twice[: len(once)] == once
    assert twice[len(once) :] != once


@pytest.mark.parametrize("seed", (0, 51))
def test_selections_keep_the_original_repeat_counts(seed: int) -> None:
    # The crate's tests/epochs.rs, selections_preserve_original_repeat_counts.
    n = 17
    base = src(0, n)
    flat = records(fl.Order(base.repeat(9), seed=seed))
    selections = [
        (base.repeat(3).take(1), [0]),
        (base.repeat(3).take(n), list(range(n))),
        (base.repeat(3).take(n + 1), list(range(n + 1))),
        (base.repeat(3).skip(n - 1).take(n + 2), list(range(n - 1, 2 * n + 1))),
        (base.repeat(3).step_by(3 * n), [0]),
        (base.repeat(3).step_by(4).skip(2).take(7), [i * 4 for i in range(2, 9)]),
        (base.cycle_to(2 * n + 7), list(range(2 * n + 7))),
        (fl.Seq.concat([base.repeat(3), src(1, 13)]).take(n), list(range(n))),
    ]
    for selected, positions in selections:
        expected = [flat[e * 3 * n + p] for e in range(3) for p in positions]
        check_access(fl.Order(selected.repeat(3), seed=seed), expected)


# -- rule 2: mixes pass epoch numbers through, whatever their siblings --------------------------


def test_a_mix_part_keeps_its_stream_whatever_its_sibling_nests() -> None:
    a = fl.Seq.source(Src(0, 40)).shuffle(1)
    b = fl.Seq.source(Src(1, 30)).shuffle(2)
    flat = records(fl.Order(fl.Seq.mix([a, b.repeat(6)]).repeat(2)))
    nested = records(fl.Order(fl.Seq.mix([a, b.repeat(3).repeat(2)]).repeat(2)))
    assert nested == flat


@pytest.mark.parametrize("seed", SEEDS)
def test_mixture_edits_preserve_existing_streams_in_every_epoch(seed: int) -> None:
    # The crate's tests/epochs.rs, mixture_edits_preserve_existing_streams_in_every_epoch.
    a = src(0, 17).repeat(2).repeat(3)
    b = src(1, 11).cycle_to(29)
    deep = src(2, 7).repeat(2).repeat(3).repeat(2).repeat(2)
    variants = [
        fl.Seq.mix([a, b]),
        fl.Seq.mix([deep, b, a]),
        fl.Seq.mix([fl.Seq.mix([a, deep]), b]),
        fl.Seq.mix([fl.Seq.mix([a, b]), deep]),
        fl.Seq.mix(
            [
                (b, fl.Schedule.ramp(0.1, 0.8)),
                (a, fl.Schedule.delayed(0.2)),
                (deep, fl.Schedule.uniform()),
            ]
        ),
        fl.Seq.mix([src(2, 7).repeat(2).repeat(3).take(0), a, b]),
    ]
    expected_a = stream(records(fl.Order(a.repeat(3), seed=seed)), 0)
    expected_b = stream(records(fl.Order(b.repeat(3), seed=seed)), 1)
    for seq in variants:
        order = fl.Order(seq.repeat(3), seed=seed)
        actual = records(order)
        assert stream(actual, 0) == expected_a
        assert stream(actual, 1) == expected_b
        check_access(order, actual)


# -- rule 3: shuffle salts follow the original configuration -----------------------------------


def test_a_shuffled_concat_matches_the_crate_from_position_zero() -> None:
    seq = fl.Seq.concat([fl.Seq.source(300), fl.Seq.source(500)]).shuffle(5)
    expected = oracle.Config(oracle.C.concat([oracle.src(300), oracle.src(500)]).shuffle(5).d)
    assert records_plain(fl.Order(seq)) == [r for _, r in expected.evaluate(0)]


def test_concat_grouping_changes_the_shuffle_above_it() -> None:
    a, b, c = (fl.Seq.source(Src(i, 20 + i)) for i in range(3))
    flat = records(fl.Order(fl.Seq.concat([a, b, c]).shuffle(1)))
    left = records(fl.Order(fl.Seq.concat([fl.Seq.concat([a, b]), c]).shuffle(1)))
    right = records(fl.Order(fl.Seq.concat([a, fl.Seq.concat([b, c])]).shuffle(1)))
    assert left == flat  # the fold is left to right
    assert right != flat
    oa, ob, oc = (oracle.src(20 + i, i) for i in range(3))
    cfg = oracle.C.concat([oa, oracle.C.concat([ob, oc])]).shuffle(1)
    assert right == [(o, r) for o, r in oracle.Config(cfg.d).evaluate(0)]


def test_an_empty_source_still_salts_the_shuffle_above_it() -> None:
    alone = records_plain(fl.Order(fl.Seq.source(40).shuffle(1)))
    with_empty = records_plain(
        fl.Order(fl.Seq.concat([fl.Seq.source(0), fl.Seq.source(40)]).shuffle(1))
    )
    assert with_empty != alone
    cfg = oracle.C.concat([oracle.src(0), oracle.src(40)]).shuffle(1)
    assert with_empty == [r for _, r in oracle.Config(cfg.d).evaluate(0)]


def test_a_source_selected_away_still_salts_the_shuffle_above_it() -> None:
    kept = fl.Seq.source(Src(1, 50))
    gone = fl.Seq.source(Src(2, 30))
    seq = fl.Seq.concat([kept, gone]).take(50).shuffle(3)
    got = records(fl.Order(seq))
    assert got != records(fl.Order(kept.shuffle(3)))
    cfg = oracle.C.concat([oracle.src(50, 1), oracle.src(30, 2)]).take(50).shuffle(3)
    assert got == [(1, r) for _, r in oracle.Config(cfg.d).evaluate(0)]


def test_a_source_salt_uses_its_original_length_under_a_take() -> None:
    seq = fl.Seq.source(1000).take(100).shuffle(2)
    got = records_plain(fl.Order(seq))
    cfg = oracle.C.source(1000).take(100).shuffle(2)
    assert got == [r for _, r in oracle.Config(cfg.d).evaluate(0)]


# -- rule 4: a shuffle containing any mix is an error ------------------------------------------

S = fl.Seq.source


@pytest.mark.parametrize(
    ("seq", "path", "where"),
    [
        (fl.Seq.mix([S(3), S(4)]).shuffle(1), (), "shuffle"),
        (fl.Seq.mix([S(3)]).shuffle(1), (), "shuffle"),
        (fl.Seq.mix([]).shuffle(1), (), "shuffle"),
        (fl.Seq.mix([S(3), S(3)]).take(2).shuffle(1), (), "shuffle"),
        (fl.Seq.mix([S(3), S(3)]).repeat(2).shuffle(1), (), "shuffle"),
        (fl.Seq.concat([S(3), fl.Seq.mix([S(2), S(2)]).take(3)]).shuffle(1), (), "shuffle"),
        (
            fl.Seq.concat([S(3), fl.Seq.mix([S(2)]).shuffle(2)]).shuffle(1),
            (0, 1),
            "shuffle.concat[1].shuffle",
        ),
        (fl.Seq.mix([S(5), fl.Seq.mix([S(1), S(1)]).shuffle(2)]), (1,), "mix[1].shuffle"),
    ],
    ids=[
        "mix",
        "single-part",
        "empty",
        "under-take",
        "under-repeat",
        "in-concat",
        "nearest-shuffle",
        "inside-a-mix",
    ],
)
def test_a_shuffle_containing_any_mix_is_an_error(seq, path, where) -> None:
    with pytest.raises(fl.OrderError) as info:
        fl.Order(seq)
    err = info.value
    assert err.kind is fl.OrderErrorKind.SHUFFLE_CONTAINS_MIX
    assert err.path == path
    assert err.where == where


def test_errors_are_reported_in_configuration_order() -> None:
    # The shuffle's mix is found before the bad skip inside it; a bad skip before the
    # mix is found first.
    with pytest.raises(fl.OrderError) as info:
        fl.Order(fl.Seq.mix([S(3).skip(5)]).shuffle(1))
    assert info.value.kind is fl.OrderErrorKind.SHUFFLE_CONTAINS_MIX
    with pytest.raises(fl.OrderError) as info:
        fl.Order(fl.Seq.concat([S(3).skip(5), fl.Seq.mix([])]).shuffle(1))
    assert info.value.kind is fl.OrderErrorKind.SKIP_OUT_OF_RANGE
    assert info.value.path == (0, 0)


def test_mix_children_are_validated_before_the_schedules() -> None:
    bad = fl.Schedule.trapezoid(0.5, 0.4, 0.6, 0.9)
    with pytest.raises(fl.OrderError) as info:
        fl.Order(fl.Seq.mix([(S(3), bad), S(3).take(4)]))
    assert info.value.kind is fl.OrderErrorKind.TAKE_OUT_OF_RANGE
    assert info.value.path == (1,)


# -- the crate's golden orders that these rules changed -----------------------------------------


def _fnv_fingerprint(order: fl.Order) -> int:
    h = 0xCBF29CE484222325
    ords, recs = order.lookup(np.arange(len(order)))
    ids = np.array([s.id for s in order.sources], dtype=np.uint64)[ords]
    data = np.stack([ids, recs.astype(np.uint64)], axis=1).astype("<u8").tobytes()
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & M64
    return h


def gsrc(id_: int, length: int) -> fl.Seq:
    return fl.Seq.source(Src(id_, length))


@pytest.mark.parametrize(
    ("build", "expected"),
    [
        (
            lambda: fl.Seq.concat([gsrc(0, 300), gsrc(1, 500).shuffle(2)]).shuffle(3),
            1077492288285509245,
        ),
        (lambda: gsrc(0, 100).shuffle(3).repeat(3).repeat(2), 5178620365869428389),
        (lambda: gsrc(0, 300).shuffle(5).repeat(2).cycle_to(1000), 5043228978147298754),
    ],
    ids=["shuffle-of-concat", "nested-repeats", "cycle-of-a-shuffled-repeat"],
)
def test_the_changed_golden_orders_match_the_crate(build, expected: int) -> None:
    # The crate's tests/golden.rs at the seed's state: these three entries were recomputed
    # there from total epochs and configuration salts.
    assert _fnv_fingerprint(fl.Order(build())) == expected


# -- the version ---------------------------------------------------------------------------------


def test_the_ordering_version_is_2() -> None:
    assert fl.ORDERING_VERSION == 2


def test_a_configuration_saved_with_ordering_version_1_is_refused_naming_both() -> None:
    text = (
        '{"format": "feedline.order", "ordering_version": 1, '
        '"seq": {"source": {"len": 5, "salt": 0}}}'
    )
    with pytest.raises(fl.OrderError) as info:
        fl.Seq.from_json(text)
    assert info.value.kind is fl.OrderErrorKind.VERSION_MISMATCH
    assert "ordering version 1" in str(info.value)
    assert "ordering version 2" in str(info.value)


# -- the crate's API as the seed describes it ----------------------------------------------------


def test_set_seed_reseeds_an_order_in_place() -> None:
    seq = fl.Seq.source(100).shuffle(1)
    order = fl.Order(seq)
    copy = order.with_seed(0)
    order.set_seed(7)
    assert order.seed == 7
    assert list(order) == list(fl.Order(seq, seed=7))
    assert list(copy) == list(fl.Order(seq))  # copies keep their own seed


def test_with_epoch_is_a_pass_of_an_enclosing_repeat() -> None:
    seq = fl.Seq.mix([fl.Seq.source(30).shuffle(1).repeat(2), fl.Seq.source(20).shuffle(2)])
    whole = fl.Order(seq.repeat(5), seed=9)
    n = len(fl.Order(seq))
    for e in (0, 1, 4):
        assert list(fl.Order(seq, seed=9).with_epoch(e)) == list(whole.cursor(e * n, (e + 1) * n))


def test_cursor_last_is_a_direct_lookup_that_consumes_the_cursor() -> None:
    order = fl.Order(fl.Seq.source(50).shuffle(3))
    cursor = order.cursor(10, 40)
    assert cursor.last() == order[39]
    assert cursor.offset == 40
    assert cursor.last() is None
    assert list(cursor) == []
    assert order.cursor(5, 5).last() is None


def test_cursor_position_is_the_consuming_search() -> None:
    order = fl.Order(fl.Seq.source(50).shuffle(3))
    cursor = order.cursor(10)
    target = order[25].record_index
    assert cursor.position(lambda it: it.record_index == target) == 15
    assert cursor.offset == 26
    assert next(cursor) == order[26]
    assert cursor.position(lambda it: it.record_index == target) is None
    assert cursor.offset == 50


def test_sources_by_name_are_resolved_by_map_sources() -> None:
    sizes = {"data/web.bin": 1000, "data/code.bin": 12}
    seq = fl.Seq.concat([fl.Seq.source("data/web.bin"), fl.Seq.source("data/code.bin")]).shuffle(4)
    with pytest.raises(fl.OrderError) as info:
        fl.Order(seq)  # a name is not a length (len("data/web.bin") == 12)
    assert info.value.kind is fl.OrderErrorKind.NOT_A_SOURCE
    assert info.value.path == (0, 0)
    assert "data/web.bin" in str(info.value)
    resolved = seq.map_sources(lambda name: LengthSource(sizes[name], fl.salt(name)))
    order = fl.Order(resolved)
    assert len(order) == 1012
    assert [s.length for s in order.sources] == [1000, 12]
    assert seq.sources() == ["data/web.bin", "data/code.bin"]
    assert fl.Seq.source("data/web.bin") == fl.Seq.source("data/web.bin")


def test_try_map_sources_names_the_source_it_failed_on() -> None:
    seq = fl.Seq.mix([fl.Seq.source("a").shuffle(1), fl.Seq.source("missing").shuffle(2)])
    sizes = {"a": 10}
    with pytest.raises(fl.OrderError) as info:
        seq.try_map_sources(lambda name: LengthSource(sizes[name]))
    err = info.value
    assert err.kind is fl.OrderErrorKind.NOT_A_SOURCE
    assert err.path == (1, 0)
    assert err.where == "mix[1].shuffle.source"
    assert "'missing'" in str(err)
    assert isinstance(err.__cause__, KeyError)
    with pytest.raises(KeyError):
        seq.map_sources(lambda name: sizes[name])


def test_an_unresolved_source_cannot_be_recorded() -> None:
    with pytest.raises(fl.OrderError) as info:
        fl.Seq.source("web").shuffle(1).to_json()
    assert info.value.kind is fl.OrderErrorKind.NOT_A_SOURCE


def test_max_depth_is_exported_and_enforced() -> None:
    assert fl.MAX_DEPTH == 16
    seq = fl.Seq.source(10)
    for _ in range(fl.MAX_DEPTH - 1):
        seq = seq.take(10)
    fl.Order(seq)
    with pytest.raises(fl.OrderError) as info:
        fl.Order(seq.take(10))
    assert info.value.kind is fl.OrderErrorKind.TOO_DEEP


@pytest.mark.parametrize(
    ("schedule", "reason"),
    [
        (fl.Schedule.delayed(float("nan")), "NON_FINITE"),
        (fl.Schedule.trapezoid(0.5, 0.4, 0.6, 0.9), "INVALID_BREAKPOINTS"),
        (fl.Schedule.trapezoid(0.0, 1e-320, 1e-320, 1e-320), "COEFFICIENT_OVERFLOW"),
    ],
)
def test_an_invalid_schedule_carries_a_schedule_reason(schedule, reason) -> None:
    with pytest.raises(fl.OrderError) as info:
        fl.Order(fl.Seq.mix([S(3), (S(3), schedule)]))
    err = info.value
    assert err.kind is fl.OrderErrorKind.INVALID_SCHEDULE
    assert err.reason is getattr(fl.ScheduleReason, reason)
    assert err.details["reason"] is err.reason
    assert err.reason.value in str(err)
