"""Domains: which values a field may hold, checked when value checks are on.

=================  ==========================================  ======================
domain             values                                      fits dtypes
=================  ==========================================  ======================
``Index(n)``       integers in ``[0, n)``; ``n`` an int or dim  integers (and bool)
``Mask``           booleans                                    bool
``Range(lo, hi)``  numbers with ``lo <= v <= hi``               integers and floats
=================  ==========================================  ======================

Checks are vectorised: one pass over a whole batch (or a whole in-memory array).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import RecordError


@dataclass(frozen=True)
class Index:
    """Integers in ``[0, n)``; ``n`` is an int or the name of one of the record's dims."""

    n: int | str

    def __post_init__(self) -> None:
        n = self.n
        if isinstance(n, str):
            if not n.isidentifier():
                raise RecordError(f"Index({n!r}): a bound is a count or a dim name")
            return
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
            raise RecordError(f"Index({n!r}): a bound is a non-negative int or a dim name")
        object.__setattr__(self, "n", int(n))

    def describe(self, dims: Mapping[str, Any]) -> str:
        if isinstance(self.n, int):
            return f"Index[{self.n}]"
        return f"Index[{self.n}] = [0, {dims[self.n]})"

    def bound(self, dims: Mapping[str, Any]) -> int:
        return self.n if isinstance(self.n, int) else dims[self.n]

    def violations(self, values: np.ndarray, dims: Mapping[str, Any]) -> np.ndarray:
        """Boolean mask of the values outside the domain (same shape as ``values``)."""
        return (values < 0) | (values >= self.bound(dims))

    def to_dict(self) -> dict:
        return {"index": self.n}


class _MaskDomain:
    """Booleans (the domain of a mask field)."""

    _instance: _MaskDomain | None = None

    def __new__(cls) -> _MaskDomain:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "Mask"

    def describe(self, dims: Mapping[str, Any]) -> str:
        return "Mask"

    def violations(self, values: np.ndarray, dims: Mapping[str, Any]) -> np.ndarray:
        if values.dtype == np.bool_:
            return np.zeros(values.shape, dtype=bool)
        return (values != 0) & (values != 1)

    def to_dict(self) -> dict:
        return {"mask": True}


Mask = _MaskDomain()


@dataclass(frozen=True)
class Range:
    """Numbers ``v`` with ``lo <= v <= hi`` (either bound may be None: unbounded)."""

    lo: float | None
    hi: float | None

    def __post_init__(self) -> None:
        for name in ("lo", "hi"):
            v = getattr(self, name)
            if v is not None and (
                isinstance(v, bool) or not isinstance(v, (int, float, np.number)) or v != v
            ):
                raise RecordError(
                    f"Range({self.lo!r}, {self.hi!r}): {name} must be a number or None"
                )
        if self.lo is not None and self.hi is not None and self.lo > self.hi:
            raise RecordError(f"Range({self.lo!r}, {self.hi!r}): lo is above hi")

    def describe(self, dims: Mapping[str, Any]) -> str:
        return f"Range[{self.lo}, {self.hi}]"

    def violations(self, values: np.ndarray, dims: Mapping[str, Any]) -> np.ndarray:
        bad = np.isnan(values) if values.dtype.kind in "fc" else np.zeros(values.shape, bool)
        if self.lo is not None:
            bad |= values < self.lo
        if self.hi is not None:
            bad |= values > self.hi
        return bad

    def to_dict(self) -> dict:
        return {"range": [self.lo, self.hi]}


Domain = Index | _MaskDomain | Range


def domain_from_dict(d: dict) -> Domain:
    """Inverse of ``to_dict`` (used by self-describing files)."""
    if set(d) == {"index"}:
        return Index(d["index"])
    if set(d) == {"mask"}:
        return Mask
    if set(d) == {"range"} and len(d["range"]) == 2:
        return Range(*d["range"])
    raise ValueError(f"not a domain: {d!r}")
