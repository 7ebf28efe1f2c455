"""Property tests of the ordering engine over random configurations.

The strategies build random ``Seq`` trees together with an independent model of
each tree: its length, its number of sources and, where the configuration fixes
it, the exact order (no shuffle or mix below) or the multiset of
``(source_ordinal, record_index)`` pairs (no partial selection above a shuffle or
a mix). The model never looks at feedline's compiled nodes.
"""

from __future__ import annotations

import itertools
import json
from collections import Counter
from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import feedline as fl

U64 = st.integers(0, 2**64 - 1)
FAST = settings(max_examples=100, deadline=None)
MEDIUM = settings(max_examples=80, deadline=None)


# -- sources and the model ---------------------------------------------------------------


class Named:
    """A dataset stand-in: a length and a salt, compared by identity."""

    def __init__(self, n: int, salt: int) -> None:
        self.n = n
        self.salt = salt

    def __len__(self) -> int:
        return self.n

    def __repr__(self) -> str:
        return f"Named({self.n}, salt={self.salt:#x})"


def source_len(src: object) -> int:
    return src if isinstance(src, int) else len(src)  # type: ignore[arg-type]


def source_salt(src: object) -> int:
    return getattr(src, "salt", 0) or 0


@dataclass(frozen=True)
class Tree:
    """A configuration and its model.

    ``exact`` is the whole order when no shuffle or mix decides it; ``bag`` is the
    multiset of ``(ordinal, record)`` pairs when it does not depend on the order of
    anything (no partial selection over a shuffle or a mix), else None.
    """

    seq: fl.Seq
    n: int
    sources: int
    exact: tuple[tuple[int, int], ...] | None
    bag: Counter | None
    has_mix: bool

    def shifted(self, k: int) -> Tree:
        """The same tree with every ordinal moved up by ``k`` (a later child's view)."""
        exact = None if self.exact is None else tuple((o + k, r) for o, r in self.exact)
        bag = (
            None if self.bag is None else Counter({(o + k, r): c for (o, r), c in self.bag.items()})
        )
        return Tree(self.seq, self.n, self.sources, exact, bag, self.has_mix)


def leaf(src: object) -> Tree:
    n = source_len(src)
    exact = tuple((0, r) for r in range(n))
    return Tree(fl.Seq.source(src), n, 1, exact, Counter(exact), False)


def scaled(bag: Counter | None, times: int) -> Counter | None:
    if bag is None:
        return None
    return Counter({k: v * times for k, v in bag.items() if v * times})


def combine(op: str, children: list[Tree], schedules=None) -> Tree:
    shifted = []
    k = 0
    for c in children:
        shifted.append(c.shifted(k))
        k += c.sources
    n = sum(c.n for c in children)
    bags = [c.bag for c in shifted]
    bag = None if any(b is None for b in bags) else sum(bags, Counter())
    if op == "concat":
        seq = fl.Seq.concat([c.seq for c in children])
        exacts = [c.exact for c in shifted]
        exact = None if any(e is None for e in exacts) else tuple(itertools.chain(*exacts))
        return Tree(seq, n, k, exact, bag, any(c.has_mix for c in children))
    seq = fl.Seq.mix(list(zip([c.seq for c in children], schedules)))
    return Tree(seq, n, k, None, bag, True)


def select(child: Tree, seq: fl.Seq, positions: range) -> Tree:
    """A selection of ``positions`` of ``child``'s order."""
    n = len(positions)
    exact = None if child.exact is None else tuple(child.exact[p] for p in positions)
    if n == 0:
        bag = Counter()
    elif n == child.n:
        bag = child.bag
    else:
        bag = None if exact is None else Counter(exact)
    return Tree(seq, n, child.sources, exact, bag, child.has_mix)


