"""The Feistel permutation's numpy paths: the tabled rounds equal the plain ones."""

from __future__ import annotations

import numpy as np
import pytest

from feedline.order import _perm

SIZES = [2, 3, 5, 17, 100, 1000, 65_537, 4_000_000, 2**31 + 5, 2**32]


@pytest.mark.parametrize("n", SIZES)
def test_tabled_rounds_give_the_plain_rounds_permutation(n):
    rng = np.random.default_rng(n)
    shape = _perm.Shape.of(n)
    assert shape.rb <= _perm._TABLE_BITS
    rk = rng.integers(0, 2**63, 6, dtype=np.int64).astype(np.uint64) * np.uint64(3)
    idx = rng.integers(0, n, 40_000, dtype=np.int64).astype(np.uint64)
    tabled = _perm._permute_tabled(shape, _perm._tables(shape, rk), idx.copy(), False)
    plain = np.concatenate(
        [_perm._permute_chunk(shape, rk, idx[a : a + 16384]) for a in range(0, len(idx), 16384)]
    )
    np.testing.assert_array_equal(tabled, plain)
    keys = tuple(int(k) for k in rk)
    assert [_perm.permute(shape, keys, int(i)) for i in idx[:64]] == tabled[:64].tolist()


def test_tabled_rounds_in_place_write_over_their_input():
    shape = _perm.Shape.of(1000)
    rk = np.arange(1, 7, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    idx = np.arange(1000, dtype=np.uint64)
    out = _perm._permute_tabled(shape, _perm._tables(shape, rk), idx, True)
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


def test_threads_permuting_at_once_each_get_their_own_permutation():
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
    want = [_perm._permute_tabled(shape, tb, idx, False) for tb, idx in jobs]
    got: list = [[] for _ in jobs]
    start = threading.Barrier(len(jobs))

    def run(i: int) -> None:
        start.wait()
        for _ in range(30):
            got[i].append(_perm._permute_tabled(shape, jobs[i][0], jobs[i][1], False))

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i, w in enumerate(want):
        assert len(got[i]) == 30
        for g in got[i]:
            np.testing.assert_array_equal(g, w)
