"""Columns whose examples vary in shape: ``Varying`` dims and ``Ragged`` columns.

A record's dim declared ``None`` (or ``fl.Varying(max=..., truncate=...)``) varies per
example. A column of such a field is a ``Ragged``: the values of all its examples
concatenated (each raveled in C order), the offsets of each example's values (int64,
``n + 1``, in elements) and each example's lengths of the field's varying axes (int64,
``n x k``). Gathering a batch is one gather of offsets and one copy of the spans
(``take``); collating pads it (``padded``) in one pass (C, ``_base.spans``). ``bytes`` and
``str`` fields are ragged columns of ``uint8`` (a ``str`` one holds UTF-8).
"""

from __future__ import annotations

import codecs
import itertools
import math
import operator
import sys
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._base import kernels, spans


@dataclass(frozen=True)
class Varying:
    """A dim whose size varies per example (``dims={"T": fl.Varying(max=512)}``).

    ``max``: the longest an example may be (None: no limit); a longer one is a
    ``ShapeError``, or is cut to ``max`` when ``truncate`` is True. ``dims={"T": None}``
    is ``Varying()``.
    """

    max: int | None = None
    truncate: bool = False

    def __post_init__(self) -> None:
        if self.max is not None:
            try:
                if isinstance(self.max, bool):  # an int to operator.index, not a length
                    raise TypeError
                value = operator.index(self.max)
            except TypeError:
                raise TypeError(
                    f"Varying: max must be an int or None, got {self.max!r:.40} "
                    f"({type(self.max).__name__})"
                ) from None
            if value < 1:
                raise ValueError(f"Varying: max must be at least 1, got {value}")
            object.__setattr__(self, "max", value)
        if not isinstance(self.truncate, bool):
            raise TypeError(
                f"Varying: truncate must be True or False, got {type(self.truncate).__name__}"
            )
        if self.truncate and self.max is None:
            raise ValueError("Varying: truncate=True needs a max to cut to")

    def to_dict(self) -> dict:
        return {"varying": True, "max": self.max, "truncate": self.truncate}


def _warm(dtype: np.dtype) -> Any:
    """A call of ``pad_spans`` on tiny arrays of ``dtype`` (loads its machine code)."""

    def warm(kernel: Any) -> None:
        values = np.zeros(2, dtype=dtype)
        one = np.ones(1, dtype=np.int64)
        kernel(values, one, one, np.empty((1, 2), dtype=dtype), dtype.type(0))

    return warm


def utf8_problem(values: np.ndarray, offsets: np.ndarray) -> int | None:
    """The position in ``values`` of the first byte that breaks the UTF-8 of a string
    column (a bad sequence, or a string starting inside a character), or None."""
    bad = None
    try:
        data = np.ascontiguousarray(values).reshape(-1).view(np.uint8)
        codecs.utf_8_decode(memoryview(data), "strict", True)  # type: ignore[arg-type]  # numpy types its buffer protocol for 3.12+ only
    except UnicodeDecodeError as e:
        bad = int(e.start)
    starts = np.asarray(offsets[:-1])
    starts = starts[starts < np.asarray(offsets[1:])]  # strings that hold bytes
    if len(starts):
        inside = (np.asarray(values[starts]) & 0xC0) == 0x80
        if inside.any():
            at = int(starts[np.argmax(inside)])
            bad = at if bad is None else min(bad, at)
    return bad


def _fixed_size(template: tuple[int | None, ...]) -> int:
    """The product of a template's fixed axes."""
    size = 1
    for d in template:
        if d is not None:
            size *= d
    return size


