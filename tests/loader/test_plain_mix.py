"""A mix of plain datasets (arrays in memory or memory-mapped files, no maps) takes the
plain path: one take per field per source (``_gather.take_mixed``), the same batches as
the general path's per-source reads, for any mix, with resume and user threads exact."""

from __future__ import annotations

import sys
import threading
from collections import Counter

import numpy as np
import pytest

import feedline as fl
from feedline.loader._gather import take_mixed

from ._rows import interrupted_pass

B = 64


class R(fl.Record, dims={"D": 3}):
    x = fl.field("D", "float32")
    y = fl.field((), "int64")


def _arrays(n: int, base: int) -> dict[str, np.ndarray]:
    y = np.arange(base, base + n, dtype=np.int64)
    return {"x": np.stack([y, -y, y * 0.5], 1).astype(np.float32), "y": y}


@pytest.fixture
def parts(tmp_path):
    """Three sources: two in memory, one memory-mapped file; ``y`` names each row."""
    path = tmp_path / "c.flr"
    fl.recfile.write(path, R, _arrays(700, 20_000))
    with fl.recfile.open(path) as f:
        yield [fl.Dataset(R, _arrays(1_000, 0)), fl.Dataset(R, _arrays(300, 10_000)), f]


def _mixes(a, b, f):
    c = fl.Seq.source(f)
    return {
        "even": fl.Seq.mix([a.shuffle(1), b.shuffle(2)]),
        "three": fl.Seq.mix([a.shuffle(1), b.shuffle(2), c.shuffle(3)]),
        "scheduled": fl.Seq.mix([a.shuffle(4), (c.shuffle(5), fl.Schedule.delayed(0.5))]),
        "runs": fl.Seq.concat([a, c.shuffle(6)]),  # whole batches of one source
    }


def _batches(loader, passes: int = 2) -> list[tuple]:
    out = []
    for _ in range(passes):
        for batch in loader:
            m = batch.meta
            arrays = (batch.x, batch.y, m.positions, m.source_ordinals, m.record_indices)
            copies = [a.numpy().copy() if hasattr(a, "numpy") else a.copy() for a in arrays]
            out.append((*copies, m.size))
    return out


def _same(got: list[tuple], want: list[tuple]) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want):
        for a, b in zip(g, w):
            np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("name", ["even", "three", "scheduled", "runs"])
@pytest.mark.parametrize("output", ["numpy", "torch"])
def test_a_mix_of_plain_datasets_takes_the_plain_path_with_the_general_paths_batches(
    parts, name, output, copies
):
    if output == "torch":
        pytest.importorskip("torch")
    seq = _mixes(*parts)[name]
    loader = fl.Loader(seq, B, seed=7, output=output)
    assert type(loader._plan).__name__ == "PlainPlan"
    # check_values keeps the general path (a read per source and a scatter into the batch)
    general = fl.Loader(seq, B, seed=7, check_values=True)
    assert type(general._plan).__name__ == "LocalPlan"
    got, want = _batches(loader), _batches(general)
    _same(got, want)
    # and the rows are the records the meta names
    bases = {"even": [0, 10_000], "scheduled": [0, 20_000], "runs": [0, 20_000]}.get(
        name, [0, 10_000, 20_000]
    )  # each source's first ``y``
    for _, y, _, ords, recs, _ in got:
        np.testing.assert_array_equal(y, np.take(bases, ords) + recs)


def test_a_mix_with_a_mapped_source_keeps_the_general_path(parts):
    a, b, _ = parts
    mapped = b.map(lambda ex: {"x": ex["x"] + 1, "y": ex["y"]})
    loader = fl.Loader(fl.Seq.mix([a, mapped]), B, seed=5, workers=0)
    assert type(loader._plan).__name__ == "LocalPlan"
    for batch in loader:  # the map applies to its source's rows only
        m = batch.meta
        want = np.where(m.source_ordinals == 1, m.record_indices + 10_001, m.record_indices)
        np.testing.assert_array_equal(batch.x[:, 0], want)


