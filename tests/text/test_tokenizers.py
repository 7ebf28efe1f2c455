"""The byte tokenizer, HuggingFace BPE, and the vocab record that makes files self-describing."""

from __future__ import annotations

import re
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import feedline as fl
from feedline.errors import FormatError
from feedline.text import (
    BPETokenizer,
    ByteTokenizer,
    Tokenizer,
    load_tokenizer,
    tokenizer_from_vocab,
    write_vocab,
)


def naive(text: bytes, specials: list[str]) -> list[int]:
    """Leftmost, longest-first special matching, one position at a time."""
    by_length = sorted(specials, key=lambda s: -len(s.encode()))
    out, i = [], 0
    while i < len(text):
        for s in by_length:
            if text.startswith(s.encode(), i):
                out.append(256 + specials.index(s))
                i += len(s.encode())
                break
        else:
            out.append(text[i])
            i += 1
    return out


def test_byte_ids_are_the_utf8_bytes_and_specials_follow_from_256():
    tok = ByteTokenizer()
    assert tok.vocab_size == 258
    assert tok.special_id("<|assistant|>") == 256
    assert tok.special_id("<|end_of_assistant|>") == 257
    (ids,) = tok.encode_batch(["é<|assistant|>a<|end_of_assistant|>"])
    assert ids.dtype == np.uint64
    assert ids.tolist() == [0xC3, 0xA9, 256, ord("a"), 257]


@settings(max_examples=200, deadline=None)
@given(
    docs=st.lists(
        st.lists(st.sampled_from(["<", "a", ">", "é", " ", "\n", "x"]), max_size=12).map("".join),
        max_size=5,
    )
)
def test_specials_match_leftmost_and_longest_first_never_across_documents(docs):
    specials = ["<a>", "<a>x", "é<", "<<"]
    tok = ByteTokenizer(specials)
    got = [a.tolist() for a in tok.encode_batch(docs)]
    assert got == [naive(d.encode(), specials) for d in docs]
    assert [tok.decode(ids) for ids in got] == docs
    flow, counts = tok.encode_flow(docs)
    assert flow.tolist() == [i for ids in got for i in ids]
    assert counts.tolist() == [len(ids) for ids in got]


def test_bytes_documents_keep_any_byte_sequence():
    tok = ByteTokenizer()
    raw = bytes(range(256))
    (ids,) = tok.encode_batch([raw])
    assert ids.tolist() == list(range(256))
    assert tok.decode(ids) == raw.decode("utf-8", errors="replace")


def test_a_tokenizer_without_specials_is_plain_bytes():
    tok = ByteTokenizer(specials=())
    assert tok.vocab_size == 256
    assert tok.encode_batch(["<|assistant|>"])[0].tolist() == list(b"<|assistant|>")
    message = "no special token '<|assistant|>'; its specials are []"
    with pytest.raises(ValueError, match=re.escape(message)):
        tok.special_id("<|assistant|>")


@pytest.mark.parametrize(
    "specials, error, message",
    [
        ("<|a|>", TypeError, "a sequence of str, got the str"),
        (["<a>", "<a>"], ValueError, "'<a>' is given twice"),
        ([""], ValueError, "a non-empty str, got ''"),
        (["a\nb"], ValueError, "may not contain a newline"),
    ],
)
def test_invalid_specials_are_refused(specials, error, message):
    with pytest.raises(error, match=message):
        ByteTokenizer(specials)


def test_decoding_an_id_outside_the_vocabulary_is_an_error():
    with pytest.raises(
        ValueError, match="id 258 at position 1 is outside the byte tokenizer's 258 ids"
    ):
        ByteTokenizer().decode([1, 258])


def test_a_document_that_is_not_text_is_a_type_error():
    with pytest.raises(TypeError, match="document 1: expected str or bytes, got int"):
        ByteTokenizer().encode_batch(["a", 3])


