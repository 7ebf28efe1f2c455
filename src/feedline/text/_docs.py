"""Documents from a text file, and assistant spans: neuralnet.cpp's two text helpers.

A corpus is a text file with one document a line. Reading splits on ``\\n`` only,
trims space, tab and CR from both ends of each line and drops the lines that are then
empty. The work is done on bytes, so a multi-byte UTF-8 character is never cut:

>>> import os, tempfile
>>> p = os.path.join(tempfile.mkdtemp(), "c.txt")
>>> with open(p, "wb") as f:
...     _ = f.write(b"  first doc \\r\\n\\n\\t\\nsecond \\xc3\\xa9\\n")
>>> read_text_docs(p)
['first doc', 'second é']
>>> mark_assistant_span([5, 256, 7, 257, 8], 256, 257).tolist()
[False, True, True, True, False]

:func:`iter_doc_chunks` streams the same documents as lists of ``bytes`` (about
``chunk_bytes`` of text each), so a file larger than memory is read in bounded
memory; :func:`scan_text_docs` counts them and hashes the file in one pass.
"""

from __future__ import annotations

import codecs
import dataclasses
import hashlib
import os
from collections.abc import Iterator
from typing import Any

import numpy as np

from ..errors import FormatError, MissingFileError

__all__ = [
    "CorpusScan",
    "iter_doc_chunks",
    "mark_assistant_span",
    "read_text_docs",
    "scan_text_docs",
]

_TRIM = b" \t\r"
_NL = ord("\n")
# Text read per block while streaming: big enough that the per-block costs vanish,
# small enough that a few blocks in flight stay far below memory.
CHUNK_BYTES = 1 << 20


def _open(path: str | os.PathLike[str]) -> Any:
    try:
        return open(path, "rb")
    except FileNotFoundError as e:
        raise MissingFileError(
            f"{os.fspath(path)}: no such corpus file (expected a text "
            "file with one document a line)"
        ) from e
    except IsADirectoryError as e:
        raise IsADirectoryError(
            f"{os.fspath(path)}: expected a text file with one document a line, found a directory"
        ) from e


def iter_doc_chunks(
    path: str | os.PathLike[str], chunk_bytes: int = CHUNK_BYTES
) -> Iterator[list[bytes]]:
    """The documents of ``path`` as lists of trimmed, non-empty ``bytes``, in file order.

    Reads ``chunk_bytes`` at a time and yields the whole lines of each block (a line
    longer than a block is carried into the next), so memory stays at about two blocks
    plus the longest line. Lists may be empty. Cost: one pass over the file; the split
    and the trim run in C, one list entry per line.
    """
    for docs, _ in _doc_blocks(path, chunk_bytes):
        yield docs


def _doc_blocks(
    path: str | os.PathLike[str], chunk_bytes: int, digest: Any = None
) -> Iterator[tuple[list[bytes], int]]:
    """:func:`iter_doc_chunks`' lists, each with the bytes of the file it covers; each
    block read is also fed to ``digest.update`` (a ``hashlib`` hash) when given."""
    if isinstance(chunk_bytes, bool) or not isinstance(chunk_bytes, int) or chunk_bytes < 1:
        raise ValueError(f"chunk_bytes must be a positive int, got {chunk_bytes!r}")
    with _open(path) as f:
        carry = b""
        while True:
            block = f.read(chunk_bytes)
            if not block:
                break
            if digest is not None:
                digest.update(block)
            data = carry + block if carry else block
            cut = data.rfind(b"\n")
            if cut < 0:
                carry = data
                continue
            carry = data[cut + 1 :]
            lines = data[:cut].split(b"\n")
            yield [d for d in (line.strip(_TRIM) for line in lines) if d], cut + 1
        if carry:
            last = carry.strip(_TRIM)
            yield ([last] if last else []), len(carry)


# Python's error handlers that only encode: reading with them fails at the first bad byte
_ENCODE_ONLY = ("xmlcharrefreplace", "namereplace")


