"""Every error feedline raises on purpose.

::

    FeedlineError                      base of everything feedline raises on purpose
    ├── OrderError(FeedlineError, ValueError)   .kind: OrderErrorKind, .path: tuple[int, ...]
    ├── BoundsError(FeedlineError, IndexError)  a cursor/position range that does not fit
    ├── RecordError(FeedlineError, TypeError)   a record declared wrongly
    ├── ShapeError(FeedlineError, ValueError)   an item whose field has the wrong shape/kind
    ├── DomainError(FeedlineError, ValueError)  an item whose field value is outside its domain
    ├── FormatError(FeedlineError, ValueError)  a file that is not what it claims (.path, .offset)
    ├── StateError(FeedlineError, ValueError)   a saved loader state that does not match
    └── WorkerError(FeedlineError, RuntimeError) a worker process failed or died

Each also subclasses the matching builtin, so a caller's existing
``except ValueError`` (or ``IndexError``, ``TypeError``, ``RuntimeError``) keeps working.
"""

from __future__ import annotations

import enum
import os

__all__ = [
    "BoundsError",
    "DomainError",
    "FeedlineError",
    "FormatError",
    "OrderError",
    "OrderErrorKind",
    "RecordError",
    "ShapeError",
    "StateError",
    "WorkerError",
]


class FeedlineError(Exception):
    """Base of every error feedline raises on purpose."""


class OrderErrorKind(enum.Enum):
    """Why an ordering configuration was rejected (the dataorder crate's error kinds)."""

    SKIP_OUT_OF_RANGE = "skip_out_of_range"
    TAKE_OUT_OF_RANGE = "take_out_of_range"
    ZERO_STEP = "zero_step"
    LENGTH_OVERFLOW = "length_overflow"
    TOO_DEEP = "too_deep"
    MIX_TOO_LONG = "mix_too_long"
    INVALID_SCHEDULE = "invalid_schedule"
    SCHEDULE_TOO_STEEP = "schedule_too_steep"
    EMPTY_CYCLE = "empty_cycle"
    SHUFFLE_CONTAINS_MIX = "shuffle_contains_mix"
    NOT_A_SOURCE = "not_a_source"
    VERSION_MISMATCH = "version_mismatch"
    INVALID_SHARD = "invalid_shard"
    INVALID_ARGUMENT = "invalid_argument"
    SOURCE_CHANGED = "source_changed"
    INVALID_JSON = "invalid_json"


class OrderError(FeedlineError, ValueError):
    """An ordering configuration that cannot be compiled.

    ``kind`` says what is wrong; ``path`` is the tuple of child indices from the
    root of the configuration to the offending node (``()`` for the root), and
    ``where`` renders it the way the message does, e.g. ``mix[1].take``. ``details``
    holds the values behind the error (``n`` and ``len`` of a skip, ``len``,
    ``peak_rate`` and ``limit`` of a steep schedule...); ``reason`` is the
    ``ScheduleReason`` of an invalid schedule, else the message.
    """

    def __init__(
        self,
        kind: OrderErrorKind,
        message: str,
        path: tuple[int, ...] = (),
        where: str = "",
        **details: object,
    ) -> None:
        self.kind = kind
        self.path = tuple(path)
        self.where = where
        self.details = details
        self.message = message
        self.reason = details.get("reason", message)
        super().__init__(f"{message} (at {where})" if where else message)


class BoundsError(FeedlineError, IndexError):
    """A position, cursor range or index that does not fit what it addresses."""


class RecordError(FeedlineError, TypeError):
    """A record class declared wrongly."""


class ShapeError(FeedlineError, ValueError):
    """An item whose field has the wrong shape or kind of value."""


class DomainError(FeedlineError, ValueError):
    """An item whose field value lies outside the field's declared domain."""


class FormatError(FeedlineError, ValueError):
    """A file that is not what it claims to be.

    ``path`` names the file and ``offset`` the byte where the problem was found.
    """

    def __init__(
        self, message: str, path: str | os.PathLike[str] | None = None, offset: int | None = None
    ) -> None:
        self.path = None if path is None else os.fspath(path)
        self.offset = offset
        where = []
        if self.path is not None:
            where.append(self.path)
        if offset is not None:
            where.append(f"byte {offset}")
        super().__init__(f"{': '.join(where)}: {message}" if where else message)


class MissingFileError(FeedlineError, FileNotFoundError):
    """A file, a directory or an object that is not there (also a ``FileNotFoundError``,
    so either ``except`` catches it); the message names it and what was expected."""


class StateError(FeedlineError, ValueError):
    """A saved loader state that does not match the loader it is loaded into."""


class WorkerError(FeedlineError, RuntimeError):
    """A worker process failed or died."""


def add_note(exc: BaseException, note: str) -> None:
    """``exc.add_note(note)``, also on Python 3.10, which has no ``add_note``: there the
    note is appended to ``__notes__`` by hand (where the ``exceptiongroup`` backport's
    traceback printing finds it)."""
    add = getattr(exc, "add_note", None)
    if add is not None:
        add(note)
    else:
        exc.__notes__ = [*getattr(exc, "__notes__", ()), note]  # type: ignore[attr-defined]
