"""``build``: documents (text files, JSONL, Parquet, chats: ``_inputs``) to a
``.nndataset``, streamed.

Two passes over the inputs, none over the tokens:

1. a scan counts the documents and hashes each file (one block in memory); the test
   documents are chosen from the count (seeded, or the last N);
2. each file is read and hashed again (a corpus edited meanwhile is refused before the
   output is committed), and chunks of documents (``chunk_bytes`` of text) are
   tokenized, ``workers`` at a time on threads (the byte tokenizer's numpy work and
   the HuggingFace batch encoder both release the GIL), and their blocks are written
   in document order: train blocks straight into the output after room left for the
   root record, test blocks to an anonymous temporary file in the target directory,
   copied in at the end (``os.copy_file_range``). Only one int64 token count per
   document is kept; the root record, whose size depends on the document counts
   alone, is written last.

The output is byte for byte what ``nndataset.write`` writes for the same documents and
``created``, whatever ``workers`` is. The write is atomic; on any error neither the
target nor a temporary is left behind.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import itertools
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Generator, Iterator
from typing import Any, Literal, cast

import numpy as np

from .._base.files import atomic_write
from ..errors import DomainError, FormatError
from ..formats import nndataset
from ..formats._nnwrite import encode_head, head_size
from ._build_flr import is_flr, write_flr
from ._chat import ChatTemplate
from ._docs import CHUNK_BYTES, CorpusScan
from ._inputs import Input, as_inputs, changed, input_blocks, scan_input
from ._tokenize import (
    _DEFAULT_WORKERS,
    BuildSummary,
    DocEncoding,
    _check_args,
    _in_order,
    _progress,
    _test_choice,
    check_out_path,
    end_token,
)
from ._tokenizers import ASSISTANT, END_OF_ASSISTANT, Tokenizer

__all__ = ["BuildSummary", "build", "check_out_path"]


@dataclasses.dataclass(frozen=True)
class _Chunk:
    blocks: np.ndarray  # u8: every document's block, in corpus order
    runs: list[tuple[bool, int, int]]  # (to the test subset?, start, stop) byte ranges
    train_counts: np.ndarray  # int64 tokens per document
    test_counts: np.ndarray
    tokens: int
    loss_tokens: int
    nbytes: int  # bytes of the corpus file this chunk covers


# From this many tokens per document on average, laying out masked blocks with two
# slice copies per document beats numpy's byte-wise boolean select (measured here: 3
# against 30+ ns a token at 1,000 tokens a document; the select wins below ~20).
_SLICES_FROM = 32


def _blocks(
    flow: np.ndarray, counts: np.ndarray, mask: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray]:
    """The document blocks ``[count u64][count x u64][count x u8]?`` as bytes, and each
    block's start (then the end) within them."""
    width = 8 if mask is None else 9
    starts = np.concatenate(([0], np.cumsum(8 + width * counts)))
    if mask is not None and len(flow) >= _SLICES_FROM * len(counts):
        res = np.empty(int(starts[-1]), dtype=np.uint8)
        res[starts[:-1, None] + np.arange(8)] = counts.astype("<u8").view(np.uint8).reshape(-1, 8)
        # (numpy types its arrays' buffer protocol for Python 3.12+ only)
        dst, marks = memoryview(res), memoryview(mask.view(np.uint8))  # type: ignore[arg-type]
        src = memoryview(flow.astype("<u8", copy=False).view(np.uint8))  # type: ignore[arg-type]
        for a, t, c in zip(
            (starts[:-1] + 8).tolist(), (np.cumsum(counts) - counts).tolist(), counts.tolist()
        ):
            dst[a : a + 8 * c] = src[8 * t : 8 * (t + c)]
            dst[a + 8 * c : a + 9 * c] = marks[t : t + c]
        return res, starts
    step = counts + 1
    out = np.empty(len(flow) + len(counts), dtype="<u8")
    head = np.cumsum(step) - step
    is_token = np.ones(len(out), dtype=bool)
    is_token[head] = False
    out[head] = counts
    out[is_token] = flow
    if mask is None:
        return out.view(np.uint8), starts
    lens = np.empty(2 * len(counts), dtype=np.int64)
    lens[0::2], lens[1::2] = 8 * step, counts
    is_mask = np.repeat(np.tile(np.array([False, True]), len(counts)), lens)
    res = np.empty(len(is_mask), dtype=np.uint8)
    res[~is_mask] = out.view(np.uint8)
    res[is_mask] = mask
    return res, starts


