"""``Loader.next_into``: the next batch gathered into arrays the caller owns."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np


class IntoArrays:
    """``next_into`` for ``Loader`` (which provides the claim, the gathers and the pool)."""

    def next_into(self, out: Mapping[str, np.ndarray]) -> int:
        """Gather the next batch into caller-provided arrays; returns its row count.

        ``out`` maps each field to an array of the field's dtype with at least
        ``batch_size`` rows (and, optionally, ``"mask"`` to a bool array that receives the
        batch's mask). Rows past the count are left as they were. 0 marks the end of the
        pass, and every call after it returns 0 until ``reset()`` or a new iteration
        starts the next pass (so threads looping until 0 read one pass together).
        With ``even=True`` every step, an all-padding one included, returns ``batch_size``
        and ``out["mask"]`` is required: it tells the real rows.
        """
        b = self.batch_size
        for n, f in self.record.fields.items():
            a = out.get(n)
            if (a is None or not isinstance(a, np.ndarray) or a.shape[1:] != f.shape
                    or len(a) < b or a.dtype != f.dtype):
                got = None if a is None else (getattr(a, "shape", None), getattr(a, "dtype", None))
                raise ValueError(f"next_into needs out[{n!r}]: a {f.dtype} array of shape "
                                 f"(>= {b}, *{f.shape}), got {got}")
        mask = out.get("mask")
        padded = self.even and self.shard is not None
        if mask is not None and (not isinstance(mask, np.ndarray) or mask.dtype != np.bool_
                                 or mask.ndim != 1 or len(mask) < b):
            raise ValueError(f"out['mask'] must be a bool array of >= {b} rows")
        if padded and mask is None:
            raise ValueError("with even=True, next_into needs out['mask'] (a bool array): "
                             "short ranks take steps of padding only")
        pool = self._use_pool()
        if pool is not None and not self._transform_in_workers:
            # the workers make the fields' batches ahead: the next is one of theirs
            return self._next_into_from_pool(out, mask, padded)
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
        if mask is not None:
            mask[:rows] = False
            mask[:size] = True
        return rows if padded else size

    def _next_into_from_pool(self, out: Mapping[str, np.ndarray], mask: np.ndarray | None,
                             padded: bool) -> int:
        try:
            batch = self._next_from_pool(raw=True)
        except StopIteration:
            return 0
        rows, size = len(batch), batch.size
        for n in self.record.fields:
            a = batch[n]
            out[n][:rows] = a.cpu().numpy() if hasattr(a, "cpu") else a
        if mask is not None:
            mask[:rows] = False
            mask[:size] = True
        return rows if padded else size
