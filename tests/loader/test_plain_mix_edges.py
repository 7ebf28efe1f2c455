"""The plain path for mixes at its edges (``PlainPlan`` over a mix, ``take_mixed``, the
gather threads' chunks of a mix, the numpy order path of few-part mixes): each test
states the contract against the general path (``LocalPlan``) or against one thread,
for cases that tests/loader/test_plain_mix.py does not reach (chunks gathered ahead of
memory-mapped mixes under interrupts, resume across thread counts, forks, user threads
with ``next_into``, nesting and sharding, TensorDataset sources that change)."""

from __future__ import annotations

import contextlib
import os
import threading
from collections import Counter

import numpy as np
import pytest

import feedline as fl
from feedline._base import kernels as _kernels
from feedline.loader import _gather_ahead
from feedline.loader._local_plan import LocalPlan

from . import test_interrupt_sweep as sweep_mod
from ._rows import fork_checking, in_thread
from .test_plain_mix import R, _arrays

B = 16
SIZES = (3_000, 1_200, 2_100)
BASES = np.array([0, 10_000, 20_000])


@pytest.fixture
def files(tmp_path):
    """Three memory-mapped files (their chunks are gathered ahead); ``y`` names a row."""
    out = []
    for k, (n, base) in enumerate(zip(SIZES, BASES.tolist())):
        path = tmp_path / f"m{k}.flr"
        fl.recfile.write(path, R, _arrays(n, base))
        out.append(fl.recfile.open(path))
    yield out
    for f in out:
        f.close()


@pytest.fixture
def chunks(monkeypatch):
    """Chunks of a few batches, so that a pass has many of them."""
    monkeypatch.setattr(_gather_ahead, "_CHUNK_BYTES", 3_000)


def _general(seq, *args, **kwargs):
    """The same loader on the general path (per-source reads and a scatter)."""
    loader = fl.Loader(seq, *args, **kwargs)
    loader._plan = LocalPlan(loader)
    return loader


def _np(a) -> np.ndarray:
    return a.numpy().copy() if hasattr(a, "numpy") else np.array(a, copy=True)


def _snap(batch) -> tuple:
    m = batch.meta
    fields = {n: _np(a) for n, a in batch.fields.items()}
    kinds = (type(batch.x).__name__, type(m.positions).__name__)
    meta = [_np(a) for a in (m.positions, m.source_ordinals, m.record_indices)]
    return (list(batch.fields), fields, *meta, int(m.size), len(batch), kinds)


def _passes(loader, passes: int = 2) -> list[tuple]:
    return [_snap(b) for _ in range(passes) for b in loader]


def _same(got: list[tuple], want: list[tuple]) -> None:
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        assert g[0] == w[0], f"batch {i}: fields {g[0]} against {w[0]}"
        for n in w[1]:
            assert g[1][n].dtype == w[1][n].dtype
            np.testing.assert_array_equal(g[1][n], w[1][n], err_msg=f"batch {i} field {n}")
        for a, b in zip(g[2:5], w[2:5]):
            np.testing.assert_array_equal(a, b, err_msg=f"batch {i} meta")
        assert g[5:] == w[5:], f"batch {i}: {g[5:]} against {w[5:]}"


def _rows_named(got: list[tuple], loader) -> None:
    """Every row holds the record its meta names (``y`` = its source's first + record)."""
    bases = np.array([int(ds[0]["y"]) for ds in loader._datasets])
    for _, fields, _, ords, recs, *_ in got:
        np.testing.assert_array_equal(fields["y"], bases[ords] + recs)


def _all_pairs() -> Counter:
    return Counter((o, r) for o, n in enumerate(SIZES) for r in range(n))


