"""Where a batch's time goes, counted in the thread that makes it.

The loader opens a tally (``tally()``) around the making of one batch; the stages below
it that it cannot see from outside (a dataset's map inside a gather) add their time to
the open tally of their thread (``add``). Without an open tally ``add`` does nothing, so
a dataset read outside a loader pays one attribute lookup.
"""

from __future__ import annotations

import threading
from time import perf_counter_ns

__all__ = ["add", "perf_counter_ns", "tally", "untally"]

_local = threading.local()


def tally() -> dict[str, int]:
    """A new tally for this thread (stage -> nanoseconds), filled by ``add`` until
    ``untally``; the previous one, if any, is put aside and comes back then."""
    acc: dict[str, int] = {}
    stack = getattr(_local, "stack", None)
    if stack is None:
        stack = _local.stack = []
    stack.append(acc)
    return acc


def untally() -> None:
    """Close this thread's innermost tally."""
    stack = getattr(_local, "stack", None)
    if stack:
        stack.pop()


def add(stage: str, ns: int) -> None:
    """``ns`` nanoseconds spent in ``stage``, counted in this thread's open tally."""
    stack = getattr(_local, "stack", None)
    if stack:
        acc = stack[-1]
        acc[stage] = acc.get(stage, 0) + ns
