"""Sources: typed views of anything indexable, and data where it already lives
(Parquet files, Arrow tables, pandas DataFrames)."""

from ._dataset import Dataset
from ._parquet import ParquetSource, parquet
from ._table import table

__all__ = ["Dataset", "ParquetSource", "parquet", "table"]
