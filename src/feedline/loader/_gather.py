"""One batch from one or more datasets: one gather per field per source."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np


def gather(datasets: list, fields: Mapping[str, Any], ords: np.ndarray, recs: np.ndarray,
           rows: int, start: int, context: int, check_values: bool,
           out: dict[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
    """The fields of records ``recs`` of datasets ``ords``, stacked; zero-padded to ``rows``.

    ``start`` is the first row's position in the order (rows are consecutive positions)
    and ``context`` the pass: both seed mapped datasets' per-example generators. With
    ``out``, the rows are written into the given arrays (padding is left to the caller).
    """
    size = len(recs)
    # Positions seed mapped datasets' generators; others never look at them.
    mapped = False
    for ds in datasets:
        mapped = mapped or ds.mapped
    positions = np.arange(start, start + size, dtype=np.int64) if mapped else None
    if len(datasets) == 1 or (size and ords.min() == ords.max()):
        ds = datasets[int(ords[0]) if size else 0]
        if out is None and rows == size:
            return ds.getitems(recs, check_values=check_values, positions=positions,
                               context=context)
        target = out if out is not None else {
            n: np.zeros((rows, *f.shape), dtype=f.dtype) for n, f in fields.items()}
        ds.getitems(recs, check_values=check_values, out=target, positions=positions,
                    context=context, in_range=True)
        return target
    target = out if out is not None else {
        n: np.zeros((rows, *f.shape), dtype=f.dtype) for n, f in fields.items()}
    for o in np.unique(ords):
        sel = np.flatnonzero(ords == o)
        cols = datasets[int(o)].getitems(
            recs[sel], check_values=check_values,
            positions=None if positions is None else positions[sel], context=context)
        for n, col in cols.items():
            target[n][sel] = col
    return target
