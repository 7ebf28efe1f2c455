"""Orders: which record comes next, computed on demand (the dataorder crate's semantics)."""

from ._hash import salt
from ._order import Cursor, Item, Order
from ._schedule import Schedule
from ._seq import ORDERING_VERSION, LengthSource, Seq

__all__ = ["ORDERING_VERSION", "Cursor", "Item", "LengthSource", "Order", "Schedule", "Seq", "salt"]
