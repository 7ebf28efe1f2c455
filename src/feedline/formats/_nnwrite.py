"""Writing neuralnet.cpp's ``.nndataset``, version 1, byte for byte (``nndataset.write``).

``head_size`` and ``encode_head`` lay out the label and the root record from the
document counts alone, so ``fl.text.build`` can stream the documents and write the
head last, as ``write`` does in one go. ``sha256_hex`` is the C++ helper that fills
``Build.source_sha256``.
"""

from __future__ import annotations

import array
import dataclasses
import hashlib
import io
import os
import struct
import tempfile
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, BinaryIO, Literal, cast

import numpy as np

from .._base.files import atomic_write, open_regular
from ..errors import MissingFileError
from . import kvrec
from ._label import DATASET_MAGIC, LABEL_SIZE, VERSION, write_file_label

KIND_TEXT, KIND_TABULAR = 0, 1  # the C++ DatasetKind; its writer stores 0 for text
LOSS_SCOPES = ("all", "assistant")
_U64 = struct.Struct("<Q")
_MAX_U64 = (1 << 64) - 1
_FLUSH = 4 << 20  # bytes gathered before one write while streaming documents
_STRINGS = (str, bytes)  # a kvrec Str: text, or raw bytes (see kvrec)
_HASH_BLOCK = 1 << 20  # bytes read per step while hashing a file


def sha256_hex(data_or_path: Any) -> str:
    """The SHA-256 of ``data_or_path`` as 64 lowercase hex digits (neuralnet.cpp's
    ``sha256_hex``): of the bytes themselves for ``bytes``, ``bytearray`` or
    ``memoryview``; of the file's content for a ``str`` or ``os.PathLike`` path (a
    ``str`` is always a path: hash text as ``sha256_hex(text.encode())``).

    Cost: one pass over the bytes; a file is read 1 MiB at a time (bounded memory).

    >>> sha256_hex(b"abc")[:16]
    'ba7816bf8f01cfea'
    """
    if isinstance(data_or_path, (bytes, bytearray, memoryview)):
        return hashlib.sha256(data_or_path).hexdigest()
    if not isinstance(data_or_path, (str, os.PathLike)):
        raise TypeError(f"sha256_hex takes bytes or a path, got {type(data_or_path).__name__}")
    path = os.fspath(data_or_path)
    digest = hashlib.sha256()
    try:
        fd = open_regular(path)  # a FIFO or a directory is refused, never waited on
    except FileNotFoundError as e:
        raise MissingFileError(
            f"{path}: no such file to hash (a str is a path; pass bytes to hash data)"
        ) from e
    with os.fdopen(fd, "rb") as f:
        while block := f.read(_HASH_BLOCK):
            digest.update(block)
    return digest.hexdigest()


@dataclasses.dataclass(frozen=True, eq=False)
class Build:
    """What a ``.nndataset`` holds; the fields of the C++ ``NndatasetBuild``.

    ``train_docs``/``test_docs`` are sequences of documents, each a sequence or array
    of token ids (u64); ``train_masks``/``test_masks`` one bool/0-1 array per document,
    required (one per document, as long as it) when ``loss_scope`` is "assistant" and
    refused when it is "all". ``created`` None means the time of writing (unix
    seconds). ``license`` is stored only when non-empty (as in C++). The strings
    (``source_path``, ``source_sha256``, ``tool``, ``license``, and the vocab's) are kvrec
    byte strings: ``str`` (stored as UTF-8) or ``bytes`` (stored as they are), so the
    values a file read back with are written back byte for byte. An invalid build
    is a ``ValueError`` (or ``TypeError``) here and in :func:`write`. The document
    sequences are held, not copied; a generator (any iterable that is not a sequence)
    is held as it is and read once, by ``write``, one document at a time (its lengths
    and masks are checked then).
    """

    # str keys, or bytes ones as read back (Mapping's key type is invariant: both listed)
    vocab: Mapping[str, Any] | Mapping[str | bytes, Any]
    source_path: str | bytes
    source_sha256: str | bytes
    source_docs: int
    loss_scope: Literal["all", "assistant"] = "all"
    train_docs: Iterable[Any] = ()
    train_masks: Iterable[Any] | None = None
    test_docs: Iterable[Any] = ()
    test_masks: Iterable[Any] | None = None
    tool: str | bytes = "feedline"
    created: int | None = None
    license: str | bytes | None = None

    def __post_init__(self) -> None:
        for name in ("train_docs", "test_docs", "train_masks", "test_masks"):
            value = getattr(self, name)
            if value is None or isinstance(value, (tuple, list, np.ndarray, _OneShot)):
                continue
            if isinstance(value, Sequence):  # already held (a range, ...): as before
                object.__setattr__(self, name, tuple(value))
            else:  # a generator: streamed by write, once
                object.__setattr__(self, name, _OneShot(value, name))
        _check_build(self)


