"""Documents in (issue 18, part 3): eos/bos, separators, JSONL, Parquet, several corpora
at once, and a BPE trained on all of them without chat specials."""

from __future__ import annotations

import json
import os
import tracemalloc

import pytest

import feedline as fl
from feedline.errors import DomainError, FormatError
from feedline.formats import nndataset as nnd
from feedline.text import BPETokenizer, ByteTokenizer, Input, build

EOT = "<|endoftext|>"


def docs_of(path) -> list[list[int]]:
    """Every document's tokens, train then test, from a .nndataset or a .flr."""
    if str(path).endswith(".flr"):
        with fl.recfile.open(path) as f:
            t = f.columns["tokens"]
            return [t.values[t.offsets[i] : t.offsets[i + 1]].tolist() for i in range(len(f))]
    with nnd.open(path) as ds:
        return [
            ds.text_doc(subset, i).tokens.tolist()
            for subset in ("train", "test")
            if subset == "train" or ds.info.has_test
            for i in range(ds.info.num_docs if subset == "train" else ds.info.test_docs)
        ]


def texts_of(path, tok) -> list[str]:
    return [tok.decode(d) for d in docs_of(path)]


@pytest.fixture(params=["nndataset", "flr"])
def suffix(request):
    return request.param


# ---------------------------------------------------------------- eos / bos


def test_eos_and_bos_go_around_every_document_by_name_or_id(tmp_path, suffix):
    (tmp_path / "c.txt").write_text("first doc\nsecond\n")
    tok = ByteTokenizer(specials=("<s>", EOT))
    out = tmp_path / f"o.{suffix}"
    s = build(tmp_path / "c.txt", out, tok, eos=EOT, bos=256, created=0)
    assert texts_of(out, tok) == [f"<s>first doc{EOT}", f"<s>second{EOT}"]
    assert docs_of(out)[0][0] == 256 and docs_of(out)[0][-1] == 257
    assert s.tokens == len("first doc") + len("second") + 4


def test_a_window_across_a_document_boundary_decodes_with_the_end_of_text_token(tmp_path, suffix):
    (tmp_path / "c.txt").write_text("the interpreter starts.\nAssignment statements\n")
    tok = ByteTokenizer(specials=(EOT,))
    out = tmp_path / f"o.{suffix}"
    build(tmp_path / "c.txt", out, tok, eos=EOT, created=0)
    w = fl.text.Windows(str(out), 40)
    assert tok.decode(w[0]["input_ids"]) == f"the interpreter starts.{EOT}Assignment state"
    w.close()


def test_without_eos_nothing_is_added_even_when_the_tokenizer_has_an_end_of_text(tmp_path):
    (tmp_path / "c.txt").write_text("a\nb\n")
    tok = ByteTokenizer(specials=(EOT,))
    build(tmp_path / "c.txt", tmp_path / "o.flr", tok)
    assert docs_of(tmp_path / "o.flr") == [[ord("a")], [ord("b")]]


def test_eos_and_bos_are_never_in_the_loss_mask(tmp_path):
    (tmp_path / "c.txt").write_text("q <|assistant|>a<|end_of_assistant|>\n")
    tok = ByteTokenizer(specials=("<|assistant|>", "<|end_of_assistant|>", EOT))
    out = tmp_path / "o.nndataset"
    build(tmp_path / "c.txt", out, tok, eos=EOT, bos=EOT, loss_scope="assistant")
    with nnd.open(out) as ds:
        doc = ds.text_doc("train", 0)
    assert tok.decode(doc.tokens[doc.loss_mask]) == "<|assistant|>a<|end_of_assistant|>"
    assert not doc.loss_mask[0] and not doc.loss_mask[-1]


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"eos": "<|nope|>"}, "eos='<|nope|>': the byte tokenizer has no special token"),
        ({"bos": 258}, r"bos=258 is outside the tokenizer's vocabulary \(ids 0 to 257\)"),
        ({"eos": -1}, r"eos=-1 is outside"),
    ],
)
def test_an_eos_or_bos_the_tokenizer_has_not_is_refused_naming_the_option(
    tmp_path, kwargs, message
):
    (tmp_path / "c.txt").write_text("a\n")
    with pytest.raises(DomainError, match=message):
        build(tmp_path / "c.txt", tmp_path / "o.flr", ByteTokenizer(), **kwargs)
    assert os.listdir(tmp_path) == ["c.txt"]


