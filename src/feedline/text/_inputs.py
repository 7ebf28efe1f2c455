"""Where a corpus's documents come from: text files, JSONL, Parquet, several at once.

An :class:`Input` names one file and how to read its documents; a plain path is an
``Input`` whose kind its suffix gives (``.jsonl``: JSONL, ``.parquet``/``.pq``:
Parquet, anything else: text):

===========  ================================================================
kind         a document is
===========  ================================================================
text         a line (``sep=None``: split on ``\\n``, space/tab/CR trimmed, empty
             lines dropped, as :func:`read_text_docs`), or what lies between two
             ``sep`` (newlines and CRs trimmed from both ends, indentation kept;
             dropped when only whitespace remains): multi-line documents, code
jsonl        a non-blank line, a JSON object whose ``text_field`` is a str; with
             ``chat=True``, whose ``messages_field`` is a list of messages
             (:mod:`._chat`)
parquet      a row's ``text_field`` column (string or binary), read by row group
===========  ================================================================

Every kind is read twice by ``build``, each time streamed (a block or a row group in
memory): :func:`scan_input` counts the documents and hashes the file, then
:func:`input_blocks` yields them in chunks (lists of ``bytes`` or ``str``; JSONL lines
still raw, parsed by :func:`decode_docs` on the tokenizing threads) and hashes the file
again, so a file changed in between is refused (:func:`changed`). Errors name the file
and the line (JSONL), the byte offset (text) or the row and column (Parquet).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Literal

from ..errors import DomainError, FormatError
from ._chat import ChatTemplate, checked_messages, render
from ._docs import CorpusScan, _check_utf8, _doc_blocks, _open, scan_text_docs
from ._parquet_docs import parquet_blocks, scan_parquet

__all__ = ["Input", "as_inputs", "changed", "decode_docs", "input_blocks", "scan_input"]

Kind = Literal["text", "jsonl", "parquet"]
_SUFFIXES: dict[str, Kind] = {".jsonl": "jsonl", ".parquet": "parquet", ".pq": "parquet"}
_TRIM_SPLIT = b"\r\n"


def _kind_of(path: str | os.PathLike[str]) -> Kind:
    return _SUFFIXES.get(os.path.splitext(os.fspath(path))[1].lower(), "text")


@dataclasses.dataclass(frozen=True)
class Input:
    """One file of documents and how to read it (see the module doc): ``sep`` for
    text, ``text_field`` for JSONL and Parquet, ``chat``/``messages_field`` for JSONL
    conversations; ``kind`` None takes it from the suffix."""

    path: str | os.PathLike[str]
    _: dataclasses.KW_ONLY
    sep: str | None = None
    text_field: str = "text"
    chat: bool = False
    messages_field: str = "messages"
    kind: Kind | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.path, (str, os.PathLike)):
            raise TypeError(f"Input.path must be a path, got {type(self.path).__name__}")
        kind = _kind_of(self.path) if self.kind is None else self.kind
        if kind not in ("text", "jsonl", "parquet"):
            raise DomainError(f"Input.kind must be 'text', 'jsonl' or 'parquet', got {kind!r}")
        object.__setattr__(self, "kind", kind)
        for name in ("text_field", "messages_field"):
            v = getattr(self, name)
            if not isinstance(v, str) or not v:
                raise DomainError(f"Input.{name} must be a non-empty str, got {v!r}")
        if self.sep is not None:
            if not isinstance(self.sep, str) or not self.sep:
                raise DomainError(f"sep must be None or a non-empty str, got {self.sep!r}")
            if kind != "text":
                raise DomainError(
                    f"sep={self.sep!r} splits text files; {os.fspath(self.path)} is {kind}"
                )
        if not isinstance(self.chat, bool):
            raise TypeError(f"chat must be a bool, got {self.chat!r}")
        if self.chat and kind != "jsonl":
            raise DomainError(
                f"chat=True reads JSONL conversations; {os.fspath(self.path)} is {kind} "
                "(name it .jsonl or pass Input(..., kind='jsonl'))"
            )


def as_inputs(inputs: Any, **defaults: Any) -> tuple[Input, ...]:
    """``inputs`` (a path, an :class:`Input`, or a sequence of them) as ``Input``s, a
    plain path taking ``defaults`` (``sep``, ``text_field``, ``chat``, ...)."""
    items = [inputs] if isinstance(inputs, (str, os.PathLike, Input)) else inputs
    if not isinstance(items, Sequence) or not items:
        raise TypeError(
            f"inputs must be a path, an fl.text.Input or a non-empty list of them, got {inputs!r}"
        )
    out = []
    for i, x in enumerate(items):
        if isinstance(x, Input):
            out.append(x)
        elif isinstance(x, (str, os.PathLike)):
            kind = _kind_of(x)
            kw = {
                k: v
                for k, v in defaults.items()
                if not (k == "sep" and kind != "text") and not (k == "chat" and kind != "jsonl")
            }
            out.append(Input(x, **kw))
        else:
            raise TypeError(f"inputs[{i}]: expected a path or an fl.text.Input, got {x!r}")
    # an option for plain paths that no plain path takes is a mistake, not a no-op
    plain = [_kind_of(x) for x in items if not isinstance(x, Input)]
    for name, kind, suffix in (("sep", "text", "a text file"), ("chat", "jsonl", "a .jsonl")):
        if defaults.get(name) not in (None, False) and plain and kind not in plain:
            raise DomainError(
                f"{name}={defaults[name]!r} applies to {suffix} and no input is one "
                f"(the plain paths are {', '.join(sorted(set(plain)))})"
            )
    return tuple(out)


def scan_input(inp: Input, chunk_bytes: int, on_block: Any, utf8: bool) -> CorpusScan:
    """Count ``inp``'s documents and hash its file, in one streamed pass; with ``utf8``
    (or for JSONL, always) text that is not UTF-8 is a ``FormatError`` at its offset."""
    if inp.kind == "parquet":
        return scan_parquet(inp.path, inp.text_field, chunk_bytes, on_block)
    if inp.kind == "jsonl" or inp.sep is None:
        return scan_text_docs(inp.path, chunk_bytes, on_block, utf8=utf8 or inp.kind == "jsonl")
    digest = hashlib.sha256()
    decoder = _utf8_checker(inp.path) if utf8 else None

    def on_raw(block: bytes, offset: int) -> None:
        if decoder is not None:
            decoder(block, offset)
        if on_block is not None and block:
            on_block(len(block))

    docs = size = 0
    for chunk, nbytes in _split_blocks(inp.path, inp.sep, chunk_bytes, digest, on_raw):
        docs += len(chunk)
        size += nbytes
    return CorpusScan(docs, size, digest.hexdigest())


def _utf8_checker(path: str | os.PathLike[str]) -> Callable[[bytes, int], None]:
    import codecs

    decoder = codecs.getincrementaldecoder("utf-8")()
    return lambda block, offset: _check_utf8(decoder, block, offset, path)


def _split_blocks(
    path: str | os.PathLike[str],
    sep: str,
    chunk_bytes: int,
    digest: Any = None,
    on_raw: Callable[[bytes, int], None] | None = None,
) -> Iterator[tuple[list[bytes], int]]:
    """The documents between ``sep``s, in chunks of about ``chunk_bytes``, each with
    the bytes of the file it covers. ``bytes.split`` cuts leftmost first, so splitting
    a prefix of the file and carrying its last piece on cuts where the whole file would
    be cut. ``on_raw(block, offset)`` sees each block read (an empty one at the end)."""
    if isinstance(chunk_bytes, bool) or not isinstance(chunk_bytes, int) or chunk_bytes < 1:
        raise DomainError(f"chunk_bytes must be a positive int, got {chunk_bytes!r}")
    cut = sep.encode("utf-8")
    offset = 0
    with _open(path) as f:
        carry = b""
        while True:
            block = f.read(chunk_bytes)
            if on_raw is not None:
                on_raw(block, offset)
            if not block:
                break
            offset += len(block)
            if digest is not None:
                digest.update(block)
            data = carry + block if carry else block
            pieces = data.split(cut)
            carry = pieces.pop()
            if pieces:
                yield _kept(pieces), len(data) - len(carry)
        if carry:
            yield _kept([carry]), len(carry)


def _kept(pieces: list[bytes]) -> list[bytes]:
    return [d for d in (p.strip(_TRIM_SPLIT) for p in pieces) if d.strip()]


def input_blocks(inp: Input, chunk_bytes: int, digest: Any) -> Iterator[tuple[list[Any], int]]:
    """``inp``'s documents in chunks (see the module doc), each with the bytes of the
    file it covers, the file's bytes fed to ``digest`` as they are read."""
    if inp.kind == "parquet":
        return parquet_blocks(inp.path, inp.text_field, chunk_bytes, digest)
    if inp.kind == "text" and inp.sep is not None:
        return _split_blocks(inp.path, inp.sep, chunk_bytes, digest)
    return _doc_blocks(inp.path, chunk_bytes, digest)


