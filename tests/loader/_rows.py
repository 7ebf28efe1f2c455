"""The rows of the plain path's edge tests (``conftest.rows_flr``) and a wrapper that
raises an interrupt at chosen calls."""

from __future__ import annotations

from typing import Any

import feedline as fl


class Row(fl.Record):
    y = fl.field((), "int64")


N = 700_000  # a first block of 64k positions, then three of 256k (the last short)
B = 1000


def interrupting(real: Any, at: tuple[int, ...]) -> Any:
    """``real``, raising ``KeyboardInterrupt`` after its calls numbered ``at`` (from 1)."""
    calls = {"n": 0}

    def wrapped(*args: Any) -> Any:
        out = real(*args)
        calls["n"] += 1
        if calls["n"] in at:
            raise KeyboardInterrupt
        return out

    return wrapped
