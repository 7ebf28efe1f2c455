"""Reading a tokenised subset without loading it: per-token columns over the memory map.

A subset's documents are separate blocks in the file (``[count][tokens][mask]``), so
its token flow is not contiguous on disk. ``LazyColumn`` behaves like a read-only 1-D
array of the flow: a slice or an index array reads only the document blocks it
touches (a binary search over the per-document token offsets); ``np.asarray`` copies
the whole column.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any, NamedTuple, Protocol

import numpy as np

from ..errors import BoundsError
from ._io import Handle

_CHUNK = 1 << 18  # tokens per step when reading a long range (bounds the scratch memory)
_BYTES = np.arange(8, dtype=np.int64)


class TextDoc(NamedTuple):
    """One document: ``doc_id`` (position + 1), ``tokens`` (a read-only uint64 view of
    the memory map, no copy) and ``loss_mask`` (bool, a small copy)."""

    doc_id: int
    tokens: np.ndarray
    loss_mask: np.ndarray


@dataclasses.dataclass(frozen=True, eq=False)
class _Layout:
    """One subset's document blocks, checked: byte offsets and token counts per doc."""

    offsets: np.ndarray  # int64, num_docs + 1: each block's start, then the end
    counts: np.ndarray  # int64, tokens per document
    cum: np.ndarray  # int64, num_docs + 1: the flow position of each document's first token
    tok_start: np.ndarray  # int64: byte offset of each document's token section
    mask_start: np.ndarray  # int64: byte offset of each document's mask section
    has_mask: bool


class _Dataset(Protocol):
    """What a subset reads of its open ``.nndataset`` (``nndataset.Nndataset``)."""

    path: str
    _file: Handle
    _u8: np.ndarray | None

    def _layout(self, subset: str) -> _Layout: ...


class _Subset:
    """Reads one subset's per-token columns from the memory map (shared by its columns)."""

    def __init__(self, ds: _Dataset, name: str, layout: _Layout) -> None:
        self.ds, self.name, self.layout = ds, name, layout
        self.total = int(layout.cum[-1])

    @classmethod
    def reopen(cls, ds: _Dataset, name: str) -> _Subset:
        """The subset ``name`` of ``ds`` (a dataset unpickled: it reopened its file)."""
        return cls(ds, name, ds._layout(name))

    def __reduce__(self):
        # the dataset pickles itself (by path, or URL with its options) and reopens
        return (_Subset.reopen, (self.ds, self.name))

    def u8(self) -> np.ndarray:
        u8 = self.ds._u8
        if u8 is None:
            raise ValueError(f"{self.ds.path}: the dataset is closed")
        self.ds._file.check_intact()  # a file truncated under us: an error, not SIGBUS
        return u8

    def read(self, field: str, a: int, b: int) -> np.ndarray:
        """Flow positions ``[a, b)`` of ``field``, a new array."""
        u8 = self.u8()
        out = np.empty(b - a, dtype=_DTYPES[field])
        if field == "loss_mask" and not self.layout.has_mask:
            out[:] = True
            return out
        for lo in range(a, b, _CHUNK):
            hi = min(b, lo + _CHUNK)
            self._fill(u8, field, lo, hi, out[lo - a : hi - a])
        return out

    def _fill(self, u8: np.ndarray, field: str, a: int, b: int, out: np.ndarray) -> None:
        lay = self.layout
        cum = lay.cum
        d0 = int(np.searchsorted(cum, a, "right")) - 1  # the document holding token a
        d1 = int(np.searchsorted(cum, b, "left"))  # documents [d0, d1) overlap [a, b)
        starts = np.maximum(cum[d0:d1], a)
        lens = np.minimum(cum[d0 + 1 : d1 + 1], b) - starts
        if field == "doc_ids":
            out[:] = np.repeat(np.arange(d0 + 1, d1 + 1, dtype=np.int64), lens)
            return
        if field == "tokens" and b - a >= 32 * (d1 - d0):  # long documents: one copy each
            src = lay.tok_start[d0:d1] + 8 * (starts - cum[d0:d1])
            for p, s, n in zip(src.tolist(), (starts - a).tolist(), lens.tolist()):
                out[s : s + n] = u8[p : p + 8 * n].view("<u8")
            return
        docs = np.repeat(np.arange(d0, d1), lens)
        self._gather(u8, field, docs, np.arange(a, b, dtype=np.int64) - cum[docs], out)

    def _gather(
        self, u8: np.ndarray, field: str, docs: np.ndarray, within: np.ndarray, out: np.ndarray
    ) -> None:
        if field == "doc_ids":
            out[:] = docs + 1
        elif field == "tokens":
            pos = self.layout.tok_start[docs] + 8 * within
            out[:] = u8[pos[:, None] + _BYTES].view("<u8").reshape(-1)
        elif self.layout.has_mask:
            out[:] = u8[self.layout.mask_start[docs] + within] != 0
        else:
            out[:] = True

    def take(self, field: str, idx: np.ndarray) -> np.ndarray:
        """Flow positions ``idx`` (int64, in range) of ``field``, a new array."""
        flat = idx.reshape(-1)
        out = np.empty(len(flat), dtype=_DTYPES[field])
        u8 = self.u8()
        for lo in range(0, len(flat), _CHUNK):
            part = flat[lo : lo + _CHUNK]
            docs = np.searchsorted(self.layout.cum, part, "right") - 1
            self._gather(u8, field, docs, part - self.layout.cum[docs], out[lo : lo + len(part)])
        return out.reshape(idx.shape)


