"""Atomic writes (exceptions, SIGKILL) and shared read handles (counting, bounds, threads)."""

from __future__ import annotations

import os
import pickle
import select
import signal
import stat
import subprocess
import sys
import textwrap
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import feedline as fl
from feedline._base.files import atomic_write
from feedline.formats._io import SharedFile


class Big(fl.Record, dims={"D": 64}):
    """64 features and a label."""

    x = fl.field("D", "float32")
    y = fl.field((), "int64", domain=fl.Index(1 << 40))


def big_columns(n: int, base: int = 0) -> dict[str, np.ndarray]:
    i = np.arange(base, base + n)
    return {"x": np.repeat(i[:, None], 64, axis=1).astype(np.float32), "y": i}


def big_items(n: int, fail_at: int | None = None, exc: BaseException | None = None):
    for i in range(n):
        if i == fail_at:
            raise exc if exc is not None else RuntimeError(f"the source failed at item {i}")
        yield {"x": np.full(64, i, np.float32), "y": i}


def listing(directory) -> list[str]:
    return sorted(os.listdir(directory))


def fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.fixture
def old(tmp_path):
    """A valid .flr already at the target, and its bytes."""
    path = tmp_path / "data.flr"
    fl.recfile.write(path, Big, big_columns(10))
    return path, path.read_bytes()


def assert_untouched(path, before: bytes) -> None:
    assert path.read_bytes() == before
    assert listing(path.parent) == [path.name]  # no temporary, no spool
    with fl.recfile.open(path) as f:
        f.verify()


# -- atomic_write -------------------------------------------------------------------------


def test_atomic_write_writes_a_hidden_temporary_beside_the_target_then_renames(tmp_path):
    target = tmp_path / "out.bin"
    target.write_bytes(b"old")
    with atomic_write(target) as f:
        f.write(b"new")
        during = [n for n in listing(tmp_path) if n != "out.bin"]
        assert len(during) == 1 and during[0].startswith(".out.bin.")
        assert during[0].endswith(".tmp")
        assert target.read_bytes() == b"old"  # not replaced before the end
    assert target.read_bytes() == b"new"
    assert listing(tmp_path) == ["out.bin"]


def test_a_written_file_gets_the_mode_a_plain_write_gives_or_the_replaced_files(tmp_path):
    old_mask = os.umask(0o027)
    try:
        (tmp_path / "plain").write_bytes(b"")
        fl.ndf.save(tmp_path / "new.ndf", np.zeros((2, 2)))
        with atomic_write(tmp_path / "new.bin") as f:
            f.write(b"x")
    finally:
        os.umask(old_mask)
    mode = stat.S_IMODE(os.stat(tmp_path / "plain").st_mode)
    assert mode == 0o640
    assert stat.S_IMODE(os.stat(tmp_path / "new.ndf").st_mode) == mode  # not mkstemp's 0600
    assert stat.S_IMODE(os.stat(tmp_path / "new.bin").st_mode) == mode
    os.chmod(tmp_path / "new.ndf", 0o664)
    fl.ndf.save(tmp_path / "new.ndf", np.ones((2, 2)))
    assert stat.S_IMODE(os.stat(tmp_path / "new.ndf").st_mode) == 0o664  # kept on replace


@pytest.mark.parametrize("exc", [RuntimeError("boom"), KeyboardInterrupt(), OSError("disk")])
@pytest.mark.parametrize("exists", [True, False])
def test_an_exception_inside_atomic_write_leaves_the_old_file_and_no_temporary(
    tmp_path, exc, exists
):
    target = tmp_path / "out.bin"
    if exists:
        target.write_bytes(b"old")
    with pytest.raises(type(exc)), atomic_write(target) as f:
        f.write(b"partial" * 1000)
        raise exc
    assert listing(tmp_path) == (["out.bin"] if exists else [])
    if exists:
        assert target.read_bytes() == b"old"


# -- writers that fail midway ----------------------------------------------------------------


@pytest.mark.parametrize("exc", [None, KeyboardInterrupt(), MemoryError()])
@pytest.mark.parametrize("at", [0, 10, 9000])  # before, inside and after the first chunk
def test_a_stream_that_raises_midway_leaves_the_old_file_and_no_temporary(old, exc, at):
    path, before = old
    with pytest.raises(type(exc) if exc is not None else RuntimeError):
        fl.recfile.write(path, Big, big_items(20_000, fail_at=at, exc=exc))
    assert_untouched(path, before)


