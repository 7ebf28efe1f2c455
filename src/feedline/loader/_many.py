"""A batch drawn from many sources' columns read as one: the general path's gather over a
manifest's shards (or any concat or mix of datasets whose columns are arrays or ragged
columns in memory or memory-mapped), mapped alike or not at all.

Read source by source, a batch of 512 rows over 1,024 shards of token lists was about
400 ``getitems`` calls (each its bounds, its file's truncation check and its own gather
of offsets and spans): 0.05 M rows/s, against 5.4 M from one file; mapped, each call
also ran its maps apart. Here each ragged field's spans of every source are located and
copied by one C call over the batch (``_base.spans.take_mixed``), each fixed field's
rows by the plain path's row copies (``_base.rowcopy`` with the sources' buffers taken
once, or numpy's ``take_mixed``), the files of the sources present are checked for a
truncation in one C call (an ``lseek`` each; a file that fails is read again by its own
column, whose error is the one raised), and the maps run once over the batch. The rows,
lengths, random numbers (each example's generator is seeded by its position) and errors
are those of the source-by-source read, which serves whatever this cannot: sources
mapped differently, ``check_values``, remote files, sources that locate their items
(Parquet), fields with several varying axes, TensorDatasets, a source that shrank.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from .._base import clock, rowcopy, spans
from ..records._ragged import Ragged, utf8_problem
from ..sources._items import apply_maps
from ..sources._watched import columns_changed
from ._collate import empty
from ._gather import take_mixed

# Two sources already pay: a mix of 2 / 4 .flr files of short token lists (batches of
# 512, 300 batches after the first 300) ran at 4.2 - 4.8 / 3.4 - 4.6 M rows/s read as one
# against 2.5 - 3.0 / 1.8 - 2.3 M source by source. (One source is read as it is.)
MIN_SOURCES = 2


class ManySources:
    """The columns of ``datasets`` (the same fields, mapped alike or unmapped) prepared
    for reading as one; ``ready`` is False where they cannot be (see the module)."""

    def __init__(self, datasets: list, fields: Mapping[str, Any]) -> None:
        self.ready = False
        self._fixed: list[str] = []
        self._ragged: dict[str, tuple[Any, np.dtype, int, bool, tuple]] = {}
        self._maps: tuple | None = None  # (the roots' record, the mapped one, the maps)
        if not spans.available() or len(datasets) < MIN_SOURCES:
            return
        first = datasets[0]
        roots = datasets
        if first._maps:
            if any(
                ds._maps != first._maps
                or not (ds.record is first.record or ds.record.same_schema(first.record))
                for ds in datasets
            ):
                return
            roots = [ds._root for ds in datasets]
            if any(getattr(r.source, "locate", None) is not None for r in roots):
                return  # its errors name where an item lies: read source by source
            self._maps = (roots[0].record, first.record, first._maps)
            fields = roots[0].record.fields
        cols = []
        for ds in roots:
            if ds._maps or ds._seen is not None or ds._shrunk:
                return
            # the roots' own records alike too: a str, a bytes and a uint8 (T,) field are
            # all columns of uint8 spans, and a map is given each example as its record says
            if not (ds.record is roots[0].record or ds.record.same_schema(roots[0].record)):
                return
            c = ds._cols if ds._cols is not None else ds._mapped_columns
            if c is None or set(c) != set(fields):
                return
            cols.append(c)
        self._read_fields = fields
        if not all(self._take(name, f, cols) for name, f in fields.items()):
            return
        files = [
            next((c[n] for n in self._ragged if hasattr(c[n], "descriptor")), None) for c in cols
        ]
        held = [f.descriptor() if f is not None else None for f in files]
        if any(f is not None and h is None for f, h in zip(files, held)):
            return  # a remote file's column: its own reads
        self._fds = np.array([-1 if h is None else h[0] for h in held], dtype=np.int64)
        self._sizes = np.array([0 if h is None else h[1] for h in held], dtype=np.int64)
        self._checked = np.array([h is not None for h in held])
        self._cols = tuple({n: c[n] for n in self._fixed} for c in cols)
        self._prepared = None
        arrays = [c[n] for c in self._cols for n in self._fixed]
        if arrays and rowcopy.available() and rowcopy.copyable(arrays):
            self._prepared = rowcopy.prepare(self._cols)
        self.ready = True

    def _take(self, name: str, f: Any, cols: list) -> bool:
        """Whether field ``name`` of every source can be read as one (and its spans
        prepared when it is ragged)."""
        first = cols[0][name]
        if not f.ragged:
            self._fixed.append(name)
            return all(
                isinstance(c[name], np.ndarray)
                and c[name].dtype == first.dtype
                and c[name].shape[1:] == first.shape[1:]
                for c in cols
            )
        ragged = [c[name] for c in cols]
        if not all(_whole(r, first) for r in ragged):
            return False
        inner = 1
        for d in first.template:
            inner *= 1 if d is None else d
        if sum(d is None for d in first.template) != 1 or not inner:
            return False  # lengths from counts: one varying axis
        strings = any(getattr(r, "checks_utf8", False) for r in ragged)
        prepared = spans.prepare(tuple(r.values for r in ragged), tuple(r.offsets for r in ragged))
        self._ragged[name] = (prepared, first.values.dtype, inner, strings, first.template)
        return True

    def gather(
        self,
        fields: Mapping[str, Any],
        ords: np.ndarray,
        recs: np.ndarray,
        rows: int,
        positions: np.ndarray | None,
        context: int,
        out: dict[str, np.ndarray] | None,
    ) -> dict[str, Any] | None:
        """``_gather.gather``'s result for the rows ``recs`` of sources ``ords``, or None
        where the source-by-source read must run (a string that is not UTF-8, a file that
        may be truncated: that read raises the error naming it)."""
        ords = np.ascontiguousarray(ords, dtype=np.int64)
        recs = np.ascontiguousarray(recs, dtype=np.int64)
        size = len(recs)
        if self._checked.any() and size:
            drawn = np.bincount(ords, minlength=len(self._fds)) > 0
            present = np.flatnonzero(drawn & self._checked)
            if spans.shrunk(self._fds[present], self._sizes[present]) >= 0:
                return None
        if self._maps is None:
            return self._read(fields, ords, recs, rows, out)
        base, record, maps = self._maps
        batch = self._read(self._read_fields, ords, recs, size, None)
        if batch is None:
            return None
        t = clock.perf_counter_ns()
        batch = apply_maps(base, record, maps, batch, recs, positions, context, False)
        clock.add("map", clock.perf_counter_ns() - t)  # the loader's stats
        if out is None and rows == size:
            return batch
        target: dict[str, Any] = dict(out) if out is not None else empty(fields, rows)
        for n, col in batch.items():
            if isinstance(col, Ragged):
                target[n] = col
            else:
                target[n][:size] = col
        return target

    def _read(
        self,
        fields: Mapping[str, Any],
        ords: np.ndarray,
        recs: np.ndarray,
        rows: int,
        out: dict[str, np.ndarray] | None,
    ) -> dict[str, Any] | None:
        """The sources' own fields (``fields``) of the rows, or None (see ``gather``)."""
        size = len(recs)
        target: dict[str, Any] = dict(out) if out is not None else empty(fields, rows)
        if self._fixed:
            dst = {n: target[n] for n in self._fixed}
            if self._prepared is not None:
                task = rowcopy.submit(
                    dst, self._cols, recs, ords, queue=False, prepared=self._prepared
                )
                task.run()
            else:
                take_mixed(self._cols, ords, recs, out=dst)
        for name, (prepared, dtype, inner, strings, template) in self._ragged.items():
            values, counts = spans.take_mixed(prepared, ords, recs, dtype)
            offsets = np.zeros(size + 1, dtype=np.int64)
            np.cumsum(counts, out=offsets[1:])
            if strings and utf8_problem(values, offsets) is not None:
                return None
            lengths = counts // inner if inner != 1 else counts
            target[name] = Ragged(values, offsets, lengths[:, None], template)
        return target


