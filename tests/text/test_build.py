"""``fl.text.build`` and ``feedline text build``: a text corpus to a ``.nndataset``."""

from __future__ import annotations

import hashlib
import os
import re
import struct
import tracemalloc

import numpy as np
import pytest

import feedline as fl
from feedline.cli import main
from feedline.errors import FormatError
from feedline.formats import nndataset as nnd
from feedline.text import ByteTokenizer, _build, _inputs, build, mark_assistant_span, read_text_docs

A, E = "<|assistant|>", "<|end_of_assistant|>"
LINES = [
    "plain text, no markers",
    "",  # dropped: not a document
    f"  user asks {A}the answer{E} thanks  ",
    "~~~",  # a document that SkipTilde tokenizes to nothing
    f"{E} an end first, then {A}a span to the end",
    "\t\r",
    "é and 😀 are several bytes",
    f"{A}one{E} and {A}two{E}",
    "last line without a newline",
]
TEXT = "\n".join(LINES)
CREATED = 1_700_000_000


class SkipTilde:
    """A tokenizer with encode_batch only (no encode_flow): bytes, '~' dropped."""

    vocab_size = 258

    def __init__(self) -> None:
        self._byte = ByteTokenizer()

    def special_id(self, name: str) -> int:
        return self._byte.special_id(name)

    def encode_batch(self, docs):
        return [a[a != ord("~")] for a in self._byte.encode_batch(docs)]

    def vocab_record(self):
        return {"tokenizer": "skip-tilde", "size": 258}


