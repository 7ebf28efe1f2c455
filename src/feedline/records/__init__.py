"""Typed records: the fields of one example, checked as it loads."""

from ._domain import Index, Mask, Range
from ._field import Field, field
from ._ragged import Ragged, Varying
from ._record import Record
from ._schema import make_record, record_from_schema

__all__ = [
    "Field",
    "Index",
    "Mask",
    "Ragged",
    "Range",
    "Record",
    "Varying",
    "field",
    "make_record",
    "record_from_schema",
]
