"""``feedline bench FILE`` (issue 20, part 4): the loader over the user's own file, its
passes, its stats and numpy's gather of the same batches, in one run."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import numpy as np
import pytest

import feedline as fl
from feedline.cli import main


class Row(fl.Record):
    x = fl.field((8,), "float32")
    y = fl.field((), "int64")


@pytest.fixture
def flr(tmp_path):
    path = tmp_path / "rows.flr"
    fl.recfile.write(path, Row, {"x": np.ones((1000, 8), np.float32), "y": np.arange(1000)})
    return path


def test_bench_on_a_file_prints_its_passes_its_stats_and_numpy_beside_them(flr, capsys):
    assert main(["bench", str(flr), "--batch", "64", "--passes", "2", "--threads", "1"]) == 0
    out = capsys.readouterr().out
    assert "1,000 rows of Row (x, y); batches of 64, workers 0, threads 1" in out
    assert re.search(r"pass 0: [\d,]+ rows/s \(the first", out)
    assert re.search(r"pass 1: [\d,]+ rows/s", out)
    assert "32 batches, 2,000 rows" in out  # both passes, every row once a pass
    assert re.search(r"numpy's gather of the same batches: [\d,]+ rows/s; .* is [\d.]+x", out)


def _order_over_two_files(tmp_path):
    paths = []
    for k, n in enumerate((600, 250)):
        paths.append(tmp_path / f"part{k}.flr")
        y = np.arange(n) + 10_000 * k
        fl.recfile.write(paths[-1], Row, {"x": np.ones((n, 8), np.float32), "y": y})
    with fl.recfile.open(paths[0]) as a, fl.recfile.open(paths[1]) as b:
        seq = fl.Seq.mix(
            [fl.Seq.source(a).shuffle(1), (fl.Seq.source(b), fl.Schedule.delayed(0.5))]
        )
        config = tmp_path / "order.json"
        config.write_text(seq.to_json())
    return config, paths


def test_bench_on_an_order_configuration_reads_its_sources_files(tmp_path, capsys):
    config, paths = _order_over_two_files(tmp_path)
    args = ["bench", str(config), "--source", str(paths[0]), "--source", str(paths[1])]
    assert main([*args, "--batch", "50", "--passes", "2", "--threads", "1"]) == 0
    out = capsys.readouterr().out
    assert "850 rows in the order over 2 files of Row (x, y); batches of 50" in out
    assert re.search(r"pass 1: [\d,]+ rows/s", out)
    assert "34 batches, 1,700 rows" in out  # both passes, every row of both files once a pass
    assert re.search(r"numpy's gather of the same batches: [\d,]+ rows/s; .* is [\d.]+x", out)


def test_bench_on_an_order_needs_a_file_for_each_source(tmp_path, capsys):
    config, paths = _order_over_two_files(tmp_path)
    assert main(["bench", str(config), "--source", str(paths[0])]) != 0
    err = capsys.readouterr().err
    assert "has 2 sources: give each one's file" in err and "(found 1)" in err
    assert main(["bench", str(paths[0]), "--source", str(paths[1])]) != 0
    assert "--source FILE goes with an order configuration" in capsys.readouterr().err


def test_bench_on_a_manifest_shuffles_its_shards_as_one(tmp_path, capsys):
    from feedline.formats.manifest import write_manifest

    paths = []
    for k in range(12):
        paths.append(tmp_path / f"shard-{k:02d}.flr")
        y = np.arange(40 + k) + 1_000 * k
        fl.recfile.write(paths[-1], Row, {"x": np.ones((40 + k, 8), np.float32), "y": y})
    write_manifest(tmp_path / "manifest.json", paths)
    args = ["bench", str(tmp_path / "manifest.json"), "--batch", "32", "--passes", "2"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "546 rows in the order over 12 files of Row (x, y); batches of 32" in out
    assert "36 batches, 1,092 rows" in out  # both passes, every row of every shard once a pass
    assert re.search(r"numpy's gather of the same batches: [\d,]+ rows/s; .* is [\d.]+x", out)
    assert main([*args, "--source", str(paths[0])]) != 0
    assert "not a manifest" in capsys.readouterr().err


def test_bench_with_workers_and_a_parquet_file(tmp_path, capsys):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"a": np.arange(300), "b": np.arange(300) * 0.5}), path)
    assert main(["bench", str(path), "--batch", "50", "--passes", "1", "--workers", "2"]) == 0
    out = capsys.readouterr().out
    assert "300 rows" in out and "6 batches, 300 rows" in out


def test_bench_refuses_a_file_it_cannot_read(tmp_path, capsys):
    path = tmp_path / "notes.txt"
    path.write_text("hello")
    assert main(["bench", str(path)]) != 0
    assert "feedline bench FILE takes" in capsys.readouterr().err


def test_bench_compares_like_with_like():
    """The first pass beside numpy's first over a fresh opening, the later passes'
    median beside numpy's later ones: a loader as fast as numpy in each reads 1.00x in
    each (the mean of its passes, the first among them, against numpy's best said 0.75x)."""
    from feedline.cli._bench_file import compared

    n = 1_000_000
    line = compared(n, [2.0, 1.0, 1.0], 2.0, [1.0, 1.1])
    assert "numpy's gather of the same batches: 952,381 rows/s" in line  # 1.05 s, the median
    assert "later passes' median is 1.05x that" in line
    assert "first pass is 1.00x numpy's first (500,000 rows/s over a fresh opening)" in line
    one = compared(n, [4.0], 2.0, [1.0])
    assert "first pass is 0.50x numpy's first" in one and "later" not in one


def test_bench_runs_numpy_over_a_fresh_opening_first(flr, monkeypatch, capsys):
    from feedline.cli import _bench_file

    opened = []
    real = _bench_file.open_source

    def counting(path):
        opened.append(path)
        return real(path)

    monkeypatch.setattr(_bench_file, "open_source", counting)
    assert main(["bench", str(flr), "--batch", "100", "--passes", "3", "--threads", "1"]) == 0
    assert opened == [str(flr), str(flr)]  # the loader's, then numpy's own
    out = capsys.readouterr().out
    assert re.search(r"later passes' median is [\d.]+x that, its first pass is [\d.]+x", out)


class Doc(fl.Record, dims={"T": None}):
    tokens = fl.field("T", "int32")
    points = fl.field(("T", 3), "float32")
    title = fl.field((), "str")


def _docs(n):
    rng = np.random.default_rng(0)
    lengths = rng.integers(0, 30, n)
    return {
        "tokens": [np.arange(k, dtype=np.int32) for k in lengths],
        "points": [np.full((k, 3), k, np.float32) for k in lengths],
        "title": ["t" * int(k % 5) for k in lengths],
    }


def test_bench_on_a_ragged_file_pads_numpys_batches_as_the_loader_does(tmp_path, capsys):
    from feedline.cli._bench_file import _numpy_padded

    path = tmp_path / "docs.flr"
    fl.recfile.write(path, Doc, _docs(500))
    assert main(["bench", str(path), "--batch", "50", "--passes", "2"]) == 0
    out = capsys.readouterr().out
    assert "500 rows of Doc (tokens, points, title)" in out and "20 batches, 1,000 rows" in out
    assert re.search(r"numpy's gather of the same batches: [\d,]+ rows/s", out)
    # the baseline does the loader's work: the same padded rows, element for element
    with fl.recfile.open(path) as f:
        recs = np.array([7, 0, 499, 3, 3])
        batch = f.getitems(recs)
        for name in ("tokens", "points"):
            lengths = np.diff(batch[name].offsets)
            got = _numpy_padded(f.columns[name], recs)
            padded = batch[name].padded(
                len(recs), {0: int(lengths.max()) // (3 if name == "points" else 1)}
            )
            assert np.array_equal(got, padded.reshape(len(recs), -1)), name


def test_bench_says_when_the_loaders_first_pass_read_the_file_from_the_disk(tmp_path, capsys):
    """A file out of the page cache is read from the disk by the loader's first pass, and
    numpy's first pass, after it, finds it cached: the first passes are then not like
    with like, and the comparison says so (it printed 0.24x numpy's first on a 1.5 GB
    file read back from the disk, and nothing else)."""
    from feedline.cli._bench_file import cached_share

    path = tmp_path / "cold.flr"
    n = 20_000
    fl.recfile.write(path, Row, {"x": np.ones((n, 8), np.float32), "y": np.arange(n)})
    with open(path, "rb") as f:
        os.fsync(f.fileno())
        os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
    share = cached_share([str(path)])
    if share is None or share > 0.5:
        pytest.skip(f"this filesystem keeps the file in memory (page cache share {share})")
    assert main(["bench", str(path), "--batch", "500", "--passes", "2", "--threads", "1"]) == 0
    out = capsys.readouterr().out
    m = re.search(
        r"the files were (\d+)% in the page cache before the loader's first pass "
        r"and (\d+)% before numpy's",
        out,
    )
    assert m is not None, out
    assert int(m.group(1)) < int(m.group(2))
    assert "the loader's first pass read the rest from the disk" in out


def test_bench_says_nothing_of_the_page_cache_where_both_first_passes_found_it_alike():
    from feedline.cli._bench_file import cached_share, compared

    line = compared(1000, [1.0, 1.0], 1.0, [1.0], (0.98, 1.0))
    assert "page cache" not in line
    line = compared(1000, [1.0, 1.0], 1.0, [1.0], (None, 1.0))
    assert "page cache" not in line
    line = compared(1000, [2.0], 1.0, [1.0], (0.25, 1.0))
    assert line.endswith(
        "first pass is 0.50x numpy's first (1,000 rows/s over a fresh opening); but the files "
        "were 25% in the page cache before the loader's first pass and 100% before numpy's: "
        "the loader's first pass read the rest from the disk, numpy's did not (run again to "
        "compare the first passes with the files cached)"
    )
    assert cached_share([]) is None
    assert cached_share(["s3://bucket/no-such-file.flr"]) is None


def test_the_page_cache_share_of_odd_paths_is_none_and_never_waits(tmp_path):
    """A FIFO (whose open waits for a writer), a directory, a device: None, at once; a
    sparse file of 64 GB: asked a window at a time (a vector of a byte a page for the
    whole file was 2 GB for 4 TB)."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    code = (
        "from feedline.cli._bench_file import cached_share\n"
        f"print(cached_share([{str(fifo)!r}]), cached_share([{str(tmp_path)!r}]),"
        " cached_share(['/dev/zero']))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.stdout.split() == ["None", "None", "None"], done.stderr
    from feedline.cli._bench_file import cached_share

    sparse = tmp_path / "sparse.bin"
    with open(sparse, "wb") as f:
        f.truncate(64 << 30)
    assert cached_share([str(sparse)]) == 0.0
