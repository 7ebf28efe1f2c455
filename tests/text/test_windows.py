"""Language-model windows over a .nndataset: every target once, masks, doc ids, orders."""

from __future__ import annotations

import pickle
import subprocess
import sys
from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import feedline as fl
from feedline._base import kernels as _kernels
from feedline._base import windowfill
from feedline.errors import BoundsError
from feedline.text import Windows, _windows


def write_corpus(path, docs, masks=None, test_docs=(), test_masks=None):
    scope = "assistant" if masks is not None else "all"
    fl.nndataset.write(
        path,
        fl.nndataset.Build(
            {"size": 1000},
            "corpus.txt",
            "",
            len(docs) + len(test_docs),
            scope,
            train_docs=docs,
            train_masks=masks,
            test_docs=test_docs,
            test_masks=test_masks,
            created=1,
        ),
    )
    return path


def expected_windows(docs, masks, seq_len, stride, cross_docs, pad_id=0):
    """Windows written out with plain lists, from the definition."""
    flow, mask, doc, pos = [], [], [], []
    for d, tokens in enumerate(docs):
        flow += list(tokens)
        mask += [True] * len(tokens) if masks is None else [bool(m) for m in masks[d]]
        doc += [d + 1] * len(tokens)
        pos += list(range(len(tokens)))
    spans = []
    if cross_docs:
        a = 0
        while a < len(flow) - 1:
            spans.append((a, min(a + seq_len + 1, len(flow))))
            a += stride
    else:
        start = 0
        for tokens in docs:
            a = start
            while a < start + len(tokens) - 1:
                spans.append((a, min(a + seq_len + 1, start + len(tokens))))
                a += stride
            start += len(tokens)
    out = []
    for a, b in spans:
        n = b - a - 1
        pad = seq_len - n
        out.append(
            {
                "input_ids": flow[a : b - 1] + [pad_id] * pad,
                "targets": flow[a + 1 : b] + [pad_id] * pad,
                "loss_mask": mask[a + 1 : b] + [False] * pad,
                "doc_ids": doc[a : b - 1] + [0] * pad,
                "position_ids": pos[a : b - 1] + [0] * pad,
            }
        )
    return out


def as_lists(batch, row):
    return {k: v[row].tolist() for k, v in batch.items()}


DOCS = [[11, 12, 13, 14, 15], [], [21, 22], [31], [41, 42, 43, 44, 45, 46, 47]]
MASKS = [[0, 1, 1, 0, 0], [], [1, 1], [0], [0, 0, 1, 1, 1, 0, 1]]


@pytest.fixture
def corpus(tmp_path):
    return write_corpus(tmp_path / "c.nndataset", DOCS, MASKS)


@pytest.fixture(params=["c", "compiled", "numpy"])
def path_kind(request, monkeypatch):
    # C (``_base.windowfill``), else numba's kernel, else numpy: each on its own
    if request.param == "c":
        if not windowfill.available():
            pytest.skip("the compiled windows are not built here")
        return request.param
    monkeypatch.setattr(windowfill, "available", lambda: False)
    if request.param == "numpy":
        monkeypatch.setattr(_kernels, "get", lambda: None)
    elif _kernels.get() is None:
        pytest.skip("numba is not installed")
    return request.param