def unary(child: Tree, op: str, *args: int) -> Tree:
    seq = getattr(child.seq, op)(*args)
    n = child.n
    if op == "shuffle":
        return Tree(seq, n, child.sources, None, child.bag, child.has_mix)
    if op == "repeat":
        (times,) = args
        exact = None if child.exact is None else child.exact * times
        bag = Counter() if times == 0 else scaled(child.bag, times)
        return Tree(seq, n * times, child.sources, exact, bag, child.has_mix)
    if op == "cycle_to":
        (length,) = args
        if length == 0:
            return Tree(seq, 0, child.sources, (), Counter(), child.has_mix)
        passes = -(-length // n)
        exact = None if child.exact is None else (child.exact * passes)[:length]
        if exact is not None:
            bag = Counter(exact)
        elif length % n == 0:
            bag = scaled(child.bag, length // n)
        else:
            bag = None
        return Tree(seq, length, child.sources, exact, bag, child.has_mix)
    if op == "skip":
        return select(child, seq, range(args[0], n))
    if op == "take":
        return select(child, seq, range(args[0]))
    if op == "step_by":
        return select(child, seq, range(0, n, args[0]))
    if op == "shard":
        i, c = args
        return select(child, seq, range(i, n, c))
    if op == "split":
        i, c = args
        return select(child, seq, range(i * n // c, (i + 1) * n // c))
    raise AssertionError(op)


# -- strategies ----------------------------------------------------------------------------

UNIT = st.one_of(st.integers(0, 20).map(lambda i: i / 20), st.floats(0.0, 1.0))


@st.composite
def sources(draw) -> object:
    n = draw(st.one_of(st.integers(0, 60), st.integers(30, 60)))
    kind = draw(st.sampled_from(["int", "named", "named", "list"]))
    if kind == "int":
        return n
    if kind == "list":
        return list(range(n))
    salt = draw(st.one_of(U64, st.sampled_from([0, 1, fl.salt("web"), fl.salt(b"code")])))
    return Named(n, salt)


def edge(a: float, b: float) -> float:
    """``b``, or ``a`` when the two are so close that a slope between them overflows."""
    return b if b - a >= 0.01 else a


@st.composite
def schedules(draw) -> tuple[fl.Schedule, tuple[float, float, float, float] | None]:
    """A valid schedule and its trapezoid (None for uniform), never steeper than 100."""
    kind = draw(st.sampled_from(["uniform", "delayed", "ramp", "until", "fade", "trapezoid"]))
    if kind == "uniform":
        return fl.Schedule.uniform(), None
    a, b = sorted((draw(UNIT), draw(UNIT)))
    if kind == "delayed":
        at = min(a, 0.98)
        return fl.Schedule.delayed(at), (at, at, 1.0, 1.0)
    if kind == "ramp":
        a = min(a, 0.98)
        b = edge(a, b)
        return fl.Schedule.ramp(a, b), (a, b, 1.0, 1.0)
    if kind == "until":
        at = max(b, 0.02)
        return fl.Schedule.until(at), (0.0, 0.0, at, at)
    if kind == "fade":
        b = max(b, 0.02)
        a = b if b - a < 0.01 else a
        return fl.Schedule.fade(a, b), (0.0, 0.0, a, b)
    s, f, d, o = sorted(
        draw(st.lists(UNIT, min_size=4, max_size=4).filter(lambda v: max(v) - min(v) >= 0.02))
    )
    f = edge(s, f)
    d = max(d, f)
    d = o if o - d < 0.01 else d
    return fl.Schedule.trapezoid(s, f, d, o), (s, f, d, o)


@st.composite
def trees(draw, depth: int = 4, max_len: int = 1500, top: bool = True) -> Tree:
    """A random configuration of at most ``depth`` operations above its sources."""
    if depth == 0 or (not top and draw(st.integers(0, 3)) == 0):
        return leaf(draw(sources()))
    op = draw(st.sampled_from(["concat", "mix", "unary", "unary", "unary"]))
    if op in ("concat", "mix"):
        k = draw(st.integers(0, 3))
        children = [
            draw(trees(depth - 1, max(max_len // max(k, 1), 1), top=False)) for _ in range(k)
        ]
        if op == "concat":
            return combine("concat", children)
        return combine("mix", children, [draw(schedules())[0] for _ in children])
    child = draw(trees(depth - 1, max_len, top=False))
    n = child.n
    ops = ["repeat", "repeat", "cycle_to", "cycle_to", "skip", "take", "step_by", "shard", "split"]
    if not child.has_mix:  # a shuffle may not contain a mix
        ops += ["shuffle"] * 4
    op = draw(st.sampled_from(ops))
    if op == "shuffle":
        return unary(child, "shuffle", draw(st.one_of(st.integers(0, 5), U64)))
    if op == "repeat":
        cap = max_len // n if n else 3
        return unary(child, "repeat", draw(st.integers(0, min(3, cap))))
    if op == "cycle_to":
        most = min(3 * n + 2, max(max_len, n)) if n else 0
        return unary(child, "cycle_to", draw(st.integers(0, most)))
    if op in ("skip", "take"):
        return unary(child, op, draw(st.integers(0, n)))
    if op == "step_by":
        return unary(child, "step_by", draw(st.integers(1, 6)))
    count = draw(st.integers(1, 5))
    return unary(child, op, draw(st.integers(0, count - 1)), count)


def items(order: fl.Order) -> tuple[np.ndarray, np.ndarray]:
    return order.lookup(np.arange(len(order), dtype=np.int64))


def pairs(ords: np.ndarray, recs: np.ndarray) -> list[tuple[int, int]]:
    return list(zip(ords.tolist(), recs.tolist()))


def assert_same(a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray]) -> None:
    assert np.array_equal(a[0], b[0])
    assert np.array_equal(a[1], b[1])


# -- (a) shuffles are permutations -----------------------------------------------------------

PERMUTATION_SIZES = sorted(
    {0, 1}
    | {4**k + 1 for k in range(8)}
    | {2**k + d for k in (1, 2, 3, 5, 8, 11, 16) for d in (-1, 0, 1)}
)


@pytest.mark.parametrize("n", PERMUTATION_SIZES)
def test_every_shuffle_of_n_is_a_permutation_of_range_n(n):
    for src in (n, Named(n, fl.salt("web"))):
        for seed in (0, 1, 2**64 - 1):
            order = fl.Order(fl.Seq.source(src).shuffle(seed))
            for order_seed in (0, 7):
                ords, recs = items(order.with_seed(order_seed))
                assert len(recs) == n
                assert not ords.any()
                assert np.array_equal(np.sort(recs), np.arange(n))


@FAST
@given(n=st.integers(0, 3000), seed=U64, salt=U64, order_seed=U64)
def test_a_shuffle_of_any_size_seed_and_salt_is_a_permutation(n, seed, salt, order_seed):
    order = fl.Order(fl.Seq.source(Named(n, salt)).shuffle(seed)).with_seed(order_seed)
    _, recs = items(order)
    assert np.array_equal(np.sort(recs), np.arange(n))


@FAST
@given(n=st.integers(2, 200), times=st.integers(2, 13), seed=U64, order_seed=U64)
def test_every_epoch_of_a_repeated_shuffle_is_a_permutation(n, times, seed, order_seed):
    order = fl.Order(fl.Seq.source(n).shuffle(seed).repeat(times)).with_seed(order_seed)
    _, recs = items(order)  # one lookup spanning every epoch
    for e in range(times):
        epoch = recs[e * n : (e + 1) * n]
        assert np.array_equal(np.sort(epoch), np.arange(n))
        # The same epoch looked up on its own (one context) agrees with the joint lookup.
        _, alone = order.lookup(np.arange(e * n, (e + 1) * n))
        assert np.array_equal(alone, epoch)
    if n >= 10:
        # Each later pass is reshuffled (equal passes would take a 1 in 10! coincidence).
        assert not np.array_equal(recs[:n], recs[n : 2 * n])


# -- (b) multiplicities --------------------------------------------------------------------


@settings(max_examples=500, deadline=None)
@given(tree=trees(), order_seed=st.one_of(st.just(0), U64))
def test_every_record_appears_exactly_its_planned_number_of_times(tree, order_seed):
    order = fl.Order(tree.seq).with_seed(order_seed)
    assert len(order) == tree.n
    ords, recs = items(order)
    assert ords.dtype == np.int64 and recs.dtype == np.int64
    assert ((ords >= 0) & (ords < tree.sources)).all()
    if tree.exact is not None:
        # Without a shuffle or a mix deciding it, the order is the plain reference order.
        assert pairs(ords, recs) == list(tree.exact)
    if tree.bag is not None:
        assert Counter(pairs(ords, recs)) == tree.bag


def test_the_multiplicity_model_is_decisive_for_most_configurations():
    # Guards the property above against silently checking nothing.
    known = []

    @settings(max_examples=100, deadline=None, database=None)
    @given(tree=trees())
    def probe(tree):
        known.append(tree.bag is not None)

    probe()
    assert sum(known) >= len(known) // 2


# -- (c) get, lookup, iteration and cursors agree ---------------------------------------------


def check_cursor(order: fl.Order, ref: list[tuple[int, int]], data) -> None:
    n = len(order)
    start = data.draw(st.integers(0, n), label="start")
    stop = data.draw(st.integers(start, n), label="stop")
    cur = order.cursor(start, stop)
    at, end = start, stop
    for _ in range(data.draw(st.integers(1, 10), label="steps")):
        assert cur.offset == at
        assert len(cur) == end - at
        action = data.draw(st.sampled_from(["block", "next", "reset", "reset_to_end"]))
        if action in ("reset", "reset_to_end"):
            at = data.draw(st.integers(0, n), label="reset start")
            if action == "reset":
                end = data.draw(st.integers(at, n), label="reset stop")
                cur.reset(at, end)
            else:
                end = n
                cur.reset(at)
        elif action == "block":
            k = data.draw(st.integers(0, 80), label="block size")
            o, r = cur.next_block(k)
            m = len(o)
            assert m <= min(k, end - at)
            if k and at < end:
                assert m >= 1
            assert pairs(o, r) == ref[at : at + m]
            at += m
        else:
            m = data.draw(st.integers(0, 80), label="items")
            got = [(it.source_ordinal, it.record_index) for it in itertools.islice(cur, m)]
            assert got == ref[at : min(at + m, end)]
            at += len(got)
    assert cur.offset == at
    rest = [(it.source_ordinal, it.record_index) for it in cur]
    assert rest == ref[at:end]
    assert cur.offset == end


@settings(max_examples=400, deadline=None)
@given(tree=trees(), data=st.data())
def test_get_lookup_iteration_and_cursors_agree(tree, data):
    order = fl.Order(tree.seq).with_seed(data.draw(st.sampled_from([0, 3, 2**64 - 1])))
    n = len(order)
    ords, recs = items(order)
    ref = pairs(ords, recs)

    walked = list(order)
    assert [(it.source_ordinal, it.record_index) for it in walked] == ref
    assert all(it.source is order.sources[it.source_ordinal] for it in walked)

    if n:
        for p in data.draw(st.lists(st.integers(0, n - 1), max_size=6), label="positions"):
            item = order.get(p)
            assert (item.source_ordinal, item.record_index) == ref[p]
            assert order[p] == item
            assert order[p - n] == item
    assert order.get(n) is None

    # Lookups in any order and shape agree with the sorted full lookup.
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1), label="rng"))
    pos = rng.integers(0, max(n, 1), size=min(3 * n, 200)) if n else np.zeros(0, np.int64)
    o, r = order.lookup(pos)
    assert np.array_equal(o, ords[pos]) and np.array_equal(r, recs[pos])
    if n >= 6:
        grid = rng.permutation(n)[:6].reshape(2, 3)
        o, r = order.lookup(grid)
        assert o.shape == (2, 3)
        assert np.array_equal(o, ords[grid]) and np.array_equal(r, recs[grid])
        o, r = order.lookup(grid.astype(np.uint64))
        assert np.array_equal(o, ords[grid]) and np.array_equal(r, recs[grid])
        o, r = order.lookup(grid.astype(np.int32).tolist())
        assert np.array_equal(o, ords[grid]) and np.array_equal(r, recs[grid])

    check_cursor(order, ref, data)


MIX = fl.Seq.mix([fl.Seq.source(1), fl.Seq.source(1)])


@pytest.mark.parametrize(
    "seq",
    [
        fl.Seq.source(0),
        fl.Seq.source(5).shuffle(1).repeat(2),
        fl.Seq.concat([MIX, fl.Seq.source(3)]),
        MIX,
    ],
    ids=["empty", "shuffle", "concat of a mix", "mix"],
)
def test_a_lookup_of_no_positions_is_empty(seq):
    order = fl.Order(seq)
    for positions in ([], np.zeros(0, np.int64), np.zeros((0, 3), np.uint64)):
        o, r = order.lookup(positions)
        assert o.shape == r.shape == np.shape(positions)
        assert o.dtype == r.dtype == np.int64


def test_next_block_after_iteration_returns_a_full_block():
    order = fl.Order(fl.Seq.source(10_000).shuffle(3))
    cur = order.cursor()
    for _ in range(4095):
        next(cur)
    o, r = cur.next_block(10)
    assert len(o) == 10
    assert np.array_equal(r, order.lookup(np.arange(4095, 4105))[1])


# -- (d) shards, (e) splits ----------------------------------------------------------------


@MEDIUM
@given(tree=trees(depth=3), count=st.integers(1, 6), order_seed=st.sampled_from([0, 9]))
def test_shards_deal_the_parents_positions_round_robin(tree, count, order_seed):
    parent = fl.Order(tree.seq).with_seed(order_seed)
    ords, recs = items(parent)
    total = 0
    for i in range(count):
        shard = fl.Order(tree.seq.shard(i, count)).with_seed(order_seed)
        q = np.arange(len(shard))
        assert len(shard) == len(range(i, len(parent), count))
        o, r = items(shard)
        assert np.array_equal(o, ords[i + q * count]) and np.array_equal(r, recs[i + q * count])
        total += len(shard)
    assert total == len(parent)


@MEDIUM
@given(tree=trees(depth=3), count=st.integers(1, 6), order_seed=st.sampled_from([0, 9]))
def test_splits_are_datanus_contiguous_slices(tree, count, order_seed):
    parent = fl.Order(tree.seq).with_seed(order_seed)
    n = len(parent)
    ords, recs = items(parent)
    pieces_o, pieces_r = [], []
    for i in range(count):
        part = fl.Order(tree.seq.split(i, count)).with_seed(order_seed)
        a, b = i * n // count, (i + 1) * n // count
        assert len(part) == b - a
        o, r = items(part)
        assert np.array_equal(o, ords[a:b]) and np.array_equal(r, recs[a:b])
        pieces_o.append(o)
        pieces_r.append(r)
    assert np.array_equal(np.concatenate(pieces_o), ords)
    assert np.array_equal(np.concatenate(pieces_r), recs)


# -- (f) configuration as JSON -------------------------------------------------------------


def all_dicts(node: object) -> list[dict]:
    found = []
    if isinstance(node, dict):
        found.append(node)
        for v in node.values():
            found.extend(all_dicts(v))
    elif isinstance(node, list):
        for v in node:
            found.extend(all_dicts(v))
    return found


@settings(max_examples=200, deadline=None)
@given(tree=trees(), data=st.data())
def test_json_round_trips_to_an_equal_configuration_and_order(tree, data):
    seq = tree.seq
    order = fl.Order(seq)
    text = seq.to_json()
    back = fl.Seq.from_json(text, order.sources)
    assert back == seq
    assert hash(back) == hash(seq)
    again = fl.Order(back)
    assert again.sources == order.sources
    assert_same(items(again), items(order))
    # Without the sources, length-and-salt stand-ins give the same order.
    stand_ins = fl.Seq.from_json(text)
    assert stand_ins.to_json() == text
    assert_same(items(fl.Order(stand_ins)), items(order))

    if order.sources:
        i = data.draw(st.integers(0, len(order.sources) - 1), label="changed source")
        old = order.sources[i]
        n, salt = source_len(old), source_salt(old)
        new = data.draw(st.sampled_from([Named(n + 1, salt), Named(n, salt ^ 1)]))
        changed = list(order.sources)
        changed[i] = new
        with pytest.raises(fl.OrderError) as err:
            fl.Seq.from_json(text, changed)
        assert err.value.kind is fl.OrderErrorKind.SOURCE_CHANGED
    with pytest.raises(fl.OrderError) as err:
        fl.Seq.from_json(text, [*order.sources, 5])
    assert err.value.kind is fl.OrderErrorKind.SOURCE_CHANGED


@settings(max_examples=80, deadline=None)
@given(tree=trees(), data=st.data())
def test_json_with_an_unknown_field_anywhere_is_rejected(tree, data):
    doc = json.loads(tree.seq.to_json())
    target = data.draw(st.sampled_from(all_dicts(doc)), label="extended object")
    target["unexpected"] = 0
    with pytest.raises(fl.OrderError) as err:
        fl.Seq.from_json(json.dumps(doc))
    assert err.value.kind is fl.OrderErrorKind.INVALID_JSON


# -- (g) order seeds -----------------------------------------------------------------------


@FAST
@given(n=st.integers(10, 2000), seed=U64, s=U64, t=U64)
def test_different_order_seeds_give_different_shuffles(n, seed, s, t):
    order = fl.Order(fl.Seq.source(n).shuffle(seed))
    if s == t:
        t ^= 1
    assert not np.array_equal(items(order.with_seed(s))[1], items(order.with_seed(t))[1])


@FAST
@given(n=st.integers(10, 2000), seed=U64, other=U64, salt=U64, other_salt=U64)
def test_different_shuffle_seeds_and_source_salts_give_different_shuffles(
    n, seed, other, salt, other_salt
):
    def shuffled(seed, salt):
        return items(fl.Order(fl.Seq.source(Named(n, salt)).shuffle(seed)))[1]

    if seed == other:
        other ^= 1
    if salt == other_salt:
        other_salt ^= 1
    assert not np.array_equal(shuffled(seed, salt), shuffled(other, salt))
    assert not np.array_equal(shuffled(seed, salt), shuffled(seed, other_salt))


@FAST
@given(tree=trees())
def test_order_seed_zero_is_the_default(tree):
    order = fl.Order(tree.seq)
    assert_same(items(order.with_seed(0)), items(order))
    assert_same(items(order.with_seed(5).with_seed(0)), items(order))


@FAST
@given(tree=trees(depth=3), times=st.integers(2, 3), order_seed=st.sampled_from([0, 11]))
def test_an_outer_repeat_keeps_the_first_pass(tree, times, order_seed):
    inner = fl.Order(tree.seq).with_seed(order_seed)
    outer = fl.Order(tree.seq.repeat(times)).with_seed(order_seed)
    assert len(outer) == times * len(inner)
    o, r = outer.lookup(np.arange(len(inner)))
    assert_same((o, r), items(inner))


# -- (h) mixes -----------------------------------------------------------------------------


def reference_keys(params: tuple[float, float, float, float] | None, y: np.ndarray) -> np.ndarray:
    """``Q(y)`` of a schedule for every share in ``y``, from the algorithm's description."""
    if params is None:
        return y
    s, f, d, o = params
    peak = 2.0 / ((d - f) + (o - s))
    points = [(0.0, 0.0), (s, 0.0), (f, peak), (d, peak), (o, 0.0), (1.0, 0.0)]
    segments = []
    share = 0.0
    for (x0, r0), (x1, r1) in itertools.pairwise(points):
        if x1 > x0:
            segments.append((x0, x1, r0, r1, share))
            share += (r0 + r1) / 2.0 * (x1 - x0)
    x0, x1, r0, r1, sh = (np.array(col) for col in zip(*segments))
    # The last segment whose starting share is strictly below y.
    at = np.maximum(np.searchsorted(sh, y, side="left") - 1, 0)
    x0, x1, r0, r1, sh = x0[at], x1[at], r0[at], r1[at], sh[at]
    z = np.maximum(y - sh, 0.0)
    c = (r1 - r0) / (2.0 * (x1 - x0))
    with np.errstate(divide="ignore", invalid="ignore"):
        flat = np.where(r0 > 0.0, z / r0, 0.0)
        rising = np.sqrt(4.0 * c * z) / (2.0 * c)
        falling = 2.0 * z / (r0 + np.sqrt(np.maximum(r0 * r0 + 4.0 * c * z, 0.0)))
    x = np.where(r0 == r1, flat, np.where(r0 == 0.0, rising, falling))
    return np.minimum(np.maximum(x0 + x, x0), x1)


def check_clock_order(parts: list[tuple[int, int, tuple | None]], ords: np.ndarray) -> None:
    """The mix holding ``ords`` draws its elements in the order of their clock keys.

    ``parts`` lists each part's number of sources, length and trapezoid (None when
    uniform). Keys of trapezoids may differ from feedline's in the last bits, so
    they are compared with a tolerance; uniform keys are exact, and then the whole
    order must be sorted by ``(key, rank, j)``.
    """
    bases = np.cumsum([0] + [sources for sources, _, _ in parts])
    part_of = np.searchsorted(bases, ords, side="right") - 1
    k = sum(1 for _, n, _ in parts if n)
    keys = np.empty(len(ords))
    ranks = np.empty(len(ords), dtype=np.int64)
    js = np.empty(len(ords), dtype=np.int64)
    r = 0
    for p, (_, n, params) in enumerate(parts):
        if not n:
            continue
        mine = np.flatnonzero(part_of == p)
        assert len(mine) == n
        j = np.arange(n)
        y = (j + (2.0 * r + 1.0) / (2.0 * k)) * (1.0 / n)
        keys[mine] = reference_keys(params, y)
        ranks[mine] = r
        js[mine] = j
        r += 1
    assert (np.diff(keys) >= -1e-9).all()
    if all(params is None for _, _, params in parts):
        assert np.array_equal(np.lexsort((js, ranks, keys)), np.arange(len(ords)))


def mixes() -> st.SearchStrategy:
    """The parts of a mix: 1 to 4 (tree, (schedule, trapezoid)) pairs."""
    return st.lists(st.tuples(trees(depth=2, max_len=400), schedules()), min_size=1, max_size=4)


@settings(max_examples=300, deadline=None)
@given(parts=mixes(), order_seed=st.sampled_from([0, 5, 2**63]))
def test_a_mix_keeps_each_parts_own_order_and_count(parts, order_seed):
    seq = fl.Seq.mix([(t.seq, sched) for t, (sched, _) in parts])
    order = fl.Order(seq).with_seed(order_seed)
    ords, recs = items(order)
    assert len(order) == sum(t.n for t, _ in parts)
    base = 0
    for tree, _ in parts:
        mine = (ords >= base) & (ords < base + tree.sources)
        own = fl.Order(tree.seq).with_seed(order_seed)
        assert int(mine.sum()) == len(own) == tree.n
        o, r = items(own)
        assert np.array_equal(ords[mine] - base, o)
        assert np.array_equal(recs[mine], r)
        base += tree.sources


@settings(max_examples=300, deadline=None)
@given(parts=mixes())
def test_a_mix_draws_its_elements_in_virtual_clock_order(parts):
    seq = fl.Seq.mix([(t.seq, sched) for t, (sched, _) in parts])
    ords, _ = items(fl.Order(seq))
    check_clock_order([(t.sources, t.n, params) for t, (_, params) in parts], ords)


@st.composite
def large_mixes(draw):
    """Mixes of up to four long parts: (seq, [(sources, length, trapezoid)])."""
    parts = []
    for i in range(draw(st.integers(2, 4))):
        n = draw(st.one_of(st.integers(0, 25_000), st.integers(8_000, 25_000)))
        seq = fl.Seq.source(Named(n, i))
        if draw(st.booleans()):
            seq = seq.shuffle(draw(U64))
        times = draw(st.integers(1, 2))
        schedule, params = draw(schedules())
        parts.append((seq.repeat(times), schedule, (1, n * times, params)))
    return (
        fl.Seq.mix([(seq, schedule) for seq, schedule, _ in parts]),
        [info for _, _, info in parts],
    )


@settings(max_examples=40, deadline=None)
@given(mix=large_mixes(), data=st.data())
def test_long_mixes_agree_under_scattered_lookups_and_seeks(mix, data):
    seq, parts = mix
    order = fl.Order(seq)
    n = len(order)
    ords, recs = items(order)
    check_clock_order(parts, ords)
    if not n:
        return
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1), label="rng"))
    # Scattered positions, some clustered, looked up unsorted in one call.
    centres = rng.integers(0, n, size=8)
    pos = np.concatenate(
        [
            rng.integers(0, n, size=100),
            np.clip(centres[:, None] + rng.integers(-50, 50, size=(8, 10)), 0, n - 1).ravel(),
        ]
    )
    o, r = order.lookup(pos)
    assert np.array_equal(o, ords[pos]) and np.array_equal(r, recs[pos])
    cur = order.cursor()
    for start in rng.integers(0, n, size=4).tolist():
        cur.reset(start)
        at = start
        for k in (1, 4097, 9000):
            o, r = cur.next_block(k)
            assert np.array_equal(o, ords[at : at + k]) and np.array_equal(r, recs[at : at + k])
            at += len(o)


