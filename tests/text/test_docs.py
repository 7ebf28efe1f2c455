"""Documents from text files and assistant spans: neuralnet.cpp's two text helpers."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from feedline.errors import FormatError
from feedline.text import iter_doc_chunks, mark_assistant_span, read_text_docs
from feedline.text._docs import scan_text_docs

# bytes that matter to the rules, and a multi-byte character
PIECES = [b"\n", b"\r", b"\t", b" ", b"a", b"b", b"\xc3\xa9", b"\x0b", b"\x0c", b"\r\n"]


def corpus(tmp_path, data: bytes):
    path = tmp_path / "corpus.txt"
    path.write_bytes(data)
    return path


def rule(data: bytes) -> list[bytes]:
    """The reference's rule, spelled out: split on \\n, trim space/tab/CR, drop empties."""
    out = []
    for line in data.split(b"\n"):
        while line[:1] in (b" ", b"\t", b"\r") and line:
            line = line[1:]
        while line[-1:] in (b" ", b"\t", b"\r") and line:
            line = line[:-1]
        if line:
            out.append(line)
    return out


def test_documents_are_lines_trimmed_with_empty_ones_dropped(tmp_path):
    path = corpus(tmp_path, b"  first doc \r\n\n \t \r\nsecond\tdoc\n\nthird")
    assert read_text_docs(path) == ["first doc", "second\tdoc", "third"]


def test_only_space_tab_and_cr_are_trimmed(tmp_path):
    path = corpus(tmp_path, "\x0bvt\x0b\n\x0cff\n\u00a0nbsp\u00a0\n".encode())
    assert read_text_docs(path) == ["\x0bvt\x0b", "\x0cff", "\u00a0nbsp\u00a0"]


def test_a_multibyte_character_is_never_cut_by_a_block_boundary(tmp_path):
    path = corpus(tmp_path, "é€😀 x\nü".encode())
    for size in range(1, 12):
        docs = [d for chunk in iter_doc_chunks(path, chunk_bytes=size) for d in chunk]
        assert [d.decode() for d in docs] == ["é€😀 x", "ü"]


@settings(max_examples=150, deadline=None)
@given(pieces=st.lists(st.sampled_from(PIECES), max_size=60), size=st.integers(1, 9))
def test_streamed_documents_follow_the_rule_whatever_the_block_size(tmp_path_factory, pieces, size):
    data = b"".join(pieces)
    path = corpus(tmp_path_factory.mktemp("c"), data)
    streamed = [d for chunk in iter_doc_chunks(path, chunk_bytes=size) for d in chunk]
    assert streamed == rule(data)
    scan = scan_text_docs(path, chunk_bytes=size)
    assert (scan.docs, scan.bytes) == (len(rule(data)), len(data))
    assert read_text_docs(path) == [d.decode("utf-8") for d in rule(data)]


def test_the_scan_hashes_the_whole_file(tmp_path):
    data = b"one\ntwo\n" * 1000
    scan = scan_text_docs(corpus(tmp_path, data), chunk_bytes=100)
    assert scan.sha256 == hashlib.sha256(data).hexdigest()
    assert scan.docs == 2000


def test_an_empty_file_has_no_documents(tmp_path):
    path = corpus(tmp_path, b"")
    assert read_text_docs(path) == []
    assert list(iter_doc_chunks(path)) == []
    assert scan_text_docs(path).docs == 0


def test_text_that_is_not_utf8_is_a_format_error_naming_the_byte(tmp_path):
    path = corpus(tmp_path, b"fine\nbad \xff here\n")
    with pytest.raises(FormatError, match=r"byte 9: expected UTF-8 text, found the byte 0xff"):
        read_text_docs(path)
    assert list(iter_doc_chunks(path)) == [[b"fine", b"bad \xff here"]]  # bytes stream


def test_strict_is_the_default_and_names_the_file_and_byte(tmp_path):
    path = corpus(tmp_path, b"fine\nbad \xff here\n")
    for call in (lambda: read_text_docs(path), lambda: read_text_docs(path, errors="strict")):
        with pytest.raises(FormatError, match="UTF-8") as e:
            call()
        assert (e.value.path, e.value.offset) == (str(path), 9)
        assert "errors=" in str(e.value)  # says how to read it anyway


BAD = b"ok\n\xff bad \n \xe2\x82 \n\xc3\xa9t\xc3\xa9 \xc0\n"


@pytest.mark.parametrize(
    ("errors", "expected"),
    [
        ("replace", ["ok", "\ufffd bad", "\ufffd", "\xe9t\xe9 \ufffd"]),
        ("ignore", ["ok", " bad", "", "\xe9t\xe9 "]),
        ("backslashreplace", ["ok", "\\xff bad", "\\xe2\\x82", "\xe9t\xe9 \\xc0"]),
        ("surrogateescape", ["ok", "\udcff bad", "\udce2\udc82", "\xe9t\xe9 \udcc0"]),
    ],
)
def test_errors_reads_bytes_that_are_not_utf8_as_open_would(tmp_path, errors, expected):
    path = corpus(tmp_path, BAD)
    assert read_text_docs(path, errors=errors) == expected