def test_every_target_of_the_flow_is_trained_exactly_once(corpus, path_kind):
    with Windows(corpus, 4) as w:
        batch = w.getitems(np.arange(len(w)))
    flow = [t for d in DOCS for t in d]
    trained = batch["targets"][batch["doc_ids"] > 0]
    assert trained.tolist() == flow[1:]
    assert len(w) == -(-(len(flow) - 1) // 4)


@pytest.mark.parametrize(
    "seq_len,stride,cross_docs,position_ids",
    [
        (4, None, True, True),
        (3, 2, True, False),
        (2, 5, True, True),
        (4, None, False, True),
        (2, 1, False, False),
        (30, None, True, True),
        (30, None, False, False),
    ],
)
def test_windows_match_their_definition(
    corpus, path_kind, seq_len, stride, cross_docs, position_ids
):
    with Windows(
        corpus, seq_len, stride=stride, cross_docs=cross_docs, position_ids=position_ids, pad_id=7
    ) as w:
        want = expected_windows(DOCS, MASKS, seq_len, stride or seq_len, cross_docs, pad_id=7)
        assert len(w) == len(want)
        batch = w.getitems(np.arange(len(w))[::-1])
        for row, expected in enumerate(want[::-1]):
            got = as_lists(batch, row)
            if not position_ids:
                expected.pop("position_ids")
            assert got == expected, row


def test_windows_never_cross_a_document_when_asked(corpus, path_kind):
    with Windows(corpus, 3, cross_docs=False) as w:
        ids = w.getitems(np.arange(len(w)))["doc_ids"]
    for row in ids:
        assert len(set(row[row > 0].tolist())) == 1
    # documents of fewer than two tokens (the empty one and [31]) have no target
    assert set(ids[ids > 0].tolist()) == {1, 3, 5}


def test_position_ids_restart_at_each_document(corpus, path_kind):
    with Windows(corpus, 16, position_ids=True) as w:
        b = w[0]
    assert b["position_ids"][:14].tolist() == [0, 1, 2, 3, 4, 0, 1, 0, 0, 1, 2, 3, 4, 5]
    assert b["doc_ids"][:14].tolist() == [1, 1, 1, 1, 1, 3, 3, 4, 5, 5, 5, 5, 5, 5]
    assert b["loss_mask"][14:].tolist() == [False, False]


def test_the_loss_mask_is_the_targets_mask(corpus, path_kind):
    flow_mask = [bool(m) for ms in MASKS for m in ms]
    with Windows(corpus, 4) as w:
        batch = w.getitems(np.arange(len(w)))
    assert batch["loss_mask"][batch["doc_ids"] > 0].tolist() == flow_mask[1:]


def test_a_corpus_with_loss_scope_all_trains_every_target(tmp_path, path_kind):
    p = write_corpus(tmp_path / "all.nndataset", DOCS)
    with Windows(p, 4) as w:
        batch = w.getitems(np.arange(len(w)))
    assert batch["loss_mask"].sum() == sum(map(len, DOCS)) - 1


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.lists(st.integers(0, 2**40), max_size=12), min_size=1, max_size=8),
    st.integers(1, 9),
    st.integers(1, 9),
    st.booleans(),
    st.booleans(),
    st.data(),
)
def test_compiled_and_numpy_windows_are_identical(
    tmp_path_factory, docs, seq_len, stride, cross_docs, with_masks, data
):
    if _kernels.get() is None and not windowfill.available():
        pytest.skip("neither numba nor the compiled windows are here")
    masks = (
        [data.draw(st.lists(st.booleans(), min_size=len(d), max_size=len(d))) for d in docs]
        if with_masks
        else None
    )
    p = write_corpus(tmp_path_factory.mktemp("h") / "c.nndataset", docs, masks)
    with Windows(p, seq_len, stride=stride, cross_docs=cross_docs, position_ids=True) as w:
        if not len(w):
            return
        idx = np.array(data.draw(st.lists(st.integers(0, len(w) - 1), min_size=1, max_size=10)))
        ways = {}
        if windowfill.available():  # C
            ways["c"] = w.getitems(idx)
        if _kernels.get() is not None:  # numba's kernel, C turned off
            with mock.patch.object(windowfill, "available", lambda: False):
                ways["numba"] = w.getitems(idx)
        numpy_batch = {k: np.empty_like(v) for k, v in next(iter(ways.values())).items()}
        _windows._fill_numpy(w._ds._u8, w._layout, *w.spans(idx), 0, numpy_batch)
        want = expected_windows(docs, masks, seq_len, stride, cross_docs)
    for compiled in ways.values():
        for k in compiled:
            assert compiled[k].tolist() == numpy_batch[k].tolist(), k
        for row, i in enumerate(idx.tolist()):
            assert as_lists(compiled, row) == want[i]


def test_the_test_subset_has_its_own_windows(tmp_path, path_kind):
    p = write_corpus(tmp_path / "t.nndataset", DOCS[:1], test_docs=[[90, 91, 92]])
    with Windows(p, 2, subset="test") as w:
        assert len(w) == 1
        assert w[0]["input_ids"].tolist() == [90, 91]
        assert w[0]["targets"].tolist() == [91, 92]
        assert w[0]["doc_ids"].tolist() == [1, 1]


