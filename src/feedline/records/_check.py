"""Checking items and batches against a record: shapes, kinds, lengths, domains.

``check_item`` and ``check_columns`` are ``Record.check`` and ``Record.check_columns``;
``cls`` is the record class throughout (its ``fields``, ``dims``, ``varying``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import DomainError, ShapeError
from ._ragged import Ragged
from ._spans import _item, _row_item, _rows, check_spans

if TYPE_CHECKING:
    from ._field import Field

# Which source kinds (numpy dtype.kind) each field kind takes: a float field takes
# any numbers, an integer field integers or booleans, a bool field only booleans.
_ACCEPTS = {
    "f": "biuf",
    "c": "biufc",
    "i": "biu",
    "u": "biu",
    "b": "b",
}
_KIND_WORDS = {
    "f": "numbers",
    "c": "numbers",
    "i": "integers or booleans",
    "u": "integers or booleans",
    "b": "booleans",
}


def check_item(
    cls: Any, item: Any, index: int | None = None, *, check_values: bool = True
) -> dict[str, Any]:
    """Check one item against the record and convert it to the fields' dtypes.

    ``item`` is a dict with the fields (other keys ignored), a tuple or list in field
    order, or, for a one-field record, the bare value. ``index`` is the item's index
    in its source, for the error message. Raises ``ShapeError`` or ``DomainError``.
    A varying field's value is an array of its own length (cut to its dim's maximum
    where the dim truncates); a ``bytes`` field's is ``bytes``, a ``str`` one's ``str``.
    """
    values = split_item(cls, item, index)
    out: dict[str, Any] = {}
    lengths: dict[str, tuple[int, str]] = {}  # varying dim -> (length, first field)
    for f, v in zip(cls.fields.values(), values):
        if type(v) is np.ndarray and v.dtype == f.dtype and v.shape == f.shape:
            out[f.name] = v  # a fixed field's array as declared (a map's usual result)
            continue
        if f.kind != "array":
            out[f.name] = _blob(cls, f, v, index)
            continue
        arr = _convert(cls, f, v, index)
        if f.ragged:
            arr = _check_varying(cls, f, arr, index, lengths)
        elif arr.shape != f.shape:
            raise _shape_error(cls, f, index, arr.shape)
        out[f.name] = arr
    if check_values:
        for f in cls.fields.values():
            if f.kind == "array":
                _check_domain(
                    cls, f, out[f.name], None if index is None else np.array([index]), batched=False
                )
    return out


def _check_varying(
    cls: Any, f: Field, arr: np.ndarray, index: int | None, lengths: dict[str, tuple[int, str]]
) -> np.ndarray:
    """One example of a field with varying dims: its fixed axes, its lengths (equal to
    those of the fields sharing a dim, at most the dim's maximum or cut to it)."""
    if arr.ndim != len(f.shape) or any(
        d is not None and d != n for d, n in zip(f.shape, arr.shape)
    ):
        raise _shape_error(cls, f, index, arr.shape)
    cut: list[slice] = []
    for d, s, n in zip(f.dims, f.shape, arr.shape):
        if s is not None:
            cut.append(slice(None))
            continue
        dim = str(d)
        seen = lengths.setdefault(dim, (n, f.name))
        if seen[0] != n:
            raise ShapeError(
                f"{f.where}: {cls.__name__} fields `{seen[1]}` and `{f.name}` share the "
                f"varying dim {dim}, but in {_item(index)} `{seen[1]}` has {dim} = "
                f"{seen[0]} and `{f.name}` has {dim} = {n}"
            )
        spec = cls.varying[dim]
        if spec.max is not None and n > spec.max:
            if not spec.truncate:
                raise ShapeError(
                    f"{f.where}: {cls.__name__} field `{f.name}` of {_item(index)} has "
                    f"{dim} = {n}, longer than {dim}'s maximum {spec.max} "
                    f"(fl.Varying(max={spec.max}); truncate=True cuts it)"
                )
            cut.append(slice(0, spec.max))
        else:
            cut.append(slice(None))
    if any(c.stop is not None for c in cut):
        arr = np.ascontiguousarray(arr[tuple(cut)])
    return arr


def _blob(cls: Any, f: Field, value: Any, index: int | None) -> bytes | str:
    """One example of a ``bytes`` or ``str`` field, checked (type, UTF-8, size)."""
    at = f"{f.where}: {cls.__name__} field `{f.name}` of {_item(index)}"
    if f.kind == "bytes":
        if isinstance(value, np.ndarray) and value.dtype == np.uint8 and value.ndim == 1:
            blob = value.tobytes()
        elif isinstance(value, (bytes, bytearray, memoryview)):
            blob = bytes(value)
        else:
            raise ShapeError(f"{at} should be bytes, got {type(value).__name__}")
        size = len(blob)
        out: bytes | str = blob
    else:
        if not isinstance(value, str):
            hint = " (decode it, or declare the field bytes)" if isinstance(value, bytes) else ""
            raise ShapeError(f"{at} should be a str, got {type(value).__name__}{hint}")
        try:
            size = len(value.encode("utf-8"))
        except UnicodeEncodeError as e:
            raise ShapeError(
                f"{at} is not a string UTF-8 can hold ({e.reason} at character {e.start})"
            ) from e
        out = str(value)
    if f.max_bytes is not None and size > f.max_bytes:
        raise ShapeError(
            f"{at} has {size:,} bytes, more than the field's max_bytes={f.max_bytes:,}"
        )
    return out


def check_columns(
    cls: Any, columns: Mapping[str, Any], indices: Any = None, *, check_values: bool = False
) -> dict[str, Any]:
    """Check a batch given as columns (batch axis first), converting dtypes.

    ``indices`` are the rows' item indices in their source (for messages). One
    vectorised check per field: shape, kind, and (``check_values``) domain. A varying,
    ``bytes`` or ``str`` field's column is a ``Ragged`` (given as one, as a sequence of
    the examples, or for a varying field as an array whose examples share a length)
    and comes back as one.
    """
    out: dict[str, Any] = {}
    n = None
    ragged: dict[str, Ragged] = {}
    for f in cls.fields.values():
        if f.name not in columns:
            raise ShapeError(
                f"{f.where}: {cls.__name__} field `{f.name}` is missing from "
                f"the batch (it has {sorted(columns)})"
            )
        if f.ragged:
            ragged[f.name] = out[f.name] = _ragged_column(cls, f, columns[f.name], indices)
            continue
        arr = _convert(
            cls, f, columns[f.name], None if indices is None else -1, batch=True, indices=indices
        )
        if n is None:
            n = arr.shape[0] if arr.ndim else 0
        if arr.ndim and arr.shape[1:] == f.shape and arr.shape[0] != n:
            raise ShapeError(
                f"{f.where}: {cls.__name__} field `{f.name}` has {arr.shape[0]} "
                f"rows, the batch's first field has {n}"
            )
        if arr.ndim == 0 or arr.shape[1:] != f.shape:
            first = None if indices is None or len(indices) == 0 else int(indices[0])
            got = arr.shape[1:] if arr.ndim else arr.shape
            raise _shape_error(cls, f, first, got, rows=arr.shape[0] if arr.ndim else None)
        out[f.name] = arr
    if ragged:
        _check_ragged_batch(cls, ragged, n, indices)
    if check_values:
        for f in cls.fields.values():
            if f.kind == "array":
                _check_domain(cls, f, out[f.name], indices, batched=True)
    return out


def _ragged_column(cls: Any, f: Field, column: Any, indices: Any) -> Ragged:
    """A varying, ``bytes`` or ``str`` field's column of a batch as a checked ``Ragged``."""
    if isinstance(column, Ragged):
        if f.kind != "array":
            if column.values.dtype != np.uint8 or column.template != (None,):
                raise ShapeError(
                    f"{f.where}: {cls.__name__} field `{f.name}` ({f.kind}) of "
                    f"{_rows(indices)} should be a column of byte strings, got {column!r}"
                )
            check_spans(cls, f, column, indices)
            if f.max_bytes is not None and len(column):
                _check_sizes(cls, f, np.diff(column.offsets), indices)
            return column
        if len(column.template) != len(f.shape) or any(
            d != t for d, t in zip(f.shape, column.template)
        ):
            raise ShapeError(
                f"{f.where}: {cls.__name__} field `{f.name}` of {_rows(indices)} should "
                f"be {f.declared} = {_shape_text(f.shape)}, got a column of "
                f"{_shape_text(column.template)}"
            )
        check_spans(cls, f, column, indices)
        values = column.values
        if values.dtype != f.dtype:
            values = _convert(cls, f, values, None, batch=True, indices=indices)
            column = Ragged(values, column.offsets, column.shapes, column.template)
        return _limit(cls, f, column, indices)
    if isinstance(column, np.ndarray) and column.dtype != object and f.kind == "array":
        # examples of one length: an array, batch axis first
        arr = _convert(cls, f, column, None, batch=True, indices=indices)
        if arr.ndim != len(f.shape) + 1 or any(
            d is not None and d != m for d, m in zip(f.shape, arr.shape[1:])
        ):
            first = None if indices is None or len(indices) == 0 else int(indices[0])
            raise _shape_error(cls, f, first, arr.shape[1:], rows=len(arr))
        n, size = len(arr), int(np.prod(arr.shape[1:], dtype=np.int64))
        axes = [i for i, d in enumerate(f.shape) if d is None]
        shapes = np.tile(np.array([arr.shape[1 + i] for i in axes], np.int64), (n, 1))
        offsets = np.arange(n + 1, dtype=np.int64) * size
        return _limit(cls, f, Ragged(arr.reshape(-1), offsets, shapes, f.shape), indices)
    if isinstance(column, (str, bytes)) or not hasattr(column, "__len__"):
        raise ShapeError(
            f"{f.where}: {cls.__name__} field `{f.name}` of {_rows(indices)} should be a "
            f"sequence of examples ({f.declared} {f.type_name}), got {type(column).__name__}"
        )
    items = list(column)
    at = [_row_item(indices, r) for r in range(len(items))]
    if f.kind != "array":
        blobs = [_blob(cls, f, v, i) for v, i in zip(items, at)]
        raw = [b.encode("utf-8") if isinstance(b, str) else b for b in blobs]
        return Ragged.from_blobs(raw)
    examples = []
    for v, i in zip(items, at):
        arr = _convert(cls, f, v, i)
        examples.append(_check_varying(cls, f, arr, i, {}))
    return Ragged.from_examples(examples, f.shape, f.dtype)


def _limit(cls: Any, f: Field, column: Ragged, indices: Any) -> Ragged:
    """``column`` within its dims' maxima: refused, or cut where a dim truncates."""
    over = None
    for k, dim in enumerate(f.varying):
        spec = cls.varying[dim]
        if spec.max is None or not len(column):
            continue
        long = column.shapes[:, k] > spec.max
        if not long.any():
            continue
        if not spec.truncate:
            row = int(np.flatnonzero(long)[0])
            raise ShapeError(
                f"{f.where}: {cls.__name__} field `{f.name}` of "
                f"{_item(_row_item(indices, row))} has {dim} = "
                f"{int(column.shapes[row, k])}, longer than {dim}'s maximum {spec.max} "
                f"(fl.Varying(max={spec.max}); truncate=True cuts it)"
            )
        over = long if over is None else over | long
    if over is None:
        return column
    examples = [
        _check_varying(cls, f, column.example(r), None, {}) if over[r] else column.example(r)
        for r in range(len(column))
    ]
    return Ragged.from_examples(examples, f.shape, f.dtype)


def _check_sizes(cls: Any, f: Field, sizes: np.ndarray, indices: Any) -> None:
    assert f.max_bytes is not None
    big = sizes > f.max_bytes
    if big.any():
        row = int(np.flatnonzero(big)[0])
        raise ShapeError(
            f"{f.where}: {cls.__name__} field `{f.name}` of "
            f"{_item(_row_item(indices, row))} has {int(sizes[row]):,} bytes, more than "
            f"the field's max_bytes={f.max_bytes:,}"
        )


def _check_ragged_batch(cls: Any, ragged: dict[str, Ragged], n: int | None, indices: Any) -> None:
    """Every ragged column has the batch's rows, and fields sharing a varying dim
    have equal lengths in every row."""
    seen: dict[str, tuple[str, np.ndarray]] = {}
    for name, col in ragged.items():
        f = cls.fields[name]
        if n is not None and len(col) != n:
            raise ShapeError(
                f"{f.where}: {cls.__name__} field `{name}` has {len(col)} rows, the "
                f"batch's other fields have {n}"
            )
        n = len(col) if n is None else n
        for k, dim in enumerate(f.varying):
            length = col.shapes[:, k]
            first = seen.setdefault(dim, (name, length))
            if first[0] != name and not np.array_equal(first[1], length):
                row = int(np.flatnonzero(first[1] != length)[0])
                raise ShapeError(
                    f"{f.where}: {cls.__name__} fields `{first[0]}` and `{name}` share "
                    f"the varying dim {dim}, but in {_item(_row_item(indices, row))} "
                    f"`{first[0]}` has {dim} = {int(first[1][row])} and `{name}` has "
                    f"{dim} = {int(length[row])}"
                )


# -- helpers ------------------------------------------------------------------------
def split_item(cls: Any, item: Any, index: int | None) -> list[Any]:
    fields = list(cls.fields.values())
    if isinstance(item, Mapping):
        values = []
        for f in fields:
            if f.name not in item:
                raise ShapeError(
                    f"{f.where}: {cls.__name__} field `{f.name}` of {_item(index)} is "
                    f"missing (the item has keys {sorted(map(str, item))})"
                )
            values.append(item[f.name])
        return values
    if len(fields) == 1:
        if isinstance(item, tuple) and len(item) == 1:
            return [item[0]]
        return [item]
    if isinstance(item, (tuple, list)):
        if len(item) != len(fields):
            names = ", ".join(f.name for f in fields)
            raise ShapeError(
                f"{cls.__name__}: {_item(index)} should have {len(fields)} fields "
                f"({names}), got a {type(item).__name__} of {len(item)}"
            )
        return list(item)
    raise ShapeError(
        f"{cls.__name__}: {_item(index)} should be a dict or a tuple of the fields "
        f"({', '.join(f.name for f in fields)}), got {type(item).__name__}"
    )


def _convert(
    cls: Any, f: Field, value: Any, index: int | None, batch: bool = False, indices: Any = None
) -> np.ndarray:
    try:
        arr = to_numpy(value)
    except Exception as e:  # a value numpy cannot even look at
        raise ShapeError(
            f"{f.where}: {cls.__name__} field `{f.name}` of {_item(index)} "
            f"is not an array-like value: {e}"
        ) from e
    kind = f.dtype.kind
    # an empty example (a varying field of length 0) may come as ``[]``: float64
    if arr.dtype.kind not in _ACCEPTS[kind] and not (
        arr.size == 0 and (arr.dtype == object or f.ragged)
    ):
        where = _item(index) if not batch else _rows(indices)
        raise ShapeError(
            f"{f.where}: {cls.__name__} field `{f.name}` of {where} should be {f.dtype} "
            f"({_KIND_WORDS[kind]}), got {arr.dtype} values"
        )
    if arr.dtype != f.dtype:
        arr = _cast(arr, f, cls.__name__, index if not batch else None, indices if batch else None)
    return arr


def _shape_error(
    cls: Any, f: Field, index: int | None, got: tuple, rows: int | None = None
) -> ShapeError:
    what = f"items from {_item(index)}" if rows is not None else _item(index)
    return ShapeError(
        f"{f.where}: {cls.__name__} field `{f.name}` of {what} should be "
        f"{f.declared} = {_shape_text(f.shape)}, got shape {got}"
    )


def _check_domain(cls: Any, f: Field, arr: Any, indices: Any, batched: bool) -> None:
    if isinstance(arr, Ragged):
        if f.domain is None or not len(arr.values):
            return
        bad = f.domain.violations(arr.values, dict(cls.dims))
        if bad.any():
            at = int(np.flatnonzero(bad)[0])
            row = int(np.searchsorted(arr.offsets, at, "right")) - 1
            value = arr.values[at].item()
            raise DomainError(
                f"{f.where}: {cls.__name__} field `{f.name}` of "
                f"{_item(_row_item(indices, row))} should be in "
                f"{f.domain.describe(dict(cls.dims))}, got {value!r}"
            )
        return
    if f.domain is None or arr.size == 0:
        return
    bad = f.domain.violations(arr, dict(cls.dims))
    if not bad.any():
        return
    if batched:
        flat = bad.reshape(len(arr), -1).any(axis=1)
        row = int(np.flatnonzero(flat)[0])
        value = arr[row][bad[row]].reshape(-1)[0]
        index = _row_item(indices, row)
    else:
        value = arr[bad].reshape(-1)[0]
        index = None if indices is None else int(np.asarray(indices)[0])
    value = value.item() if hasattr(value, "item") else value
    raise DomainError(
        f"{f.where}: {cls.__name__} field `{f.name}` of {_item(index)} "
        f"should be in {f.domain.describe(dict(cls.dims))}, got {value!r}"
    )


def to_numpy(value: Any) -> np.ndarray:
    """A value as a numpy array: torch tensors are detached and moved to the CPU (bfloat16,
    which numpy lacks, becomes float32)."""
    if hasattr(value, "detach") and hasattr(value, "cpu"):
        t = value.detach().cpu()
        if str(t.dtype) == "torch.bfloat16":
            t = t.float()
        return t.numpy()
    return np.asarray(value)


def _cast(
    arr: np.ndarray, f: Field, record: str, index: int | None, indices: Any = None
) -> np.ndarray:
    """``arr`` as the field's dtype, refusing values the dtype cannot hold.

    ``index`` names a single item; for a batch (``arr`` batch-first) ``indices`` are its
    rows' item indices, and the error names the item of the first row that does not fit.
    """
    target = f.dtype
    if target.kind in "iu" and arr.dtype.kind in "iu" and not np.can_cast(arr.dtype, target):
        info = np.iinfo(target)
        if arr.size and (int(arr.min()) < info.min or int(arr.max()) > info.max):
            _refuse(arr, (arr < info.min) | (arr > info.max), f, record, index, indices)
    with np.errstate(over="ignore", invalid="ignore"):
        out = arr.astype(target)
    # A finite number that overflows to inf (70000 as float16, 1e300 as float32).
    if (
        target.kind in "fc"
        and arr.dtype.kind in "iufc"
        and arr.size
        and not np.can_cast(arr.dtype, target)
    ):
        lost = np.isinf(out) & np.isfinite(arr)
        if lost.any():
            _refuse(arr, lost, f, record, index, indices)
    return out


def _refuse(
    arr: np.ndarray, bad: np.ndarray, f: Field, record: str, index: int | None, indices: Any
) -> None:
    """Raise the "does not fit" error for the first value of ``arr`` marked in ``bad``."""
    if indices is not None and arr.ndim:
        row = int(np.flatnonzero(bad.reshape(len(arr), -1).any(axis=1))[0])
        index = _row_item(indices, row)
    value = arr[bad].reshape(-1)[0]
    raise ShapeError(
        f"{f.where}: {record} field `{f.name}` of {_item(index)}: "
        f"{value.item()!r} does not fit {f.dtype}"
    )


def _shape_text(shape: tuple[int | None, ...]) -> str:
    """A shape in messages, a varying axis as ``*``: ``(3,)``, ``(*, 64)``."""
    parts = ["*" if d is None else str(d) for d in shape]
    return "(" + ", ".join(parts) + ("," if len(parts) == 1 else "") + ")"
