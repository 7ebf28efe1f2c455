"""Golden orders, pinned in the clear.

Orders are a compatibility promise: a configuration, its sources' lengths and salts,
and a seed give the same positions on every platform, in every feedline release with
the same ``ORDERING_VERSION``, and in the dataorder crate 0.4. A change to any value
in this file is therefore a versioned decision: it ships with an ``ORDERING_VERSION``
bump and a changelog entry, never as a side effect of a refactor.

Ordering version 2 changed four rules (nested repeats, epochs through mixes, salts of
the configuration as written, no shuffle over a mix): the cases they touch were
replaced by the crate's own values at the seed's state and recomputed by the oracle.

The first cases are the crate's own golden tests. Their fingerprint is FNV-1a 64 over,
for each item in order, 8 little-endian bytes of the source's id (its salt) and then
8 little-endian bytes of the record index. The mid-size cases at the end were computed
by the independent oracle in ``tools/order_oracle.py``, not by feedline.
"""

from __future__ import annotations

import numpy as np
import pytest

import feedline as fl
from feedline import Schedule as S

FNV_OFFSET = 0xCBF29CE484222325
FNV_PRIME = 0x100000001B3
M64 = (1 << 64) - 1


class Src:
    """A dataset stand-in: an id (which is also its salt) and a length."""

    def __init__(self, id_: int, length: int) -> None:
        self.id = id_
        self.salt = id_
        self.length = length

    def __len__(self) -> int:
        return self.length


def src(id_: int, length: int) -> fl.Seq:
    return fl.Seq.source(Src(id_, length))


def fnv1a(data: bytes) -> int:
    h = FNV_OFFSET
    for b in data:
        h = ((h ^ b) * FNV_PRIME) & M64
    return h


def ids_and_records(order: fl.Order) -> tuple[np.ndarray, np.ndarray]:
    ords, recs = order.lookup(np.arange(len(order)))
    ids = np.array([s.id for s in order.sources], dtype=np.uint64)
    return ids[ords], recs.astype(np.uint64)


def fingerprint(order: fl.Order) -> int:
    ids, recs = ids_and_records(order)
    return fnv1a(np.stack([ids, recs], axis=1).astype("<u8").tobytes())


def head(order: fl.Order, k: int) -> list[tuple[int, int]]:
    ids, recs = ids_and_records(order)
    return [(int(i), int(r)) for i, r in zip(ids[:k], recs[:k], strict=True)]


def test_the_ordering_version_is_2() -> None:
    assert fl.ORDERING_VERSION == 2


# -- the crate's golden tests ----------------------------------------------------------------

CRATE_GOLDEN = [
    ("shuffle-seed-0", lambda: src(0, 1000).shuffle(7), 0, 13510848840803686825),
    ("shuffle-seed-42", lambda: src(0, 1000).shuffle(7), 42, 5734682759774056529),
    ("repeat", lambda: src(0, 777).shuffle(1).repeat(3), 0, 2152343650903757428),
    (
        "concat-shuffled",
        lambda: fl.Seq.concat([src(0, 300), src(1, 500).shuffle(2)]).shuffle(3),
        0,
        1077492288285509245,
    ),
    ("skip-take", lambda: src(0, 5000).shuffle(9).skip(100).take(2000), 0, 2420967535336859100),
    (
        "mix-three",
        lambda: fl.Seq.mix([src(0, 1000).shuffle(1), src(1, 300).shuffle(2), src(2, 50)]),
        0,
        11125969817394475988,
    ),
    (
        "mix-scheduled",
        lambda: fl.Seq.mix(
            [
                (src(0, 2000).shuffle(1), S.uniform()),
                (src(1, 400).shuffle(2), S.delayed(0.5)),
                (src(2, 600), S.ramp(0.2, 0.6)),
            ]
        ),
        0,
        3696955324159907089,
    ),
    (
        "mix-nested-sharded",
        lambda: (
            fl.Seq.mix(
                [
                    fl.Seq.mix(
                        [src(0, 500).shuffle(1).repeat(2), src(1, 300).shuffle(2).repeat(3)]
                    ),
                    src(2, 900).shuffle(3),
                ]
            )
            .skip(1)
            .step_by(4)
        ),
        0,
        905848074036688221,
    ),
    (
        "mix-sharded",
        lambda: fl.Seq.mix([src(0, 1000), src(1, 999).shuffle(4)]).skip(3).step_by(7),
        0,
        12216569398622504889,
    ),
    (
        "mix-repeated",
        lambda: fl.Seq.mix([src(0, 200).shuffle(1), src(1, 100).shuffle(2)]).repeat(4),
        0,
        4113493865489899877,
    ),
    (
        "mix-cycled",
        lambda: fl.Seq.mix(
            [src(0, 100).shuffle(1).cycle_to(1800), src(1, 5000).shuffle(2).cycle_to(1200)]
        ),
        0,
        16159320458550980399,
    ),
    ("repeat-nested", lambda: src(0, 100).shuffle(3).repeat(3).repeat(2), 0, 5178620365869428389),
    (
        "repeat-cycled",
        lambda: src(0, 300).shuffle(5).repeat(2).cycle_to(1000),
        0,
        5043228978147298754,
    ),
    (
        "mix-until-trapezoid",
        lambda: fl.Seq.mix(
            [
                (src(0, 1500).shuffle(1), S.uniform()),
                (src(1, 300).shuffle(2), S.until(0.4)),
                (src(2, 400), S.trapezoid(0.2, 0.4, 0.6, 0.9)),
            ]
        ),
        0,
        16685696649537605013,
    ),
]