def test_a_plain_mix_resumes_exactly_from_a_state_saved_mid_pass(parts):
    seq = _mixes(*parts)["three"]
    want = _batches(fl.Loader(seq, B, seed=9), passes=1)
    loader = fl.Loader(seq, B, seed=9)
    it = iter(loader)
    head = [next(it) for _ in range(7)]
    state = loader.state_dict()
    again = fl.Loader(seq, B, seed=9)
    again.load_state_dict(state)
    rest = _batches(again, passes=1)
    assert len(head) + len(rest) == len(want)
    _same(rest, want[len(head) :])


def test_user_threads_over_a_plain_mix_get_every_source_and_record_once(parts):
    seq = _mixes(*parts)["three"]
    loader = fl.Loader(seq, 16, seed=2)
    assert type(loader._plan).__name__ == "PlainPlan"
    iter(loader)
    seen: list[Counter] = [Counter() for _ in range(4)]
    bases = np.array([0, 10_000, 20_000])
    barrier = threading.Barrier(4)

    def work(k: int) -> None:
        barrier.wait()
        while (batch := next(loader, None)) is not None:
            m = batch.meta
            np.testing.assert_array_equal(batch.y, bases[m.source_ordinals] + m.record_indices)
            seen[k].update(zip(m.source_ordinals.tolist(), m.record_indices.tolist()))

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    total = sum(seen, Counter())
    want = Counter([(o, r) for o, n in enumerate((1_000, 300, 700)) for r in range(n)])
    assert total == want


def test_a_closed_plain_mix_says_so(parts):
    loader = fl.Loader(_mixes(*parts)["even"], B, seed=1)
    it = iter(loader)
    next(it)
    loader.close()
    assert loader._plan.sources is None  # the sources' columns are let go
    with pytest.raises(ValueError, match="closed"):
        next(it)


@pytest.mark.parametrize("into", [False, True], ids=["new", "out"])
def test_take_mixed_puts_each_sources_rows_back_in_the_batchs_order(into):
    rng = np.random.default_rng(0)
    sources = [
        {"a": rng.random((50, 4)).astype(np.float32), "b": np.arange(50) + 1000 * s}
        for s in range(3)
    ]
    # batches written by index, and chunks (4096 rows and more) through the staging buffer
    for size in (0, 1, 17, 200, 4096, 9000, 5000):
        ords = rng.integers(0, 3 if size != 5000 else 2, size)  # 5000: two sources of three
        recs = rng.integers(0, 50, size)
        out = {"a": np.full((size + 3, 4), -1, np.float32), "b": np.full(size + 3, -1)}
        got = take_mixed(sources, ords, recs, out=out if into else None)
        for n in ("a", "b"):
            want = np.stack([sources[o][n][r] for o, r in zip(ords, recs)]) if size else None
            assert got[n].shape == (size, *sources[0][n].shape[1:])
            assert got[n].dtype == sources[0][n].dtype
            if size:
                np.testing.assert_array_equal(got[n], want)
            if into:
                np.testing.assert_array_equal(out[n][:size], got[n])
                assert (out[n][size:] == -1).all()  # nothing written past the rows
    one = take_mixed(sources, np.full(5, 2), np.arange(5))  # a batch of one source
    np.testing.assert_array_equal(one["b"], np.arange(5) + 2000)


@pytest.fixture
def mapped_parts(tmp_path):
    """Three memory-mapped files (chunks are gathered ahead only from unwritten memory)."""
    files = []
    for k, (n, base) in enumerate(((3_000, 0), (1_200, 10_000), (2_100, 20_000))):
        path = tmp_path / f"p{k}.flr"
        fl.recfile.write(path, R, _arrays(n, base))
        files.append(fl.recfile.open(path))
    yield files
    for f in files:
        f.close()


