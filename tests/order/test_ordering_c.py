"""A mix's walk and location, and a concat's location, in C (``_base.ordering``,
``_ordering.c``): the numpy path's elements, keys' order and records, bit for bit, for
any schedules, lengths, pieces and states; arguments checked; nothing written on a
refusal."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import feedline as fl
from feedline._base import kernels, ordering
from feedline.order import _mixplan, _nodes, _perm
from feedline.order._mixplan import MixPlan

from .test_concat_lookup import LENGTHS, _concat
from .test_mix_walk import SCHEDULES as MIX_SCHEDULES

pytestmark = pytest.mark.skipif(not ordering.available(), reason="the C order loops are not built")

SCHEDULES = [*MIX_SCHEDULES, fl.Schedule.ramp(0.2, 0.25)]


def _walks(plan: MixPlan, start: int, sizes: list[int], native: bool):
    """(part, j) of the walk from ``start`` in pieces of ``sizes``, and the states met: by
    C, or on the numpy path (neither C nor numba's kernels)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("FEEDLINE_NATIVE", "1" if native else "0")
        mp.setitem(kernels._state, "k", None)
        state = plan.seek(start)
        ps, js, states = [np.zeros(0, np.int64)], [np.zeros(0, np.int64)], []
        for size in sizes:
            p, j = plan.walk(state, size)
            ps.append(p.copy())
            js.append(j.copy())
            states.append((state.pos, state.taken.tolist()))
    return np.concatenate(ps), np.concatenate(js), states


@settings(max_examples=150, deadline=None)
@given(
    parts=st.lists(
        st.tuples(st.integers(1, 4_000), st.integers(0, len(SCHEDULES) - 1)),
        min_size=2,
        max_size=_mixplan._C_HEAP_PARTS,
    ),
    data=st.data(),
)
def test_c_walks_the_numpy_paths_elements(parts, data):
    """From any position, in pieces short of and past a heap walk's limit (the numpy
    path's threshold and sort, then C's heap): the same (part, j) sequence and states."""
    plan = MixPlan([n for n, _ in parts], [SCHEDULES[s] for _, s in parts])
    start = data.draw(st.integers(0, plan.total))
    sizes = data.draw(st.lists(st.sampled_from([1, 3, 700, 2_047, 2_048, 9_000]), max_size=5))
    want = _walks(plan, start, sizes, False)
    got = _walks(plan, start, sizes, True)
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])
    assert got[2] == want[2]


@settings(max_examples=12, deadline=None)
@given(
    parts=st.lists(
        st.tuples(st.integers(1, 400), st.integers(0, len(SCHEDULES) - 1)),
        min_size=_mixplan._C_HEAP_PARTS + 1,
        max_size=300,
    ),
    data=st.data(),
)
def test_c_walks_more_parts_than_its_heap_serves_while_the_kernels_load(parts, data):
    """Past ``_C_HEAP_PARTS``, a long walk takes the kernels' merge once they are loaded,
    and C's heap while they load or where they do not (here: never loaded): numpy's
    path's elements and states."""
    plan = MixPlan([n for n, _ in parts], [SCHEDULES[s] for _, s in parts])
    start = data.draw(st.integers(0, plan.total))
    sizes = data.draw(st.lists(st.sampled_from([1, 2_047, 2_048, 9_000]), max_size=4))
    want = _walks(plan, start, sizes, False)
    got = _walks(plan, start, sizes, True)
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])
    assert got[2] == want[2]


def test_c_walks_a_whole_mix_in_one_piece_as_numpy_and_the_keys_say():
    """Every element once, in the order of the keys (ties by part): the keys of the walk's
    sequence never go down."""
    plan = MixPlan(
        [30_001, 17_000, 5, 900], [SCHEDULES[0], SCHEDULES[1], SCHEDULES[4], SCHEDULES[6]]
    )
    p, j, _ = _walks(plan, 0, [plan.total], True)
    want = _walks(plan, 0, [plan.total], False)
    np.testing.assert_array_equal(p, want[0])
    np.testing.assert_array_equal(j, want[1])
    keys = plan.keys(p, j)
    assert (np.diff(keys) >= 0).all()
    assert np.array_equal(np.bincount(p, minlength=4), plan.n)