@pytest.mark.parametrize(
    ("build", "seed", "expected"),
    [pytest.param(b, s, e, id=name) for name, b, s, e in CRATE_GOLDEN],
)
def test_golden_orders_match_the_crate(build, seed: int, expected: int) -> None:
    assert fingerprint(fl.Order(build()).with_seed(seed)) == expected


def test_the_crate_golden_shuffle_of_a_mix_is_refused_in_version_2() -> None:
    # Version 1's "mix-of-concat-shuffled" case shuffled a mix; the crate 0.4 refuses it.
    seq = fl.Seq.mix(
        [
            fl.Seq.concat([src(0, 200), src(1, 300)]).cycle_to(250),
            src(2, 50).shuffle(1).cycle_to(250),
        ]
    ).shuffle(2)
    with pytest.raises(fl.OrderError) as info:
        fl.Order(seq)
    assert info.value.kind is fl.OrderErrorKind.SHUFFLE_CONTAINS_MIX


def test_shuffle_of_1000_matches_the_crate() -> None:
    order = fl.Order(src(0, 1000).shuffle(7))
    assert [r for _, r in head(order, 6)] == [629, 114, 228, 812, 639, 604]
    assert fingerprint(order) == 13510848840803686825


def test_a_named_source_shuffles_as_in_the_crate() -> None:
    web = Src(fl.salt("web/训练.bin"), 1000)
    order = fl.Order(fl.Seq.source(web).shuffle(7)).with_seed(42)
    _, recs = order.lookup(np.arange(len(order)))
    assert recs[:12].tolist() == [445, 928, 15, 77, 0, 293, 540, 797, 190, 407, 709, 652]
    assert fnv1a(recs.astype("<u8").tobytes()) == 15852656108745184545


def test_a_mix_of_two_billion_record_epochs_matches_the_crate_at_its_ends() -> None:
    seq = fl.Seq.mix(
        [src(0, 2**30).shuffle(11).repeat(2**15), src(1, 2**30).shuffle(22).repeat(2**15)]
    )
    order = fl.Order(seq).with_seed(42)
    assert len(order) == 2**46
    got = {p: order.get(p) for p in (0, 1, 2**46 - 1)}
    assert {p: (order.sources[it.source_ordinal].id, it.record_index) for p, it in got.items()} == {
        0: (0, 42551070),
        1: (1, 416584996),
        2**46 - 1: (1, 229610082),
    }


