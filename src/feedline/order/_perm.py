"""Seeded permutations of ``[0, n)`` in O(1) memory: a six-round Feistel network.

The bijection acts on the ``k``-bit numbers, ``2**(k-1) < n <= 2**k``, split into a
left half of ``k // 2`` bits and a right half of the rest. Each round maps
``(l, r)`` to ``(r, (l ^ mix64(r + rk_i)) & mask_i)``; an output at or above ``n`` is
mapped again (cycle walking) until it lands in ``[0, n)``, which keeps a bijection
and takes fewer than two steps on average. No permutation array is ever built.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import _hash
from ._hash import MASK64, mix64


@dataclass(frozen=True)
class Shape:
    """The domain ``[0, n)`` and the widths and masks of the two Feistel halves."""

    n: int
    rb: int
    lmask: int
    rmask: int

    @classmethod
    def of(cls, n: int) -> Shape:
        bits = max(n - 1, 0).bit_length()
        lb = bits // 2
        rb = bits - lb
        return cls(n, rb, (1 << lb) - 1, (1 << rb) - 1)


def permute(shape: Shape, rk: tuple[int, ...], i: int) -> int:
    """Image of ``i`` (``0 <= i < n``) under the permutation selected by round keys ``rk``."""
    n = shape.n
    if n <= 1:
        return i
    rb, lm, rm = shape.rb, shape.lmask, shape.rmask
    x = i
    while True:
        l, r = x >> rb, x & rm
        l, r = r, (l ^ mix64(r + rk[0])) & lm
        l, r = r, (l ^ mix64(r + rk[1])) & rm
        l, r = r, (l ^ mix64(r + rk[2])) & lm
        l, r = r, (l ^ mix64(r + rk[3])) & rm
        l, r = r, (l ^ mix64(r + rk[4])) & lm
        l, r = r, (l ^ mix64(r + rk[5])) & rm
        x = (l << rb) | r
        if x < n:
            return x


def _rounds(shape: Shape, rk: np.ndarray, x: np.ndarray) -> np.ndarray:
    """One application of the six rounds to every element of ``x`` (a new array).

    ``rk`` is a ``(6,)`` array of keys shared by all elements, or ``(6, len(x))``.
    """
    rb = np.uint64(shape.rb)
    lm = np.uint64(shape.lmask)
    rm = np.uint64(shape.rmask)
    left = x >> rb
    right = x & rm
    f = np.empty_like(x)
    tmp = np.empty_like(x)
    for i in range(6):
        np.add(right, rk[i], out=f)
        _hash.mix64_array(f, tmp)
        np.bitwise_xor(left, f, out=f)
        np.bitwise_and(f, lm if i % 2 == 0 else rm, out=f)
        left, right, f = right, f, left
    np.left_shift(left, rb, out=left)
    np.bitwise_or(left, right, out=left)
    return left


def permute_array(shape: Shape, rk: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """Images of a ``uint64`` array of indices, vectorised, with cycle walking.

    ``rk`` is ``(6,)`` (one key for all) or ``(6, len(idx))`` (one per element).
    """
    if shape.n <= 1 or len(idx) == 0:
        return idx.astype(np.uint64, copy=True)
    n = np.uint64(shape.n)
    per_element = rk.ndim == 2
    x = _rounds(shape, rk, idx.astype(np.uint64, copy=False))
    out_of_range = np.flatnonzero(x >= n)
    while len(out_of_range):
        keys = rk[:, out_of_range] if per_element else rk
        y = _rounds(shape, keys, x[out_of_range])
        x[out_of_range] = y
        still = y >= n
        out_of_range = out_of_range[still]
    return x


def keys_array(rk: tuple[int, ...]) -> np.ndarray:
    """Round keys as a ``(6,)`` ``uint64`` array."""
    return np.array([k & MASK64 for k in rk], dtype=np.uint64)
