"""The Feistel permutation's paths: the tabled rounds (C's and numpy's) equal the plain
ones and the scalar reference."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from feedline._base import ordering
from feedline.order import _perm

SIZES = [2, 3, 5, 17, 100, 1000, 65_537, 4_000_000, 2**31 + 5, 2**32]

needs_c = pytest.mark.skipif(not ordering.available(), reason="the C rounds are not built")


@pytest.fixture(params=["c", "numpy"])
def native(request) -> bool:
    """The tabled rounds in C (``ordering``) or by numpy."""
    if request.param == "c" and not ordering.available():
        pytest.skip("the C rounds are not built")
    return request.param == "c"


@pytest.mark.parametrize("n", SIZES)
def test_tabled_rounds_give_the_plain_rounds_permutation(n, native):
    rng = np.random.default_rng(n)
    shape = _perm.Shape.of(n)
    assert shape.rb <= _perm._TABLE_BITS
    rk = rng.integers(0, 2**63, 6, dtype=np.int64).astype(np.uint64) * np.uint64(3)
    idx = rng.integers(0, n, 40_000, dtype=np.int64).astype(np.uint64)
    tabled = _perm._permute_tabled(shape, _perm._tables(shape, rk), idx.copy(), False, native)
    plain = np.concatenate(
        [_perm._permute_chunk(shape, rk, idx[a : a + 16384]) for a in range(0, len(idx), 16384)]
    )
    np.testing.assert_array_equal(tabled, plain)
    keys = tuple(int(k) for k in rk)
    assert [_perm.permute(shape, keys, int(i)) for i in idx[:64]] == tabled[:64].tolist()


def test_tabled_rounds_in_place_write_over_their_input(native):
    shape = _perm.Shape.of(1000)
    rk = np.arange(1, 7, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    idx = np.arange(1000, dtype=np.uint64)
    out = _perm._permute_tabled(shape, _perm._tables(shape, rk), idx, True, native)
    assert np.shares_memory(out, idx)
    assert sorted(out.tolist()) == list(range(1000))


def test_a_whole_domain_is_a_permutation_on_the_numpy_path(numpy_path):
    shape = _perm.Shape.of(70_001)
    rk = np.arange(6, dtype=np.uint64) + np.uint64(12345)
    out = _perm.permute_array(shape, rk, np.arange(70_001, dtype=np.uint64))
    assert np.array_equal(np.sort(out), np.arange(70_001, dtype=np.uint64))


def test_domains_past_the_tables_take_the_plain_rounds(numpy_path):
    n = 2**33 + 1
    shape = _perm.Shape.of(n)
    assert shape.rb > _perm._TABLE_BITS
    rk = np.arange(6, dtype=np.uint64) + np.uint64(7)
    idx = np.arange(10, dtype=np.uint64) * np.uint64(2**30)
    keys = tuple(int(k) for k in rk)
    got = _perm.permute_array(shape, rk, idx)
    assert got.tolist() == [_perm.permute(shape, keys, int(i)) for i in idx]


def test_threads_permuting_at_once_each_get_their_own_permutation(native):
    """The tabled rounds work in per-thread scratch arrays: threads permuting blocks of
    different shuffles at the same time (the look-ahead threads of several loaders) each
    get exactly what one thread alone gets, with arrays longer than a chunk and shorter."""
    import threading

    shape = _perm.Shape.of(4_000_000)
    jobs = []
    for t in range(4):
        rk = (np.arange(6, dtype=np.uint64) + np.uint64(100 * t + 1)) * np.uint64(0x9E37)
        idx = np.arange(t * 7, t * 7 + (3 * _perm._TABLED_CHUNK + 11 if t % 2 else 999))
        jobs.append((_perm._tables(shape, rk), idx.astype(np.uint64)))
    want = [_perm._permute_tabled(shape, tb, idx, False, False) for tb, idx in jobs]
    got: list = [[] for _ in jobs]
    start = threading.Barrier(len(jobs))

    def run(i: int) -> None:
        start.wait()
        for _ in range(30):
            got[i].append(_perm._permute_tabled(shape, jobs[i][0], jobs[i][1], False, native))

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i, w in enumerate(want):
        assert len(got[i]) == 30
        for g in got[i]:
            np.testing.assert_array_equal(g, w)


@needs_c
@settings(max_examples=200, deadline=None)
@given(
    n=st.integers(2, 2**32),
    keys=st.lists(st.integers(0, 2**64 - 1), min_size=6, max_size=6),
    m=st.integers(0, 70),
    in_place=st.booleans(),
    data=st.data(),
)
def test_c_rounds_equal_numpys_and_the_scalar_reference(n, keys, m, in_place, data):
    """Any domain, keys and length (past and short of the four positions C takes side by
    side), in place or not: C's positions are numpy's, and the scalar ``permute``'s."""
    shape = _perm.Shape.of(n)
    rk = np.array(keys, dtype=np.uint64)
    tables = _perm._tables(shape, rk)
    idx = np.array(data.draw(st.lists(st.integers(0, n - 1), min_size=m, max_size=m)), np.uint64)
    want = _perm._permute_tabled(shape, tables, idx.copy(), False, False)
    given_ = idx.copy()
    got = _perm._permute_tabled(shape, tables, given_, in_place, True)
    np.testing.assert_array_equal(got, want)
    assert np.shares_memory(got, given_) == (in_place and m > 0)
    assert got.tolist() == [_perm.permute(shape, tuple(keys), int(i)) for i in idx]