def _seqs(files) -> dict[str, fl.Seq]:
    a, b, c = (fl.Seq.source(f) for f in files)
    return {
        "three": fl.Seq.mix([a.shuffle(1), b.shuffle(2), c.shuffle(3)]),
        "scheduled": fl.Seq.mix(
            [
                a.shuffle(4),
                (c.shuffle(5), fl.Schedule.delayed(0.5)),
                (b, fl.Schedule.trapezoid(0.1, 0.3, 0.6, 0.9)),
            ]
        ),
        "in-concat": fl.Seq.concat([fl.Seq.mix([a.shuffle(1), b.shuffle(2)]), c.shuffle(3)]),
        "repeated": fl.Seq.mix([a.shuffle(1), c.shuffle(2)]).repeat(3),
        "sharded": fl.Seq.mix([a.shuffle(1), b.shuffle(2), c]).shard(1, 3),
        "of-a-mix": fl.Seq.mix([fl.Seq.mix([a.shuffle(1), b.shuffle(2)]), c.skip(5).shuffle(7)]),
    }


# -- the chunks of a memory-mapped mix against the general path ---------------------------
@pytest.mark.parametrize(
    "name", ["three", "scheduled", "in-concat", "repeated", "sharded", "of-a-mix"]
)
@pytest.mark.parametrize(
    "opts",
    [
        {"threads": 2},
        {"threads": 3, "shard": (1, 3)},
        {"threads": 2, "drop_last": True},
        {"threads": 2, "output": "torch"},
    ],
    ids=["two", "shard", "drop_last", "torch"],
)
def test_chunked_mixes_nested_and_sharded_give_the_general_paths_batches(files, chunks, name, opts):
    seq = _seqs(files)[name]
    loader = fl.Loader(seq, 7, seed=3, **opts)  # 7: chunks end inside batches' sources
    assert type(loader._plan).__name__ == "PlainPlan"
    assert loader._plan.ahead is not None
    general = _general(seq, 7, seed=3, **opts)
    got = _passes(loader, 3)
    _same(got, _passes(general, 3))
    _rows_named(got, general)


def test_held_chunked_batches_keep_their_rows_while_later_chunks_are_gathered(files, chunks):
    # Every batch of two passes held (torch tensors over the chunks' memory): no chunk
    # buffer a held batch views may be gathered into again.
    pytest.importorskip("torch")
    seq = _seqs(files)["three"]
    loader = fl.Loader(seq, B, seed=4, threads=2, output="torch")
    held = [b for _ in range(2) for b in loader]
    want = _passes(_general(seq, B, seed=4), 2)
    assert len(held) == len(want)
    for b, w in zip(held, want):
        np.testing.assert_array_equal(b.y.numpy(), w[1]["y"])
        np.testing.assert_array_equal(b.x.numpy(), w[1]["x"])


# -- resume, reset and user threads over chunks -------------------------------------------
@pytest.mark.parametrize("cut", [1, 3, 17, 200, 393])
def test_a_chunked_mix_resumes_exactly_with_any_number_of_threads(files, chunks, cut):
    seq = _seqs(files)["scheduled"]
    want = _passes(fl.Loader(seq, B, seed=9, threads=1), 1)
    loader = fl.Loader(seq, B, seed=9, threads=2)
    it = iter(loader)
    head = [_snap(next(it)) for _ in range(cut)]
    state = loader.state_dict()
    for threads in (1, 2, 3):
        again = fl.Loader(seq, B, seed=9, threads=threads)
        again.load_state_dict(state)
        _same(head + _passes(again, 1), want)
    _same(head + [_snap(b) for b in it], want)  # the saving loader goes on the same


def test_a_reset_mid_pass_of_a_chunked_mix_starts_the_pass_again(files, chunks):
    seq = _seqs(files)["three"]
    want = _passes(fl.Loader(seq, B, seed=5, threads=1), 1)
    loader = fl.Loader(seq, B, seed=5, threads=2)
    it = iter(loader)
    for _ in range(50):
        next(it)
    loader.reset()
    _same(_passes(loader, 1), want)


