"""Sources: typed views of anything indexable, and data where it already lives
(Arrow tables, pandas DataFrames)."""

from ._dataset import Dataset
from ._table import table

__all__ = ["Dataset", "table"]