def test_c_walk_writes_into_the_arrays_given(monkeypatch):
    monkeypatch.setenv("FEEDLINE_NATIVE", "1")
    plan = MixPlan([5_000, 7_000], [SCHEDULES[0], SCHEDULES[2]])
    out = (np.full(10_000, -1, np.int64), np.full(10_000, -1, np.int64))
    state = plan.seek(10)
    p, j = plan.walk(state, 4_000, out)
    assert np.shares_memory(p, out[0]) and np.shares_memory(j, out[1])
    again = plan.seek(10)
    p2, j2 = plan.walk(again, 4_000)
    np.testing.assert_array_equal(p, p2)
    np.testing.assert_array_equal(j, j2)
    short = (np.empty(10, np.int64), np.empty(10, np.int64))  # too short: new arrays
    p3, _ = plan.walk(plan.seek(10), 4_000, short)
    assert not np.shares_memory(p3, short[0]) and np.array_equal(p3, p)


def _tables(shapes, seeds):
    return tuple(
        _perm._tables(sh, _perm.keys_array((s, 2, 3, 4, 5, 6))).small if sh is not None else None
        for sh, s in zip(shapes, seeds)
    )


@settings(max_examples=100, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 2**20), min_size=1, max_size=8),
    shuffled=st.lists(st.booleans(), min_size=8, max_size=8),
    m=st.integers(0, 300),
    seed=st.integers(0, 2**32 - 1),
)
def test_c_locates_as_each_parts_shuffle_and_offset(lengths, shuffled, m, seed):
    k = len(lengths)
    rng = np.random.default_rng(seed)
    shapes = [_perm.Shape.of(n) if shuffled[q] else None for q, n in enumerate(lengths)]
    seeds = rng.integers(0, 2**31, k).tolist()
    tables = _tables(shapes, seeds)
    n = np.array(lengths, np.int64)
    offset = rng.integers(0, 2**40, k).astype(np.uint64)
    ordinal = rng.integers(0, 1000, k).astype(np.int64)
    part = rng.integers(0, k, m).astype(np.int64)
    j = (rng.random(m) * n[part]).astype(np.int64)
    ords, recs = np.empty(m, np.int64), np.empty(m, np.uint64)
    assert ordering.locate(part, j, tables, n, offset, ordinal, ords, recs)
    for e in range(m):
        q = int(part[e])
        rec = int(j[e])
        if shapes[q] is not None:
            rec = _perm.permute(shapes[q], (seeds[q], 2, 3, 4, 5, 6), rec)
        assert ords[e] == ordinal[q] and int(recs[e]) == rec + int(offset[q])


def test_c_locate_refuses_what_is_out_of_range_writing_nothing():
    shapes = [_perm.Shape.of(1000), None]
    tables = _tables(shapes, [1, 2])
    n, off, ordinal = np.array([1000, 50], np.int64), np.zeros(2, np.uint64), np.arange(2)
    for part, j in (([0, 1], [999, 50]), ([0, 2], [1, 1]), ([0, -1], [1, 1]), ([0, 0], [1, -3])):
        ords, recs = np.full(2, -7, np.int64), np.full(2, 7, np.uint64)
        p, jj = np.array(part, np.int64), np.array(j, np.int64)
        assert not ordering.locate(p, jj, tables, n, off, ordinal, ords, recs)
        assert (ords == -7).all() and (recs == 7).all()


