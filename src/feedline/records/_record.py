"""Typed records: what one example of a dataset is (ShapeScript's ``data`` records).

::

    class Digit(fl.Record, dims={"D": 64, "C": 10}):
        \"\"\"One labelled image.\"\"\"
        img = fl.field("D", "float32", doc="pixels, row-major")
        label = fl.field((), "int64", domain=fl.Index("C"))

A field's shape is made of ints and the record's named dims. A dim declared ``None``
(or ``fl.Varying(max=...)``) varies per example: fields sharing it have equal lengths
in each example, and a batch pads it to its longest example. A ``bytes`` or ``str``
field holds one blob or one string per example. A wrong declaration raises
``RecordError`` when the class is created. ``Record.check`` checks one item;
``Record.check_columns`` checks a whole batch (or a whole in-memory array) at once.
"""

from __future__ import annotations

import dis
import inspect
import keyword
import linecache
import os
import sys
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, ClassVar

import numpy as np

from ..errors import DomainError, RecordError, ShapeError
from ._domain import Index, Range, _MaskDomain
from ._ragged import Ragged, Varying

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


# The dtypes of fields that hold one variable-size value per example.
_BLOB_KINDS = {"bytes": "bytes", "str": "str"}


class _FieldSpec:
    """What ``fl.field(...)`` returns inside a record's class body (bound on creation)."""

    __slots__ = ("doc", "domain", "dtype", "max_bytes", "pad", "shape", "where")

    def __init__(
        self, shape, dtype, domain, doc, where: str, pad: Any = None, max_bytes: Any = None
    ) -> None:
        self.shape, self.dtype, self.domain, self.doc, self.where = shape, dtype, domain, doc, where
        self.pad, self.max_bytes = pad, max_bytes


def field(
    shape: int | str | tuple | list,
    dtype: Any,
    domain: Any = None,
    doc: str | None = None,
    *,
    pad: Any = None,
    max_bytes: int | None = None,
) -> Any:
    """Declare a field of a record: its shape (ints and dims), dtype, domain and doc.

    ``shape`` is ``()`` for a scalar, a dim name or an int for one axis, or a tuple
    of them; a dim declared ``None`` varies per example. ``dtype`` is a numpy number
    or bool dtype, or ``"bytes"`` / ``"str"`` (shape ``()``: one blob or one string per
    example). ``domain`` is ``fl.Index(n)``, ``fl.Mask`` or ``fl.Range(lo, hi)``.
    ``pad`` is the value wherever a batch is padding (past an example's length, and
    the rows past the real examples): 0 (False) unless given. ``max_bytes`` bounds a
    ``bytes`` or ``str`` field's size (a ``str``'s in UTF-8).
    """
    return _FieldSpec(
        shape, dtype, domain, doc, _declared_at(sys._getframe(1)), pad=pad, max_bytes=max_bytes
    )


# Instructions that store the value just made: the place of their target is the name
# the field is declared by (``img`` in ``img = fl.field(...)``).
_STORES = frozenset({"STORE_NAME", "STORE_FAST", "STORE_GLOBAL", "STORE_DEREF"})


# The code object whose positions were read last, with them and its instructions.
_LAST_CODE: tuple = (None, [], b"")


