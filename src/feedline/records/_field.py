"""Fields of a record: ``fl.field`` in a class body, and the ``Field`` it binds to.

A field's shape is made of ints and the record's named dims; a dim declared ``None``
(or ``fl.Varying``) varies per example. Its dtype is a numpy number or bool dtype, or
``bytes`` / ``str``; its domain, pad value and maximum size are checked against its
dtype when the record class is made.
"""

from __future__ import annotations

import dis
import keyword
import linecache
import os
import sys
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import RecordError
from ._check import _ACCEPTS
from ._domain import Index, Range, _MaskDomain

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


def _bind(
    record: str, name: str, spec: _FieldSpec, dims: dict[str, int | None], base: Any
) -> Field:
    """The ``Field`` of ``spec`` declared as ``name`` in record ``record`` (``base`` is
    ``fl.Record``: a field may not hide one of its attributes)."""
    if keyword.iskeyword(name) or name.startswith("_"):
        raise RecordError(
            f"{spec.where}: record {record} field `{name}` is a Python keyword or starts with _"
        )
    if hasattr(base, name):
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
