"""One batch from one or more datasets: one gather per field per source."""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..order._schedule import by_part
from ..records._ragged import Ragged
from ._collate import empty


def gather(
    datasets: list,
    fields: Mapping[str, Any],
    ords: np.ndarray,
    recs: np.ndarray,
    rows: int,
    positions: np.ndarray | None,
    context: int,
    check_values: bool,
    out: dict[str, np.ndarray] | None = None,
    many: Any = None,
) -> dict[str, np.ndarray]:
    """The fields of records ``recs`` of datasets ``ords``: fixed fields stacked into
    ``rows`` rows (padding rows hold the pad values, see ``_collate``), ragged fields as
    ``Ragged`` columns of the real rows (``_collate.collate`` pads them).

    ``positions`` (the rows' positions in the whole pass, see ``Loader._seeds``) and
    ``context`` (the pass) seed mapped datasets' per-example generators; None when no
    dataset is mapped. With ``out``, the rows are written into the given arrays
    (padding is left to the caller). ``many``: the datasets' columns prepared for
    reading as one (``_many.ManyCache.get``), tried first.
    """
    size = len(recs)
    if many is not None and size:
        got = many.gather(fields, ords, recs, rows, positions, context, out)
        if got is not None:
            return got
    if len(datasets) == 1 or (size and ords.min() == ords.max()):
        ds = datasets[int(ords[0]) if size else 0]
        if out is None and rows == size:
            return ds.getitems(
                recs, check_values=check_values, positions=positions, context=context
            )
        target: dict[str, Any] = out if out is not None else empty(fields, rows)
        got = ds.getitems(
            recs,
            check_values=check_values,
            out=target,
            positions=positions,
            context=context,
            in_range=True,
        )
        for n, col in got.items():
            if isinstance(col, Ragged):
                target[n] = col
        return target
    target = dict(out) if out is not None else empty(fields, rows)
    parts: dict[str, list[tuple[np.ndarray, Ragged]]] = {}
    for o, at in by_part(ords, len(datasets)):  # many sources: one sort, not a scan each
        sel = np.arange(size)[at] if isinstance(at, slice) else at
        cols = datasets[o].getitems(
            recs[sel],
            check_values=check_values,
            positions=None if positions is None else positions[sel],
            context=context,
        )
        for n, col in cols.items():
            if isinstance(col, Ragged):
                parts.setdefault(n, []).append((sel, col))
            else:
                target[n][sel] = col
    for n, pieces in parts.items():  # the sources' examples back in the batch's order
        rows_of = np.concatenate([sel for sel, _ in pieces])
        back = np.empty_like(rows_of)
        back[rows_of] = np.arange(len(rows_of))
        target[n] = Ragged.concat([col for _, col in pieces]).take(back)  # type: ignore[assignment]
    return target


def take_mixed(
    sources: Sequence[Mapping[str, np.ndarray]],
    ords: np.ndarray,
    recs: np.ndarray,
    out: Mapping[str, np.ndarray] | None = None,
) -> dict[str, np.ndarray]:
    """Rows ``recs`` of columns ``sources[ords]`` (every source has the same fields, of
    the same dtypes and row shapes), in order: the plain path's gather for a mix. With
    ``out``, written into its arrays' first rows (and those rows returned).

    Each source's rows are taken at once and written to their places in the batch: of
    the numpy ways measured (two memory-mapped files of 1,000,000 rows of 264 bytes,
    batches of 512 drawn evenly from both), this ran at 10.9 M rows/s, a stable sort of
    the ordinals with the groups taken into consecutive rows and put back with one more
    take at 9.3 M, boolean masks at 9.0 M, and a compiled per-row copy (numba) at 12.1 M
    (not worth a kernel); numpy's gather from one file of all 2,000,000 rows, 15.3 M.
    A chunk of many batches (``_STAGED`` rows or more) is taken source by source into
    consecutive rows of a staging buffer of this thread's, then into its places with one
    take from that buffer: 12.2 M rows/s on chunks of 15,872 rows against 11.1 M for the
    writes by index (per batch the staging ran 0.95x); a mix's loader with two threads,
    passes alternated in one process, 9.11 against 8.68 M rows/s (medians of 8)."""
    size = len(recs)
    one = size == 0 or (ords[0] == ords[-1] and not (ords != ords[0]).any())
    if one and out is None:
        # one source (a mix's runs, a batch of one part): a plain take
        first = sources[int(ords[0]) if size else 0]
        return {n: col.take(recs, axis=0) for n, col in first.items()}
    if out is None:
        got = {n: np.empty((size, *c.shape[1:]), c.dtype) for n, c in sources[0].items()}
    else:
        got = {n: out[n][:size] for n in sources[0]}
    if one:
        for n, col in sources[int(ords[0]) if size else 0].items():
            # the order's records are in range: "clip" spares numpy a buffered copy
            np.take(col, recs, axis=0, out=got[n], mode="clip")
        return got
    groups = by_part(ords, len(sources))  # many sources: one sort, not a scan each
    if size < _STAGED:
        for o, sel in groups:
            rows = recs[sel]
            for n, col in sources[o].items():
                got[n][sel] = col.take(rows, axis=0)
        return got
    staged = _staging(got)
    back = np.empty(size, np.intp)  # each row's place in the staging buffer
    at = 0
    for o, sel in groups:
        k = len(recs[sel]) if isinstance(sel, slice) else len(sel)
        back[sel] = np.arange(at, at + k)
        rows = recs[sel]
        for n, col in sources[o].items():
            np.take(col, rows, axis=0, out=staged[n][at : at + k], mode="clip")
        at += k
    for n, a in got.items():
        np.take(staged[n], back, axis=0, out=a, mode="clip")
    return got


_STAGED = 4096
_local = threading.local()


def _staging(like: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """This thread's staging arrays for rows like ``like``'s (kept for the next chunk: a
    fresh 4 MB array a chunk would cost its page faults)."""
    held = getattr(_local, "staged", None)
    if held is None or any(
        n not in held
        or held[n].dtype != a.dtype
        or held[n].shape[1:] != a.shape[1:]
        or len(held[n]) < len(a)
        for n, a in like.items()
    ):
        held = _local.staged = {n: np.empty(a.shape, a.dtype) for n, a in like.items()}
    return held
