"""A compact corpus: ``build`` to a ``.flr`` of one row per document, tokens narrow.

The record (``corpus_record``) has a ragged ``tokens`` column in the smallest unsigned
dtype that holds the vocabulary (``uint16`` up to 65,536 ids, else ``uint32``), its
bound stored as the dim ``V`` (``domain=Index("V")``); with loss_scope "assistant" a
``loss_mask`` column (bool, the same varying dim ``T``); with test documents a scalar
``test`` column (bool) saying which subset each document belongs to. Rows are the
corpus's documents in corpus order, an empty one included, so a subset's documents
(``test`` False or True) are in the order a ``.nndataset`` keeps them.

Storage: 2 (or 4) bytes a token, 1 more with a loss mask, plus the ragged column's
offsets (8 bytes a document) and the file's 64-byte-aligned sections.

The documents are read in the same chunks as for a ``.nndataset`` (``_build``); the
chunks' columns go to ``recfile.write_chunks``, which spools them beside the target
and commits the file atomically once the last chunk is checked, so memory stays at a
few chunks whatever the corpus size.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Generator, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import FormatError
from ..formats import recfile
from ..records import Index, Ragged, Record, field
from ._tokenize import DocEncoding, _in_order

__all__ = ["corpus_record", "is_flr", "token_dtype"]


def is_flr(path: str | os.PathLike[str]) -> bool:
    """Whether ``build`` writes ``path`` as a compact ``.flr`` (by its suffix)."""
    return os.fspath(path).lower().endswith(".flr")


def token_dtype(vocab_size: int) -> np.dtype:
    """The smallest unsigned dtype holding ids ``[0, vocab_size)``: uint16 or uint32."""
    if vocab_size <= 1 << 16:
        return np.dtype("<u2")
    if vocab_size <= 1 << 32:
        return np.dtype("<u4")
    raise ValueError(
        f"a compact corpus stores token ids as uint16 or uint32; a vocab_size of "
        f"{vocab_size:,} needs more (write a .nndataset instead)"
    )


def corpus_record(vocab_size: int, with_mask: bool, with_test: bool) -> type[Record]:
    """The record of a compact corpus of this vocabulary (see the module doc)."""
    dtype = token_dtype(vocab_size)

    class TextDoc(Record, dims={"T": None, "V": int(vocab_size)}):
        """One document of a tokenized corpus."""

        tokens = field("T", dtype, domain=Index("V"), doc="the document's token ids")
        if with_mask:
            loss_mask = field("T", "bool", doc="whether each token's loss counts")
        if with_test:
            test = field((), "bool", doc="whether the document is in the test subset")

    return TextDoc


@dataclass(frozen=True)
class _FlrChunk:
    columns: dict[str, Any]
    counts: np.ndarray  # int64 tokens per document
    is_test: np.ndarray  # bool per document
    loss_tokens: int
    nbytes: int


def _ragged(values: np.ndarray, counts: np.ndarray) -> Ragged:
    offsets = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
    return Ragged(values, offsets, counts.astype(np.int64)[:, None], (None,))


def _flr_chunk(
    enc: DocEncoding,
    docs: list[Any],
    first: int,
    nbytes: int,
    test: np.ndarray,
    src: tuple[Any, int],
    where: tuple[str, str, np.dtype, bool],
) -> _FlrChunk:
    """Tokenize and mask one chunk of documents (``first`` numbers the first; ``src``
    is their input and the number of the first there) into columns; an id the stored
    dtype cannot hold is a ``FormatError``."""
    corpus, out, dtype, with_test = where
    flow, counts, mask = enc.encode(src[0], docs, src[1])
    size = enc.tokenizer.vocab_size
    limit = min(size, 1 << (8 * dtype.itemsize))
    if len(flow) and int(flow.max()) >= limit:
        at = int(np.argmax(flow >= limit))
        doc = first + int(np.searchsorted(np.cumsum(counts), at, side="right"))
        raise FormatError(
            f"document {doc} (document {doc - first + src[1]} of {os.fspath(src[0].path)}): "
            f"token id {int(flow[at])} does not fit {out!r}'s tokens, {dtype.name} ids "
            f"below {limit:,} (the tokenizer's vocab_size is {size:,}); nothing was written",
            corpus,
        )
    cols: dict[str, Any] = {"tokens": _ragged(flow.astype(dtype), counts)}
    loss = len(flow)
    if mask is not None:
        cols["loss_mask"] = _ragged(np.asarray(mask, dtype=np.bool_), counts)
        loss = int(np.count_nonzero(mask))
    is_test = np.zeros(len(docs), dtype=bool)
    lo, hi = np.searchsorted(test, [first, first + len(docs)])
    is_test[test[lo:hi] - first] = True
    if with_test:
        cols["test"] = is_test
    return _FlrChunk(cols, counts, is_test, loss, nbytes)


def write_flr(
    tasks: Iterator[tuple],
    out_path: str | os.PathLike[str],
    enc: DocEncoding,
    scan: Any,
    test: np.ndarray,
    workers: int,
    bar: Any,
    source: str,
) -> tuple[np.ndarray, np.ndarray, int, int, int]:
    """Write the documents of ``tasks`` (``build``'s: each input checked against its
    scan once read) as a compact ``.flr``, atomically; returns the train and test token
    counts, the tokens, the tokens trained and the file's size."""
    vocab_size = int(enc.tokenizer.vocab_size)
    dtype = token_dtype(vocab_size)
    record = corpus_record(vocab_size, enc.masked, len(test) > 0)
    where = (source, os.fspath(out_path), dtype, len(test) > 0)
    counts: list[np.ndarray] = []
    tests: list[np.ndarray] = []
    totals = [0, 0, 0]  # tokens, loss tokens, bytes of text read

    def columns(chunks: Iterator[_FlrChunk]) -> Generator[dict[str, Any], None, None]:
        for c in chunks:
            yield c.columns
            counts.append(c.counts)
            tests.append(c.is_test)
            totals[0] += int(c.counts.sum())
            totals[1] += c.loss_tokens
            totals[2] += c.nbytes
            if bar is not None:
                bar.update(c.nbytes)
        # the corpus must be the one counted: checked before write_chunks commits
        n = sum(len(c) for c in counts)
        if (n, totals[2]) != (scan.docs, scan.bytes):
            raise FormatError(
                f"the corpus changed while it was read: {scan.docs} documents in "
                f"{scan.bytes} bytes when counted, {n} in {totals[2]} when tokenized",
                source,
            )

    with (
        contextlib.closing((*t, where) for t in tasks) as todo,
        contextlib.closing(_in_order(_flr_chunk, todo, workers)) as chunks,
    ):
        recfile.write_chunks(out_path, record, columns(chunks))
    all_counts = np.concatenate([np.zeros(0, np.int64), *counts])
    is_test = np.concatenate([np.zeros(0, bool), *tests])
    size = os.path.getsize(out_path)
    return all_counts[~is_test], all_counts[is_test], totals[0], totals[1], size