def _one_pass_by_four_threads(loader) -> tuple[Counter, list]:
    """One pass read by four user threads, two by ``next`` and two by ``next_into``: the
    (source, record) pairs they got, and the threads that got a row other than its meta
    names."""
    iter(loader)
    seen = [Counter() for _ in range(4)]
    bad: list = []
    barrier = threading.Barrier(4)

    def work(k: int) -> None:
        barrier.wait()
        out = {"x": np.empty((B, 3), np.float32), "y": np.empty(B, np.int64)}
        meta = {n: np.empty(B, np.int64) for n in ("source_ordinals", "record_indices")}
        while True:
            if k % 2:
                n = loader.next_into(out, meta=meta)
                if n == 0:
                    return
                ords, recs, y = (a[:n].copy() for a in (*meta.values(), out["y"]))
            else:
                batch = next(loader, None)
                if batch is None:
                    return
                ords, recs, y = batch.meta.source_ordinals, batch.meta.record_indices, batch.y
            if not np.array_equal(y, BASES[ords] + recs):
                bad.append(k)
            seen[k].update(zip(ords.tolist(), recs.tolist()))

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads)
    return sum(seen, Counter()), bad


def test_user_threads_mixing_next_and_next_into_over_chunks_get_each_record_once(files, chunks):
    loader = fl.Loader(_seqs(files)["three"], B, seed=2, threads=2)
    assert loader._plan.ahead is not None
    for _ in range(2):  # two passes: the second starts over the first's chunks
        seen, bad = _one_pass_by_four_threads(loader)
        assert not bad
        assert seen == _all_pairs()


def test_next_into_over_chunks_fills_the_general_paths_rows_and_meta(files, chunks):
    seq = _seqs(files)["in-concat"]
    fill = {}
    for path in ("plain", "general"):
        loader = (fl.Loader if path == "plain" else _general)(seq, 7, seed=6, threads=2)
        out = {"x": np.full((7, 3), -1, np.float32), "y": np.full(7, -1, np.int64)}
        meta = {"mask": np.zeros(7, bool)}
        meta.update({n: np.zeros(7, np.int64) for n in ("positions", "source_ordinals")})
        got = []
        while (n := loader.next_into(out, meta=meta)) > 0:
            got.append((n, out["x"].copy(), out["y"].copy(), *(a.copy() for a in meta.values())))
        fill[path] = got
    assert len(fill["plain"]) == len(fill["general"]) > 0
    for g, w in zip(fill["plain"], fill["general"]):
        assert g[0] == w[0]
        for a, b in zip(g[1:], w[1:]):
            np.testing.assert_array_equal(a, b)


# -- close and fork ----------------------------------------------------------------------
def test_a_closed_chunked_mix_lets_go_of_its_chunks_and_says_so(files, chunks):
    loader = fl.Loader(_seqs(files)["three"], B, seed=1, threads=2)
    it = iter(loader)
    kept = [next(it) for _ in range(20)]
    rows = [b.y.copy() for b in kept]
    ahead = loader._plan.ahead
    loader.close()
    assert ahead.chunks == {} and ahead.last is None and ahead.window == []
    assert not ahead.helpers  # no helper still gathers
    assert loader._plan.sources is None and loader._plan._mix == (-1, None, [])  # no columns
    with pytest.raises(ValueError, match="closed"):
        next(it)
    for b, y in zip(kept, rows):  # batches already delivered keep their rows
        np.testing.assert_array_equal(b.y, y)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork")
def test_a_forked_child_goes_on_with_a_chunked_mix_exactly(files, chunks):
    seq = _seqs(files)["scheduled"]
    want = np.concatenate([w[1]["y"] for w in _passes(fl.Loader(seq, B, seed=8, threads=1), 2)])
    loader = fl.Loader(seq, B, seed=8, threads=2)
    it = iter(loader)
    head = [next(it).y.copy() for _ in range(40)]

    def child() -> bool:
        rest = [b.y for b in it] + [b.y for b in loader]  # this pass and the next
        return bool(np.array_equal(np.concatenate(head + rest), want))

    pid = fork_checking(child)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0  # 4: other rows, 3: a hang, 5: raised
    # and the parent goes on as if no fork had happened
    rest = [b.y.copy() for b in it] + [b.y.copy() for b in loader]
    np.testing.assert_array_equal(np.concatenate(head + rest), want)