def test_an_eos_of_the_wrong_type_is_a_type_error(tmp_path):
    (tmp_path / "c.txt").write_text("a\n")
    with pytest.raises(TypeError, match="eos must be None, a token id or a special"):
        build(tmp_path / "c.txt", tmp_path / "o.flr", ByteTokenizer(), eos=True)


# ---------------------------------------------------------------- separators


CODE = (
    "def f(x):\n    return x\n\n\n"
    "class A:\n\n    pass\n\n\n\n\n"
    "  \n\n\n"  # only whitespace: no document
    "print('é')\r\n\n\nlast"
)


@pytest.mark.parametrize("chunk", [1, 3, 7, 64, 1 << 20])
def test_a_separator_splits_multi_line_documents_keeping_their_indentation(tmp_path, chunk):
    (tmp_path / "code.txt").write_text(CODE, encoding="utf-8")
    tok = ByteTokenizer()
    out = tmp_path / "o.flr"
    s = build(tmp_path / "code.txt", out, tok, sep="\n\n\n", chunk_bytes=chunk)
    expected = [p.strip("\r\n") for p in CODE.split("\n\n\n") if p.strip()]
    assert texts_of(out, tok) == expected
    assert expected[1] == "class A:\n\n    pass" and s.documents == 4


def test_a_separator_is_an_option_of_one_input(tmp_path):
    (tmp_path / "a.txt").write_text("x\ny<SEP>z")
    (tmp_path / "b.txt").write_text("x\ny<SEP>z")
    tok = ByteTokenizer()
    inputs = [Input(tmp_path / "a.txt", sep="<SEP>"), tmp_path / "b.txt"]
    build(inputs, tmp_path / "o.flr", tok)
    assert texts_of(tmp_path / "o.flr", tok) == ["x\ny", "z", "x", "y<SEP>z"]


def test_invalid_utf8_between_separators_is_refused_with_its_offset(tmp_path):
    pytest.importorskip("tokenizers")
    (tmp_path / "c.txt").write_bytes(b"ok\n\nbad \xff here")
    bpe = BPETokenizer.train(tmp_path / "c.txt", 270)
    with pytest.raises(FormatError, match=r"c\.txt: byte 8: expected UTF-8 text, found the byte"):
        build(tmp_path / "c.txt", tmp_path / "o.flr", bpe, sep="\n\n")
    assert not (tmp_path / "o.flr").exists()


# ---------------------------------------------------------------- JSONL


def write_jsonl(path, rows, blank_lines=False):
    with open(path, "w", encoding="utf-8") as f:
        for r in rows:
            f.write((r if isinstance(r, str) else json.dumps(r)) + "\n")
            if blank_lines:
                f.write("\n")


def test_jsonl_documents_are_the_text_field_of_each_line(tmp_path, suffix):
    rows = [{"text": "one", "id": 1}, {"text": "two\nlines é"}, {"text": ""}]
    write_jsonl(tmp_path / "c.jsonl", rows, blank_lines=True)
    tok = ByteTokenizer()
    out = tmp_path / f"o.{suffix}"
    s = build(tmp_path / "c.jsonl", out, tok, test_docs=1, test_split="last")
    assert texts_of(out, tok) == ["one", "two\nlines é", ""]
    assert (s.documents, s.empty_docs) == (3, 1)


def test_another_text_field_is_an_option(tmp_path):
    write_jsonl(tmp_path / "c.jsonl", [{"body": "a", "text": 1}, {"body": "b"}])
    tok = ByteTokenizer()
    build(tmp_path / "c.jsonl", tmp_path / "o.flr", tok, text_field="body")
    assert texts_of(tmp_path / "o.flr", tok) == ["a", "b"]


