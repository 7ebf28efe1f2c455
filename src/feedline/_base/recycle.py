"""Arrays written into again once nothing views them: a fresh array of a few MB costs
its page faults (the kernel zeroes each page it maps), which cost more than the work
done in it on the loader's hottest paths (a chunk of gathered rows, an order block's
positions).

Whether anything views an array is told by its reference count: every numpy view of
it holds a reference to it (a view's ``base`` is the array that owns the memory,
whatever it was cut from), and so does whatever keeps a view (a tensor made by
``torch.from_numpy``). Counts are exact only in CPython with its GIL; elsewhere
nothing is written into again (``REUSE``).
"""

from __future__ import annotations

import sys

import numpy as np


def views(arrays: dict[str, np.ndarray]) -> int:
    """References to ``arrays``' arrays beyond the dict's own (views, their users)."""
    return sum(sys.getrefcount(a) for a in arrays.values()) - _UNVIEWED * len(arrays)


def _refs(arrays: list[np.ndarray], i: int) -> int:
    return sys.getrefcount(arrays[i])


# What an array that nothing views counts in ``views`` and ``_refs``, measured by the
# same code.
_UNVIEWED = 0
_UNVIEWED = views({"a": np.empty(0)})
_FREE = _refs([np.empty(0)], 0)
REUSE = sys.implementation.name == "cpython" and getattr(sys, "_is_gil_enabled", lambda: True)()


class Recycler:
    """A few one-dimensional arrays of one dtype, each handed out again once nothing
    views it (``get``): for one thread at a time (its owner's)."""

    __slots__ = ("arrays", "dtype", "keep")

    def __init__(self, dtype: np.dtype | type, keep: int = 4) -> None:
        self.dtype, self.keep = np.dtype(dtype), keep
        self.arrays: list[np.ndarray] = []

    def get(self, n: int) -> np.ndarray:
        """``n`` elements (their values left as they were) of an array of at least ``n``:
        one handed out before that nothing views any more, or a new one, kept to hand
        out again once it is free."""
        arrays = self.arrays
        if REUSE:
            for i in range(len(arrays) - 1, -1, -1):
                if len(arrays[i]) >= n and _refs(arrays, i) == _FREE:
                    return arrays[i][:n]
        a = np.empty(n, self.dtype)
        if len(arrays) >= self.keep:
            arrays.pop(0)  # the oldest: it is the likeliest still viewed
        arrays.append(a)
        return a[:n]