def _declared_at(frame: Any) -> str:
    """``file:line:column`` (1-based, in characters) of the call in ``frame`` that is
    running: the target it is assigned to (the field's name, as ShapeScript's
    ``mnist.ss:8:5``), else the call itself. ``file:line`` where Python gives no columns
    (3.10, or ``-X no_debug_ranges``)."""
    code = frame.f_code
    file = os.path.basename(code.co_filename)
    if not hasattr(code, "co_positions"):  # Python 3.10
        return f"{file}:{frame.f_lineno}"
    # One position per code unit; the call's inline caches share its position (f_lasti
    # may point into them), and the next instruction is the first unit with another.
    global _LAST_CODE
    last = _LAST_CODE
    if last[0] is not code:  # a class body declares its fields one after another
        last = _LAST_CODE = (code, list(code.co_positions()), code.co_code)
    _, positions, ops = last
    at = frame.f_lasti // 2
    call = positions[at] if at < len(positions) else None
    place = call
    for k in range(at + 1, len(positions)):
        pos = positions[k]
        if pos != call:
            name = dis.opname[ops[2 * k]]
            if name == "EXTENDED_ARG":
                continue
            if name in _STORES:
                place = pos
            break
    if place is None or place[0] is None or place[2] is None:
        return f"{file}:{frame.f_lineno}"
    line, column = place[0], place[2]
    text = linecache.getline(code.co_filename, line)
    if text:  # Python counts UTF-8 bytes; a message counts characters
        column = len(text.encode("utf-8")[:column].decode("utf-8", "replace"))
    return f"{file}:{line}:{column + 1}"


@dataclass(frozen=True)
class Field:
    """One field of a record: ``shape`` (resolved ints; ``None`` on a varying axis),
    ``dtype``, ``domain``, ``doc``, ``dims`` (the declared shape, with dim names),
    ``name``, ``where`` (``file:line:column`` of its name where it was declared;
    ``file:line`` on Python 3.10), ``pad`` (the padding value), ``kind`` (``"array"``,
    ``"bytes"`` or ``"str"``) and ``max_bytes`` (a blob's or string's bound)."""

    name: str
    shape: tuple[int | None, ...]
    dtype: np.dtype
    domain: Any
    doc: str | None
    dims: tuple[int | str, ...]
    where: str
    pad: Any = 0
    kind: str = "array"
    max_bytes: int | None = None

    @property
    def declared(self) -> str:
        """The declared shape in ShapeScript's notation, e.g. ``[D]`` or ``[28 28]``."""
        return "[" + " ".join(str(d) for d in self.dims) + "]"

    @property
    def varying(self) -> tuple[str, ...]:
        """The names of the field's varying dims, in axis order (``()`` when fixed)."""
        return tuple(str(d) for d, s in zip(self.dims, self.shape) if s is None)

    @property
    def ragged(self) -> bool:
        """Whether a column of this field is a ``Ragged`` (a varying dim, bytes or str)."""
        return self.kind != "array" or None in self.shape

    def fixed_shape(self, what: str) -> tuple[int, ...]:
        """The field's shape, all ints; a ``RecordError`` saying ``what`` needs fixed
        shapes when the field is ragged (a varying dim, bytes or str)."""
        if self.ragged:
            raise RecordError(
                f"{self.where}: field `{self.name}` is {self.declared} {self.type_name}, "
                f"{'bytes or str' if self.kind != 'array' else 'of a varying dim'}: {what}"
            )
        return tuple(int(d) for d in self.shape if d is not None)

    @property
    def type_name(self) -> str:
        """The field's type in messages: its dtype, or ``bytes`` / ``str``."""
        return self.kind if self.kind != "array" else str(self.dtype)


class _Namespace(dict):
    """A class body namespace that notices a field name assigned twice."""

    def __init__(self) -> None:
        super().__init__()
        self.duplicates: list[str] = []

    def __setitem__(self, key: str, value: Any) -> None:
        if key in self and isinstance(dict.__getitem__(self, key), _FieldSpec):
            self.duplicates.append(key)
        super().__setitem__(key, value)


class _RecordMeta(type):
    @classmethod
    def __prepare__(
        mcs, name: str, bases: tuple[type, ...], /, **kwargs: Any
    ) -> MutableMapping[str, object]:
        return _Namespace()

    def __new__(mcs, name, bases, namespace, **kwargs):
        # type(name, (fl.Record,), attrs, dims=...) passes a plain dict: no duplicates.
        if getattr(namespace, "duplicates", None):
            raise RecordError(f"record {name} declares field `{namespace.duplicates[0]}` twice")
        return super().__new__(mcs, name, bases, dict(namespace), **kwargs)