_DTYPES = {
    "tokens": np.dtype(np.uint64),
    "doc_ids": np.dtype(np.int64),
    "loss_mask": np.dtype(np.bool_),
}


class LazyColumn:
    """One per-token column of a subset (token ids, doc ids or loss mask), read on demand.

    Behaves like a read-only 1-D array: ``len``, ``shape``, ``dtype``, ``c[i]``, and
    ``c[a:b]`` returning a new numpy array that reads only the documents the window
    touches (a binary search over the per-document token offsets, then one copy per
    document or one vectorised gather). Integer and boolean index arrays work too.
    ``np.asarray(c)`` materialises the whole column: a full copy (8 bytes per token for
    tokens and doc ids). Pickling reopens the file by path in the receiving process.
    """

    __slots__ = ("_s", "field")

    def __init__(self, subset: _Subset, field: str) -> None:
        self._s, self.field = subset, field

    @property
    def dtype(self) -> np.dtype:
        return _DTYPES[self.field]

    @property
    def shape(self) -> tuple[int]:
        return (self._s.total,)

    @property
    def ndim(self) -> int:
        return 1

    @property
    def size(self) -> int:
        return self._s.total

    def __len__(self) -> int:
        return self._s.total

    def __getitem__(self, key: Any) -> Any:
        n = self._s.total
        if isinstance(key, (int, np.integer)) and not isinstance(key, (bool, np.bool_)):
            i = int(key) + n if int(key) < 0 else int(key)
            if not 0 <= i < n:
                raise BoundsError(f"index {int(key)} is outside the column's {n} tokens")
            return self._s.take(self.field, np.array([i], dtype=np.int64))[0]
        if isinstance(key, slice):
            start, stop, step = key.indices(n)
            if step == 1:
                return self._s.read(self.field, start, max(start, stop))
            return self._s.take(self.field, np.arange(start, stop, step, dtype=np.int64))
        idx = np.asarray(key)
        if idx.dtype == np.bool_:
            if idx.shape != (n,):
                raise BoundsError(f"a boolean index must have shape ({n},), got {idx.shape}")
            idx = np.flatnonzero(idx)
        elif idx.dtype.kind not in "iu":
            raise TypeError(f"a column takes ints, slices or integer/bool arrays, got {key!r}")
        idx = idx.astype(np.int64)
        idx = np.where(idx < 0, idx + n, idx)
        if idx.size and (int(idx.min()) < 0 or int(idx.max()) >= n):
            raise BoundsError(f"indices must be in [-{n}, {n})")
        return self._s.take(self.field, idx)

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        if copy is False:
            raise ValueError(
                "a column's tokens are not contiguous in the file; it can only be copied"
            )
        arr = self._s.read(self.field, 0, self._s.total)
        return arr if dtype is None else arr.astype(dtype, copy=False)

    def __iter__(self) -> Iterator[Any]:
        for a in range(0, self._s.total, _CHUNK):
            yield from self[a : a + _CHUNK]

    def __reduce__(self):
        return (LazyColumn, (self._s, self.field))

    def __repr__(self) -> str:
        return (
            f"LazyColumn({self.field}, {self._s.name} of {self._s.ds.path!r}, "
            f"{self._s.total} x {self.dtype})"
        )


@dataclasses.dataclass(frozen=True, eq=False)
class TextCorpus:
    """A subset as one token flow: documents concatenated in order, no separators.

    ``token_flow`` (uint64), ``doc_ids`` (int64, the document's position + 1) and
    ``loss_mask`` (bool; all True for loss_scope "all") are :class:`LazyColumn` s of
    equal length; ``doc_token_offsets`` (int64, num_docs + 1) gives each document's
    first flow position, then the total. Windows read only their tokens; ``np.asarray``
    on a column copies all of it.
    """

    token_flow: LazyColumn
    doc_ids: LazyColumn
    loss_mask: LazyColumn
    doc_token_offsets: np.ndarray

    @property
    def num_docs(self) -> int:
        return len(self.doc_token_offsets) - 1

    @property
    def num_tokens(self) -> int:
        return int(self.doc_token_offsets[-1])
