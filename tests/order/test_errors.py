"""Every way an ordering configuration, a position or a cursor range can be rejected."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

import feedline as fl

Kind = fl.OrderErrorKind
S = fl.Seq.source


def order_error(seq: fl.Seq, kind: fl.OrderErrorKind, path: tuple[int, ...]) -> fl.OrderError:
    """The error ``Order(seq)`` raises, checked for its kind, path and rendering."""
    with pytest.raises(fl.OrderError) as info:
        fl.Order(seq)
    err = info.value
    assert err.kind is kind
    assert err.path == path
    assert isinstance(err, ValueError)
    assert isinstance(err, fl.FeedlineError)
    assert str(err).endswith(f" (at {err.where})")
    return err


def build_error(kind: fl.OrderErrorKind, build) -> fl.OrderError:
    with pytest.raises(fl.OrderError) as info:
        build()
    assert info.value.kind is kind
    assert isinstance(info.value, ValueError)
    return info.value


# -- configurations --------------------------------------------------------------------------


def test_skip_past_the_end_is_an_error():
    err = order_error(S(10).skip(11), Kind.SKIP_OUT_OF_RANGE, ())
    assert str(err) == "cannot skip 11 of 10 positions (at skip)"
    assert err.where == "skip"
    assert len(fl.Order(S(10).skip(10))) == 0


def test_take_past_the_end_is_an_error():
    err = order_error(S(10).take(11), Kind.TAKE_OUT_OF_RANGE, ())
    assert str(err).startswith("cannot take 11 of 10 positions")
    assert len(fl.Order(S(10).take(10))) == 10


def test_take_past_the_end_of_a_concat_part_names_the_part():
    err = order_error(fl.Seq.concat([S(10), S(5).take(6)]), Kind.TAKE_OUT_OF_RANGE, (1,))
    assert str(err) == "cannot take 6 of 5 positions (at concat[1].take)"


def test_a_zero_step_is_an_error():
    order_error(S(10).step_by(0), Kind.ZERO_STEP, ())
    order_error(fl.Seq.concat([S(3), S(3).step_by(0)]), Kind.ZERO_STEP, (1,))


def test_a_zero_step_is_reported_before_the_childs_own_errors():
    order_error(S(10).take(11).step_by(0), Kind.ZERO_STEP, ())


def test_a_repeat_longer_than_two_to_the_64_is_an_error():
    order_error(S(2**40).repeat(2**30), Kind.LENGTH_OVERFLOW, ())
    order_error(S(2**63).repeat(2), Kind.LENGTH_OVERFLOW, ())
    fl.Order(S(2**40).repeat(2**23))  # 2**63 positions fit


def test_a_later_take_does_not_excuse_an_overflowing_repeat():
    err = order_error(S(2**40).repeat(2**30).take(5), Kind.LENGTH_OVERFLOW, (0,))
    assert err.where == "take.repeat"


def test_a_concat_longer_than_two_to_the_64_is_an_error():
    order_error(fl.Seq.concat([S(2**63), S(2**63)]), Kind.LENGTH_OVERFLOW, ())
    fl.Order(fl.Seq.concat([S(2**63), S(2**63 - 1)]))  # 2**64 - 1 positions fit


def test_an_order_of_two_to_the_63_positions_or_more_can_be_read():
    order = fl.Order(fl.Seq.concat([S(2**63), S(2**63 - 1)]))
    assert order.get(0) == fl.Item(0, 2**63, 0)
    assert order.get(2**64 - 2) == fl.Item(1, 2**63 - 1, 2**63 - 2)
    assert order.get(2**64 - 1) is None
    assert order[2**63] == fl.Item(1, 2**63 - 1, 0)
    assert order[-1] == order.get(2**64 - 2)
    assert [it.record_index for it in order.cursor(2**63 - 1, 2**63 + 1)] == [2**63 - 1, 0]
    ords, _ = order.lookup(np.array([0, 2**63], dtype=np.uint64))
    assert ords.tolist() == [0, 1]


def test_fifteen_takes_over_a_source_are_within_the_depth_limit():
    seq = S(10)
    for _ in range(15):
        seq = seq.take(10)
    assert len(fl.Order(seq)) == 10


def test_sixteen_takes_over_a_source_are_too_deep():
    seq = S(10)
    for _ in range(16):
        seq = seq.take(10)
    err = order_error(seq, Kind.TOO_DEEP, (0,) * 16)
    assert err.where == ".".join(["take"] * 16 + ["source"])
    assert "deeper than 16 levels" in str(err)


def test_a_too_deep_error_follows_the_concat_parts_to_the_deepest_node():
    seq = S(1)
    for _ in range(16):
        seq = fl.Seq.concat([S(1), seq])
    # The innermost concat's first part is the first node found past the limit.
    order_error(seq, Kind.TOO_DEEP, (1,) * 15 + (0,))


def test_a_mix_longer_than_two_to_the_46_is_an_error():
    err = order_error(fl.Seq.mix([S(2**45), S(2**45 + 1)]), Kind.MIX_TOO_LONG, ())
    assert "mix longer than" in str(err)


def test_a_mix_of_exactly_two_to_the_46_and_concats_of_valid_mixes_are_allowed():
    mix = fl.Seq.mix([S(2**45), S(2**45)])
    order = fl.Order(mix)
    assert len(order) == 2**46
    assert {order[0].source_ordinal, order[1].source_ordinal} == {0, 1}
    assert len(fl.Order(fl.Seq.concat([mix, mix]))) == 2**47
    assert len(fl.Order(mix.repeat(4))) == 2**48


@pytest.mark.parametrize(
    "schedule",
    [
        fl.Schedule.delayed(2.0),
        fl.Schedule.delayed(1.0),
        fl.Schedule.until(0.0),
        fl.Schedule.trapezoid(0.0, math.nan, 0.5, 1.0),
        fl.Schedule.trapezoid(0.0, 0.2, 0.5, math.inf),
        fl.Schedule.trapezoid(0.5, 0.5, 0.5, 0.5),
        fl.Schedule.trapezoid(0.1, 0.5, 0.4, 0.9),
        fl.Schedule.trapezoid(-0.1, 0.0, 0.5, 1.0),
        fl.Schedule.ramp(0.6, 0.4),
    ],
    ids=repr,
)
def test_an_invalid_schedule_is_an_error_at_its_part(schedule):
    err = order_error(fl.Seq.mix([S(10), (S(5), schedule)]), Kind.INVALID_SCHEDULE, (1,))
    assert err.where == "mix[1].source"
    assert "invalid schedule" in str(err)


def test_an_invalid_schedule_is_an_error_even_when_its_part_is_empty():
    order_error(fl.Seq.mix([S(10), (S(0), fl.Schedule.delayed(2.0))]), Kind.INVALID_SCHEDULE, (1,))
    order_error(
        fl.Seq.mix([(S(4).take(0), fl.Schedule.trapezoid(0.3, 0.3, 0.3, 0.3)), S(3)]),
        Kind.INVALID_SCHEDULE,
        (0,),
    )


def test_an_invalid_schedule_in_a_nested_mix_has_the_full_path():
    inner = fl.Seq.mix([S(3), (S(4), fl.Schedule.trapezoid(0.0, math.nan, 1.0, 1.0))])
    err = order_error(fl.Seq.concat([S(2), inner.repeat(2)]), Kind.INVALID_SCHEDULE, (1, 0, 1))
    assert err.where == "concat[1].repeat.mix[1].source"


def test_a_schedule_too_steep_for_its_parts_length_is_an_error():
    seq = fl.Seq.mix([S(10), (S(2**30), fl.Schedule.until(1e-6))])
    err = order_error(seq, Kind.SCHEDULE_TOO_STEEP, (1,))
    assert "too long for the steepness" in str(err)
    assert len(fl.Order(fl.Seq.mix([S(10), (S(2**30), fl.Schedule.until(0.5))]))) == 2**30 + 10


def test_cycling_an_empty_sequence_to_a_positive_length_is_an_error():
    err = order_error(S(0).cycle_to(5), Kind.EMPTY_CYCLE, ())
    assert "cannot cycle a sequence without elements" in str(err)
    order_error(fl.Seq.concat([S(3), fl.Seq.concat([]).cycle_to(1)]), Kind.EMPTY_CYCLE, (1,))


def test_cycling_an_empty_sequence_to_zero_is_empty():
    assert len(fl.Order(S(0).cycle_to(0))) == 0


@pytest.mark.parametrize(
    "seq",
    [
        fl.Seq.mix([S(3), S(4)]).shuffle(1),
        fl.Seq.mix([S(3)]).shuffle(1),
        fl.Seq.mix([]).shuffle(1),
        fl.Seq.concat([S(3), fl.Seq.mix([S(2), S(2)]).take(3)]).shuffle(1),
    ],
    ids=["two parts", "one part", "empty", "nested"],
)
def test_a_shuffle_over_any_mix_is_an_error_as_in_the_crate_0_4(seq):
    # Ordering version 2: the seed's README says "Order::new rejects a shuffle containing
    # any mix, including empty or single-part mixes and mixes nested beneath other
    # operations, with ErrorKind::ShuffleContainsMix" (version 1 accepted them).
    err = order_error(seq, Kind.SHUFFLE_CONTAINS_MIX, ())
    assert err.where == "shuffle"


def test_a_nested_error_reports_its_path_and_where():
    a = S(10)
    seq = fl.Seq.mix([a, fl.Seq.concat([a, a.take(11).shuffle(1)])]).repeat(2)
    err = order_error(seq, Kind.TAKE_OUT_OF_RANGE, (0, 1, 1, 0))
    assert err.where == "repeat.mix[1].concat[1].shuffle.take"
    assert str(err) == "cannot take 11 of 10 positions (at repeat.mix[1].concat[1].shuffle.take)"


@pytest.mark.parametrize(("index", "count"), [(2, 2), (5, 2), (0, 0), (1, 0)])
def test_a_shard_or_split_index_not_below_its_count_is_an_error_when_built(index, count):
    build_error(Kind.INVALID_SHARD, lambda: S(10).shard(index, count))
    build_error(Kind.INVALID_SHARD, lambda: S(10).split(index, count))


def test_a_shard_past_the_end_of_a_short_sequence_is_empty():
    assert len(fl.Order(S(2).shard(3, 5))) == 0
    assert len(fl.Order(S(2).split(3, 5))) == 0


@pytest.mark.parametrize(
    "build",
    [
        lambda: S(-1),
        lambda: S(2**64),
        lambda: S(10).skip(-1),
        lambda: S(10).take(-1),
        lambda: S(10).step_by(-1),
        lambda: S(10).repeat(-1),
        lambda: S(10).cycle_to(-1),
        lambda: S(10).shuffle(-1),
        lambda: S(10).shuffle(2**64),
        lambda: S(10).shard(-1, 2),
        lambda: S(10).shard(0, -2),
        lambda: S(10).split(-1, 2),
        lambda: S(10).split(0, -2),
    ],
    ids=[
        "source",
        "huge source",
        "skip",
        "take",
        "step_by",
        "repeat",
        "cycle_to",
        "shuffle",
        "huge seed",
        "shard index",
        "shard count",
        "split index",
        "split count",
    ],
)
def test_a_negative_or_too_large_argument_is_an_error(build):
    build_error(Kind.INVALID_ARGUMENT, build)


@pytest.mark.parametrize(
    "build",
    [
        lambda: S(1.5),
        lambda: S(None),
        lambda: S(S(3)),
        lambda: S(10).skip(1.5),
        lambda: S(10).take("3"),
        lambda: S(10).step_by(2.0),
        lambda: S(10).repeat(None),
        lambda: S(10).cycle_to(3.0),
        lambda: S(10).shuffle(1.0),
        lambda: S(10).shard(0.0, 2),
        lambda: S(10).split(0, "2"),
        lambda: fl.Seq.mix([(S(3), "uniform")]),
    ],
    ids=[
        "float source",
        "None source",
        "Seq source",
        "skip",
        "take",
        "step_by",
        "repeat",
        "cycle_to",
        "shuffle",
        "shard",
        "split",
        "schedule",
    ],
)
def test_a_non_integer_argument_is_a_type_error(build):
    with pytest.raises(TypeError):
        build()


# -- configurations as JSON ------------------------------------------------------------------


def test_a_source_whose_length_or_salt_changed_is_rejected_on_load():
    class Named:
        def __init__(self, n, salt):
            self.n, self.salt = n, salt

        def __len__(self):
            return self.n

    seq = fl.Seq.concat([S(Named(10, 7)), S(5)]).shuffle(1)
    text = seq.to_json()
    for sources in (
        [Named(11, 7), 5],
        [Named(10, 8), 5],
        [Named(10, 7), 6],
        [Named(10, 7)],
        [Named(10, 7), 5, 5],
    ):
        build_error(Kind.SOURCE_CHANGED, lambda sources=sources: fl.Seq.from_json(text, sources))
    assert len(fl.Order(fl.Seq.from_json(text, [Named(10, 7), 5]))) == 15


@pytest.mark.parametrize(
    "doc",
    [
        "not json",
        "[1, 2]",
        {"format": "other", "ordering_version": 2, "seq": {"source": {"len": 1, "salt": 0}}},
        {"format": "feedline.order", "ordering_version": 2, "seq": {"source": {"len": 1}}},
        {"format": "feedline.order", "ordering_version": 2, "seq": {"spin": {"seq": {}}}},
        {
            "format": "feedline.order",
            "ordering_version": 2,
            "seq": {"source": {"len": -1, "salt": 0}},
        },
        {
            "format": "feedline.order",
            "ordering_version": 2,
            "seq": {"source": {"len": 1.5, "salt": 0}},
        },
        {
            "format": "feedline.order",
            "ordering_version": 2,
            "seq": {"source": {"len": True, "salt": 0}},
        },
        {
            "format": "feedline.order",
            "ordering_version": 2,
            "extra": 0,
            "seq": {"source": {"len": 1, "salt": 0}},
        },
        {
            "format": "feedline.order",
            "ordering_version": 2,
            "seq": {"take": {"n": 1, "seq": {"source": {"len": 1, "salt": 0}}, "m": 2}},
        },
        {
            "format": "feedline.order",
            "ordering_version": 2,
            "seq": {
                "mix": [{"seq": {"source": {"len": 1, "salt": 0}}, "schedule": {"linear": {}}}]
            },
        },
        {
            "format": "feedline.order",
            "ordering_version": 2,
            "seq": {
                "mix": [
                    {
                        "seq": {"source": {"len": 1, "salt": 0}},
                        "schedule": {"trapezoid": [0, 10**400, 0.5, 1]},
                    }
                ]
            },
        },
        '{"seq": ' * 5000 + "1" + "}" * 5000,
    ],
    ids=[
        "not json",
        "not an object",
        "format",
        "missing field",
        "unknown op",
        "negative",
        "float",
        "bool",
        "extra top field",
        "extra node field",
        "unknown schedule",
        "a point no float holds",
        "nested 5000 deep",
    ],
)
def test_an_invalid_json_document_is_rejected(doc):
    text = doc if isinstance(doc, str) else json.dumps(doc)
    build_error(Kind.INVALID_JSON, lambda: fl.Seq.from_json(text))


# -- positions and cursors -------------------------------------------------------------------


@pytest.fixture
def order() -> fl.Order:
    return fl.Order(S(10).shuffle(3))


def test_indexing_at_or_past_the_length_is_a_bounds_error(order):
    for pos in (10, 11, 2**70, -11, -(2**70)):
        with pytest.raises(fl.BoundsError) as info:
            order[pos]
        assert isinstance(info.value, IndexError)
        assert isinstance(info.value, fl.FeedlineError)
    assert order[-1] == order[9]
    assert order[-10] == order[0]
    with pytest.raises(fl.BoundsError, match="position -11 is outside"):  # as given
        order[-11]


def test_a_numpy_integer_is_a_source_length():
    assert len(fl.Order(S(np.int64(5)).shuffle(np.uint32(3)))) == 5
    with pytest.raises(TypeError):
        S(np.bool_(True))


def test_get_outside_the_order_is_none(order):
    assert order.get(10) is None
    assert order.get(2**70) is None
    assert order.get(-1) is None
    assert fl.Order(S(0)).get(0) is None


def test_a_lookup_with_a_position_outside_the_order_names_it(order):
    with pytest.raises(fl.BoundsError, match=r"\b12\b"):
        order.lookup(np.array([0, 3, 12, 10]))
    with pytest.raises(fl.BoundsError, match="-1"):
        order.lookup(np.array([2, -1]))
    with pytest.raises(fl.BoundsError, match=str(2**63)):
        order.lookup(np.array([2**63], dtype=np.uint64))
    with pytest.raises(IndexError):
        order.lookup([[1, 2], [3, 99]])


def test_a_lookup_of_non_integer_positions_is_a_type_error(order):
    with pytest.raises(TypeError):
        order.lookup(np.array([0.0, 1.0]))


@pytest.mark.parametrize(
    ("start", "stop"), [(11, None), (0, 11), (11, 12), (-1, 5), (0, -1), (5, 3), (10, 9)]
)
def test_a_cursor_range_outside_the_order_or_reversed_is_a_bounds_error(order, start, stop):
    with pytest.raises(fl.BoundsError) as info:
        order.cursor(start, stop)
    assert isinstance(info.value, IndexError)


def test_cursors_over_empty_ranges_are_fine(order):
    assert list(order.cursor(10)) == []
    assert list(order.cursor(4, 4)) == []
    assert list(fl.Order(S(0)).cursor()) == []
    with pytest.raises(fl.BoundsError):
        fl.Order(S(0)).cursor(1)


@pytest.mark.parametrize(("start", "stop"), [(11, None), (0, 11), (6, 2), (-1, None)])
def test_a_failed_reset_leaves_the_cursor_unchanged(order, start, stop):
    expected = [order[p] for p in range(2, 8)]
    cur = order.cursor(2, 8)
    _, r = cur.next_block(2)
    assert list(r) == [it.record_index for it in expected[:2]]
    third = next(cur)  # leaves the rest of an iteration block buffered
    assert third == expected[2]
    with pytest.raises(fl.BoundsError):
        cur.reset(start, stop)
    assert cur.offset == 5
    assert cur.stop == 8
    assert list(cur) == expected[3:]


# -- hostile JSON (issue 15) -----------------------------------------------------------------


def test_a_json_document_with_a_duplicate_key_is_refused():
    text = (
        '{"format": "feedline.order", "ordering_version": 2, '
        '"seq": {"take": {"n": 3, "n": 5, "seq": {"source": {"len": 10, "salt": 0}}}}}'
    )
    err = build_error(Kind.INVALID_JSON, lambda: fl.Seq.from_json(text))
    assert "'n'" in str(err) and "twice" in str(err)


def test_a_configuration_dict_nested_past_any_document_is_refused():
    node: dict = {"source": {"len": 10, "salt": 0}}
    for _ in range(5000):
        node = {"take": {"n": 10, "seq": node}}
    doc = {"format": "feedline.order", "ordering_version": 2, "seq": node}
    err = build_error(Kind.INVALID_JSON, lambda: fl.Seq.from_json(doc))
    assert "deeper" in str(err)


def test_a_cyclic_configuration_dict_is_refused():
    node: dict = {"take": {"n": 1}}
    node["take"]["seq"] = node
    doc = {"format": "feedline.order", "ordering_version": 2, "seq": node}
    build_error(Kind.INVALID_JSON, lambda: fl.Seq.from_json(doc))
