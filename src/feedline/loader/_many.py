"""A batch drawn from many sources' columns read as one: the general path's gather over a
manifest's shards (or any concat or mix of unmapped datasets whose columns are arrays or
ragged columns in memory or memory-mapped).

Read source by source, a batch of 512 rows over 1,024 shards of token lists was about
400 ``getitems`` calls (each its bounds, its file's truncation check and its own gather
of offsets and spans): 0.05 M rows/s, against 5.4 M from one file. Here each ragged
field's spans of every source are located and copied by one C call over the batch
(``_base.spans.take_mixed``), each fixed field's rows by the plain path's row copies
(``_base.rowcopy`` with the sources' buffers taken once, or numpy's ``take_mixed``), and
the files of the sources present are checked for a truncation in one C call (an
``lseek`` each; a file that fails is checked again by its own column, whose error is the
one raised). The rows, lengths and errors are those of the source-by-source read, which
serves whatever this cannot (maps, checks of values, remote files, fields with several
varying axes, TensorDatasets, a source that shrank).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from .._base import rowcopy, spans
from ..records._ragged import Ragged, utf8_problem
from ..sources._watched import columns_changed
from ._collate import empty
from ._gather import take_mixed

# Fewer sources than this are read source by source (their calls cost less than
# preparing): a mix of two files keeps the way it had.
MIN_SOURCES = 8


class ManySources:
    """The columns of ``datasets`` (unmapped, the same fields) prepared for reading as
    one; ``ready`` is False where they cannot be (see the module)."""

    def __init__(self, datasets: list, fields: Mapping[str, Any]) -> None:
        self.ready = False
        self._fixed: list[str] = []
        self._ragged: dict[str, tuple[Any, np.dtype, int, bool]] = {}
        self._files: list[Any] = []  # a ragged file column of each source, or None
        if not spans.available() or len(datasets) < MIN_SOURCES:
            return
        cols = []
        for ds in datasets:
            if ds._maps or ds._seen is not None or ds._shrunk:
                return
            c = ds._cols if ds._cols is not None else ds._mapped_columns
            if c is None or set(c) != set(fields):
                return
            cols.append(c)
        for name, f in fields.items():
            first = cols[0][name]
            if not f.ragged:
                if not all(
                    isinstance(c[name], np.ndarray)
                    and c[name].dtype == first.dtype
                    and c[name].shape[1:] == first.shape[1:]
                    for c in cols
                ):
                    return
                self._fixed.append(name)
                continue
            ragged = [c[name] for c in cols]
            if not all(_whole(r, first) for r in ragged):
                return
            inner = 1
            for d in first.template:
                inner *= 1 if d is None else d
            if sum(d is None for d in first.template) != 1 or not inner:
                return  # lengths from counts: one varying axis
            strings = any(getattr(r, "checks_utf8", False) for r in ragged)
            prepared = spans.prepare(
                tuple(r.values for r in ragged), tuple(r.offsets for r in ragged)
            )
            self._ragged[name] = (prepared, first.values.dtype, inner, strings)
        self._files = [
            next((c[n] for n in self._ragged if hasattr(c[n], "descriptor")), None) for c in cols
        ]
        held = [f.descriptor() if f is not None else None for f in self._files]
        self._fds = np.array([-1 if h is None else h[0] for h in held], dtype=np.int64)
        self._sizes = np.array([0 if h is None else h[1] for h in held], dtype=np.int64)
        self._checked = np.array([h is not None for h in held])
        if any(f is not None and h is None for f, h in zip(self._files, held)):
            return  # a remote file's column: its own reads
        self._cols = tuple({n: c[n] for n in self._fixed} for c in cols)
        self._prepared = None
        arrays = [c[n] for c in self._cols for n in self._fixed]
        if arrays and rowcopy.available() and rowcopy.copyable(arrays):
            self._prepared = rowcopy.prepare(self._cols)
        self.ready = True

    def gather(
        self,
        fields: Mapping[str, Any],
        ords: np.ndarray,
        recs: np.ndarray,
        rows: int,
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
        for name, (prepared, dtype, inner, strings) in self._ragged.items():
            values, counts = spans.take_mixed(prepared, ords, recs, dtype)
            offsets = np.zeros(size + 1, dtype=np.int64)
            np.cumsum(counts, out=offsets[1:])
            if strings and utf8_problem(values, offsets) is not None:
                return None
            lengths = counts // inner if inner != 1 else counts
            template = fields[name].shape if fields[name].kind == "array" else (None,)
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


def many_sources(loader: Any) -> ManySources | None:
    """The prepared columns of ``loader``'s datasets (kept on the loader until a dataset's
    columns are assigned again), or None where they cannot be read as one."""
    datasets = loader._datasets
    if len(datasets) < MIN_SOURCES or loader.options.check_values:
        return None
    now = columns_changed()
    held = loader.__dict__.get("_many")
    if held is None or held[0] != now or held[1] is not datasets:
        held = (now, datasets, ManySources(datasets, loader.record.fields))
        loader._many = held
    return held[2] if held[2].ready else None
