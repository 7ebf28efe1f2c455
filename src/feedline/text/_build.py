"""``build``: a text corpus (one document a line) to a ``.nndataset``, streamed.

Two passes over the text, none over the tokens:

1. a scan counts the documents and hashes the file (vectorised, one block in memory);
   the test documents are chosen from the count (seeded, or the last N);
2. the file is read and hashed again (a corpus edited meanwhile is refused before the
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

import collections
import contextlib
import dataclasses
import hashlib
import itertools
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Generator, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Literal, cast

import numpy as np

from .._base import kernels
from .._base.files import atomic_write
from ..errors import FormatError
from ..formats import nndataset
from ..formats._nnwrite import encode_head, head_size
from ..order import Order, Seq
from ._docs import CHUNK_BYTES, _doc_blocks, mark_assistant_span, scan_text_docs
from ._tokenizers import ASSISTANT, END_OF_ASSISTANT, Tokenizer

__all__ = ["BuildSummary", "build"]

# Threads tokenizing when ``workers`` is None. Measured (benchmarks/text_build.py, 2
# CPUs, four runs): with the byte tokenizer 1 and 2 threads are level (90-100 MB/s);
# with a BPE, whose batch encoder already uses every core, 1 thread reached 0.80-0.99x
# the encoder alone and 2 threads 0.76-0.85x, ahead in one run of four.
_DEFAULT_WORKERS = 1


@dataclasses.dataclass(frozen=True)
class BuildSummary:
    """What :func:`build` wrote: documents, tokens, the share trained, sizes and time."""

    path: str
    documents: int  # the corpus's documents (non-empty lines)
    train_docs: int
    test_docs: int
    tokens: int  # over both subsets
    loss_tokens: int  # tokens whose loss counts (all of them for loss_scope "all")
    empty_docs: int  # documents that tokenized to nothing (kept, with their doc_id)
    loss_scope: str
    source_bytes: int
    bytes: int  # the .nndataset's size
    seconds: float

    @property
    def loss_share(self) -> float:
        """The share of tokens whose loss counts (1.0 for loss_scope "all")."""
        return self.loss_tokens / self.tokens if self.tokens else 1.0

    def __str__(self) -> str:
        mb = self.source_bytes / 1e6
        rate = mb / self.seconds if self.seconds > 0 else float("inf")
        return "\n".join(
            [
                f"wrote {self.path}: {self.bytes:,} bytes",
                f"  documents {self.documents:,} (train {self.train_docs:,}, test "
                f"{self.test_docs:,}; {self.empty_docs:,} without tokens)",
                f"  tokens {self.tokens:,}; loss on {self.loss_share:.1%} "
                f"(loss_scope {self.loss_scope})",
                f"  {mb:,.1f} MB of text in {self.seconds:.2f} s ({rate:,.1f} MB/s)",
            ]
        )


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


def _encode(tokenizer: Tokenizer, docs: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
    if hasattr(tokenizer, "encode_flow"):
        flow, counts = tokenizer.encode_flow(docs)
    else:  # any object with encode_batch
        arrays = [np.asarray(a) for a in tokenizer.encode_batch(docs)]
        counts = np.fromiter(map(len, arrays), dtype=np.int64, count=len(arrays))
        # an empty list or array (a document without tokens) is float64 to numpy: it
        # holds no ids, so it must not decide the dtype of the others
        flow = np.concatenate([a for a in arrays if len(a)] or [np.zeros(0, np.uint64)])
    counts = np.asarray(counts, dtype=np.int64)
    flow = np.asarray(flow)
    if len(counts) != len(docs) or int(counts.sum()) != len(flow) or flow.ndim != 1:
        raise ValueError(
            f"{type(tokenizer).__name__} returned {len(counts)} documents and "
            f"{len(flow)} tokens for {len(docs)} documents"
        )
    if len(flow) and (flow.dtype.kind not in "iu" or int(flow.min()) < 0):
        raise ValueError(
            f"{type(tokenizer).__name__} returned ids of dtype {flow.dtype} "
            "(expected non-negative integers)"
        )
    return flow.astype(np.uint64, copy=False), counts


def _chunk(
    tokenizer: Tokenizer,
    docs: list[bytes],
    first: int,
    nbytes: int,
    test: np.ndarray,
    markers: tuple[int, int] | None,
) -> _Chunk:
    """Tokenize, mask and lay out one chunk of documents (``first`` numbers the first)."""
    flow, counts = _encode(tokenizer, docs)
    size = tokenizer.vocab_size
    if len(flow) and int(flow.max()) >= size:
        at = int(np.argmax(flow >= size))
        doc = first + int(np.searchsorted(np.cumsum(counts), at, side="right"))
        raise ValueError(
            f"document {doc}: token id {int(flow[at])} is outside the tokenizer's vocab_size {size}"
        )
    mask = None if markers is None else mark_assistant_span(flow, *markers, counts=counts)
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


def _in_order(
    fn: Callable[..., _Chunk], tasks: Iterator[tuple], workers: int
) -> Generator[_Chunk, None, None]:
    """``fn(*task)`` for each task, in order, on ``workers`` threads (2 tasks queued per
    thread), or in the calling thread when ``workers`` is 0."""
    if workers == 0:
        for task in tasks:
            yield fn(*task)
        return
    pool = ThreadPoolExecutor(workers, thread_name_prefix="feedline-text")
    pending: collections.deque = collections.deque()
    try:
        for task in tasks:
            pending.append(pool.submit(fn, *task))
            if len(pending) >= 2 * workers:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _test_choice(n: int, k: int, split: str, seed: int) -> np.ndarray:
    """Sorted indices of the ``k`` test documents among ``n``: the first ``k`` positions
    of feedline's seeded shuffle (stable across platforms and versions), or the last k."""
    if k == 0:
        return np.zeros(0, dtype=np.int64)
    if split == "last":
        return np.arange(n - k, n, dtype=np.int64)
    with kernels.deferred():  # numpy's path (the same picks) rather than wait for numba
        _, picked = Order(Seq.source(n).shuffle(seed)).lookup(np.arange(k, dtype=np.int64))
    return np.sort(picked.astype(np.int64))


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


