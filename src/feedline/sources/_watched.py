"""Datasets whose columns announce that they changed: one number for the process.

Each assignment of a dataset's columns (``_cols``, ``_mapped_columns``) takes the next
number of one count: a loader over many sources (a mix, a manifest's shards) reads that
number once a batch to know whether any of their columns changed (``columns_changed``),
not each source's (a loop over 1,024 shards a batch cost more than the batch's copies).
"""

from __future__ import annotations

import itertools
from typing import Any

_changes = itertools.count(1)  # next() is one step under the GIL: no number is given twice
_changed = 0
_COLUMNS = frozenset(("_cols", "_mapped_columns"))


def columns_changed() -> int:
    """A number that differs from every earlier one once any dataset's columns have been
    assigned again (read it before reading the columns it vouches for)."""
    return _changed


class WatchedColumns:
    """A base whose assignments of ``_cols`` or ``_mapped_columns`` move the count."""

    def __setattr__(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, value)
        if name in _COLUMNS:  # after the assignment: a reader that saw the old number rereads
            global _changed
            _changed = next(_changes)