class Ragged:
    """A column of ``n`` examples of a field with varying axes (see the module doc).

    ``template`` is the field's shape with ``None`` at its varying axes; ``values`` is
    1-D; ``offsets`` (``n + 1``) and ``shapes`` (``n x k``, ``k`` varying axes) are int64.

    ``take`` gives a view: its offsets and shapes at once, its values copied from the
    source's spans only when read; ``padded`` copies the spans straight into the padded
    batch (one pass, in C; numba's kernel or numpy's masks without the compiled copies).
    """

    __slots__ = ("_source", "_starts", "_values", "offsets", "shapes", "template")

    def __init__(
        self,
        values: np.ndarray,
        offsets: np.ndarray,
        shapes: np.ndarray,
        template: tuple[int | None, ...],
    ) -> None:
        self._values: np.ndarray | None = values
        self._source: np.ndarray | None = None  # a view's: the column it takes from
        self._starts: np.ndarray | None = None  # and where each of its examples starts
        self.offsets = offsets
        self.shapes = shapes
        self.template = template

    @property
    def values(self) -> np.ndarray:
        """Every example's values, concatenated (a view copies them now, once)."""
        v = self._values
        if v is None:
            source, starts = self._spans()
            v = spans.gather(source, starts, np.diff(self.offsets), int(self.offsets[-1]))
            self._values = v
            self._source = self._starts = None
        return v

    def _spans(self) -> tuple[np.ndarray, np.ndarray]:
        """(the array holding the examples' values, each example's first element in it)."""
        if self._values is not None:
            return self._values, self.offsets[:-1]
        assert self._source is not None and self._starts is not None
        return self._source, self._starts

    # -- building ----------------------------------------------------------------------
    @classmethod
    def from_examples(
        cls, examples: list[np.ndarray], template: tuple[int | None, ...], dtype: Any
    ) -> Ragged:
        """A column from examples already checked against ``template`` (and of ``dtype``)."""
        axes = [i for i, d in enumerate(template) if d is None]
        n = len(examples)
        shapes = np.zeros((n, len(axes)), dtype=np.int64)
        sizes = np.zeros(n, dtype=np.int64)
        for r, a in enumerate(examples):
            shapes[r] = [a.shape[i] for i in axes]
            sizes[r] = a.size
        offsets = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(sizes, out=offsets[1:])
        if n:
            values = np.concatenate([np.ravel(a) for a in examples]).astype(dtype, copy=False)
        else:
            values = np.zeros(0, dtype=dtype)
        return cls(values, offsets, shapes, template)

    @classmethod
    def from_blobs(cls, blobs: list[bytes]) -> Ragged:
        """A ``uint8`` column of byte strings (a ``bytes`` or, encoded, a ``str`` field)."""
        lengths = np.fromiter((len(b) for b in blobs), dtype=np.int64, count=len(blobs))
        offsets = np.zeros(len(blobs) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        values = np.frombuffer(b"".join(blobs), dtype=np.uint8)
        return cls(values, offsets, lengths[:, None], (None,))

    @classmethod
    def empty(cls, template: tuple[int | None, ...], dtype: Any, n: int = 0) -> Ragged:
        """``n`` examples of length 0 on every varying axis."""
        k = sum(d is None for d in template)
        return cls(
            np.zeros(0, dtype=dtype),
            np.zeros(n + 1, dtype=np.int64),
            np.zeros((n, k), dtype=np.int64),
            template,
        )

    @classmethod
    def concat(cls, parts: list[Ragged]) -> Ragged:
        """The examples of ``parts``, one after another."""
        first = parts[0]
        values = np.concatenate([p.values for p in parts])
        sizes = np.concatenate([np.diff(p.offsets) for p in parts])
        offsets = np.zeros(len(sizes) + 1, dtype=np.int64)
        np.cumsum(sizes, out=offsets[1:])
        shapes = np.concatenate([p.shapes for p in parts])
        return cls(values, offsets, shapes, first.template)

    # -- reading -----------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.offsets) - 1

    @property
    def dtype(self) -> np.dtype:
        return self._spans()[0].dtype

    def __repr__(self) -> str:
        shape = "[" + " ".join("*" if d is None else str(d) for d in self.template) + "]"
        return f"Ragged({len(self)} examples of {shape} {self.dtype})"

    def example(self, i: int) -> np.ndarray:
        """Example ``i`` as an array of its own shape (a view of the values)."""
        shape, k = [], 0
        for d in self.template:
            if d is None:
                shape.append(int(self.shapes[i, k]))
                k += 1
            else:
                shape.append(d)
        source, starts = self._spans()
        first = int(starts[i])
        return source[first : first + int(self.offsets[i + 1] - self.offsets[i])].reshape(shape)

    def blobs(self) -> list[bytes]:
        """The examples as byte strings (a ``uint8`` column)."""
        buf = self.values.tobytes()
        off = self.offsets.tolist()
        return [buf[a:b] for a, b in itertools.pairwise(off)]

    def strings(self) -> list[str]:
        """The examples as strings (a ``uint8`` column of UTF-8): the whole buffer decoded
        once, then sliced at each example's first character (one decode, not one per
        example: 1.4x faster on batches of 512 short strings)."""
        values = self.values
        pa = sys.modules.get("pyarrow")  # loaded already (a Parquet or Arrow source)
        if pa is not None and len(self.offsets) > 32:
            # Arrow makes the str objects in C: 17 against 52 us for 512 short strings
            # (UTF-8 checked first: Arrow does not check a file's strings)
            arr = pa.LargeStringArray.from_buffers(
                len(self.offsets) - 1,
                pa.py_buffer(np.ascontiguousarray(self.offsets, dtype=np.int64)),
                pa.py_buffer(np.ascontiguousarray(values)),
            )
            try:
                arr.validate(full=True)
            except pa.ArrowInvalid:
                pass  # not UTF-8: decoded below, whose error says where
            else:
                return arr.to_numpy(zero_copy_only=False).tolist()
        text = values.tobytes().decode("utf-8")
        if len(text) == len(values):  # ASCII: characters are bytes
            off = self.offsets.tolist()
        else:  # a character starts at every byte that is not a continuation (10xxxxxx)
            starts = np.zeros(len(values) + 1, dtype=np.int64)
            np.cumsum((values & 0xC0) != 0x80, out=starts[1:])
            off = starts[self.offsets].tolist()
        return [text[a:b] for a, b in itertools.pairwise(off)]

    def take(self, idx: np.ndarray) -> Ragged:
        """Examples ``idx`` (int64, in range): one gather of offsets now; the spans are
        copied once, when the values are read or the batch is padded (a view)."""
        idx = np.asarray(idx, dtype=np.int64)
        source, all_starts = self._spans()
        starts = all_starts[idx]
        # a whole column's starts are its offsets: one gather of them fewer
        first = starts if self._values is not None else self.offsets[idx]
        counts = self.offsets[idx + 1] - first
        offsets = np.zeros(len(idx) + 1, dtype=np.int64)
        np.cumsum(counts, out=offsets[1:])
        # one varying axis and nothing else (bytes, str, token lists): an example's
        # length is its count, not gathered again (a random gather: 7 - 10 us for 512)
        if self.template == (None,):
            shapes = counts.astype(np.int64, copy=False)[:, None]  # int64 as documented
        else:
            shapes = self.shapes[idx]
        view = Ragged.__new__(Ragged)
        view._values = None
        view._source, view._starts = source, starts
        view.offsets, view.shapes, view.template = offsets, shapes, self.template
        return view

    def padded_shape(self, lengths: dict[int, int]) -> tuple[int, ...]:
        """The shape of one padded example: ``lengths`` maps a varying axis's index among
        the template's axes to the length to pad it to."""
        return tuple(lengths[i] if d is None else d for i, d in enumerate(self.template))

    def padded(self, rows: int, lengths: dict[int, int], pad: Any = 0) -> np.ndarray:
        """The examples in an array of ``rows`` rows (``rows >= len``), each varying axis
        padded to ``lengths[axis]`` (at least the longest example's) with ``pad``.

        One masked assignment: for each row, the in-bounds positions of the padded array,
        in C order, are the example's values in its own C order.
        """
        shape = self.padded_shape(lengths)
        source, starts = self._spans()
        if self.template[0] is None and None not in self.template[1:]:
            # one varying axis, the first: an example is the first elements of its row,
            # copied in C (``spans``), else by numba's kernel once loaded (the numpy path
            # below while it loads: never a wait)
            if spans.available() and not source.dtype.hasobject:
                out = np.empty((rows, *shape), dtype=source.dtype)
                flat = out.reshape(rows, math.prod(shape))  # (rows may be 0: no -1)
                spans.pad(source, starts, np.diff(self.offsets), flat, pad)
                return out
            pad_spans = kernels.when_ready("pad_spans", source.dtype.str, _warm(source.dtype))
            if pad_spans is not None:
                out = np.empty((rows, *shape), dtype=source.dtype)
                flat = out.reshape(rows, math.prod(shape))
                counts = np.diff(self.offsets)
                pad_spans(source, starts, counts, flat, flat.dtype.type(pad))
                return out
        elif spans.available() and not source.dtype.hasobject and 0 < len(shape) <= 16:
            # varying axes anywhere (images of any height and width): each example's runs
            # along its last axis copied in C (numpy's masks below ran 24x slower on 16
            # images of 300 - 500 x 300 - 500 x 3)
            full = np.empty((len(self), len(shape)), dtype=np.int64)
            k = 0
            for axis, d in enumerate(self.template):
                if d is None:
                    full[:, axis] = self.shapes[:, k]
                    k += 1
                else:
                    full[:, axis] = d
            out = np.empty((rows, *shape), dtype=source.dtype)
            return spans.pad_nd(source, starts, full, out, pad)
        out = np.full((rows, *shape), pad, dtype=source.dtype)
        n = len(self)
        if n == 0 or not self.offsets[-1]:
            return out
        mask = np.ones((n, *shape), dtype=bool)
        k = 0
        for axis, d in enumerate(self.template):
            if d is None:
                length = self.shapes[:, k]
                view = [1] * (len(shape) + 1)
                view[0], view[axis + 1] = n, shape[axis]
                inside = np.arange(shape[axis]) < length[:, None]
                mask &= inside.reshape(view)
                k += 1
        out[:n][mask] = self.values
        return out

    def nbytes(self) -> int:
        return int(self.values.nbytes + self.offsets.nbytes + self.shapes.nbytes)

    def __getstate__(self) -> tuple:
        return (self.values, self.offsets, self.shapes, self.template)

    def __setstate__(self, state: tuple) -> None:
        self.__init__(*state)  # type: ignore[misc]


def example_of(field: Any, column: Any, r: int) -> Any:
    """Row ``r`` of a batch column as an item's value: a copy of its array (of its own
    shape for a ragged one), or its ``bytes`` / ``str``."""
    if isinstance(column, Ragged):
        if field.kind == "bytes":
            return column.values[column.offsets[r] : column.offsets[r + 1]].tobytes()
        if field.kind == "str":
            return column.values[column.offsets[r] : column.offsets[r + 1]].tobytes().decode()
        return column.example(r).copy()
    return np.array(column[r])


def column_of(field: Any, values: list[Any]) -> Any:
    """A batch column from checked item values (``Record.check``'s): stacked, or a
    ``Ragged`` for a varying, ``bytes`` or ``str`` field."""
    if field.kind == "bytes":
        return Ragged.from_blobs(values)
    if field.kind == "str":
        return Ragged.from_blobs([v.encode("utf-8") for v in values])
    if field.ragged:
        return Ragged.from_examples(values, field.shape, field.dtype)
    return np.stack(values)
