"""A batch inside the chunk of the last one, once that chunk is gathered, is cut from it
without the chunk bookkeeping (``GatherAhead.last``): the stream stays one thread's, and
a batch of another pass, of the same pass after a restore or a reset, or of other
columns is never cut from a chunk gathered before."""

from __future__ import annotations

import numpy as np

import feedline as fl
from feedline.loader import _gather_ahead

from ._rows import B, N, records


def _one_thread(path, passes, seed=8):
    with fl.recfile.open(path) as f, fl.Loader(f, B, seed=seed, threads=1) as loader:
        return [records(loader) for _ in range(passes)]


def test_batches_inside_a_gathered_chunk_are_cut_from_it_and_the_stream_is_one_threads(
    rows_flr, small_chunks, monkeypatch
):
    want = _one_thread(rows_flr, 2)
    moves = []  # chunk transitions: the bookkeeping that the fast path leaves out
    real = _gather_ahead.GatherAhead._advance

    def counted(self, key, block, cols):
        moves.append(key)
        return real(self, key, block, cols)

    monkeypatch.setattr(_gather_ahead.GatherAhead, "_advance", counted)
    with fl.recfile.open(rows_flr) as f, fl.Loader(f, B, seed=8, threads=2) as loader:
        got = [records(loader) for _ in range(2)]
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
    batches = 2 * -(-N // B)
    assert 0 < len(moves) < batches / 3  # most batches took the fast path
    assert len(set(moves)) == len(moves)  # each chunk entered once


def test_a_restore_or_a_reset_is_never_cut_from_a_chunk_of_before(rows_flr, small_chunks):
    want = _one_thread(rows_flr, 2)
    with fl.recfile.open(rows_flr) as f, fl.Loader(f, B, seed=8, threads=2) as loader:
        it = iter(loader)
        head = [next(it).y.copy() for _ in range(5)]
        state = loader.state_dict()  # after batch 5, inside a gathered chunk
        more = [next(it).y.copy() for _ in range(3)]
        loader.load_state_dict(state)  # the same positions again, in a new generation
        again = [next(it).y.copy() for _ in range(3)]
        for a, b in zip(more, again):
            np.testing.assert_array_equal(a, b)
        rest = np.concatenate([b.y.copy() for b in it])
        np.testing.assert_array_equal(np.concatenate([*head, *again, rest]), want[0])

    # a restore of another order's state at a position inside the chunk just cut from
    with fl.recfile.open(rows_flr) as f, fl.Loader(f, B, seed=9, threads=1) as other:
        it = iter(other)
        for _ in range(5):
            next(it)
        state9 = other.state_dict()
        want9 = np.concatenate([b.y.copy() for b in it])
    with fl.recfile.open(rows_flr) as f, fl.Loader(f, B, seed=8, threads=2) as loader:
        it = iter(loader)
        for _ in range(5):
            next(it)
        loader.load_state_dict(state9)
        np.testing.assert_array_equal(records(loader), want9)
        loader.reset(seed=8)  # from position 0 again: pass 0 of seed 8 once more
        np.testing.assert_array_equal(records(loader), want[0])


def test_other_columns_are_never_cut_from_a_chunk_of_the_old_ones(rows_flr, small_chunks):
    with fl.recfile.open(rows_flr) as f, fl.Loader(f, B, seed=8, threads=2) as loader:
        it = iter(loader)
        for _ in range(5):  # chunks of 1, 1, 2 and 4 batches: the fifth opens the fourth
            first = next(it)
        ds = loader._datasets[0]
        old = ds._mapped_columns
        # the same rows in other arrays that nothing writes (what a refresh of the
        # source gives): over ``bytes``, so their chunks are gathered ahead too
        other = {
            n: np.frombuffer(np.negative(a).tobytes(), a.dtype).reshape(a.shape)
            for n, a in old.items()
        }
        ds._mapped_columns = other
        second = next(it)  # inside the first batch's chunk, but of the new columns
    assert (first.y >= 0).all() and (second.y <= 0).all() and second.y.any()