@pytest.mark.parametrize(
    "bad, message",
    [
        ("{not json", r"line 4: expected a JSON object, found invalid JSON"),
        ("[1, 2]", r"line 4: expected an object with a str 'text', found a JSON list"),
        ('{"txt": "x"}', r"line 4: .* found no such field \(its keys are \['txt'\]\)"),
        ('{"text": 3}', r"line 4: expected an object with a str 'text', found a int"),
        ('{"text": "\\ud800"}', r"line 4: expected text, found the lone surrogate"),
    ],
)
@pytest.mark.parametrize("chunk", [5, 1 << 20])
def test_a_bad_jsonl_line_is_a_format_error_naming_the_file_and_line(
    tmp_path, suffix, bad, message, chunk
):
    # lines 1 and 3 are documents, line 2 is blank, line 4 the bad one
    (tmp_path / "c.jsonl").write_text(
        f'{{"text": "a"}}\n\n{{"text": "b"}}\n{bad}\n{{"text": "c"}}\n'
    )
    out = tmp_path / f"o.{suffix}"
    with pytest.raises(FormatError, match=r"c\.jsonl: " + message):
        build(tmp_path / "c.jsonl", out, ByteTokenizer(), chunk_bytes=chunk, workers=0)
    assert sorted(os.listdir(tmp_path)) == ["c.jsonl"]  # nothing written, no temporary


def test_invalid_utf8_in_jsonl_is_refused_with_its_offset_whatever_the_tokenizer(tmp_path):
    (tmp_path / "c.jsonl").write_bytes(b'{"text": "a"}\n{"text": "\xff"}\n')
    with pytest.raises(FormatError, match=r"c\.jsonl: byte 24: expected UTF-8 text"):
        build(tmp_path / "c.jsonl", tmp_path / "o.flr", ByteTokenizer())
    assert not (tmp_path / "o.flr").exists()


def test_a_jsonl_build_streams_in_memory_bounded_by_the_chunk(tmp_path):
    path = tmp_path / "c.jsonl"
    line = (json.dumps({"text": "x" * 990}) + "\n").encode()
    path.write_bytes(line * 4000)  # 4 MB of JSONL
    tracemalloc.start()
    try:
        s = build(path, tmp_path / "o.flr", ByteTokenizer(), workers=0, chunk_bytes=64 << 10)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert s.documents == 4000 and s.tokens == 4000 * 990
    assert peak < 3_000_000  # a 64 KB chunk and its tokens; not the file


# ---------------------------------------------------------------- Parquet


def write_parquet(path, texts, row_group_size=3, **columns):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    pq.write_table(pa.table({"text": texts, **columns}), path, row_group_size=row_group_size)


@pytest.mark.parametrize("chunk", [4, 1 << 20])
def test_parquet_documents_are_a_text_column_read_by_row_group(tmp_path, suffix, chunk):
    texts = [f"row {i} " + "é" * i for i in range(10)]
    write_parquet(tmp_path / "c.parquet", texts, other=list(range(10)))
    tok = ByteTokenizer()
    out = tmp_path / f"o.{suffix}"
    s = build(tmp_path / "c.parquet", out, tok, chunk_bytes=chunk, eos=None)
    assert texts_of(out, tok) == texts
    assert s.documents == 10 and s.source_bytes == os.path.getsize(tmp_path / "c.parquet")


def test_a_parquet_file_without_the_column_is_an_error_naming_file_and_column(tmp_path):
    write_parquet(tmp_path / "c.parquet", ["a"])
    with pytest.raises(FormatError, match=r"c\.parquet: no column 'body' \(text_field\)"):
        build(tmp_path / "c.parquet", tmp_path / "o.flr", ByteTokenizer(), text_field="body")
    assert sorted(os.listdir(tmp_path)) == ["c.parquet"]


def test_a_parquet_column_that_is_not_text_or_has_a_null_is_refused(tmp_path):
    write_parquet(tmp_path / "n.parquet", ["a"], n=[1])
    with pytest.raises(FormatError, match=r"column 'n' \(text_field\) is int64, expected a str"):
        build(tmp_path / "n.parquet", tmp_path / "o.flr", ByteTokenizer(), text_field="n")
    write_parquet(tmp_path / "c.parquet", ["a", "b", "c", "d", None])
    with pytest.raises(FormatError, match=r"c\.parquet: row 4 \(row group 1\): column 'text' is"):
        build(tmp_path / "c.parquet", tmp_path / "o.flr", ByteTokenizer())
    assert not (tmp_path / "o.flr").exists()


