"""Sources: typed views of anything indexable."""

from ._dataset import Dataset

__all__ = ["Dataset"]
