"""Record classes from data: a schema (a ``.flr`` header, a manifest, a pickle) rebuilt
into a class, checked as a file's contents must be, and classes made at run time."""

from __future__ import annotations

import copyreg
from collections.abc import Mapping
from typing import Any, cast

import numpy as np

from ..errors import RecordError
from ._domain import domain_from_dict
from ._field import _FieldSpec
from ._ragged import Varying
from ._record import Record, _Namespace, _RecordMeta


def _reduce_record(meta: _RecordMeta) -> Any:
    """Pickle a record class by reference when it is importable, else by its schema (for
    records built at run time: from arrays, from a file's header)."""
    cls = cast("type[Record]", meta)
    if getattr(cls, "_built_at_run_time", False):
        # The fields' ``where`` travels beside the schema (a file format, which has none).
        wheres = {f.name: f.where for f in cls.fields.values()}
        return (_rebuild, (cls.schema(), getattr(cls, "_where", "<pickled>"), wheres))
    return cls.__qualname__


def _rebuild(
    schema: Mapping[str, Any], where: str, wheres: Mapping[str, str] | None = None
) -> type[Record]:
    return _from_schema(schema, where, wheres or {})


copyreg.pickle(_RecordMeta, _reduce_record)


def record_from_schema(schema: Mapping[str, Any], where: str) -> type[Record]:
    """Rebuild a record class from ``Record.schema()`` data (``where`` names its origin).

    The data is checked as a file's must be: each field's ``name`` is a string that
    neither starts with ``_`` nor hides a ``Record`` attribute, its ``dims`` are dim
    names and ints >= 0, its ``doc`` a string or null, and its ``shape``, when present,
    is the shape its dims resolve to. Raises ``RecordError`` (or ``KeyError``/``TypeError``
    on malformed data) when the schema does not declare a valid record.
    """
    return _from_schema(schema, where, {})


def _from_schema(schema: Mapping[str, Any], where: str, wheres: Mapping[str, str]) -> type[Record]:
    """``record_from_schema``; ``wheres`` maps field names to their ``where`` (default
    ``<where>:<name>``)."""
    fields = schema["fields"]
    if not isinstance(fields, (list, tuple)):
        raise RecordError(f"{where}: expected a list of fields, found {fields!r:.80}")
    namespace = _Namespace()
    stored_shapes: dict[str, Any] = {}
    for f in fields:
        if not isinstance(f, Mapping):
            raise RecordError(f"{where}: expected a field (an object), found {f!r:.80}")
        fname = f["name"]
        if (
            not isinstance(fname, str)
            or not fname.isidentifier()
            or fname.startswith("_")
            or hasattr(Record, fname)
        ):
            raise RecordError(
                f"{where}: expected a field name that is an identifier, neither "
                f"starts with _ nor hides a Record attribute, found {fname!r:.80}"
            )
        at = f"{where}:{fname}"
        dims = f["dims"]
        if not isinstance(dims, (list, tuple)) or not all(map(_is_dim, dims)):
            raise RecordError(
                f"{at}: field `{fname}`: expected dims of dim names and ints >= 0, "
                f"found {dims!r:.80}"
            )
        doc = f.get("doc")
        if doc is not None and not isinstance(doc, str):
            raise RecordError(
                f"{at}: field `{fname}`: expected a doc string or null, found {doc!r:.80}"
            )
        dom = None if f.get("domain") is None else domain_from_dict(f["domain"])
        dtype = f["dtype"]
        if not isinstance(dtype, str):
            raise RecordError(
                f"{at}: field `{fname}`: expected a dtype string, found {dtype!r:.80}"
            )
        namespace[fname] = _FieldSpec(
            tuple(d if isinstance(d, str) else int(d) for d in dims),
            dtype,
            dom,
            doc,
            str(wheres.get(fname, at)),
            pad=f.get("pad"),
            max_bytes=f.get("max_bytes"),
        )
        if "shape" in f:
            stored_shapes[fname] = f["shape"]
    if schema.get("doc"):
        namespace["__doc__"] = str(schema["doc"])
    name = str(schema["name"])
    if not name.isidentifier():
        raise RecordError(f"{where}: record name {name!r} is not an identifier")
    dims_data = schema.get("dims", {})
    if not isinstance(dims_data, Mapping):
        raise RecordError(f"{where}: expected dims (an object), found {dims_data!r:.80}")
    cls = cast(
        "type[Record]",
        _RecordMeta(
            name,
            (Record,),
            namespace,
            dims={k: _dim_from_data(v, where, k) for k, v in dims_data.items()},
        ),
    )
    for fname, stored in stored_shapes.items():
        field_ = cls.fields[fname]
        if not _is_shape(stored, field_.shape):
            raise RecordError(
                f"{where}:{fname}: field `{fname}`: the stored shape "
                f"{stored!r:.80} is not {list(field_.shape)}, the shape its dims "
                f"{list(field_.dims)} resolve to"
            )
    cls._built_at_run_time = True
    cls._where = where
    return cls