# ---------------------------------------------------------------- several corpora


def test_several_corpora_of_mixed_kinds_are_one_corpus_in_order(tmp_path, suffix):
    (tmp_path / "a.txt").write_text("t1\nt2\n")
    write_jsonl(tmp_path / "b.jsonl", [{"text": "j1"}, {"text": "j2"}])
    write_parquet(tmp_path / "c.parquet", ["p1", "p2", "p3"])
    tok = ByteTokenizer(specials=(EOT,))
    out = tmp_path / f"o.{suffix}"
    inputs = [tmp_path / "a.txt", tmp_path / "b.jsonl", tmp_path / "c.parquet"]
    s = build(inputs, out, tok, eos=EOT, test_docs=2, test_split="last", created=0)
    assert texts_of(out, tok) == [d + EOT for d in ["t1", "t2", "j1", "j2", "p1", "p2", "p3"]]
    assert (s.documents, s.train_docs, s.test_docs) == (7, 5, 2)
    if suffix == "nndataset":
        with nnd.open(out) as ds:
            assert ds.info.source_path == "\n".join(str(p) for p in inputs)
            assert ds.info.source_docs == 7


def test_a_corpus_changed_between_the_two_reads_is_refused_naming_it(tmp_path, monkeypatch):
    from feedline.text import _inputs

    (tmp_path / "a.txt").write_text("a\n")
    write_jsonl(tmp_path / "b.jsonl", [{"text": "j1"}])
    real = _inputs.scan_text_docs

    def stale(path, *args, **kwargs):
        scan = real(path, *args, **kwargs)
        return type(scan)(scan.docs, scan.bytes, "0" * 64) if "b.jsonl" in str(path) else scan

    monkeypatch.setattr(_inputs, "scan_text_docs", stale)
    with pytest.raises(FormatError, match=r"b\.jsonl: the corpus changed while it was read"):
        build([tmp_path / "a.txt", tmp_path / "b.jsonl"], tmp_path / "o.flr", ByteTokenizer())
    assert not (tmp_path / "o.flr").exists()


def test_a_missing_input_among_several_is_named_before_any_work(tmp_path):
    (tmp_path / "a.txt").write_text("a\n")
    with pytest.raises(FileNotFoundError, match=r"b\.jsonl: no such corpus file \(expected a JSON"):
        build([tmp_path / "a.txt", tmp_path / "b.jsonl"], tmp_path / "o.flr", ByteTokenizer())


@pytest.mark.parametrize(
    "make, error, message",
    [
        (lambda p: Input(p / "a.jsonl", sep="\n\n"), ValueError, "sep='\\\\n\\\\n' splits text"),
        (lambda p: Input(p / "a.txt", chat=True), ValueError, "chat=True reads JSONL"),
        (lambda p: Input(p / "a.txt", kind="csv"), ValueError, "kind must be 'text', 'jsonl'"),
        (lambda p: [], TypeError, "inputs must be a path, an fl.text.Input or a non-empty"),
        (lambda p: [3], TypeError, r"inputs\[0\]: expected a path or an fl.text.Input"),
    ],
)
def test_bad_inputs_are_refused_saying_why(tmp_path, make, error, message):
    with pytest.raises(error, match=message):
        build(make(tmp_path), tmp_path / "o.flr", ByteTokenizer())


# ---------------------------------------------------------------- BPE on all inputs