# -- interrupts at every point of a chunked mix's batch ----------------------------------
@pytest.fixture
def swept_files(tmp_path):
    """The interrupt sweep's 60 rows (``test_interrupt_sweep.dataset``) in two
    memory-mapped files of 25 and 35 rows."""
    cols = sweep_mod.dataset().columns
    out = []
    for k, part in enumerate((slice(0, 25), slice(25, sweep_mod.N))):
        path = tmp_path / f"s{k}.flr"
        fl.recfile.write(path, sweep_mod.R, {n: a[part] for n, a in cols.items()})
        out.append(fl.recfile.open(path))
    yield out
    for f in out:
        f.close()


@pytest.mark.parametrize("how", ["next", "next_into"])
def test_an_interrupt_at_any_point_of_a_chunked_mix_batch_loses_and_repeats_nothing(
    swept_files, monkeypatch, how
):
    # chunks of one to three batches, all gathered by the calling thread: no helper (as
    # where the load average leaves no core), so the sweep's points are the same in
    # every run
    monkeypatch.setattr(_gather_ahead, "_CHUNK_BYTES", 300)
    monkeypatch.setattr(_gather_ahead.GatherAhead, "_spare", lambda self: False)
    a, b = (fl.Seq.source(f) for f in swept_files)
    seq = fl.Seq.mix([a.shuffle(1), b.shuffle(2)])

    def make_loader():
        loader = fl.Loader(seq, sweep_mod.B, seed=3, threads=2)
        loader._plan.ahead.chosen = True  # helpers only where ``_spare`` says so: never
        return loader

    want = sweep_mod.pairs(range(sweep_mod.N))

    def sweep():
        _, _, points, _ = sweep_mod.run_with_interrupt(make_loader, None, how, 2, None)
        assert points > 10
        bad = []
        for k in range(1, points + 1):
            first, second, _, probe = sweep_mod.run_with_interrupt(make_loader, k, how, 2, None)
            if not probe.fired or first != want or second != want:
                lost = sorted((want - first).elements())[:4]
                extra = sorted((first - want).elements())[:4]
                again = sum(second.values())
                bad.append(f"k={k}: fired {probe.fired}, lost {lost} repeated {extra}, {again}")
        return points, bad

    points, bad = in_thread(sweep, timeout=120)
    assert not bad, f"{len(bad)} of {points} interrupt points lose or repeat: {bad[:5]}"


def test_an_interrupt_at_any_point_of_a_plain_mix_passs_first_batch_skips_no_pass():
    # (test_interrupt_sweep sweeps a pass's first batch for one plain dataset only)
    make = sweep_mod.mixed
    ref = make()
    list(ref)
    want = [[int(r) for b in ref for r in b.i] for _ in range(2)]
    ref.close()

    def sweep():
        bad, k = [], 0
        while True:
            k += 1
            loader = make()
            list(loader)
            first = None
            with sweep_mod.interrupt_at(k) as probe, contextlib.suppress(KeyboardInterrupt):
                first = next(iter(loader))
            if not probe.fired:
                loader.close()
                return k - 1, bad
            got = [[int(r) for b in loader for r in b.i] for _ in range(2)]
            if first is not None:
                got[0] = [int(r) for r in first.i] + got[0]
            if got != want or loader.epoch != 2:
                bad.append(f"k={k}: epoch {loader.epoch}, {[len(p) for p in got]} records")
            loader.close()

    points, bad = in_thread(sweep, timeout=120)
    assert points > 10 and not bad, f"{len(bad)} of {points} points: {bad[:5]}"


# -- TensorDataset sources that change ----------------------------------------------------
def _tensor_sources():
    torch = pytest.importorskip("torch")
    from torch.utils.data import TensorDataset

    made = []
    for n, base in ((300, 0), (200, 10_000)):
        a = _arrays(n, base)
        made.append(TensorDataset(torch.from_numpy(a["x"]), torch.from_numpy(a["y"])))
    return made


