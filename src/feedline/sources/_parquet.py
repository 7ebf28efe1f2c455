"""Parquet files as a typed random-access source, read by row group.

A row's row group is found by a prefix sum of the files' row-group sizes (one
``searchsorted`` per batch), so a shuffled batch decodes only the row groups it
touches, and only the record's columns of them. Decoded row groups stay in a bounded
LRU cache: ``cache_groups`` slots (by default as many as 1 GiB holds), each a block of
rows of one array per fixed field, so a batch is one ``take`` per field over the
cache, whatever the groups it touches; a ragged (list, string, binary) field's slots
are joined into one ``Ragged`` when the cache changes.

========================  ==========================================================
cost                      per batch
========================  ==========================================================
row groups in the cache   one ``searchsorted``, one ``take`` per field
a row group not cached    its columns decoded (pyarrow), copied into a slot; the
                          ragged fields' slots joined again (a copy of the cache's)
memory                    ``cache_groups`` x the largest row group's decoded columns
========================  ==========================================================

A shuffle of the whole file touches every row group in every batch: give
``cache_groups`` at least the file's row groups (``n_groups``) when its decoded
columns fit in memory, or shuffle within blocks of rows so each batch touches few.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from typing import Any

import numpy as np

from ..errors import BoundsError, FormatError
from ..formats._arrowtypes import pyarrow, schema_record
from ..formats._fsinput import expand
from ..records import Field, Ragged, Record
from ._arrow import decode
from ._parquet_files import LocalParquet, check_columns, layout_fixed, open_file

# Decoded row groups kept by default: as many as fit in this many bytes (the columns'
# uncompressed sizes), at least one: a shuffle of a file that fits decodes it once; a
# cache smaller than a batch's groups ran 150x slower, at 5k rows/s (benchmarks/parquet.py).
CACHE_BYTES = 1 << 30


class ParquetSource:
    """One or more Parquet files as a typed source: ``len``, ``src[i]``,
    ``src.getitems(indices)`` (columns, batch axis first) and ``.record``.

    Built by ``fl.sources.parquet``. It pickles as its paths and record: a worker
    process opens the files again itself (and so does a forked child).
    """

    def __init__(
        self,
        path: Any,
        record: type[Record] | None = None,
        *,
        columns: list[str] | None = None,
        cache_groups: int | None = None,
        storage_options: Any = None,
    ) -> None:
        if cache_groups is not None and (
            isinstance(cache_groups, bool) or not isinstance(cache_groups, (int, np.integer))
        ):
            raise TypeError(
                f"cache_groups must be an int or None, got {type(cache_groups).__name__}"
            )
        if cache_groups is not None and cache_groups < 1:
            raise ValueError(f"cache_groups must be at least 1, got {cache_groups}")
        if record is not None and columns is not None:
            raise TypeError("fl.sources.parquet takes record= or columns=, not both")
        if record is not None and not (isinstance(record, type) and issubclass(record, Record)):
            raise TypeError(f"record is a fl.Record subclass, got {record!r}")
        self.storage_options = storage_options
        self.paths = expand(path, "Parquet file", storage_options)
        files = [open_file(p, storage_options) for p in self.paths]
        # each local file's identity (LocalParquet.seen): every read checks it is unchanged
        self.seen = [f.seen() if isinstance(f, LocalParquet) else None for f in files]
        first = files[0].schema_arrow
        if record is None:
            record = schema_record(first, "ParquetRow", self.paths[0], columns)
        self.record = record
        sizes: list[int] = []
        groups: list[tuple[int, int]] = []
        largest = 1  # the largest row group's uncompressed bytes of the columns read
        for k, (p, pf) in enumerate(zip(self.paths, files)):
            check_columns(record, p, pf.schema_arrow, first, self.paths[0])
            meta = pf.metadata
            if cache_groups is None:  # leaf columns: a list or struct column has its own
                read = [
                    i
                    for i in range(meta.num_columns)
                    if meta.schema.column(i).path.split(".")[0] in record.fields
                ]
            for g in range(meta.num_row_groups):
                rg = meta.row_group(g)
                sizes.append(rg.num_rows)
                groups.append((k, g))
                if cache_groups is None:
                    got = sum(rg.column(i).total_uncompressed_size for i in read)
                    largest = max(largest, got)
        self.fixed_layout = layout_fixed(record, first)
        self.groups = groups
        self.starts = np.zeros(len(sizes) + 1, dtype=np.int64)
        np.cumsum(np.asarray(sizes, dtype=np.int64), out=self.starts[1:])
        self.n = int(self.starts[-1])
        self.salt = 0
        if cache_groups is None:
            cache_groups = max(1, CACHE_BYTES // largest)
        self.cache_groups = min(int(cache_groups), max(1, len(groups)))
        self._row_max = max(sizes, default=0)
        self._setup(files)

    def _setup(self, files: list[Any] | None) -> None:
        """This process's state: open files, an empty cache."""
        self._pid = os.getpid()
        self._files = files
        self._lock = threading.Lock()
        slots = max(1, min(self.cache_groups, len(self.groups)))
        self._slots = slots
        self._whole = slots >= len(self.groups)  # the cache holds every row group
        self._lru: OrderedDict[int, int] = OrderedDict()  # group -> slot, oldest first
        self._slot_of = np.full(len(self.groups), -1, dtype=np.int64)
        self._free = list(range(slots))[::-1]  # slot 0 first: groups read in order lie in
        # order, and a whole cache of equal groups is the file's rows as they are (_direct)
        self._direct: bool | None = None
        self._fixed: dict[str, np.ndarray] = {}  # field -> (slots * row_max, *shape)
        self._ragged: dict[str, list[Ragged | None]] = {
            k: [None] * slots for k, f in self.record.fields.items() if f.ragged
        }
        self._joined: dict[str, Ragged] = {}  # each ragged field's slots as one column

    def _reopen(self) -> list[Any]:
        """The files opened again in this process (a worker, a forked child), each
        checked to be the file the source was made from."""
        return [open_file(p, self.storage_options, seen) for p, seen in zip(self.paths, self.seen)]

    def _intact(self, k: int) -> None:
        """Before reading file ``k``: a ``FormatError`` if it was written over in place."""
        seen, files = self.seen[k], self._files
        if seen is not None and files is not None:
            files[k].check(seen)

    def __getstate__(self) -> dict:
        state = {k: v for k, v in self.__dict__.items() if not k.startswith("_")}
        state["_row_max"] = self._row_max
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._setup(None)

    # -- the source protocol -----------------------------------------------------------
    def __len__(self) -> int:
        return self.n

    @property
    def n_groups(self) -> int:
        """The row groups of all the files."""
        return len(self.groups)

    def __getitem__(self, index: int) -> dict[str, Any]:
        from ..records._ragged import example_of

        batch = self.getitems(np.array([int(index)], dtype=np.int64))
        return {k: example_of(self.record.fields[k], v, 0) for k, v in batch.items()}

    def getitems(self, indices: Any, out: dict[str, np.ndarray] | None = None) -> dict[str, Any]:
        """Rows ``indices`` as the record's columns: numpy arrays for fixed fields (into
        ``out``'s first rows when given), a ``Ragged`` for list, ``str`` and ``bytes``
        ones. Thread-safe (one batch at a time reads the cache). The values are the
        file's: the record's checks (a dim's maximum, ``truncate=True``, domains) apply
        where a ``Loader`` or an ``fl.Dataset`` reads the source."""
        idx = np.asarray(indices, dtype=np.int64).reshape(-1)
        if len(idx) and (int(idx.min()) < 0 or int(idx.max()) >= self.n):
            bad = int(idx.min()) if int(idx.min()) < 0 else int(idx.max())
            raise BoundsError(f"{self.paths[0]}: row {bad} is outside [0, {self.n:,})")
        if not len(idx):
            return self._empty()
        if os.getpid() != self._pid:  # a forked child: its own files, cache and lock
            self._setup(None)
        with self._lock:
            if self._whole and len(self._lru) == len(self.groups):  # none to evict
                if self._direct is None:
                    self._direct = self._rows_in_place()
                if self._direct:  # row i of the source is row i of the blocks
                    return self._gather_flat(idx, out)
            group = np.searchsorted(self.starts, idx, "right") - 1
            local = idx - self.starts[group]
            if self._whole and len(self._lru) == len(self.groups):
                return self._gather(group, local, out)
            need = np.unique(group)
            if len(need) <= self._slots:
                self._load(need)
                return self._gather(group, local, out)
            # more groups than slots: a round of `slots` groups at a time
            parts = []
            for a in range(0, len(need), self._slots):
                self._load(need[a : a + self._slots])
                rows = np.isin(group, need[a : a + self._slots])
                parts.append((rows, self._gather(group[rows], local[rows])))
            return self._merge(parts, len(idx), out)

    def locate(self, index: int) -> str:
        """Where row ``index`` of the source lies: its file, row group and row there
        (named by errors about the row)."""
        if not 0 <= index < self.n:
            raise BoundsError(f"{self.paths[0]}: row {index} is outside [0, {self.n:,})")
        g = int(np.searchsorted(self.starts, index, "right")) - 1
        k, rg = self.groups[g]
        return f"row {index - int(self.starts[g]):,} of row group {rg} of {self.paths[k]}"

    def _empty(self) -> dict[str, Any]:
        """A batch of no rows."""
        out: dict[str, Any] = {}
        for k, f in self.record.fields.items():
            if f.ragged:
                array = f.kind == "array"
                out[k] = Ragged.empty(f.shape if array else (None,), f.dtype if array else np.uint8)
            else:
                out[k] = np.zeros((0, *f.shape), dtype=f.dtype)
        return out

    # -- the cache ---------------------------------------------------------------------
    def _load(self, need: np.ndarray) -> None:
        """Every group of ``need`` (at most ``slots``) in a slot, the others evicted
        oldest first."""
        missing = []
        for g in need.tolist():
            if g in self._lru:
                self._lru.move_to_end(g)
            else:
                missing.append(g)
        if len(missing) == len(self.groups) > 1 and self._whole and self._load_whole():
            return
        tables = self._read_together(missing)
        for g in missing:
            if self._free:
                slot = self._free.pop()
            else:
                old, slot = self._lru.popitem(last=False)
                self._slot_of[old] = -1
            try:
                self._fill(g, slot, tables.get(g))
            except BaseException:
                self._free.append(slot)  # empty now (its old group was let go): no slot lost
                self._direct = None
                raise
            self._lru[g] = slot
            self._slot_of[g] = slot
            self._direct = None

    def _load_whole(self) -> bool:
        """Every group at once (a shuffled first batch of a file the cache holds): each
        field's column decoded from the whole file as the block itself (a view of
        Arrow's buffers where the layout allows: no copy into slots, no join), when the
        groups lie in place (all of ``row_max`` rows but the last). False where that
        does not hold or the read fails (the groups are then read one by one)."""
        pa = pyarrow()
        groups = np.arange(len(self.groups), dtype=np.int64)
        if not np.array_equal(self.starts[:-1], groups * self._row_max):
            return False
        if self._files is None:
            self._files = self._reopen()
        names = list(self.record.fields)
        for k in range(len(self._files)):
            self._intact(k)
        try:
            parts = [
                f.read_row_groups(list(range(f.metadata.num_row_groups)), names)
                for f in self._files
            ]
        except (pa.ArrowException, OSError):
            return False
        table = pa.concat_tables(parts) if len(parts) > 1 else parts[0]
        where = self.paths[0] if len(self.paths) == 1 else f"{self.paths[0]} (and more)"
        cols = {}  # every field decoded before any is kept: a failure leaves the cache
        for name, f in self.record.fields.items():
            try:
                cols[name] = decode(table.column(name), f, where)
            except FormatError as e:
                raise (self._group_error(table.column(name), f) or e) from None
        for name, f in self.record.fields.items():
            if f.ragged:
                self._joined[name] = cols[name]
            else:
                self._fixed[name] = cols[name]
        self._free.clear()
        for g in groups.tolist():
            self._lru[g] = g
        self._slot_of[:] = groups
        self._direct = True
        return True

    def _group_error(self, column: Any, f: Field) -> FormatError | None:
        """The error of the first row group whose rows of ``column`` (every group's, in
        order) do not decode as field ``f``, naming its file, the group and the row there,
        as a read of that group alone would; None if each decodes (only after a failure)."""
        for g, (k, rg) in enumerate(self.groups):
            at, end = int(self.starts[g]), int(self.starts[g + 1])
            try:
                decode(column.slice(at, end - at), f, f"{self.paths[k]}: row group {rg}")
            except FormatError as e:
                return e
        return None

    def _read_together(self, missing: list[int]) -> dict[int, Any]:
        """The tables of the ``missing`` groups of each file, read in one call per file
        (pyarrow decodes them in parallel: a shuffled first batch needs every group);
        none where that fails, so ``_fill`` reads each alone and names the bad one."""
        pa = pyarrow()
        if len(missing) < 2:
            return {}
        if self._files is None:
            self._files = self._reopen()
        by_file: dict[int, list[int]] = {}
        for g in missing:
            by_file.setdefault(self.groups[g][0], []).append(g)
        out: dict[int, Any] = {}
        names = list(self.record.fields)
        for k, gs in by_file.items():
            self._intact(k)
            try:
                table = self._files[k].read_row_groups([self.groups[g][1] for g in gs], names)
            except (pa.ArrowException, OSError):
                continue
            at = 0
            for g in gs:
                n = int(self.starts[g + 1] - self.starts[g])
                out[g] = table.slice(at, n)
                at += n
        return out

    def _fill(self, g: int, slot: int, table: Any = None) -> None:
        """Decode row group ``g``'s columns (read now, unless ``table`` holds them) into
        ``slot``."""
        pa = pyarrow()
        k, rg = self.groups[g]
        if self._files is None:
            self._files = self._reopen()
        path = self.paths[k]
        where = f"{path}: row group {rg}"
        names = list(self.record.fields)
        try:
            if table is None:
                self._intact(k)
                table = self._files[k].read_row_group(rg, columns=names)
        except (pa.ArrowException, OSError) as e:
            raise FormatError(
                f"row group {rg} (rows {int(self.starts[g]):,} to "
                f"{int(self.starts[g + 1]):,} of the source, columns {names}) does not "
                f"decode (truncated or corrupt): {e}",
                path,
            ) from e
        n = table.num_rows
        for name, f in self.record.fields.items():
            col = decode(table.column(name), f, where)
            if f.ragged:
                self._ragged[name][slot] = col
                self._joined.pop(name, None)  # joined again at the next gather
                continue
            block = self._fixed.get(name)
            if block is None:
                shape = (self._slots * self._row_max, *col.shape[1:])
                block = self._fixed[name] = np.empty(shape, dtype=col.dtype)
            at = slot * self._row_max
            block[at : at + n] = col

    def _gather(
        self, group: np.ndarray, local: np.ndarray, into: dict[str, np.ndarray] | None = None
    ) -> dict[str, Any]:
        """Rows (``group``, ``local``), all in slots, as columns (fixed ones ``into``'s)."""
        return self._gather_flat(self._slot_of[group] * self._row_max + local, into)

    def _rows_in_place(self) -> bool:
        """Whether every group lies in its own slot, in order, and every group but the
        last has ``row_max`` rows: then a row's place in the blocks is its index."""
        groups = np.arange(len(self.groups), dtype=np.int64)
        return bool(
            np.array_equal(self._slot_of, groups)
            and np.array_equal(self.starts[:-1], groups * self._row_max)
        )

    def _gather_flat(self, flat: np.ndarray, into: dict[str, np.ndarray] | None) -> dict[str, Any]:
        """Rows ``flat`` of the slots' blocks as columns (fixed ones ``into``'s)."""
        out: dict[str, Any] = {}
        for k, block in self._fixed.items():
            if into is not None and k in into:
                # in range (the rows were checked): "clip" spares numpy a buffered copy
                out[k] = np.take(block, flat, axis=0, out=into[k][: len(flat)], mode="clip")
            else:
                out[k] = block.take(flat, axis=0)
        for k in self._ragged:
            joined = self._joined.get(k)
            if joined is None:
                joined = self._joined[k] = self._join(k)
            out[k] = joined.take(flat)
        return {k: out[k] for k in self.record.fields}

    def _join(self, k: str) -> Ragged:
        """Ragged field ``k``'s slots as one column of ``slots * row_max`` rows, laid out as
        the fixed fields' blocks (a slot's rows past its group's are empty): a batch is
        one ``take`` of it, whatever the groups it touches."""
        f = self.record.fields[k]
        template = f.shape if f.kind == "array" else (None,)
        dtype = f.dtype if f.kind == "array" else np.uint8
        rows = self._row_max
        values, sizes, shapes = [], [], []
        for piece in self._ragged[k]:
            if piece is None:
                piece = Ragged.empty(template, dtype)
            n = len(piece)
            values.append(piece.values)
            size = np.zeros(rows, dtype=np.int64)
            size[:n] = np.diff(piece.offsets)
            sizes.append(size)
            shape = np.zeros((rows, piece.shapes.shape[1]), dtype=np.int64)
            shape[:n] = piece.shapes
            shapes.append(shape)
        offsets = np.zeros(rows * len(sizes) + 1, dtype=np.int64)
        np.cumsum(np.concatenate(sizes), out=offsets[1:])
        return Ragged(np.concatenate(values), offsets, np.concatenate(shapes), template)

    def _merge(
        self,
        parts: list[tuple[np.ndarray, dict[str, Any]]],
        n: int,
        into: dict[str, np.ndarray] | None,
    ) -> dict[str, Any]:
        """The batch of rows gathered in rounds (``parts``: which rows, their columns)."""
        out: dict[str, Any] = {}
        for k, f in self.record.fields.items():
            if f.ragged:
                pieces = [cols[k] for _, cols in parts]
                where = np.concatenate([np.flatnonzero(rows) for rows, _ in parts])
                back = np.empty(n, dtype=np.int64)
                back[where] = np.arange(n, dtype=np.int64)
                out[k] = Ragged.concat(pieces).take(back)
            else:
                first = parts[0][1][k]
                if into is not None and k in into:
                    col = into[k][:n]
                else:
                    col = np.empty((n, *first.shape[1:]), dtype=first.dtype)
                for rows, cols in parts:
                    col[rows] = cols[k]
                out[k] = col
        return out

    def __repr__(self) -> str:
        files = self.paths[0] if len(self.paths) == 1 else f"{len(self.paths)} files"
        return (
            f"ParquetSource({files!r}, {self.record.__name__}, {self.n:,} rows in "
            f"{len(self.groups)} row groups)"
        )


