"""Collation: a batch's examples laid out field by field, padded to the batch's rows.

A fixed field's examples are stacked (batch axis first) into arrays of ``rows`` rows,
written in place by the read stage; the rows past the real examples (``pad``, even
steps across ranks) hold the field's pad value (0 unless it declares another), and
``batch.meta.mask`` tells them apart.

A varying field arrives as a ``Ragged`` column and is padded here: each varying dim to
the longest example of the batch (rounded up by ``pad_to_multiple``, or to the smallest
of the ``pad_to`` boundaries that holds it), with the field's pad value, and the real
lengths reported in ``batch.meta.lengths[dim]`` (one int per row, 0 on padding rows).
A ``bytes`` or ``str`` field becomes a list of ``bytes`` / ``str`` (``b""`` / ``""`` on
padding rows). Every result is a function of the batch's examples and the options.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ..errors import ShapeError
from ..records._ragged import Ragged


def rows_for(size: int, batch_size: int, padded: bool) -> int:
    """The rows of a batch of ``size`` real examples: all of ``batch_size`` when the
    loader pads (``pad``, or even steps across ranks), else ``size``."""
    return batch_size if padded else size


def empty(fields: Mapping[str, Any], rows: int) -> dict[str, np.ndarray]:
    """Arrays of ``rows`` rows for the record's fixed fields, holding their pad values (a
    ragged field's column is made by the read stage, then padded by ``collate``)."""
    return {
        n: np.full((rows, *f.shape), f.pad, dtype=f.dtype)
        if f.pad != 0
        else np.zeros((rows, *f.shape), dtype=f.dtype)
        for n, f in fields.items()
        if not f.ragged
    }


def fill_padding(
    arrays: Mapping[str, np.ndarray], fields: Mapping[str, Any], size: int, rows: int
) -> None:
    """Set the padding rows ``size .. rows`` of arrays written in place to their fields'
    pad values."""
    if rows > size:
        for n, a in arrays.items():
            f = fields.get(n)
            a[size:rows] = 0 if f is None else f.pad


def target_length(longest: int, dim: str, pad_to_multiple: int | None, pad_to: Any) -> int:
    """The length a batch pads dim ``dim`` to when its longest example has ``longest``."""
    if pad_to_multiple is not None:
        return -(-longest // pad_to_multiple) * pad_to_multiple
    if pad_to is not None:
        bounds = pad_to.get(dim) if isinstance(pad_to, Mapping) else pad_to
        if bounds is None:
            return longest
        for b in bounds:
            if b >= longest:
                return int(b)
        raise ShapeError(
            f"pad_to: a batch's longest {dim} is {longest}, more than the largest "
            f"boundary {bounds[-1]} (pad_to={tuple(bounds)}): add a boundary, or give {dim} "
            f"a maximum (fl.Varying(max=..., truncate=True))"
        )
    return longest


def collate(
    fields: Mapping[str, Any],
    batch: dict[str, Any],
    size: int,
    rows: int,
    pad_to_multiple: int | None = None,
    pad_to: Any = None,
    nested: bool = False,
) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """The batch's ragged columns padded (see the module doc): (fields, lengths). With
    ``nested``, varying array fields stay ``Ragged`` (made nested tensors on delivery)."""
    lengths: dict[str, np.ndarray] = {}
    ragged = [(n, c) for n, c in batch.items() if isinstance(c, Ragged)]
    if not ragged:
        return batch, lengths
    out = dict(batch)
    for name, col in ragged:
        f = fields[name]
        if f.kind != "array":
            values: list[Any] = col.blobs() if f.kind == "bytes" else col.strings()
            if rows > len(values):
                values.extend([f.pad] * (rows - len(values)))
            out[name] = values
            continue
        for k, dim in enumerate(f.varying):
            if dim not in lengths:
                length = np.zeros(rows, dtype=np.int64)
                length[: len(col)] = col.shapes[:, k]
                lengths[dim] = length
    targets = {
        dim: target_length(int(length.max()) if rows else 0, dim, pad_to_multiple, pad_to)
        for dim, length in lengths.items()
    }
    for name, col in ragged:
        f = fields[name]
        if f.kind == "array" and nested:
            out[name] = _with_empty_rows(col, rows)
        elif f.kind == "array":
            to = {
                axis: targets[str(d)]
                for axis, (d, s) in enumerate(zip(f.dims, f.shape))
                if s is None
            }
            out[name] = col.padded(rows, to, f.pad)
    return out, lengths


def _with_empty_rows(col: Ragged, rows: int) -> Ragged:
    """``col`` with examples of length 0 added up to ``rows`` (a padded batch's rows)."""
    extra = rows - len(col)
    if extra <= 0:
        return col
    values = col.values
    offsets = np.concatenate([col.offsets, np.full(extra, col.offsets[-1], dtype=np.int64)])
    shapes = np.concatenate([col.shapes, np.zeros((extra, col.shapes.shape[1]), np.int64)])
    return Ragged(values, offsets, shapes, col.template)


def check_pad_to(record: Any, pad_to: Any) -> None:
    """``pad_to``'s dims (a dict's keys) are varying dims of the record."""
    if not pad_to or not isinstance(pad_to[0], tuple):
        return
    varying = {d for f in record.fields.values() for d in f.varying}
    for dim, _ in pad_to:
        if dim not in varying:
            raise ValueError(
                f"pad_to[{dim!r}]: boundaries for a varying dim of the record, and "
                f"{record.__name__}'s are {sorted(varying) or 'none'}"
            )


def check_nested(record: Any) -> None:
    """``nested=True`` holds: every varying array field has one varying axis, the first
    (the jagged layout of a torch nested tensor)."""
    for f in record.fields.values():
        if f.kind == "array" and f.ragged and (f.shape[0] is not None or None in f.shape[1:]):
            raise ValueError(
                f"nested=True: a torch nested tensor has one varying axis, the first; "
                f"field `{f.name}` is {f.declared}"
            )
