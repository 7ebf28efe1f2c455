"""Where helper threads gather a plain path's rows, the next order block is made by the
loader's own threads (a helper between two chunks, or the caller that needs it), not by
the look-ahead thread: the stream stays the order's, an error making a block reaches
the caller at that block, and an interrupt while making one loses nothing."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import feedline as fl
from feedline._base import rowcopy
from feedline.loader import _ahead, _blocks, _gather_ahead

from ._rows import B, N, records, whole


@pytest.fixture
def made(monkeypatch) -> list[tuple[int, str]]:
    """Each order block made: (its first position, the thread that made it)."""
    blocks: list[tuple[int, str]] = []
    real = _ahead.Ahead.make

    def named(cursor, length):
        blocks.append((cursor.offset, threading.current_thread().name))
        return real(cursor, length)

    monkeypatch.setattr(_ahead.Ahead, "make", staticmethod(named))
    return blocks


def test_the_helpers_make_the_order_blocks_and_the_stream_is_one_threads(
    rows_flr, small_chunks, made, numpy_copies
):
    want = whole(rows_flr)
    made.clear()  # the blocks of the loader below only
    with fl.recfile.open(rows_flr) as f, fl.Loader(f, B, seed=8, threads=2) as loader:
        got = records(loader)
    np.testing.assert_array_equal(got, want)
    first = -(-_blocks._FIRST_BLOCK // B) * B
    offsets = [at for at, _ in made]
    assert offsets == sorted(set(offsets)) and offsets[:2] == [0, first]  # each block once
    assert len(made) == 1 + -(-(N - first) // (-(-_blocks._BLOCK // B) * B))
    # the pass's first block by the caller, the second on the look-ahead thread (made
    # before the first batch said that helpers gather), every later one by the loader's
    # own threads: a helper (or the caller, where it needs one no helper has made yet)
    assert made[0][1] == "MainThread" and made[1][1].startswith("feedline-order")
    later = [name for _, name in made[2:]]
    assert not any(name.startswith("feedline-order") for name in later), made
    assert any(name.startswith("feedline-gather") for name in later), made


def test_with_c_threads_copying_the_look_ahead_thread_makes_the_order_blocks(
    rows_flr, small_chunks, made
):
    # C's helpers copy rows and never run Python: the next order block is made on the
    # look-ahead thread, each once, and the stream is one thread's
    if not rowcopy.available():
        pytest.skip("the compiled row copies are not built here")
    want = whole(rows_flr)
    made.clear()  # the blocks of the loader below only
    with fl.recfile.open(rows_flr) as f, fl.Loader(f, B, seed=8, threads=2) as loader:
        got = records(loader)
        assert all(c.task is not None for c in loader._plan.ahead.chunks.values())
    np.testing.assert_array_equal(got, want)
    offsets = [at for at, _ in made]
    assert offsets == sorted(set(offsets))  # each block once
    assert made[0][1] == "MainThread"
    assert all(name.startswith("feedline-order") for _, name in made[1:]), made


def test_columns_gathered_batch_by_batch_keep_the_look_ahead_thread(small_chunks, monkeypatch):
    ds = fl.Dataset.from_arrays(y=np.arange(N, dtype=np.int64))  # writable: no chunks
    names: list[str] = []
    real = _ahead.Ahead.make
    monkeypatch.setattr(
        _ahead.Ahead,
        "make",
        staticmethod(lambda c, k: names.append(threading.current_thread().name) or real(c, k)),
    )
    got = records(fl.Loader(ds, B, seed=8, threads=2))
    np.testing.assert_array_equal(np.sort(got), np.arange(N))
    assert names[0] == "MainThread"
    assert names[1:] and all(n.startswith("feedline-order") for n in names[1:]), names


def test_an_error_making_a_block_here_reaches_the_caller_and_loses_no_batch(
    rows_flr, small_chunks, monkeypatch
):
    want = whole(rows_flr)
    real = _ahead.Ahead.make
    calls = {"n": 0}

    def flaky(cursor, length):
        calls["n"] += 1
        if calls["n"] == 3:  # the third block, made here
            raise OSError("the order's storage went away")
        return real(cursor, length)

    monkeypatch.setattr(_ahead.Ahead, "make", staticmethod(flaky))
    first = -(-_blocks._FIRST_BLOCK // B)  # batches of the first block
    second = -(-_blocks._BLOCK // B)  # and of each later one
    with fl.recfile.open(rows_flr) as f, fl.Loader(f, B, seed=8, threads=2) as loader:
        got = [next(loader).y.copy() for _ in range(first + second)]
        with pytest.raises(OSError, match="went away"):
            next(loader)  # the third block's first batch
        got += [b.y.copy() for b in loader]  # made again, by the calling thread
    np.testing.assert_array_equal(np.concatenate(got), want)


def test_an_interrupt_while_the_caller_makes_a_block_loses_nothing(
    rows_flr, monkeypatch, numpy_copies
):
    """With no helper running (a window of no chunks), the caller makes the block when it
    needs it; an interrupt there leaves nothing claimed, and the block is made again
    from its position (the interrupted cursor is not trusted)."""
    want = whole(rows_flr)
    monkeypatch.setattr(_gather_ahead, "_AHEAD", 0)
    real = _ahead.Ahead.make
    calls = {"n": 0}

    def interrupted(cursor, length):
        calls["n"] += 1
        if calls["n"] == 3:
            cursor.next_block(length // 2)  # half made: the cursor has moved
            raise KeyboardInterrupt
        return real(cursor, length)

    monkeypatch.setattr(_ahead.Ahead, "make", staticmethod(interrupted))
    first = -(-_blocks._FIRST_BLOCK // B)
    second = -(-_blocks._BLOCK // B)
    with fl.recfile.open(rows_flr) as f, fl.Loader(f, B, seed=8, threads=2) as loader:
        got = [next(loader).y.copy() for _ in range(first + second)]
        assert loader._ahead.here and loader._ahead.pending  # made by the caller, later
        with pytest.raises(KeyboardInterrupt):
            next(loader)
        got += [b.y.copy() for b in loader]
    np.testing.assert_array_equal(np.concatenate(got), want)