class _OneShot:
    """Documents (or masks) from an iterator, held as the iterator: ``write`` reads them
    once, one at a time (memory O(one document)); a second write is a ``ValueError``."""

    def __init__(self, it: Iterable[Any], name: str) -> None:
        self._it: Iterator[Any] | None = iter(it)
        self.name = name

    def __iter__(self) -> Iterator[Any]:
        if self._it is None:
            raise ValueError(
                f"Build.{self.name} came from an iterator that a write has read already "
                "(expected a fresh Build, or a list, to write again)"
            )
        it, self._it = self._it, None
        return it


def _check_u64(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"Build.{name} must be an int, got {type(value).__name__}")
    if not 0 <= int(value) <= _MAX_U64:
        raise ValueError(f"Build.{name} must be in [0, 2**64), got {value}")


def _check_build(b: Build) -> None:
    if not isinstance(b.vocab, Mapping):
        raise TypeError(f"Build.vocab must be a dict record, got {type(b.vocab).__name__}")
    for name in ("source_path", "source_sha256", "tool"):
        if not isinstance(getattr(b, name), _STRINGS):
            raise TypeError(
                f"Build.{name} must be a str or bytes, got {type(getattr(b, name)).__name__}"
            )
    if b.license is not None and not isinstance(b.license, _STRINGS):
        raise TypeError(
            f"Build.license must be a str, bytes or None, got {type(b.license).__name__}"
        )
    _check_u64("source_docs", b.source_docs)
    if b.created is not None:
        _check_u64("created", b.created)
    if b.loss_scope not in LOSS_SCOPES:
        raise ValueError(f"Build.loss_scope must be 'all' or 'assistant', got {b.loss_scope!r}")
    for subset, docs, masks in (
        ("train", b.train_docs, b.train_masks),
        ("test", b.test_docs, b.test_masks),
    ):
        if isinstance(docs, _OneShot) or isinstance(masks, _OneShot):
            if b.loss_scope == "all" and masks is not None:
                raise ValueError(f"loss_scope 'all' stores no masks, but {subset}_masks were given")
            if b.loss_scope == "assistant" and masks is None:
                raise ValueError(f"loss_scope 'assistant' needs one mask per {subset} document")
            continue  # checked one by one as write reads them
        docs, masks = cast("Sequence[Any]", docs), cast("Sequence[Any] | None", masks)
        n_masks = 0 if masks is None else len(masks)
        if b.loss_scope == "all":
            if n_masks:
                raise ValueError(
                    f"loss_scope 'all' stores no masks, but {n_masks} {subset}_masks were given"
                )
            continue
        if n_masks != len(docs):
            raise ValueError(
                f"loss_scope 'assistant' needs one mask per document: "
                f"{len(docs)} {subset}_docs, {n_masks} {subset}_masks"
            )
        for i, (doc, mask) in enumerate(zip(docs, masks if masks is not None else ())):
            if _len(doc, f"{subset}_docs[{i}]") != _len(mask, f"{subset}_masks[{i}]"):
                raise ValueError(
                    f"{subset}_masks[{i}] has {len(mask)} entries, "
                    f"{subset}_docs[{i}] has {len(doc)} tokens"
                )


def _len(x: Any, what: str) -> int:
    try:
        return len(x)
    except TypeError as e:
        raise TypeError(f"{what} must be a sequence or 1-D array, got {type(x).__name__}") from e


def _root(b: Build, created: int, train_index: Any, test_index: Any) -> dict[str, Any]:
    companion: dict[str, Any] = {
        "vocab": b.vocab,
        "source": {"path": b.source_path, "sha256": b.source_sha256, "docs": int(b.source_docs)},
    }
    if b.license:
        companion["license"] = b.license
    companion["gen"] = {"loss_scope": b.loss_scope, "tool": b.tool, "created": created}
    root: dict[str, Any] = {
        "kind": KIND_TEXT,
        "companion": companion,
        "train": {"num_docs": len(train_index) - 1, "doc_index": train_index},
    }
    if len(test_index) > 1:
        root["test"] = {"num_docs": len(test_index) - 1, "doc_index": test_index}
    return root


