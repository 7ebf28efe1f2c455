"""Orders: which record comes next, computed on demand (the dataorder crate's semantics)."""

from .._base.hashing import salt
from ._compile import MAX_DEPTH
from ._order import Cursor, Item, Order
from ._schedule import Schedule, ScheduleReason
from ._seq import ORDERING_VERSION, Seq
from ._sources import LengthSource

__all__ = [
    "MAX_DEPTH",
    "ORDERING_VERSION",
    "Cursor",
    "Item",
    "LengthSource",
    "Order",
    "Schedule",
    "ScheduleReason",
    "Seq",
    "salt",
]
