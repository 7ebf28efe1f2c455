"""Plain gathers by several threads, a chunk of batches at a time: the same batches as
one thread, batch by batch, whatever the number of threads, across resumes, with the
compiled kernels loaded or not; every test with the chunks copied by the compiled row
copies' C threads (``rowcopy``) and by numpy's takes on Python threads."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

import feedline as fl
from feedline._base import kernels as _kernels
from feedline.loader import _gather_ahead

from ._rows import fork_checking


class Row(fl.Record, dims={"D": 6}):
    """A small row: many chunks and several order blocks in a small file."""

    x = fl.field("D", "float32")
    y = fl.field((), "int64")


N = 150_001  # three order blocks of 64k positions, the last one short


@pytest.fixture(scope="module")
def flr(tmp_path_factory):
    path = tmp_path_factory.mktemp("ahead") / "rows.flr"
    x = np.random.default_rng(0).standard_normal((N, 6), dtype=np.float32)
    fl.recfile.write(path, Row, {"x": x, "y": np.arange(N, dtype=np.int64)})
    return path


@pytest.fixture(autouse=True)
def both_copies(copies):
    """Every test here with each way of copying chunks (conftest's ``copies``)."""
    return copies


@pytest.fixture
def small_chunks(monkeypatch):
    """Chunks of a few batches, so that a pass has dozens of them."""
    monkeypatch.setattr(_gather_ahead, "_CHUNK_BYTES", 20_000)


def stream(loader, batches=None) -> list[tuple[np.ndarray, ...]]:
    out = []
    for i, b in enumerate(loader):
        out.append((b.x.copy(), b.y.copy(), b.meta.positions.copy(), b.meta.record_indices))
        if batches is not None and i + 1 == batches:
            break
    return out


def stream_into(loader, batches=None) -> list[tuple[np.ndarray, ...]]:
    """``stream`` through ``next_into``: each batch written into the same arrays."""
    b = loader.batch_size
    out = {"x": np.empty((b, 6), np.float32), "y": np.empty(b, np.int64)}
    meta = {"positions": np.empty(b, np.int64), "record_indices": np.empty(b, np.int64)}
    got = []
    while batches is None or len(got) < batches:
        n = loader.next_into(out, meta=meta)
        if n == 0:
            break
        got.append((out["x"][:n].copy(), out["y"][:n].copy(), *(meta[k][:n].copy() for k in meta)))
    return got


def assert_same(a, b):
    assert len(a) == len(b)
    for p, q in zip(a, b):
        for u, v in zip(p, q):
            np.testing.assert_array_equal(u, v)


@pytest.mark.parametrize("threads", [2, 3, 4])
def test_streams_are_identical_for_any_number_of_threads(flr, small_chunks, threads):
    def passes(t):
        with fl.recfile.open(flr) as f, fl.Loader(f, 100, seed=5, threads=t) as loader:
            got = stream(loader) + stream(loader)  # two passes (reshuffled)
            loader.reset(seed=9)
            return got + stream(loader)

    one = passes(1)
    assert len(one) == 3 * (-(-N // 100))
    assert_same(passes(threads), one)


def test_the_batches_are_views_of_chunks_gathered_ahead(flr, small_chunks):
    with fl.recfile.open(flr) as f, fl.Loader(f, 100, seed=5, threads=2) as loader:
        assert loader.options.threads == 2
        ahead = loader._plan.ahead
        first = next(iter(loader))
        assert first.x.base is not None  # a view of its chunk
        ramp, even = ahead.starts
        assert ramp[1] == 100 and even[1] > 100  # a pass's first chunk is one batch
        rest = stream(loader)
    assert sorted(np.concatenate([first.y, *[b[1] for b in rest]]).tolist()) == list(range(N))


@pytest.mark.parametrize("saved, resumed", [(2, 1), (1, 3), (3, 2)])
def test_a_state_saved_with_some_threads_resumes_exactly_with_others(
    flr, small_chunks, saved, resumed
):
    with fl.recfile.open(flr) as f:
        with fl.Loader(f, 64, seed=2, threads=1) as loader:
            whole = stream(loader)
        with fl.Loader(f, 64, seed=2, threads=saved) as loader:
            head = stream(loader, batches=777)
            state = loader.state_dict()
        with fl.Loader(f, 64, seed=2, threads=resumed) as loader:
            loader.load_state_dict(state)
            tail = stream(loader)
    assert_same(head + tail, whole)


@pytest.mark.parametrize("into", [False, True], ids=["next", "next_into"])
def test_threads_sharing_a_loader_with_gather_threads_get_every_row_once(flr, small_chunks, into):
    with fl.recfile.open(flr) as f, fl.Loader(f, 50, seed=4, threads=2) as loader:
        reference = {int(b.meta.positions[0]): b.y.copy() for b in fl.Loader(f, 50, seed=4)}
        got: dict[int, np.ndarray] = {}
        lock = threading.Lock()

        def read():
            for _x, y, pos, _ in stream_into(loader) if into else stream(loader):
                with lock:
                    assert int(pos[0]) not in got
                    got[int(pos[0])] = y

        readers = [threading.Thread(target=read) for _ in range(3)]
        for t in readers:
            t.start()
        for t in readers:
            t.join()
    assert got.keys() == reference.keys()
    for k, y in reference.items():
        np.testing.assert_array_equal(got[k], y)


def test_writable_columns_are_gathered_batch_by_batch_so_writes_show(small_chunks):
    x = np.zeros((10_000, 4), dtype=np.float32)
    loader = fl.Loader(fl.Dataset.from_arrays(x=x), 100, threads=2)
    it = iter(loader)
    assert not next(it).x.any()
    x[:] = 1.0  # the caller's arrays, changed between batches
    assert all(b.x.all() for b in it)


@pytest.mark.parametrize("how", ["view", "owner", "buffer"])
def test_read_only_arrays_over_writable_memory_are_gathered_batch_by_batch(small_chunks, how):
    # flagged read-only, yet written through another reference (a read-only view of the
    # caller's array, or of a writable buffer through a read-only memoryview) or by
    # lifting the flag (an array owning its memory): as with one thread, the write shows
    # in the next batch
    x = np.zeros((10_000, 4), dtype=np.float32)
    raw = bytearray(x.tobytes())
    if how == "buffer":
        col = np.frombuffer(memoryview(raw).toreadonly(), np.float32).reshape(x.shape)
    else:
        col = x.view() if how == "view" else x
        col.flags.writeable = False
    loader = fl.Loader(fl.Dataset.from_arrays(x=col), 100, threads=2)
    it = iter(loader)
    # chunks of 1, 1, 2 and 4 batches: the fifth batch opens the fourth, the sixth is in it
    assert not any(next(it).x.any() for _ in range(5))
    if how == "owner":
        x.flags.writeable = True
    x[:] = 1.0
    raw[:] = x.tobytes()
    assert all(b.x.all() for b in it)


def test_a_file_mapped_read_only_is_gathered_in_chunks(flr, small_chunks, monkeypatch, copies):
    chunks = []
    real = _gather_ahead.GatherAhead._new
    monkeypatch.setattr(
        _gather_ahead.GatherAhead, "_new", lambda s, k, *a: chunks.append(k) or real(s, k, *a)
    )
    with fl.recfile.open(flr) as f, fl.Loader(f, 100, seed=3, threads=2) as loader:
        whole = stream(loader)
        # every chunk of the pass made once (a block's chunks, and no chunk twice)
        assert len(chunks) == len(set(chunks)) > N // 100 // 10
        assert all(
            (c.task is not None) is (copies == "compiled")
            for c in loader._plan.ahead.chunks.values()
        )
    assert_same(whole, stream(fl.Loader(fl.recfile.open(flr), 100, seed=3, threads=1)))


class Large(fl.Record, dims={"D": 600}):
    """A row of 2,408 bytes: past ``_LARGE_ROW``."""

    x = fl.field("D", "float32")
    y = fl.field((), "int64")


def test_large_rows_copied_by_c_go_in_smaller_chunks_with_the_same_stream(
    tmp_path, monkeypatch, copies
):
    # rows of 2 KB or more copied by C's threads: chunks of whole batches of at least
    # _LARGE_ROW_CHUNK_BYTES (measured faster there); numpy's takes keep _CHUNK_BYTES
    monkeypatch.setattr(_gather_ahead, "_CHUNK_BYTES", 40_000)
    monkeypatch.setattr(_gather_ahead, "_LARGE_ROW_CHUNK_BYTES", 20_000)
    n, b = 3_001, 4  # a batch of 9,632 bytes: chunks of 3 batches, or 5
    path = tmp_path / "large.flr"
    x = np.random.default_rng(1).standard_normal((n, 600), dtype=np.float32)
    fl.recfile.write(path, Large, {"x": x, "y": np.arange(n, dtype=np.int64)})
    with fl.recfile.open(path) as f, fl.Loader(f, b, seed=2, threads=2) as loader:
        got = [(t.x.copy(), t.y.copy()) for t in loader]
        starts = loader._plan.ahead.starts
    most = 3 if copies == "compiled" else 5  # batches a chunk
    assert starts[1][:3] == [0, most * b, 2 * most * b]  # a later block's chunks
    ramp = [0, 1, 2, 4, 4 + min(4, most), 4 + min(4, most) + most]  # the first block's
    assert starts[0][:6] == [r * b for r in ramp]
    with fl.recfile.open(path) as f:
        want = [(t.x.copy(), t.y.copy()) for t in fl.Loader(f, b, seed=2, threads=1)]
    assert_same(got, want)
    assert sorted(np.concatenate([y for _, y in got]).tolist()) == list(range(n))


def test_a_share_of_the_batches_is_gathered_batch_by_batch(flr, small_chunks):
    with fl.recfile.open(flr) as f:
        whole = stream(fl.Loader(f, 100, seed=3, threads=1))
        loader = fl.Loader(f, 100, seed=3, threads=2)
        loader.share_batches(1, 3)
        assert_same(stream(loader), whole[1::3])


def test_threads_is_checked():
    ds = fl.Dataset.from_arrays(x=np.zeros((4, 1)))
    with pytest.raises(ValueError, match="threads"):
        fl.Loader(ds, 2, threads=0)
    with pytest.raises(TypeError, match="threads"):
        fl.Loader(ds, 2, threads=1.5)
    assert fl.Loader(ds, 2).options.threads == _gather_ahead.default_threads()


def _digest(batches) -> str:
    h = hashlib.sha256()
    for b in batches:
        for a in b:
            h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()


def test_a_fresh_process_gives_the_loaded_kernels_batches_without_loading_them(flr, compiled_path):
    # A fresh interpreter's first pass takes the numpy path (the tabled rounds) and never
    # imports numba; this process has the kernels loaded: the batches are the same.
    code = textwrap.dedent(f"""
        import hashlib, sys
        import numpy as np
        import feedline as fl
        h = hashlib.sha256()
        with fl.recfile.open({str(flr)!r}) as f:
            for b in fl.Loader(f, 100, seed=11, threads=2):
                for a in (b.x, b.y, b.meta.positions, b.meta.record_indices):
                    h.update(np.ascontiguousarray(a).tobytes())
        print(h.hexdigest(), "numba" in sys.modules)
    """)
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True
    )
    digest, numba_loaded = done.stdout.split()
    assert numba_loaded == "False"
    assert _kernels.get() is not None
    with fl.recfile.open(flr) as f:
        here = stream(fl.Loader(f, 100, seed=11, threads=1))
    assert digest == _digest(here)


def test_the_numpy_and_compiled_paths_give_identical_batches(flr, compiled_path, monkeypatch):
    with fl.recfile.open(flr) as f:
        compiled = stream(fl.Loader(f, 128, seed=8, threads=2))
        monkeypatch.setitem(_kernels._state, "k", None)
        plain = stream(fl.Loader(f, 128, seed=8, threads=2))
    assert_same(plain, compiled)


def test_a_batch_kept_by_the_caller_is_never_overwritten(flr, small_chunks):
    # Chunk buffers are gathered into again once no batch views them: the batches a
    # caller keeps (every other one here) keep their rows through the passes after.
    with fl.recfile.open(flr) as f, fl.Loader(f, 100, seed=6, threads=2) as loader:
        kept, copies = [], []
        for i, b in enumerate(loader):
            if i % 2 == 0:
                kept.append(b)
                copies.append((b.x.copy(), b.y.copy()))
        for _ in range(2):
            for _b in loader:
                pass
        assert loader._plan.ahead.spare  # buffers were given back meanwhile
    for b, (x, y) in zip(kept, copies):
        np.testing.assert_array_equal(b.x, x)
        np.testing.assert_array_equal(b.y, y)


@pytest.mark.parametrize("load", [0.0, 100.0])
def test_the_default_starts_helpers_only_while_a_core_is_spare(
    flr, small_chunks, monkeypatch, load
):
    if _gather_ahead.default_threads() < 2:
        pytest.skip("one usable CPU: the default is one thread")
    monkeypatch.setattr(_gather_ahead.os, "getloadavg", lambda: (load, load, load))
    with fl.recfile.open(flr) as f:
        whole = stream(fl.Loader(f, 100, seed=7, threads=1))
        with fl.Loader(f, 100, seed=7) as loader:
            ahead = loader._plan.ahead
            got = []
            for b in loader:
                got.append((b.x.copy(), b.y.copy(), b.meta.positions.copy(), b.meta.record_indices))
                if load:  # a busy machine: no window for helpers, the caller gathers
                    assert not ahead.window and not ahead.helping
    assert ahead.spared[1] is (load == 0.0)
    assert_same(got, whole)


def test_next_into_takes_its_rows_from_the_chunks_gathered_ahead(flr, small_chunks):
    with fl.recfile.open(flr) as f:
        whole = stream(fl.Loader(f, 100, seed=5, threads=1))
        with fl.Loader(f, 100, seed=5, threads=2) as loader:
            ahead = loader._plan.ahead
            got = stream_into(loader, batches=50)
            assert ahead.chunks  # the rows came through the chunks
            got += stream_into(loader)
    assert_same(got, whole)


@pytest.mark.parametrize("threads", [2, 3])
def test_next_into_and_next_mixed_give_one_thread_stream(flr, small_chunks, threads):
    with fl.recfile.open(flr) as f:
        whole = stream(fl.Loader(f, 64, seed=3, threads=1))
        with fl.Loader(f, 64, seed=3, threads=threads) as loader:
            got = stream_into(loader, batches=300) + stream(loader, batches=500)
            state = loader.state_dict()
        with fl.Loader(f, 64, seed=3, threads=threads) as loader:
            loader.load_state_dict(state)
            got += stream_into(loader)
    assert_same(got, whole)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork")
def test_a_fork_while_another_thread_gathers_a_chunk_does_not_hang_the_child(
    flr, small_chunks, monkeypatch, copies
):
    if copies == "compiled":
        pytest.skip("Python's takes stalled here: the compiled copies' own test is below")
    # the chunk that thread took is never gathered in the child (the thread is not there):
    # the child's batches in it are gathered by the child's own threads
    entered, release = threading.Event(), threading.Event()
    real = _gather_ahead.GatherAhead._gather

    def stalled(self, key, chunk):
        # the chunk of that thread's own batch (not one it gathers while a helper gathers
        # its own): the child's next batches wait for it
        if threading.current_thread().name == "stalled" and key == self.current:
            entered.set()
            release.wait(30)
        return real(self, key, chunk)

    with fl.recfile.open(flr) as f:
        loader = fl.Loader(f, 100, seed=3, threads=2)
        it = iter(loader)
        next(it)

        def other():
            while not entered.is_set() and next(it, None) is not None:
                pass

        monkeypatch.setattr(_gather_ahead.GatherAhead, "_gather", stalled)
        th = threading.Thread(target=other, name="stalled")
        th.start()
        try:
            assert entered.wait(30)
            # the child: the rest of the pass, each row once
            pid = fork_checking(lambda: _once(np.concatenate([b.y for b in it])))
        finally:
            release.set()
            th.join(30)
        _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def _once(rows: np.ndarray) -> bool:
    return len(np.unique(rows)) == len(rows) > N // 2


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork")
def test_a_fork_while_c_threads_copy_chunks_ahead_gives_the_child_the_rest_of_the_pass(flr, copies):
    # At each fork the helpers (C threads, which the child does not have) are copying the
    # chunks ahead, or have queued ones: the child gets the rest of the pass, each row
    # once and the one-thread stream's rows, and the parent its own.
    with fl.recfile.open(flr) as f:
        whole = np.concatenate([b.y for b in fl.Loader(f, 100, seed=3, threads=1)])
        with fl.Loader(f, 100, seed=3, threads=2) as loader:
            it = iter(loader)
            got, pids = [], []
            for i, b in enumerate(it):
                got.append(b.y.copy())
                if i in (0, 1, 5, 40, 41, 700, 1200):
                    at = len(got) * 100
                    rest = whole[at:]
                    pids.append(
                        fork_checking(
                            lambda rest=rest: np.array_equal(
                                np.concatenate([b.y for b in it]), rest
                            )
                        )
                    )
        np.testing.assert_array_equal(np.concatenate(got), whole)
    for pid in pids:
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0


def test_a_chunk_of_a_shorter_block_at_the_same_start_is_not_cut_past_its_rows(small_chunks):
    """A block's chunks are keyed by the block's first position, and two blocks of one
    generation can start at the same position with other lengths (a block made for a
    given-back claim or a seek is short, the one made ahead is long): the last chunk of
    the short one holds fewer rows than the long one's chunk of the same key. A claim of
    the long block must get every one of its rows, not the short chunk's rows cut short."""
    from feedline.loader._ledger import Claim

    class Blocks:  # the order-blocks stage as GatherAhead reads it
        ahead = None
        here = False

    class Ledger:
        share = (0, 1)

    b, n = 8, 4096
    col = np.frombuffer(np.arange(n, dtype=np.int64).tobytes(), dtype=np.int64)  # unwritten
    cols = {"y": col}
    ahead = _gather_ahead.GatherAhead(2, b, Ledger(), Blocks())
    recs = np.random.default_rng(3).permutation(n).astype(np.uint64)
    ords = np.zeros(n, np.int64)
    start, short, long = b * 16, b * 7, b * 300  # chunks of 20_000 bytes: 313 batches
    starts = _gather_ahead._chunk_starts(b, 8, False)
    assert starts[1] > short  # the short block's only chunk is cut at its end

    def block(length):
        return (start, ords[:length], recs[:length], n, start + length, 0)

    def claim(i):
        lo = i * b
        rows = slice(lo, lo + b)
        return Claim(0, start // b + i, start + lo, start + lo + b, ords[rows], recs[rows])

    s = block(short)
    got = ahead.fields(claim(6), s, cols)  # the short block's last batch
    np.testing.assert_array_equal(got["y"], recs[6 * b : 7 * b].astype(np.int64))
    ahead.last = None  # another user thread's claim came between (the fast path missed)
    g = block(long)
    for i in (7, 20):  # past the short block's end, in chunk 0 of the long one
        got = ahead.fields(claim(i), g, cols)
        np.testing.assert_array_equal(got["y"], recs[i * b : (i + 1) * b].astype(np.int64))


@pytest.mark.parametrize("threads", [1, 2])
def test_torch_tensors_on_the_cpu_take_the_plain_path_with_the_numpy_stream(
    flr, small_chunks, threads
):
    # output="torch" (device None or the CPU) gathers as numpy does, the tensors over the
    # same memory: the same batches and metadata, kept batches never overwritten
    torch = pytest.importorskip("torch")
    from feedline.loader._local_plan import PlainPlan

    with fl.recfile.open(flr) as f:
        want = list(fl.Loader(f, 100, seed=6, threads=threads))
        for device in (None, "cpu"):
            loader = fl.Loader(f, 100, seed=6, threads=threads, output="torch", device=device)
            assert type(loader._plan) is PlainPlan
            got = list(loader)  # every batch kept while the rest are gathered
            for _ in loader:  # and a second pass, whose chunks reuse free buffers
                pass
            assert len(got) == len(want)
            for g, w in zip(got, want):
                assert isinstance(g.x, torch.Tensor) and isinstance(g.meta.mask, torch.Tensor)
                np.testing.assert_array_equal(g.x.numpy(), w.x)
                np.testing.assert_array_equal(g.y.numpy(), w.y)
                assert g.meta.record_indices.tolist() == w.meta.record_indices.tolist()
            loader.close()


def test_a_refresh_to_larger_chunks_never_reuses_a_smaller_chunks_buffer(monkeypatch):
    # Columns refreshed with the same dtypes and row shapes may be chunked otherwise (C's
    # copies turned off: large rows in 4 MB chunks again, not 2): a dropped chunk's buffer
    # of the smaller chunks was reused for a larger one (ValueError from np.take's out)
    def read_only(a):
        return np.frombuffer(a.tobytes(), a.dtype).reshape(a.shape)

    n = 40_000
    x = read_only(np.arange(n * 600, dtype=np.float32).reshape(n, 600))
    ds = fl.Dataset(Large, {"x": x, "y": read_only(np.arange(n))})
    loader = fl.Loader(ds, 256, seed=2, threads=2)
    want = [t.y.copy() for t in fl.Loader(ds, 256, seed=2, threads=1)]
    it = iter(loader)
    got = [next(it).y.copy() for _ in range(45)]
    monkeypatch.setenv("FEEDLINE_NATIVE", "0")
    ds.refresh()
    got += [b.y.copy() for b in it]
    assert len(got) == len(want)
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)
