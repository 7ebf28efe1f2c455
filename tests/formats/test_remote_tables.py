"""Tables at URLs: Parquet sources and convert from Parquet, Arrow, CSV, JSONL and HF
directories on a real S3 endpoint on loopback (moto's server)."""

from __future__ import annotations

import json
import pickle

import numpy as np
import pytest

import feedline as fl
from feedline.cli import main
from feedline.formats.convert import convert

pytest.importorskip("s3fs")
pytest.importorskip("moto")
pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

from ..sources.test_parquet import N, check_rows, table  # noqa: E402
from .s3_endpoint import S3Endpoint  # noqa: E402


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    endpoint = S3Endpoint()
    import pyarrow.csv as pcsv
    import pyarrow.feather as feather

    fs = endpoint.bucket("tables")
    folder = tmp_path_factory.mktemp("tables")
    t = table()
    pq.write_table(t.slice(0, 600), folder / "a.parquet", row_group_size=100)
    pq.write_table(t.slice(600), folder / "b.parquet", row_group_size=100)
    feather.write_feather(t, folder / "t.feather", chunksize=300)
    pcsv.write_csv(t.select(["x", "y", "s"]), folder / "t.csv")
    rows = t.select(["y", "s", "v"]).to_pylist()
    (folder / "t.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    for name in ("a.parquet", "b.parquet", "t.feather", "t.csv", "t.jsonl"):
        fs.put(str(folder / name), f"tables/{name}")
    datasets = pytest.importorskip("datasets")
    datasets.Dataset(t.select(["x", "s", "v"])).save_to_disk(str(folder / "hf"))
    fs.put(str(folder / "hf"), "tables/hf", recursive=True)
    endpoint.local = folder
    yield endpoint
    endpoint.close()


@pytest.fixture
def env(s3, monkeypatch):
    """s3fs's endpoint and credentials from the environment (a plain URL's defaults);
    fsspec's cached file systems forgotten, as they keep the endpoint they were made
    with (another module's server)."""
    import s3fs

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3.url)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    s3fs.S3FileSystem.clear_instance_cache()
    yield s3
    s3fs.S3FileSystem.clear_instance_cache()


def test_a_glob_of_parquet_files_on_s3_is_a_source_of_exact_rows(s3):
    src = fl.sources.parquet("s3://tables/*.parquet", storage_options=s3.options(), cache_groups=3)
    assert src.paths == ["s3://tables/a.parquet", "s3://tables/b.parquet"]
    assert len(src) == N and src.n_groups == 10
    idx = np.random.default_rng(0).permutation(N)[:300]
    check_rows(src.getitems(idx), idx)
    again = pickle.loads(pickle.dumps(src))  # a worker opens the URLs itself
    check_rows(again.getitems(idx[:50]), idx[:50])


def test_a_missing_object_and_an_empty_glob_are_named(s3):
    with pytest.raises(FileNotFoundError, match=r"s3://tables/none\.parquet"):
        fl.sources.parquet("s3://tables/none.parquet", storage_options=s3.options())
    with pytest.raises(FileNotFoundError, match=r"no Parquet file matches 's3://tables/\*\.pq'"):
        fl.sources.parquet("s3://tables/*.pq", storage_options=s3.options())


@pytest.mark.parametrize(
    "name, fields",
    [
        ("*.parquet", ["x", "y", "ok", "s", "b", "v", "fx"]),
        ("t.feather", ["x", "y", "ok", "s", "b", "v", "fx"]),
        ("t.csv", ["x", "y", "s"]),
        ("t.jsonl", ["y", "s", "v"]),
        ("hf", ["x", "s", "v"]),
    ],
)
def test_convert_from_s3_gives_the_local_files_rows(env, tmp_path, name, fields):
    local = str(env.local / name)
    assert convert(f"s3://tables/{name}", tmp_path / "remote.flr") == N
    assert convert(local, tmp_path / "local.flr") == N
    with (
        fl.recfile.open(tmp_path / "remote.flr") as a,
        fl.recfile.open(tmp_path / "local.flr") as b,
    ):
        assert list(a.record.fields) == fields
        assert a.record.schema() == b.record.schema()
        idx = np.arange(0, N, 7)
        got, want = a.getitems(idx), b.getitems(idx)
        for k in fields:
            if isinstance(want[k], fl.Ragged):
                assert got[k].values.tobytes() == want[k].values.tobytes()
            else:
                np.testing.assert_array_equal(got[k], want[k])


def test_the_command_line_converts_an_s3_url_with_columns(env, tmp_path, capsys):
    out = tmp_path / "c.flr"
    assert main(["convert", "s3://tables/a.parquet", str(out), "--columns", "y,s"]) == 0
    assert f"s3://tables/a.parquet -> {out}: 600 rows" in capsys.readouterr().out
    with fl.recfile.open(out) as f:
        assert list(f.record.fields) == ["y", "s"] and f.columns["s"].strings()[5] == "r5é"


def test_an_arrow_file_on_s3_is_a_source_read_once(s3):
    src = fl.sources.arrow("s3://tables/t.feather", storage_options=s3.options())
    assert len(src) == N and src.n_batches == 4
    idx = np.random.default_rng(2).permutation(N)[:200]
    check_rows(src.getitems(idx), idx)
    check_rows(pickle.loads(pickle.dumps(src)).getitems(idx[:20]), idx[:20])


def big_parquet(path, value: float) -> bytes:
    """4.8 MB of plain row groups: five of the remote layer's 1 MiB blocks."""
    rows = 300_000
    t = pa.table({"x": np.full(rows, value), "i": np.arange(rows)})
    pq.write_table(t, path, row_group_size=20_000, compression="none", use_dictionary=False)
    return path.read_bytes()


def test_a_parquet_source_on_s3_reads_through_the_remote_layer(s3, tmp_path):
    import s3fs

    fs = s3fs.S3FileSystem(**s3.options())
    fs.pipe("tables/pinned/big.parquet", big_parquet(tmp_path / "big.parquet", 1.0))
    s3.proxy.plan = ["500"]  # a transient failure, retried
    src = fl.sources.parquet("s3://tables/pinned/big.parquet", storage_options=s3.options(True))
    assert src.getitems([299_999, 5])["i"].tolist() == [299_999, 5]
    assert s3.proxy.injected[-1:] == ["500"] and not s3.proxy.plan
    assert src.getitems([150_000])["x"].tolist() == [1.0]
    fs.pipe("tables/pinned/big.parquet", big_parquet(tmp_path / "big.parquet", 2.0))
    with pytest.raises(fl.FormatError, match="changed since it was opened") as info:
        src.getitems(np.arange(60_000, 300_000, 20_000))  # groups not read yet
    assert info.value.path == "s3://tables/pinned/big.parquet"


def test_workers_open_the_s3_parquet_files_themselves(s3):
    src = fl.sources.parquet("s3://tables/*.parquet", storage_options=s3.options())
    seen = []
    for batch in fl.Loader(src, 128, seed=3, workers=2):
        seen.extend(batch.y[: batch.meta.size].tolist())
    assert sorted(seen) == [2 * k for k in range(N)]
