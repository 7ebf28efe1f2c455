"""Seeded permutations of ``[0, n)`` in O(1) memory: a six-round Feistel network.

The bijection acts on the ``k``-bit numbers, ``2**(k-1) < n <= 2**k``, split into a
left half of ``k // 2`` bits and a right half of the rest. Each round maps
``(l, r)`` to ``(r, (l ^ mix64(r + rk_i)) & mask_i)``; an output at or above ``n`` is
mapped again (cycle walking) until it lands in ``[0, n)``, which keeps a bijection
and takes fewer than two steps on average. No permutation array is ever built.
"""

from __future__ import annotations

import threading

import numpy as np

from .._base import hashing, kernels, ordering
from .._base.hashing import MASK64, mix64


class Shape:
    """The domain ``[0, n)`` and the widths and masks of the two Feistel halves."""

    __slots__ = ("lmask", "n", "rb", "rmask")

    def __init__(self, n: int, rb: int, lmask: int, rmask: int) -> None:
        self.n, self.rb, self.lmask, self.rmask = n, rb, lmask, rmask

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Shape) and (self.n, self.rb, self.lmask, self.rmask) == (
            other.n,
            other.rb,
            other.lmask,
            other.rmask,
        )

    def __hash__(self) -> int:
        return hash((self.n, self.rb))

    def __repr__(self) -> str:
        return f"Shape(n={self.n}, rb={self.rb})"

    def widths(self) -> tuple[np.uint64, np.uint64, np.uint64]:
        return np.uint64(self.rb), np.uint64(self.lmask), np.uint64(self.rmask)

    @classmethod
    def of(cls, n: int) -> Shape:
        bits = (n - 1).bit_length() if n > 0 else 0
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
        left, right = x >> rb, x & rm
        left, right = right, (left ^ mix64(right + rk[0])) & lm
        left, right = right, (left ^ mix64(right + rk[1])) & rm
        left, right = right, (left ^ mix64(right + rk[2])) & lm
        left, right = right, (left ^ mix64(right + rk[3])) & rm
        left, right = right, (left ^ mix64(right + rk[4])) & lm
        left, right = right, (left ^ mix64(right + rk[5])) & rm
        x = (left << rb) | right
        if x < n:
            return x


def _rounds(shape, rk: np.ndarray, x: np.ndarray) -> np.ndarray:
    """One application of the six rounds to every element of ``x`` (a new array).

    ``rk`` is a ``(6,)`` array of keys shared by all elements, or ``(6, len(x))``.
    ``shape`` is a ``Shape``, or a ``Shapes`` with one domain per element.
    """
    rb, lm, rm = shape.widths()
    left = x >> rb
    right = x & rm
    f = np.empty_like(x)
    tmp = np.empty_like(x)
    for i in range(6):
        np.add(right, rk[i], out=f)
        hashing.mix64_array(f, tmp)
        np.bitwise_xor(left, f, out=f)
        np.bitwise_and(f, lm if i % 2 == 0 else rm, out=f)
        left, right, f = right, f, left
    np.left_shift(left, rb, out=left)
    np.bitwise_or(left, right, out=left)
    return left


# Arrays are permuted in chunks of this many elements: the five working arrays of a
# chunk then stay in the CPU's L2 cache (measured: 16k runs ~1.5x faster than 64k).
_CHUNK = 1 << 14


def permute_array(
    shape: Shape, rk: np.ndarray, idx: np.ndarray, in_place: bool = False
) -> np.ndarray:
    """Images of a ``uint64`` array of indices, vectorised, with cycle walking.

    ``rk`` is ``(6,)`` (one key for all) or ``(6, len(idx))`` (one per element).
    With ``in_place`` the result may be written over ``idx`` (saving a fresh array's
    page faults, which cost a third of the compiled kernel's time on 64k blocks).
    """
    idx = idx.astype(np.uint64, copy=False)
    if shape.n <= 1 or len(idx) == 0:
        return idx if in_place else idx.copy()
    tabled = rk.ndim == 1 and shape.rb <= _TABLE_BITS
    k = kernels.get(background=not tabled)
    if k is None and tabled:
        return _permute_tabled(shape, _tables(shape, rk), idx, in_place)
    if k is not None:
        out = idx if in_place else np.empty_like(idx)
        rb, lm, rm = shape.widths()
        if rk.ndim == 2:
            k.permute_per_element(np.uint64(shape.n), rb, lm, rm, rk, idx, out)
        else:
            k.permute_block(np.uint64(shape.n), rb, lm, rm, rk, idx, out)
        return out
    if len(idx) <= _CHUNK:
        return _permute_chunk(shape, rk, idx)
    out = np.empty_like(idx)
    per_element = rk.ndim == 2
    for a in range(0, len(idx), _CHUNK):
        keys = rk[:, a : a + _CHUNK] if per_element else rk
        out[a : a + _CHUNK] = _permute_chunk(shape, keys, idx[a : a + _CHUNK])
    return out


