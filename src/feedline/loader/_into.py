"""``Loader.next_into``: the next batch gathered into arrays the caller owns."""

from __future__ import annotations

import warnings
from collections.abc import Mapping

import numpy as np

# What ``next_into(out, meta=...)`` fills: the batch's metadata (``batch.meta``), by name.
_META_DTYPES = {"mask": np.bool_, "positions": np.int64, "source_ordinals": np.int64,
                "record_indices": np.int64}


def _check_meta(meta: Mapping[str, np.ndarray], b: int) -> None:
    for name, a in meta.items():
        want = _META_DTYPES.get(name)
        if want is None:
            raise ValueError(f"next_into fills the metadata {', '.join(_META_DTYPES)}, not "
                             f"{name!r}")
        if (not isinstance(a, np.ndarray) or a.dtype != want or a.ndim != 1 or len(a) < b
                or not a.flags.writeable):
            raise ValueError(f"meta[{name!r}] must be a writable {np.dtype(want)} array of "
                             f">= {b} rows")


def _fill_meta(meta: Mapping[str, np.ndarray], size: int, rows: int, start: int,
               ords: np.ndarray, recs: np.ndarray) -> None:
    """``meta``'s arrays get the batch's metadata, as ``batch.meta`` has it."""
    for name, a in meta.items():
        if name == "mask":
            a[:size] = True
            a[size:rows] = False
            continue
        if name == "positions":
            a[:size] = np.arange(start, start + size)
        else:
            a[:size] = ords if name == "source_ordinals" else recs
        a[size:rows] = -1


class IntoArrays:
    """``next_into`` for ``Loader`` (which provides the claim, the gathers and the pool)."""

    def next_into(self, out: Mapping[str, np.ndarray], *,
                  meta: Mapping[str, np.ndarray] | None = None) -> int:
        """Gather the next batch into caller-provided arrays; returns its row count.

        ``out`` maps each field to an array of the field's dtype with at least
        ``batch_size`` rows (a field named ``mask`` is a field like any other).
        ``meta``, optionally, maps names of ``batch.meta`` to arrays of at least
        ``batch_size`` rows that receive the batch's metadata: ``"mask"`` (bool),
        ``"positions"``, ``"source_ordinals"``, ``"record_indices"`` (int64, -1 on
        padding rows). Rows past the count are left as they were. 0 marks the end of the
        pass, and every call after it returns 0 until ``reset()`` or a new iteration
        starts the next pass (so threads looping until 0 read one pass together).
        With ``even=True`` every step, an all-padding one included, returns ``batch_size``
        and ``meta["mask"]`` is required: it tells the real rows.

        ``out["mask"]``, for a record without a field ``mask``, is still taken as
        ``meta["mask"]``, with a ``DeprecationWarning`` (it was the mask's place before
        ``meta``).
        """
        b = self.batch_size
        for n, f in self.record.fields.items():
            a = out.get(n)
            if (a is None or not isinstance(a, np.ndarray) or a.shape[1:] != f.shape
                    or len(a) < b or a.dtype != f.dtype):
                got = None if a is None else (getattr(a, "shape", None), getattr(a, "dtype", None))
                raise ValueError(f"next_into needs out[{n!r}]: a {f.dtype} array of shape "
                                 f"(>= {b}, *{f.shape}), got {got}")
        meta = dict(meta) if meta is not None else {}
        if "mask" in out and "mask" not in self.record.fields and "mask" not in meta:
            warnings.warn("next_into(out) with out['mask']: the mask is metadata, pass it as "
                          "next_into(out, meta={'mask': ...})", DeprecationWarning,
                          stacklevel=2)
            meta["mask"] = out["mask"]
        _check_meta(meta, b)
        padded = self.even and self.shard is not None
        if padded and "mask" not in meta:
            raise ValueError("with even=True, next_into needs meta={'mask': a bool array}: "
                             "short ranks take steps of padding only")
        pool = self._use_pool()
        if pool is not None and not self._transform_in_workers:
            # the workers make the fields' batches ahead: the next is one of theirs
            return self._next_into_from_pool(out, meta, padded)
        if pool is not None and self._inflight:
            raise ValueError("next_into fills arrays with the records' fields, and this "
                             "loader's workers have made batches ahead through its "
                             "batch_transform: iterate it, or use next_into from the start "
                             "of a pass")
        claim = self._claim()
        if claim is None:
            with self._lock:
                self._ended = True
                self._last_rows = 0
            return 0
        start, stop, ords, recs = claim
        size = stop - start
        rows = self._rows_for(size)
        plain = self._plain_cols if self._plain_decided else self._plain_source()
        cols = None if plain is None else (
            plain._columns if plain._columns is not None else plain._mapped_columns)
        try:
            if cols:  # the order's records are in range: "clip" spares numpy a buffered copy
                for n, col in cols.items():
                    np.take(col, recs, axis=0, out=out[n][:size], mode="clip")
            else:
                self._gather(ords, recs, size, start,
                             out={n: out[n] for n in self.record.fields})
        finally:
            self._passed(start)
        self._last_rows = size
        if rows > size:
            for n in self.record.fields:
                out[n][size:rows] = 0
        _fill_meta(meta, size, rows, start, ords, recs)
        return rows if padded else size

    def _next_into_from_pool(self, out: Mapping[str, np.ndarray],
                             meta: Mapping[str, np.ndarray], padded: bool) -> int:
        try:
            batch = self._next_from_pool(raw=True)
        except StopIteration:
            return 0
        rows, size = len(batch), batch._size
        for n in self.record.fields:
            a = batch[n]
            out[n][:rows] = a.cpu().numpy() if hasattr(a, "cpu") else a
        _fill_meta(meta, size, rows, batch._pos0, batch._ordinals, batch._records)
        return rows if padded else size
