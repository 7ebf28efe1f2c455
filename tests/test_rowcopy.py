"""The compiled row copies (``feedline._base.rowcopy``): numpy's take, row for row, by
any number of threads at once, cancelled or freed early without a write after, refused
where the arrays are not what they must be, and safe across a fork."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from feedline._base import rowcopy

pytestmark = pytest.mark.skipif(
    not rowcopy.available(), reason="the compiled row copies are not built here"
)


def _cols(n: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "u8": rng.integers(0, 255, (n, 3), dtype=np.uint8),  # 3-byte rows
        "i16": rng.integers(-(2**15), 2**15, n, dtype=np.int16),
        "f32": rng.standard_normal(n, dtype=np.float32),
        "i64": np.arange(n, dtype=np.int64) * 7,
        "c128": (rng.standard_normal(n) + 1j).astype(np.complex128),  # 16-byte rows
        "img": rng.integers(0, 255, (n, 4, 5, 3), dtype=np.uint8),  # 60-byte rows
        "none": np.empty((n, 0), np.float64),  # 0-byte rows
        "big": rng.standard_normal((n, 300), dtype=np.float32),  # 1200-byte rows
    }


def _empty_like(cols: dict[str, np.ndarray], rows: int) -> dict[str, np.ndarray]:
    return {n: np.full((rows, *c.shape[1:]), 99, c.dtype) for n, c in cols.items()}


@pytest.mark.parametrize("queue", [False, True])
def test_a_task_copies_numpys_take_row_for_row(queue):
    cols = _cols(5_000)
    recs = np.random.default_rng(1).integers(0, 5_000, 3_000)
    out = _empty_like(cols, 3_500)
    assert rowcopy.helpers(1) >= 1
    task = rowcopy.submit(out, cols, recs, None, queue=queue)
    assert task.run() is True and task.done
    for n, c in cols.items():
        np.testing.assert_array_equal(out[n][:3_000], c[recs])
        assert (out[n][3_000:] == 99).all()  # rows past the task's are left alone


def test_a_mix_takes_each_row_from_its_source():
    sources = tuple(_cols(n, seed=s) for s, n in enumerate((700, 1_300, 90)))
    rng = np.random.default_rng(2)
    ords = rng.integers(0, 3, 4_000)
    recs = np.array([rng.integers(0, len(sources[o]["i64"])) for o in ords], np.uint64)
    out = _empty_like(sources[0], 4_000)
    assert rowcopy.submit(out, sources, recs, ords.astype(np.int8), queue=True).run()
    for n in out:
        want = np.stack([sources[o][n][r] for o, r in zip(ords, recs.astype(np.int64))])
        np.testing.assert_array_equal(out[n], want.reshape(out[n].shape))


@given(
    rows=st.integers(1, 300),
    take=st.integers(0, 600),
    width=st.integers(0, 40),
    dtype=st.sampled_from(["uint8", "int16", "float32", "int64", "complex128"]),
    queue=st.booleans(),
    seed=st.integers(0, 2**32 - 1),
)
@settings(max_examples=60, deadline=None)
def test_any_shape_and_dtype_is_copied_as_numpy_takes(rows, take, width, dtype, queue, seed):
    rng = np.random.default_rng(seed)
    col = rng.integers(0, 100, (rows, width)).astype(dtype)
    recs = rng.integers(0, rows, take)
    out = {"c": np.zeros((take, width), dtype)}
    assert rowcopy.submit(out, {"c": col}, recs, None, queue=queue).run()
    np.testing.assert_array_equal(out["c"], col[recs])


def test_many_threads_running_the_same_tasks_copy_each_row_once():
    cols = {"x": np.random.default_rng(3).standard_normal((20_000, 64), dtype=np.float32)}
    rowcopy.helpers(2)
    perm = np.random.default_rng(4).permutation(20_000)
    outs = [{"x": np.zeros((2_000, 64), np.float32)} for _ in range(10)]
    tasks = [
        rowcopy.submit(o, cols, perm[i * 2_000 : (i + 1) * 2_000], None, queue=True)
        for i, o in enumerate(outs)
    ]
    errors: list[BaseException] = []

    def run_all(order):
        try:
            for t in order:
                assert t.run()
        except BaseException as e:  # handed to the test
            errors.append(e)

    threads = [threading.Thread(target=run_all, args=(tasks[::k],)) for k in (1, -1, 2, 3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors
    for i, o in enumerate(outs):
        np.testing.assert_array_equal(o["x"], cols["x"][perm[i * 2_000 : (i + 1) * 2_000]])


def test_a_record_out_of_range_is_an_index_error():
    cols = {"x": np.arange(10, dtype=np.int64)}
    for recs, ords, srcs in (
        (np.array([0, 10]), None, cols),
        (np.array([-1, 0]), None, cols),
        (np.array([2**63], np.uint64), None, cols),  # read as int64: negative
        (np.array([0, 1]), np.array([0, 2]), (cols, cols)),  # no source 2
        (np.array([0, 5]), np.array([0, 1]), (cols, {"x": cols["x"][:5]})),
    ):
        task = rowcopy.submit({"x": np.zeros(2, np.int64)}, srcs, recs, ords, queue=False)
        with pytest.raises(IndexError, match="outside"):
            task.run()


def test_arrays_that_cannot_be_copied_are_refused():
    col = np.arange(20, dtype=np.int64).reshape(10, 2)
    recs = np.arange(4)
    with pytest.raises(ValueError, match="fewer rows"):
        rowcopy.submit({"x": np.zeros((3, 2), np.int64)}, {"x": col}, recs, None, queue=False)
    with pytest.raises(ValueError, match="differ"):
        rowcopy.submit({"x": np.zeros((4, 3), np.int64)}, {"x": col}, recs, None, queue=False)
    with pytest.raises(ValueError, match=r"differ|int64 into"):  # same bytes, another dtype
        rowcopy.submit({"x": np.zeros((4, 4), np.int32)}, {"x": col}, recs, None, queue=False)
    with pytest.raises((ValueError, BufferError)):  # not contiguous
        rowcopy.submit({"x": np.zeros((4, 2), np.int64)}, {"x": col[::2]}, recs, None, queue=False)
    with pytest.raises((ValueError, BufferError)):  # read-only destination
        ro = np.zeros((4, 2), np.int64)
        ro.flags.writeable = False
        rowcopy.submit({"x": ro}, {"x": col}, recs, None, queue=False)
    with pytest.raises(ValueError, match="ordinals"):
        rowcopy.submit(
            {"x": np.zeros((4, 2), np.int64)}, ({"x": col},) * 2, recs, None, queue=False
        )
    with pytest.raises(ValueError, match="as long as recs"):
        rowcopy.submit(
            {"x": np.zeros((4, 2), np.int64)}, ({"x": col},) * 2, recs, np.zeros(3), queue=False
        )
    assert not rowcopy.copyable([col[::2]]) and not rowcopy.copyable([np.array([None])])
    assert not rowcopy.copyable([col, [1, 2]])
    assert rowcopy.copyable([col, col[:3]])


def test_a_cancelled_task_writes_nothing_after_it_returns():
    rowcopy.helpers(1)
    cols = {"x": np.ones((50_000, 256), np.float32)}
    recs = np.random.default_rng(5).integers(0, 50_000, 50_000)
    for _ in range(5):
        out = {"x": np.zeros((50_000, 256), np.float32)}
        task = rowcopy.submit(out, cols, recs, None, queue=True)
        task.cancel()
        seen = out["x"].copy()
        time.sleep(0.01)
        np.testing.assert_array_equal(out["x"], seen)  # no block landed after the cancel
        assert task.done
        assert task.run() in (True, False)  # True only if the helper had copied it all
        assert task.run() is task.run()


def test_a_task_freed_before_it_is_done_is_cancelled():
    rowcopy.helpers(1)
    cols = {"x": np.ones((50_000, 256), np.float32)}
    recs = np.random.default_rng(6).integers(0, 50_000, 50_000)
    out = {"x": np.zeros((50_000, 256), np.float32)}
    task = rowcopy.submit(out, cols, recs, None, queue=True)
    del task  # the helper stops; the arrays are let go once no block is in flight
    seen = out["x"].copy()
    time.sleep(0.01)
    np.testing.assert_array_equal(out["x"], seen)
    del cols  # nothing reads the source after it is freed
    assert rowcopy.submit(
        {"y": np.zeros(3)}, {"y": np.arange(3.0)}, np.arange(3), None, queue=True
    ).run()


def test_a_cancel_waits_for_the_blocks_another_thread_is_copying_in_run():
    # the blocks a thread copies in its own run() are in flight too: none lands after
    # cancel() returns (found by a review: 19 of 20 trials wrote rows after it)
    col = np.ones((20_000, 4096), np.uint8)
    recs = np.random.default_rng(9).integers(0, 20_000, 40_000)
    for _ in range(5):
        out = {"x": np.zeros((40_000, 4096), np.uint8)}
        task = rowcopy.submit(out, {"x": col}, recs, None, queue=False)  # no helper: run's
        started = threading.Event()
        th = threading.Thread(target=lambda t=task, s=started: (s.set(), t.run()))
        th.start()
        started.wait(10)
        time.sleep(0.002)
        task.cancel()
        seen = out["x"][:, 0].copy()
        th.join(30)
        np.testing.assert_array_equal(out["x"][:, 0], seen)


def test_rows_of_another_dtype_are_refused_and_any_index_dtype_is_read_as_its_values():
    col = np.arange(10, dtype=np.int32)
    with pytest.raises(ValueError, match="int32"):
        rowcopy.submit({"x": np.zeros(3, np.float32)}, {"x": col}, np.arange(3), None, queue=False)
    for recs in (np.array([0, 3, 5], ">i8"), np.array([0, 3, 5], np.int16), np.array([0, 3, 5.0])):
        out = {"x": np.zeros(3, np.int32)}
        assert rowcopy.submit(out, {"x": col}, recs, None, queue=False).run()
        assert out["x"].tolist() == [0, 3, 5]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork")
def test_a_fork_before_any_helper_started_leaves_the_parents_queue_behind():
    # A process that queued a task but never started helpers forks: the child's queue is
    # empty (its own helpers never copy the parent's task, nor meet it once freed). In a
    # process of its own, so that no helper of this test run's has started before.
    code = textwrap.dedent(
        """
        import os, time
        import numpy as np
        from feedline._base import rowcopy
        col = np.arange(2000, dtype=np.int64).reshape(1000, 2)
        out = np.zeros((500, 2), np.int64)
        task = rowcopy.submit({"x": out}, {"x": col}, np.arange(500), None, queue=True)
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                rowcopy.helpers(1)
                mine = np.zeros((500, 2), np.int64)
                got = rowcopy.submit({"x": mine}, {"x": col}, np.arange(500), None, queue=True)
                ok = got.run() and np.array_equal(mine, col[:500])
                time.sleep(0.05)
                untouched = not out.any()  # the parent's task was not copied here
                del task  # freed in the child: nothing of the queue points at it
                again = rowcopy.submit({"x": mine}, {"x": col}, np.arange(9), None, queue=True)
                code = 0 if ok and untouched and again.run() else 2
            finally:
                os._exit(code)
        assert task.run() and np.array_equal(out, col[:500])
        _, status = os.waitpid(pid, 0)
        raise SystemExit(os.waitstatus_to_exitcode(status))
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork")
def test_after_a_fork_the_child_copies_its_own_tasks_and_refuses_the_parents():
    rowcopy.helpers(1)
    cols = {"x": np.random.default_rng(7).standard_normal((200_000, 64), dtype=np.float32)}
    recs = np.random.default_rng(8).permutation(200_000)
    out = {"x": np.zeros((200_000, 64), np.float32)}
    task = rowcopy.submit(out, cols, recs, None, queue=True)  # in flight at the fork
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            threading.Timer(20, os._exit, (3,)).start()
            try:
                task.run()
            except RuntimeError:
                mine = {"x": np.zeros((200_000, 64), np.float32)}
                assert rowcopy.helpers(1) >= 1  # the child's own helpers
                assert rowcopy.submit(mine, cols, recs, None, queue=True).run()
                code = 0 if np.array_equal(mine["x"], cols["x"][recs]) else 2
            del task  # freed without waiting for the parent's helpers
        finally:
            os._exit(code)
    assert task.run()
    np.testing.assert_array_equal(out["x"], cols["x"][recs])
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_native_copies_can_be_turned_off(monkeypatch):
    monkeypatch.setenv("FEEDLINE_NATIVE", "0")
    assert not rowcopy.available()