def parquet(
    path: Any,
    record: type[Record] | None = None,
    *,
    columns: list[str] | None = None,
    cache_groups: int | None = None,
    storage_options: Any = None,
) -> ParquetSource:
    """Parquet files read at random, by row group: a typed source for ``fl.Loader``,
    ``fl.Seq.source`` or ``fl.Dataset``.

    ``path`` is a file, a glob pattern (``"data/*.parquet"``, sorted) or a list of
    them, read one after another as one source; each may be an fsspec URL
    (``"s3://bucket/data/*.parquet"``, fsspec's ``storage_options``: credentials, the
    endpoint), read through ``fl.remote``'s block cache (the footer, then the byte
    ranges of the row groups a batch touches; retried; an object replaced while open a
    ``FormatError`` naming it). A local file written over in place while the source is
    open (its size or modification time changed: a touch counts) is a ``FormatError``
    at the next read of its row groups, and so is one replaced by another where a
    worker opens it again; the source's own process reads on from a replaced file's
    old contents. ``record`` chooses the fields (each a column of that name; only those
    columns are decoded); without one, it is inferred from the Arrow schema, of every
    column or of ``columns``: numbers and bools are scalars, fixed-size lists fixed
    dims, lists a varying dim (``T``, ``T1``, ...), strings ``str``, binary ``bytes``.
    A column with no field (a struct, a date, a map) is a ``RecordError`` naming it and
    saying why; a file that is not Parquet, or a row group that does not decode, a
    ``FormatError`` naming the file (and the row group). ``cache_groups`` row groups stay
    decoded (LRU; by default as many as fit in 1 GiB, by the file's uncompressed
    sizes); see the module's costs.

    >>> import os, tempfile, pyarrow as pa, pyarrow.parquet as pq, feedline as fl
    >>> p = os.path.join(tempfile.mkdtemp(), "t.parquet")
    >>> pq.write_table(pa.table({"x": [0.5, 1.5, 2.5], "s": ["a", "bc", "d"]}), p,
    ...                row_group_size=2)
    >>> src = fl.sources.parquet(p)
    >>> len(src), src.n_groups, src.getitems([2, 0])["x"].tolist(), src[1]["s"]
    (3, 2, [2.5, 0.5], 'bc')
    """
    return ParquetSource(
        path, record, columns=columns, cache_groups=cache_groups, storage_options=storage_options
    )