def test_c_locate_raises_where_a_walk_does_not_end_instead_of_refusing_after_writing():
    # a part's tables (not made by _perm._tables) whose walk from 0 outlasts 2**20 rounds:
    # the second part's element was already written when the walk is cut
    rng = np.random.default_rng(5)
    endless = tuple(rng.integers(0, 2**16, 2**16).astype(np.uint16) for _ in range(6))
    tables = (None, endless)
    n, off, ordinal = np.array([10, 1], np.int64), np.zeros(2, np.uint64), np.arange(2)
    p, j = np.array([0, 1], np.int64), np.array([3, 0], np.int64)
    ords, recs = np.full(2, -7, np.int64), np.full(2, 7, np.uint64)
    with pytest.raises(RuntimeError, match="2\\*\\*20 rounds"):
        ordering.locate(p, j, tables, n, off, ordinal, ords, recs)


def test_c_locates_refuse_outputs_over_their_inputs_writing_nothing():
    """An output partly over an input would be read back written (it gave wrong records,
    then an error blaming another thread): refused before anything is written. The one
    in-place use, a concat's records written over its positions, stays."""
    c = _concat([10, 20, 30, 40], [0, 0, 0, 0])
    buf = np.array([5, 15, 25, 35, 0], np.uint64)
    ords = np.full(4, -7, np.int64)
    with pytest.raises(ValueError, match="an output overlaps an input"):
        ordering.concat_locate(buf[:4], c._which, c._ordinal, c._shift, ords, buf[1:5])
    assert buf.tolist() == [5, 15, 25, 35, 0] and (ords == -7).all()
    pos = buf[:4].copy()
    want = ords.copy(), pos.copy()
    assert ordering.concat_locate(want[1], c._which, c._ordinal, c._shift, want[0], want[1])
    assert ordering.concat_locate(pos, c._which, c._ordinal, c._shift, ords, pos)  # in place
    assert pos.tolist() == want[1].tolist() and ords.tolist() == want[0].tolist()
    shapes = [_perm.Shape.of(1000), None]
    tables = _tables(shapes, [1, 2])
    n, off, ordinal = np.array([1000, 50], np.int64), np.zeros(2, np.uint64), np.arange(2)
    both = np.array([0, 1, 3, 4, 0], np.int64)  # part, then j from the same memory
    ords = np.full(2, -7, np.int64)
    recs = both[1:3].view(np.uint64)  # over part's last element and j's first
    with pytest.raises(ValueError, match="an output overlaps an input"):
        ordering.locate(both[:2], both[2:4], tables, n, off, ordinal, ords, recs)
    assert both.tolist() == [0, 1, 3, 4, 0] and (ords == -7).all()


def test_c_loops_check_their_arguments():
    f = ordering._ordering
    sh = _perm.Shape.of(1000)
    t = _perm._tables(sh, _perm.keys_array((1, 2, 3, 4, 5, 6))).small
    n, off, ordinal = np.array([1000], np.int64), np.zeros(1, np.uint64), np.zeros(1, np.int64)
    p, j = np.zeros(3, np.int64), np.arange(3, dtype=np.int64)
    o, r = np.empty(3, np.int64), np.empty(3, np.uint64)
    with pytest.raises(ValueError, match="a tuple of 1 parts' round tables was expected"):
        f.locate(p, j, (t, None), n, off, ordinal, o, r)
    with pytest.raises(ValueError, match="part 0: 6 round tables or None were expected"):
        f.locate(p, j, (t[:5],), n, off, ordinal, o, r)
    with pytest.raises(ValueError, match="table 3 has 32"):
        f.locate(p, j, ((t[0], t[0][:4], *t[2:]),), n, off, ordinal, o, r)
    with pytest.raises(ValueError, match="1000000 elements beyond its tables' 2\\*\\*10"):
        f.locate(p, j, (t,), np.array([1_000_000], np.int64), off, ordinal, o, r)
    with pytest.raises(ValueError, match="recs: 3 items were expected, found 2"):
        f.locate(p, j, (t,), n, off, ordinal, o, r[:2])
    plan = MixPlan([10, 20], [SCHEDULES[0], SCHEDULES[1]])
    phi, inv, uni, T = plan._kargs
    out = np.empty(5, np.int64), np.empty(5, np.int64)
    with pytest.raises(ValueError, match="0 <= taken <= n was expected, found taken=11"):
        f.walk(np.array([11, 0]), plan.n, phi, inv, uni, T, 5, *out)
    with pytest.raises(ValueError, match="outputs of 6 elements were expected"):
        f.walk(np.zeros(2, np.int64), plan.n, phi, inv, uni, T, 6, *out)
    with pytest.raises(ValueError, match="T of shape \\(2, segments, 8\\) was expected"):
        f.walk(np.zeros(2, np.int64), plan.n, phi, inv, uni, T[:, :, :4].copy(), 5, *out)
    with pytest.raises(ValueError, match="phi: 2 items were expected, found 1"):
        f.walk(np.zeros(2, np.int64), plan.n, phi[:1], inv, uni, T, 5, *out)
    with pytest.raises(ValueError, match="count must be at least 0"):
        f.walk(np.zeros(2, np.int64), plan.n, phi, inv, uni, T, -1, *out)
    ro = np.zeros(2, np.int64)
    ro.flags.writeable = False
    with pytest.raises((BufferError, ValueError, TypeError)):
        f.walk(ro, plan.n, phi, inv, uni, T, 5, *out)