def _whole(col: Any, first: Any) -> bool:
    """Whether ``col`` is a whole ragged column (not a view) of arrays C can read, of the
    first's dtype and template."""
    if not isinstance(col, Ragged) or col._values is None:
        return False
    values, offsets = col._values, col.offsets
    return (
        isinstance(values, np.ndarray)
        and isinstance(offsets, np.ndarray)
        and values.flags.c_contiguous
        and offsets.flags.c_contiguous
        and offsets.dtype == np.dtype(np.int64)
        and values.dtype == first._values.dtype
        and not values.dtype.hasobject
        and col.template == first.template
    )


class ManyCache:
    """The ``ManySources`` of one list of datasets (a loader's, a worker's), prepared
    again when a dataset's columns are assigned again (``columns_changed``)."""

    __slots__ = ("_held",)

    def __init__(self) -> None:
        self._held: tuple | None = None

    def get(
        self, datasets: list, fields: Mapping[str, Any], check_values: bool
    ) -> ManySources | None:
        """The prepared columns of ``datasets``, or None where they cannot be read as
        one (or are too few to pay)."""
        if len(datasets) < MIN_SOURCES or check_values:
            return None
        now = columns_changed()
        held = self._held
        if held is None or held[0] != now or held[1] is not datasets:
            held = self._held = (now, datasets, ManySources(datasets, fields))
        return held[2] if held[2].ready else None


def many_sources(loader: Any) -> ManySources | None:
    """The prepared columns of ``loader``'s datasets, or None (``ManyCache.get``)."""
    cache = loader.__dict__.get("_many")
    if cache is None:
        cache = loader._many = ManyCache()
    return cache.get(loader._datasets, loader.record.fields, loader.options.check_values)