def _progress(enabled: bool | None, total: int, desc: str) -> Any:
    if not enabled:
        return None
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return tqdm(
        total=total,
        desc=desc,
        unit="B",
        unit_scale=True,
        unit_divisor=1024,
        leave=False,
        dynamic_ncols=True,
    )


def _check_args(
    corpus: Any,
    out_path: Any,
    tokenizer: Any,
    test_docs: Any,
    test_split: Any,
    loss_scope: Any,
    workers: Any,
    seed: Any,
) -> None:
    for name in ("encode_batch", "vocab_record", "special_id"):
        if not callable(getattr(tokenizer, name, None)):
            raise TypeError(
                f"tokenizer must have {name}() (a ByteTokenizer, a BPETokenizer "
                f"or a fl.text.Tokenizer), got {type(tokenizer).__name__}"
            )
    if not isinstance(getattr(tokenizer, "vocab_size", None), (int, np.integer)):
        raise TypeError(
            f"tokenizer.vocab_size must be an int, got {getattr(tokenizer, 'vocab_size', None)!r}"
        )
    for name, v, low in (("test_docs", test_docs, 0), ("seed", seed, 0)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < low:
            raise ValueError(f"{name} must be an int >= {low}, got {v!r}")
    if workers is not None and (
        isinstance(workers, bool) or not isinstance(workers, int) or workers < 0
    ):
        raise ValueError(f"workers must be None or an int >= 0, got {workers!r}")
    if test_split not in ("random", "last"):
        raise ValueError(f"test_split must be 'random' or 'last', got {test_split!r}")
    if loss_scope not in nndataset.LOSS_SCOPES:
        raise ValueError(f"loss_scope must be 'all' or 'assistant', got {loss_scope!r}")
    if not os.path.isfile(corpus):
        raise FileNotFoundError(
            f"{os.fspath(corpus)}: no such corpus file (expected a text "
            "file with one document a line)"
        )
    check_out_path(out_path, "out_path")
    if os.path.exists(out_path) and os.path.samefile(corpus, out_path):
        raise ValueError(f"out_path {os.fspath(out_path)!r} is the corpus itself")


def check_out_path(path: str | os.PathLike[str], what: str) -> None:
    """Refuse, before any work, a file to write that is a directory or whose directory
    does not exist (the error names ``path``, not the temporary written beside it)."""
    path = os.fspath(path)
    if os.path.isdir(path):
        raise IsADirectoryError(
            f"{what} {path!r} is a directory (expected the name of a file to write)"
        )
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise FileNotFoundError(f"{what} {path!r}: no such directory {parent!r} to write into")


def build(
    corpus: str | os.PathLike[str],
    out_path: str | os.PathLike[str],
    tokenizer: Tokenizer,
    *,
    test_docs: int = 0,
    test_split: Literal["random", "last"] = "random",
    loss_scope: Literal["all", "assistant"] = "all",
    workers: int | None = None,
    seed: int = 0,
    created: int | None = None,
    license: str | None = None,
    progress: bool | None = None,
    chunk_bytes: int = CHUNK_BYTES,
) -> BuildSummary:
    """Tokenize the text file ``corpus`` (a document a line, as ``read_text_docs``
    reads it) into the ``.nndataset`` ``out_path``, atomically.

    ================  ==================================================================
    ``tokenizer``     a :class:`ByteTokenizer`, :class:`BPETokenizer` or any object with
                      ``encode_batch``, ``vocab_size``, ``special_id``, ``vocab_record``
    ``test_docs``     documents moved to the test subset (kept in corpus order)
    ``test_split``    "random": the first ``test_docs`` of feedline's shuffle of the
                      documents with ``seed`` (reproducible everywhere); "last": the last
    ``loss_scope``    "all", or "assistant": only tokens inside ``<|assistant|>`` ...
                      ``<|end_of_assistant|>`` spans count (``mark_assistant_span``)
    ``workers``       threads tokenizing chunks while this one reads and writes (None:
                      1; 0: tokenize here, in turn); the output does not depend on it
    ``created``       the timestamp stored (None: now); fix it for reproducible files
    ``progress``      True: a progress bar with tokens/s on stderr (needs ``tqdm``)
    ================  ==================================================================

    The file records the corpus path (as given), its SHA-256 and document count, and
    the tokenizer's vocab record. A document that tokenizes to nothing keeps its
    doc_id. Memory: ``chunk_bytes`` of text and its blocks per chunk in flight (2 per
    worker) plus 8 bytes per document, whatever the corpus size. Returns a
    :class:`BuildSummary`. A missing corpus is a ``FileNotFoundError``, and so is an
    ``out_path`` in a missing directory (one that is a directory an
    ``IsADirectoryError``), both before any work; bad arguments a
    ``ValueError``/``TypeError``; a corpus that changes while it is read (its size,
    documents or SHA-256) a ``FormatError``, and so is text that is not valid UTF-8
    (naming the byte offset) unless the tokenizer keeps bytes as they are
    (``ByteTokenizer``: ids 0-255). Cost: the tokenizer's, plus two reads (and
    hashes) of the text and one write.

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
    _check_args(corpus, out_path, tokenizer, test_docs, test_split, loss_scope, workers, seed)
    markers = None
    if loss_scope == "assistant":
        markers = (tokenizer.special_id(ASSISTANT), tokenizer.special_id(END_OF_ASSISTANT))
    bar = _progress(progress, os.path.getsize(corpus), "counting documents")
    try:
        # A tokenizer that needs text would turn invalid bytes into U+FFFD: refused
        # here with the offset instead; one that keeps bytes keeps them.
        scan = scan_text_docs(
            corpus,
            chunk_bytes,
            None if bar is None else bar.update,
            utf8=not getattr(tokenizer, "keeps_bytes", False),
        )
    finally:
        if bar is not None:
            bar.close()
    if test_docs > scan.docs:
        raise ValueError(
            f"test_docs = {test_docs} but {os.fspath(corpus)} has {scan.docs} documents"
        )
    test = _test_choice(scan.docs, int(test_docs), test_split, int(seed))
    meta = nndataset.Build(
        tokenizer.vocab_record(),
        os.fspath(corpus),
        scan.sha256,
        scan.docs,
        loss_scope=loss_scope,
        created=int(time.time()) if created is None else created,
        license=license,
    )

    digest = hashlib.sha256()  # of the text tokenized, checked against the scan's

    def tasks() -> Generator[tuple, None, None]:
        first = 0
        for docs, nbytes in _doc_blocks(corpus, chunk_bytes, digest):
            yield tokenizer, docs, first, nbytes, test, markers
            first += len(docs)

    bar = _progress(progress, scan.bytes, "tokenizing")
    n_threads = _DEFAULT_WORKERS if workers is None else workers
    try:
        with (
            contextlib.closing(tasks()) as todo,
            contextlib.closing(_in_order(_chunk, todo, n_threads)) as chunks,
        ):
            totals = _write(out_path, meta, len(test), scan.bytes, chunks, bar, digest)
    finally:
        if bar is not None:
            bar.close()
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
    digest: Any,
) -> tuple:
    """Write the chunks' blocks after room for the root record (train) or to a spill
    file (test, appended at the end), then the root record; atomically. ``digest`` has
    hashed the text the chunks came from once they are all read: a corpus whose bytes
    differ from the scan's (``meta.source_sha256``) is refused before the commit."""
    # build made ``meta``: the corpus path (os.fspath's), the scan's hex digest, an int time
    source = cast("str", meta.source_path)
    sha, created = meta.source_sha256, meta.created
    assert isinstance(sha, str) and created is not None
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
        if digest.hexdigest() != sha:
            raise FormatError(
                f"the corpus changed while it was read: SHA-256 "
                f"{sha[:16]}... when counted, "
                f"{digest.hexdigest()[:16]}... when tokenized (same size "
                "and document count)",
                source,
            )
        _append_file(spill, f)
        size = f.tell()
        f.seek(0)
        f.write(encode_head(meta, train, test, created))
    return train, test, tokens, loss_tokens, size
