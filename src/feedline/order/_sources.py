"""The leaves of an ordering configuration: what may stand for a source, its length and
its salt.

A source is an ``int`` (a bare length) or anything with ``__len__`` (a typed dataset, a
file); a name or a path is not (resolve it with ``Seq.map_sources``). ``from_json``
restores sources as ``LengthSource`` stand-ins (a length and a salt).
"""

from __future__ import annotations

import operator
import os

import numpy as np

from .._base.hashing import MASK64
from ..errors import OrderError, OrderErrorKind


def _u64(value: object, what: str) -> int:
    try:
        v = operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        raise TypeError(f"{what} must be an integer, got {type(value).__name__}") from None
    if not 0 <= v <= MASK64:
        raise OrderError(OrderErrorKind.INVALID_ARGUMENT, f"{what} must be in [0, 2**64), got {v}")
    return v


def source_len(src: object) -> int:
    """The length a source stands for: an ``int`` itself, else ``len(src)``."""
    if isinstance(src, (int, np.integer)) and not isinstance(src, (bool, np.bool_)):
        return _u64(int(src), "a source length")
    problem = _not_a_source(src)
    if problem:
        raise TypeError(problem)
    return _u64(len(src), "a source length")  # type: ignore[arg-type]


def _not_a_source(src: object) -> str:
    """Why ``src`` cannot stand for a dataset ('' when it can)."""
    if isinstance(src, (str, bytes, os.PathLike)):
        return (
            f"the source {src!r} is a name or a path, not a dataset: resolve it first, "
            "e.g. seq.map_sources(open_dataset)"
        )
    if isinstance(src, (bool, np.bool_)) or not hasattr(src, "__len__"):
        return f"a source is an int or has __len__, got {type(src).__name__}"
    return ""


def resolved_len(src: object, ordinal: int, fail) -> int:
    """``source_len`` when building an order: ``fail(kind, message)`` makes its error."""
    if not isinstance(src, (int, np.integer)) or isinstance(src, (bool, np.bool_)):
        problem = _not_a_source(src)
        if problem:
            raise fail(OrderErrorKind.NOT_A_SOURCE, f"source {ordinal}: {problem}")
    return source_len(src)


def source_salt(src: object) -> int:
    """A source's salt: its ``salt`` attribute (an int, or a method returning one), else 0."""
    s = getattr(src, "salt", 0)
    if callable(s):
        s = s()
    if s is None:
        return 0
    return _u64(s, "a source's salt")


class _Handle:
    """A source inside a ``Seq``: compared by value for bare lengths, else by identity."""

    __slots__ = ("obj",)

    def __init__(self, obj: object) -> None:
        self.obj = obj

    def _key(self) -> tuple:
        if isinstance(self.obj, int):
            return ("len", int(self.obj))
        if isinstance(self.obj, (str, bytes)):  # an unresolved name compares by value
            return ("name", self.obj)
        return ("obj", id(self.obj))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Handle) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return repr(self.obj) if isinstance(self.obj, int) else f"<{type(self.obj).__name__}>"


class LengthSource:
    """A stand-in source with only a length and a salt (what ``from_json`` restores)."""

    def __init__(self, length: int, salt: int = 0) -> None:
        self.length = length
        self.salt = salt

    def __len__(self) -> int:
        return self.length

    def __repr__(self) -> str:
        return f"LengthSource({self.length}, salt={self.salt})"
