"""neuralnet.cpp's ``.nndataset`` (tokenised text documents) and ``.nnvocab``, version 1.

Written byte for byte as the C++ writer does, so its trainer reads feedline's files;
every valid version 1 file reads back. The layout is in ``docs/formats-nndataset.md``::

    [b"NNDS"][u32 1]                    the file label
    root kvrec, version 2, at byte 8    kind, companion{vocab, source, license?, gen},
                                        train{num_docs, doc_index}, test{...}?
    document arena                      per document [count u64][count x u64][count x u8]?

The mask section (one byte per token) is present only for loss_scope "assistant";
"all" loads as all ones. A doc_id is not stored: it is the document's position in its
subset plus 1, and an empty document keeps its number.

Reading checks more than the C++ reader (which trusts doc_index): the offsets
increase, each gap is exactly the block it covers (``8 + 8*count``, ``+ count`` with
masks), the train documents start right after the root record, the test documents
right after the train documents, and the file ends where the last document does.
Opening therefore reads one 8-byte count per document (vectorised); after that every
read is trusted. Every problem is a :class:`~feedline.errors.FormatError` naming the
path and byte offset.

neuralnet.cpp's helpers have the same names: ``MAGIC``/``VERSION`` (its
``NNDATASET_MAGIC``/``NNDATASET_FILE_VERSION``), ``VOCAB_MAGIC``/``VOCAB_VERSION`` (the
``.nnvocab``'s), ``write_file_label(magic, version)``, ``sha256_hex(data_or_path)``;
``write`` takes a path (atomic) or a binary stream.

>>> import os, tempfile
>>> p = os.path.join(tempfile.mkdtemp(), "tiny.nndataset")
>>> write(p, Build({"size": 3}, "c.txt", "ab", 2, train_docs=[[1, 2], [], [0]]))
>>> with open(p) as ds:
...     c = ds.load_text("train")
...     (c.token_flow[:].tolist(), c.doc_ids[:].tolist(), ds.text_doc("train", 1).doc_id)
([1, 2, 0], [1, 1, 3], 2)
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Literal

import numpy as np

from ..errors import BoundsError, FormatError
from . import kvrec
from ._corpus import LazyColumn, TextCorpus, TextDoc, _Layout, _Subset
from ._io import Handle
from ._label import DATASET_MAGIC as MAGIC
from ._label import (
    LABEL_SIZE,
    VERSION,
    VOCAB_MAGIC,
    VOCAB_VERSION,
    _check_label,
    _parse_vocab_file,
    parse_nnvocab,
    write_file_label,
    write_nnvocab,
)
from ._nnwrite import KIND_TABULAR, LOSS_SCOPES, Build, sha256_hex, write
from ._open import OpenFile, open_shared

__all__ = [
    "LABEL_SIZE",
    "MAGIC",
    "VERSION",
    "VOCAB_MAGIC",
    "VOCAB_VERSION",
    "Build",
    "Info",
    "LazyColumn",
    "Nndataset",
    "TextCorpus",
    "TextDoc",
    "open",
    "parse_nnvocab",
    "sha256_hex",
    "write",
    "write_file_label",
    "write_nnvocab",
]

Subset = Literal["train", "test"]


# ---------------------------------------------------------------- reading


@dataclasses.dataclass(frozen=True, eq=False)
class Info:
    """What a ``.nndataset`` says about itself (``None``: the field is absent).

    ``kind`` is "text", "tabular" (kind 1; not loadable, as in C++) or "vocab" (a
    ``.nnvocab`` opened with :func:`open`: no subsets). ``num_docs``/``test_docs`` count
    the train/test documents (``test_docs`` is 0 without a test subset). The strings
    are kvrec byte strings: ``str`` when their bytes are UTF-8, else ``bytes`` (the
    vocab's too: neuralnet.cpp's tokenizer stores raw token bytes).
    """

    kind: str
    num_docs: int
    test_docs: int
    has_test: bool
    loss_scope: str
    source_path: str | bytes | None
    source_sha256: str | bytes | None
    source_docs: int | None
    license: str | bytes | None
    tool: str | bytes | None
    created: int | None
    vocab: dict[str | bytes, Any] = dataclasses.field(repr=False)


def _read_counts(u8: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    counts = np.zeros(len(offsets), dtype=np.uint64)
    for k in range(8):
        counts |= u8[offsets + k].astype(np.uint64) << np.uint64(8 * k)
    return counts


def _parse_subset(
    name: str, rec: kvrec.Field, u8: np.ndarray, path: str, start: int, has_mask: bool, text: bool
) -> _Layout:
    size = len(u8)
    num = kvrec.lookup(rec.value, "num_docs", kvrec.UINT)
    if num is None:
        raise FormatError(f"the {name} subset has no num_docs (UInt)", path, rec.offset)
    index = kvrec.lookup(rec.value, "doc_index", kvrec.UINT_ARRAY)
    if index is None:
        raise FormatError(f"the {name} subset has no doc_index (UIntArray)", path, rec.offset)
    idx, at = index.value, index.offset
    if len(idx) != num.value + 1:
        raise FormatError(
            f"{name}.doc_index: num_docs = {num.value} needs {num.value + 1} "
            f"entries, found {len(idx)}",
            path,
            at,
        )
    past = np.flatnonzero(idx > np.uint64(size))
    if len(past):
        j = int(past[0])
        raise FormatError(
            f"{name}.doc_index[{j}] = {int(idx[j])} points past the end of the {size}-byte file",
            path,
            at + 8 * j,
        )
    offsets = idx.astype(np.int64)
    if offsets[0] != start:
        raise FormatError(
            f"{name}.doc_index[0]: expected the {name} documents to start at "
            f"byte {start}, found {int(offsets[0])}",
            path,
            at,
        )
    gaps = np.diff(offsets)
    short = np.flatnonzero(gaps < 8)
    if len(short):
        j = int(short[0])
        raise FormatError(
            f"{name}.doc_index must increase by at least 8 (a block's count): "
            f"entry {j + 1} is {int(offsets[j + 1])}, entry {j} is "
            f"{int(offsets[j])}",
            path,
            at + 8 * (j + 1),
        )
    width = 9 if has_mask else 8
    if text:
        stored = _read_counts(u8, offsets[:-1])
        room = (gaps - 8).astype(np.uint64)
        clipped = np.minimum(stored, room)
        bad = np.flatnonzero((stored != clipped) | (clipped * np.uint64(width) != room))
        if len(bad):
            j = int(bad[0])
            c = int(stored[j])
            raise FormatError(
                f"{name} document {j} says {c} tokens, a {8 + width * c}-byte "
                f"block, but doc_index gives it {int(gaps[j])} bytes",
                path,
                int(offsets[j]),
            )
        counts = stored.astype(np.int64)
    else:
        counts = np.zeros(len(gaps), dtype=np.int64)  # tabular blocks are not text
    cum = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
    tok_start = offsets[:-1] + 8
    for a in (offsets, counts, cum, tok_start):
        a.flags.writeable = False
    return _Layout(offsets, counts, cum, tok_start, tok_start + 8 * counts, has_mask)


def _lookup_value(fields: list[kvrec.Field] | None, key: str, kind: int) -> Any:
    if fields is None:
        return None
    f = kvrec.lookup(fields, key, kind)
    return None if f is None else f.value


def _decode_root(u8: Any, size: int, path: str) -> tuple[list[kvrec.Field], int]:
    """The root record. From a remote object, the kvrec decoder reads a prefix of the
    file, doubled until the record fits (its length is not stored up front)."""
    if isinstance(u8, np.ndarray):
        return kvrec.decode_fields(u8, LABEL_SIZE, LABEL_SIZE, path)
    n = min(size, 1 << 16)
    while True:
        try:
            return kvrec.decode_fields(u8[:n], LABEL_SIZE, LABEL_SIZE, path)
        except FormatError:
            if n >= size:
                raise
            n = min(size, 4 * n)


def _parse(file: Handle, u8: Any) -> tuple[Info, dict[str, _Layout]]:
    path, size = file.path, file.size
    magic = _check_label(file.pread(min(size, LABEL_SIZE), 0, "the file label"), size, path)
    if magic == VOCAB_MAGIC:
        # the record must end the file, so all of it is read: from a remote object, at once
        record = _parse_vocab_file(u8 if isinstance(u8, np.ndarray) else u8[:], size, path)
        return Info("vocab", 0, 0, False, "all", None, None, None, None, None, None, record), {}
    fields, end = _decode_root(u8, size, path)
    companion = kvrec.lookup(fields, "companion", kvrec.RECORD)
    if companion is None:
        raise FormatError("the root record has no companion (Record)", path, LABEL_SIZE)
    vocab = kvrec.lookup(companion.value, "vocab", kvrec.RECORD)
    if vocab is None:
        raise FormatError("companion has no vocab (Record)", path, companion.offset)
    source = _lookup_value(companion.value, "source", kvrec.RECORD)
    gen = _lookup_value(companion.value, "gen", kvrec.RECORD)
    scope = kvrec.lookup(gen, "loss_scope", kvrec.STR) if gen is not None else None
    loss_scope = "all" if scope is None else scope.value
    if loss_scope not in LOSS_SCOPES:
        assert scope is not None  # the default, "all", is a scope
        raise FormatError(
            f"gen.loss_scope: expected 'all' or 'assistant', found {loss_scope!r}",
            path,
            scope.offset,
        )
    kind = _lookup_value(fields, "kind", kvrec.UINT)
    text = kind != KIND_TABULAR
    has_mask = loss_scope == "assistant"
    layouts: dict[str, _Layout] = {}
    train = kvrec.lookup(fields, "train", kvrec.RECORD)
    if train is None:
        raise FormatError("the root record has no train subset (Record)", path, LABEL_SIZE)
    layouts["train"] = _parse_subset("train", train, u8, path, end, has_mask, text)
    last = int(layouts["train"].offsets[-1])
    test = kvrec.lookup(fields, "test", kvrec.RECORD)
    if test is not None:
        layouts["test"] = _parse_subset("test", test, u8, path, last, has_mask, text)
        last = int(layouts["test"].offsets[-1])
    if last != size:
        raise FormatError(
            f"the documents end at byte {last}, the file has {size} bytes", path, last
        )
    info = Info(
        kind="text" if text else "tabular",
        num_docs=len(layouts["train"].counts),
        test_docs=len(layouts["test"].counts) if test is not None else 0,
        has_test=test is not None,
        loss_scope=loss_scope,
        source_path=_lookup_value(source, "path", kvrec.STR),
        source_sha256=_lookup_value(source, "sha256", kvrec.STR),
        source_docs=_lookup_value(source, "docs", kvrec.UINT),
        license=_lookup_value(companion.value, "license", kvrec.STR),
        tool=_lookup_value(gen, "tool", kvrec.STR),
        created=_lookup_value(gen, "created", kvrec.UINT),
        vocab=kvrec.to_dict(vocab.value),
    )
    return info, layouts


class Nndataset(OpenFile):
    """An open ``.nndataset`` (or ``.nnvocab``): ``info``, ``load_text``, ``text_doc``.

    Opening parses the root record and checks every document block's offset and count
    (one 8-byte read per document); reads afterwards go through a shared memory map.
    ``share()`` gives another handle on the same descriptor; ``close()`` gives this one
    up; pickling reopens by path. Usable as a context manager.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        _file: Handle | None = None,
        _parsed: tuple[Info, dict[str, _Layout]] | None = None,
    ) -> None:
        self._file = _file if _file is not None else open_shared(path)
        self.path = self._file.path
        try:
            self._u8: np.ndarray | None = self._file.array(np.uint8, 0, self._file.size)
            self.info, self._layouts = (
                _parsed if _parsed is not None else _parse(self._file, self._u8)
            )
        except BaseException:
            self._u8 = None
            self._file.close()
            raise

    @property
    def vocab(self) -> dict[str | bytes, Any]:
        """The vocabulary record (``companion.vocab``), opaque to the dataset layer."""
        return self.info.vocab

    def _layout(self, subset: str) -> _Layout:
        if subset not in ("train", "test"):
            raise ValueError(f"subset must be 'train' or 'test', got {subset!r}")
        if self._u8 is None:
            raise ValueError(f"{self.path}: the dataset is closed")
        self._file.check_intact()  # a file truncated under us: an error, not SIGBUS
        if self.info.kind == "vocab":
            raise FormatError(
                f"this is a vocabulary (NNVC) file: it holds no {subset} documents", self.path, 0
            )
        if self.info.kind != "text":
            raise FormatError(
                f"expected a text dataset to load as text, found kind "
                f"{KIND_TABULAR} ({self.info.kind}) in the root record "
                "(neuralnet.cpp cannot load it either)",
                self.path,
                LABEL_SIZE,
            )
        if subset not in self._layouts:
            raise FormatError(
                f"the dataset has no {subset} subset (expected one in the root "
                f"record, found {' and '.join(self._layouts)} only)",
                self.path,
                LABEL_SIZE,
            )
        return self._layouts[subset]

    def load_text(self, subset: Subset = "train") -> TextCorpus:
        """The ``subset`` ("train" or "test") as a :class:`TextCorpus` of lazy columns.

        Cost: O(1) here; each window read costs its tokens plus the documents it
        touches. A missing subset, a vocabulary file or a tabular dataset is an error.
        """
        sub = _Subset(self, subset, self._layout(subset))
        return TextCorpus(
            LazyColumn(sub, "tokens"),
            LazyColumn(sub, "doc_ids"),
            LazyColumn(sub, "loss_mask"),
            sub.layout.cum,
        )

    def text_doc(self, subset: Subset, i: int) -> TextDoc:
        """Document ``i`` (0-based) of ``subset``; its doc_id is ``i + 1``. Tokens are a
        zero-copy view of the memory map. Cost: O(document)."""
        lay = self._layout(subset)
        n_docs = len(lay.counts)
        if isinstance(i, bool) or not isinstance(i, (int, np.integer)):
            raise TypeError(f"a document index is an int, got {type(i).__name__}")
        if not 0 <= int(i) < n_docs:
            raise BoundsError(f"document {int(i)} is outside the {subset} subset's {n_docs}")
        i = int(i)
        n, t = int(lay.counts[i]), int(lay.tok_start[i])
        u8 = self._u8
        assert u8 is not None  # _layout refuses a closed dataset
        tokens = u8[t : t + 8 * n].view("<u8")
        if lay.has_mask:
            mask = u8[t + 8 * n : t + 9 * n] != 0
        else:
            mask = np.ones(n, dtype=bool)
        return TextDoc(i + 1, tokens, mask)

    def share(self) -> Nndataset:
        """Another handle on the same open file (the parse is shared, not repeated)."""
        return Nndataset(self.path, self._file.share(), (self.info, self._layouts))

    def close(self) -> None:
        """Give up this handle's share; the file closes with the last one. Columns and
        views already handed out keep the memory map alive until they are dropped."""
        self._u8 = None
        self._file.close()

    def __repr__(self) -> str:
        i = self.info
        return (
            f"Nndataset({self.path!r}, kind={i.kind}, num_docs={i.num_docs}, "
            f"test_docs={i.test_docs}, loss_scope={i.loss_scope})"
        )


def open(path: str | os.PathLike[str]) -> Nndataset:
    """Open a ``.nndataset`` (or a ``.nnvocab``: kind "vocab", no subsets), checked.

    Cost: the root record, plus one 8-byte count per document (vectorised).
    """
    return Nndataset(path)
