"""One batch from one or more datasets: one gather per field per source."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

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
) -> dict[str, np.ndarray]:
    """The fields of records ``recs`` of datasets ``ords``, stacked (collated by
    ``_collate``: zero-padded to ``rows``).

    ``positions`` (the rows' positions in the whole pass, see ``Loader._seeds``) and
    ``context`` (the pass) seed mapped datasets' per-example generators; None when no
    dataset is mapped. With ``out``, the rows are written into the given arrays
    (padding is left to the caller).
    """
    size = len(recs)
    if len(datasets) == 1 or (size and ords.min() == ords.max()):
        ds = datasets[int(ords[0]) if size else 0]
        if out is None and rows == size:
            return ds.getitems(
                recs, check_values=check_values, positions=positions, context=context
            )
        target = out if out is not None else empty(fields, rows)
        ds.getitems(
            recs,
            check_values=check_values,
            out=target,
            positions=positions,
            context=context,
            in_range=True,
        )
        return target
    target = out if out is not None else empty(fields, rows)
    for o in np.unique(ords):
        sel = np.flatnonzero(ords == o)
        cols = datasets[int(o)].getitems(
            recs[sel],
            check_values=check_values,
            positions=None if positions is None else positions[sel],
            context=context,
        )
        for n, col in cols.items():
            target[n][sel] = col
    return target