@needs_c
def test_c_rounds_refuse_positions_outside_the_domain_writing_nothing():
    """A position at or above n, or negative, is refused before anything is written (the
    caller then takes numpy's way, which gives what it always gave)."""
    shape = _perm.Shape.of(1000)
    rk = np.arange(1, 7, dtype=np.uint64)
    tables = _perm._tables(shape, rk)
    lb = shape.lmask.bit_length()
    for bad in (1000, 1023, 1024, 2**40, -1):
        x = np.arange(50, dtype=np.int64)
        x[37] = bad
        out = np.full(50, -7, np.int64)
        assert not ordering.permute_tabled(tables.small, shape.rb, lb, 1000, x, out)
        assert (out == -7).all()
    x = np.arange(1000, dtype=np.uint64)
    x[5] = 1000
    want = _perm._permute_tabled(shape, tables, x.copy(), False, False)
    np.testing.assert_array_equal(_perm._permute_tabled(shape, tables, x.copy(), True, True), want)


def _endless_tables() -> tuple[np.ndarray, ...]:
    """Six tables of 2**16 random entries: a domain of 2**32 whose cycle through 0 is
    longer than a walk's 2**20 rounds (tables ``_perm._tables`` never makes for n=1)."""
    rng = np.random.default_rng(5)
    return tuple(rng.integers(0, 2**16, 2**16).astype(np.uint16) for _ in range(6))


@needs_c
def test_c_rounds_raise_where_a_walk_does_not_end_instead_of_refusing_after_writing():
    """A refusal (False) writes nothing: the caller then permutes the same positions with
    numpy. A walk cut at 2**20 rounds comes after the output was written (over the
    positions, in place), so it raises instead."""
    tables = _endless_tables()
    for in_place in (True, False):
        x = np.zeros(3, np.int64)
        out = x if in_place else np.empty(3, np.int64)
        with pytest.raises(RuntimeError, match="2\\*\\*20 rounds"):
            ordering.permute_tabled(tables, 16, 16, 1, x, out)


@needs_c
def test_c_rounds_refuse_an_output_overlapping_the_positions():
    """Only the positions' own memory may be the output (each position read before its
    output is written); an output one row apart would be read after it was written."""
    shape = _perm.Shape.of(1000)
    tables = _perm._tables(shape, np.arange(1, 7, dtype=np.uint64))
    rb, lb = shape.rb, shape.lmask.bit_length()
    buf = np.arange(60, dtype=np.int64)
    want = _perm._permute_tabled(shape, tables, buf[:50].copy(), False, False).view(np.int64)
    for out in (buf[1:51], buf[10:60]):
        with pytest.raises(ValueError, match="an output overlaps an input"):
            ordering.permute_tabled(tables.small, rb, lb, 1000, buf[:50], out)
    np.testing.assert_array_equal(buf, np.arange(60))  # nothing written
    assert ordering.permute_tabled(tables.small, rb, lb, 1000, buf[:50], buf[:50][:])
    np.testing.assert_array_equal(buf[:50], want)
    np.testing.assert_array_equal(buf[50:], np.arange(50, 60))


@needs_c
def test_c_rounds_check_their_arguments():
    shape = _perm.Shape.of(1000)
    tables = _perm._tables(shape, np.arange(1, 7, dtype=np.uint64))
    rb, lb = shape.rb, shape.lmask.bit_length()
    x, out = np.arange(10, dtype=np.int64), np.empty(10, np.int64)
    f = ordering._ordering.permute_tabled
    with pytest.raises(ValueError, match="6 round tables were expected, found 5"):
        f(tables.small[:5], rb, lb, 1000, x, out)
    with pytest.raises(TypeError, match="must be uint16, found format"):
        f(tuple(tables), rb, lb, 1000, x, out)
    with pytest.raises(ValueError, match="round table of 64 entries was expected, found 32"):
        f(tables.small, rb + 1, lb, 1000, x, out)
    with pytest.raises(ValueError, match="n <= 2\\*\\*\\(rb\\+lb\\)"):
        f(tables.small, rb, lb, 1025, x, out)
    with pytest.raises(ValueError, match="found rb=17"):
        f(tables.small, 17, lb, 1000, x, out)
    with pytest.raises(ValueError, match="the output: 10 items were expected, found 9"):
        f(tables.small, rb, lb, 1000, x, out[:9])
    with pytest.raises(
        TypeError, match="the positions: an array of int64 was expected, found format i"
    ):
        f(tables.small, rb, lb, 1000, x.astype(np.int32), out)
    ro = np.empty(10, np.int64)
    ro.flags.writeable = False
    with pytest.raises((BufferError, ValueError, TypeError)):
        f(tables.small, rb, lb, 1000, x, ro)
    with pytest.raises(TypeError):
        f(list(tables.small), rb, lb, 1000, x, out)


def test_the_c_rounds_are_off_with_feedline_native_0(monkeypatch):
    monkeypatch.setenv("FEEDLINE_NATIVE", "0")
    assert not ordering.available()