def test_prepared_sources_serve_many_tasks_as_the_columns_themselves_would():
    """``prepare`` takes every source's buffers once; tasks made with it copy what
    tasks made from the columns copy, from any number of sources."""
    sources = tuple(_cols(20 + 3 * s, seed=s) for s in range(300))
    prepared = rowcopy.prepare(sources)
    assert prepared.parts == 300 and prepared.names == tuple(sources[0])
    rng = np.random.default_rng(4)
    rowcopy.helpers(1)
    for _ in range(5):
        ords = rng.integers(0, 300, 2_000)
        recs = np.array([rng.integers(0, 20 + 3 * o) for o in ords], np.int64)
        a, b = _empty_like(sources[0], 2_000), _empty_like(sources[0], 2_000)
        assert rowcopy.submit(a, sources, recs, ords, queue=True, prepared=prepared).run()
        assert rowcopy.submit(b, sources, recs, ords, queue=False).run()
        for n in a:
            np.testing.assert_array_equal(a[n], b[n])
            want = np.stack([sources[o][n][r] for o, r in zip(ords, recs)])
            np.testing.assert_array_equal(a[n], want.reshape(a[n].shape))


def test_prepare_refuses_sources_unlike_the_first_and_outputs_unlike_them():
    x = {"x": np.zeros((5, 2), np.int64), "y": np.zeros(5, np.float32)}
    for other, why in (
        ({"x": np.zeros((5, 2), np.int32), "y": x["y"]}, "field 'x'"),  # another dtype
        ({"y": x["y"], "x": x["x"]}, "fields"),  # the fields in another order
        ({"x": x["x"]}, "fields"),  # a field missing
        ({"x": np.zeros((5, 3), np.int64), "y": x["y"]}, "differ"),  # other rows
    ):
        with pytest.raises(ValueError, match=why):
            rowcopy.prepare((x, other))
    prepared = rowcopy.prepare((x, x))
    recs, ords = np.zeros(2, np.int64), np.zeros(2, np.int64)
    for out, why in (
        ({"x": np.zeros((2, 2), np.int64)}, "fields"),  # a field too few
        ({**_empty_like(x, 2), "z": np.zeros(2)}, "fields"),  # one too many
        ({"x": np.zeros((2, 2), np.float64), "y": np.zeros(2, np.float32)}, "into"),
    ):
        with pytest.raises(ValueError, match=why):
            rowcopy.submit(out, (x, x), recs, ords, queue=False, prepared=prepared)


def test_prepared_sources_hold_their_buffers_until_freed_with_their_tasks(tmp_path):
    """A memory map cannot close while prepared sources (or a task made with them) hold
    a buffer of it, and can once they are gone: a loader lets go of them when it
    closes (``GatherAhead.release``, ``PlainPlan.shutdown``)."""
    import mmap

    path = tmp_path / "rows"
    path.write_bytes(bytes(range(256)) * 64)
    with open(path, "rb") as f:
        m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    col = np.frombuffer(m, np.uint8).reshape(-1, 16)
    prepared = rowcopy.prepare(({"x": col},))
    del col
    out = {"x": np.zeros((3, 16), np.uint8)}
    task = rowcopy.submit(out, None, np.array([0, 5, 9]), None, queue=False, prepared=prepared)
    del prepared
    with pytest.raises(BufferError):
        m.close()  # the task still holds the sources
    assert task.run()
    assert out["x"][1].tolist() == list(range(80, 96))
    del task
    m.close()
