"""The loader: batches, epochs, shards, threads and exact resume."""

from ._batch import Batch, BatchMeta
from ._config import loader_workers
from ._loader import Loader
from ._options import LoaderOptions

__all__ = ["Batch", "BatchMeta", "Loader", "LoaderOptions", "loader_workers"]
