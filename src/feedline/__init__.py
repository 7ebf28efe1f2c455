"""feedline: exact, resumable, fast data loading for machine-learning training loops."""

from . import images, remote, sources, text
from .errors import (
    BoundsError,
    DomainError,
    FeedlineError,
    FormatError,
    MissingFileError,
    OrderError,
    OrderErrorKind,
    RecordError,
    ShapeError,
    StateError,
    WorkerError,
)
from .formats import ndf, nndataset, recfile
from .loader import Batch, BatchMeta, Loader, LoaderOptions, loader_workers
from .order import (
    MAX_DEPTH,
    ORDERING_VERSION,
    Cursor,
    Item,
    Order,
    Schedule,
    ScheduleReason,
    Seq,
    salt,
)
from .records import Field, Index, Mask, Ragged, Range, Record, Varying, field
from .sources import Dataset

__version__ = "0.1.0"

__all__ = [
    "MAX_DEPTH",
    "ORDERING_VERSION",
    "Batch",
    "BatchMeta",
    "BoundsError",
    "Cursor",
    "Dataset",
    "DomainError",
    "FeedlineError",
    "Field",
    "FormatError",
    "Index",
    "Item",
    "Loader",
    "LoaderOptions",
    "Mask",
    "MissingFileError",
    "Order",
    "OrderError",
    "OrderErrorKind",
    "Ragged",
    "Range",
    "Record",
    "RecordError",
    "Schedule",
    "ScheduleReason",
    "Seq",
    "ShapeError",
    "StateError",
    "Varying",
    "WorkerError",
    "field",
    "images",
    "loader_workers",
    "ndf",
    "nndataset",
    "recfile",
    "remote",
    "salt",
    "sources",
    "text",
]


def __getattr__(name: str):
    """``fl.torch`` (and later integrations) load on first use: importing feedline never
    imports PyTorch."""
    if name in ("torch", "jax", "ray"):
        import importlib

        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'feedline' has no attribute {name!r}")
