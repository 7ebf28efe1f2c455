"""A mix's elements located where every part is a source or a shuffle of one
(``_nodes.Mix.locate``): by C through each part's round tables (``ordering.locate``),
or on the numpy path part by part."""

from __future__ import annotations

from typing import Any

import numpy as np

from .._base import ordering
from . import _perm
from ._schedule import by_part

# Contexts (seed, epoch) whose tables a mix keeps: a loader's pass uses one. The tables
# of 64 parts of 2**24 rows are 3 MB a context (2**32 rows: 50 MB).
_CONTEXTS = 4


# A mix of at most this many parts, each a source or a shuffle of one, is located by C
# (``ordering.locate``, ``part_tables``): 6 - 7 ns a position through each part's uint16
# round tables where numpy took 15 - 20 and numba 19 (64 parts). Up to _C_MANY_PARTS
# whose tables hold _C_TABLE_ENTRIES entries at most (4 MB a context): 256 and 1,024
# parts of 15,625 and 3,906 rows walked and located in 41 and 58 ns a position against
# numba's 51 and 65 (``_mixplan``'s figures); the tables of many big parts would take GBs.
_C_PARTS = 64
_C_MANY_PARTS = 1024
_C_TABLE_ENTRIES = 1 << 21


def _fits(k: int, shapes: Any) -> bool:
    """Whether C locates ``k`` parts whose shuffles have ``shapes`` (their tables' entries)."""
    entries = sum(3 * ((1 << sh.rb) + sh.lmask + 1) for sh in shapes)
    return k <= _C_PARTS or (k <= _C_MANY_PARTS and entries <= _C_TABLE_ENTRIES)


def c_locates(k: int, shuffles: list[tuple[int, Any]]) -> bool:
    """Whether C locates a mix of ``k`` flat parts (``shuffles``: the shuffled parts'
    indices and ``Shuffle`` nodes)."""
    return _fits(k, (sh.shape for _, sh in shuffles))


def c_locates_any(lengths: list[int]) -> bool:
    """Whether C locates a mix of flat parts of ``lengths`` whichever of them are shuffled
    (``c_locates`` with every part a shuffle: the most tables)."""
    return _fits(len(lengths), (_perm.Shape.of(n) for n in lengths))


def part_tables(
    shuffles: list[tuple[int, Any]], k: int, cache: dict, seed: int, epoch: int, make: bool
) -> tuple | None:
    """Each of ``k`` parts' six uint16 round tables in context ``(seed, epoch)`` (None for
    a source; ``shuffles``: the shuffled parts' indices and ``Shuffle`` nodes), kept in
    ``cache`` (the mix's, ``_CONTEXTS`` contexts), for C's ``ordering.locate``; None where C does
    not serve (not built, or a shuffle past the tables' 2**32 records), or where they are
    not made yet and ``make`` is False (a few positions: the tables of 64 parts of
    10,000,000 rows took 7 ms to make, the numpy path locates a few in 0.1 ms)."""
    if not ordering.available():
        return None
    # one lookup: another thread may clear the cache between a test and a read
    got: tuple | bool | None = cache.get((seed, epoch), False)
    if got is not False:
        assert got is None or isinstance(got, tuple)
        return got
    if not make:
        return None
    mine = dict(shuffles)
    if any(sh.shape.rb > _perm._TABLE_BITS for sh in mine.values()):
        got = None
    else:
        got = tuple(
            _perm._tables(sh.shape, sh.keys(seed, epoch)).small if sh is not None else None
            for sh in (mine.get(i) for i in range(k))
        )
    if len(cache) >= _CONTEXTS:
        cache.clear()
    cache[(seed, epoch)] = got
    return got


def locate_parts(
    shuffles: list[tuple[int, Any]],
    offset: np.ndarray,
    ordinal: np.ndarray,
    part: np.ndarray,
    j: np.ndarray,
    seed: int,
    epoch: int,
    ords: np.ndarray,
    recs: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """``locate`` of sources and shuffles of sources on the numpy path: each part's
    elements permuted at once with its own keys (``_perm.permute_array``, whose round
    tables serve a shuffle of up to 2**32 records), not element by element with
    gathered keys: a mix of two 1,000,000-record shuffles, read 256k positions at a
    time, took 136 ns a position by element, 40 by part (the compiled kernels 35)."""
    mine = dict(shuffles)
    j = j.astype(np.uint64, copy=False)
    for i, at in by_part(part, len(offset)):
        sh = mine.get(i)
        # permuted in place where ``j[at]`` is a copy (indices), not a view (a slice)
        own = isinstance(at, np.ndarray)
        rec = j[at] if sh is None else sh.permute(j[at], seed, epoch, in_place=own)
        recs[at] = rec + offset[i]
        ords[at] = ordinal[i]
    return ords, recs
