"""Writing an ``.flr``: every column's sections, then the file, atomically.

Each section (a fixed column; a ragged column's values, offsets and shapes) is gathered
as it comes: in memory for a write of whole columns, in a spool file beside the target
for a streamed one (memory stays O(chunk)). The file is assembled from them at the end,
inside ``atomic_write``: an error on any item leaves nothing behind.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import numpy as np

from .._base.files import atomic_write, scratch_file, scratch_suffix
from ..errors import RecordError, ShapeError
from ..records import Ragged, Record
from ..records._ragged import column_of, example_of
from ._flr_layout import (
    INDEX_DTYPE,
    column_kind,
    crc,
    fixed_size,
    has_shapes,
    layout,
    le,
    preamble,
    raw,
    section_names,
    value_dtype,
    version_of,
)
from ._flr_ragged import ragged_problem, utf8_problem

# Items are checked and spooled this many at a time when streaming.
CHUNK_ITEMS = 4096
# The file's bytes go to the kernel in writes of this size on multiples of it (after a
# section's first, which ends on one): the page cache then holds the file in folios of
# this size, which a memory map maps as huge pages (one TLB entry per 2 MiB, not per 4
# KiB). On the reference machine (Linux 6.18, ext4): a random gather of 256-byte rows
# from a 1 GB file so written ran 1.3x faster than from the same bytes written in
# unaligned 8 MiB writes (75% huge pages) or in one write from offset 4096 (none). The
# write itself: a 1 GB .flr took 1.1 - 4.8 s this way and 1.1 - 36.7 s the old way (two
# sets of 4 alternating runs: 2.2 - 3.9 against 1.2 - 8.0 s, then 1.1 - 4.8 against 1.1
# - 36.7 s): this VM's writes vary too much from one to the next to tell them apart.
_FOLIO = 2 << 20


def check_names(record: type[Record]) -> None:
    """Field names are identifiers, as the reader requires (they are attribute names)."""
    if not (isinstance(record, type) and issubclass(record, Record)):
        raise TypeError(f"record must be a fl.Record subclass, got {record!r}")
    if not record.fields:
        raise TypeError(f"record {record.__name__} has no fields: nothing to write")
    for name, f in record.fields.items():
        if not (isinstance(name, str) and name.isidentifier()):
            where = getattr(f, "where", None)
            raise RecordError(
                f"{where + ': ' if where else ''}{record.__name__} field "
                f"{name!r}: an .flr field name is an identifier (a batch "
                f"attribute); rename it"
            )


class _Section:
    """One section being written: its arrays in memory, or their bytes in a spool."""

    def __init__(self, spool: Any = None) -> None:
        self.spool = spool
        self.parts: list[np.ndarray] = []
        self.length = 0
        self.crc = 0

    def add(self, a: np.ndarray) -> None:
        self.crc = crc(a, self.crc)
        self.length += a.nbytes
        if self.spool is not None:
            self.spool.write(raw(a))
        else:
            self.parts.append(a)

    def copy_to(self, out: Any) -> None:
        if self.spool is not None:
            self.spool.flush()
            self.spool.seek(0)
            _copy_spool(self.spool, out)
            return
        for a in self.parts:
            mv = raw(a)
            at = _head(out)
            if at:
                out.write(mv[:at])
            for s in range(at, len(mv), _FOLIO):
                out.write(mv[s : s + _FOLIO])


def _copy_spool(spool: Any, out: Any) -> None:
    """A spool's bytes into ``out`` from its position, in writes on ``_FOLIO`` offsets,
    through one buffer of that size (a streamed write holds a chunk, not the stream)."""
    buf = memoryview(bytearray(_FOLIO))
    size = _head(out) or _FOLIO
    while k := spool.readinto(buf[:size]):
        out.write(buf[:k])
        size = _FOLIO


def _head(out: Any) -> int:
    """Bytes from ``out``'s position to the next multiple of ``_FOLIO`` (0 on one): the
    first write of a section, after which every write starts on one."""
    return -out.tell() % _FOLIO


class _Column:
    """A field's column being written, a checked chunk of rows at a time."""

    def __init__(self, record: type[Record], name: str, sections: list[_Section]) -> None:
        self.record, self.f, self.sections = record, record.fields[name], sections
        self.kind = column_kind(self.f)
        self.values = 0  # values written so far (elements)
        if self.kind != "fixed":
            sections[1].add(np.zeros(1, dtype=INDEX_DTYPE))  # the first offset, 0

    def add(self, col: Any, rows: int, first: int) -> None:
        """Rows ``[first, first + rows)`` of the source: an array, or a ``Ragged``."""
        f = self.f
        if self.kind == "fixed":
            block = np.ascontiguousarray(col, dtype=le(f.dtype))
            if len(block) != rows:
                raise ValueError(
                    f"chunk columns of different lengths ({f.name}: {len(block)}, expected {rows})"
                )
            self.sections[0].add(block)
            return
        values, offsets, shapes = self._normalised(col, first)
        self.sections[0].add(values)
        self.sections[1].add(offsets[1:] + self.values)
        if has_shapes(f):
            self.sections[2].add(shapes)
        self.values += len(values)

    def _normalised(self, col: Ragged, first: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """A chunk's values (from 0), offsets (from 0) and shapes, checked to agree."""
        f, rec = self.f, self.record
        offsets = np.asarray(col.offsets, dtype=np.int64).reshape(-1)
        k = len(f.varying) if f.kind == "array" else 1
        shapes = np.ascontiguousarray(col.shapes, dtype=INDEX_DTYPE)
        at = f"{f.where}: {rec.__name__} field `{f.name}`"
        if len(offsets) == 0 or shapes.shape != (len(offsets) - 1, k):
            raise ShapeError(
                f"{at} of the items from {first}: a ragged column of {len(offsets) - 1} rows "
                f"needs {len(offsets) - 1} x {k} shapes, got {shapes.shape}"
            )
        base = int(offsets[0])
        if not 0 <= base <= int(offsets[-1]) <= len(col.values):
            raise ShapeError(
                f"{at} of the items from {first}: offsets [{base}, {int(offsets[-1])}] do not "
                f"lie in its {len(col.values)} values"
            )
        values = np.ascontiguousarray(col.values[base : int(offsets[-1])], dtype=value_dtype(f))
        offsets = offsets - base
        problem = ragged_problem(f, rec, offsets, shapes if has_shapes(f) else None, len(values))
        if problem is None and f.kind == "array" and not has_shapes(f):
            # the shapes given must be those the sizes tell (the reader computes them)
            sizes = np.diff(offsets)
            fixed = fixed_size(f)
            if not np.array_equal(shapes[:, 0] * fixed, sizes):
                r = int(np.argmax(shapes[:, 0] * fixed != sizes))
                problem = ("shapes", r, f"shape {shapes[r].tolist()} does not hold its values")
        elif (
            problem is None
            and f.kind != "array"
            and not np.array_equal(shapes[:, 0], np.diff(offsets))
        ):
            r = int(np.argmax(shapes[:, 0] != np.diff(offsets)))
            problem = ("shapes", r, f"length {int(shapes[r, 0])} is not its size")
        if problem is not None:
            section, r, message = problem
            row = max(0, r - 1) if section == "offsets" and r == len(offsets) - 1 else r
            raise ShapeError(f"{at} of item {first + row}: an inconsistent column ({message})")
        if f.kind == "str":
            bad = utf8_problem(values, offsets)
            if bad is not None:
                row = int(np.searchsorted(offsets, bad, "right")) - 1
                raise ShapeError(
                    f"{at} of item {first + row} is not UTF-8 (byte {bad - int(offsets[row])} "
                    f"of the string); a str field holds UTF-8, a bytes field any bytes"
                )
        return values, offsets, shapes


def item_chunks(record: type[Record], items: Iterable[Any], check_values: bool) -> Iterator[dict]:
    """Items checked one by one (naming each), made into column chunks."""
    fields = list(record.fields.values())
    chunk: list[dict[str, Any]] = []
    for n, item in enumerate(items):
        chunk.append(record.check(item, n, check_values=check_values))
        if len(chunk) >= CHUNK_ITEMS:
            yield {f.name: column_of(f, [c[f.name] for c in chunk]) for f in fields}
            chunk = []
    if chunk:
        yield {f.name: column_of(f, [c[f.name] for c in chunk]) for f in fields}


def _rows_of(col: Any) -> int:
    try:
        return len(col)
    except TypeError:  # a scalar, or a 0-d array: check_columns names it
        return 0


def _checked(
    record: type[Record], cols: Mapping[str, Any], first: int, rows: int, check_values: bool
) -> dict[str, Any]:
    """``cols`` (items ``first`` on) checked as a whole; where that fails on a column numpy
    cannot read as a whole (a list holding one ragged value), the items are checked one
    by one, so that the error names the item."""
    try:
        return record.check_columns(cols, np.arange(first, first + rows), check_values=check_values)
    except ShapeError as whole:
        if set(record.fields) <= set(cols) and all(
            isinstance(cols[k], Ragged) or _rows_of(cols[k]) == rows for k in record.fields
        ):
            fields = record.fields
            for r in range(rows):
                try:
                    item = {
                        k: example_of(fields[k], v, r) if isinstance(v, Ragged) else v[r]
                        for k, v in cols.items()
                        if k in fields
                    }
                except Exception:  # a column no item can be read from (a Ragged that lies):
                    raise whole from None  # the whole check's error names the item
                record.check(item, first + r, check_values=check_values)
        raise


def write_columns(
    path: Any, record: type[Record], data: Mapping[str, Any], check_values: bool
) -> int:
    """A file from whole columns, checked as a whole, held in memory as they are."""
    cols = {k: data[k] for k in record.fields if k in data}
    n_rows = _rows_of(next(iter(cols.values()))) if cols else 0
    cols = _checked(record, cols, 0, n_rows, check_values)
    lengths = {len(c) for c in cols.values()}
    if len(lengths) > 1:
        raise ValueError(f"columns of different lengths: { {k: len(v) for k, v in cols.items()} }")
    n = lengths.pop() if lengths else 0
    columns = [
        _Column(record, name, [_Section() for _ in section_names(f) or ("",)])
        for name, f in record.fields.items()
    ]
    for c in columns:
        c.add(cols[c.f.name], n, 0)
    return _assemble(path, record, n, columns)


def write_stream(path: Any, record: type[Record], chunks: Iterable[Any], check_values: bool) -> int:
    """A file from chunks of columns, each spooled beside the target as it comes."""
    spools: list[tuple[Any, str]] = []
    try:
        columns = []
        for name, f in record.fields.items():
            sections = []
            for _ in section_names(f) or ("",):
                fd, scratch = scratch_file(path, scratch_suffix(name, "spool"))
                spools.append((os.fdopen(fd, "w+b"), scratch))
                sections.append(_Section(spools[-1][0]))
            columns.append(_Column(record, name, sections))
        n = 0
        for chunk in chunks:
            if not isinstance(chunk, Mapping):
                raise TypeError(
                    f"a chunk is a dict of columns (batch axis first), got {type(chunk).__name__}"
                )
            rows = _rows_of(next(iter(chunk.values()))) if chunk else 0
            cols = _checked(record, chunk, n, rows, check_values)
            for c in columns:
                c.add(cols[c.f.name], rows, n)
            n += rows
        return _assemble(path, record, n, columns)
    finally:
        for spool, scratch in spools:
            spool.close()
            with contextlib.suppress(FileNotFoundError):
                os.unlink(scratch)


def _assemble(path: Any, record: type[Record], n: int, columns: list[_Column]) -> int:
    sections = [s for c in columns for s in c.sections]
    header, _, placed, end = layout(
        record, n, [[(s.length, s.crc) for s in c.sections] for c in columns]
    )
    with atomic_write(path) as out:
        out.write(preamble(version_of(record), header, n, placed[0][0], end))
        out.write(header)
        for (offset, _), s in zip(placed, sections):
            pos = out.tell()
            if offset > pos:
                out.write(b"\0" * (offset - pos))
            s.copy_to(out)
    return n