def test_a_stream_that_raises_leaves_nothing_when_there_was_no_file(tmp_path):
    with pytest.raises(RuntimeError):
        fl.recfile.write(tmp_path / "new.flr", Big, big_items(9000, fail_at=8999))
    assert listing(tmp_path) == []


def writers(path):
    """Each writer, writing a new version of ``path``'s data."""
    return {
        "columns": lambda: fl.recfile.write(path, Big, big_columns(50, base=7)),
        "stream": lambda: fl.recfile.write(path, Big, big_items(6000)),
        "chunks": lambda: fl.recfile.write_chunks(path, Big, [big_columns(5), big_columns(5)]),
    }


@pytest.mark.parametrize("writer", ["columns", "stream", "chunks"])
@pytest.mark.parametrize("broken", ["fsync", "replace"])
def test_a_failing_fsync_or_rename_leaves_the_old_file_and_no_temporary(
    old, monkeypatch, writer, broken
):
    path, before = old

    def fail(*args, **kwargs):
        raise OSError(f"simulated {broken} failure")

    monkeypatch.setattr(os, broken, fail)
    with pytest.raises(OSError, match="simulated"):
        writers(path)[writer]()
    monkeypatch.undo()
    assert_untouched(path, before)


@pytest.mark.parametrize("broken", ["fsync", "replace"])
def test_a_failing_ndf_save_leaves_the_old_file_and_no_temporary(tmp_path, monkeypatch, broken):
    path = tmp_path / "data.ndf"
    fl.ndf.save(path, np.ones((3, 2)))
    before = path.read_bytes()
    monkeypatch.setattr(os, broken, lambda *a, **k: (_ for _ in ()).throw(OSError("simulated")))
    with pytest.raises(OSError, match="simulated"):
        fl.ndf.save(path, np.zeros((5, 2)))
    monkeypatch.undo()
    assert path.read_bytes() == before and listing(tmp_path) == ["data.ndf"]


def test_an_ndf_save_failing_after_its_first_chunk_leaves_the_old_file(tmp_path, monkeypatch):
    path = tmp_path / "data.ndf"
    fl.ndf.save(path, np.ones((3, 2)))
    before = path.read_bytes()

    class NumpyFailingOnTheSecondChunk:
        calls = 0

        def __getattr__(self, name):
            return getattr(np, name)

        def concatenate(self, *args, **kwargs):
            self.calls += 1
            if self.calls == 2:
                raise MemoryError("simulated, after the first chunk was written")
            return np.concatenate(*args, **kwargs)

    fake = NumpyFailingOnTheSecondChunk()
    monkeypatch.setattr(fl.ndf, "np", fake)
    with pytest.raises(MemoryError):
        fl.ndf.save(path, np.zeros((2500, 1024)))  # three chunks of 8 MB
    monkeypatch.undo()
    assert fake.calls == 2
    assert path.read_bytes() == before and listing(tmp_path) == ["data.ndf"]


# -- a writer killed with SIGKILL ------------------------------------------------------------
#
# A killed process runs no cleanup, so its hidden temporaries (".<target>.*.tmp" and
# ".<target>.*.<field>.spool") may remain beside the target. The tests assert only that
# the TARGET is never partial: it is the old file, or absent, or (if the writer finished
# before the kill) the complete new file. Cleaning the leftovers of killed writers is the
# job of the next write or of the user (feedline's writers do not remove other writers'
# temporaries today); the tests check the leftovers are recognisably named after the target.

