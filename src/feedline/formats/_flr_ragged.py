"""The ragged columns of an ``.flr`` (version 2): checking their sections, and reading
them as ``Ragged`` columns over the file.

A ``ragged`` column's examples are ``values[offsets[i]:offsets[i + 1]]`` (elements),
each raveled in C order; its shapes come from its ``shapes`` section, or, where it has
none, from the example's size (one varying axis: its length is the size over the
product of the fixed axes). A ``blob`` or ``string`` column is the same with bytes; a
string's are UTF-8, checked for each batch read (and by ``verify()`` for the whole).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .._base import spans
from ..errors import FormatError
from ..records import Ragged
from ..records._ragged import utf8_problem
from ._flr_layout import INDEX_DTYPE, LIMIT, fixed_size, has_shapes

# Offsets and shapes are checked this many rows at a time (memory stays O(step)).
_STEP = 1 << 20


class SizeShapes:
    """The ``(n, 1)`` shapes of a column with one varying axis and no ``shapes`` section:
    each example's length is its size over ``fixed`` (the product of its fixed axes),
    computed from the offsets when asked for (nothing is held per row)."""

    __slots__ = ("_fixed", "_offsets")
    dtype = INDEX_DTYPE
    ndim = 2

    def __init__(self, offsets: Any, fixed: int) -> None:
        self._offsets, self._fixed = offsets, fixed

    @property
    def shape(self) -> tuple[int, int]:
        return (len(self._offsets) - 1, 1)

    @property
    def nbytes(self) -> int:
        return 0  # nothing is held

    def __len__(self) -> int:
        return len(self._offsets) - 1

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        out = (np.diff(np.asarray(self._offsets)) // self._fixed).reshape(-1, 1)
        return out if dtype is None else out.astype(dtype, copy=False)

    def __getitem__(self, key: Any) -> Any:
        rows, rest = (key[0], key[1:]) if isinstance(key, tuple) else (key, ())
        n = len(self)
        if isinstance(rows, slice):
            sel = np.arange(*rows.indices(n), dtype=np.int64)
        elif isinstance(rows, (int, np.integer)):
            i = int(rows) + n if int(rows) < 0 else int(rows)
            if not 0 <= i < n:
                raise IndexError(f"row {int(rows)} is outside the column's {n} rows")
            sel = np.array([i], dtype=np.int64)
        else:
            sel = np.asarray(rows)
            sel = np.flatnonzero(sel) if sel.dtype == np.bool_ else sel.astype(np.int64)
        off = self._offsets
        out = ((np.asarray(off[sel + 1]) - np.asarray(off[sel])) // self._fixed)[..., None]
        if isinstance(rows, (int, np.integer)):
            out = out[0]
            return out[rest] if rest else out
        if not rest:
            return out
        key = (slice(None), *rest)  # the rest index the other axes
        return out[key]


def ragged_problem(
    f: Any, record: Any, offsets: Any, shapes: Any, n_values: int
) -> tuple[str, int, str] | None:
    """What is wrong with a ragged column's offsets and shapes, as (section, element
    index, message), or None: offsets from 0, nondecreasing, up to the values' length;
    shapes >= 0 whose sizes are the examples', within the dims' maxima (a blob's or
    string's sizes within ``max_bytes``). ``shapes`` is None where the column has none."""
    n = len(offsets) - 1
    fixed = fixed_size(f)
    maxima = [record.varying[d].max for d in f.varying] if f.kind == "array" else [f.max_bytes]
    names = list(f.varying) if f.kind == "array" else ["bytes"]
    if n < 0:
        return ("offsets", 0, "expected at least one offset (rows + 1), found none")
    if int(offsets[0]) != 0:
        return ("offsets", 0, f"the first offset is {int(offsets[0])}, expected 0")
    if int(offsets[n]) != n_values:
        return (
            "offsets",
            n,
            f"the last offset is {int(offsets[n])}, expected the values' length {n_values}",
        )
    top = np.zeros(len(maxima), dtype=np.int64)  # the longest example on each axis
    for a in range(0, n, _STEP):
        b = min(n, a + _STEP)
        off = np.asarray(offsets[a : b + 1], dtype=np.int64)
        sizes = np.diff(off)
        if (sizes < 0).any():
            r = a + int(np.argmax(sizes < 0))
            return (
                "offsets",
                r + 1,
                f"offsets decrease at row {r} ({int(offsets[r])} then {int(offsets[r + 1])})",
            )
        if shapes is None:
            if (sizes % fixed).any():
                r = a + int(np.argmax(sizes % fixed != 0))
                return (
                    "offsets",
                    r,
                    f"row {r} holds {int(sizes[r - a])} values, not a multiple of the "
                    f"{fixed} of its fixed axes",
                )
            lengths = (sizes // fixed).reshape(-1, 1)
        else:
            lengths = np.asarray(shapes[a:b], dtype=np.int64).reshape(b - a, len(maxima))
            if (lengths < 0).any():
                r = a + int(np.argmax((lengths < 0).any(axis=1)))
                return ("shapes", r, f"row {r} has a negative length {lengths[r - a].tolist()}")
        if len(lengths):
            np.maximum(top, lengths.max(axis=0), out=top)
        for k, (name, most) in enumerate(zip(names, maxima)):
            if most is not None and (lengths[:, k] > most).any():
                r = a + int(np.argmax(lengths[:, k] > most))
                what = "max_bytes" if f.kind != "array" else f"{name}'s maximum"
                return (
                    "shapes" if shapes is not None else "offsets",
                    r,
                    f"row {r} has {name} = {int(lengths[r - a, k])}, more than {what} {most}",
                )
        if shapes is not None:
            # the maxima's product bounds every row's: checked first, it cannot overflow
            nominal = np.dtype(f.dtype).itemsize * math.prod(d for d in f.shape if d)
            if nominal * math.prod(int(t) for t in top if t) >= LIMIT:
                return ("shapes", a, f"lengths up to {top.tolist()} are more than an array holds")
            got = lengths.prod(axis=1) * fixed
            if (got != sizes).any():
                r = a + int(np.argmax(got != sizes))
                return (
                    "shapes",
                    r,
                    f"row {r} of shape {lengths[r - a].tolist()} holds {int(got[r - a])} "
                    f"values, its offsets {int(sizes[r - a])}",
                )
    return None


def column_lengths(col: Ragged, k: int, a: int, b: int) -> np.ndarray:
    """Rows ``[a, b)`` of a column's lengths on its ``k``-th varying axis."""
    return np.asarray(col.shapes[a:b], dtype=np.int64).reshape(b - a, -1)[:, k]


class FileRagged(Ragged):
    """A ragged column of an open ``.flr``: its arrays are views of the file (a remote
    file's values are fetched span by span as batches need them). ``take`` gathers a
    batch; a string column's batch is checked to be UTF-8 (a ``FormatError`` naming the
    file and byte otherwise)."""

    __slots__ = ("_at", "_handle", "_intact", "_path", "_strings")

    def __init__(
        self,
        values: Any,
        offsets: Any,
        shapes: Any,
        template: tuple[int | None, ...],
        *,
        path: str,
        at: int,
        intact: Any,
        strings: bool,
        handle: Any = None,
    ) -> None:
        super().__init__(values, offsets, shapes, template)
        self._path, self._at, self._intact, self._strings = path, at, intact, strings
        self._handle = handle

    def descriptor(self) -> tuple[int, int] | None:
        """(the open descriptor, the file's size when opened) of a local file's column,
        for checking many files for a truncation at once (``_base.spans.shrunk``; where
        that finds one, ``take`` raises the error); None for a remote file."""
        shared = getattr(self._handle, "_shared", None)
        fd = getattr(shared, "fd", None)
        return None if fd is None else (int(fd), int(self._handle.size))

    @property
    def checks_utf8(self) -> bool:
        """Whether the column holds strings (each batch checked to be UTF-8)."""
        return self._strings

    def take(self, idx: np.ndarray) -> Ragged:
        """Examples ``idx`` (int64, in range): one gather of offsets, one copy of spans."""
        self._intact()  # a file truncated under us: an error, not SIGBUS
        idx = np.asarray(idx, dtype=np.int64)
        offsets = self.offsets
        starts = np.asarray(offsets[idx], dtype=np.int64)
        ends = np.asarray(offsets[idx + 1], dtype=np.int64)
        counts = ends - starts
        out = np.zeros(len(idx) + 1, dtype=np.int64)
        np.cumsum(counts, out=out[1:])
        values = self.values
        if hasattr(values, "spans"):  # a remote file: fetch the spans, then gather
            with values.spans(starts, ends) as local:
                gathered = _gather(local, starts, counts, out)
        else:
            gathered = _gather(values, starts, counts, out)
        if isinstance(self.shapes, SizeShapes):
            shapes = (counts // self.shapes._fixed).reshape(-1, 1)
        else:
            shapes = np.asarray(self.shapes[idx], dtype=np.int64)
        if self._strings:
            bad = utf8_problem(gathered, out)
            if bad is not None:
                row = int(np.searchsorted(out, bad, "right")) - 1
                at = self._at + int(starts[row]) + bad - int(out[row])
                raise FormatError(
                    f"row {int(idx[row])} of a string column is not UTF-8 (byte {at})",
                    self._path,
                    at,
                )
        return Ragged(gathered, out, shapes, self.template)


def _gather(values: Any, starts: np.ndarray, counts: np.ndarray, out: np.ndarray) -> np.ndarray:
    return spans.gather(values, starts, counts, int(out[-1]))


def shapes_for(f: Any, offsets: Any, shapes: Any) -> Any:
    """A column's shapes: its ``shapes`` section, or computed from its sizes."""
    return shapes if has_shapes(f) else SizeShapes(offsets, fixed_size(f))