@pytest.fixture
def corpus(tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_text(TEXT, encoding="utf-8")
    return path


# ---------------------------------------------------------------- an independent writer


def u32(v: int) -> bytes:
    return struct.pack("<I", v)


def u64(*vs: int) -> bytes:
    return struct.pack(f"<{len(vs)}Q", *vs)


def kvrec_v2(fields: list, base: int) -> bytes:
    """A version 2 record from (key, type, value) with value bytes or a nested field list."""
    table = 4 + 30 + sum(4 + len(k) + 9 for k, _, _ in fields)
    head = u32(len(fields) + 1) + u32(13) + b"kvrec_version" + b"\0" + u32(8) + u64(2)
    body, cursor = b"", base + table
    for key, kind, value in fields:
        data = kvrec_v2(value, cursor + 8) if kind == 3 else value
        head += u32(len(key)) + key + bytes([kind]) + u64(cursor)
        body += u64(len(data)) + data
        cursor += 8 + len(data)
    return head + body


def layout(
    vocab: list,
    source: tuple[str, str, int],
    scope: str,
    train: list,
    test: list,
    masks: dict[str, list] | None,
) -> bytes:
    """The .nndataset bytes, from shared/reference/nndataset-layout.md alone."""

    def blocks(docs: list, subset: str) -> list[bytes]:
        return [
            u64(len(d), *d) + (bytes(masks[subset][i]) if masks else b"")
            for i, d in enumerate(docs)
        ]

    def root(train_index: list[int], test_index: list[int]) -> list:
        gen = [
            (b"loss_scope", 1, scope.encode()),
            (b"tool", 1, b"feedline"),
            (b"created", 0, u64(CREATED)),
        ]
        src = [
            (b"path", 1, source[0].encode()),
            (b"sha256", 1, source[1].encode()),
            (b"docs", 0, u64(source[2])),
        ]
        fields = [
            (b"kind", 0, u64(0)),
            (b"companion", 3, [(b"vocab", 3, vocab), (b"source", 3, src), (b"gen", 3, gen)]),
            (
                b"train",
                3,
                [(b"num_docs", 0, u64(len(train))), (b"doc_index", 2, u64(*train_index))],
            ),
        ]
        if test:
            fields.append(
                (
                    b"test",
                    3,
                    [(b"num_docs", 0, u64(len(test))), (b"doc_index", 2, u64(*test_index))],
                )
            )
        return fields

    train_blocks, test_blocks = blocks(train, "train"), blocks(test, "test")
    # first pass: zero offsets, to learn where the documents start
    start = 8 + len(kvrec_v2(root([0] * (len(train) + 1), [0] * (len(test) + 1)), 8))
    offsets = np.cumsum([start] + [len(b) for b in train_blocks + test_blocks]).tolist()
    train_index = offsets[: len(train) + 1]
    test_index = offsets[len(train) :]
    return (
        b"NNDS"
        + u32(1)
        + kvrec_v2(root(train_index, test_index), 8)
        + b"".join(train_blocks + test_blocks)
    )


def byte_vocab() -> list:
    return [
        (b"tokenizer", 1, b"byte"),
        (b"size", 0, u64(258)),
        (b"specials", 3, [(A.encode(), 0, u64(256)), (E.encode(), 0, u64(257))]),
    ]


def byte_ids(doc: str) -> list[int]:
    out, raw = [], doc.encode()
    while raw:
        for special, i in ((A, 256), (E, 257)):
            if raw.startswith(special.encode()):
                out.append(i)
                raw = raw[len(special.encode()) :]
                break
        else:
            out.append(raw[0])
            raw = raw[1:]
    return out


def walk(ids: list[int]) -> list[int]:
    out, inside = [], False
    for t in ids:
        inside = inside or t == 256
        out.append(int(inside))
        inside = inside and t != 257
    return out


# ---------------------------------------------------------------- bytes on disk


@pytest.mark.parametrize("scope", ["all", "assistant"])
@pytest.mark.parametrize("split", ["random", "last"])
def test_the_file_is_byte_for_byte_the_reference_layout(corpus, tmp_path, scope, split):
    out = tmp_path / "out.nndataset"
    build(
        corpus,
        out,
        ByteTokenizer(),
        test_docs=2,
        test_split=split,
        loss_scope=scope,
        seed=3,
        created=CREATED,
    )
    docs = [byte_ids(d) for d in read_text_docs(corpus)]
    test_ids = set(_build._test_choice(len(docs), 2, split, 3).tolist())
    if split == "last":
        assert test_ids == {len(docs) - 2, len(docs) - 1}
    train = [d for i, d in enumerate(docs) if i not in test_ids]
    test = [d for i, d in enumerate(docs) if i in test_ids]
    masks = None
    if scope == "assistant":
        masks = {"train": [walk(d) for d in train], "test": [walk(d) for d in test]}
    sha = hashlib.sha256(TEXT.encode()).hexdigest()
    expected = layout(byte_vocab(), (str(corpus), sha, len(docs)), scope, train, test, masks)
    assert out.read_bytes() == expected


@pytest.mark.parametrize("scope", ["all", "assistant"])
def test_the_file_equals_nndataset_write_of_the_same_documents(corpus, tmp_path, scope):
    tok = SkipTilde()
    out, ref = tmp_path / "out.nndataset", tmp_path / "ref.nndataset"
    build(corpus, out, tok, test_docs=3, loss_scope=scope, created=CREATED)
    docs = tok.encode_batch(read_text_docs(corpus))
    test_ids = set(_build._test_choice(len(docs), 3, "random", 0).tolist())
    train = [d for i, d in enumerate(docs) if i not in test_ids]
    test = [d for i, d in enumerate(docs) if i in test_ids]
    masks = {}
    if scope == "assistant":
        masks = {
            "train_masks": [mark_assistant_span(d, 256, 257) for d in train],
            "test_masks": [mark_assistant_span(d, 256, 257) for d in test],
        }
    nnd.write(
        ref,
        nnd.Build(
            tok.vocab_record(),
            str(corpus),
            hashlib.sha256(TEXT.encode()).hexdigest(),
            len(docs),
            loss_scope=scope,
            train_docs=train,
            test_docs=test,
            created=CREATED,
            **masks,
        ),
    )
    assert out.read_bytes() == ref.read_bytes()


@pytest.mark.parametrize("scope", ["all", "assistant"])
def test_parallel_output_equals_sequential(corpus, tmp_path, scope):
    outputs = set()
    for workers in (0, 1, 3):
        for chunk_bytes in (1, 40, 1 << 20):
            out = tmp_path / f"{workers}-{chunk_bytes}.nndataset"
            build(
                corpus,
                out,
                ByteTokenizer(),
                test_docs=2,
                loss_scope=scope,
                workers=workers,
                created=CREATED,
                chunk_bytes=chunk_bytes,
            )
            outputs.add(out.read_bytes())
    assert len(outputs) == 1


def test_both_ways_of_laying_out_masked_blocks_give_the_same_bytes(monkeypatch):
    rng = np.random.default_rng(0)
    counts = rng.integers(0, 50, 300)
    counts[::7] = 0
    flow = rng.integers(0, 2**64, int(counts.sum()), dtype=np.uint64)
    mask = rng.random(len(flow)) < 0.5
    layouts = []
    for slices_from in (0, 10**9):  # always slice copies; always the byte-wise select
        monkeypatch.setattr(_build, "_SLICES_FROM", slices_from)
        blocks, starts = _build._blocks(flow, counts, mask)
        layouts.append(blocks.tobytes())
    expected = b"".join(
        u64(c)
        + flow[t : t + c].astype("<u8").tobytes()
        + mask[t : t + c].astype(np.uint8).tobytes()
        for t, c in zip(np.cumsum(counts) - counts, counts)
    )
    assert layouts == [expected, expected]
    assert starts[-1] == len(expected)


# ---------------------------------------------------------------- round trips


@pytest.mark.parametrize("scope", ["all", "assistant"])
def test_documents_round_trip_with_masks_doc_ids_and_an_empty_document(corpus, tmp_path, scope):
    tok = SkipTilde()
    out = tmp_path / "out.nndataset"
    summary = build(corpus, out, tok, test_docs=2, test_split="last", loss_scope=scope)
    docs = read_text_docs(corpus)
    with nnd.open(out) as ds:
        assert (ds.info.num_docs, ds.info.test_docs, ds.info.loss_scope) == (5, 2, scope)
        assert (ds.info.source_path, ds.info.source_docs) == (str(corpus), 7)
        assert ds.info.source_sha256 == hashlib.sha256(TEXT.encode()).hexdigest()
        for subset, first in (("train", 0), ("test", 5)):
            for i in range(2 if subset == "test" else 5):
                doc = ds.text_doc(subset, i)
                expected = tok.encode_batch([docs[first + i]])[0]
                assert doc.doc_id == i + 1
                assert doc.tokens.tolist() == expected.tolist()
                mask = walk(expected.tolist()) if scope == "assistant" else [1] * len(expected)
                assert doc.loss_mask.tolist() == [bool(m) for m in mask]
        corpus_train = ds.load_text("train")
        # document 3 ("~~~") has no tokens but keeps its number: ids jump from 2 to 4
        assert ds.text_doc("train", 2).tokens.tolist() == []
        assert sorted(set(corpus_train.doc_ids[:].tolist())) == [1, 2, 4, 5]
    assert summary.empty_docs == 1
    assert (summary.documents, summary.train_docs, summary.test_docs) == (7, 5, 2)


def test_the_vocab_record_rebuilds_the_tokenizer(corpus, tmp_path):
    tok = ByteTokenizer(["<s>", A, E])
    build(corpus, tmp_path / "out.nndataset", tok)
    again = fl.text.load_tokenizer(tmp_path / "out.nndataset")
    assert again.specials == tok.specials
    with nnd.open(tmp_path / "out.nndataset") as ds:
        text = [again.decode(ds.text_doc("train", i).tokens) for i in range(ds.info.num_docs)]
    assert text == read_text_docs(corpus)


def test_the_summary_counts_documents_tokens_and_the_loss_share(corpus, tmp_path):
    out = tmp_path / "out.nndataset"
    s = build(corpus, out, ByteTokenizer(), loss_scope="assistant", test_docs=1)
    ids = [byte_ids(d) for d in read_text_docs(corpus)]
    assert s.tokens == sum(map(len, ids))
    assert s.loss_tokens == sum(sum(walk(d)) for d in ids)
    assert s.loss_share == pytest.approx(s.loss_tokens / s.tokens)
    assert (s.bytes, s.source_bytes) == (os.path.getsize(out), len(TEXT.encode()))
    text = str(s)
    assert "documents 7 (train 6, test 1; 0 without tokens)" in text
    assert f"tokens {s.tokens:,}; loss on {s.loss_share:.1%} (loss_scope assistant)" in text


def test_the_random_test_choice_is_seeded_and_keeps_corpus_order(tmp_path):
    path = tmp_path / "c.txt"
    path.write_text("\n".join(f"doc {i}" for i in range(200)))
    chosen = {}
    for seed in (0, 0, 1):
        build(path, tmp_path / "o.nndataset", ByteTokenizer(), test_docs=20, seed=seed)
        with nnd.open(tmp_path / "o.nndataset") as ds:
            chosen.setdefault(seed, []).append(
                [bytes(ds.text_doc("test", i).tokens.astype(np.uint8)).decode() for i in range(20)]
            )
    assert chosen[0][0] == chosen[0][1] != chosen[1][0]
    numbers = [int(d.split()[1]) for d in chosen[0][0]]
    assert numbers == sorted(numbers) and numbers != list(range(180, 200))


@pytest.mark.parametrize("path", ["numpy_path", "compiled_path"])
def test_the_random_test_choice_is_pinned(request, path):
    request.getfixturevalue(path)  # the same picks with and without compiled kernels
    assert _build._test_choice(20, 5, "random", 0).tolist() == [2, 7, 11, 16, 19]
    assert _build._test_choice(20, 5, "random", 1).tolist() == [2, 3, 4, 6, 19]
    assert _build._test_choice(20, 5, "last", 0).tolist() == [15, 16, 17, 18, 19]


def test_an_empty_corpus_builds_an_empty_dataset(tmp_path):
    (tmp_path / "c.txt").write_text("\n \n\t\n")
    s = build(tmp_path / "c.txt", tmp_path / "o.nndataset", ByteTokenizer())
    assert (s.documents, s.tokens, s.loss_share) == (0, 0, 1.0)
    with nnd.open(tmp_path / "o.nndataset") as ds:
        assert (ds.info.num_docs, ds.info.has_test) == (0, False)


def test_memory_stays_bounded_by_the_chunk_not_the_corpus(tmp_path):
    path = tmp_path / "c.txt"
    line = b"x" * 999 + b"\n"
    path.write_bytes(line * 4000)  # 4 MB of text, 32 MB of tokens
    tracemalloc.start()
    try:
        build(path, tmp_path / "o.nndataset", ByteTokenizer(), workers=0, chunk_bytes=64 << 10)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert os.path.getsize(tmp_path / "o.nndataset") > 32_000_000
    assert peak < 3_000_000  # a 64 KB chunk, its tokens and blocks; not the corpus


# ---------------------------------------------------------------- refusals and failures


def test_a_missing_corpus_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"missing\.txt: no such corpus file"):
        build(tmp_path / "missing.txt", tmp_path / "o.nndataset", ByteTokenizer())
    assert os.listdir(tmp_path) == []