@pytest.mark.parametrize("change", ["in-place", "replaced"])
@pytest.mark.parametrize("how", ["next", "next_into"])
def test_a_tensor_dataset_changed_mid_pass_is_read_again_by_a_plain_mix(change, how):
    got = {}
    for path in ("plain", "general"):
        ta, tb = _tensor_sources()
        seq = fl.Seq.mix([fl.Dataset(R, ta).shuffle(1), fl.Dataset(R, tb).shuffle(2)])
        loader = (fl.Loader if path == "plain" else _general)(seq, B, seed=1)
        assert type(loader._plan).__name__ == ("PlainPlan" if path == "plain" else "LocalPlan")
        out = {"x": np.empty((B, 3), np.float32), "y": np.empty(B, np.int64)}
        rows = []
        for i in range(20):
            if i == 4:  # torch counts the change: no refresh needed
                if change == "in-place":
                    tb.tensors[1].add_(1_000_000)
                else:
                    tb.tensors = (tb.tensors[0] * 2, tb.tensors[1] + 7)
            if how == "next":
                batch = next(loader)
                rows.append((batch.x.copy(), batch.y.copy()))
            else:
                n = loader.next_into(out)
                rows.append((out["x"][:n].copy(), out["y"][:n].copy()))
        got[path] = rows
    for (px, py), (gx, gy) in zip(got["plain"], got["general"]):
        np.testing.assert_array_equal(px, gx)
        np.testing.assert_array_equal(py, gy)


@pytest.mark.parametrize("how", ["next", "next_into"])
def test_a_shrunk_tensor_dataset_is_an_error_not_other_rows_on_a_plain_mix(how):
    # A TensorDataset given shorter tensors mid-pass: the general path's read checks the
    # records against the new length (a BoundsError, an IndexError). The plain path must
    # not hand out rows the dataset no longer has. A concat: whole batches of one source,
    # so take_mixed takes its one-source branch.
    ta, tb = _tensor_sources()
    seq = fl.Seq.concat([fl.Dataset(R, ta), fl.Dataset(R, tb)])
    general = _general(seq, B)
    loader = fl.Loader(seq, B)
    assert type(loader._plan).__name__ == "PlainPlan"
    out = {"x": np.empty((B, 3), np.float32), "y": np.empty(B, np.int64)}
    for each in (loader, general):
        each.next_into(out) if how == "next_into" else next(each)
    ta.tensors = (ta.tensors[0][:5].clone(), ta.tensors[1][:5].clone())
    with pytest.raises(IndexError):  # the general path: records 16 - 31 are gone
        general.next_into(out) if how == "next_into" else next(general)
    out["y"][:] = -1
    with pytest.raises(IndexError):
        n = loader.next_into(out) if how == "next_into" else len(next(loader))
        pytest.fail(f"the plain path gave {n} rows: y = {out['y'][:n].tolist()}")


# -- the numpy order path of few-part mixes ------------------------------------------------
def _order_mixes() -> list[fl.Seq]:
    s = fl.Seq.source
    return [
        # shuffles of sources with offsets (skip/take fold into the leaf)
        fl.Seq.mix([s(300_001).skip(7).shuffle(1), s(170_001).take(1000).shuffle(2), s(5)]),
        # parts of one, two and three records, shuffled
        fl.Seq.mix([s(1).shuffle(1), s(2).shuffle(2), s(3).shuffle(3), s(50_000)]),
        # sixteen scheduled parts: the most the numpy path serves part by part
        fl.Seq.mix(
            [(s(1_000 + 7 * i).shuffle(i), fl.Schedule.delayed(0.03 * i)) for i in range(16)]
        ),
        # shuffles past 2**32 records (no round tables)
        fl.Seq.mix([s(1 << 33).shuffle(1), (s(1 << 34).shuffle(2), fl.Schedule.ramp(0.2, 0.8))]),
        # a repeat whose reads cross passes, a mix in a mix
        fl.Seq.mix([s(3_000).shuffle(1), (s(2_000).shuffle(2), fl.Schedule.until(0.5))]).repeat(4),
        fl.Seq.mix([fl.Seq.mix([s(3_000).shuffle(1), s(2_000)]), s(100).shuffle(3)]).step_by(3),
    ]