def changed(inp: Input, scan: CorpusScan, docs: int, nbytes: int, sha256: str) -> None:
    """Refuse a file whose second read differs from its scan (count, size or hash)."""
    if (docs, nbytes) != (scan.docs, scan.bytes):
        raise FormatError(
            f"the corpus changed while it was read: {scan.docs} documents in "
            f"{scan.bytes} bytes when counted, {docs} in {nbytes} when tokenized",
            inp.path,
        )
    if sha256 != scan.sha256:
        raise FormatError(
            f"the corpus changed while it was read: SHA-256 {scan.sha256[:16]}... when "
            f"counted, {sha256[:16]}... when tokenized (same size and document count)",
            inp.path,
        )


def line_of(path: str | os.PathLike[str], doc: int) -> int:
    """The 1-based line number of the ``doc``-th (0-based) non-blank line of ``path``
    (for error messages: one pass over the file)."""
    seen = -1
    with _open(path) as f:
        for number, line in enumerate(f, 1):
            if line.strip(b" \t\r\n"):
                seen += 1
                if seen == doc:
                    return number
    return number + 1 if seen >= 0 else 1


def decode_docs(
    inp: Input, docs: list[Any], first: int, template: Any, roles: tuple[str, ...] | None
) -> list[Any]:
    """The documents of a chunk as the tokenizer takes them: text as it is, a JSONL
    line's text field (a ``str``), or with ``inp.chat`` a conversation's pieces
    (``template(messages)``); ``first`` numbers the chunk's first document in ``inp``.
    A bad line is a ``FormatError`` naming the file and the line."""
    if inp.kind != "jsonl":
        return docs
    out: list[Any] = []
    field = inp.messages_field if inp.chat else inp.text_field
    trusted = isinstance(template, ChatTemplate)
    for i, raw in enumerate(docs):
        try:
            value = json.loads(raw)
        except ValueError as e:
            raise _line_error(
                inp, first + i, f"expected a JSON object, found invalid JSON ({e})"
            ) from e
        if not inp.chat:
            text = value.get(field) if isinstance(value, dict) else None
            if not isinstance(text, str):
                if not isinstance(value, dict):
                    found = f"a JSON {type(value).__name__}"
                elif field not in value:
                    found = f"no such field (its keys are {sorted(value)})"
                else:
                    found = f"a {type(text).__name__}"
                raise _line_error(
                    inp, first + i, f"expected an object with a str {field!r}, found {found}"
                )
            if b"\\u" in raw:  # an escaped lone surrogate is no UTF-8 text
                _encodable(inp, first + i, text)
            out.append(text)
            continue
        messages, why = checked_messages(value, field, roles)
        if messages is None:
            raise _line_error(inp, first + i, why)
        try:  # the default template's pieces need no checking
            pieces = template(messages) if trusted else render(template, messages)
        except (KeyError, ValueError, TypeError) as e:
            raise _line_error(inp, first + i, f"the chat template failed: {e!r}") from e
        if b"\\u" in raw:
            for text, _ in pieces:
                _encodable(inp, first + i, text)
        out.append(pieces)
    return out


def _encodable(inp: Input, doc: int, text: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise _line_error(
            inp, doc, f"expected text, found the lone surrogate {text[e.start]!r} (not UTF-8)"
        ) from None


def _line_error(inp: Input, doc: int, message: str) -> FormatError:
    return FormatError(f"line {line_of(inp.path, doc)}: {message}", inp.path)
