"""Sources: typed views of anything indexable, and data where it already lives
(Parquet files, Arrow IPC / Feather files, Arrow tables, pandas DataFrames)."""

from ._arrowfile import ArrowSource, arrow
from ._dataset import Dataset
from ._parquet import ParquetSource, parquet
from ._table import table

__all__ = ["ArrowSource", "Dataset", "ParquetSource", "arrow", "parquet", "table"]