CHILD = textwrap.dedent('''
    import os, sys, time
    import numpy as np
    import feedline as fl
    from feedline.formats import recfile

    mode, target, n = sys.argv[1], sys.argv[2], int(sys.argv[3])

    class Big(fl.Record, dims={"D": 64}):
        """64 features and a label."""
        x = fl.field("D", "float32")
        y = fl.field((), "int64", domain=fl.Index(1 << 40))

    def say(word):
        sys.stdout.write(word + "\\n")
        sys.stdout.flush()

    def hang(*args, **kwargs):
        say("hang")
        time.sleep(120)

    def items(slow):
        for i in range(n):
            if i == 5000:
                say("spooling")  # a whole chunk is in the spools
            if slow and i >= 5000:
                time.sleep(0.001)
            yield {"x": np.full(64, i, np.float32), "y": i}

    def half_copy(src, dst):
        dst.write(src.read(1 << 20))
        dst.flush()
        hang()

    if mode == "spool":  # killed while the items stream into the spools
        recfile.write(target, Big, items(slow=True))
    elif mode == "copy":  # killed while the spools are copied into the temporary
        from feedline.formats import _flr_write
        _flr_write._copy_spool = half_copy  # the writer calls it through its module
        recfile.write(target, Big, items(slow=False))
    elif mode == "fsync":  # killed with the temporary complete but not renamed
        os.fsync = hang
        i = np.arange(n)
        recfile.write(target, Big, {"x": np.zeros((n, 64), np.float32), "y": i})
    elif mode == "ndf":
        os.fsync = hang
        fl.ndf.save(target, np.zeros((n, 8)))
    elif mode == "free":  # killed at a random moment of an ordinary streamed write
        say("started")
        recfile.write(target, Big, items(slow=False))
        say("done")
''')