def _mask_bytes(mask: Any, n: int, what: str) -> np.ndarray:
    arr = np.asarray(mask)
    if arr.ndim != 1 or len(arr) != n:
        raise ValueError(f"{what}: expected {n} mask entries, got shape {arr.shape}")
    if arr.dtype == np.bool_ or n == 0:
        return arr.astype(np.uint8)
    if arr.dtype.kind not in "iu":
        raise ValueError(f"{what}: a mask is bool or 0/1 integers, got dtype {arr.dtype}")
    if n and ((arr != 0) & (arr != 1)).any():
        raise ValueError(f"{what}: a mask holds only 0 and 1")
    return arr.astype(np.uint8)


def head_size(build: Build, num_train: int, num_test: int) -> int:
    """Bytes before the document blocks (label, root record); it depends on counts only."""
    return LABEL_SIZE + kvrec.size_v2(_root(build, 0, range(num_train + 1), range(num_test + 1)))


def encode_head(build: Build, train_counts: Any, test_counts: Any, created: int) -> bytes:
    """The label and root record :func:`write` puts before documents of these token counts
    (only ``build``'s metadata is read: ``fl.text.build`` streams its documents)."""
    width = 9 if build.loss_scope == "assistant" else 8
    tr, te = (np.asarray(c, np.int64) for c in (train_counts, test_counts))
    arena = head_size(build, len(tr), len(te))  # measured with placeholder offsets, as in C++
    train_index = (arena + np.concatenate(([0], np.cumsum(8 + width * tr)))).astype("<u8")
    test_index = int(train_index[-1]) + np.concatenate(([0], np.cumsum(8 + width * te)))
    root = kvrec.encode_v2(_root(build, created, train_index, test_index.astype("<u8")), LABEL_SIZE)
    assert LABEL_SIZE + len(root) == arena, "internal error: the root was mis-measured"
    return write_file_label(DATASET_MAGIC, VERSION) + root


def _write_all(f: Any, data: Any) -> None:
    """Write all of ``data`` to ``f``: a raw stream may take part of it a call."""
    view = memoryview(data).cast("B")
    while len(view):
        n = f.write(view)
        if n is None or n >= len(view):  # buffered streams take everything (and say so)
            return
        view = view[n:]


def write(target: str | os.PathLike[str] | BinaryIO, build: Build, *, label: bool = True) -> None:
    """Write ``build`` as a version 1 ``.nndataset``, as neuralnet.cpp does.

    ``target`` is a path, written atomically (a temporary beside it, flushed, fsynced
    and renamed into place: on any error the target is left as it was and no temporary
    remains), or a binary stream (an ``open(..., "wb")`` file, ``io.BytesIO``, a pipe:
    anything with ``write``), written in order from where it stands and left open. A
    stream has no atomicity: on an error the bytes already written stay in it.

    ``label=False`` leaves out the 8-byte file label, for a stream whose caller wrote
    it, as neuralnet.cpp's own idiom does::

        with open("out.nndataset", "wb") as f:
            f.write(write_file_label(MAGIC, VERSION))  # ofs << nn::write_file_label(...)
            write(f, build, label=False)               # nn::write_nndataset(ofs, b)

    The offsets stored are absolute, so the file must start where the label is. A path
    always gets its label (``label=False`` with a path is a ``ValueError``).

    The head comes from :func:`encode_head`; the documents are then streamed one at a
    time (one ``tobytes``-sized copy per document, written in ~4 MiB batches), so memory
    stays at the root record plus one document. Refused (``ValueError``): a bad
    loss_scope, masks with "all", a mask count or length that does not match its
    documents, a negative or non-integer token id or a mask entry other than 0/1.
    """
    _check_build(build)
    if isinstance(target, (str, os.PathLike)):
        if not label:
            raise ValueError(
                f"{os.fspath(target)}: a path is written whole, label "
                "included; label=False is for a stream whose caller wrote "
                "the label"
            )
        with atomic_write(target) as f:
            _write_to(f, build, True, os.path.dirname(os.path.abspath(target)))
        return
    if isinstance(target, io.TextIOBase):
        raise TypeError(
            f"write takes a path or a binary stream (opened 'wb'), got the text stream {target!r}"
        )
    if not callable(getattr(target, "write", None)):
        raise TypeError(
            f"write takes a path or a binary stream (with write()), got {type(target).__name__}"
        )
    _write_to(target, build, label, None)


