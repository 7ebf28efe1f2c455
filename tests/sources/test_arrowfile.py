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


def buffer_at(path: str, k: int, column: str, i: int) -> int:
    """Where buffer ``i`` of ``column`` in record batch ``k`` lies in the file."""
    with pa.memory_map(path) as mm:
        base = mm.read_buffer(1).address
        return ipc.open_file(mm).get_record_batch(k).column(column).buffers()[i].address - base


def poke(path: str, at: int, data: bytes) -> None:
    with open(path, "r+b") as f:
        f.seek(at)
        f.write(data)


@pytest.mark.parametrize(
    "column, row, value",
    [
        ("s", 5, 1 << 30),  # a string's end far past the strings' bytes
        ("v", 7, -3),  # a list's start below 0 and below the one before
        ("b", 300, 0),  # the last end before the ends that precede it
    ],
)
def test_corrupt_offsets_in_a_record_batch_are_a_format_error_naming_it(path, column, row, value):
    """IPC has no checksums: offsets flipped on disk reached numpy (an IndexError, a
    negative repeat, an allocation of gigabytes) unless the batch is validated at open."""
    poke(path, buffer_at(path, 2, column, 1) + 4 * row, np.int32(value).tobytes())
    with pytest.raises(fl.FormatError, match=r"t\.arrow: record batch 2: .*does not validate"):
        fl.sources.arrow(path)


def test_bytes_of_a_string_column_that_are_not_utf8_are_a_format_error(path):
    poke(path, buffer_at(path, 1, "s", 2) + 1, b"\xff")
    with pytest.raises(fl.FormatError, match=r"t\.arrow: record batch 1: .*'s'"):
        fl.sources.arrow(path)


def test_a_corrupt_column_the_record_leaves_out_is_not_read(path):
    poke(path, buffer_at(path, 2, "v", 1) + 4 * 7, np.int32(-3).tobytes())
    assert fl.sources.arrow(path, columns=["x", "s"]).getitems([650])["x"].tolist() == [650.0]


def test_a_file_written_over_in_place_while_open_is_a_format_error_not_new_rows(tmp_path):
    """The source's columns are views of the map: a file written over in place would
    hand out the new version's rows (or a mix). The next read is refused, naming the
    file, in this process and in a worker's copy (which maps the file again)."""
    import os

    p = write_file(tmp_path / "w.arrow", table())
    src = fl.sources.arrow(p)
    assert src.getitems([3])["x"].tolist() == [3.0]
    before = os.stat(p)
    shifted = table().set_column(0, "x", pa.array(np.arange(N, dtype=np.float32) + 0.5))
    new = Path(write_file(tmp_path / "new.arrow", shifted)).read_bytes()
    assert len(new) == before.st_size
    poke(p, 0, new)  # the same inode and size; a moment later (the clock's tick made sure)
    os.utime(p, ns=(before.st_atime_ns, before.st_mtime_ns + 1_000_000_000))
    with pytest.raises(fl.FormatError, match=r"w\.arrow: .*written over in place"):
        src.getitems([3])
    with pytest.raises(fl.FormatError, match=r"w\.arrow: .*written over in place"):
        next(iter(fl.Loader(src, 10, workers=0)))
    with pytest.raises(fl.FormatError, match=r"w\.arrow: .*written over in place"):
        pickle.loads(pickle.dumps(src))


def test_a_file_replaced_while_open_reads_on_as_it_was(tmp_path):
    """A rename over the file (as writers should) leaves the open source its old rows;
    a copy made after it (a worker's) is refused, as it would read the new file."""
    import os

    p = write_file(tmp_path / "r.arrow", table())
    src = fl.sources.arrow(p)
    os.replace(write_file(tmp_path / "new.arrow", table(start=5)), p)
    check_rows(src.getitems(np.array([1, 999])), np.array([1, 999]))
    with pytest.raises(fl.FormatError, match=r"r\.arrow: .*another at its path"):
        pickle.loads(pickle.dumps(src))


TRUNCATE_SCRIPT = """
import os, sys, numpy as np, feedline as fl
src = fl.sources.arrow(sys.argv[1])
src.getitems(np.array([0, len(src) - 1]))
os.truncate(sys.argv[1], 4096)  # in place, under the map (pages past the end: SIGBUS)
for attempt in range(2):
    try:
        src.getitems(np.array([0, len(src) - 1]))
    except fl.FormatError as e:
        assert e.path == sys.argv[1] and "truncated" in str(e), str(e)
    else:
        raise SystemExit("read a truncated file without an error")
print("ok")
"""


def test_a_file_truncated_in_place_under_the_source_is_a_format_error_not_sigbus(tmp_path):
    import os
    import subprocess
    import sys

    p = write_file(tmp_path / "t.arrow", table(20_000), chunk=5_000)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.run(
        [sys.executable, "-c", TRUNCATE_SCRIPT, p],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", (
        proc.returncode,
        proc.stderr[-2000:],
    )


def test_a_string_that_is_not_utf8_is_a_format_error_naming_its_batch_and_row(tmp_path):
    raw = [f"row {k}".encode() for k in range(300)]
    raw[123] = b"bad \xff\xfe"
    s = pa.array(raw, pa.binary()).view(pa.string())  # pyarrow does not validate
    p = write_file(tmp_path / "u.arrow", pa.table({"s": s}), chunk=100)
    with pytest.raises(fl.FormatError, match=r"u\.arrow: record batch 1: column 's' row 123 "):
        fl.sources.arrow(p)