def test_the_byte_vocab_record_lists_kind_size_and_specials():
    assert ByteTokenizer(["<s>", "</s>"]).vocab_record() == {
        "tokenizer": "byte",
        "size": 258,
        "specials": {"<s>": 256, "</s>": 257},
    }


def test_a_vocab_record_round_trips_through_a_nnvocab_file(tmp_path):
    tok = ByteTokenizer(["<s>", "</s>", "<|assistant|>"])
    write_vocab(tmp_path / "v.nnvocab", tok)
    data = (tmp_path / "v.nnvocab").read_bytes()
    assert data[:8] == b"NNVC\x01\x00\x00\x00"
    again = load_tokenizer(tmp_path / "v.nnvocab")
    assert isinstance(again, ByteTokenizer)
    assert again.specials == tok.specials
    with fl.nndataset.open(tmp_path / "v.nnvocab") as f:
        assert tokenizer_from_vocab(f.vocab).specials == tok.specials


def test_a_vocab_file_with_a_bad_version_is_a_format_error(tmp_path):
    write_vocab(tmp_path / "v.nnvocab", ByteTokenizer())
    data = bytearray((tmp_path / "v.nnvocab").read_bytes())
    data[4] = 2
    (tmp_path / "v.nnvocab").write_bytes(bytes(data))
    with pytest.raises(FormatError, match="byte 4: expected NNVC version 1, found 2"):
        load_tokenizer(tmp_path / "v.nnvocab")


@pytest.mark.parametrize(
    "record, message",
    [
        ({"size": 3}, r"expected a feedline vocab record .* found \['size'\]"),
        ({"tokenizer": "byte", "size": 300, "specials": {}}, "size 300 and specials"),
        ({"tokenizer": "byte", "size": 257, "specials": {"<s>": 300}}, "size 257 and specials"),
        ({"tokenizer": "hf", "size": 3, "specials": {}}, "needs its hf_json"),
    ],
)
def test_a_record_feedline_did_not_write_is_refused(record, message):
    with pytest.raises(ValueError, match=message):
        tokenizer_from_vocab(record)


def test_both_tokenizers_implement_the_protocol(bpe):
    assert isinstance(ByteTokenizer(), Tokenizer)
    assert isinstance(bpe, Tokenizer)


# ---------------------------------------------------------------- BPE

TEXT = (
    "the quick brown fox jumps over the lazy dog\n"
    "user asks <|assistant|>the fox answers<|end_of_assistant|>\n"
    "pack my box with five dozen liquor jugs\n"
) * 40


@pytest.fixture(scope="module")
def hf():
    """HuggingFace tokenizers (the ``text`` extra); the test is skipped without it."""
    return pytest.importorskip("tokenizers")


@pytest.fixture(scope="module")
def bpe(hf, tmp_path_factory):
    path = tmp_path_factory.mktemp("bpe") / "corpus.txt"
    path.write_text(TEXT)
    # specials are asked for by name (the default is none: issue 18)
    return BPETokenizer.train(path, 300, specials=("<|assistant|>", "<|end_of_assistant|>"))


def test_a_trained_bpe_puts_the_specials_first_and_round_trips_text(bpe):
    assert bpe.vocab_size == 300
    assert bpe.specials == {"<|assistant|>": 0, "<|end_of_assistant|>": 1}
    doc = "the lazy fox <|assistant|>jumps<|end_of_assistant|> é"
    (ids,) = bpe.encode_batch([doc])
    assert ids.dtype == np.uint64
    assert 0 in ids.tolist() and 1 in ids.tolist()
    assert len(ids) < len(doc.encode())  # merges were learned
    assert bpe.decode(ids) == doc


def test_bpe_takes_bytes_and_replaces_invalid_utf8(bpe):
    (a,), (b,) = bpe.encode_batch([b"fox \xff"]), bpe.encode_batch(["fox \ufffd"])
    assert a.tolist() == b.tolist()


