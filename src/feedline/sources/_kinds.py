"""What a dataset's source is and how its columns are read: the kinds of source
(a torch ``TensorDataset``, an HF dataset, a dict of arrays), data.nu's flat form of
``from_arrays``, item indices, and the rows of ragged and fixed columns."""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

from ..errors import BoundsError, RecordError, ShapeError
from ..records import make_record
from ..records._check import to_numpy
from ..records._ragged import Ragged

_to_numpy = to_numpy


def _is_tensor_dataset(src: Any) -> bool:
    """A torch ``TensorDataset`` whose items are its rows (not a subclass that changes them)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return False
    TensorDataset = torch.utils.data.TensorDataset
    cls = type(src)
    return (
        isinstance(src, TensorDataset)
        and cls.__getitem__ is TensorDataset.__getitem__
        and cls.__len__ is TensorDataset.__len__
        and not hasattr(cls, "__getitems__")
    )


def _versions(tensors: tuple) -> list[int]:
    """The tensors' version counters (torch bumps one at every in-place change)."""
    return [t._version for t in tensors]


def _is_hf_dataset(src: Any) -> bool:
    return type(src).__module__.startswith("datasets.") and hasattr(src, "with_format")


_to_numpy = to_numpy

# Items per batch when ``check_values`` reads a source that is not in memory: at most
# this many, and at most ``_CHECK_BYTES`` of decoded fields, so large items stay bounded.
_CHECK_ITEMS = 65_536
_CHECK_BYTES = 64 << 20


def _column(value: Any, where: str) -> np.ndarray:
    """``value`` as a numpy array; ragged data is a ``ShapeError`` saying ``where``."""
    try:
        return _to_numpy(value)
    except (ValueError, TypeError) as e:  # numpy's "inhomogeneous shape", and the like
        raise ShapeError(f"{where} is not a rectangular array: {e}") from e


# data.nu's flat form: the number of examples, features and labels per example.
_FLAT_SIZES = ("n", "d", "l")


def _is_scalar(value: Any) -> bool:
    """Whether ``value`` has no axes (a number, not a field's array)."""
    try:
        return np.ndim(value) == 0
    except (ValueError, TypeError):  # ragged lists: a field, refused as one
        return False


def _unflatten(arrays: dict[str, Any]) -> dict[str, Any]:
    """data.nu's ``data_new(x, y, n, d, l)``: ``x`` (n*d numbers) and ``y`` (n*l) as
    arrays of ``n`` rows; the other arrays as given."""
    sizes = {}
    for k in _FLAT_SIZES:
        if k not in arrays:
            continue
        v = arrays.pop(k)
        if np.ndim(v) != 0:
            raise RecordError(
                f"from_arrays: {k} must be an int, got an array of shape {np.shape(v)}"
            )
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
            raise RecordError(f"from_arrays: {k} must be an int, got {v!r}")
        if v < 0:
            raise ShapeError(f"from_arrays: {k} must be >= 0, got {v}")
        sizes[k] = int(v)
    if "n" not in sizes:
        raise RecordError(
            f"from_arrays: the flat form needs n, the number of examples "
            f"(given: {', '.join(sizes)})"
        )
    n = sizes["n"]
    wants = (("x", "d", "features"), ("y", "l", "labels"))
    for field_, size, what in wants:
        if field_ not in arrays:
            if sizes.get(size, 0) != 0:
                raise ShapeError(
                    f"from_arrays: {size} = {sizes[size]} {what} per example, but no `{field_}`"
                )
            continue
        if size not in sizes:
            raise RecordError(
                f"from_arrays: the flat form (n=...) needs {size}, the {what} "
                f"per example of `{field_}`"
            )
        flat = _column(arrays[field_], f"from_arrays: `{field_}`")
        per = sizes[size]
        if flat.ndim != 1:
            raise ShapeError(
                f"from_arrays: `{field_}` should be a flat vector of n*{size} = "
                f"{n}*{per} = {n * per} numbers, got shape {flat.shape}"
            )
        if flat.size != n * per:
            raise ShapeError(
                f"from_arrays: `{field_}` should hold n*{size} = {n}*{per} = "
                f"{n * per} numbers, got {flat.size}"
            )
        arrays[field_] = flat.reshape(n, per)
    return arrays


def _as_indices(indices: Any, name: str) -> np.ndarray:
    """Item indices as ``int64``: integers only (a float or a bool is refused, as
    ``Order.lookup`` refuses them), and one past int64 is a ``BoundsError``."""
    if isinstance(indices, np.ndarray) and indices.dtype == np.int64:
        return indices
    arr = np.asarray(indices)
    if arr.size == 0:
        return arr.astype(np.int64)
    if arr.dtype == object and all(
        isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))
        for v in arr.reshape(-1).tolist()
    ):
        values = [int(v) for v in arr.reshape(-1).tolist()]
        bad = next((v for v in values if not -(1 << 63) <= v < 1 << 63), None)
        if bad is not None:
            raise BoundsError(f"{name}: item {bad} is outside any dataset (indices fit int64)")
        return np.array(values, dtype=np.int64).reshape(arr.shape)
    if arr.dtype.kind == "u":
        if int(arr.max()) >= 1 << 63:
            raise BoundsError(
                f"{name}: item {int(arr.max())} is outside any dataset (indices fit int64)"
            )
        return arr.astype(np.int64)
    if arr.dtype.kind != "i":
        raise TypeError(
            f"{name}: item indices must be integers, got {arr.dtype} values "
            f"({arr.reshape(-1)[0]!r:.40})"
        )
    return arr.astype(np.int64, copy=False)


