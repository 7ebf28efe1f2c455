"""Packed rows: every target once, never across a document, first/best fit within
blocks of the order, a pure function of the options, and any loader around it."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import feedline as fl
from feedline._base import kernels as _kernels
from feedline._base import packing
from feedline.errors import BoundsError, DomainError, FeedlineError
from feedline.text import Packed, _pack_place, _pack_plan, _packed

from .test_windows import write_corpus

STRATEGIES = ["concat", "first_fit", "best_fit"]
BASE = 10_000  # a token id encodes its place: document * BASE + offset


class Doc(fl.Record, dims={"T": None, "V": 1 << 32}):
    """One document, tokens uint32."""

    tokens = fl.field("T", "uint32", domain=fl.Index("V"))


class MaskedDoc(fl.Record, dims={"T": None, "V": 1 << 32}):
    """One document, tokens uint32, with a loss mask."""

    tokens = fl.field("T", "uint32", domain=fl.Index("V"))
    loss_mask = fl.field("T", "bool")


class MaskedDoc16(fl.Record, dims={"T": None, "V": 1 << 16}):
    """One document, tokens uint16, with a loss mask."""

    tokens = fl.field("T", "uint16", domain=fl.Index("V"))
    loss_mask = fl.field("T", "bool")


def write_flr(path, docs, masks=None, record=None):
    record = record or (Doc if masks is None else MaskedDoc)
    counts = np.array([len(d) for d in docs], dtype=np.int64)
    offsets = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
    dtype = record.fields["tokens"].dtype
    values = np.array([t for d in docs for t in d], dtype=dtype)
    cols = {"tokens": fl.Ragged(values, offsets, counts[:, None], (None,))}
    if masks is not None:
        m = np.array([bool(x) for ms in masks for x in ms], dtype=np.bool_)
        cols["loss_mask"] = fl.Ragged(m, offsets, counts[:, None], (None,))
    fl.recfile.write_chunks(path, record, iter([cols]))
    return path


def placed_docs(lengths):
    return [[d * BASE + k for k in range(n)] for d, n in enumerate(lengths)]


def corpus_of(tmp_path, kind, docs, masks=None):
    if kind == "flr":
        return write_flr(tmp_path / "c.flr", docs, masks)
    return write_corpus(tmp_path / "c.nndataset", docs, masks)


@pytest.fixture(params=["c", "compiled", "numpy"])
def path_kind(request, monkeypatch):
    # C (``_base.packing``), else numba's kernels, else Python and numpy: each on its own
    if request.param == "c":
        if not packing.available():
            pytest.skip("the compiled packing is not built here")
        return request.param
    monkeypatch.setattr(packing, "available", lambda: False)
    if request.param == "numpy":
        monkeypatch.setattr(_kernels, "get", lambda *a, **k: None)
    elif _kernels.get() is None:
        pytest.skip("numba is not installed")
    return request.param


LENGTHS = [5, 0, 2, 1, 7, 30, 3, 12, 9, 9, 4, 17, 1, 6, 25, 2]


def all_rows(p):
    return p.getitems(np.arange(len(p)))


@pytest.mark.parametrize("kind", ["nndataset", "flr"])
@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("seq_len,block", [(8, 4), (8, 1000), (1, 3), (40, 5)])
def test_every_token_of_every_document_is_a_target_exactly_once(
    tmp_path, path_kind, kind, strategy, seq_len, block
):
    p = Packed(corpus_of(tmp_path, kind, placed_docs(LENGTHS)), seq_len, strategy=strategy,
               block=block, seed=4, doc_ids=True)  # fmt: skip
    b = all_rows(p)
    real = b["segment_ids"] > 0
    targets = b["targets"][real]
    assert Counter(zip((targets // BASE).tolist(), (targets % BASE).tolist())) == Counter(
        (d, k) for d, n in enumerate(LENGTHS) for k in range(1, n)
    )
    # each input is its target's predecessor in the same document: nothing crosses
    assert (b["input_ids"][real] == targets - 1).all()
    assert (b["doc_ids"][real] - 1 == targets // BASE).all()
    assert b["loss_mask"].tolist() == real.tolist()
    assert p.num_targets == sum(max(n - 1, 0) for n in LENGTHS)
    assert p.padding == pytest.approx(1 - p.num_targets / (len(p) * seq_len))
    p.close()


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_segments_are_numbered_from_one_and_positions_restart_at_each(tmp_path, strategy):
    p = Packed(write_flr(tmp_path / "c.flr", placed_docs(LENGTHS)), 10, strategy=strategy)
    b = all_rows(p)
    for row in range(len(p)):
        seg, pos = b["segment_ids"][row], b["position_ids"][row]
        tgt, inp = b["targets"][row], b["input_ids"][row]
        n = int((seg > 0).sum())
        assert (seg[n:] == 0).all() and (pos[n:] == 0).all() and (inp[n:] == 0).all()
        assert seg[0] == 1 and set(np.diff(seg[:n]).tolist()) <= {0, 1}
        starts = np.flatnonzero(np.diff(np.concatenate(([0], seg[:n]))))
        assert (pos[starts] == 0).all()
        within = np.setdiff1d(np.arange(1, n), starts)
        assert (pos[within] == pos[within - 1] + 1).all()
        assert (np.diff(tgt[:n])[np.diff(seg[:n]) == 0] == 1).all()  # one document a segment
        if strategy != "concat":  # pieces of a split document start every seq_len pairs
            assert ((inp[starts] % BASE) % 10 == 0).all()
    p.close()


@pytest.mark.parametrize("kind", ["nndataset", "flr"])
def test_the_loss_mask_is_the_corpus_mask_at_each_target(tmp_path, path_kind, kind):
    rng = np.random.default_rng(3)
    docs = placed_docs(LENGTHS)
    masks = [rng.integers(0, 2, len(d)).tolist() for d in docs]
    p = Packed(corpus_of(tmp_path, kind, docs, masks), 6, strategy="first_fit", block=5)
    b = all_rows(p)
    real = b["segment_ids"] > 0
    t = b["targets"][real]
    want = [bool(masks[d][k]) for d, k in zip((t // BASE).tolist(), (t % BASE).tolist())]
    assert b["loss_mask"][real].tolist() == want
    assert not b["loss_mask"][~real].any()
    p.close()


def reference_fit(sizes, cap, best):
    """First fit / best fit written out: rows as a list of rooms, scanned each time."""
    rooms, where, reached = [], [], {}  # reached: when each row last got its room
    for i, s in enumerate(sizes):
        fits = [r for r, room in enumerate(rooms) if room >= s]
        if not fits:
            rooms.append(cap)
            r = len(rooms) - 1
        elif best:  # least room left; ties: the row that reached that room last
            least = min(rooms[r] for r in fits)
            r = max((r for r in fits if rooms[r] == least), key=reached.__getitem__)
        else:
            r = fits[0]
        rooms[r] -= s
        reached[r] = i
        where.append(r)
    return where, len(rooms)


@settings(max_examples=80, deadline=None)
@given(
    st.lists(st.lists(st.integers(1, 12), min_size=1, max_size=25), min_size=1, max_size=4),
    st.integers(12, 16),
    st.booleans(),
)
def test_placement_is_first_fit_or_best_fit_in_python_and_compiled(blocks, cap, best):
    sizes = np.array([s for b in blocks for s in sorted(b, reverse=True)], dtype=np.int64)
    ptr = np.concatenate(([0], np.cumsum([len(b) for b in blocks]))).astype(np.int64)
    want_rows, want_counts = [], []
    for b in blocks:
        rows, used = reference_fit(sorted(b, reverse=True), cap, best)
        want_rows += rows
        want_counts.append(used)
    places = [_pack_place.place_best_fit if best else _pack_place.place_first_fit]
    if packing.available():
        places.append(packing.placer("best_fit" if best else "first_fit"))
    if _kernels.get() is not None:
        from feedline.text import _pack_jit

        places.append(_pack_jit.place_best_fit if best else _pack_jit.place_first_fit)
    for place in places:
        local = np.empty(len(sizes), dtype=np.int64)
        per_block = np.empty(len(blocks), dtype=np.int64)
        place(sizes, ptr, cap, local, per_block)
        assert local.tolist() == want_rows
        assert per_block.tolist() == want_counts


def test_rows_hold_documents_of_one_block_of_the_order(tmp_path):
    lengths = [3, 9, 2, 14, 5, 7, 7, 1, 8, 4, 11, 6, 2, 3]
    path = write_flr(tmp_path / "c.flr", placed_docs(lengths))
    p = Packed(path, 10, strategy="best_fit", block=4, seed=None, doc_ids=True)
    b = all_rows(p)
    for ids in b["doc_ids"]:
        assert len({(d - 1) // 4 for d in ids[ids > 0].tolist()}) == 1
    # longest first: a block's first row opens with its longest piece
    first = b["doc_ids"][0]
    assert lengths[first[0] - 1] == max(lengths[:4])
    p.close()


def test_first_fit_and_best_fit_pad_less_than_one_document_a_row(tmp_path):
    rng = np.random.default_rng(0)
    lengths = np.maximum(1, rng.lognormal(np.log(100), 1.0, 600)).astype(int).tolist()
    path = write_flr(tmp_path / "c.flr", placed_docs(lengths))
    per_doc = fl.text.Windows(path, 256, cross_docs=False)
    padding = {s: Packed(path, 256, strategy=s, block=300).padding for s in STRATEGIES}
    unpacked = 1 - sum(n - 1 for n in lengths if n > 1) / (len(per_doc) * 256)
    assert padding["concat"] < padding["best_fit"] <= padding["first_fit"] < unpacked / 5
    per_doc.close()


def test_the_packing_is_a_pure_function_of_seed_epoch_and_options(tmp_path):
    path = write_flr(tmp_path / "c.flr", placed_docs(LENGTHS * 4))

    def rows(**kw):
        with Packed(path, 8, block=6, doc_ids=True, **kw) as p:
            return {k: v.tolist() for k, v in all_rows(p).items()}

    assert rows(seed=3) == rows(seed=3)
    assert rows(seed=3) != rows(seed=4)
    assert rows(seed=3, epoch=1) != rows(seed=3)
    # in file order the first row opens with the first block's longest document (30 tokens)
    assert rows(seed=None)["doc_ids"][0][0] == 6


def a_corpus(tmp_path, n=300, seed=0):
    rng = np.random.default_rng(seed)
    lengths = np.maximum(1, rng.lognormal(np.log(20), 1.0, n)).astype(int).tolist()
    return write_flr(tmp_path / f"c{seed}.flr", placed_docs(lengths))


def test_a_shuffled_loader_over_packed_rows_resumes_exactly_mid_pass(tmp_path):
    path = a_corpus(tmp_path)
    p = Packed(path, 32, block=50)
    full = [b["targets"].copy() for b in fl.Loader(p, 4, seed=3)]
    first = fl.Loader(p, 4, seed=3)
    it = iter(first)
    head = [next(it)["targets"].copy() for _ in range(7)]
    state = json.loads(json.dumps(first.state_dict()))
    second = fl.Loader(Packed(path, 32, block=50), 4, seed=3)  # rebuilt: the same plan
    second.load_state_dict(state)
    rest = [b["targets"].copy() for b in second]
    assert [x.tolist() for x in head + rest] == [x.tolist() for x in full]
    other = fl.Loader(Packed(path, 32, block=51), 4, seed=3)  # another packing: refused
    with pytest.raises(fl.StateError):
        other.load_state_dict(state)
    p.close()


def row_keys(batch):
    return batch.meta.record_indices[: batch.meta.size].tolist()


def test_two_ranks_take_one_ranks_rows_between_them_disjoint(tmp_path):
    p = Packed(a_corpus(tmp_path), 32, strategy="first_fit", block=40)
    one = [r for b in fl.Loader(p, 5, seed=2) for r in b["targets"][: b.meta.size].tolist()]
    ranks = []
    for rank in range(2):
        rows, keys = [], []
        for b in fl.Loader(p, 5, seed=2, shard=(rank, 2)):
            rows += b["targets"][: b.meta.size].tolist()
            keys += row_keys(b)
        ranks.append((rows, set(keys)))
    assert not ranks[0][1] & ranks[1][1]
    both = ranks[0][0] + ranks[1][0]
    assert Counter(map(tuple, both)) == Counter(map(tuple, one))
    assert len(ranks[0][1] | ranks[1][1]) == len(p)
    p.close()


@pytest.mark.parametrize("world,new_world", [(2, 3), (3, 1)])
def test_a_pass_resumed_with_another_number_of_ranks_trains_each_target_once(
    tmp_path, world, new_world
):
    path = a_corpus(tmp_path)

    def make(shard):
        return fl.Loader(Packed(path, 16, block=64), 3, seed=8, shard=shard)

    targets, states = [], []
    for r in range(world):
        taken = make((r, world))
        it = iter(taken)
        for _ in range(4):
            b = next(it)
            targets.append(b["targets"][: b.meta.size][b["segment_ids"][: b.meta.size] > 0])
        states.append(json.loads(json.dumps(taken.state_dict())))
    for r in range(new_world):
        resumed = make((r, new_world))
        resumed.load_state_dict(states[0])
        for b in resumed:
            targets.append(b["targets"][: b.meta.size][b["segment_ids"][: b.meta.size] > 0])
    with Packed(path, 16, block=64) as p:
        want = Counter(all_rows(p)["targets"][all_rows(p)["segment_ids"] > 0].tolist())
    assert Counter(np.concatenate(targets).tolist()) == want


def test_packed_rows_of_two_corpora_mix_on_a_schedule(tmp_path):
    a = Packed(write_flr(tmp_path / "a.flr", [[1] * 40] * 6), 8)
    b = Packed(write_flr(tmp_path / "b.flr", [[2] * 30] * 12), 8)
    seq = fl.Seq.mix(
        [
            (fl.Dataset(a.record, a).shuffle(1), fl.Schedule.until(0.5)),
            (fl.Dataset(b.record, b).shuffle(2), fl.Schedule.ramp(0.0, 1.0)),
        ]
    )
    firsts = [x for bt in fl.Loader(seq, 4) for x in bt["input_ids"][: bt.meta.size, 0].tolist()]
    assert firsts.count(1) == len(a) and firsts.count(2) == len(b)
    assert firsts[: len(firsts) // 4].count(1) > firsts[-len(firsts) // 4 :].count(1)
    a.close()
    b.close()


def _next_token(row):
    """A map, so that worker processes make the batches (and reopen the corpus)."""
    return {**row, "targets": row["targets"] + 1}


def test_two_workers_give_the_same_batches(tmp_path):
    path = a_corpus(tmp_path)
    p = Packed(path, 16, block=64)
    want = [b["targets"].tolist() for b in fl.Loader(p, 4, seed=1)]
    with fl.Loader(p, 4, seed=1, workers=2) as loader:
        assert [b["targets"].tolist() for b in loader] == want
    mapped = fl.Dataset(p.record, p).map(_next_token)
    with fl.Loader(mapped, 4, seed=1, workers=2) as loader:
        got = [(b["targets"] - 1).tolist() for b in loader]
    assert got == want
    p.close()


def test_torch_output_holds_tensors(tmp_path):
    torch = pytest.importorskip("torch")
    p = Packed(a_corpus(tmp_path), 16)
    batch = next(iter(fl.Loader(p, 4, seed=1, output="torch")))
    assert isinstance(batch["segment_ids"], torch.Tensor)
    assert batch["position_ids"].dtype == torch.int32 and batch["loss_mask"].dtype == torch.bool
    p.close()


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("way", ["c", "numba"])
def test_compiled_and_numpy_rows_are_identical(tmp_path, strategy, way, monkeypatch):
    if way == "numba":
        monkeypatch.setattr(packing, "available", lambda: False)
        if _kernels.get() is None:
            pytest.skip("numba is not installed")
    elif not packing.available():
        pytest.skip("the compiled packing is not built here")
    rng = np.random.default_rng(5)
    docs = [rng.integers(0, 2**40, int(n)).tolist() for n in rng.integers(0, 40, 50)]
    masks = [rng.integers(0, 2, len(d)).tolist() for d in docs]
    for path in (write_corpus(tmp_path / "c.nndataset", docs, masks),
                 write_flr(tmp_path / "c.flr", [[t % 65536 for t in d] for d in docs], masks,
                           MaskedDoc16)):  # fmt: skip
        with Packed(path, 12, strategy=strategy, block=7, doc_ids=True) as p:
            idx = rng.integers(0, len(p), 20)
            compiled = p.getitems(idx)
            numpy_rows = {k: np.empty_like(v) for k, v in compiled.items()}
            if p._flr is not None:
                f = p._flr
                _packed.fill_numpy(p.plan, idx, False, f.tok, f.tok[:0].view(np.uint8), f.start,
                                   f.mask8, f.start, True, 0, numpy_rows)  # fmt: skip
            else:
                lay, u8 = p._layout, p._ds._u8
                _packed.fill_numpy(p.plan, idx, True, np.empty(0, np.uint16), u8, lay.tok_start,
                                   u8, lay.mask_start, True, 0, numpy_rows)  # fmt: skip
        for k in compiled:
            assert compiled[k].tolist() == numpy_rows[k].tolist(), (path, k)


def test_packed_rows_pickle_by_path_and_share_their_plan(tmp_path):
    p = Packed(a_corpus(tmp_path), 16, strategy="concat", seed=None)
    again = pickle.loads(pickle.dumps(p))
    shared = p.share()
    assert shared.plan is p.plan
    idx = np.arange(len(p))
    for other in (again, shared):
        assert all(np.array_equal(all_rows(p)[k], other.getitems(idx)[k]) for k in p.record.fields)
        other.close()
    p.close()


def test_bad_options_are_feedline_errors_naming_the_option(tmp_path):
    path = a_corpus(tmp_path, n=20)
    for kwargs, name in [
        ({"seq_len": 0}, "seq_len"),
        ({"seq_len": 2.5}, "seq_len"),
        ({"strategy": "worst_fit"}, "strategy"),
        ({"block": 0}, "block"),
        ({"seed": -1}, "seed"),
        ({"pad_id": 2**63}, "pad_id"),
    ]:
        args = {"seq_len": 8, **kwargs}
        with pytest.raises(FeedlineError, match=name):
            Packed(path, **args)
        with pytest.raises(DomainError):
            Packed(path, **args)
    p = Packed(path, 8)
    with pytest.raises(BoundsError, match=r"packed row indices must be in \[0, "):
        p.getitems(np.array([len(p)]))
    with pytest.raises(TypeError, match="a packed row index is an int"):
        p["0"]
    p.close()


def test_a_corpus_without_targets_has_no_rows(tmp_path):
    for strategy in STRATEGIES:
        with Packed(write_flr(tmp_path / "e.flr", [[1], [], [2]]), 4, strategy=strategy) as p:
            assert len(p) == 0 and p.padding == 0.0
            assert p.getitems(np.array([], dtype=np.int64))["targets"].shape == (0, 4)


def test_a_token_id_of_2_63_or_more_in_an_nndataset_is_refused_naming_its_document(tmp_path):
    p = write_corpus(tmp_path / "big.nndataset", [[1, 2, 3], [4, 2**63 + 5, 6]])
    with (
        Packed(p, 8, seed=None, strategy="concat") as rows,
        pytest.raises(fl.FormatError, match="document 1"),
    ):
        rows[0]


def test_doc_ids_are_an_option_that_changes_no_other_field(tmp_path):
    path = a_corpus(tmp_path)
    with Packed(path, 16) as plain, Packed(path, 16, doc_ids=True) as with_docs:
        assert "doc_ids" not in plain.record.fields
        assert plain.record.fields["segment_ids"].dtype == np.int32
        a, b = all_rows(plain), all_rows(with_docs)
        assert all(a[k].tolist() == b[k].tolist() for k in a)
        assert ((b["doc_ids"] > 0) == (b["segment_ids"] > 0)).all()


def test_the_test_subset_is_packed_on_its_own(tmp_path):
    p = write_corpus(tmp_path / "t.nndataset", [[1, 2, 3]], test_docs=[[90, 91, 92], [93, 94]])
    with Packed(p, 4, subset="test", seed=None) as rows:
        assert len(rows) == 1
        assert rows[0]["targets"].tolist() == [91, 92, 94, 0]
        assert rows[0]["segment_ids"].tolist() == [1, 1, 2, 0]


def test_a_corpus_at_a_url_packs_the_rows_of_the_local_file(tmp_path):
    fsspec = pytest.importorskip("fsspec")
    rng = np.random.default_rng(2)
    docs = [rng.integers(0, 2**40, int(n)).tolist() for n in rng.integers(0, 60, 40)]
    masks = [rng.integers(0, 2, len(d)).tolist() for d in docs]
    local = write_corpus(tmp_path / "c.nndataset", docs, masks)
    url = f"memory://feedline-tests/{tmp_path.name}/c.nndataset"
    fsspec.filesystem("memory").pipe(url, local.read_bytes())
    with Packed(local, 16, block=9) as here, Packed(url, 16, block=9) as there:
        idx = np.array([3, 0, len(here) - 1, 3])
        a, b = here.getitems(idx), there.getitems(idx)
        assert all(a[k].tolist() == b[k].tolist() for k in a)


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.integers(0, 40), min_size=1, max_size=30),
    st.integers(1, 12),
    st.integers(1, 8),
    st.sampled_from(STRATEGIES),
    st.one_of(st.none(), st.integers(0, 5)),
)
def test_any_corpus_packs_every_target_once_alike_compiled_and_in_numpy(
    tmp_path_factory, lengths, seq_len, block, strategy, seed
):
    path = write_flr(tmp_path_factory.mktemp("p") / "c.flr", placed_docs(lengths))
    with Packed(path, seq_len, strategy=strategy, block=block, seed=seed, doc_ids=True) as p:
        got = all_rows(p)
        f = p._flr
        numpy_rows = {k: np.empty_like(v) for k, v in got.items()}
        if len(p):
            _packed.fill_numpy(p.plan, np.arange(len(p)), False, f.tok, f.tok[:0].view(np.uint8),
                               f.start, f.mask8, f.start, False, 0, numpy_rows)  # fmt: skip
    assert all(got[k].tolist() == numpy_rows[k].tolist() for k in got)
    t = got["targets"][got["segment_ids"] > 0]
    assert sorted(t.tolist()) == [d * BASE + k for d, n in enumerate(lengths) for k in range(1, n)]
    if strategy == "concat":  # padding only in the last row
        assert (got["segment_ids"][:-1] > 0).all()


def test_a_packing_is_pinned_in_the_clear():
    """A compatibility promise, like the orders: the same corpus, options and seed pack
    the same rows on every platform (the documents' order is feedline's shuffle)."""
    counts = np.array(LENGTHS)
    order = _pack_plan.document_order(len(counts), 7, 0)
    assert order.tolist() == [15, 6, 12, 7, 14, 5, 13, 4, 0, 11, 2, 8, 3, 9, 1, 10]
    plan = _pack_plan.plan(counts, order, 8, "first_fit", 5)
    rows = [
        [(int(plan.doc[s]), int(plan.off[s]), int(plan.pairs[s])) for s in range(a, b)]
        for a, b in zip(plan.row_ptr[:-1].tolist(), plan.row_ptr[1:].tolist())
    ]
    assert rows[:6] == [
        [(7, 0, 8)],
        [(14, 0, 8)],
        [(14, 8, 8)],
        [(14, 16, 8)],
        [(7, 8, 3), (6, 0, 2), (15, 0, 1)],  # the first block's last row
        [(5, 0, 8)],
    ]
    assert len(rows) == 18


_FRESH = """
import sys
import feedline as fl
p = fl.text.Packed({path!r}, 32, strategy={strategy!r}, block=50)
total = 0
for batch in fl.Loader(fl.Dataset(p.record, p).shuffle(1), 8, seed=1, workers=0):
    total += int(batch.targets[batch.segment_ids > 0].sum())