def _chunk(
    enc: DocEncoding,
    docs: list[Any],
    first: int,
    nbytes: int,
    test: np.ndarray,
    src: tuple[Input, int],
) -> _Chunk:
    """Tokenize, mask and lay out one chunk of documents (``first`` numbers the first;
    ``src`` is their input and the number of the first there)."""
    flow, counts, mask = enc.encode(src[0], docs, src[1])
    size = enc.tokenizer.vocab_size
    if len(flow) and int(flow.max()) >= size:
        at = int(np.argmax(flow >= size))
        doc = first + int(np.searchsorted(np.cumsum(counts), at, side="right"))
        raise ValueError(
            f"document {doc}: token id {int(flow[at])} is outside the tokenizer's vocab_size {size}"
        )
    loss = len(flow) if mask is None else int(np.count_nonzero(mask))
    blocks, starts = _blocks(flow, counts, mask)
    is_test = np.zeros(len(docs), dtype=bool)
    lo, hi = np.searchsorted(test, [first, first + len(docs)])
    is_test[test[lo:hi] - first] = True
    # maximal runs of documents bound for the same subset, as byte ranges of the blocks
    edges = (
        np.concatenate(([0], np.flatnonzero(is_test[1:] != is_test[:-1]) + 1, [len(docs)])).tolist()
        if len(docs)
        else [0]
    )
    runs = [
        (bool(is_test[a]), int(starts[a]), int(starts[b])) for a, b in itertools.pairwise(edges)
    ]
    return _Chunk(blocks, runs, counts[~is_test], counts[is_test], len(flow), loss, nbytes)


def _append_file(src: Any, dst: Any) -> None:
    """Append all of ``src`` (at its position's end) to ``dst``, in the kernel if it can."""
    n, at = src.tell(), dst.tell()
    src.flush()
    dst.flush()
    done = 0
    with contextlib.suppress(AttributeError, OSError):  # no copy_file_range: copy below
        while done < n:
            k = os.copy_file_range(src.fileno(), dst.fileno(), n - done, done, at + done)
            if k <= 0:
                break
            done += k
    src.seek(done)
    dst.seek(at + done)
    if done < n:
        shutil.copyfileobj(src, dst, 1 << 20)


