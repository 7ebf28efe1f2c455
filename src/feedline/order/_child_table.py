"""Which child of a concat holds each position: a table of buckets of positions, each
bucket's first child advanced past the boundaries inside it, instead of a binary search
of the children's starts (``_nodes.Concat``)."""

from __future__ import annotations

import numpy as np

# A concat of more children than this finds each position's child in a table of
# buckets of positions (``child_table``), not by a binary search of the children's
# starts (about log2(children) dependent reads a position). 262,144 positions at random
# over 4,000,000, ns a position, search / table: 2 children 5.7 / 10.9, 3 9.1 / 4.4,
# 16 19 / 3.2, 1,024 50 / 3.2, 100,000 114 / 8.1.
_SEARCH_CHILDREN = 2
# Most buckets in such a table (int64: 8 MB), and most boundaries between children in
# one bucket (a pass over the positions each).
_TABLE_BUCKETS = 1 << 20
_TABLE_PASSES = 2


def child_table(starts: np.ndarray, n: int) -> tuple[np.uint64, np.ndarray, np.ndarray, int] | None:
    """``(shift, table, ends, passes)``: position ``p``'s child is ``table[p >> shift]``
    advanced past each child whose end (``ends``) is at or below ``p``, at most
    ``passes`` times; or None where a binary search serves (few children, or no bucket
    size both keeps the table small and holds few boundaries)."""
    k = len(starts)
    if k <= _SEARCH_CHILDREN:
        return None
    ends = np.append(starts[1:], np.uint64(n))
    shift = max(0, (n // k).bit_length() - 1)  # buckets of at most the mean length
    while shift >= 0 and (n - 1 >> shift) < _TABLE_BUCKETS:
        firsts = np.arange((n - 1 >> shift) + 1, dtype=np.uint64) << np.uint64(shift)
        lasts = np.minimum(firsts + np.uint64((1 << shift) - 1), np.uint64(n - 1))
        table = np.searchsorted(starts, firsts, side="right") - 1
        passes = int((np.searchsorted(starts, lasts, side="right") - 1 - table).max())
        if passes <= _TABLE_PASSES:
            return np.uint64(shift), table, ends, passes
        shift -= 1  # smaller buckets: fewer boundaries in each, more buckets
    return None