print(total, "numba" in sys.modules)
"""


@pytest.mark.parametrize("strategy", ["first_fit", "best_fit"])
def test_a_fresh_process_packs_and_fills_rows_without_loading_numba(tmp_path, strategy):
    # Packed(...) waited 430 - 600 ms for numba (the documents' order and the placement),
    # and the first pass filled rows while the fill kernel loaded: the C packing needs no
    # loading, and the order's numpy path serves the shuffle.
    if not packing.available():
        pytest.skip("the compiled packing is not built here")
    path = a_corpus(tmp_path)
    done = subprocess.run(
        [sys.executable, "-c", _FRESH.format(path=str(path), strategy=strategy)],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    total, numba_imported = done.stdout.split()
    with Packed(path, 32, strategy=strategy, block=50) as p:
        b = all_rows(p)
    assert int(total) == int(b["targets"][b["segment_ids"] > 0].sum())
    assert numba_imported == "False"


def test_the_compiled_packing_refuses_what_lies_outside_its_arrays(tmp_path):
    if not packing.available():
        pytest.skip("the compiled packing is not built here")
    sizes, ptr = np.array([3, 9, 2], np.int64), np.array([0, 3], np.int64)
    local, per_block = np.empty(3, np.int64), np.empty(1, np.int64)
    with pytest.raises(ValueError, match="piece 1 of 9 pairs, rows of 8"):
        packing.placer("best_fit")(sizes, ptr, 8, local, per_block)
    with pytest.raises(IndexError, match=r"block 0: pieces \[0, 4\) of 3"):
        packing.placer("first_fit")(sizes, np.array([0, 4], np.int64), 9, local, per_block)
    with Packed(a_corpus(tmp_path), 16, strategy="best_fit", block=20) as p:
        f = p._flr
        args = (False, f.tok, f.tok[:0].view(np.uint8), f.start, f.mask8, f.start)
        batch = {k: np.zeros((1, 16), v.dtype) for k, v in p.getitems([0]).items()}
        with pytest.raises(IndexError, match=r"batch row 0 \(packed row 99999\)"):
            packing.fill(p.plan, np.array([99999]), args, False, 0, batch)
        short = (False, f.tok[:10], *args[2:])  # the tokens cut short under the plan
        rows = {k: np.zeros((len(p), 16), v.dtype) for k, v in batch.items()}
        with pytest.raises(IndexError, match="its plan or its tokens lie outside"):
            packing.fill(p.plan, np.arange(len(p)), short, False, 0, rows)
        with pytest.raises(ValueError, match="one a batch row at least"):
            packing.fill(p.plan, np.arange(2), args, False, 0, batch)


def test_the_compiled_packing_refuses_hostile_plans():
    # From a hostile review under ASan/UBSan: an offset near 2**61 wrapped the byte
    # offset of a wide corpus to 0 and gave its first tokens without an error, the mask's
    # start likewise; float arrays took int64 bits.
    if not packing.available():
        pytest.skip("the compiled packing is not built here")
    i64 = lambda *v: np.array(v, np.int64)  # noqa: E731

    def fill(off, wide=True, mstart=0, has_mask=False, local_dtype=np.int64):
        z = lambda dt: np.zeros((1, 4), dt)  # noqa: E731
        packing._packing.fill(
            i64(0), i64(0, 1), i64(0), i64(off), i64(2), wide,
            np.arange(9, dtype=np.uint8), np.arange(24, dtype=np.uint8), i64(0),
            np.zeros(9, np.uint8), i64(mstart), has_mask, -1, z(local_dtype), z(np.int64),
            z(np.bool_), z(np.int32), z(np.int32), None,
        )  # fmt: skip

    with pytest.raises(IndexError, match="lie outside their arrays"):
        fill(2**61)
    with pytest.raises(IndexError, match="lie outside their arrays"):
        fill(0, wide=False, mstart=2**63 - 1, has_mask=True)
    with pytest.raises(ValueError, match="inp: int64"):
        fill(0, local_dtype=np.float64)
    with pytest.raises(ValueError, match="local: int64"):
        packing.placer("best_fit")(i64(1), i64(0, 1), 4, np.zeros(1), i64(0))