def test_documents_are_found_on_the_bytes_whatever_the_error_handler(tmp_path):
    # one document per line with a byte other than space, tab and CR, as neuralnet.cpp
    # splits and trims bytes: the count equals the streamed documents' for every handler
    path = corpus(tmp_path, BAD)
    for errors in ("replace", "ignore", "backslashreplace", "surrogateescape"):
        assert len(read_text_docs(path, errors=errors)) == scan_text_docs(path).docs == 4


def test_surrogateescape_gives_back_every_byte(tmp_path):
    path = corpus(tmp_path, BAD)
    docs = read_text_docs(path, errors="surrogateescape")
    assert [d.encode("utf-8", "surrogateescape") for d in docs] == rule(BAD)


def test_valid_utf8_reads_the_same_with_every_handler(tmp_path):
    path = corpus(tmp_path, b" caf\xc3\xa9 \r\n\n\tdeux\n")
    for errors in ("strict", "replace", "ignore", "surrogateescape", "backslashreplace"):
        assert read_text_docs(path, errors=errors) == ["caf\xe9", "deux"]


@pytest.mark.parametrize(
    ("errors", "error", "message"),
    [
        ("bogus", ValueError, r"errors='bogus'.*'strict'.*'surrogateescape'"),
        ("xmlcharrefreplace", ValueError, r"errors='xmlcharrefreplace'.*writing"),
        ("namereplace", ValueError, r"errors='namereplace'.*writing"),
        (None, TypeError, r"errors.*str.*NoneType"),
    ],
)
def test_an_unknown_error_handler_is_refused_naming_the_option(tmp_path, errors, error, message):
    path = corpus(tmp_path, b"fine\n")
    with pytest.raises(error, match=message):
        read_text_docs(path, errors=errors)


def test_a_missing_corpus_says_what_was_expected(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"no such corpus file \(expected a text file"):
        read_text_docs(tmp_path / "missing.txt")
    with pytest.raises(FileNotFoundError, match=r"missing\.txt"):
        next(iter_doc_chunks(tmp_path / "missing.txt"))


def test_a_block_size_that_is_not_positive_is_refused(tmp_path):
    with pytest.raises(ValueError, match="chunk_bytes must be a positive int, got 0"):
        next(iter_doc_chunks(corpus(tmp_path, b"x"), chunk_bytes=0))


# ---------------------------------------------------------------- assistant spans


def walk(tokens, begin, end) -> list[bool]:
    """The reference's definition, token by token."""
    out, inside = [], False
    for t in tokens:
        if t == begin:
            inside = True
        out.append(inside)
        if t == end:
            inside = False
    return out


@pytest.mark.parametrize(
    "tokens, expected",
    [
        ([5, 1, 6, 2, 7], [0, 1, 1, 1, 0]),  # both markers are marked
        ([5, 2, 6], [0, 0, 0]),  # an end without a begin before it is 0
        ([5, 1, 6, 7], [0, 1, 1, 1]),  # a missing end runs to the end of the document
        ([1, 1, 2, 2], [1, 1, 1, 0]),  # a second begin carries on; a second end is outside
        ([], []),
    ],
)
def test_assistant_spans_follow_the_reference(tokens, expected):
    assert mark_assistant_span(np.array(tokens, np.uint64), 1, 2).tolist() == [
        bool(x) for x in expected
    ]


def test_a_begin_equal_to_the_end_marks_only_that_token():
    assert mark_assistant_span([3, 1, 3, 1, 3], 1, 1).tolist() == [0, 1, 0, 1, 0]


@settings(max_examples=300, deadline=None)
@given(
    tokens=st.lists(st.integers(0, 4), max_size=40),
    begin=st.integers(0, 4),
    end=st.integers(0, 4),
    cuts=st.lists(st.integers(0, 40), max_size=4),
)
def test_per_document_spans_equal_one_scan_reset_at_each_boundary(tokens, begin, end, cuts):
    cuts = sorted(c for c in cuts if c <= len(tokens))
    docs = np.split(np.array(tokens, dtype=np.int64), cuts)
    counts = [len(d) for d in docs]
    expected = [m for d in docs for m in walk(d.tolist(), begin, end)]
    got = mark_assistant_span(np.array(tokens, np.int64), begin, end, counts=counts)
    assert got.dtype == np.bool_
    assert got.tolist() == expected
    assert mark_assistant_span(tokens, begin, end).tolist() == walk(tokens, begin, end)


def test_counts_that_do_not_cover_the_tokens_are_refused():
    with pytest.raises(ValueError, match="summing to the 3 tokens, got 2 over 1 documents"):
        mark_assistant_span([1, 2, 3], 1, 2, counts=[2])


def test_tokens_that_are_not_integer_ids_are_refused():
    with pytest.raises(TypeError, match=r"1-D array of integer ids, got shape \(2, 2\)"):
        mark_assistant_span([[1, 2], [3, 4]], 1, 2)
    with pytest.raises(TypeError, match="dtype float64"):
        mark_assistant_span([1.5], 1, 2)


def test_the_text_modules_docstring_examples_pass():
    import doctest

    from feedline.text import _build, _docs, _tokenizers

    for module in (_docs, _tokenizers, _build):
        result = doctest.testmod(module)
        assert result.failed == 0 and result.attempted > 0, module.__name__