def run_and_kill(tmp_path, mode: str, target, n: int, marker: str, delay: float = 0.0) -> str:
    """Start a child writing ``target``, wait for ``marker``, sleep ``delay``, SIGKILL it."""
    script = tmp_path.parent / f"{tmp_path.name}-child.py"
    script.write_text(CHILD)
    proc = subprocess.Popen(
        [sys.executable, str(script), mode, str(target), str(n)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 30
        line = b""
        while marker.encode() not in line:
            wait = max(0.0, deadline - time.monotonic())
            ready, _, _ = select.select([proc.stdout], [], [], wait)
            if not ready:
                raise AssertionError(f"the child never said {marker!r}")
            line = proc.stdout.readline()
            if not line and proc.poll() is not None:
                raise AssertionError(f"the child exited: {proc.stderr.read().decode()}")
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
        proc.stderr.close()
    return "killed" if proc.returncode == -signal.SIGKILL else "finished"


def check_target(target, before: bytes | None, complete_rows: int | None = None) -> None:
    """The target is the old file, absent, or the complete new file; never partial."""
    leftovers = [n for n in listing(target.parent) if n != target.name]
    for name in leftovers:
        assert name.startswith(f".{target.name}.") and name.endswith((".tmp", ".spool")), name
    if not target.exists():
        assert before is None, "the old file vanished"
        return
    data = target.read_bytes()
    if data != before:
        assert complete_rows is not None, "the target changed though the writer never finished"
    opener = fl.ndf.open if target.suffix == ".ndf" else fl.recfile.open
    with opener(target) as f:
        if hasattr(f, "verify"):
            f.verify()
        if data != before:
            assert len(f) == complete_rows


@pytest.mark.parametrize(
    "mode, n, marker",
    [
        ("spool", 200_000, "spooling"),
        ("copy", 20_000, "hang"),
        ("fsync", 20_000, "hang"),
        ("ndf", 20_000, "hang"),
    ],
)
@pytest.mark.parametrize("exists", [True, False], ids=["old-file", "no-file"])
def test_a_writer_killed_midway_leaves_the_old_file_or_nothing(tmp_path, mode, n, marker, exists):
    target = tmp_path / ("data.ndf" if mode == "ndf" else "data.flr")
    before = None
    if exists:
        if mode == "ndf":
            fl.ndf.save(target, np.ones((4, 8)))
        else:
            fl.recfile.write(target, Big, big_columns(10))
        before = target.read_bytes()
    assert run_and_kill(tmp_path, mode, target, n, marker) == "killed"
    check_target(target, before)
    if mode == "copy":  # the temporary was being written when the child died
        assert any(name.endswith(".tmp") for name in listing(tmp_path))
    # A later write to the same target is not disturbed by the leftovers.
    if mode != "ndf":
        fl.recfile.write(target, Big, big_columns(3))
        with fl.recfile.open(target) as f:
            f.verify()
            assert len(f) == 3


def test_writers_killed_at_random_moments_never_leave_a_partial_target(tmp_path):
    rng = np.random.default_rng(2024)
    target = tmp_path / "data.flr"
    fl.recfile.write(target, Big, big_columns(10))
    n = 30_000  # about 0.35 s of writing: some kills land midway, some after the rename
    for delay in rng.uniform(0.0, 0.5, size=6):
        before = target.read_bytes()
        run_and_kill(tmp_path, "free", target, n, "started", float(delay))
        check_target(target, before, complete_rows=n)


# -- SharedFile -------------------------------------------------------------------------------


@pytest.fixture
def blob(tmp_path):
    data = np.random.default_rng(5).integers(0, 256, 100_000, dtype=np.uint8).tobytes()
    path = tmp_path / "blob.bin"
    path.write_bytes(data)
    return path, data


def test_the_descriptor_stays_open_until_the_last_share_closes(blob):
    path, data = blob
    base = fds()
    f = SharedFile(path)
    assert fds() == base + 1
    g = f.share()
    h = g.share()
    assert fds() == base + 1  # shares use the one descriptor
    f.close()
    f.close()  # idempotent: gives up its share once
    assert f.closed and fds() == base + 1
    assert g.pread(10, 5) == data[5:15]
    g.close()
    assert fds() == base + 1
    assert h.pread(4, len(data) - 4) == data[-4:]
    h.close()
    assert fds() == base
    with pytest.raises(ValueError):
        h.pread(1, 0)
    with pytest.raises(ValueError):
        f.share()


def test_a_pickled_handle_reopens_its_own_descriptor(blob):
    path, data = blob
    base = fds()
    with SharedFile(path) as f:
        g = pickle.loads(pickle.dumps(f))
        assert fds() == base + 2
    assert fds() == base + 1
    assert g.pread(3, 0) == data[:3]
    g.close()
    assert fds() == base


@pytest.mark.parametrize("opener", ["ndf", "flr"])
def test_file_handles_share_one_descriptor_and_close_with_the_last_share(tmp_path, opener):
    if opener == "ndf":
        path = tmp_path / "d.ndf"
        fl.ndf.save(path, np.ones((100, 3)))
        open_ = fl.ndf.open
    else:
        path = tmp_path / "d.flr"
        fl.recfile.write(path, Big, big_columns(100))
        open_ = fl.recfile.open
    base = fds()
    f = open_(path)
    opened = fds()
    assert opened > base
    g = f.share()
    assert fds() == opened
    f.close()
    assert fds() == opened and len(g) == 100
    assert g.getitems([99])["x"].shape[0] == 1
    g.close()
    assert fds() == base


@pytest.mark.parametrize("opener", ["ndf", "flr"])
def test_a_loader_keeps_reading_after_the_caller_closes_its_handle(tmp_path, opener):
    if opener == "ndf":
        path = tmp_path / "d.ndf"
        fl.ndf.save(path, np.arange(300.0).reshape(100, 3))
        f = fl.ndf.open(path)
    else:
        path = tmp_path / "d.flr"
        fl.recfile.write(path, Big, big_columns(100))
        f = fl.recfile.open(path)
    loader = fl.Loader(f, 16, seed=1)
    f.close()  # gives up the caller's share only: the loader holds its own
    seen = np.concatenate([b.meta.record_indices for b in loader])
    assert sorted(seen.tolist()) == list(range(100))
    loader.close()


@pytest.mark.parametrize(
    "size, offset",
    [
        (1, 100_000),
        (10, 99_995),
        (1, -1),
        (-1, 0),
        (2**40, 0),
        (1, 2**63),
        (100_001, 0),
    ],
)
def test_reads_outside_the_file_are_a_format_error(blob, size, offset):
    path, _ = blob
    with SharedFile(path) as f:
        with pytest.raises(fl.FormatError) as info:
            f.pread(size, offset, "the thing")
        assert info.value.path == os.fspath(path) and info.value.offset == offset
        assert "the thing" in str(info.value)


def test_reads_up_to_the_end_of_the_file_work(blob):
    path, data = blob
    with SharedFile(path) as f:
        assert f.pread(0, 100_000) == b""
        assert f.pread(100_000, 0) == data
        assert f.size == 100_000


@pytest.mark.parametrize(
    "dtype, offset, count",
    [
        ("<f8", 0, 12_501),
        ("<u4", 99_998, 1),
        ("<u1", -1, 1),
        ("<f8", 2**62, 1),
        ("<u1", 0, 2**62),
    ],
)
def test_arrays_outside_the_file_are_a_format_error(blob, dtype, offset, count):
    path, _ = blob
    with SharedFile(path) as f, pytest.raises(fl.FormatError):
        f.array(dtype, offset, count)


def test_arrays_are_read_only_views_of_the_bytes(blob):
    path, data = blob
    with SharedFile(path) as f:
        a = f.array("<u2", 2, 10, (5, 2))
        assert a.shape == (5, 2) and not a.flags.writeable
        assert a.tobytes() == data[2:22]
        assert f.array("<f8", 100_000, 0).shape == (0,)
        del a


def test_reads_from_several_threads_at_once_are_correct(blob, tmp_path):
    path, data = blob
    x = np.random.default_rng(1).standard_normal((5000, 7))
    fl.ndf.save(tmp_path / "t.ndf", x[:, :5], x[:, 5:])
    cols = big_columns(5000)
    fl.recfile.write(tmp_path / "t.flr", Big, cols)
    shared = SharedFile(path)
    nd = fl.ndf.open(tmp_path / "t.ndf")
    rf = fl.recfile.open(tmp_path / "t.flr")

    def work(seed: int) -> int:
        rng = np.random.default_rng(seed)
        for _ in range(300):
            off = int(rng.integers(0, len(data)))
            size = int(rng.integers(0, min(4096, len(data) - off) + 1))
            assert shared.pread(size, off) == data[off : off + size]
            idx = rng.integers(0, 5000, 32)
            X, Y = nd.rows(idx)
            assert np.array_equal(X, x[idx, :5]) and np.array_equal(Y, x[idx, 5:])
            batch = rf.getitems(idx)
            assert np.array_equal(batch["x"], cols["x"][idx])
            assert np.array_equal(batch["y"], cols["y"][idx])
        return seed

    with ThreadPoolExecutor(8) as pool:
        assert sorted(pool.map(work, range(8))) == list(range(8))
    shared.close()
    nd.close()
    rf.close()


def test_the_next_write_removes_the_temporaries_of_a_killed_writer(tmp_path):
    import fcntl

    from feedline._base.files import atomic_write

    target = tmp_path / "data.flr"
    stale = tmp_path / ".data.flr.dead1.tmp"
    spool = tmp_path / ".data.flr.dead2.x.spool"
    live = tmp_path / ".data.flr.live.tmp"
    fresh = tmp_path / ".data.flr.fresh.tmp"
    other = tmp_path / ".other.flr.dead.tmp"
    for p in (stale, spool, live, fresh, other):
        p.write_bytes(b"partial")
    for p in (stale, spool, live, other):
        os.utime(p, (0, 0))  # long ago
    with open(live, "rb") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # a writer still at work holds its lock
        with atomic_write(target) as f:
            f.write(b"new")
    assert target.read_bytes() == b"new"
    assert not stale.exists() and not spool.exists()
    assert live.exists() and fresh.exists() and other.exists()


# -- the file system around a file ----------------------------------------------------------


def _nndataset(path) -> None:
    fl.nndataset.write(
        path,
        fl.nndataset.Build({"size": 9}, "c.txt", "", 2, train_docs=[[1, 2, 3] * 400, [4, 5] * 300]),
    )


WRITERS = {
    "flr": lambda p: fl.recfile.write(p, Big, big_columns(200)),
    "flr-stream": lambda p: fl.recfile.write(p, Big, big_items(200)),
    "ndf": lambda p: fl.ndf.save(p, np.ones((300, 4)), np.zeros((300, 1))),
    "nndataset": _nndataset,
}
OPENERS = {"flr": fl.recfile.open, "ndf": fl.ndf.open, "nndataset": fl.nndataset.open}


class _Hang(Exception):
    pass


def _no_hang(seconds: float):
    """Fail (not hang) a call that would block: SIGALRM interrupts a blocking open."""

    def alarm(signum, frame):
        raise _Hang(f"blocked for {seconds} s")

    previous = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    return previous


@pytest.mark.parametrize("opener", list(OPENERS))
@pytest.mark.parametrize("kind", ["fifo", "directory"])
def test_a_path_that_is_not_a_regular_file_is_a_format_error_naming_it(tmp_path, opener, kind):
    path = tmp_path / f"thing.{opener}"
    if kind == "fifo":
        os.mkfifo(path)  # opening it for reading would wait for a writer forever
    else:
        path.mkdir()
    previous = _no_hang(5.0)
    try:
        with pytest.raises(fl.FormatError) as info:
            OPENERS[opener](path)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    word = "FIFO" if kind == "fifo" else "directory"
    assert info.value.path == str(path) and str(path) in str(info.value)
    assert "regular file" in str(info.value) and word in str(info.value)


TRUNCATE_SCRIPT = textwrap.dedent("""
    import os, sys, numpy as np, feedline as fl
    fmt, path = sys.argv[1], sys.argv[2]
    f = {"flr": fl.recfile.open, "ndf": fl.ndf.open, "nndataset": fl.nndataset.open}[fmt](path)
    read = {"flr": lambda: f.getitems(np.array([0, len(f) - 1])),
            "ndf": lambda: f.rows(np.array([0, len(f) - 1])),
            "nndataset": lambda: f.load_text("train").token_flow[-5:]}[fmt]
    read()
    os.truncate(path, 100)  # in place, under the open reader (pages past the end: SIGBUS)
    for attempt in (read, lambda: fl.text.Windows(f, 16).getitems([0, 80]) if fmt ==
                    "nndataset" else read()):
        try:
            attempt()
        except fl.FormatError as e:
            assert e.path == path and e.offset == 100, (e.path, e.offset)
            assert "truncated" in str(e), str(e)
        else:
            raise SystemExit("read a truncated file without an error")
    print("ok")
""")


@pytest.mark.parametrize("fmt", ["flr", "ndf", "nndataset"])
def test_a_file_truncated_in_place_under_a_reader_is_a_format_error_not_sigbus(tmp_path, fmt):
    path = tmp_path / f"data.{fmt}"
    WRITERS[fmt](path)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.run(
        [sys.executable, "-c", TRUNCATE_SCRIPT, fmt, str(path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", (
        proc.returncode,
        proc.stderr[-2000:],
    )


def _name_max(directory) -> int:
    return os.pathconf(directory, "PC_NAME_MAX")


@pytest.mark.parametrize("writer", list(WRITERS))
@pytest.mark.parametrize("extra", [0, 10])
def test_any_name_the_file_system_accepts_can_be_written(tmp_path, writer, extra):
    limit = _name_max(tmp_path)
    ext = ".nndataset" if writer == "nndataset" else f".{writer.split('-')[0]}"
    room = limit - len(ext) - extra
    name = "é" * (room // 2) + "x" * (room % 2) + ext  # 2 bytes a character
    assert len(os.fsencode(name)) == limit - extra
    path = tmp_path / name
    WRITERS[writer](path)
    assert listing(tmp_path) == [name]  # no temporary, no spool left
    with OPENERS[ext[1:]](path) as f:
        assert (f.info.num_docs if ext == ".nndataset" else len(f)) > 0
    WRITERS[writer](path)  # again, over the file: the temporaries still fit
    assert listing(tmp_path) == [name]


def test_two_long_names_with_the_same_start_get_distinct_temporaries(tmp_path):
    from feedline._base.files import _scratch_prefix

    limit = _name_max(tmp_path)
    a, b = ("x" * (limit - 6) + s + ".flr" for s in ("a", "b"))
    pa, pb = _scratch_prefix(str(tmp_path / a))[1], _scratch_prefix(str(tmp_path / b))[1]
    assert pa != pb and len(os.fsencode(pa)) <= limit - 40


DISK_FULL_SCRIPT = textwrap.dedent("""
    import os, resource, signal, sys, numpy as np, feedline as fl
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit: EFBIG
    resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 16, 1 << 16))
    writer, path = sys.argv[1], sys.argv[2]
    try:
        if writer == "flr":
            fl.recfile.write(path, fl.Dataset.from_arrays(x=np.zeros((1, 64))).record,
                             {"x": np.ones((4096, 64))})
        elif writer == "ndf":
            fl.ndf.save(path, np.ones((4096, 64)))
        else:
            fl.nndataset.write(path, fl.nndataset.Build({}, "c", "", 1,
                                                        train_docs=[list(range(20000))]))
    except OSError as e:
        assert e.filename == path and path in str(e), (e.filename, str(e))
        assert sorted(os.listdir(os.path.dirname(path))) == ["old"], os.listdir(
            os.path.dirname(path))
        print("ok")
    else:
        print("written")
""")


@pytest.mark.parametrize("writer", ["flr", "ndf", "nndataset"])
def test_a_disk_full_error_names_the_target_and_leaves_no_temporary(tmp_path, writer):
    target = tmp_path / "out"
    target.mkdir()
    (target / "old").write_bytes(b"x")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.run(
        [sys.executable, "-c", DISK_FULL_SCRIPT, writer, str(target / f"data.{writer}")],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-2000:]