def test_a_bpe_trains_on_every_input_of_every_kind_without_chat_specials(tmp_path):
    pytest.importorskip("tokenizers")
    (tmp_path / "a.txt").write_text("plain words here\n" * 50)
    write_jsonl(tmp_path / "b.jsonl", [{"text": "zyzzyva " * 20}] * 20)
    write_parquet(tmp_path / "c.parquet", ["quokka " * 20] * 20)
    chats = [{"messages": [{"role": "user", "content": "wombat " * 20}]}] * 20
    write_jsonl(tmp_path / "d.jsonl", chats)
    inputs = [
        tmp_path / "a.txt",
        tmp_path / "b.jsonl",
        tmp_path / "c.parquet",
        Input(tmp_path / "d.jsonl", chat=True),
    ]
    bpe = BPETokenizer.train(inputs, 400)
    assert bpe.specials == {}  # none unless asked for (issue 18)
    for word in ("plain", " zyzzyva", " quokka", " wombat"):
        assert len(bpe.encode_batch([word])[0]) == 1, word  # learned from its input
    chat = BPETokenizer.train(inputs, 400, specials=BPETokenizer.CHAT_SPECIALS)
    assert list(chat.specials) == list(fl.text.CHAT_SPECIALS)
    assert chat.specials["<|assistant|>"] == 0


def test_a_bpe_trained_on_several_inputs_builds_them_with_its_end_of_text(tmp_path):
    pytest.importorskip("tokenizers")
    (tmp_path / "a.txt").write_text("one two three\n" * 20)
    write_jsonl(tmp_path / "b.jsonl", [{"text": "four five"}] * 20)
    inputs = [tmp_path / "a.txt", tmp_path / "b.jsonl"]
    bpe = BPETokenizer.train(inputs, 300, specials=(EOT,))
    build(inputs, tmp_path / "o.flr", bpe, eos=EOT)
    texts = texts_of(tmp_path / "o.flr", bpe)
    assert texts[0] == "one two three" + EOT and texts[-1] == "four five" + EOT


def test_eos_and_bos_go_around_empty_documents_too(tmp_path):
    write_jsonl(tmp_path / "c.jsonl", [{"text": ""}, {"text": "ab"}, {"text": ""}])
    tok = ByteTokenizer(specials=("<s>", EOT))
    build(tmp_path / "c.jsonl", tmp_path / "o.flr", tok, bos="<s>", eos=EOT)
    assert docs_of(tmp_path / "o.flr") == [[256, 257], [256, 97, 98, 257], [256, 257]]
    build(tmp_path / "c.jsonl", tmp_path / "e.flr", tok, eos=EOT)
    assert docs_of(tmp_path / "e.flr") == [[257], [97, 98, 257], [257]]


def test_a_parquet_string_that_is_not_utf8_is_a_format_error_naming_the_row(tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    values = pa.array([b"ok", b"fine", b"bad \xff"], pa.binary()).view(pa.string())
    pq.write_table(pa.table({"text": values}), tmp_path / "c.parquet", row_group_size=2)
    with pytest.raises(
        FormatError, match=r"c\.parquet: row 2 \(row group 1\): column 'text' is no"
    ):
        build(tmp_path / "c.parquet", tmp_path / "o.flr", ByteTokenizer())
    assert not (tmp_path / "o.flr").exists()


@pytest.mark.parametrize(
    "name, kwargs, message",
    [
        ("a.txt", {"chat": True}, r"chat=True applies to a \.jsonl and no input is one"),
        ("a.jsonl", {"sep": "\n\n"}, r"sep='\\n\\n' applies to a text file and no input is one"),
    ],
)
def test_an_option_no_input_takes_is_refused(tmp_path, name, kwargs, message):
    (tmp_path / name).write_text('{"text": "a"}\n')
    with pytest.raises(ValueError, match=message):
        build(tmp_path / name, tmp_path / "o.flr", ByteTokenizer(), **kwargs)


def test_a_file_that_is_not_parquet_is_a_format_error(tmp_path):
    pytest.importorskip("pyarrow")
    (tmp_path / "c.parquet").write_text("not parquet")
    with pytest.raises(FormatError, match=r"c\.parquet: expected a Parquet file, pyarrow says"):
        build(tmp_path / "c.parquet", tmp_path / "o.flr", ByteTokenizer())


def test_without_pyarrow_a_parquet_input_names_the_extra(tmp_path, monkeypatch):
    import sys

    (tmp_path / "c.parquet").write_text("x")
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    with pytest.raises(ImportError, match=r"pip install 'feedline\[parquet\]'"):
        build(tmp_path / "c.parquet", tmp_path / "o.flr", ByteTokenizer())
