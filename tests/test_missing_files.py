"""A file that is not there is a ``fl.MissingFileError`` naming it, from every reader:
a ``FeedlineError`` (as every error of the library is) and a ``FileNotFoundError``."""

from __future__ import annotations

import pytest

import feedline as fl


def _convert(src, dst):
    from feedline.formats.convert import convert

    return convert(src, dst)


READERS = {
    "recfile": lambda d: fl.recfile.open(d / "nope.flr"),
    "nndataset": lambda d: fl.nndataset.open(d / "nope.nndataset"),
    "parquet": lambda d: fl.sources.parquet(str(d / "nope.parquet")),
    "parquet glob": lambda d: fl.sources.parquet(str(d / "nope-*.parquet")),
    "arrow": lambda d: fl.sources.arrow(str(d / "nope.feather")),
    "convert": lambda d: _convert(str(d / "nope.parquet"), str(d / "out.flr")),
}


@pytest.mark.parametrize("reader", list(READERS))
def test_a_missing_file_is_a_feedline_error_naming_it(tmp_path, reader):
    if reader in ("parquet", "parquet glob", "arrow", "convert"):
        pytest.importorskip("pyarrow")
    with pytest.raises(fl.MissingFileError, match="nope") as e:
        READERS[reader](tmp_path)
    assert isinstance(e.value, fl.FeedlineError) and isinstance(e.value, FileNotFoundError)
    assert not (tmp_path / "out.flr").exists()


def test_writing_into_a_missing_directory_names_the_destination(tmp_path):
    import numpy as np

    class Row(fl.Record):
        x = fl.field((), "int64")

    dst = tmp_path / "nodir" / "out.flr"
    with pytest.raises(fl.MissingFileError, match=r"out\.flr: no such directory .*nodir") as e:
        fl.recfile.write(dst, Row, {"x": np.arange(3)})
    assert ".spool" not in str(e.value)  # not the writer's scratch file
    pytest.importorskip("pyarrow")
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"x": [1, 2]}), tmp_path / "in.parquet")
    with pytest.raises(fl.MissingFileError, match=r"out\.flr: no such directory"):
        _convert(str(tmp_path / "in.parquet"), str(dst))
    assert not (tmp_path / "nodir").exists()
