"""Typed records: what one example of a dataset is (ShapeScript's ``data`` records).

::

    class Digit(fl.Record, dims={"D": 64, "C": 10}):
        \"\"\"One labelled image.\"\"\"
        img = fl.field("D", "float32", doc="pixels, row-major")
        label = fl.field((), "int64", domain=fl.Index("C"))

A field's shape is made of ints and the record's named dims, so every example has
the same shapes and examples stack into batches. A wrong declaration raises
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


class _FieldSpec:
    """What ``fl.field(...)`` returns inside a record's class body (bound on creation)."""

    __slots__ = ("doc", "domain", "dtype", "shape", "where")

    def __init__(self, shape, dtype, domain, doc, where: str) -> None:
        self.shape, self.dtype, self.domain, self.doc, self.where = shape, dtype, domain, doc, where


def field(
    shape: int | str | tuple | list, dtype: Any, domain: Any = None, doc: str | None = None
) -> Any:
    """Declare a field of a record: its shape (ints and dims), dtype, domain and doc.

    ``shape`` is ``()`` for a scalar, a dim name or an int for one axis, or a tuple
    of them. ``domain`` is ``fl.Index(n)``, ``fl.Mask`` or ``fl.Range(lo, hi)``.
    """
    return _FieldSpec(shape, dtype, domain, doc, _declared_at(sys._getframe(1)))


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
    """One field of a record: ``shape`` (resolved ints), ``dtype``, ``domain``, ``doc``,
    ``dims`` (the declared shape, with dim names), ``name`` and ``where`` (``file:line:column``
    of its name where it was declared; ``file:line`` on Python 3.10)."""

    name: str
    shape: tuple[int, ...]
    dtype: np.dtype
    domain: Any
    doc: str | None
    dims: tuple[int | str, ...]
    where: str

    @property
    def declared(self) -> str:
        """The declared shape in ShapeScript's notation, e.g. ``[D]`` or ``[28 28]``."""
        return "[" + " ".join(str(d) for d in self.dims) + "]"


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
    dims: ClassVar[Mapping[str, int]] = MappingProxyType({})
    # set (never defaulted) on the classes built from data, in ``_schema``
    _built_at_run_time: ClassVar[bool]
    _where: ClassVar[str]

    def __init_subclass__(cls, dims: Mapping[str, int] | None = None, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        name = cls.__name__
        all_dims = dict(getattr(cls, "dims", {}))
        for k, v in (dims or {}).items():
            if not isinstance(k, str) or not k.isidentifier():
                raise RecordError(f"record {name}: dim name {k!r} is not an identifier")
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0:
                raise RecordError(f"record {name}: dim {k} must be a non-negative int, got {v!r}")
            all_dims[k] = int(v)
        fields: dict[str, Field] = {}
        for name_, inherited in getattr(cls, "fields", {}).items():
            # Inherited fields are bound again, so they follow dims this record redeclares.
            spec = _FieldSpec(
                inherited.dims, inherited.dtype, inherited.domain, inherited.doc, inherited.where
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
        cls.fields = MappingProxyType(fields)
        for attr, f in fields.items():
            setattr(cls, attr, f)  # Digit.img is the Field (introspection)

    # -- checking -----------------------------------------------------------------------
    @classmethod
    def check(
        cls, item: Any, index: int | None = None, *, check_values: bool = True
    ) -> dict[str, np.ndarray]:
        """Check one item against the record and convert it to the fields' dtypes.

        ``item`` is a dict with the fields (other keys ignored), a tuple or list in field
        order, or, for a one-field record, the bare value. ``index`` is the item's index
        in its source, for the error message. Raises ``ShapeError`` or ``DomainError``.
        """
        values = cls._split(item, index)
        out = {}
        for f, v in zip(cls.fields.values(), values):
            arr = cls._convert(f, v, index)
            if arr.shape != f.shape:
                raise cls._shape_error(f, index, arr.shape)
            out[f.name] = arr
        if check_values:
            for f in cls.fields.values():
                cls._check_domain(
                    f, out[f.name], None if index is None else np.array([index]), batched=False
                )
        return out

    @classmethod
    def check_columns(
        cls, columns: Mapping[str, Any], indices: Any = None, *, check_values: bool = False
    ) -> dict[str, np.ndarray]:
        """Check a batch given as columns (batch axis first), converting dtypes.

        ``indices`` are the rows' item indices in their source (for messages). One
        vectorised check per field: shape, kind, and (``check_values``) domain.
        """
        out = {}
        n = None
        for f in cls.fields.values():
            if f.name not in columns:
                raise ShapeError(
                    f"{f.where}: {cls.__name__} field `{f.name}` is missing from "
                    f"the batch (it has {sorted(columns)})"
                )
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
        if check_values:
            for f in cls.fields.values():
                cls._check_domain(f, out[f.name], indices, batched=True)
        return out

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
        if arr.dtype.kind not in _ACCEPTS[kind] and not (arr.size == 0 and arr.dtype == object):
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
            f"{f.declared} = {f.shape}, got shape {got}"
        )

    @classmethod
    def _check_domain(cls, f: Field, arr: np.ndarray, indices: Any, batched: bool) -> None:
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
        return {
            "name": cls.__name__,
            "doc": cls.__doc__ if cls.__doc__ is not Record.__doc__ else None,
            "dims": dict(cls.dims),
            "fields": [
                {
                    "name": f.name,
                    "dims": list(f.dims),
                    "shape": list(f.shape),
                    "dtype": f.dtype.str,
                    "domain": None if f.domain is None else f.domain.to_dict(),
                    "doc": f.doc,
                }
                for f in cls.fields.values()
            ],
        }

    @classmethod
    def same_schema(cls, other: type[Record]) -> bool:
        """Whether two records have the same fields (names, shapes, dtypes, domains)."""
        return [(f.name, f.shape, f.dtype, f.domain) for f in cls.fields.values()] == [
            (f.name, f.shape, f.dtype, f.domain) for f in other.fields.values()
        ]

    @classmethod
    def describe(cls) -> str:
        """The record in ShapeScript's notation, one line per field."""
        lines = [f"data {cls.__name__}:  # dims {dict(cls.dims)}"]
        for f in cls.fields.values():
            dom = f" {f.domain.describe(dict(cls.dims))}" if f.domain is not None else ""
            doc = f"  # {f.doc}" if f.doc else ""
            lines.append(f"    {f.name}: {f.declared} {f.dtype}{dom}{doc}")
        return "\n".join(lines)


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


def _bind(record: str, name: str, spec: _FieldSpec, dims: dict[str, int]) -> Field:
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
    shape = []
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
    try:
        if spec.dtype is None:  # np.dtype(None) would be float64, silently
            raise TypeError("no dtype")
        dtype = np.dtype(spec.dtype)
    except TypeError as e:
        raise RecordError(
            f"{spec.where}: record {record} field `{name}`: numpy does not know "
            f"the dtype {spec.dtype!r}"
        ) from e
    if dtype.kind not in _ACCEPTS:
        raise RecordError(
            f"{spec.where}: record {record} field `{name}`: dtype {dtype} is not "
            f"a number or bool dtype"
        )
    if dtype.byteorder not in ("=", "|"):  # byte order is storage, not the field's type
        dtype = dtype.newbyteorder("=")
    dom = spec.domain
    if dom is not None:
        if isinstance(dom, Index):
            if isinstance(dom.n, str) and dom.n not in dims:
                raise RecordError(
                    f"{spec.where}: record {record} field `{name}`: Index uses dim "
                    f"`{dom.n}`, which the record does not declare"
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
    return Field(name, tuple(shape), dtype, dom, spec.doc, tuple(raw), spec.where)