def test_more_test_documents_than_the_corpus_has_is_an_error(corpus, tmp_path):
    with pytest.raises(ValueError, match=r"test_docs = 8 but .* has 7 documents"):
        build(corpus, tmp_path / "o.nndataset", ByteTokenizer(), test_docs=8)


def test_loss_scope_assistant_needs_the_marker_tokens(corpus, tmp_path):
    with pytest.raises(ValueError, match=re.escape("no special token '<|assistant|>'")):
        build(corpus, tmp_path / "o.nndataset", ByteTokenizer(()), loss_scope="assistant")


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        ({"loss_scope": "some"}, ValueError, "loss_scope must be 'all' or 'assistant', got 'some'"),
        ({"test_split": "first"}, ValueError, "test_split must be 'random' or 'last'"),
        ({"test_docs": -1}, ValueError, "test_docs must be an int >= 0, got -1"),
        ({"workers": -2}, ValueError, "workers must be None or an int >= 0, got -2"),
        ({"tokenizer": object()}, TypeError, r"tokenizer must have encode_batch\(\)"),
    ],
)
def test_bad_arguments_are_refused(corpus, tmp_path, kwargs, error, message):
    kwargs = {"tokenizer": ByteTokenizer(), **kwargs}
    with pytest.raises(error, match=message):
        build(corpus, tmp_path / "o.nndataset", **kwargs)