def test_the_published_delayed_mix_starts_its_delayed_part_near_position_375():
    seq = fl.Seq.mix(
        [
            (fl.Seq.source(300).shuffle(1).cycle_to(750), fl.Schedule.uniform()),
            (fl.Seq.source(100).shuffle(2).cycle_to(250), fl.Schedule.delayed(0.5)),
        ]
    )
    order = fl.Order(seq)
    assert len(order) == 1000
    ords, _ = items(order)
    assert np.bincount(ords).tolist() == [750, 250]
    first = int(np.flatnonzero(ords == 1)[0])
    assert 374 <= first <= 377


def test_a_uniform_schedule_orders_like_delayed_zero():
    def order_with(schedule):
        seq = fl.Seq.mix(
            [fl.Seq.source(37).shuffle(1), (fl.Seq.source(23), schedule), fl.Seq.source(11)]
        )
        return items(fl.Order(seq))

    uniform = order_with(fl.Schedule.uniform())
    assert_same(order_with(fl.Schedule.delayed(0.0)), uniform)
    assert_same(order_with(fl.Schedule.trapezoid(0.0, 0.0, 1.0, 1.0)), uniform)


def test_a_shard_of_a_mix_over_many_ranks_walks_in_bounded_memory():
    import tracemalloc

    seq = fl.Seq.mix(
        [
            fl.Seq.source(10**9).shuffle(1),
            (fl.Seq.source(3 * 10**8).shuffle(2), fl.Schedule.ramp(0.1, 0.5)),
        ]
    )
    count, index, at = 1024, 3, 12_345
    order = fl.Order(seq.shard(index, count))
    order.cursor(0).next_block(16)  # the kernels (or numpy's path) loaded beforehand
    cursor = order.cursor(at)
    tracemalloc.start()
    try:
        ords, recs = cursor.next_block(4096)  # positions 1024 apart: a span of 4M
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    want = fl.Order(seq).lookup(np.arange(at, at + 4096) * count + index)
    np.testing.assert_array_equal(ords, want[0])
    np.testing.assert_array_equal(recs, want[1])
    assert peak < 40e6  # the span walked in pieces (it held all 4M positions: 134 MB)