# A round's function of the right half, ``mix64(r + key)`` masked, depends on ``r``
# alone, which has at most ``rb`` bits: with ``rb <= _TABLE_BITS`` (up to 2**32
# records) the six functions are tabled once per shuffle and pass, and a round is one
# gather from a table in cache and one xor instead of eleven passes over the array
# (measured on 64k positions of a 4,000,000-record shuffle: 3x the plain numpy rounds).
# This is the path while the compiled kernels are not loaded: a loader's plain shuffle
# never waits for them, nor loads them (see ``_base.kernels``).
_TABLE_BITS = 16


class _Tables(tuple):
    """The six round tables as int64 (numpy's takes index with them), and ``small``: the
    same as uint16 (C's rounds: a 4,000,000-row shuffle's six fit in 24 kB of L1)."""

    small: tuple[np.ndarray, ...]


_table_cache: dict[tuple[int, bytes], _Tables] = {}


def _tables(shape: Shape, rk: np.ndarray) -> _Tables:
    """Round ``i``'s function over every value of its right half, as int64 (and uint16:
    ``_Tables.small``)."""
    key = (shape.n, rk.tobytes())
    tables = _table_cache.get(key)
    if tables is None:
        lb = shape.lmask.bit_length()
        made = []
        for i in range(6):
            f = np.arange(1 << (shape.rb if i % 2 == 0 else lb), dtype=np.uint64)
            f += rk[i]
            hashing.mix64_array(f)
            f &= np.uint64(shape.lmask if i % 2 == 0 else shape.rmask)
            made.append(f.view(np.int64))
        if len(_table_cache) >= 16:  # a few shuffles' passes: a reset each epoch adds one
            _table_cache.clear()
        tables = _Tables(made)
        tables.small = tuple(t.astype(np.uint16) for t in made)  # values of <= 16 bits
        _table_cache[key] = tables  # whole before another thread can find it
    return tables


def _rounds_tabled(
    shape: Shape,
    tables: tuple[np.ndarray, ...],
    x: np.ndarray,
    out: np.ndarray | None = None,
    scratch: tuple[np.ndarray, ...] | None = None,
) -> np.ndarray:
    """``_rounds`` of an int64 array through the round tables, into ``out`` (which may be
    ``x``; a new array without it), working in ``scratch``'s three arrays (of at least
    ``len(x)``) when given."""
    m = len(x)
    if scratch is None:
        scratch = (np.empty(m, np.int64), np.empty(m, np.int64), np.empty(m, np.int64))
    left, right, f = (s[:m] for s in scratch)
    np.right_shift(x, shape.rb, out=left)
    np.bitwise_and(x, shape.rmask, out=right)
    for t in tables:
        np.take(t, right, out=f, mode="clip")  # in range: "clip" spares a buffered copy
        np.bitwise_xor(left, f, out=f)
        left, right, f = right, f, left
    if out is None:
        out = np.empty(m, np.int64)
    np.left_shift(left, shape.rb, out=out)
    np.bitwise_or(out, right, out=out)
    return out


def _permute_tabled(
    shape: Shape, tables: _Tables, idx: np.ndarray, in_place: bool, native: bool = True
) -> np.ndarray:
    """``permute_array`` through the round tables: in C where it is built (``ordering``:
    4 ns a position against numpy's 8 - 9, and without the GIL), or with ``native``
    False, by numpy: the rounds in cache-sized chunks (``_TABLED_CHUNK``) into this
    thread's three scratch arrays, then the cycle walk once over the whole array. Each
    numpy call takes the GIL on the thread making the loader's next order block, away
    from the threads gathering rows, so the calls are few: about 16 a chunk and 80 a
    walk, whatever the array's length."""
    src = idx.view(np.int64)  # indices below n <= 2**32
    if native and ordering.available():
        out = src if in_place else np.empty_like(src)
        lb = shape.lmask.bit_length()
        if ordering.permute_tabled(tables.small, shape.rb, lb, shape.n, src, out):
            return out.view(np.uint64)
        # a position outside [0, n) (C wrote nothing): numpy's way
        return _permute_tabled(shape, tables, idx, in_place, native=False)
    out = src if in_place else np.empty_like(src)
    scratch = _scratch(min(len(src), _TABLED_CHUNK))
    for a in range(0, len(src), _TABLED_CHUNK):
        b = a + _TABLED_CHUNK
        _rounds_tabled(shape, tables, src[a:b], out[a:b], scratch)
    walk = np.flatnonzero(out >= shape.n)
    while len(walk):
        y = _rounds_tabled(shape, tables, out[walk])
        out[walk] = y
        walk = walk[y >= shape.n]
    return out.view(np.uint64)


