"""fl.sources.arrow: Arrow IPC / Feather files read at random, memory-mapped."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest

import feedline as fl

pa = pytest.importorskip("pyarrow")
ipc = pytest.importorskip("pyarrow.ipc")
feather = pytest.importorskip("pyarrow.feather")

from .test_parquet import N, check_rows, table  # noqa: E402


def write_file(path, t, chunk: int = 300) -> str:
    with pa.OSFile(str(path), "wb") as sink, ipc.new_file(sink, t.schema) as w:
        for b in t.to_batches(max_chunksize=chunk):
            w.write_batch(b)
    return str(path)


@pytest.fixture
def path(tmp_path):
    return write_file(tmp_path / "t.arrow", table())


def test_the_record_is_inferred_as_for_parquet(path, tmp_path):
    import pyarrow.parquet as pq

    pq.write_table(table(), tmp_path / "t.parquet")
    assert fl.sources.arrow(path).record.schema() == {
        **fl.sources.parquet(tmp_path / "t.parquet").record.schema(),
        "name": "ArrowRow",
    }


def test_shuffled_batches_across_record_batches_read_their_rows_exactly(path):
    src = fl.sources.arrow(path)
    assert len(src) == N and src.n_batches == 4
    rng = np.random.default_rng(0)
    for _ in range(5):
        idx = rng.permutation(N)[:200]
        check_rows(src.getitems(idx), idx)
    check_rows(src.getitems(np.array([5, 7])), np.array([5, 7]))  # one batch touched
    assert src[999]["s"] == "r999é"


def test_fixed_width_columns_are_views_of_the_memory_map(path):
    src = fl.sources.arrow(path)
    part = src._parts[1]
    for name in ("x", "y", "fx"):
        col = part[name]
        assert not col.flags.owndata and not col.flags.writeable  # Arrow's buffer, mapped
    assert not part["s"].values.flags.owndata  # the strings' bytes too


def test_a_feather_file_and_a_stream_read_alike(tmp_path):
    feather.write_feather(table(), tmp_path / "t.feather", chunksize=400)
    with (
        pa.OSFile(str(tmp_path / "t.arrows"), "wb") as sink,
        ipc.new_stream(sink, table().schema) as w,
    ):
        w.write_table(table())
    idx = np.random.default_rng(1).permutation(N)[:300]
    for name in ("t.feather", "t.arrows"):
        check_rows(fl.sources.arrow(tmp_path / name).getitems(idx), idx)


def test_a_source_loads_batches_and_pickles_as_its_path(path):
    src = fl.sources.arrow(path, columns=["x", "s"])
    assert list(src.record.fields) == ["x", "s"]
    again = pickle.loads(pickle.dumps(src))
    assert again.getitems([3, 1])["x"].tolist() == [3.0, 1.0]
    batches = list(fl.Loader(fl.Dataset(src.record, src), 256, workers=0))
    assert sum(b.meta.size for b in batches) == N


def test_a_file_that_is_not_arrow_and_a_truncated_one_are_format_errors(tmp_path, path):
    (tmp_path / "no.arrow").write_bytes(b"hello world, not arrow")
    with pytest.raises(fl.FormatError, match=r"no\.arrow: expected an Arrow IPC file"):
        fl.sources.arrow(tmp_path / "no.arrow")
    data = Path(path).read_bytes()
    (tmp_path / "cut.arrow").write_bytes(data[: len(data) // 2])
    with pytest.raises(fl.FormatError, match=r"cut\.arrow: expected an Arrow IPC file"):
        fl.sources.arrow(tmp_path / "cut.arrow")


def test_nulls_and_unmappable_columns_are_named(tmp_path):
    p = write_file(tmp_path / "n.arrow", pa.table({"x": [1.0, None, 3.0]}))
    with pytest.raises(fl.FormatError, match=r"column 'x' has 1 missing .* at row 1"):
        fl.sources.arrow(p)
    p = write_file(tmp_path / "d.arrow", pa.table({"d": pa.array([1, 2], pa.date32())}))
    with pytest.raises(fl.RecordError, match=r"column 'd' is date32"):
        fl.sources.arrow(p)