@settings(max_examples=150, deadline=None)
@given(lengths=LENGTHS, seed=st.integers(0, 2**32 - 1))
def test_c_locates_a_concat_of_sources_as_its_children(lengths, seed):
    rng = np.random.default_rng(seed)
    c = _concat([*lengths, 5], rng.integers(0, 1000, len(lengths) + 1).tolist())
    assert c._which is not None
    pos = np.concatenate((rng.integers(0, c.n, 300), c._starts.astype(np.int64), [c.n - 1])).astype(
        np.uint64
    )
    which = np.searchsorted(c._starts, pos, side="right") - 1
    ords, recs = np.empty(len(pos), np.int64), pos.copy()
    assert ordering.concat_locate(recs, c._which, c._ordinal, c._shift, ords, recs)
    assert np.array_equal(ords, 3 * which + 1)
    skips = np.array([leaf.offset for leaf in c.children], np.uint64)
    assert np.array_equal(recs, pos - c._starts[which] + skips[which])


def test_c_concat_locate_refuses_what_is_out_of_range_writing_nothing():
    c = _concat([10, 20, 30, 40], [0, 0, 0, 0])
    bits, table, ends, passes = c._which
    for pos, tab in (([5, 100], table), ([5, 2**63], table), ([5, 50], np.full_like(table, 9))):
        p = np.array(pos, np.uint64)
        ords, recs = np.full(2, -7, np.int64), np.full(2, 7, np.uint64)
        which = (bits, tab, ends, passes)
        assert not ordering.concat_locate(p, which, c._ordinal, c._shift, ords, recs)
        assert (ords == -7).all() and (recs == 7).all()
    p = np.array([5], np.uint64)
    f = ordering._ordering.concat_locate
    o, r = np.empty(1, np.int64), np.empty(1, np.uint64)
    with pytest.raises(ValueError, match="0 <= shift < 64 and passes >= 0"):
        f(p, table, ends, 64, passes, c._ordinal, c._shift, o, r)
    with pytest.raises(ValueError, match="ordinal: 4 items were expected, found 3"):
        f(p, table, ends, int(bits), passes, c._ordinal[:3], c._shift, o, r)
    with pytest.raises(ValueError, match="recs: 1 items were expected, found 0"):
        f(p, table, ends, int(bits), passes, c._ordinal, c._shift, o, r[:0])


def test_a_mixs_tables_cache_cleared_by_another_thread_meanwhile():
    """Another thread clears a mix's cache of round tables (past 64 contexts) between
    this thread's test for a context and its read: the lookup is one ``get``, so the
    tables are made again, not a KeyError."""

    class ClearedMeanwhile(dict):
        def __contains__(self, key):
            found = super().__contains__(key)
            self.clear()  # the other thread's clear, just after the test
            return found

        def __getitem__(self, key):
            self.clear()
            return super().__getitem__(key)

    order = fl.Order(fl.Seq.mix([fl.Seq.source(30).shuffle(7), fl.Seq.source(20).shuffle(8)]))
    want = order.lookup(np.arange(50))
    mix = order.root
    assert isinstance(mix, _nodes.Mix)
    mix._ctx_tables = ClearedMeanwhile(mix._ctx_tables)
    for _ in range(3):
        got = order.lookup(np.arange(50))
        assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])