# The tabled rounds' chunk: 32k positions ran as fast a position as 16k (449 against 457
# us a 64k block, the three working arrays in L2) in half the numpy calls; 64k ran 1.5x
# slower a position.
_TABLED_CHUNK = 1 << 15
_local = threading.local()


def _scratch(k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """This thread's three int64 working arrays of at least ``k`` elements, made once: a
    fresh 256 kB array each block cost its page faults (the kernel zeroes each page)."""
    got = getattr(_local, "scratch", None)
    if got is None or len(got[0]) < k:
        got = _local.scratch = (np.empty(k, np.int64), np.empty(k, np.int64), np.empty(k, np.int64))
    return got


def _permute_chunk(shape: Shape, rk: np.ndarray, idx: np.ndarray) -> np.ndarray:
    n = np.uint64(shape.n)
    per_element = rk.ndim == 2
    x = _rounds(shape, rk, idx)
    out_of_range = np.flatnonzero(x >= n)
    while len(out_of_range):
        keys = rk[:, out_of_range] if per_element else rk
        y = _rounds(shape, keys, x[out_of_range])
        x[out_of_range] = y
        out_of_range = out_of_range[y >= n]
    return x


class Shapes:
    """One Feistel domain per element (for permuting several shuffles in one pass)."""

    def __init__(self, n: np.ndarray, rb: np.ndarray, lmask: np.ndarray, rmask: np.ndarray):
        self.n, self.rb, self.lmask, self.rmask = n, rb, lmask, rmask

    def widths(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return self.rb, self.lmask, self.rmask

    def take(self, idx: np.ndarray) -> Shapes:
        return Shapes(self.n[idx], self.rb[idx], self.lmask[idx], self.rmask[idx])

    @classmethod
    def table(cls, shapes: list[Shape]) -> Shapes:
        """Per-shuffle arrays, to be gathered per element with ``take``."""
        return cls(
            np.array([s.n for s in shapes], dtype=np.uint64),
            np.array([s.rb for s in shapes], dtype=np.uint64),
            np.array([s.lmask for s in shapes], dtype=np.uint64),
            np.array([s.rmask for s in shapes], dtype=np.uint64),
        )


def permute_many(shapes: Shapes, rk: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """Each ``idx[e]`` permuted in its own domain ``shapes[e]`` with keys ``rk[:, e]``.

    Elements whose domain has at most one element are returned unchanged. The first
    application of the rounds runs in cache-sized chunks; the cycle-walking tail
    (the elements still out of range) runs over the whole block at once, shrinking
    as elements land in range.
    """
    x = idx.astype(np.uint64, copy=True)
    walking = []
    for a in range(0, len(x), _CHUNK):
        b = min(a + _CHUNK, len(x))
        todo = a + np.flatnonzero(shapes.n[a:b] > np.uint64(1))
        sub = shapes.take(todo)
        v = _rounds(sub, rk[:, todo], x[todo])
        x[todo] = v
        walking.append(todo[v >= sub.n])
    todo = np.concatenate(walking) if walking else np.zeros(0, dtype=np.int64)
    sub = shapes.take(todo)
    keys = rk[:, todo]
    v = x[todo]
    while len(todo):
        v = _rounds(sub, keys, v)
        x[todo] = v
        out = np.flatnonzero(v >= sub.n)
        todo, v, keys, sub = todo[out], v[out], keys[:, out], sub.take(out)
    return x


def keys_array(rk: tuple[int, ...]) -> np.ndarray:
    """Round keys as a ``(6,)`` ``uint64`` array."""
    return np.array([k & MASK64 for k in rk], dtype=np.uint64)