def _dim_from_data(value: Any, where: str, name: str) -> Any:
    """A stored dim: a size, null (varies), or ``{"max": m, "truncate": t}`` (varies, at
    most m)."""
    if isinstance(value, Mapping):
        if set(value) != {"max", "truncate"}:
            raise RecordError(
                f"{where}: dim {name}: expected a size, null or {{max, truncate}}, "
                f"found {dict(value)!r:.80}"
            )
        try:
            return Varying(max=value["max"], truncate=value["truncate"])
        except (TypeError, ValueError) as e:
            raise RecordError(f"{where}: dim {name}: {e}") from None
    return value


def _is_dim(d: Any) -> bool:
    """A dim name or an int >= 0 (not a bool, not a float such as 2.7 or Infinity)."""
    if isinstance(d, str):
        return True
    return isinstance(d, (int, np.integer)) and not isinstance(d, bool) and bool(d >= 0)


def _is_shape(stored: Any, shape: tuple[int | None, ...]) -> bool:
    """Whether ``stored`` lists exactly the ints of ``shape`` (no floats, no bools), null
    where an axis varies."""
    return (
        isinstance(stored, (list, tuple))
        and len(stored) == len(shape)
        and all(
            (s is None and d is None)
            or (isinstance(s, (int, np.integer)) and not isinstance(s, bool) and s == d)
            for s, d in zip(stored, shape)
        )
    )


def make_record(
    name: str, specs: Mapping[str, tuple[tuple[int, ...], Any]], doc: str | None = None
) -> type[Record]:
    """A record class built at run time: ``specs`` maps field name -> (shape, dtype).

    ``name`` may be any string (a dataset's name, e.g. ``mnist-train``): the class is
    named by it made an identifier (``mnist_train``), so that its schema rebuilds it
    (pickling, workers, ``.flr`` headers); ``where`` keeps ``name`` as given.
    """
    namespace = _Namespace()
    for fname, (shape, dtype) in specs.items():
        if not isinstance(fname, str) or not fname.isidentifier():
            raise RecordError(
                f"record {name}: field name {fname!r:.80} is not an identifier "
                "(a field is a batch attribute)"
            )
        namespace[fname] = _FieldSpec(tuple(shape), dtype, None, None, f"<{name}>")
    if doc:
        namespace["__doc__"] = doc
    cls = cast("type[Record]", _RecordMeta(_identifier(name), (Record,), namespace))
    cls._built_at_run_time = True
    cls._where = f"<{name}>"
    return cls


def _identifier(name: str) -> str:
    """``name`` as a class name: characters an identifier cannot hold become ``_``, and
    a name that cannot start one (a digit, an empty name) gets a leading ``_``."""
    ident = "".join(c if ("a" + c).isidentifier() else "_" for c in name)
    return ident if ident.isidentifier() else "_" + ident