def test_writing_over_the_corpus_is_refused(corpus):
    with pytest.raises(ValueError, match="is the corpus itself"):
        build(corpus, corpus, ByteTokenizer())
    assert corpus.read_bytes() == TEXT.encode()


def test_token_ids_outside_the_vocabulary_are_refused(corpus, tmp_path):
    class Wide(SkipTilde):
        vocab_size = 100

    with pytest.raises(
        ValueError, match="document 0: token id 112 is outside the tokenizer's vocab_size 100"
    ):
        build(corpus, tmp_path / "o.nndataset", Wide())


def test_a_failure_midway_leaves_the_old_file_and_no_temporary(corpus, tmp_path):
    out = tmp_path / "o.nndataset"
    out.write_bytes(b"old")

    class Failing(SkipTilde):
        def encode_batch(self, docs):
            if any("answer" in d.decode() for d in docs):
                raise RuntimeError("tokenizer failed")
            return super().encode_batch(docs)

    for workers in (0, 2):
        with pytest.raises(RuntimeError, match="tokenizer failed"):
            build(corpus, out, Failing(), test_docs=2, workers=workers, chunk_bytes=16)
        assert out.read_bytes() == b"old"
        assert sorted(os.listdir(tmp_path)) == ["corpus.txt", "o.nndataset"]


