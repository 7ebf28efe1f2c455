"""One batch from one or more datasets: one gather per field per source."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

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
) -> dict[str, np.ndarray]:
    """The fields of records ``recs`` of datasets ``ords``: fixed fields stacked into
    ``rows`` rows (padding rows hold the pad values, see ``_collate``), ragged fields as
    ``Ragged`` columns of the real rows (``_collate.collate`` pads them).

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
    for o in np.unique(ords):
        sel = np.flatnonzero(ords == o)
        cols = datasets[int(o)].getitems(
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