def test_round_tables_are_whole_when_another_thread_can_find_them(monkeypatch):
    """A shuffle's tables enter the process-wide cache with their uint16 copy made: a
    thread that found them before (between the two) failed on ``.small``."""
    seen = []

    class Watched(dict):
        def __setitem__(self, key, value):
            seen.append(hasattr(value, "small"))
            super().__setitem__(key, value)

    monkeypatch.setattr(_perm, "_table_cache", Watched())
    _perm._tables(_perm.Shape.of(5000), _perm.keys_array((9, 8, 7, 6, 5, 4)))
    assert seen == [True]


def test_a_few_positions_in_a_new_context_make_no_tables():
    """A lookup of a few positions in each of many contexts does not make every part's
    tables each time (7 ms for 64 parts of 10,000,000 rows): the numpy path locates
    them; a block makes them, and later lookups in that context use them."""
    order = fl.Order(fl.Seq.mix([fl.Seq.source(100_000).shuffle(i) for i in range(8)]), seed=1)
    mix = order.root
    assert isinstance(mix, _nodes.Mix)
    few = order.with_epoch(3).lookup([0, 12345])
    assert mix._ctx_tables == {}
    block = order.with_epoch(3).cursor(0).next_block(4096)
    assert len(mix._ctx_tables) == 1
    again = order.with_epoch(3).lookup([0, 12345])
    assert np.array_equal(few[0], again[0]) and np.array_equal(few[1], again[1])
    assert np.array_equal(few[0][:1], block[0][:1]) and np.array_equal(few[1][:1], block[1][:1])


def test_c_loops_refuse_arrays_of_other_kinds():
    """Each array's dtype is checked, not only its item size: 8-byte floats where int64
    counts are expected (a mix of 120 elements walked to 130, j past its part), uint64
    records as int64, int16 tables as uint16."""
    f = ordering._ordering
    plan = MixPlan([50, 70], [SCHEDULES[0], SCHEDULES[0]])
    p, j = np.empty(130, np.int64), np.empty(130, np.int64)
    with pytest.raises(TypeError, match="n: an array of int64 was expected, found format d"):
        f.walk(np.zeros(2, np.int64), plan.n.astype(np.float64), *plan._kargs, 130, p, j)
    with pytest.raises(TypeError, match="uniform: an array of bool was expected"):
        phi, inv, uni, T = plan._kargs
        f.walk(np.zeros(2, np.int64), plan.n, phi, inv, uni.astype(np.uint8), T, 130, p, j)
    sh = _perm.Shape.of(1000)
    t = _perm._tables(sh, _perm.keys_array((1, 2, 3, 4, 5, 6))).small
    x = np.arange(5, dtype=np.int64)
    with pytest.raises(
        TypeError, match="the output: an array of int64 was expected, found format d"
    ):
        f.permute_tabled(t, sh.rb, sh.lmask.bit_length(), 1000, x, np.empty(5))
    with pytest.raises(ValueError, match=r"uint16 round tables .* table 0 has"):
        n, off, ordinal = np.array([1000]), np.zeros(1, np.uint64), np.zeros(1, np.int64)
        bad = tuple(a.view(np.int16) for a in t)
        f.locate(x, x, (bad,), n, off, ordinal, np.empty(5, np.int64), np.empty(5, np.uint64))
    with pytest.raises(TypeError, match="recs: an array of uint64 was expected"):
        f.locate(x * 0, x, (t,), n, off, ordinal, np.empty(5, np.int64), np.empty(5, np.int64))