def test_bpe_flow_is_the_concatenated_batch(bpe):
    docs = ["the fox", "", "dog <|assistant|>"]
    flow, counts = bpe.encode_flow(docs)
    batch = bpe.encode_batch(docs)
    assert counts.tolist() == [len(b) for b in batch] and counts[1] == 0
    assert flow.tolist() == [i for b in batch for i in b.tolist()]


def test_bpe_round_trips_through_its_vocab_record_and_tokenizer_json(bpe, tmp_path):
    docs = ["the quick <|assistant|>dog<|end_of_assistant|>"]
    expected = bpe.encode_batch(docs)[0].tolist()
    record = bpe.vocab_record()
    assert (record["tokenizer"], record["size"]) == ("hf", 300)
    assert record["specials"] == {"<|assistant|>": 0, "<|end_of_assistant|>": 1}
    assert tokenizer_from_vocab(record).encode_batch(docs)[0].tolist() == expected
    bpe.save(tmp_path / "tokenizer.json")
    assert (
        BPETokenizer.from_file(tmp_path / "tokenizer.json").encode_batch(docs)[0].tolist()
        == expected
    )
    assert load_tokenizer(tmp_path / "tokenizer.json").vocab_size == 300


def test_a_missing_tokenizer_json_is_a_clear_error(hf, tmp_path):
    with pytest.raises(
        FileNotFoundError,
        match=r"no such tokenizer file \(expected a "
        r"HuggingFace tokenizer\.json",
    ):
        BPETokenizer.from_file(tmp_path / "nope.json")


def test_a_file_that_is_not_a_tokenizer_json_is_a_format_error(hf, tmp_path):
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(FormatError, match=r"expected a HuggingFace tokenizer\.json"):
        BPETokenizer.from_file(tmp_path / "bad.json")


def test_a_vocab_size_too_small_for_the_bytes_is_refused(hf, tmp_path):
    with pytest.raises(ValueError, match="hold the 256 byte symbols and 2 specials, got 100"):
        BPETokenizer.train(tmp_path / "x.txt", 100, specials=BPETokenizer.CHAT_SPECIALS[:2])


def test_without_tokenizers_the_error_names_the_extra(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "tokenizers", None)
    with pytest.raises(ImportError, match=r"pip install 'feedline\[text\]'"):
        BPETokenizer.from_file(tmp_path / "tokenizer.json")


def test_both_tokenizers_pickle_for_other_processes(bpe):
    import pickle

    docs = ["the fox <|assistant|>é"]
    for tok in (ByteTokenizer(["<s>", "<|assistant|>"]), bpe):
        again = pickle.loads(pickle.dumps(tok))
        assert again.specials == tok.specials
        assert again.encode_batch(docs)[0].tolist() == tok.encode_batch(docs)[0].tolist()


@pytest.mark.parametrize(
    "name, error, message",
    [
        ("nope.json", FileNotFoundError, "no such tokenizer file"),
        ("", IsADirectoryError, "found a directory"),
    ],
)
def test_a_tokenizer_path_that_is_missing_or_a_directory_names_it(tmp_path, name, error, message):
    path = tmp_path / name
    with pytest.raises(error, match=re.escape(f"{path}: ") + ".*" + re.escape(message)) as e:
        load_tokenizer(path)
    assert "expected a tokenizer.json, .nnvocab or .nndataset" in str(e.value)


def test_specials_of_mixed_types_in_a_stored_vocab_record_are_a_format_error(tmp_path):
    record = {"tokenizer": "byte", "size": 258, "specials": {"<a>": 256, "<b>": "x"}}
    with pytest.raises(
        ValueError,
        match=r"specials must map token texts to int ids, found "
        r"'<b>': 'x' \(str\)",
    ):
        tokenizer_from_vocab(record)
    path = tmp_path / "crafted.nndataset"
    fl.nndataset.write(path, fl.nndataset.Build(record, "c.txt", "", 1, train_docs=[[1]]))
    with pytest.raises(
        FormatError,
        match=re.escape(f"{path}: its vocab record: the vocab record's specials must map"),
    ):
        load_tokenizer(path)
