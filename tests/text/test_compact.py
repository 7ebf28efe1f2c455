"""Compact corpora: ``build(..., "x.flr")``, ``feedline text build -o x.flr``, and
``Windows`` over a ``.flr`` giving the ``.nndataset``'s windows for the same documents."""

from __future__ import annotations

import os

import numpy as np
import pytest

import feedline as fl
from feedline._base import windowfill
from feedline.cli import main
from feedline.errors import FormatError
from feedline.text import ByteTokenizer, _compact

A, E = "<|assistant|>", "<|end_of_assistant|>"


def _corpus(path, n=120, seed=0):
    rng = np.random.default_rng(seed)
    lines = []
    for i in range(n):
        text = "".join(chr(97 + int(x)) for x in rng.integers(0, 26, int(rng.integers(1, 50))))
        lines.append(text[:5] + A + text[5:] + E if i % 3 == 0 else text)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_cli_build_dash_o_flr_writes_a_compact_flr(tmp_path):
    corpus = _corpus(tmp_path / "c.txt")
    out = tmp_path / "c.flr"
    assert main(["text", "build", str(corpus), "-o", str(out), "--quiet"]) == 0
    with fl.recfile.open(out) as f:  # an .nndataset under that name is refused here
        assert f.record.fields["tokens"].dtype == np.uint16
        assert len(f) == 120
        assert f.record.dims["V"] == ByteTokenizer().vocab_size


@pytest.mark.parametrize("scope", ["all", "assistant"])
def test_flr_build_holds_the_nndataset_documents_in_two_bytes_a_token(tmp_path, scope):
    corpus = _corpus(tmp_path / "c.txt")
    tok = ByteTokenizer()
    nn, flr = tmp_path / "c.nndataset", tmp_path / "c.flr"
    s1 = fl.text.build(corpus, nn, tok, test_docs=10, loss_scope=scope, created=1)
    s2 = fl.text.build(corpus, flr, tok, test_docs=10, loss_scope=scope, created=1)
    assert (s1.tokens, s1.loss_tokens, s1.train_docs, s1.test_docs) == (
        s2.tokens,
        s2.loss_tokens,
        s2.train_docs,
        s2.test_docs,
    )
    assert s2.bytes == os.path.getsize(flr)
    with fl.nndataset.open(nn) as ds, fl.recfile.open(flr) as f:
        tokens, test = f.columns["tokens"], np.asarray(f.columns["test"])
        assert tokens.values.dtype == np.uint16
        assert tokens.values.nbytes == 2 * s2.tokens  # 2 bytes a token
        for subset, rows in (("train", np.flatnonzero(~test)), ("test", np.flatnonzero(test))):
            for i, row in enumerate(rows.tolist()):
                doc = ds.text_doc(subset, i)
                a, b = int(tokens.offsets[row]), int(tokens.offsets[row + 1])
                assert tokens.values[a:b].tolist() == doc.tokens.tolist()
                if scope == "assistant":
                    mask = f.columns["loss_mask"].values[a:b]
                    assert mask.tolist() == doc.loss_mask.tolist()
        assert ("loss_mask" in f.columns) == (scope == "assistant")


def test_a_vocabulary_over_65536_ids_is_stored_as_uint32():
    from feedline.text._build_flr import token_dtype

    assert token_dtype(258) == np.uint16 and token_dtype(65_536) == np.uint16
    assert token_dtype(65_537) == np.uint32
    with pytest.raises(ValueError, match="uint16 or uint32"):
        token_dtype(2**32 + 1)


class _Liar(ByteTokenizer):
    """Says 70,000 ids but returns one that a uint16 cannot hold."""

    vocab_size = 70_000

    def encode_flow(self, docs):
        flow, counts = super().encode_flow(docs)
        if len(docs) > 2:
            flow = flow.copy()
            flow[int(counts[:2].sum())] = 2**32  # document 2's first token
        return flow, counts