@pytest.mark.parametrize("index", range(6))
def test_few_part_mix_orders_are_the_same_bit_for_bit_on_the_numpy_path(index, monkeypatch):
    if _kernels.get() is None:
        pytest.skip("no compiled kernels to compare with")
    seq = _order_mixes()[index]

    def run() -> list[np.ndarray]:
        order = fl.Order(seq).with_seed(123_456_789).with_epoch(3)
        n = len(order)
        out = list(order.lookup(np.random.default_rng(index).integers(0, n, 1_000)))
        for start in (0, n // 3, max(0, n - 5_000)):
            cur = order.cursor(start)
            for k in (1, 7, 300, 2_048):
                out.extend(cur.next_block(k))
        return out

    compiled = run()
    monkeypatch.setitem(_kernels._state, "k", None)
    numpy_path = run()
    assert len(compiled) == len(numpy_path)
    for a, b in zip(compiled, numpy_path):
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)


def test_a_plain_mix_loader_on_the_numpy_order_path_gives_the_compiled_paths_batches(
    files, chunks, monkeypatch
):
    if _kernels.get() is None:
        pytest.skip("no compiled kernels to compare with")
    seq = _seqs(files)["scheduled"]
    compiled = _passes(fl.Loader(seq, B, seed=11, threads=2), 2)
    monkeypatch.setitem(_kernels._state, "k", None)
    _same(_passes(fl.Loader(seq, B, seed=11, threads=2), 2), compiled)


# -- many sources: a manifest's shards -----------------------------------------------------
SHARD_SIZES = [37 + (k * 13) % 50 for k in range(150)]  # 150 shards, 37 - 86 rows


@pytest.fixture
def shards(tmp_path):
    """150 memory-mapped shard files; ``y`` = 1,000 x shard + row."""
    out = []
    for k, n in enumerate(SHARD_SIZES):
        path = tmp_path / f"s{k:03d}.flr"
        fl.recfile.write(path, R, _arrays(n, 1_000 * k))
        out.append(fl.recfile.open(path))
    yield out
    for f in out:
        f.close()


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_a_shuffled_concat_of_many_shards_gives_the_general_paths_batches(shards, chunks, threads):
    seq = fl.Seq.concat([fl.Seq.source(f) for f in shards]).shuffle(4).repeat(2)
    want = _passes(_general(seq, B, seed=3), 1)
    loader = fl.Loader(seq, B, seed=3, threads=threads)
    assert type(loader._plan).__name__ == "PlainPlan"
    got = _passes(loader, 1)
    _same(got, want)
    _rows_named(got, loader)
    pairs = Counter((int(o), int(r)) for g in got for o, r in zip(g[3], g[4]))
    assert pairs == Counter({(o, r): 2 for o, n in enumerate(SHARD_SIZES) for r in range(n)})


def test_a_refreshed_source_of_a_plain_mix_is_read_again():
    """A dict source given new arrays and ``refresh``ed mid-pass: the next batch of the
    plain path reads them, as the general path does (the mix's columns are read again
    once any dataset's columns are assigned, not checked source by source)."""
    got = {}
    for path in ("plain", "general"):
        arrays = [_arrays(300, 0), _arrays(200, 10_000)]
        dss = [fl.Dataset(R, a) for a in arrays]
        seq = fl.Seq.mix([dss[0].shuffle(1), dss[1].shuffle(2)])
        loader = (fl.Loader if path == "plain" else _general)(seq, B, seed=1, threads=1)
        rows = []
        for i in range(20):
            if i == 4:
                arrays[1]["y"] = arrays[1]["y"] + 7  # a new array: seen only after refresh
                dss[1].refresh()
            batch = next(loader)
            rows.append(batch.y.copy())
        got[path] = rows
    assert any((p >= 10_007).any() for p in got["plain"][4:])
    for p, g in zip(got["plain"], got["general"]):
        np.testing.assert_array_equal(p, g)
