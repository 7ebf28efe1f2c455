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

import inspect
from collections.abc import Mapping, MutableMapping
from types import MappingProxyType
from typing import Any, ClassVar

import numpy as np

from ..errors import RecordError
from ._check import check_columns, check_item, split_item
from ._field import Field, _bind, _FieldSpec
from ._ragged import Varying


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
            fields[name_] = _bind(name, name_, spec, all_dims, Record)
        for attr, value in list(cls.__dict__.items()):
            if isinstance(value, _FieldSpec):
                if attr in fields:
                    raise RecordError(
                        f"record {name} declares field `{attr}` twice "
                        f"(it is inherited from a base record)"
                    )
                fields[attr] = _bind(name, attr, value, all_dims, Record)
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
        return check_item(cls, item, index, check_values=check_values)

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
        return check_columns(cls, columns, indices, check_values=check_values)

    @classmethod
    def _split(cls, item: Any, index: int | None) -> list[Any]:
        """The item's values in field order (see ``check``)."""
        return split_item(cls, item, index)

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


def _looks_like_data(value: Any) -> bool:
    """A plain data attribute (not a method, property, descriptor or nested class)."""
    if isinstance(value, (classmethod, staticmethod, property, type)) or callable(value):
        return False
    return not hasattr(value, "__get__")