def test_a_token_id_the_stored_dtype_cannot_hold_is_a_format_error_naming_the_document(tmp_path):
    corpus = _corpus(tmp_path / "c.txt", n=5)
    out = tmp_path / "c.flr"
    with pytest.raises(FormatError, match=r"document 2 .*token id 4294967296.*uint32") as e:
        fl.text.build(corpus, out, _Liar())
    assert str(corpus) in str(e.value)
    assert sorted(os.listdir(tmp_path)) == ["c.txt"]  # nothing written, no temporary


def _pair(tmp_path, scope):
    corpus = _corpus(tmp_path / "c.txt", n=200, seed=1)
    nn, flr = tmp_path / f"{scope}.nndataset", tmp_path / f"{scope}.flr"
    for out in (nn, flr):
        fl.text.build(corpus, out, ByteTokenizer(), test_docs=15, loss_scope=scope, created=1)
    return nn, flr


@pytest.fixture(params=["c", "compiled", "numpy"])
def path_kind(request, monkeypatch):
    # C (``_base.windowfill``), else numba's kernel, else numpy: each on its own
    if request.param == "c":
        if not windowfill.available():
            pytest.skip("the compiled windows are not built here")
        return request.param
    monkeypatch.setattr(windowfill, "available", lambda: False)
    if request.param == "numpy":
        monkeypatch.setattr(_compact.kernels, "get", lambda *a, **k: None)
    return request.param


@pytest.mark.parametrize("scope", ["all", "assistant"])
def test_windows_over_a_flr_and_an_nndataset_of_one_corpus_are_identical(
    tmp_path, scope, path_kind
):
    nn, flr = _pair(tmp_path, scope)
    rng = np.random.default_rng(3)
    for subset in ("train", "test"):
        for cross_docs in (True, False):
            for seq_len, stride in ((16, None), (7, 3), (300, None)):
                kw = dict(stride=stride, subset=subset, cross_docs=cross_docs, position_ids=True)
                with (
                    fl.text.Windows(nn, seq_len, **kw) as w1,
                    fl.text.Windows(flr, seq_len, pad_id=0, **kw) as w2,
                ):
                    assert len(w1) == len(w2) > 0
                    idx = rng.permutation(len(w1))
                    b1, b2 = w1.getitems(idx), w2.getitems(idx)
                    assert b1.keys() == b2.keys()
                    for k in b1:
                        assert b1[k].tolist() == b2[k].tolist(), (k, subset, cross_docs)


def test_a_loader_over_a_flr_corpus_gives_the_nndataset_batches(tmp_path):
    nn, flr = _pair(tmp_path, "assistant")
    w1, w2 = fl.text.Windows(nn, 32), fl.text.Windows(flr, 32)
    for b1, b2 in zip(fl.Loader(w1, 4, seed=5), fl.Loader(w2, 4, seed=5), strict=True):
        for k in ("input_ids", "targets", "loss_mask", "doc_ids"):
            assert np.asarray(b1[k]).tolist() == np.asarray(b2[k]).tolist()
    w1.close()
    w2.close()


def test_a_flr_without_a_test_column_has_no_test_subset(tmp_path):
    corpus = _corpus(tmp_path / "c.txt", n=4)
    out = tmp_path / "c.flr"
    fl.text.build(corpus, out, ByteTokenizer())
    assert len(fl.text.Windows(out, 8)) > 0
    with pytest.raises(FormatError, match="no test subset"):
        fl.text.Windows(out, 8, subset="test")


def test_a_flr_that_is_not_a_corpus_is_refused_saying_what_it_holds(tmp_path):
    class Pic(fl.Record):
        x = fl.field((), "int64")

    out = tmp_path / "p.flr"
    fl.recfile.write(out, Pic, {"x": np.arange(3)})
    with pytest.raises(FormatError, match="expected a compact text corpus"):
        fl.text.Windows(out, 8)