def _streamed(build: Build) -> bool:
    return any(
        isinstance(v, _OneShot)
        for v in (build.train_docs, build.test_docs, build.train_masks, build.test_masks)
    )


def _write_to(f: Any, build: Build, label: bool, spool_dir: str | None) -> None:
    if _streamed(build):
        _write_streamed(f, build, label, spool_dir)
        return
    build_docs = cast("tuple[Sequence[Any], Sequence[Any]]", (build.train_docs, build.test_docs))
    created = int(time.time()) if build.created is None else int(build.created)
    has_mask = build.loss_scope == "assistant"
    lens = [
        np.fromiter(
            (_len(d, f"{s}_docs[{i}]") for i, d in enumerate(docs)), dtype=np.int64, count=len(docs)
        )
        for s, docs in zip(("train", "test"), build_docs)
    ]
    head = encode_head(build, lens[0], lens[1], created)
    buf = bytearray(head if label else memoryview(head)[LABEL_SIZE:])
    for subset, docs, masks, n_tokens in (
        ("train", build.train_docs, build.train_masks, lens[0]),
        ("test", build.test_docs, build.test_masks, lens[1]),
    ):
        for i, doc in enumerate(docs):
            tokens = np.ascontiguousarray(kvrec.u64_array(doc, f"{subset}_docs[{i}]"))
            if len(tokens) != n_tokens[i]:
                raise ValueError(f"{subset}_docs[{i}] changed length while being written")
            buf += _U64.pack(len(tokens))
            if tokens.nbytes >= _FLUSH:
                _write_all(f, buf)
                buf.clear()
                _write_all(f, tokens)
            else:
                buf += memoryview(tokens).cast("B")  # type: ignore[arg-type]  # numpy types its buffer protocol for 3.12+ only
            if has_mask:
                assert masks is not None  # checked: one mask per document
                mask = cast("Sequence[Any]", masks)[i]
                buf += _mask_bytes(mask, len(tokens), f"{subset}_masks[{i}]").tobytes()
            if len(buf) >= _FLUSH:
                _write_all(f, buf)
                buf.clear()
    _write_all(f, buf)


_END = object()


def _write_streamed(f: Any, build: Build, label: bool, spool_dir: str | None) -> None:
    """Documents from iterators: their blocks go to a temporary file (beside the target
    for a path) as they come, one document in memory, with one token count a document
    kept; then the head, made from the counts, and the blocks copied after it."""
    created = int(time.time()) if build.created is None else int(build.created)
    has_mask = build.loss_scope == "assistant"
    counts: list[array.array] = []
    with tempfile.TemporaryFile(dir=spool_dir) as spool:
        buf = bytearray()
        for subset, docs, masks in (
            ("train", build.train_docs, build.train_masks),
            ("test", build.test_docs, build.test_masks),
        ):
            lens = array.array("q")
            mask_it = iter(masks) if has_mask and masks is not None else None
            for i, doc in enumerate(docs):
                tokens = np.ascontiguousarray(kvrec.u64_array(doc, f"{subset}_docs[{i}]"))
                buf += _U64.pack(len(tokens))
                buf += memoryview(tokens).cast("B")  # type: ignore[arg-type]  # numpy types its buffer protocol for 3.12+ only
                if mask_it is not None:
                    mask = next(mask_it, _END)
                    if mask is _END:
                        raise ValueError(
                            f"loss_scope 'assistant' needs one mask per document: "
                            f"{subset}_masks ended at {i}, before {subset}_docs[{i}]"
                        )
                    buf += _mask_bytes(mask, len(tokens), f"{subset}_masks[{i}]").tobytes()
                lens.append(len(tokens))
                if len(buf) >= _FLUSH:
                    _write_all(spool, buf)
                    buf.clear()
            if mask_it is not None and next(mask_it, _END) is not _END:
                raise ValueError(
                    f"loss_scope 'assistant' needs one mask per document: {subset}_masks "
                    f"has more than the {len(lens)} {subset}_docs"
                )
            counts.append(lens)
        _write_all(spool, buf)
        head = encode_head(
            build, np.frombuffer(counts[0], np.int64), np.frombuffer(counts[1], np.int64), created
        )
        _write_all(f, head if label else memoryview(head)[LABEL_SIZE:])
        spool.seek(0)
        while block := spool.read(_FLUSH):
            _write_all(f, block)
