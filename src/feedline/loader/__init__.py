"""The loader: batches, epochs, shards, threads and exact resume."""

from ._batch import Batch
from ._config import loader_workers
from ._loader import Loader

__all__ = ["Batch", "Loader", "loader_workers"]
