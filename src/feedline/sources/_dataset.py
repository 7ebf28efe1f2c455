"""``Dataset``: a typed view of any map-style source.

=====================================  ============================================
source                                 how a batch is read
=====================================  ============================================
dict of arrays, ``from_arrays``,       checked once as a whole; one ``np.take`` per
torch ``TensorDataset``                field per batch, no per-item work
an object with ``getitems(indices)``   one call per batch returning columns (feedline
(feedline's files)                     files), checked per batch, vectorised
HuggingFace ``datasets.Dataset``       one ``ds[indices]`` per batch (columns)
``pyarrow.Table``, ``DataFrame``       decoded once into arrays (``sources.table``)
an object with ``__getitems__``        one call per batch returning items (torch's
                                       batched protocol), stacked and checked
a list, a torch ``Dataset``, any       one ``__getitem__`` per item, stacked and
``__len__`` + ``__getitem__``          checked
=====================================  ============================================

Items are dicts with the record's fields (other keys ignored), tuples or lists in
field order, or, for a one-field record, the bare value. A ``TensorDataset`` changed
in place (or given other tensors) is read and checked again by the next batch: torch's
version counters tell.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import numpy as np

from .._base import clock
from ..errors import BoundsError, ShapeError
from ..order import Seq
from ..order import salt as name_salt
from ..records import Record
from ..records._ragged import Ragged, example_of
from ._arrow import table_source
from ._items import apply_maps, checked, map_entry, read_items
from ._kinds import (
    _as_indices,
    _column,
    _is_hf_dataset,
    _is_tensor_dataset,
    _versions,
    _write_rows,
    arrays_record,
    check_through,
    check_whole,
    lengths_of,
)
from ._watched import WatchedColumns


class Dataset(WatchedColumns):
    """A typed view of a map-style source: every item is checked against ``record``.

    ``len(ds)``, ``ds[i]`` (a dict of the fields' arrays), ``ds.getitems(indices)``
    (a batch as columns, batch axis first), ``ds.shuffle(seed)`` (a ``Seq``) and
    ``ds.batches(n, ...)`` (a ``Loader``). ``salt`` (for shuffles that do not change
    when the data moves) comes from ``name``, else from the source's own ``salt``.

    >>> import feedline as fl
    >>> ds = fl.Dataset.from_arrays(x=np.zeros((10, 3)), y=np.ones((10, 1)))
    >>> len(ds), ds.getitems(np.array([1, 2]))["x"].shape
    (10, (2, 3))
    """

    def __init__(
        self, record: type[Record], source: Any, *, name: str | None = None, salt: int | None = None
    ) -> None:
        if not (isinstance(record, type) and issubclass(record, Record)):
            raise TypeError(f"a Dataset's first argument is a fl.Record subclass, got {record!r}")
        if not record.fields:
            raise TypeError(f"record {record.__name__} has no fields")
        self.record = record
        source = table_source(record, source)  # an Arrow table, a DataFrame: decoded
        # A file handle is shared, not borrowed: the caller may close theirs early, and
        # the file stays open for this dataset until its own share is given up.
        self._owns_share = hasattr(source, "share") and hasattr(source, "close")
        if self._owns_share:
            source = source.share()
        self.source = source
        self.name = name
        if salt is not None:
            self.salt = int(salt)
        elif name is not None:
            self.salt = name_salt(name)
        else:
            own = getattr(source, "salt", 0)
            self.salt = int(own() if callable(own) else own or 0)
        self._cols: dict[str, np.ndarray] | None = None
        # A TensorDataset's tensors and their version counters when they were last read:
        # torch bumps a counter at every in-place change, so a changed one is read again.
        self._seen: tuple[tuple, list[int]] | None = None
        self._values_checked = False
        # Values were checked before the data were read again: ``columns`` checks them
        # again before handing them out (the device path gathers from ``columns``).
        self._recheck = False
        self._maps: tuple = ()
        self._base: Dataset | None = None  # what a mapped one maps (``_root``); not itself
        self._lengths_cache: dict[str, np.ndarray] = {}
        self._hf = source.with_format("numpy") if _is_hf_dataset(source) else None
        own_record = getattr(source, "record", None)
        self._trusted = (
            bool(getattr(source, "fixed_layout", False))
            and own_record is not None
            and (own_record is record or own_record.same_schema(record))
        )
        # A file whose columns memory-map as arrays is gathered like arrays in memory.
        mapped = getattr(source, "columns", None) if self._trusted else None
        self._mapped_columns: dict[str, np.ndarray] | None = (
            dict(mapped)
            if isinstance(mapped, Mapping) and set(mapped) == set(record.fields)
            else None
        )
        if not (isinstance(source, Mapping) or _is_tensor_dataset(source)) and (
            not hasattr(source, "__len__")
            or not (hasattr(source, "__getitem__") or hasattr(source, "getitems"))
        ):
            raise TypeError(
                f"a Dataset's source is map-style (__len__ and __getitem__), got "
                f"{type(source).__name__}"
            )
        self._read_source()

    def _read_source(self) -> None:
        """Check and convert an in-memory source as a whole; take the source's length."""
        source, record = self.source, self.record
        self._lengths_cache = {}
        if isinstance(source, Mapping):
            self._cols = check_whole(
                self.record,
                {
                    f: source[f]
                    if record.fields[f].ragged
                    else _column(source[f], self._where(f, "dict"))
                    for f in record.fields
                    if f in source
                },
                "dict",
            )
        elif _is_tensor_dataset(source):
            tensors = source.tensors
            if len(tensors) != len(record.fields):
                raise ShapeError(
                    f"{record.__name__}: the TensorDataset has {len(tensors)} "
                    f"tensors, the record has {len(record.fields)} fields"
                )
            seen = (tensors, _versions(tensors))
            self._cols = check_whole(
                self.record,
                {
                    f: _column(t, self._where(f, "TensorDataset"))
                    for f, t in zip(record.fields, tensors)
                },
                "TensorDataset",
            )
            self._seen = seen
        before = self.__dict__.get("_len", 0)  # read again with fewer: records may be gone
        self._len = len(self._cols[next(iter(record.fields))]) if self._cols else len(source)
        self._shrunk = self.__dict__.get("_shrunk", False) or self._len < before
        self._recheck = self._recheck or self._values_checked
        self._values_checked = False

    def _read_if_changed(self) -> bool:
        """Read a TensorDataset again if its tensors are not those read, or changed in
        place since (one version counter read per tensor); whether it was read again."""
        seen = self._seen
        if seen is not None:
            tensors = self.source.tensors
            if tensors is not seen[0] or _versions(tensors) != seen[1]:
                self._read_source()
                return True
        return False

    @property
    def _columns(self) -> dict[str, np.ndarray] | None:
        """The converted in-memory arrays, read again first if a TensorDataset changed
        (the loader's fastest path reads them at each batch)."""
        if self._seen is not None:
            self._read_if_changed()
        return self._cols

    def _where(self, name: str, what: str) -> str:
        f = self.record.fields[name]
        return f"{f.where}: {self.record.__name__} field `{name}` of the {what}"

    def __getstate__(self) -> dict:
        # A file's mapped columns are views of its memory map: the receiving process
        # maps the file again (its source reopens by path) instead of receiving a copy.
        state = self.__dict__.copy()
        if state.get("_mapped_columns") is not None:
            state["_mapped_columns"] = None
            state["_remap"] = True
        # Version counters are the process's own: the receiving one reads its own (its
        # columns are those of the tensors it receives).
        state["_seen"] = None
        return state

    def __setstate__(self, state: dict) -> None:
        remap = state.pop("_remap", False)
        self.__dict__.update(state)
        if remap:
            self._mapped_columns = dict(self.source.columns)
        if self._cols is not None and _is_tensor_dataset(self.source):
            self._seen = (self.source.tensors, _versions(self.source.tensors))

    # -- building -----------------------------------------------------------------------
    @classmethod
    def from_arrays(cls, *, name: str | None = None, **arrays: Any) -> Dataset:
        """An in-memory dataset (data.nu's ``data_new``) with a record built from the arrays.

        Fields are named by the keywords; ``x`` is ``n x d``, ``y`` is ``n x l`` (or
        absent). Each field's shape is its array's shape past the first axis.

        data.nu's flat form ``data_new(x, y, n, d, l)`` is ``from_arrays(x=flat_x,
        y=flat_y, n=n, d=d, l=l)``: ``x`` a flat vector of ``n*d`` numbers, ``y`` of
        ``n*l`` (``y`` may be absent when ``l`` is 0 or not given), row by row; it is
        the same dataset as ``x`` and ``y`` reshaped to ``(n, d)`` and ``(n, l)``. The
        form is chosen by ``n``, ``d`` or ``l`` given as a number (a field, which has an
        example axis, is never one).

        >>> ds = Dataset.from_arrays(x=np.arange(6.0), y=np.arange(2.0), n=2, d=3, l=1)
        >>> ds.getitems([1])["x"].tolist(), ds.getitems([1])["y"].tolist()
        ([[3.0, 4.0, 5.0]], [[1.0]])
        """
        if not arrays:
            raise TypeError("from_arrays needs at least one array, e.g. x=...")
        record, cols = arrays_record(name, arrays)
        return cls(record, cols, name=name)

    # -- reading ------------------------------------------------------------------------
    def __len__(self) -> int:
        if self._seen is not None:
            self._read_if_changed()
        return self._len

    @property
    def in_memory(self) -> bool:
        """Whether the data are arrays held in memory (gathered by index, checked once)."""
        return self._cols is not None

    @property
    def cheap_gathers(self) -> bool:
        """Whether a batch is a plain gather from memory or a memory map (no Python per
        item): worker processes cannot make such a dataset faster."""
        return (self._cols is not None or self._trusted) and not self._maps

    @property
    def columns(self) -> dict[str, np.ndarray] | None:
        """The checked in-memory arrays (None for other sources).

        A ``TensorDataset`` changed since it was read (in place, or its ``tensors``
        replaced) is read again first. When its values were checked before the data were
        read again (``refresh``, such a change), they are checked again before the
        columns are handed out (a ``DomainError`` if one no longer fits).
        """
        columns = self._columns
        if self._recheck and columns is not None:
            self.check_values()
        return columns

    def refresh(self) -> None:
        """Take the source again after it changed: an in-memory source (a dict of arrays,
        a ``TensorDataset``) is checked and converted again, the length is read again, and
        ``check_values`` checks again.

        A ``TensorDataset`` changed through torch needs no ``refresh``: its version
        counters tell, and the next batch (or item, or ``columns``) reads it again. A
        change torch does not count (through a numpy view of a tensor, to a dict's
        arrays) needs one."""
        self._read_source()

    def check_values(self) -> None:
        """Check every value against the fields' domains (once, until ``refresh``).

        In-memory arrays are checked as a whole; any other source is read through, in
        batches of up to 65,536 items (less for large items). A value outside its domain
        is a ``DomainError`` naming the item.
        """
        columns = self._columns  # read again first if a TensorDataset changed
        if self._values_checked:
            return
        if columns is not None:
            self.record.check_columns(columns, np.arange(self._len), check_values=True)
        else:
            check_through(self._root, self.record)  # its own items (maps run as they load)
        self._values_checked = True
        self._recheck = False

    def _check_bounds(self, idx: np.ndarray) -> None:
        """Refuse indices outside ``[0, len)`` (a negative one does not count from the end)."""
        if len(idx):
            lo, hi = int(idx.min()), int(idx.max())
            if lo < 0 or hi >= self._len:
                bad = lo if lo < 0 else hi
                span = f"0 to {self._len - 1}" if self._len else "none: it is empty"
                raise BoundsError(
                    f"{self.record.__name__}: item {bad} is outside the dataset "
                    f"of {self._len:,} items (indices: {span})"
                )

    def __getitem__(self, index: int) -> dict[str, np.ndarray]:
        i = int(index)
        columns = self._columns
        self._check_bounds(np.array([i]))
        fields = self.record.fields
        if columns is not None and not self._maps:
            return {k: example_of(fields[k], v, i) for k, v in columns.items()}
        if (
            self._maps
            or not hasattr(self.source, "__getitem__")
            or hasattr(self.source, "getitems")
        ):
            batch = self.getitems(np.array([i]))
            return {k: example_of(fields[k], v, 0) for k, v in batch.items()}
        return self.record.check(self.source[i], i, check_values=False)

    def getitems(
        self,
        indices: Any,
        *,
        check_values: bool = False,
        out: dict[str, np.ndarray] | None = None,
        positions: Any = None,
        context: int = 0,
        in_range: bool = False,
    ) -> dict[str, Any]:
        """A batch of items as columns (batch axis first), one gather per field.

        With ``out``, the batch is written into the given arrays' first rows. For a mapped
        dataset, ``positions`` (the rows' positions in the loader's order, default the
        indices) and ``context`` (the loader's pass) seed each example's generator.
        ``in_range`` promises the indices are in ``[0, len)`` (an order's records are), which
        saves checking them.
        """
        if self._maps:
            idx = _as_indices(indices, self.record.__name__)
            batch = self._root.getitems(idx, check_values=check_values, in_range=in_range)
            t = clock.perf_counter_ns()
            batch = apply_maps(
                self._root.record,
                self.record,
                self._maps,
                batch,
                idx,
                positions,
                context,
                check_values,
                source=self._root.source,
            )
            clock.add("map", clock.perf_counter_ns() - t)  # the loader's stats
            if out is not None:
                _write_rows(out, batch, len(idx))
            return batch
        idx = _as_indices(indices, self.record.__name__)
        in_memory = self._columns is not None  # a TensorDataset changed: read again first
        if not in_range or self._shrunk:  # an order's records fit unless it shrank
            self._check_bounds(idx)
        columns = self._cols if in_memory else self._mapped_columns
        if columns is not None:
            if check_values and in_memory:
                self.check_values()
                columns = self._cols
                assert columns is not None  # in memory: a re-read keeps the columns
            if out is not None:
                batch = {}
                for k, col in columns.items():
                    if isinstance(col, Ragged):  # no fixed rows to write into
                        batch[k] = col.take(idx)
                        continue
                    # mode="clip": with the bounds checked above, numpy need not buffer `out`.
                    np.take(col, idx, axis=0, out=out[k][: len(idx)], mode="clip")
                    batch[k] = out[k][: len(idx)]
            else:  # the method itself: np.take's dispatch costs a microsecond a field
                batch = {
                    k: col.take(idx) if isinstance(col, Ragged) else col.take(idx, axis=0)
                    for k, col in columns.items()
                }
            if check_values and not in_memory:
                self.record.check_columns(batch, idx, check_values=True)
            return batch
        src = self.source
        if self._trusted:
            # A feedline file of this record: its layout fixes every shape and dtype.
            batch = src.getitems(idx, out=out)
            if check_values:
                checked(self.record, src, batch, idx, True)
            return batch
        else:
            batch = read_items(self.record, src, self._hf, idx, check_values)
        if out is not None:
            _write_rows(out, batch, len(idx))
        return batch

    # -- transforms ---------------------------------------------------------------------
    def map(
        self,
        fn: Any,
        *,
        seed: int = 0,
        record: type[Record] | None = None,
        threads: int = 1,
    ) -> Dataset:
        """This dataset with ``fn`` applied to every example as it loads (lazily).

        ``fn(example)`` or ``fn(example, rng)`` takes a dict of the fields' values and
        returns one that fits the record, or ``record`` when given: a map may change
        what an example is (decode bytes into arrays, tokenize strings), and the mapped
        dataset's record is then ``record``. ``rng`` is a ``numpy.random.Generator`` whose
        state comes from ``seed``, the loader's pass and the example's position in the
        pass before sharding, so an augmented stream is the same on every run, with any
        number of workers or ranks (each rank draws its own), and resumes exactly.
        ``rng`` is valid during the call (it is reset for the next example). A loader
        runs maps in its worker processes. ``threads`` > 1 runs a batch's examples in
        that many threads of the process (for functions that release the GIL, such as
        image decoders): each example's result is the same for any number of threads.
        """
        entry = map_entry(fn, seed, record, threads)
        mapped = copy.copy(self)
        mapped._owns_share = False  # the base dataset keeps the file open
        mapped._maps = (*self._maps, entry)
        mapped._base = self._root
        mapped._lengths_cache = {}
        if record is not None:
            mapped.record = record
        return mapped

    def lengths(self, dim: str) -> np.ndarray:
        """Every example's length on the varying dim ``dim`` (int64, one per item; what
        length bucketing sorts by), read once and kept: a ragged column's shapes (in
        memory, or a file's offsets), otherwise the items read through once. A mapped
        dataset's are its source's (a map that changes lengths cannot be bucketed by
        them: bucket by a dim of the source's record)."""
        cached = self._lengths_cache.get(dim)
        if cached is None:
            cached = self._lengths_cache[dim] = lengths_of(self, dim)
        return cached

    @property
    def mapped(self) -> bool:
        """Whether examples pass through ``map`` functions as they load."""
        return bool(self._maps)

    @property
    def _root(self) -> Dataset:
        """The unmapped dataset whose items this one's maps take (itself if none)."""
        return self if self._base is None else self._base

    # -- ordering -----------------------------------------------------------------------
    def to_seq(self) -> Seq:
        """This dataset as the source of an ordering configuration."""
        return Seq.source(self)

    def shuffle(self, seed: int) -> Seq:
        """A seeded shuffle of this dataset (a ``Seq``; ``seed`` must be an int)."""
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
            raise TypeError(f"seed must be an int, got {type(seed).__name__}")
        return Seq.source(self).shuffle(int(seed))

    def batches(
        self, n: int | None = None, *, batch_size: int | None = None, **loader_options: Any
    ):
        """A loader over this dataset of batches of ``n`` examples, in order unless
        ``seed`` shuffles (see ``Loader``). ``n`` is given by position or as ``n=``, as
        ShapeScript's ``batches(64)``; ``batch_size=`` is the same.
        """
        if (n is None) == (batch_size is None):
            raise TypeError(
                f"batches takes the batch size once, as n (by position or n=) or "
                f"batch_size=; got n={n!r} and batch_size={batch_size!r}"
            )
        # The contract's convenience constructor, and the one import here that points up
        # the layers, at call time (tests/test_layers.py names it).
        from ..loader import Loader

        size = n if n is not None else batch_size
        assert size is not None  # one of the two, checked above
        return Loader(self, size, **loader_options)

    def close(self) -> None:
        """Give up this dataset's share of its source's file (if it has one)."""
        self._mapped_columns = None
        if self._owns_share:
            self._owns_share = False
            self.source.close()

    def __repr__(self) -> str:
        kind = "in memory" if self.in_memory else type(self.source).__name__
        return f"Dataset({self.record.__name__}, {self._len:,} items, {kind})"
