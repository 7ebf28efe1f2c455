"""feedline: exact, resumable, fast data loading for machine-learning training loops."""

from .errors import (
    BoundsError,
    DomainError,
    FeedlineError,
    FormatError,
    OrderError,
    OrderErrorKind,
    RecordError,
    ShapeError,
    StateError,
    WorkerError,
)
from .order import ORDERING_VERSION, Cursor, Item, Order, Schedule, Seq, salt

__version__ = "0.1.0"

__all__ = [
    "ORDERING_VERSION",
    "BoundsError",
    "Cursor",
    "DomainError",
    "FeedlineError",
    "FormatError",
    "Item",
    "Order",
    "OrderError",
    "OrderErrorKind",
    "RecordError",
    "Schedule",
    "Seq",
    "ShapeError",
    "StateError",
    "WorkerError",
    "salt",
]
