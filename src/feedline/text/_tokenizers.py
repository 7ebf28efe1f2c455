"""Tokenizers for building corpora: bytes (needs nothing) and HuggingFace ``tokenizers``.

Both implement :class:`Tokenizer`: ``encode_batch`` (documents in, one ``uint64`` id
array each out), ``encode_flow`` (the same ids concatenated, with per-document
counts: what :func:`~feedline.text.build` uses), ``decode``, ``vocab_size``,
``special_id(name)`` and ``vocab_record()``, the kvrec record stored as the
``.nndataset``'s ``companion.vocab`` and in ``.nnvocab`` files, from which
:func:`tokenizer_from_vocab` rebuilds the tokenizer. The record:

=============  =========  =====================================================
key            type       value
=============  =========  =====================================================
``tokenizer``  Str        ``"byte"`` or ``"hf"`` (a HuggingFace tokenizers JSON)
``size``       UInt       the number of ids (ids are ``0 .. size - 1``)
``specials``   Record     special token text -> id (UInt), in id order
``hf_json``    Str        ``"hf"`` only: the tokenizer's own ``tokenizer.json``
=============  =========  =====================================================

>>> tok = ByteTokenizer()
>>> tok.encode_batch(["hi<|assistant|>!"])[0].tolist()
[104, 105, 256, 33]
>>> tokenizer_from_vocab(tok.vocab_record()).decode([104, 105, 257])
'hi<|end_of_assistant|>'
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol, cast, runtime_checkable

import numpy as np

from .._base.files import atomic_write
from ..errors import FormatError, MissingFileError
from ..formats import nndataset
from ._chat import ASSISTANT, CHAT_SPECIALS, END_OF_ASSISTANT

__all__ = [
    "BPETokenizer",
    "ByteTokenizer",
    "Tokenizer",
    "load_tokenizer",
    "tokenizer_from_vocab",
    "write_vocab",
]


DEFAULT_SPECIALS = (ASSISTANT, END_OF_ASSISTANT)
_EXTRA = "pip install 'feedline[text]'"


@runtime_checkable
class Tokenizer(Protocol):
    """What both tokenizers implement. :func:`~feedline.text.build` needs only
    ``vocab_size``, ``special_id``, ``encode_batch`` and ``vocab_record``; it uses
    ``encode_flow`` when there is one (it saves splitting the ids per document)."""

    @property
    def vocab_size(self) -> int: ...

    def special_id(self, name: str) -> int: ...

    def encode_batch(self, docs: Sequence[str | bytes]) -> list[np.ndarray]: ...

    def encode_flow(self, docs: Sequence[str | bytes]) -> tuple[np.ndarray, np.ndarray]: ...

    def decode(self, ids: Any) -> str: ...

    def vocab_record(self) -> dict[str, Any]: ...


def _split(flow: np.ndarray, counts: np.ndarray) -> list[np.ndarray]:
    return np.split(flow, np.cumsum(counts)[:-1]) if len(counts) else []


def _all_bytes(docs: Sequence[str | bytes]) -> Sequence[bytes]:
    """``docs`` with every ``str`` encoded as UTF-8 (no copy when all are bytes)."""
    if all(type(d) is bytes for d in docs):
        return cast("Sequence[bytes]", docs)
    out = []
    for i, d in enumerate(docs):
        if not isinstance(d, (str, bytes)):
            raise TypeError(f"document {i}: expected str or bytes, got {type(d).__name__}")
        out.append(d.encode("utf-8") if isinstance(d, str) else d)
    return out


def _specials_map(specials: Iterable[str], first: int) -> dict[str, int]:
    if isinstance(specials, str):
        raise TypeError(f"specials must be a sequence of str, got the str {specials!r}")
    out: dict[str, int] = {}
    for s in specials:
        if not isinstance(s, str) or not s:
            raise ValueError(f"a special token is a non-empty str, got {s!r}")
        if s in out:
            raise ValueError(f"special token {s!r} is given twice")
        out[s] = first + len(out)
    return out


def _missing_special(kind: str, name: str, specials: Mapping[str, int]) -> ValueError:
    return ValueError(
        f"the {kind} tokenizer has no special token {name!r}; its specials "
        f"are {sorted(specials, key=specials.__getitem__)}"
    )


class _Specials:
    """The special tokens of a tokenizer (``_specials``: text -> id, in id order)."""

    _kind = "the"  # named in the error for a missing special
    _specials: dict[str, int]

    @property
    def specials(self) -> dict[str, int]:
        """Special token text -> id, in id order."""
        return dict(self._specials)

    def special_id(self, name: str) -> int:
        """The id of the special token ``name`` (a ``ValueError`` if there is none)."""
        if name not in self._specials:
            raise _missing_special(self._kind, name, self._specials)
        return self._specials[name]


class ByteTokenizer(_Specials):
    """Ids 0-255 are the bytes of the UTF-8 text; ``specials`` take ids 256, 257, ...

    Encoding recognises the special strings in the text (leftmost, longest first) and
    gives each its id; every other byte is its own id. Vectorised: a batch is joined,
    viewed with ``np.frombuffer`` and widened once; only the special matches are
    visited from Python. A special may not contain a newline (documents are lines).
    ``bytes`` documents are taken as they are, so any byte sequence round-trips
    (``keeps_bytes``: ``build`` gives it a corpus without checking that it is UTF-8).
    Cost: a few passes over a batch's bytes, plus one Python step per special found.
    """

    keeps_bytes = True
    _kind = "byte"

    def __init__(self, specials: Sequence[str] = DEFAULT_SPECIALS) -> None:
        self._specials = _specials_map(specials, 256)
        for s in self._specials:
            if "\n" in s:
                raise ValueError(f"special token {s!r}: a special may not contain a newline")
        self._by_id = {i: s.encode("utf-8") for s, i in self._specials.items()}
        self._pattern = None
        if self._specials:
            longest_first = sorted(self._specials, key=lambda s: -len(s.encode("utf-8")))
            self._pattern = re.compile(
                b"|".join(re.escape(s.encode("utf-8")) for s in longest_first)
            )
        self._ids = {s.encode("utf-8"): i for s, i in self._specials.items()}

    @property
    def vocab_size(self) -> int:
        """256 plus the number of specials."""
        return 256 + len(self._specials)

    def encode_flow(self, docs: Sequence[str | bytes]) -> tuple[np.ndarray, np.ndarray]:
        """All documents' ids concatenated (``uint64``) and each one's count (``int64``)."""
        raw = _all_bytes(docs)
        lens = np.fromiter(map(len, raw), dtype=np.int64, count=len(raw))
        text = b"".join(raw)
        if self._pattern is None:
            return np.frombuffer(text, np.uint8).astype(np.uint64), lens
        # Specials are found with a newline between documents: a special has none, so
        # no match spans two documents.
        found = [
            (m.start(), m.end(), self._ids[m.group()])
            for m in self._pattern.finditer(b"\n".join(raw))
        ]
        if not found:
            return np.frombuffer(text, np.uint8).astype(np.uint64), lens
        at, end, ids = (np.array(col, dtype=np.int64) for col in zip(*found))
        doc = np.searchsorted(np.cumsum(lens + 1), at, side="right")
        at, end = at - doc, end - doc  # offsets in ``text``
        # keep the text between matches and each match's first byte (it becomes the id)
        u8 = np.frombuffer(text, np.uint8)
        keep_from = np.concatenate(([0], end)).tolist()
        keep_to = np.append(at + 1, len(u8)).tolist()
        flow = np.concatenate([u8[a:b] for a, b in zip(keep_from, keep_to)]).astype(np.uint64)
        removed = end - at - 1
        flow[at - (np.cumsum(removed) - removed)] = ids.astype(np.uint64)
        counts = lens - np.bincount(doc, weights=removed, minlength=len(lens)).astype(np.int64)
        return flow, counts

    def encode_batch(self, docs: Sequence[str | bytes]) -> list[np.ndarray]:
        """One ``uint64`` id array per document."""
        return _split(*self.encode_flow(docs))

    def decode(self, ids: Any) -> str:
        """The text of ``ids`` (invalid UTF-8 becomes U+FFFD); an unknown id is a
        ``ValueError``."""
        arr = np.asarray(ids).ravel()
        if arr.size and arr.dtype.kind not in "iu":
            raise TypeError(f"ids must be integers, got dtype {arr.dtype}")
        bad = np.flatnonzero((arr < 0) | (arr >= self.vocab_size))
        if len(bad):
            raise ValueError(
                f"id {int(arr[bad[0]])} at position {int(bad[0])} is outside "
                f"the byte tokenizer's {self.vocab_size} ids"
            )
        special = np.flatnonzero(arr >= 256)
        arr = arr.astype(np.int64)
        pieces, pos = [], 0
        for j in special.tolist():
            pieces += [arr[pos:j].astype(np.uint8).tobytes(), self._by_id[int(arr[j])]]
            pos = j + 1
        pieces.append(arr[pos:].astype(np.uint8).tobytes())
        return b"".join(pieces).decode("utf-8", errors="replace")

    def vocab_record(self) -> dict[str, Any]:
        """``{"tokenizer": "byte", "size": ..., "specials": {text: id}}``."""
        return {"tokenizer": "byte", "size": self.vocab_size, "specials": dict(self._specials)}

    def __repr__(self) -> str:
        return f"ByteTokenizer(specials={tuple(self._specials)!r})"


def _hf() -> Any:
    try:
        import tokenizers
    except ImportError as e:
        raise ImportError(f"BPETokenizer needs HuggingFace tokenizers: {_EXTRA}") from e
    return tokenizers


class BPETokenizer(_Specials):
    """A HuggingFace ``tokenizers`` tokenizer (a ``tokenizer.json``), trained here as a
    byte-level BPE or loaded from a file (any model the library reads).

    Documents are encoded without the tokenizer's post-processing (no BOS/EOS added),
    as neuralnet.cpp concatenates documents; special strings in the text still become
    their ids. The specials are the tokenizer's added tokens marked special. Encoding
    uses the library's batch encoder, which runs on all cores and releases the GIL.
    Needs the ``text`` extra (``pip install 'feedline[text]'``).
    """

    _kind = "BPE"

    def __init__(self, tokenizer: Any) -> None:
        self._tok = tokenizer
        self._specials = {
            t.content: int(i)
            for i, t in sorted(tokenizer.get_added_tokens_decoder().items())
            if t.special
        }
        self._encode = getattr(tokenizer, "encode_batch_fast", tokenizer.encode_batch)

    #: the default chat template's specials: ``train(..., specials=CHAT_SPECIALS)``
    CHAT_SPECIALS = CHAT_SPECIALS

    @classmethod
    def train(
        cls,
        files: Any,
        vocab_size: int,
        specials: Sequence[str] = (),
        *,
        min_frequency: int = 2,
        show_progress: bool = False,
    ) -> BPETokenizer:
        """Train a byte-level BPE of ``vocab_size`` ids on the documents of ``files``
        (a path, an :class:`~feedline.text.Input` or a list of them, of any kind
        ``build`` reads: text files, JSONL, Parquet; a chat's message contents),
        streamed. Invalid UTF-8 in a text file becomes U+FFFD.

        ``specials`` are none unless asked for (before they were the assistant pair):
        ``specials=BPETokenizer.CHAT_SPECIALS`` gives those of the default chat
        template (and ``loss_scope="assistant"``'s markers); add an end-of-text token
        (``"<|endoftext|>"``) to pass it as ``build``'s ``eos``. The specials take the
        first ids (0, 1, ...), then the 256 byte symbols, then the merges. Cost: the
        library's trainer, over every document once.
        """
        from ._docs import CHUNK_BYTES
        from ._inputs import as_inputs, decode_docs, input_blocks

        hf = _hf()
        if isinstance(vocab_size, bool) or not isinstance(vocab_size, int):
            raise TypeError(f"vocab_size must be an int, got {type(vocab_size).__name__}")
        specials_map = _specials_map(specials, 0)
        if vocab_size < 256 + len(specials_map):
            raise ValueError(
                f"vocab_size must hold the 256 byte symbols and "
                f"{len(specials_map)} specials, got {vocab_size}"
            )
        if vocab_size > 2**32:  # the library's ids are u32
            raise ValueError(f"vocab_size must be at most 2**32, got {vocab_size}")
        inputs = as_inputs(files)

        def contents(messages: list[dict[str, Any]]) -> list[tuple[str, bool]]:
            return [(m["content"], False) for m in messages]

        def docs() -> Iterable[list[str]]:
            for inp in inputs:
                first = 0  # numbers the lines an error names
                for chunk, _ in input_blocks(inp, CHUNK_BYTES, None):
                    texts = decode_docs(inp, chunk, first, contents, None)
                    first += len(chunk)
                    if inp.chat:
                        texts = [t for pieces in texts for t, _ in pieces]
                    yield [
                        d.decode("utf-8", errors="replace") if isinstance(d, bytes) else d
                        for d in texts
                    ]

        tok = hf.Tokenizer(hf.models.BPE())
        tok.pre_tokenizer = hf.pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = hf.decoders.ByteLevel()
        trainer = hf.trainers.BpeTrainer(
            vocab_size=vocab_size,
            min_frequency=min_frequency,
            special_tokens=list(specials_map),
            show_progress=show_progress,
            initial_alphabet=hf.pre_tokenizers.ByteLevel.alphabet(),
        )
        tok.train_from_iterator(docs(), trainer)
        return cls(tok)

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> BPETokenizer:
        """Load a ``tokenizer.json`` (a clear error when it is missing or not one)."""
        hf = _hf()
        path = os.fspath(path)
        if not os.path.isfile(path):
            raise MissingFileError(
                f"{path}: no such tokenizer file (expected a HuggingFace tokenizer.json)"
            )
        try:
            return cls(hf.Tokenizer.from_file(path))
        except Exception as e:  # the library raises a bare Exception for bad JSON
            raise FormatError(
                f"expected a HuggingFace tokenizer.json, the library says: {e}", path
            ) from e

    @classmethod
    def from_str(cls, json: str) -> BPETokenizer:
        """Load a tokenizer from the text of a ``tokenizer.json``."""
        return cls(_hf().Tokenizer.from_str(json))

    @property
    def hf_tokenizer(self) -> Any:
        """The wrapped ``tokenizers.Tokenizer``."""
        return self._tok

    @property
    def vocab_size(self) -> int:
        """The number of ids, added tokens included."""
        return int(self._tok.get_vocab_size(with_added_tokens=True))

    def encode_batch(self, docs: Sequence[str | bytes]) -> list[np.ndarray]:
        """One ``uint64`` id array per document (``bytes`` are decoded as UTF-8, an
        invalid byte becoming U+FFFD)."""
        texts = [d.decode("utf-8", errors="replace") if isinstance(d, bytes) else d for d in docs]
        for i, t in enumerate(texts):
            if not isinstance(t, str):
                raise TypeError(f"document {i}: expected str or bytes, got {type(t).__name__}")
        return [
            np.array(e.ids, dtype=np.uint64) for e in self._encode(texts, add_special_tokens=False)
        ]

    def encode_flow(self, docs: Sequence[str | bytes]) -> tuple[np.ndarray, np.ndarray]:
        """All documents' ids concatenated (``uint64``) and each one's count (``int64``)."""
        arrays = self.encode_batch(docs)
        counts = np.fromiter(map(len, arrays), dtype=np.int64, count=len(arrays))
        flow = np.concatenate(arrays) if arrays else np.zeros(0, np.uint64)
        return flow, counts

    def decode(self, ids: Any) -> str:
        """The text of ``ids``, special tokens included."""
        return self._tok.decode(
            [int(i) for i in np.asarray(ids).ravel()], skip_special_tokens=False
        )

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the ``tokenizer.json``, atomically."""
        with atomic_write(path) as f:
            f.write(self._tok.to_str().encode("utf-8"))

    def vocab_record(self) -> dict[str, Any]:
        """``{"tokenizer": "hf", "size": ..., "specials": {...}, "hf_json": ...}``."""
        return {
            "tokenizer": "hf",
            "size": self.vocab_size,
            "specials": dict(self._specials),
            "hf_json": self._tok.to_str(),
        }

    def __repr__(self) -> str:
        return f"BPETokenizer(vocab_size={self.vocab_size}, specials={tuple(self._specials)!r})"


def tokenizer_from_vocab(record: Mapping[str, Any]) -> ByteTokenizer | BPETokenizer:
    """Rebuild the tokenizer a vocab record describes (``ds.vocab`` of a ``.nndataset``
    or :func:`~feedline.nndataset.parse_nnvocab` of a ``.nnvocab``).

    A record feedline did not write is a ``ValueError`` saying what was found.
    """
    kind = record.get("tokenizer") if isinstance(record, Mapping) else None
    specials = record.get("specials") if isinstance(record, Mapping) else None
    if kind not in ("byte", "hf") or not isinstance(specials, Mapping):
        keys = sorted(record) if isinstance(record, Mapping) else type(record).__name__
        raise ValueError(
            f"expected a feedline vocab record (tokenizer 'byte' or 'hf' and a "
            f"specials record), found {keys} with tokenizer {kind!r}"
        )
    for name, value in specials.items():
        if (
            not isinstance(name, str)
            or isinstance(value, bool)
            or not isinstance(value, (int, np.integer))
        ):
            raise ValueError(
                f"the vocab record's specials must map token texts to int ids, "
                f"found {name!r}: {value!r} ({type(value).__name__})"
            )
    in_order = sorted(specials, key=specials.__getitem__)
    if kind == "byte":
        tok: ByteTokenizer | BPETokenizer = ByteTokenizer(in_order)
    else:
        if not isinstance(record.get("hf_json"), str):
            raise ValueError("a vocab record of tokenizer 'hf' needs its hf_json (Str)")
        tok = BPETokenizer.from_str(record["hf_json"])
    if tok.specials != dict(specials) or tok.vocab_size != record.get("size"):
        raise ValueError(
            f"the vocab record says size {record.get('size')} and specials "
            f"{dict(specials)}, the tokenizer it holds has {tok.vocab_size} "
            f"and {tok.specials}"
        )
    return tok


def load_tokenizer(path: str | os.PathLike[str]) -> ByteTokenizer | BPETokenizer:
    """The tokenizer of a ``tokenizer.json``, a ``.nnvocab`` or a ``.nndataset`` (its
    vocab record), so a corpus can be built with the vocabulary of another."""
    path = os.fspath(path)
    expected = "expected a tokenizer.json, .nnvocab or .nndataset"
    try:
        with open(path, "rb") as f:
            magic = f.read(4)
    except FileNotFoundError as e:
        raise MissingFileError(f"{path}: no such tokenizer file ({expected})") from e
    except IsADirectoryError as e:
        raise IsADirectoryError(f"{path}: {expected}, found a directory") from e
    if magic in (b"NNVC", b"NNDS"):
        with nndataset.open(path) as ds:
            vocab = ds.vocab
        try:
            return tokenizer_from_vocab(vocab)
        except ValueError as e:
            raise FormatError(f"its vocab record: {e}", path) from e
    return BPETokenizer.from_file(path)


def write_vocab(path: str | os.PathLike[str], tokenizer: Tokenizer) -> None:
    """Write ``tokenizer``'s vocab record as a ``.nnvocab`` file, atomically."""
    data = nndataset.write_nnvocab(tokenizer.vocab_record())
    with atomic_write(path) as f:
        f.write(data)