def _check_errors(errors: Any) -> None:
    if not isinstance(errors, str):
        raise TypeError(
            f"read_text_docs: errors is the name of an error handler (a str, as "
            f"open() takes), got {type(errors).__name__}"
        )
    try:
        codecs.lookup_error(errors)
    except LookupError:
        raise ValueError(
            f"read_text_docs: errors={errors!r} is not an error handler; "
            "expected one open() takes: 'strict', 'replace', 'ignore', "
            "'surrogateescape', 'backslashreplace', or one registered with "
            "codecs.register_error"
        ) from None
    if errors in _ENCODE_ONLY:
        raise ValueError(
            f"read_text_docs: errors={errors!r} is a handler for writing text; "
            "reading takes 'strict', 'replace', 'ignore', 'surrogateescape' or "
            "'backslashreplace'"
        )


def read_text_docs(path: str | os.PathLike[str], errors: str = "strict") -> list[str]:
    """The documents of the text file ``path``: split on ``\\n``, trim space/``\\t``/
    ``\\r`` from both ends, drop empty lines (neuralnet.cpp's ``read_text_docs``).

    The file is read whole (use :func:`iter_doc_chunks` to stream). ``errors`` says what
    to do with bytes that are not UTF-8, as ``open()``'s does:

    ======================  ==========================================================
    ``errors``              bytes that are not UTF-8
    ======================  ==========================================================
    ``"strict"`` (default)  a :class:`~feedline.errors.FormatError` naming the file and
                            the byte offset
    ``"replace"``           each bad sequence becomes U+FFFD
    ``"ignore"``            dropped
    ``"surrogateescape"``   lone surrogates that ``encode("utf-8", "surrogateescape")``
                            turns back into the very bytes
    ``"backslashreplace"``  ``\\xNN`` escapes
    ======================  ==========================================================

    Any handler registered with ``codecs.register_error`` works too; a name that is not
    a handler, or one that only encodes, is a ``ValueError``. Documents are found on the
    bytes, as neuralnet.cpp does, and then decoded, so there is one document per line
    holding a byte other than space, tab and CR whatever the handler (with "ignore", a
    line of bad bytes only is the document ``""``). A missing file is a
    ``FileNotFoundError``.
    """
    _check_errors(errors)
    with _open(path) as f:
        data = f.read()
    if errors != "strict":
        return [
            d.decode("utf-8", errors)
            for d in (line.strip(_TRIM) for line in data.split(b"\n"))
            if d
        ]
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise FormatError(
            f"expected UTF-8 text, found the byte 0x{data[e.start]:02x} (pass "
            "errors='replace' or 'surrogateescape' to read it anyway)",
            path,
            e.start,
        ) from e
    return [d for d in (line.strip(" \t\r") for line in text.split("\n")) if d]


@dataclasses.dataclass(frozen=True)
class CorpusScan:
    """One pass over a corpus file: its document count, size in bytes and SHA-256."""

    docs: int
    bytes: int
    sha256: str


def scan_text_docs(
    path: str | os.PathLike[str],
    chunk_bytes: int = CHUNK_BYTES,
    on_block: Any = None,
    utf8: bool = False,
) -> CorpusScan:
    """Count the documents :func:`iter_doc_chunks` yields and hash the file, in one pass.

    A line is a document when it holds a byte other than space, tab and CR; counting
    deletes those bytes and counts the line starts that remain (vectorised, no list of
    lines). ``on_block(n)`` is called with the bytes of each block read. With ``utf8``,
    text that is not valid UTF-8 is a ``FormatError`` naming the byte offset. Cost: one
    pass over the file, memory one block.
    """
    digest = hashlib.sha256()
    docs = size = 0
    prev_newline = True  # the start of the file starts a line
    decoder = codecs.getincrementaldecoder("utf-8")() if utf8 else None
    with _open(path) as f:
        while True:
            block = f.read(chunk_bytes)
            if decoder is not None:
                _check_utf8(decoder, block, size, path)
            if not block:
                break
            digest.update(block)
            size += len(block)
            kept = np.frombuffer(block.translate(None, _TRIM), dtype=np.uint8)
            if len(kept):
                newline = kept == _NL
                starts = ~newline
                starts[1:] &= newline[:-1]
                starts[0] &= prev_newline
                docs += int(np.count_nonzero(starts))
                prev_newline = bool(newline[-1])
            if on_block is not None:
                on_block(len(block))
    return CorpusScan(docs, size, digest.hexdigest())