@pytest.mark.parametrize("name", ["even", "three", "scheduled", "runs"])
def test_gather_threads_over_a_plain_mix_give_one_threads_batches(
    mapped_parts, small_chunks, name, copies
):
    a, b, c = (fl.Seq.source(f) for f in mapped_parts)
    seq = {
        "even": fl.Seq.mix([a.shuffle(1), b.shuffle(2)]),
        "three": fl.Seq.mix([a.shuffle(1), b.shuffle(2), c.shuffle(3)]),
        "scheduled": fl.Seq.mix([a.shuffle(4), (c.shuffle(5), fl.Schedule.delayed(0.5))]),
        "runs": fl.Seq.concat([a, c.shuffle(6)]),
    }[name]
    one = _batches(fl.Loader(seq, 16, seed=3, threads=1), passes=2)
    loader = fl.Loader(seq, 16, seed=3, threads=2)
    assert loader._plan.ahead is not None
    gathered = []
    real = loader._plan.ahead._new

    def counted(key, lo, recs, cols, ords):
        gathered.append(len(recs))
        chunk = real(key, lo, recs, cols, ords)
        assert (chunk.task is not None) is (copies == "compiled")
        return chunk

    loader._plan.ahead._new = counted
    _same(_batches(loader, passes=2), one)
    assert sum(gathered) >= sum(w[5] for w in one)  # every row came from a chunk
    # next_into fills the caller's arrays from the same chunks
    into = fl.Loader(seq, 16, seed=3, threads=2)
    out = {"x": np.empty((16, 3), np.float32), "y": np.empty(16, np.int64)}
    ys = []
    while (k := into.next_into(out)) > 0:
        ys.append(out["y"][:k].copy())
    np.testing.assert_array_equal(
        np.concatenate(ys), np.concatenate([w[1] for w in one[: len(ys)]])
    )


@pytest.mark.parametrize("where", ["after-the-batch", "before-its-chunk-is-gathered"])
def test_an_interrupt_in_a_threaded_plain_mix_loses_and_repeats_nothing(
    mapped_parts, small_chunks, monkeypatch, where
):
    from feedline.loader import _gather_ahead

    a, b, c = (fl.Seq.source(f).shuffle(k) for k, f in enumerate(mapped_parts))
    seq = fl.Seq.mix([a, b, c])
    want = np.concatenate([w[1] for w in _batches(fl.Loader(seq, 16, seed=8), passes=1)])
    calls = {"n": 0}
    if where == "before-its-chunk-is-gathered":
        real = _gather_ahead.GatherAhead._new

        def new(self, key, lo, recs, cols, ords):
            chunk = real(self, key, lo, recs, cols, ords)
            if sys._getframe(1).f_code.co_name == "fields":  # the caller's own new chunk
                calls["n"] += 1
                if calls["n"] in (2, 4):
                    raise KeyboardInterrupt  # registered, not yet gathered
            return chunk

        monkeypatch.setattr(_gather_ahead.GatherAhead, "_new", new)
        # chunks of a few batches, each the caller's own: the default's two threads
        # with no core spare for the helper
        if _gather_ahead.default_threads() < 2:
            pytest.skip("one CPU: no chunks")
        monkeypatch.setattr(_gather_ahead, "_CHUNK_BYTES", 2_000)
        monkeypatch.setattr(_gather_ahead.GatherAhead, "_spare", lambda self: False)
    threads = None if where == "before-its-chunk-is-gathered" else 2
    with fl.Loader(seq, 16, seed=8, threads=threads) as loader:
        assert loader._plan.ahead is not None
        if where == "after-the-batch":
            real_plain = loader._stats.plain

            def plain(*args):
                out = real_plain(*args)
                calls["n"] += 1
                if calls["n"] in (10, 200):
                    raise KeyboardInterrupt
                return out

            loader._stats.plain = plain
        got = interrupted_pass(loader)
    assert calls["n"] >= 4  # the interrupts were raised (after 40 batches and more)
    np.testing.assert_array_equal(got, want)
