"""A batch's place in shared memory: the layout of one slot of a worker pool's ring.

A worker writes a batch into a slot; the loader reads it out (``_workers``). A slot
holds one batch of ``batch_size`` rows, in three regions:

====================  ===============================================================
region                what
====================  ===============================================================
fixed fields          each fixed field's rows, ``(batch_size, *shape)``, C order
ragged index          each ragged field's offsets (``batch_size + 1`` int64) and
                      shapes (``batch_size x k`` int64, ``k`` varying axes)
values                the ragged columns' values, one after another (64-byte aligned),
                      in the room the slot has: its capacity, which the pool grows
====================  ===============================================================

A record with no ragged field has no ragged index and no values region, as before
ragged fields existed. The ragged columns' offsets and shapes always fit (a batch has
at most ``batch_size`` rows); a column whose values do not fit the slot's capacity
travels in the worker's message instead (pickled: one raw buffer), and its size tells
the pool how far to grow the slots (``grown``), so the next batches fit.

Why shared memory and not the pipe: the loader's CPU time per batch, the batch collated
as the loader does (``benchmarks/varlen_workers.py --transport``, 2 shared cores, best of
three): 64 blobs of ~100 KB, 1.3 ms through a slot, 2.6 ms as raw bytes over the pipe,
5.4 ms pickled (another run: 1.2, 3.4 and 7.4 ms); 64 sequences of ~256 int32 tokens,
73, 90 and 78 us (64 KB of values: the message costs more than the copy). Through a
slot the worker does the copying, and the loader reads the values in place.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ..records._ragged import Ragged

# The values region a slot starts with, when the record has ragged fields (a batch of
# 64 sequences of 4,096 int32 tokens fits).
VALUES_START = 1 << 20
# The most a slot's values region grows to: a batch with more ragged values than this
# travels in the worker's message (workers x prefetch slots of this size would
# otherwise fill /dev/shm, which is 64 MB in a default Docker container).
VALUES_MAX = 64 << 20


def _align(n: int) -> int:
    return -(-n // 64) * 64


def grown(need: int) -> int:
    """The capacity to grow the slots to after a batch needed ``need`` bytes of values
    (half as much again, so batches a little larger fit too); 0 when no slot should hold
    that much (see ``VALUES_MAX``)."""
    want = _align(need + need // 2)
    return min(want, VALUES_MAX) if need <= VALUES_MAX else 0


class Layout:
    """Where each field of a batch lies in a slot (see the module doc); picklable, sent
    to the workers."""

    def __init__(self, fields: Mapping[str, Any], batch_size: int) -> None:
        self.batch_size = batch_size
        # fixed fields: (name, dtype, shape, offset)
        self.fixed: list[tuple[str, str, tuple[int, ...], int]] = []
        # ragged fields: (name, dtype of values, template, offsets' offset, shapes' offset)
        self.ragged: list[tuple[str, str, tuple[int | None, ...], int, int]] = []
        off = 0
        for name, f in fields.items():
            if f.ragged:
                continue
            self.fixed.append((name, f.dtype.str, tuple(f.shape), off))
            nbytes = batch_size * f.dtype.itemsize * int(np.prod(f.shape, dtype=np.int64))
            off = _align(off + nbytes)
        for name, f in fields.items():
            if not f.ragged:
                continue
            if f.kind == "array":
                dtype, template = f.dtype.str, tuple(f.shape)
            else:  # bytes, or str as UTF-8
                dtype, template = np.dtype(np.uint8).str, (None,)
            k = sum(d is None for d in template)
            o_off = off
            s_off = _align(o_off + 8 * (batch_size + 1))
            off = _align(s_off + 8 * batch_size * k)
            self.ragged.append((name, dtype, template, o_off, s_off))
        self.values_off = off  # where the values region starts

    @property
    def has_ragged(self) -> bool:
        return bool(self.ragged)

    def fixed_views(self, buf: Any, rows: int) -> dict[str, np.ndarray]:
        """The fixed fields' first ``rows`` rows in the slot ``buf``."""
        return {
            name: np.ndarray((rows, *shape), dtype=np.dtype(dtype), buffer=buf, offset=off)
            for name, dtype, shape, off in self.fixed
        }

    def _index(self, buf: Any, o_off: int, s_off: int, k: int, n: int) -> tuple:
        offsets = np.ndarray(n + 1, dtype=np.int64, buffer=buf, offset=o_off)
        shapes = np.ndarray((n, k), dtype=np.int64, buffer=buf, offset=s_off)
        return offsets, shapes

    def write_ragged(
        self, buf: Any, capacity: int, columns: Mapping[str, Any]
    ) -> tuple[dict[str, tuple[int, int, Any]], int]:
        """In a worker: the batch's ragged ``columns`` written into the slot ``buf``, whose
        values region holds ``capacity`` bytes. Returns what the loader needs to read
        them, ``{name: (rows, values, where)}`` (``where``: the values' offset in the
        slot, or the values themselves when they did not fit), and the bytes all of them
        needed."""
        info: dict[str, tuple[int, int, Any]] = {}
        pos, end, need = self.values_off, self.values_off + capacity, 0
        for name, dtype, template, o_off, s_off in self.ragged:
            col = columns[name]
            if not isinstance(col, Ragged):
                raise TypeError(f"field `{name}`: a batch's column should be ragged, got {col!r}")
            n = len(col)
            k = sum(d is None for d in template)
            offsets, shapes = self._index(buf, o_off, s_off, k, n)
            first = int(col.offsets[0])
            np.subtract(col.offsets, first, out=offsets)
            shapes[:] = col.shapes
            count = int(offsets[-1])
            values = col.values[first : first + count]
            nbytes = count * np.dtype(dtype).itemsize
            need += _align(nbytes)
            if pos + nbytes <= end:
                np.ndarray(count, dtype=np.dtype(dtype), buffer=buf, offset=pos)[:] = values
                info[name] = (n, count, pos)
                pos = _align(pos + nbytes)
            else:  # over the pipe, this once (the pool grows the slots)
                info[name] = (n, count, np.ascontiguousarray(values, dtype=np.dtype(dtype)))
        return info, need

    def read(
        self, buf: Any, info: Mapping[str, tuple[int, int, Any]] | None, copy_values: bool
    ) -> dict[str, Any]:
        """In the loader: the batch in the slot ``buf``, its fixed fields copied out
        (``batch_size`` rows) and its ragged columns as ``Ragged``. Their values are views
        of the slot unless ``copy_values`` (a view must not outlive the slot's use)."""
        out: dict[str, Any] = {
            name: a.copy() for name, a in self.fixed_views(buf, self.batch_size).items()
        }
        if info is None:
            return out
        for name, dtype, template, o_off, s_off in self.ragged:
            n, count, where = info[name]
            k = sum(d is None for d in template)
            offsets, shapes = self._index(buf, o_off, s_off, k, n)
            if isinstance(where, np.ndarray):
                values = where
            else:
                values = np.ndarray(count, dtype=np.dtype(dtype), buffer=buf, offset=where)
                if copy_values:
                    values = values.copy()
            out[name] = Ragged(values, offsets.copy(), shapes.copy(), template)
        return out