class Record(metaclass=_RecordMeta):
    """Base of typed records. Subclass it with ``dims={...}`` and ``fl.field`` attributes.

    ``Record.fields`` is the ordered mapping name -> ``Field``; ``Record.dims`` the
    named sizes; the class docstring and the fields' docs are kept.
    """

    fields: ClassVar[Mapping[str, Field]] = MappingProxyType({})
    dims: ClassVar[Mapping[str, int | None]] = MappingProxyType({})
    # the varying dims' declarations (``dims`` has None for each of them)
    varying: ClassVar[Mapping[str, Varying]] = MappingProxyType({})
    # set (never defaulted) on the classes built from data, in ``_schema``
    _built_at_run_time: ClassVar[bool]
    _where: ClassVar[str]

    def __init_subclass__(
        cls, dims: Mapping[str, int | Varying | None] | None = None, **kwargs: Any
    ) -> None:
        super().__init_subclass__(**kwargs)
        name = cls.__name__
        all_dims: dict[str, int | None] = dict(getattr(cls, "dims", {}))
        varying = dict(getattr(cls, "varying", {}))
        for k, v in (dims or {}).items():
            if not isinstance(k, str) or not k.isidentifier():
                raise RecordError(f"record {name}: dim name {k!r} is not an identifier")
            if v is None or isinstance(v, Varying):
                all_dims[k] = None
                varying[k] = v if isinstance(v, Varying) else Varying()
                continue
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0:
                raise RecordError(
                    f"record {name}: dim {k} must be a non-negative int, or None "
                    f"(fl.Varying(...)) for one that varies per example, got {v!r}"
                )
            all_dims[k] = int(v)
            varying.pop(k, None)
        fields: dict[str, Field] = {}
        for name_, inherited in getattr(cls, "fields", {}).items():
            # Inherited fields are bound again, so they follow dims this record redeclares.
            spec = _FieldSpec(
                inherited.dims,
                inherited.kind if inherited.kind != "array" else inherited.dtype,
                inherited.domain,
                inherited.doc,
                inherited.where,
                pad=inherited.pad,
                max_bytes=inherited.max_bytes,
            )
            fields[name_] = _bind(name, name_, spec, all_dims)
        for attr, value in list(cls.__dict__.items()):
            if isinstance(value, _FieldSpec):
                if attr in fields:
                    raise RecordError(
                        f"record {name} declares field `{attr}` twice "
                        f"(it is inherited from a base record)"
                    )
                fields[attr] = _bind(name, attr, value, all_dims)
            elif (
                not attr.startswith("_")
                and _looks_like_data(value)
                and not isinstance(value, Field)
            ):
                raise RecordError(
                    f"record {name}: attribute `{attr}` = {value!r} is not a field; declare "
                    f"fields with fl.field(shape, dtype, ...)"
                )
        for attr in inspect.get_annotations(cls):
            if attr not in fields and not attr.startswith("_"):
                raise RecordError(
                    f"record {name}: `{attr}` is annotated but not a field; declare "
                    f"fields with fl.field(shape, dtype, ...)"
                )
        cls.dims = MappingProxyType(all_dims)
        cls.varying = MappingProxyType(varying)
        cls.fields = MappingProxyType(fields)
        for attr, f in fields.items():
            setattr(cls, attr, f)  # Digit.img is the Field (introspection)

    # -- checking -----------------------------------------------------------------------
    @classmethod
    def check(
        cls, item: Any, index: int | None = None, *, check_values: bool = True
    ) -> dict[str, Any]:
        """Check one item against the record and convert it to the fields' dtypes.

        ``item`` is a dict with the fields (other keys ignored), a tuple or list in field
        order, or, for a one-field record, the bare value. ``index`` is the item's index
        in its source, for the error message. Raises ``ShapeError`` or ``DomainError``.
        A varying field's value is an array of its own length (cut to its dim's maximum
        where the dim truncates); a ``bytes`` field's is ``bytes``, a ``str`` one's ``str``.
        """
        values = cls._split(item, index)
        out: dict[str, Any] = {}
        lengths: dict[str, tuple[int, str]] = {}  # varying dim -> (length, first field)
        for f, v in zip(cls.fields.values(), values):
            if f.kind != "array":
                out[f.name] = cls._blob(f, v, index)
                continue
            arr = cls._convert(f, v, index)
            if f.ragged:
                arr = cls._check_varying(f, arr, index, lengths)
            elif arr.shape != f.shape:
                raise cls._shape_error(f, index, arr.shape)
            out[f.name] = arr
        if check_values:
            for f in cls.fields.values():
                if f.kind == "array":
                    cls._check_domain(
                        f, out[f.name], None if index is None else np.array([index]), batched=False
                    )
        return out

    @classmethod
    def _check_varying(
        cls, f: Field, arr: np.ndarray, index: int | None, lengths: dict[str, tuple[int, str]]
    ) -> np.ndarray:
        """One example of a field with varying dims: its fixed axes, its lengths (equal to
        those of the fields sharing a dim, at most the dim's maximum or cut to it)."""
        if arr.ndim != len(f.shape) or any(
            d is not None and d != n for d, n in zip(f.shape, arr.shape)
        ):
            raise cls._shape_error(f, index, arr.shape)
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

    @classmethod
    def _blob(cls, f: Field, value: Any, index: int | None) -> bytes | str:
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
                hint = (
                    " (decode it, or declare the field bytes)" if isinstance(value, bytes) else ""
                )
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

    @classmethod
    def check_columns(
        cls, columns: Mapping[str, Any], indices: Any = None, *, check_values: bool = False
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
                ragged[f.name] = out[f.name] = cls._ragged_column(f, columns[f.name], indices)
                continue
            arr = cls._convert(
                f, columns[f.name], None if indices is None else -1, batch=True, indices=indices
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
                raise cls._shape_error(f, first, got, rows=arr.shape[0] if arr.ndim else None)
            out[f.name] = arr
        if ragged:
            cls._check_ragged_batch(ragged, n, indices)
        if check_values:
            for f in cls.fields.values():
                if f.kind == "array":
                    cls._check_domain(f, out[f.name], indices, batched=True)
        return out

    @classmethod
    def _ragged_column(cls, f: Field, column: Any, indices: Any) -> Ragged:
        """A varying, ``bytes`` or ``str`` field's column of a batch as a checked ``Ragged``."""
        if isinstance(column, Ragged):
            if f.kind != "array":
                if column.values.dtype != np.uint8 or column.template != (None,):
                    raise ShapeError(
                        f"{f.where}: {cls.__name__} field `{f.name}` ({f.kind}) of "
                        f"{_rows(indices)} should be a column of byte strings, got {column!r}"
                    )
                if f.max_bytes is not None and len(column):
                    cls._check_sizes(f, np.diff(column.offsets), indices)
                return column
            if len(column.template) != len(f.shape) or any(
                d != t for d, t in zip(f.shape, column.template)
            ):
                raise ShapeError(
                    f"{f.where}: {cls.__name__} field `{f.name}` of {_rows(indices)} should "
                    f"be {f.declared} = {_shape_text(f.shape)}, got a column of "
                    f"{_shape_text(column.template)}"
                )
            values = column.values
            if values.dtype != f.dtype:
                values = cls._convert(f, values, None, batch=True, indices=indices)
                column = Ragged(values, column.offsets, column.shapes, column.template)
            return cls._limit(f, column, indices)
        if isinstance(column, np.ndarray) and column.dtype != object and f.kind == "array":
            # examples of one length: an array, batch axis first
            arr = cls._convert(f, column, None, batch=True, indices=indices)
            if arr.ndim != len(f.shape) + 1 or any(
                d is not None and d != m for d, m in zip(f.shape, arr.shape[1:])
            ):
                first = None if indices is None or len(indices) == 0 else int(indices[0])
                raise cls._shape_error(f, first, arr.shape[1:], rows=len(arr))
            n, size = len(arr), int(np.prod(arr.shape[1:], dtype=np.int64))
            axes = [i for i, d in enumerate(f.shape) if d is None]
            shapes = np.tile(np.array([arr.shape[1 + i] for i in axes], np.int64), (n, 1))
            offsets = np.arange(n + 1, dtype=np.int64) * size
            return cls._limit(f, Ragged(arr.reshape(-1), offsets, shapes, f.shape), indices)
        if isinstance(column, (str, bytes)) or not hasattr(column, "__len__"):
            raise ShapeError(
                f"{f.where}: {cls.__name__} field `{f.name}` of {_rows(indices)} should be a "
                f"sequence of examples ({f.declared} {f.type_name}), got {type(column).__name__}"
            )
        items = list(column)
        at = [_row_item(indices, r) for r in range(len(items))]
        if f.kind != "array":
            blobs = [cls._blob(f, v, i) for v, i in zip(items, at)]
            raw = [b.encode("utf-8") if isinstance(b, str) else b for b in blobs]
            return Ragged.from_blobs(raw)
        examples = []
        for v, i in zip(items, at):
            arr = cls._convert(f, v, i)
            examples.append(cls._check_varying(f, arr, i, {}))
        return Ragged.from_examples(examples, f.shape, f.dtype)

    @classmethod
    def _limit(cls, f: Field, column: Ragged, indices: Any) -> Ragged:
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
            cls._check_varying(f, column.example(r), None, {}) if over[r] else column.example(r)
            for r in range(len(column))
        ]
        return Ragged.from_examples(examples, f.shape, f.dtype)

    @classmethod
    def _check_sizes(cls, f: Field, sizes: np.ndarray, indices: Any) -> None:
        assert f.max_bytes is not None
        big = sizes > f.max_bytes
        if big.any():
            row = int(np.flatnonzero(big)[0])
            raise ShapeError(
                f"{f.where}: {cls.__name__} field `{f.name}` of "
                f"{_item(_row_item(indices, row))} has {int(sizes[row]):,} bytes, more than "
                f"the field's max_bytes={f.max_bytes:,}"
            )

    @classmethod
    def _check_ragged_batch(cls, ragged: dict[str, Ragged], n: int | None, indices: Any) -> None:
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
    @classmethod
    def _split(cls, item: Any, index: int | None) -> list[Any]:
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

    @classmethod
    def _convert(
        cls, f: Field, value: Any, index: int | None, batch: bool = False, indices: Any = None
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
            arr = _cast(
                arr, f, cls.__name__, index if not batch else None, indices if batch else None
            )
        return arr

    @classmethod
    def _shape_error(
        cls, f: Field, index: int | None, got: tuple, rows: int | None = None
    ) -> ShapeError:
        what = f"items from {_item(index)}" if rows is not None else _item(index)
        return ShapeError(
            f"{f.where}: {cls.__name__} field `{f.name}` of {what} should be "
            f"{f.declared} = {_shape_text(f.shape)}, got shape {got}"
        )

    @classmethod
    def _check_domain(cls, f: Field, arr: Any, indices: Any, batched: bool) -> None:
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

    @classmethod
    def schema(cls) -> dict:
        """The record as plain JSON-ready data (what self-describing files store)."""
        fields = []
        for f in cls.fields.values():
            entry = {
                "name": f.name,
                "dims": list(f.dims),
                "shape": list(f.shape),
                "dtype": f.dtype.str if f.kind == "array" else f.kind,
                "domain": None if f.domain is None else f.domain.to_dict(),
                "doc": f.doc,
            }
            # only where they say something: a fixed record's schema is as it always was
            if f.kind == "array" and f.pad != 0:
                entry["pad"] = f.pad
            if f.max_bytes is not None:
                entry["max_bytes"] = f.max_bytes
            fields.append(entry)
        dims: dict[str, Any] = {}
        for k, v in cls.dims.items():
            spec = cls.varying.get(k)
            dims[k] = (
                v
                if spec is None
                else None
                if spec == Varying()
                else {"max": spec.max, "truncate": spec.truncate}
            )
        return {
            "name": cls.__name__,
            "doc": cls.__doc__ if cls.__doc__ is not Record.__doc__ else None,
            "dims": dims,
            "fields": fields,
        }

    @classmethod
    def same_schema(cls, other: type[Record]) -> bool:
        """Whether two records have the same fields (names, shapes, dtypes, domains, kinds,
        padding) and the same varying dims."""

        def key(rec: type[Record]) -> list:
            return [
                (f.name, f.shape, f.dtype, f.domain, f.kind, f.pad, f.max_bytes)
                for f in rec.fields.values()
            ] + [sorted((k, v) for k, v in rec.varying.items() if k in _dims_used(rec))]

        return key(cls) == key(other)

    @classmethod
    def describe(cls) -> str:
        """The record in ShapeScript's notation, one line per field."""
        lines = [f"data {cls.__name__}:  # dims {dict(cls.dims)}"]
        for f in cls.fields.values():
            dom = f" {f.domain.describe(dict(cls.dims))}" if f.domain is not None else ""
            pad = f" pad {f.pad!r}" if f.kind == "array" and f.pad != 0 else ""
            doc = f"  # {f.doc}" if f.doc else ""
            lines.append(f"    {f.name}: {f.declared} {f.type_name}{dom}{pad}{doc}")
        return "\n".join(lines)


def _dims_used(rec: type[Record]) -> set[str]:
    """The dims the record's fields use."""
    return {str(d) for f in rec.fields.values() for d in f.dims if isinstance(d, str)}


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


def _looks_like_data(value: Any) -> bool:
    """A plain data attribute (not a method, property, descriptor or nested class)."""
    if isinstance(value, (classmethod, staticmethod, property, type)) or callable(value):
        return False
    return not hasattr(value, "__get__")


def _bind(record: str, name: str, spec: _FieldSpec, dims: dict[str, int | None]) -> Field:
    if keyword.iskeyword(name) or name.startswith("_"):
        raise RecordError(
            f"{spec.where}: record {record} field `{name}` is a Python keyword or starts with _"
        )
    if hasattr(Record, name):
        raise RecordError(
            f"{spec.where}: record {record} field `{name}` would hide the record's own `{name}`"
        )
    raw = spec.shape
    if isinstance(raw, (str, int, np.integer)) and not isinstance(raw, bool):
        raw = (raw,)
    if not isinstance(raw, (tuple, list)):
        raise RecordError(
            f"{spec.where}: record {record} field `{name}`: a shape is a tuple of "
            f"ints and dim names, got {spec.shape!r}"
        )
    shape: list[int | None] = []
    for d in raw:
        if isinstance(d, str):
            if d not in dims:
                raise RecordError(
                    f"{spec.where}: record {record} field `{name}` uses dim `{d}`, "
                    f"which the record does not declare (dims: {sorted(dims)})"
                )
            shape.append(dims[d])
        elif isinstance(d, (int, np.integer)) and not isinstance(d, bool) and d >= 0:
            shape.append(int(d))
        else:
            raise RecordError(
                f"{spec.where}: record {record} field `{name}`: shape entry {d!r} "
                f"is not a dim name or a non-negative int"
            )
    at = f"{spec.where}: record {record} field `{name}`"
    kind = "array"
    blob = spec.dtype if spec.dtype in (bytes, str) else None
    if isinstance(spec.dtype, str) and spec.dtype in _BLOB_KINDS:
        blob = spec.dtype
    if blob is not None:
        kind = blob if isinstance(blob, str) else blob.__name__
        if shape:
            raise RecordError(
                f"{at}: a {kind} field holds one value per example: its shape is (), "
                f"got {spec.shape!r}"
            )
        dtype = np.dtype(object)
    else:
        try:
            if spec.dtype is None:  # np.dtype(None) would be float64, silently
                raise TypeError("no dtype")
            dtype = np.dtype(spec.dtype)
        except TypeError as e:
            raise RecordError(f"{at}: numpy does not know the dtype {spec.dtype!r}") from e
        if dtype.kind not in _ACCEPTS:
            raise RecordError(
                f'{at}: dtype {dtype} is not a number or bool dtype (or "bytes" or "str", '
                f"one value per example)"
            )
        if dtype.byteorder not in ("=", "|"):  # byte order is storage, not the field's type
            dtype = dtype.newbyteorder("=")
    max_bytes = spec.max_bytes
    if max_bytes is not None:
        if kind == "array":
            raise RecordError(f"{at}: max_bytes bounds a bytes or str field, this one is {dtype}")
        if isinstance(max_bytes, bool) or not isinstance(max_bytes, (int, np.integer)):
            raise RecordError(f"{at}: max_bytes must be an int, got {max_bytes!r}")
        if max_bytes < 0:
            raise RecordError(f"{at}: max_bytes must be at least 0, got {max_bytes}")
        max_bytes = int(max_bytes)
    pad = _pad_value(spec.pad, dtype, kind, at)
    dom = spec.domain
    if dom is not None and kind != "array":
        raise RecordError(f"{at}: a {kind} field has no domain, got {dom!r}")
    if dom is not None:
        if isinstance(dom, Index):
            if isinstance(dom.n, str) and dom.n not in dims:
                raise RecordError(
                    f"{spec.where}: record {record} field `{name}`: Index uses dim "
                    f"`{dom.n}`, which the record does not declare"
                )
            if isinstance(dom.n, str) and dims[dom.n] is None:
                raise RecordError(
                    f"{at}: Index uses dim `{dom.n}`, which varies per example: an index "
                    f"is bounded by a fixed size"
                )
            if dtype.kind not in "iub":
                raise RecordError(
                    f"{spec.where}: record {record} field `{name}`: Index needs an "
                    f"integer dtype, got {dtype}"
                )
        elif isinstance(dom, _MaskDomain):
            if dtype.kind not in "biu":
                raise RecordError(
                    f"{spec.where}: record {record} field `{name}`: Mask needs a "
                    f"bool (or integer) dtype, got {dtype}"
                )
        elif not isinstance(dom, Range):
            raise RecordError(
                f"{spec.where}: record {record} field `{name}`: a domain is "
                f"fl.Index(n), fl.Mask or fl.Range(lo, hi), got {dom!r}"
            )
        elif dtype.kind not in "iuf":
            raise RecordError(
                f"{spec.where}: record {record} field `{name}`: "
                f"{dom.describe(dims)} does not fit {dtype}: a Range needs an "
                f"integer or float dtype"
            )
    if dom is not None and kind == "array" and pad != 0 and spec.pad is not None:
        check = np.array([pad], dtype=dtype)
        if dom.violations(check, dims).any():
            raise RecordError(
                f"{at}: the pad value {pad!r} is outside its domain {dom.describe(dims)}"
            )
    return Field(
        name,
        tuple(shape),
        dtype,
        dom,
        spec.doc,
        tuple(raw),
        spec.where,
        pad=pad,
        kind=kind,
        max_bytes=max_bytes,
    )


def _pad_value(pad: Any, dtype: np.dtype, kind: str, at: str) -> Any:
    """The field's padding value as a Python scalar of its dtype (0 / False / b"" / "")."""
    if kind != "array":
        if pad is not None:
            raise RecordError(
                f"{at}: a {kind} field pads with an empty {kind}; pad= is for array fields"
            )
        return b"" if kind == "bytes" else ""
    if pad is None:
        return dtype.type(0).item()
    if isinstance(pad, (np.ndarray, list, tuple)) or not np.isscalar(pad):
        raise RecordError(f"{at}: pad is one value (a scalar), got {type(pad).__name__}")
    value = np.asarray(pad)
    if value.dtype.kind not in _ACCEPTS[dtype.kind]:
        raise RecordError(f"{at}: the pad value {pad!r} is not one of {dtype}'s values")
    with np.errstate(over="ignore", invalid="ignore"):
        cast = value.astype(dtype)
    if cast.astype(value.dtype) != value:
        raise RecordError(f"{at}: the pad value {pad!r} does not fit {dtype}")
    return cast.item()