def test_a_shuffle_over_2_to_the_60_positions_is_pinned() -> None:
    # Computed by tools/order_oracle.py with exact integer arithmetic.
    order = fl.Order(src(4, 2**30).repeat(2**30).shuffle(55)).with_seed(5)
    assert len(order) == 2**60
    expected = {
        0: 775329228,
        1: 321073809,
        2: 239410411,
        1000: 675396131,
        2**30: 474827084,
        12345678901234: 743986706,
        2**59: 1027825476,
        2**60 - 1: 825974522,
    }
    ords, recs = order.lookup(np.array(list(expected), dtype=np.int64))
    assert ords.tolist() == [0] * len(expected)
    assert dict(zip(expected, recs.tolist(), strict=True)) == expected
    assert order.get(2**60 - 1).record_index == 825974522


# -- mid-size orders pinned by the independent oracle ----------------------------------------

ORACLE_GOLDEN = [
    (
        "mix-ramp-fade-uniform",
        lambda: fl.Seq.mix(
            [
                (src(10, 400).shuffle(3), S.ramp(0.1, 0.5)),
                (src(11, 250).shuffle(4), S.fade(0.3, 0.9)),
                src(12, 150),
            ]
        ),
        9,
        800,
        10562330309538075117,
        [
            (11, 175),
            (11, 158),
            (12, 0),
            (11, 23),
            (11, 134),
            (11, 16),
            (12, 1),
            (11, 195),
            (11, 51),
            (11, 185),
            (12, 2),
            (11, 72),
            (11, 139),
            (11, 221),
            (12, 3),
            (11, 233),
        ],
    ),
    (
        "repeat-in-concat-shuffled-and-sliced",
        lambda: (
            fl.Seq.concat([src(20, 90).shuffle(1).repeat(2), src(21, 60)])
            .shuffle(5)
            .skip(7)
            .step_by(3)
        ),
        0,
        78,
        16410269466399953618,
        [
            (20, 31),
            (20, 32),
            (20, 1),
            (20, 70),
            (20, 64),
            (20, 56),
            (20, 10),
            (21, 58),
            (20, 51),
            (20, 2),
            (20, 45),
            (20, 60),
            (20, 74),
            (20, 38),
            (20, 16),
            (20, 33),
        ],
    ),
    (
        "mix-until-repeated-and-sliced",
        lambda: (
            fl.Seq.mix(
                [
                    src(30, 500).shuffle(6).cycle_to(800),
                    (src(31, 120).shuffle(7).cycle_to(200), S.until(0.5)),
                ]
            )
            .repeat(2)
            .skip(11)
            .take(1500)
        ),
        123,
        1500,
        8344202849069971927,
        [
            (31, 87),
            (30, 24),
            (30, 401),
            (31, 30),
            (30, 112),
            (30, 205),
            (31, 51),
            (30, 370),
            (30, 162),
            (31, 12),
            (30, 25),
            (30, 490),
            (31, 65),
            (30, 303),
            (30, 44),
            (31, 68),
        ],
    ),
    (
        "mix-nested-delayed-trapezoid",
        lambda: fl.Seq.mix(
            [
                (src(40, 300).shuffle(8), S.delayed(0.2)),
                (
                    fl.Seq.mix(
                        [src(41, 200).shuffle(9), (src(42, 100), S.trapezoid(0.1, 0.3, 0.4, 0.6))]
                    ),
                    S.until(0.8),
                ),
            ]
        ).step_by(2),
        M64,
        300,
        9106672138191545460,
        [
            (41, 125),
            (41, 156),
            (41, 32),
            (41, 155),
            (41, 37),
            (41, 158),
            (41, 16),
            (41, 168),
            (41, 145),
            (41, 137),
            (41, 81),
            (41, 73),
            (41, 123),
            (42, 0),
            (41, 108),
            (42, 1),
        ],
    ),
]


@pytest.mark.parametrize(
    ("build", "seed", "length", "expected", "first"),
    [pytest.param(*case[1:], id=case[0]) for case in ORACLE_GOLDEN],
)
def test_mid_size_orders_match_the_oracle(
    build, seed: int, length: int, expected: int, first: list[tuple[int, int]]
) -> None:
    order = fl.Order(build()).with_seed(seed)
    assert len(order) == length
    assert head(order, len(first)) == first
    assert fingerprint(order) == expected