def build(
    corpus: Any,
    out_path: str | os.PathLike[str],
    tokenizer: Tokenizer,
    *,
    test_docs: int = 0,
    test_split: Literal["random", "last"] = "random",
    loss_scope: Literal["all", "assistant"] | None = None,
    eos: int | str | None = None,
    bos: int | str | None = None,
    sep: str | None = None,
    text_field: str = "text",
    chat: bool = False,
    messages_field: str = "messages",
    chat_template: Callable[[list[dict[str, Any]]], Any] | None = None,
    workers: int | None = None,
    seed: int = 0,
    created: int | None = None,
    license: str | None = None,
    progress: bool | None = None,
    chunk_bytes: int = CHUNK_BYTES,
) -> BuildSummary:
    """Tokenize the documents of ``corpus`` (a path, an :class:`Input`, or a list of
    them, of any kinds: text files, JSONL, Parquet, chats) into the ``.nndataset``
    ``out_path``, atomically; an ``out_path`` ending ``.flr`` gets a compact corpus
    instead (``_build_flr``: one row a document, tokens in uint16 up to 65,536 ids,
    else uint32; the loss mask and test subset as columns), which ``Windows`` reads as
    it reads the ``.nndataset``. Documents are numbered across the inputs, in order.

    ================  ==================================================================
    ``tokenizer``     a :class:`ByteTokenizer`, :class:`BPETokenizer` or any object with
                      ``encode_batch``, ``vocab_size``, ``special_id``, ``vocab_record``
    ``test_docs``     documents moved to the test subset (kept in corpus order)
    ``test_split``    "random": the first ``test_docs`` of feedline's shuffle of the
                      documents with ``seed`` (reproducible everywhere); "last": the last
    ``loss_scope``    "all", or "assistant": only tokens inside ``<|assistant|>`` ...
                      ``<|end_of_assistant|>`` spans count (``mark_assistant_span``), and
                      in a chat the trained roles' content and end (``ChatTemplate``).
                      None: "assistant" when an input is a chat, else "all"
    ``eos``, ``bos``  a token id or a special token's name, put after (before) every
                      document; None: nothing, even for a tokenizer with an end-of-text
                      special (as before these options). Never in the loss mask
    ``sep``, ...      how a plain path is read (:class:`Input`'s ``sep``,
                      ``text_field``, ``chat``, ``messages_field``; an ``Input`` has its
                      own); ``chat_template`` renders chats (default ``ChatTemplate()``)
    ``workers``       threads tokenizing chunks while this one reads and writes (None:
                      1; 0: tokenize here, in turn); the output does not depend on it
    ``created``       the timestamp stored (None: now); fix it for reproducible files
    ``progress``      True: a progress bar with tokens/s on stderr (needs ``tqdm``)
    ================  ==================================================================

    The file records the corpus path (as given; several: one a line), its SHA-256 (of
    several: of their SHA-256s, one a line) and document count, and the tokenizer's
    vocab record. A document that tokenizes to nothing keeps its doc_id. Memory:
    ``chunk_bytes`` of text and its blocks per chunk in flight (2 per worker) plus 8
    bytes per document, whatever the corpus size (a Parquet input: one row group's
    column). Returns a :class:`BuildSummary`. A missing input is a
    ``FileNotFoundError``, and so is an ``out_path`` in a missing directory (one that
    is a directory an ``IsADirectoryError``), both before any work; bad arguments a
    ``ValueError``/``TypeError`` (an ``eos``/``bos`` the tokenizer has not a
    ``DomainError``); a corpus that changes while it is read (its size, documents or
    SHA-256) a ``FormatError``, and so is text that is not valid UTF-8 (naming the byte
    offset) unless the tokenizer keeps bytes as they are (``ByteTokenizer``: ids
    0-255), a JSONL line that is not an object with the field (naming the line), a
    bad message (the line and the message) and a Parquet file without the column or
    with a null (the row). Nothing is written then. Cost: the tokenizer's, plus two
    reads (and hashes) of the inputs and one write.

    >>> import os, tempfile
    >>> from feedline.text import ByteTokenizer
    >>> d = tempfile.mkdtemp()
    >>> with open(os.path.join(d, "c.txt"), "w") as f:
    ...     _ = f.write("one\\n\\nsay <|assistant|>two<|end_of_assistant|>\\n")
    >>> s = build(os.path.join(d, "c.txt"), os.path.join(d, "c.nndataset"),
    ...           ByteTokenizer(), loss_scope="assistant")
    >>> (s.documents, s.tokens, s.loss_tokens)
    (2, 12, 5)
    """
    t0 = time.perf_counter()
    inputs = as_inputs(
        corpus, sep=sep, text_field=text_field, chat=chat, messages_field=messages_field
    )
    any_chat = any(i.chat for i in inputs)
    scope = loss_scope if loss_scope is not None else "assistant" if any_chat else "all"
    _check_args(inputs, out_path, tokenizer, test_docs, test_split, scope, workers, seed)
    enc = _encoding(tokenizer, inputs, scope, chat_template, bos, eos)
    utf8 = not getattr(tokenizer, "keeps_bytes", False)
    total = sum(os.path.getsize(i.path) for i in inputs)
    bar = _progress(progress, total, "counting documents")
    try:
        # A tokenizer that needs text would turn invalid bytes into U+FFFD: refused
        # here with the offset instead; one that keeps bytes keeps them.
        on_block = None if bar is None else bar.update
        scans = [scan_input(i, chunk_bytes, on_block, utf8) for i in inputs]
    finally:
        if bar is not None:
            bar.close()
    scan = _combined(scans)
    source = "\n".join(os.fspath(i.path) for i in inputs)
    if test_docs > scan.docs:
        raise ValueError(f"test_docs = {test_docs} but {source} has {scan.docs} documents")
    test = _test_choice(scan.docs, int(test_docs), test_split, int(seed))
    n_threads = _DEFAULT_WORKERS if workers is None else workers

    def tasks() -> Generator[tuple, None, None]:
        first = 0
        for inp, s in zip(inputs, scans):
            digest = hashlib.sha256()  # of the text tokenized, checked against the scan's
            here = read = 0
            for docs, nbytes in input_blocks(inp, chunk_bytes, digest):
                yield enc, docs, first, nbytes, test, (inp, here)
                first, here, read = first + len(docs), here + len(docs), read + nbytes
            changed(inp, s, here, read, digest.hexdigest())

    bar = _progress(progress, scan.bytes, "tokenizing")
    try:
        if is_flr(out_path):
            totals = write_flr(tasks(), out_path, enc, scan, test, n_threads, bar, source)
        else:
            meta = nndataset.Build(
                tokenizer.vocab_record(),
                source,
                scan.sha256,
                scan.docs,
                loss_scope=scope,
                created=int(time.time()) if created is None else created,
                license=license,
            )
            with (
                contextlib.closing(tasks()) as todo,
                contextlib.closing(_in_order(_chunk, todo, n_threads)) as chunks,
            ):
                totals = _write(out_path, meta, len(test), scan.bytes, chunks, bar)
    finally:
        if bar is not None:
            bar.close()
    return _summary(out_path, scan, totals, scope, t0)


