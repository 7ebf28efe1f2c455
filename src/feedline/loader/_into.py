"""``Loader.next_into``: the next batch gathered into arrays the caller owns (the
arrays are checked here before a batch is claimed; the plans fill them)."""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

import numpy as np

from ._collate import fill_padding

# What ``next_into(out, meta=...)`` fills: the batch's metadata (``batch.meta``), by name.
_META_DTYPES = {
    "mask": np.bool_,
    "positions": np.int64,
    "source_ordinals": np.int64,
    "record_indices": np.int64,
}


def _check_meta(meta: Mapping[str, np.ndarray], b: int) -> None:
    for name, a in meta.items():
        want = _META_DTYPES.get(name)
        if want is None:
            raise ValueError(
                f"next_into fills the metadata {', '.join(_META_DTYPES)}, not {name!r}"
            )
        if (
            not isinstance(a, np.ndarray)
            or a.dtype != want
            or a.ndim != 1
            or len(a) < b
            or not a.flags.writeable
        ):
            raise ValueError(
                f"meta[{name!r}] must be a writable {np.dtype(want)} array of >= {b} rows"
            )


def fill_meta(
    meta: Mapping[str, np.ndarray],
    size: int,
    rows: int,
    start: int,
    ords: np.ndarray,
    recs: np.ndarray,
) -> None:
    """``meta``'s arrays get the batch's metadata, as ``batch.meta`` has it."""
    for name, a in meta.items():
        if name == "mask":
            a[:size] = True
            a[size:rows] = False
            continue
        if name == "positions":
            a[:size] = np.arange(start, start + size)
        else:
            a[:size] = ords if name == "source_ordinals" else recs
        a[size:rows] = -1


def check(
    loader: Any, out: Mapping[str, np.ndarray], meta: Mapping[str, np.ndarray] | None
) -> tuple[Mapping[str, np.ndarray], dict[str, np.ndarray], bool]:
    """``next_into``'s arrays, checked before a batch is claimed (so a buffer that cannot
    take a batch loses none): ``(out, meta, padded)``."""
    b = loader.options.batch_size
    for n, f in loader.record.fields.items():
        if f.ragged:
            raise ValueError(
                f"next_into fills arrays of fixed shapes, and field `{n}` is {f.declared} "
                f"{f.type_name}, whose batches vary in shape: iterate the loader instead"
            )
        a = out.get(n)
        if (
            a is None
            or not isinstance(a, np.ndarray)
            or a.shape[1:] != f.shape
            or len(a) < b
            or a.dtype != f.dtype
            or not a.flags.writeable
        ):
            got = (
                None
                if a is None
                else (
                    getattr(a, "shape", None),
                    getattr(a, "dtype", None),
                    "writable"
                    if getattr(getattr(a, "flags", None), "writeable", False)
                    else "read-only",
                )
            )
            raise ValueError(
                f"next_into needs out[{n!r}]: a writable {f.dtype} array of "
                f"shape (>= {b}, *{f.shape}), got {got}"
            )
    meta = dict(meta) if meta is not None else {}
    if "mask" in out and "mask" not in loader.record.fields and "mask" not in meta:
        warnings.warn(
            "next_into(out) with out['mask']: the mask is metadata, pass it as "
            "next_into(out, meta={'mask': ...})",
            DeprecationWarning,
            stacklevel=3,
        )
        meta["mask"] = out["mask"]
    _check_meta(meta, b)
    padded = loader.options.even and loader.options.shard is not None
    if padded and "mask" not in meta:
        raise ValueError(
            "with even=True, next_into needs meta={'mask': a bool array}: "
            "short ranks take steps of padding only"
        )
    return out, meta, padded


def finish(
    loader: Any,
    claim: Any,
    out: Mapping[str, np.ndarray],
    meta: Mapping[str, np.ndarray],
    padded: bool,
) -> int:
    """After the claim's rows were written into ``out``: zero the padding rows, fill the
    metadata; the count ``next_into`` returns."""
    size = claim.size
    rows = loader.rows_for(size)
    fields = loader.record.fields
    fill_padding({n: out[n] for n in fields}, fields, size, rows)
    fill_meta(meta, size, rows, claim.start, claim.ords, claim.recs)
    return rows if padded else size
