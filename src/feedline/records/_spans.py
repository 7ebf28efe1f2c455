"""A ``Ragged`` given as a column, checked whole (``check_spans``), and the names the
checks give a batch's rows (an item, the batch of items from one)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import ShapeError
from ._ragged import Ragged, _fixed_size, utf8_problem

if TYPE_CHECKING:
    from ._field import Field


def _span_item(indices: Any, row: int) -> str:
    """A column's ``row`` named as its item (the row itself where ``indices`` do not say)."""
    return _item(row if indices is None else _row_item(indices, row))


def check_spans(cls: Any, f: Field, column: Ragged, indices: Any) -> None:
    """A ``Ragged`` given as a column is whole: ``n + 1`` offsets, nondecreasing, within
    its values (from any first offset: a column over part of an array), ``n x k`` shapes
    >= 0 that hold each example's values, and a ``str`` column's bytes UTF-8 (the checks
    ``fl.recfile.write`` makes of the columns it writes)."""
    at = f"{f.where}: {cls.__name__} field `{f.name}`"
    offsets, shapes = np.asarray(column.offsets), np.asarray(column.shapes)
    k = len(f.varying) if f.kind == "array" else 1
    n = len(offsets) - 1 if offsets.ndim == 1 else -1
    if (
        n < 0
        or offsets.dtype.kind not in "iu"
        or shapes.dtype.kind not in "iu"
        or shapes.shape != (n, k)
    ):
        raise ShapeError(
            f"{at} of {_rows(indices)}: a Ragged of {max(n, 0)} rows needs {max(n, 0) + 1} "
            f"integer offsets and {max(n, 0)} x {k} integer shapes, got offsets "
            f"{offsets.shape} of {offsets.dtype} and shapes {shapes.shape} of {shapes.dtype}"
        )
    if n == 0:
        return
    offsets = offsets.astype(np.int64, copy=False)
    sizes = np.diff(offsets)
    problem = None
    if int(offsets[0]) < 0:
        problem = (0, f"its offsets start at {int(offsets[0])}, below 0")
    elif (sizes < 0).any():
        r = int(np.argmax(sizes < 0))
        problem = (r, f"its offsets decrease ({int(offsets[r])} then {int(offsets[r + 1])})")
    elif (shapes < 0).any():
        r = int(np.argmax((shapes < 0).any(axis=1)))
        problem = (r, f"its shape {shapes[r].tolist()} has a negative length")
    else:
        total = None if column._values is None else len(column._values)  # a view's are
        if total is not None and int(offsets[-1]) > total:  # its source's, checked before
            r = int(np.argmax(offsets[1:] > total))
            problem = (r, f"it ends at value {int(offsets[r + 1])}, past the column's {total}")
        else:
            fixed = _fixed_size(f.shape) if f.kind == "array" else 1  # bytes: 1 a byte
            held = shapes.astype(np.int64).prod(axis=1) * fixed
            if (held != sizes).any():
                r = int(np.argmax(held != sizes))
                problem = (
                    r,
                    f"its shape {shapes[r].tolist()} holds {int(held[r])} values, "
                    f"its offsets {int(sizes[r])}",
                )
    if problem is None and f.kind == "str" and column._values is not None:
        base = offsets - offsets[0]
        bad = utf8_problem(column._values[int(offsets[0]) : int(offsets[-1])], base)
        if bad is not None:
            r = int(np.searchsorted(base, bad, "right")) - 1
            raise ShapeError(
                f"{at} of {_span_item(indices, r)} is not UTF-8 (byte {bad - int(base[r])} of "
                f"the string); a str field holds UTF-8, a bytes field any bytes"
            )
    if problem is not None:
        r, message = problem
        raise ShapeError(f"{at} of {_span_item(indices, r)}: an inconsistent column ({message})")


def _item(index: int | None) -> str:
    return "an item" if index is None or index < 0 else f"item {index}"


def _row_item(indices: Any, row: int) -> int | None:
    """The item index of a batch's ``row`` (None when ``indices`` do not say)."""
    if indices is None or row >= len(indices):
        return None
    return int(np.asarray(indices)[row])


def _rows(indices: Any) -> str:
    if indices is None or len(indices) == 0:
        return "a batch"
    return f"the batch of items from {int(np.asarray(indices)[0])}"