def test_a_shuffled_loader_over_windows_resumes_exactly(tmp_path):
    rng = np.random.default_rng(0)
    docs = [rng.integers(0, 500, rng.integers(0, 40)).tolist() for _ in range(60)]
    p = write_corpus(tmp_path / "big.nndataset", docs)
    w = Windows(p, 8)
    full = [b["targets"].copy() for b in fl.Loader(w, 4, seed=3)]
    first = fl.Loader(w, 4, seed=3)
    it = iter(first)
    head = [next(it)["targets"].copy() for _ in range(5)]
    state = first.state_dict()
    second = fl.Loader(Windows(p, 8), 4, seed=3)
    second.load_state_dict(state)
    rest = [b["targets"].copy() for b in second]
    assert [x.tolist() for x in head + rest] == [x.tolist() for x in full]
    trained = np.concatenate(full)
    assert sorted(trained[trained > 0].tolist()) != []
    w.close()


def test_windows_shard_across_ranks_exactly_once(tmp_path):
    rng = np.random.default_rng(1)
    docs = [rng.integers(1, 500, rng.integers(1, 30)).tolist() for _ in range(40)]
    p = write_corpus(tmp_path / "s.nndataset", docs)
    w = Windows(p, 5, position_ids=True)
    seen = []
    for rank in range(3):
        for b in fl.Loader(w, 4, seed=9, shard=(rank, 3)):
            seen += [
                tuple(r)
                for r in np.stack([b["doc_ids"][:, 0], b["position_ids"][:, 0]], 1).tolist()
            ]
    everything = fl.Loader(w, len(w)).__iter__().__next__()
    want = np.stack([everything["doc_ids"][:, 0], everything["position_ids"][:, 0]], 1)
    assert sorted(seen) == sorted(tuple(r) for r in want.tolist())
    w.close()


