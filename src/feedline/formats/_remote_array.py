"""An array inside a remote object, fetched block by block as it is read.

``RemoteFile.array`` makes one for a reader's column: indexing on axis 0, ``take`` and
``spans`` fetch only the blocks the rows need (through the handle's block cache).
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from ._remote import _Object


class RemoteArray:
    """A read-only array in a remote object, fetched as it is read (axis 0 indexing).

    ``a[i]``, ``a[i:j:k]``, ``a[int_array]``, ``a[bool_array]``, ``np.take(a, idx,
    axis=0, out=..., mode=...)`` and ``np.asarray(a)`` return numpy arrays (copies);
    each first fetches, in one round of requests, the blocks its rows need.
    """

    def __init__(self, obj: _Object, dtype: np.dtype, offset: int, shape: tuple[int, ...]) -> None:
        self._obj, self.dtype, self._offset = obj, dtype, offset
        self.shape = tuple(int(s) for s in shape)
        self._row = dtype.itemsize * int(np.prod(self.shape[1:], dtype=np.int64))
        self._view: np.ndarray | None = None

    ndim = property(lambda self: len(self.shape))
    size = property(lambda self: int(np.prod(self.shape, dtype=np.int64)))
    nbytes = property(lambda self: self.size * self.dtype.itemsize)

    def __len__(self) -> int:
        return self.shape[0]

    def _local(self) -> np.ndarray:
        """The array over the cache file (valid where its blocks are present)."""
        data = self._obj.data
        if data is None:
            raise ValueError(f"{self._obj.url}: the file is closed")
        if self._view is None:
            n = self.size
            self._view = (
                np.zeros(self.shape, dtype=self.dtype)
                if n == 0
                else np.frombuffer(data, dtype=self.dtype, count=n, offset=self._offset).reshape(
                    self.shape
                )
            )
        return self._view

    def _fetch_rows(self, rows: np.ndarray) -> None:
        obj = self._obj
        obj.ensure(obj.blocks_of(self._offset + rows.astype(np.int64) * self._row, self._row))

    def _fetch_span(self, lo: int, hi: int) -> None:
        if hi > lo:
            obj = self._obj
            obj.ensure(
                obj.blocks_of(np.array([self._offset + lo * self._row]), (hi - lo) * self._row)
            )

    @contextlib.contextmanager
    def spans(self, starts: np.ndarray, ends: np.ndarray):
        """The array over the cache, with the items ``[starts[i], ends[i])`` fetched and
        kept while the ``with`` block copies from it (for compiled kernels)."""
        obj = self._obj
        size = self.dtype.itemsize
        with obj.reading():
            obj.ensure(
                obj.blocks_of(
                    self._offset + np.asarray(starts, np.int64) * size,
                    (np.asarray(ends, np.int64) - starts) * size,
                )
            )
            yield self._local()

    def take(
        self, indices: Any, axis: int | None = 0, out: np.ndarray | None = None, mode: str = "raise"
    ) -> np.ndarray:
        if axis != 0:
            raise ValueError("a remote array is gathered along axis 0 only")
        idx = np.asarray(indices, dtype=np.int64)
        n = self.shape[0]
        flat = idx.reshape(-1)
        if mode == "raise" and flat.size and (int(flat.min()) < -n or int(flat.max()) >= n):
            raise IndexError(f"index out of range for a remote array of {n} rows")
        rows = np.clip(flat, 0, n - 1) if mode == "clip" else np.where(flat < 0, flat + n, flat)
        with self._obj.reading():
            self._fetch_rows(rows)
            # numpy's overloads cannot take an ``out`` that may be None, nor a str mode
            return np.take(self._local(), idx, axis=0, out=out, mode=mode)  # type: ignore[call-overload]

    def __getitem__(self, key: Any) -> Any:
        first, rest = (key[0], key[1:]) if isinstance(key, tuple) and key else (key, ())
        n = self.shape[0]
        with self._obj.reading():
            if isinstance(first, slice):
                start, stop, step = first.indices(n)
                lo, hi = (start, stop) if step > 0 else (stop + 1, start + 1)
                self._fetch_span(max(0, lo), min(n, hi))
            elif isinstance(first, (int, np.integer)) and not isinstance(first, bool):
                i = int(first) + n if int(first) < 0 else int(first)
                if not 0 <= i < n:
                    raise IndexError(f"index {int(first)} is out of range for {n} rows")
                self._fetch_span(i, i + 1)
            else:
                idx = np.asarray(first)
                if idx.dtype == np.bool_:
                    idx = np.flatnonzero(idx)
                if idx.dtype.kind not in "iu":
                    raise TypeError(
                        f"a remote array takes ints, slices or int/bool arrays, got {first!r}"
                    )
                idx = np.where(idx < 0, idx + n, idx).astype(np.int64)
                if idx.size and (int(idx.min()) < 0 or int(idx.max()) >= n):
                    raise IndexError(f"index out of range for {n} rows")
                self._fetch_rows(idx.reshape(-1))
                first = idx
            key = (first, *rest)  # (mypy reads ``a[(x, *y)]`` as 3.11's ``a[x, *y]``)
            return np.array(self._local()[key])

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        if copy is False:
            raise ValueError("a remote array can only be copied")
        arr = self[:]
        return arr if dtype is None else arr.astype(dtype, copy=False)

    def __repr__(self) -> str:
        return f"RemoteArray({self._obj.url}, {self.shape}, {self.dtype})"