def test_a_corpus_that_changes_while_read_is_a_format_error(corpus, tmp_path, monkeypatch):
    real = _inputs.scan_text_docs

    def stale(*args, **kwargs):
        scan = real(*args, **kwargs)
        return type(scan)(scan.docs + 1, scan.bytes, scan.sha256)

    monkeypatch.setattr(_inputs, "scan_text_docs", stale)
    with pytest.raises(FormatError, match="the corpus changed while it was read: 8 documents"):
        build(corpus, tmp_path / "o.nndataset", ByteTokenizer())
    assert sorted(os.listdir(tmp_path)) == ["corpus.txt"]


@pytest.mark.parametrize(
    "offset, value, message",
    [
        (0, b"NNDX", "byte 0: expected magic b'NNDS'"),
        (4, b"\x02\x00\x00\x00", "byte 4: expected NNDS version 1, found 2"),
    ],
)
def test_a_built_file_with_a_bad_label_does_not_open(corpus, tmp_path, offset, value, message):
    out = tmp_path / "o.nndataset"
    build(corpus, out, ByteTokenizer())
    data = bytearray(out.read_bytes())
    data[offset : offset + 4] = value
    out.write_bytes(bytes(data))
    with pytest.raises(FormatError, match=message):
        nnd.open(out)


# ---------------------------------------------------------------- the command line


def test_the_command_line_builds_and_prints_the_summary(corpus, tmp_path, capsys):
    out = tmp_path / "o.nndataset"
    rc = main(
        [
            "text",
            "build",
            str(corpus),
            "-o",
            str(out),
            "--loss-scope",
            "assistant",
            "--test-docs",
            "2",
            "--seed",
            "3",
            "--created",
            str(CREATED),
            "--vocab",
            str(tmp_path / "v.nnvocab"),
        ]
    )
    printed = capsys.readouterr().out
    assert rc == 0
    assert f"wrote {out}" in printed and "documents 7 (train 5, test 2" in printed
    ref = tmp_path / "ref.nndataset"
    build(
        corpus, ref, ByteTokenizer(), loss_scope="assistant", test_docs=2, seed=3, created=CREATED
    )
    assert out.read_bytes() == ref.read_bytes()
    assert fl.text.load_tokenizer(tmp_path / "v.nnvocab").vocab_size == 258