def test_windows_of_two_corpora_mix_on_a_schedule(tmp_path):
    a = Windows(write_corpus(tmp_path / "a.nndataset", [[1] * 50]), 4)
    b = Windows(write_corpus(tmp_path / "b.nndataset", [[2] * 90]), 4)
    seq = fl.Seq.mix(
        [
            (fl.Dataset(a.record, a).shuffle(1), fl.Schedule.until(0.5)),
            (fl.Dataset(b.record, b).shuffle(2), fl.Schedule.ramp(0.0, 1.0)),
        ]
    )
    batches = [bt["input_ids"][:, 0].tolist() for bt in fl.Loader(seq, 6)]
    flat = [x for bt in batches for x in bt]
    assert flat.count(1) == len(a) and flat.count(2) == len(b)
    assert flat[: len(flat) // 4].count(1) > flat[-len(flat) // 4 :].count(1)
    a.close()
    b.close()


def test_windows_pickle_by_path(corpus):
    w = Windows(corpus, 3, stride=2, cross_docs=False, position_ids=True)
    again = pickle.loads(pickle.dumps(w))
    idx = np.arange(len(w))
    assert all(np.array_equal(w.getitems(idx)[k], again.getitems(idx)[k]) for k in w.record.fields)
    assert again.record.same_schema(w.record)
    w.close()
    again.close()


def test_a_loader_keeps_the_file_open_after_the_caller_closes_its_handle(corpus):
    w = Windows(corpus, 4)
    loader = fl.Loader(w, 2)
    w.close()
    assert sum(b.meta.size for b in loader) == 4


def test_bad_arguments_and_indices_are_clear_errors(corpus, tmp_path):
    with pytest.raises(ValueError, match="seq_len must be >= 1"):
        Windows(corpus, 0)
    with pytest.raises(TypeError, match="stride must be an int"):
        Windows(corpus, 2, stride=1.5)
    with pytest.raises(ValueError, match="no test subset"):
        Windows(corpus, 2, subset="test")
    with pytest.raises(ValueError, match="subset must be 'train' or 'test'"):
        Windows(corpus, 2, subset="dev")
    with pytest.raises(FileNotFoundError):
        Windows(tmp_path / "missing.nndataset", 2)
    w = Windows(corpus, 4)
    with pytest.raises(BoundsError, match=r"window indices must be in \[0, 4\)"):
        w.getitems(np.array([4]))
    with pytest.raises(TypeError, match="a window index is an int"):
        w["0"]
    w.close()
    with pytest.raises(ValueError, match="closed"):
        w.getitems(np.array([0]))


def test_a_corpus_of_one_token_has_no_windows(tmp_path):
    with Windows(write_corpus(tmp_path / "one.nndataset", [[5]]), 4) as w:
        assert len(w) == 0
        assert w.getitems(np.array([], dtype=np.int64))["input_ids"].shape == (0, 4)


def test_a_pad_id_outside_int64_is_refused_when_built_not_when_read(corpus, path_kind):
    with pytest.raises(ValueError, match=r"pad_id must be in \[0, 2\*\*63\), got 9223372036"):
        Windows(corpus, 4, pad_id=2**63)
    with Windows(corpus, 4, pad_id=2**63 - 1) as w:  # the largest that fits is kept
        assert w[len(w) - 1]["input_ids"][-1] == 2**63 - 1


@pytest.mark.parametrize("where", ["first", "middle", "last"])
@pytest.mark.parametrize("cross_docs", [True, False])
def test_a_token_id_of_2_63_or_more_is_refused_naming_its_document(
    tmp_path, path_kind, where, cross_docs
):
    # the format allows any u64; a window is int64, where 2**63 + 5 read as negative
    big = 2**63 + 5
    doc = [1, 2, 3, 4, 5, 6, 7, 8]
    doc[{"first": 0, "middle": 4, "last": 7}[where]] = big
    path = write_corpus(tmp_path / "big.nndataset", [[9, 9, 9], doc])
    w = Windows(path, 3, cross_docs=cross_docs)
    with pytest.raises(
        fl.FormatError,
        match=r"train document 1 \(doc_id 2\) holds the "
        rf"token id {big}",
    ) as info:
        w.getitems(np.arange(len(w)))
    at = {"first": 0, "middle": 4, "last": 7}[where]
    with fl.nndataset.open(path) as ds:
        assert ds.text_doc("train", 1).tokens[at] == big  # uint64 views hold it
    assert info.value.path == str(path)
    assert path.read_bytes()[info.value.offset : info.value.offset + 8] == big.to_bytes(8, "little")
    w.close()


def test_token_ids_up_to_2_63_minus_1_read_into_windows(tmp_path, path_kind):
    path = write_corpus(tmp_path / "max.nndataset", [[2**63 - 1, 0, 2**63 - 1]])
    with Windows(path, 2) as w:
        assert w[0]["input_ids"].tolist() == [2**63 - 1, 0]
        assert w[0]["targets"].tolist() == [0, 2**63 - 1]


@pytest.mark.parametrize("masks", [False, True])
def test_only_windows_that_read_a_big_token_id_are_refused(tmp_path, path_kind, masks):
    # ids are checked by blocks of the flow, read once; a block holding a big id is
    # checked batch by batch, so only the windows that read it fail
    flow = list(range(3 * _windows._ID_BLOCK))
    flow[100] = 2**63
    docs = [flow[:5000], flow[5000:]]
    path = write_corpus(
        tmp_path / "one.nndataset", docs, [[1] * len(d) for d in docs] if masks else None
    )
    with Windows(path, 64) as w:
        assert w.getitems([50])["input_ids"][0, 0] == 50 * 64  # same block, no big id
        with pytest.raises(fl.FormatError, match=r"train document 0 \(doc_id 1\)"):
            w.getitems([1, 2])
        w.getitems(np.arange(3, len(w)))  # every other window reads
        assert w._id_clean == len(w._id_blocks) - 1


_FRESH = """
import sys
import numpy as np
import feedline as fl
w = fl.text.Windows({path!r}, 4, position_ids=True)
total = 0
for batch in fl.Loader(fl.Dataset(w.record, w).shuffle(1), 3, seed=1, workers=0):
    total += int(batch.targets[batch.loss_mask].sum())
print(total, "numba" in sys.modules)
"""


def test_a_fresh_process_makes_windows_without_loading_numba(corpus):
    # The first batch of windows waited 480 - 640 ms for numba's kernel to load: the
    # compiled windows need no loading.
    if not windowfill.available():
        pytest.skip("the compiled windows are not built here")
    done = subprocess.run(
        [sys.executable, "-c", _FRESH.format(path=str(corpus))],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    total, numba_imported = done.stdout.split()
    with Windows(corpus, 4, position_ids=True) as w:
        b = w.getitems(np.arange(len(w)))
    assert int(total) == int(b["targets"][b["loss_mask"]].sum())
    assert numba_imported == "False"


def test_the_compiled_windows_refuse_what_lies_outside_their_buffers(corpus):
    if not windowfill.available():
        pytest.skip("the compiled windows are not built here")
    with Windows(corpus, 4) as w:
        lay, u8 = w._layout, w._ds._u8
        batch = {k: np.zeros((1, 4), v.dtype) for k, v in w.getitems([0]).items()}
        total = int(lay.cum[-1])
        for a, b in ((0, total + 1), (-1, 2), (3, 2), (0, 6)):  # past the flow; 5 pairs > 4
            with pytest.raises(IndexError, match=r"window 0 .* outside the corpus's"):
                windowfill.fill_arena(u8, lay, np.array([a]), np.array([b]), 0, batch)
        with pytest.raises(IndexError, match="reads past its corpus's buffers"):
            windowfill.fill_arena(u8[:40], lay, np.array([0]), np.array([5]), 0, batch)
        with pytest.raises(ValueError, match="rows of int64"):
            windowfill.fill_arena(
                u8,
                lay,
                np.array([0, 1]),
                np.array([2, 3]),
                0,
                batch,  # 2 windows, 1 row
            )


def _raw_fill(tok, tok_base, scale, width, cum, a, b, rows=1, length=4, out_dtype=np.int64):
    i64 = lambda *v: np.array(v, np.int64)  # noqa: E731
    inp = np.zeros((rows, length), out_dtype)
    tgt, ids = inp.copy(), inp.copy()
    lm = np.zeros((rows, length), np.bool_)
    windowfill._windows.fill(
        tok, i64(*tok_base), scale, width, tok.view(np.uint8), i64(*tok_base), False,
        i64(*cum), i64(*a), i64(*b), -1, inp, tgt, lm, ids, None,
    )  # fmt: skip
    return inp, tgt


def test_the_compiled_windows_refuse_hostile_corpora():
    # From a hostile review under ASan/UBSan: a corpus of no documents read cum[1] and
    # tok_base[0] past their arrays; a base near 2**62 wrapped the byte offset to 0 and
    # gave tokens of offset 0 without an error; float rows took int64 bits.
    if not windowfill.available():
        pytest.skip("the compiled windows are not built here")
    tok = np.arange(64, dtype=np.uint8)
    with pytest.raises(IndexError, match="outside the corpus"):
        _raw_fill(tok, [], 1, 8, [10], [0], [3])  # no documents, cum[0] = 10
    with pytest.raises(IndexError, match="reads past its corpus's buffers"):
        _raw_fill(tok, [2**62], 4, 4, [0, 4], [0], [3])
    with pytest.raises(ValueError, match="rows of int64"):
        _raw_fill(tok, [0], 1, 1, [0, 4], [0], [3], out_dtype=np.float64)


def test_the_compiled_windows_read_unaligned_compact_tokens():
    if not windowfill.available():
        pytest.skip("the compiled windows are not built here")
    n, length = 4096, 1024
    tok = np.frombuffer(bytearray(4 * n + 1), np.uint32, n, offset=1)  # not 4-byte aligned
    assert not tok.flags.aligned
    tok[:] = np.arange(n)
    batch = {k: np.zeros((1, length), np.int64) for k in ("input_ids", "targets", "doc_ids")}
    batch["loss_mask"] = np.zeros((1, length), np.bool_)
    windowfill.fill_typed(
        tok, np.array([0, n]), np.array([0]), tok.view(np.uint8)[:0], False,
        np.array([3]), np.array([3 + length + 1]), -1, batch,
    )  # fmt: skip
    assert batch["input_ids"][0].tolist() == list(range(3, 3 + length))
    assert batch["targets"][0].tolist() == list(range(4, 4 + length))