def _combined(scans: list[CorpusScan]) -> CorpusScan:
    """One input's scan, or several's: documents and bytes summed, the SHA-256 of
    their SHA-256s (hex, one a line)."""
    if len(scans) == 1:
        return scans[0]
    sha = hashlib.sha256("\n".join(s.sha256 for s in scans).encode()).hexdigest()
    return CorpusScan(sum(s.docs for s in scans), sum(s.bytes for s in scans), sha)


def _encoding(
    tokenizer: Tokenizer,
    inputs: tuple[Input, ...],
    scope: str,
    chat_template: Any,
    bos: Any,
    eos: Any,
) -> DocEncoding:
    """How documents become tokens, its specials checked against the tokenizer."""
    markers = None
    if scope == "assistant" and not all(i.chat for i in inputs):
        markers = (tokenizer.special_id(ASSISTANT), tokenizer.special_id(END_OF_ASSISTANT))
    template = ChatTemplate() if chat_template is None else chat_template
    if not callable(template):
        raise TypeError(
            "chat_template must be a ChatTemplate or a function of the messages, "
            f"got {type(template).__name__}"
        )
    roles = template.roles if isinstance(template, ChatTemplate) else None
    if isinstance(template, ChatTemplate) and any(i.chat for i in inputs):
        for name in template.markers():
            try:
                tokenizer.special_id(name)
            except ValueError as e:
                raise DomainError(
                    f"chat_template: {e} (the default chat template needs "
                    "fl.text.CHAT_SPECIALS: ByteTokenizer(CHAT_SPECIALS), "
                    "BPETokenizer.train(..., specials=CHAT_SPECIALS))"
                ) from None
    return DocEncoding(
        tokenizer,
        scope == "assistant",
        markers,
        template,
        roles,
        end_token(tokenizer, "bos", bos),
        end_token(tokenizer, "eos", eos),
        dict(getattr(tokenizer, "specials", None) or {}),
    )


def _summary(
    out_path: str | os.PathLike[str], scan: Any, totals: tuple, loss_scope: str, t0: float
) -> BuildSummary:
    train_counts, test_counts, tokens, loss_tokens, size = totals
    empty = int(np.count_nonzero(train_counts == 0) + np.count_nonzero(test_counts == 0))
    return BuildSummary(
        os.fspath(out_path),
        scan.docs,
        len(train_counts),
        len(test_counts),
        tokens,
        loss_tokens,
        empty,
        loss_scope,
        scan.bytes,
        size,
        time.perf_counter() - t0,
    )


def _write(
    out_path: str | os.PathLike[str],
    meta: nndataset.Build,
    n_test: int,
    n_bytes: int,
    chunks: Iterator[_Chunk],
    bar: Any,
) -> tuple:
    """Write the chunks' blocks after room for the root record (train) or to a spill
    file (test, appended at the end), then the root record; atomically. The chunks'
    inputs were each checked against their scan once read (``_inputs.changed``); the
    documents and bytes are counted again here before the commit."""
    # build made ``meta``: the corpus path (os.fspath's) and an int time
    source = cast("str", meta.source_path)
    created = meta.created
    assert created is not None
    counts: dict[bool, list[np.ndarray]] = {False: [], True: []}
    tokens = loss_tokens = read = 0
    t0 = time.perf_counter()
    target = os.path.dirname(os.path.abspath(out_path))
    with atomic_write(out_path) as f, tempfile.TemporaryFile(dir=target) as spill:
        f.seek(head_size(meta, meta.source_docs - n_test, n_test))
        for c in chunks:
            blocks = memoryview(c.blocks)  # type: ignore[arg-type]  # numpy types its buffer protocol for 3.12+ only
            for to_test, a, b in c.runs:
                (spill if to_test else f).write(blocks[a:b])
            counts[False].append(c.train_counts)
            counts[True].append(c.test_counts)
            tokens, loss_tokens = tokens + c.tokens, loss_tokens + c.loss_tokens
            read += c.nbytes
            if bar is not None:
                bar.update(c.nbytes)
                rate = tokens / max(time.perf_counter() - t0, 1e-9)
                bar.set_postfix_str(f"{rate / 1e6:.2f} M tokens/s", refresh=False)
        train, test = (np.concatenate([np.zeros(0, np.int64), *counts[k]]) for k in (False, True))
        if (len(train), len(test), read) != (meta.source_docs - n_test, n_test, n_bytes):
            raise FormatError(
                f"the corpus changed while it was read: {meta.source_docs} "
                f"documents in {n_bytes} bytes when counted, "
                f"{len(train) + len(test)} in {read} when tokenized",
                source,
            )
        _append_file(spill, f)
        size = f.tell()
        f.seek(0)
        f.write(encode_head(meta, train, test, created))
    return train, test, tokens, loss_tokens, size