def _check_utf8(decoder: Any, block: bytes, offset: int, path: str | os.PathLike[str]) -> None:
    """Feed ``block`` (at file offset ``offset``; empty at the end) to the incremental
    UTF-8 ``decoder``; invalid text is a FormatError naming its byte offset."""
    pending = decoder.getstate()[0]  # the start of a character cut by the last block
    try:
        decoder.decode(block, final=not block)
    except UnicodeDecodeError as e:  # e.start counts from the pending bytes
        data = pending + block
        raise FormatError(
            f"expected UTF-8 text, found the byte 0x{data[e.start]:02x}",
            path,
            offset - len(pending) + e.start,
        ) from None


def mark_assistant_span(
    tokens: Any, begin_id: int, end_id: int, *, counts: Any = None
) -> np.ndarray:
    """Which tokens are inside an assistant span (neuralnet.cpp's ``mark_assistant_span``).

    Walking the tokens: a token equal to ``begin_id`` enters the span, each token's
    mask is "inside the span", and a token equal to ``end_id`` leaves it after being
    marked. So both markers are marked, an ``end_id`` with no ``begin_id`` before it is
    not, a missing ``end_id`` runs to the end of the document, and ``begin_id ==
    end_id`` marks only that token.

    ``counts`` (tokens per document) makes ``tokens`` the concatenation of several
    documents: the scan then restarts at each one, as one call per document would.
    Cost: two comparisons over the tokens, then work per marker only (vectorised; no
    Python loop), and one pass to fill the spans.

    >>> mark_assistant_span([9, 2, 1, 2, 1, 2], 1, 2, counts=[3, 3]).tolist()
    [False, False, True, False, True, True]
    """
    tok = np.asarray(tokens)
    if tok.ndim != 1 or (tok.size and tok.dtype.kind not in "iu"):
        raise TypeError(
            f"mark_assistant_span: tokens must be a 1-D array of integer ids, "
            f"got shape {tok.shape} and dtype {tok.dtype}"
        )
    n = len(tok)
    if counts is None:
        ends = np.array([n], dtype=np.int64)
    else:
        c = np.asarray(counts, dtype=np.int64)
        if c.ndim != 1 or (c < 0).any() or int(c.sum()) != n:
            raise ValueError(
                f"mark_assistant_span: counts must be per-document token counts "
                f"summing to the {n} tokens, got {int(c.sum())} over "
                f"{len(c)} documents"
            )
        ends = np.cumsum(c)
    is_begin = tok == begin_id
    at = np.flatnonzero(is_begin | (tok == end_id))  # the markers, in order
    mask = np.zeros(n, dtype=bool)
    if not len(at):
        return mask
    begins, stops_scan = is_begin[at], tok[at] == end_id
    doc = np.searchsorted(ends, at, side="right")
    # A begin that is not also an end opens a span; it runs to the next marker of its
    # document (that marker included when it is an end, which leaves after being
    # marked; a begin just carries on) or to the end of the document.
    opens = begins & ~stops_scan
    same_doc = np.append(doc[1:] == doc[:-1], False)
    next_at = np.append(at[1:], n) + np.append(stops_scan[1:], False)
    stop = np.where(same_doc, next_at, ends[np.minimum(doc, len(ends) - 1)])
    start, stop = at[opens], stop[opens]
    lens = np.empty(2 * len(start) + 1, dtype=np.int64)  # gap, span, gap, span, ..., tail
    lens[0:-1:2] = start - np.append(0, stop[:-1])
    lens[1::2] = stop - start
    lens[-1] = n - (stop[-1] if len(stop) else 0)
    mask = np.repeat(np.resize(np.array([False, True]), len(lens)), lens)
    mask[at[begins]] = True  # a begin that is also an end marks only itself
    return mask