def _rows_of(column: Any) -> int | None:
    """The rows of a source's column (None for a scalar)."""
    if isinstance(column, (Ragged, list, tuple)):
        return len(column)
    arr = column if isinstance(column, np.ndarray) else None
    if arr is not None:
        return len(arr) if arr.ndim else None
    return len(column) if hasattr(column, "__len__") else None


def _write_rows(out: dict[str, Any], batch: dict[str, Any], n: int) -> None:
    """A batch's fixed fields written into ``out``'s first ``n`` rows (a ragged field's
    column has no rows to write into: the batch keeps it)."""
    for k, v in batch.items():
        if not isinstance(v, Ragged) and k in out:
            out[k][:n] = v


def lengths_of(ds: Any, dim: str) -> np.ndarray:
    """``Dataset.lengths``, computed: each item's length on the varying dim ``dim``."""
    if ds._maps:
        base = ds._root
        if not any(dim in f.varying for f in base.record.fields.values()):
            raise ValueError(
                f"{ds.record.__name__}: dim {dim} is made by a map, and its lengths "
                f"are known only once an example is made: bucket by a varying dim of "
                f"{base.record.__name__}, the source's record"
            )
        return base.lengths(dim)
    name, k = next(
        ((f.name, f.varying.index(dim)) for f in ds.record.fields.values() if dim in f.varying),
        (None, 0),
    )
    if name is None:
        raise ValueError(f"{ds.record.__name__} has no field of varying dim {dim}")
    columns = ds._columns if ds._cols is not None else ds._mapped_columns
    col = None if columns is None else columns.get(name)
    if isinstance(col, Ragged):
        return np.asarray(col.shapes[:, k], dtype=np.int64)
    parts = [np.zeros(0, dtype=np.int64)]
    for lo in range(0, len(ds), _CHECK_ITEMS):
        batch = ds.getitems(np.arange(lo, min(lo + _CHECK_ITEMS, len(ds))))
        parts.append(np.asarray(batch[name].shapes[:, k], dtype=np.int64))
    return np.concatenate(parts)


def arrays_record(name: str | None, arrays: dict[str, Any]) -> tuple[Any, dict[str, np.ndarray]]:
    """``Dataset.from_arrays``'s record and columns: a field per keyword, its shape the
    array's past the first axis (data.nu's flat form unflattened first)."""
    if any(k in arrays and _is_scalar(arrays[k]) for k in _FLAT_SIZES):
        arrays = _unflatten(arrays)
    cols = {k: _column(v, f"from_arrays: `{k}`") for k, v in arrays.items()}
    specs = {}
    for k, v in cols.items():
        if v.ndim == 0:
            raise ShapeError(f"from_arrays: `{k}` must have a first (example) axis, got a scalar")
        specs[k] = (v.shape[1:], v.dtype)
    return make_record(name or "Arrays", specs, doc="Fields inferred from arrays."), cols


def check_through(base: Any, record: Any) -> None:
    """Check every value of a dataset that is not in memory by reading it through, in
    batches of up to ``_CHECK_ITEMS`` items and about ``_CHECK_BYTES`` of decoded fields."""
    item_bytes = sum(  # a varying axis counts 64 elements, a blob 4 KiB: a bound
        4096
        if f.kind != "array"
        else f.dtype.itemsize * int(np.prod([d or 64 for d in f.shape], dtype=np.int64))
        for f in record.fields.values()
    )
    step = max(1, min(_CHECK_ITEMS, _CHECK_BYTES // max(1, item_bytes)))
    for start in range(0, len(base), step):
        base.getitems(
            np.arange(start, min(start + step, len(base))), check_values=True, in_range=True
        )


def check_whole(record: Any, columns: dict[str, Any], what: str) -> dict[str, Any]:
    """An in-memory source's columns (``what``: "dict", "TensorDataset") checked as a
    whole against ``record``: one length, the fields' shapes and dtypes; contiguous."""
    sizes = {k: _rows_of(v) for k, v in columns.items()}
    if len(set(sizes.values())) > 1:
        raise ShapeError(f"{record.__name__}: the {what}'s columns have different lengths: {sizes}")
    n = next(iter(sizes.values()), None) or 0
    checked = record.check_columns(columns, np.arange(n), check_values=False)
    return {k: v if isinstance(v, Ragged) else np.ascontiguousarray(v) for k, v in checked.items()}
