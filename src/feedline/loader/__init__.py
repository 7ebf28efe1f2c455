"""The loader: batches, epochs, shards, threads and exact resume."""

from ._batch import Batch
from ._loader import Loader

__all__ = ["Batch", "Loader"]
