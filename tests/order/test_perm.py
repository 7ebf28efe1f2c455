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