def test_the_command_line_reuses_a_vocabulary_or_trains_a_bpe(corpus, tmp_path, capsys):
    pytest.importorskip("tokenizers")
    out = tmp_path / "o.nndataset"
    assert main(["text", "build", str(corpus), "-o", str(out), "--tokenizer", "bpe:280"]) == 0
    assert "BPETokenizer(vocab_size=280" in capsys.readouterr().out
    again = tmp_path / "again.nndataset"
    assert main(["text", "build", str(corpus), "-o", str(again), "--tokenizer", str(out)]) == 0
    with nnd.open(out) as a, nnd.open(again) as b:
        assert a.vocab == b.vocab


def test_the_command_line_reports_a_missing_corpus_in_one_line(tmp_path, capsys):
    rc = main(["text", "build", str(tmp_path / "nope.txt"), "-o", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert rc == 2
    assert err.strip() == (
        f"feedline text build: {tmp_path / 'nope.txt'}: no such corpus file "
        "(expected a text file with one document a line)"
    )


class TextOnly(SkipTilde):
    """A tokenizer that needs text (as BPE does): it says nothing of keeping bytes."""


@pytest.mark.parametrize("chunk", [3, 4, 5, 1 << 20])  # the bad byte inside or cut
def test_invalid_utf8_is_refused_with_its_offset_for_a_tokenizer_that_needs_text(tmp_path, chunk):
    data = "ok é\n".encode() + b"bad \xe9t\xc3\n" + "fine ü\n".encode()
    path = tmp_path / "c.txt"
    path.write_bytes(data)
    out = tmp_path / "c.nndataset"
    with pytest.raises(
        FormatError,
        match=r"byte 10: expected UTF-8 text, found the byte "
        r"0xe9",
    ):
        build(path, out, TextOnly(), chunk_bytes=chunk)
    assert not out.exists()


@pytest.mark.parametrize("chunk", [2, 7, 1 << 20])
def test_a_character_cut_at_the_end_of_the_file_is_refused_there(tmp_path, chunk):
    path = tmp_path / "c.txt"
    path.write_bytes("ab 😀\n".encode() + "😀".encode()[:2])
    with pytest.raises(FormatError, match=r"byte 8: .* 0xf0"):
        build(path, tmp_path / "c.nndataset", TextOnly(), chunk_bytes=chunk)


def test_the_byte_tokenizer_keeps_bytes_that_are_not_utf8(tmp_path):
    path = tmp_path / "c.txt"
    path.write_bytes(b"latin-1 caf\xe9\nnext\n")
    out = tmp_path / "c.nndataset"
    build(path, out, ByteTokenizer(), created=CREATED)
    with nnd.open(out) as ds:
        assert bytes(ds.text_doc("train", 0).tokens.astype(np.uint8)) == b"latin-1 caf\xe9"


@pytest.mark.parametrize("chunk", [1, 2, 3, 1 << 20])
def test_valid_utf8_cut_anywhere_by_the_blocks_is_accepted(corpus, tmp_path, chunk):
    build(corpus, tmp_path / "c.nndataset", TextOnly(), chunk_bytes=chunk, created=CREATED)
    unchecked = type("KeepsBytes", (SkipTilde,), {"keeps_bytes": True})()
    build(corpus, tmp_path / "ref.nndataset", unchecked, created=CREATED)
    # the same bytes as without the check (the vocab record is the same; only the check
    # differs), for every block size
    assert (tmp_path / "c.nndataset").read_bytes() == (tmp_path / "ref.nndataset").read_bytes()


def test_a_corpus_edited_in_place_while_built_is_a_format_error(tmp_path):
    corpus = tmp_path / "corpus.txt"
    original = b"aaaa\n" * 4000 + b"bbbb\n" * 4000  # more than the reader buffers
    corpus.write_bytes(original)

    class EditsTheCorpus(ByteTokenizer):  # same size and line count, other bytes
        def encode_flow(self, docs):
            with open(corpus, "r+b") as f:
                f.write(b"XXXX\n" * 8000)
            return super().encode_flow(docs)

    for workers in (0, 2):
        with pytest.raises(
            FormatError,
            match=r"the corpus changed while it was read: SHA-256 "
            r"[0-9a-f]{16}\.\.\. when counted",
        ):
            build(
                corpus, tmp_path / "o.nndataset", EditsTheCorpus(), chunk_bytes=10, workers=workers
            )
        assert sorted(os.listdir(tmp_path)) == ["corpus.txt"]
        corpus.write_bytes(original)


class EmptyForTilde(SkipTilde):
    """encode_batch returns an empty list (numpy: float64) for a document of '~'."""

    def __init__(self, kind) -> None:
        super().__init__()
        self.kind = kind

    def encode_batch(self, docs):
        return [
            self.kind([]) if d == b"~~~" else a.astype(np.int64)
            for d, a in zip(docs, super().encode_batch(docs))
        ]


@pytest.mark.parametrize("chunk", [1, 16, 1 << 20])  # the empty document alone or not
@pytest.mark.parametrize("kind", [list, np.array])
def test_an_empty_list_for_a_document_is_a_document_without_tokens(corpus, tmp_path, chunk, kind):
    out, ref = tmp_path / "o.nndataset", tmp_path / "ref.nndataset"
    s = build(corpus, out, EmptyForTilde(kind), chunk_bytes=chunk, created=CREATED)
    assert s.empty_docs == 1
    build(corpus, ref, SkipTilde(), created=CREATED)
    assert out.read_bytes() == ref.read_bytes()


@pytest.mark.parametrize(
    "target, error, message",
    [
        ("", IsADirectoryError, "is a directory (expected the name of a file to write)"),
        ("missing/o.nndataset", FileNotFoundError, "no such directory"),
    ],
)
def test_an_out_path_that_cannot_be_written_is_refused_before_any_work(
    corpus, tmp_path, monkeypatch, target, error, message
):
    def no_scan(*args, **kwargs):
        raise AssertionError("the corpus was read")

    monkeypatch.setattr(_inputs, "scan_text_docs", no_scan)
    out = tmp_path / target
    with pytest.raises(
        error, match=re.escape(f"out_path {str(out)!r}") + ".*" + re.escape(message)
    ):
        build(corpus, out, ByteTokenizer())
    assert sorted(os.listdir(tmp_path)) == ["corpus.txt"]


@pytest.mark.parametrize("flag", ["-o", "--vocab"])
def test_the_command_line_refuses_a_target_in_a_missing_directory_before_building(
    corpus, tmp_path, capsys, flag
):
    bad = str(tmp_path / "missing" / "x")
    paths = {"-o": str(tmp_path / "o.nndataset"), "--vocab": str(tmp_path / "v.nnvocab")}
    paths[flag] = bad
    rc = main(["text", "build", str(corpus), "-o", paths["-o"], "--vocab", paths["--vocab"]])
    err = capsys.readouterr().err
    assert rc == 2
    assert err == (
        f"feedline text build: {flag} {bad!r}: no such directory "
        f"{str(tmp_path / 'missing')!r} to write into\n"
    )
    assert sorted(os.listdir(tmp_path)) == ["corpus.txt"]


def test_the_command_line_refuses_an_output_that_is_a_directory(corpus, tmp_path, capsys):
    assert main(["text", "build", str(corpus), "-o", str(tmp_path)]) == 2
    assert capsys.readouterr().err == (
        f"feedline text build: -o {str(tmp_path)!r} is a "
        "directory (expected the name of a file to write)\n"
    )
    assert sorted(os.listdir(tmp_path)) == ["corpus.txt"]


def test_the_command_line_refuses_a_bpe_size_beyond_32_bit_ids(corpus, tmp_path, capsys):
    pytest.importorskip("tokenizers")
    rc = main(
        [
            "text",
            "build",
            str(corpus),
            "-o",
            str(tmp_path / "o.nndataset"),
            "--tokenizer",
            "bpe:99999999999999999999999",
        ]
    )
    assert rc == 2
    assert capsys.readouterr().err == (
        "feedline text build: vocab_size must be at most 2**32, got 99999999999999999999999\n"
    )
