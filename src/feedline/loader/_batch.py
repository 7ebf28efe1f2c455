"""``Batch``: one batch of examples, stacked field by field, batch axis first, and
``BatchMeta``: where its rows came from (``batch.meta``).

A record's fields are the batch's attributes, whatever their names (``mask``, ``size``
and ``positions`` are legal field names); the batch's own metadata lives in
``batch.meta``, built on first use:

=======================  ==============================================================
``meta.size``            real examples in the batch (``len(batch)`` counts padding too)
``meta.mask``            bool per row: False on padding rows
``meta.positions``       each row's position in the loader's order (-1 on padding)
``meta.source_ordinals`` which source each row came from (-1 on padding)
``meta.record_indices``  each row's index in its source (-1 on padding)
``meta.lengths``         dim -> int array of each row's length, for the record's
                         variable-length dims (``{}`` when it has none)
=======================  ==============================================================

Under ``output="torch"`` the metadata's arrays are tensors on the fields' device.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable, Mapping
from functools import partial
from types import MappingProxyType
from typing import Any

import numpy as np

# The names that were the batch's metadata before ``batch.meta``: for a record without a
# field of that name, ``batch.<name>`` still reads ``batch.meta.<name>``, with a warning.
_DEPRECATED = frozenset({"size", "mask", "positions", "source_ordinals", "record_indices"})

_UNSET: Any = object()
_EMPTY: Mapping[str, Any] = MappingProxyType({})


class BatchMeta:
    """A batch's metadata (``batch.meta``): read-only, each array made on first use.

    ``size`` is an int; ``mask`` (bool), ``positions``, ``source_ordinals`` and
    ``record_indices`` (int64, -1 on padding rows) have one entry per row;
    ``lengths`` maps each variable-length dim to an int array per row (empty for a
    record of fixed shapes). Under ``output="torch"`` the arrays are tensors on the
    fields' device; from ``fl.jax``, ``jax.Array``s.

    Cost: nothing until read; then one small array per attribute read (cached), and,
    for tensors, one copy to the device.

    >>> import numpy as np, feedline as fl
    >>> ds = fl.Dataset.from_arrays(x=np.arange(6.0).reshape(3, 2))
    >>> last = list(fl.Loader(ds, 2, pad=True))[-1]
    >>> last.meta.size, last.meta.mask.tolist(), last.meta.positions.tolist()
    (1, [True, False], [2, -1])
    """

    # Read-only through properties over private slots (plain stores: an __init__ through
    # object.__setattr__ cost 1.1 us, this one a third of that).
    __slots__ = (
        "_base",
        "_convert",
        "_lengths",
        "_mask",
        "_positions",
        "_record_indices",
        "_size",
        "_source_ordinals",
    )
    # (rows, pos0, ordinals, records); the metadata converted; None when given (``of``)
    _base: tuple[int, Any, np.ndarray, np.ndarray] | BatchMeta | None
    _lengths: Mapping[str, Any]

    def __init__(
        self,
        size: int,
        rows: int,
        pos0: Any,
        ordinals: np.ndarray,
        records: np.ndarray,
        lengths: Mapping[str, Any] | None = None,
        convert: Callable[[np.ndarray], Any] | None = None,
    ) -> None:
        """The metadata of a batch of ``rows`` rows whose first ``size`` are the real
        examples at positions ``pos0, pos0 + 1, ...`` (``ordinals`` and ``records`` are
        theirs: ``size`` entries each). ``convert`` (numpy -> tensor) applies to every
        array as it is made."""
        self._size = size
        self._base = (rows, pos0, ordinals, records)
        self._convert = convert
        if lengths:
            self._lengths = MappingProxyType(
                {k: v if convert is None else convert(np.asarray(v)) for k, v in lengths.items()}
            )
        else:
            self._lengths = _EMPTY
        self._mask = self._positions = self._source_ordinals = self._record_indices = _UNSET

    @classmethod
    def of(
        cls,
        *,
        size: Any,
        mask: Any,
        positions: Any,
        source_ordinals: Any,
        record_indices: Any,
        lengths: Mapping[str, Any] | None = None,
    ) -> BatchMeta:
        """Metadata with the given values (already arrays of the kind wanted: JAX's, a
        framework's tracers); nothing is computed or checked."""
        m = cls.__new__(cls)
        m._size = size
        m._base = None
        m._convert = None
        m._lengths = MappingProxyType(dict(lengths)) if lengths else _EMPTY
        m._mask = mask
        m._positions = positions
        m._source_ordinals = source_ordinals
        m._record_indices = record_indices
        return m

    def converted(self, convert: Callable[[Any], Any]) -> BatchMeta:
        """The same metadata with ``convert`` applied to each array (lazily, as read)."""
        m = BatchMeta.__new__(BatchMeta)
        m._size = self._size
        m._base = self
        m._convert = convert
        m._lengths = (
            MappingProxyType({k: convert(v) for k, v in self._lengths.items()})
            if self._lengths
            else _EMPTY
        )
        m._mask = m._positions = m._source_ordinals = m._record_indices = _UNSET
        return m

    @property
    def size(self) -> Any:
        """The real examples in the batch (an int)."""
        return self._size

    @property
    def lengths(self) -> Mapping[str, Any]:
        """Variable-length dim -> each row's length (an int array; empty for a record
        whose shapes are fixed)."""
        return self._lengths

    def _make(self, name: str) -> Any:
        base = self._base
        if isinstance(base, BatchMeta):
            value = getattr(base, name)
        else:
            assert base is not None  # metadata made by ``of`` has every value set
            rows, pos0, ordinals, records = base
            size = self._size
            if name == "mask":
                value = np.zeros(rows, dtype=bool)
                value[:size] = True
            elif name == "positions":
                if isinstance(pos0, np.ndarray):  # the rows' own positions (bucketing)
                    value = _padded(pos0.astype(np.int64, copy=False), rows)
                else:
                    value = _padded(np.arange(pos0, pos0 + size, dtype=np.int64), rows)
            elif name == "source_ordinals":
                value = _padded(ordinals, rows)
            else:
                value = _padded(records, rows)
        if self._convert is not None:
            value = self._convert(value)
        setattr(self, "_" + name, value)
        return value

    @property
    def mask(self) -> Any:
        """bool per row: True for real examples, False for padding."""
        v = self._mask
        return self._make("mask") if v is _UNSET else v

    @property
    def positions(self) -> Any:
        """Each row's position in the loader's order (-1 on padding)."""
        v = self._positions
        return self._make("positions") if v is _UNSET else v

    @property
    def source_ordinals(self) -> Any:
        """Which source each row came from (an index into the order's sources; -1 on
        padding)."""
        v = self._source_ordinals
        return self._make("source_ordinals") if v is _UNSET else v

    @property
    def record_indices(self) -> Any:
        """Each row's index in its source (-1 on padding)."""
        v = self._record_indices
        return self._make("record_indices") if v is _UNSET else v

    def __reduce__(self) -> Any:
        # Pickled as its values (numpy arrays, tensors), so a copy needs no base.
        return (
            _meta_of,
            (
                self.size,
                self.mask,
                self.positions,
                self.source_ordinals,
                self.record_indices,
                dict(self.lengths),
            ),
        )

    def __repr__(self) -> str:
        return f"BatchMeta(size={self.size}, rows={len(self.mask)}, lengths={dict(self.lengths)})"


def _meta_of(size, mask, positions, source_ordinals, record_indices, lengths) -> BatchMeta:
    return BatchMeta.of(
        size=size,
        mask=mask,
        positions=positions,
        source_ordinals=source_ordinals,
        record_indices=record_indices,
        lengths=lengths,
    )


def _padded(values: np.ndarray, rows: int) -> np.ndarray:
    if len(values) == rows:
        return values
    out = np.full(rows, -1, dtype=np.int64)
    out[: len(values)] = values
    return out


def _tensor_on(array: np.ndarray, device: Any) -> Any:
    import torch

    # a tensor's memory can be written: a read-only array (a memory map's) is copied
    a = np.ascontiguousarray(array) if array.flags.writeable else array.copy()
    return torch.from_numpy(a).to(device)


def _converter_like(fields: dict[str, Any]) -> Callable[[np.ndarray], Any] | None:
    """A numpy -> tensor converter when the fields are torch tensors (to the first
    field's device); None otherwise. Torch is not imported: if it is not loaded
    already, the fields cannot be its tensors."""
    torch = sys.modules.get("torch")
    if torch is None or not fields:
        return None
    first = next(iter(fields.values()))
    if not isinstance(first, torch.Tensor):
        # a bytes or str field is a list under every output: the next field tells
        first = next((v for v in fields.values() if not isinstance(v, list)), None)
        if not isinstance(first, torch.Tensor):
            return None
    return partial(_tensor_on, device=first.device)


class Batch:
    """A batch: one attribute per field, whatever its name, and ``batch.meta``.

    ``len(batch)`` is the number of rows (padding included); ``batch.meta`` is the
    batch's metadata (``BatchMeta``: ``size``, ``mask``, ``positions``,
    ``source_ordinals``, ``record_indices``, ``lengths``). ``batch["name"]`` reads a
    field too: a field named ``meta`` is read that way, as ``batch.meta`` is always the
    metadata. Setting an attribute sets a field (``batch.aug = ...``).

    For a record without such a field, ``batch.size``, ``batch.mask``,
    ``batch.positions``, ``batch.source_ordinals`` and ``batch.record_indices`` still read
    ``batch.meta.<name>`` but warn (``DeprecationWarning``): they were the metadata
    before ``batch.meta``.

    >>> import numpy as np, feedline as fl
    >>> class Row(fl.Record, dims={"T": 3}):
    ...     mask = fl.field("T", "bool")
    >>> ds = fl.Dataset(Row, {"mask": np.ones((3, 3), dtype=bool)})
    >>> b = next(iter(fl.Loader(ds, 2)))
    >>> b.mask.shape, b.meta.mask.tolist()
    ((2, 3), [True, True])
    """

    # The fields dict is the instance's __dict__, so ``batch.x`` is a plain attribute
    # lookup (a __getattr__ per field cost a microsecond a batch). ``meta`` and ``fields``
    # are the only data descriptors (records cannot have a field named ``fields``); the
    # slots are private names, which fields cannot have. The metadata is built on first
    # use, so making a batch costs what it did before ``meta``.
    __slots__ = ("__dict__", "_meta", "_ordinals", "_pos0", "_records", "_rows", "_size")

    def __init__(
        self,
        fields: dict[str, Any],
        size: int,
        rows: int,
        pos0: int,
        ordinals: np.ndarray,
        records: np.ndarray,
    ) -> None:
        """``fields`` (name -> array of ``rows`` rows) become the batch's attributes;
        the first ``size`` rows are the real examples, at positions ``pos0, ...`` of the
        order, from ``ordinals``/``records`` (``size`` entries each)."""
        # Six stores and a None: keyword parameters here (meta=, lengths=) cost every
        # batch ~35 ns of ~230 (benchmarks/batch_meta.py), so they are with_meta's.
        self.__dict__ = fields
        self._size = size
        self._rows = rows
        self._pos0 = pos0
        self._ordinals = ordinals
        self._records = records
        self._meta: BatchMeta | None = None

    @classmethod
    def with_meta(
        cls,
        fields: dict[str, Any],
        size: int,
        rows: int,
        pos0: int,
        ordinals: Any,
        records: Any,
        *,
        meta: BatchMeta | None = None,
        lengths: Mapping[str, Any] | None = None,
    ) -> Batch:
        """As ``Batch(...)``, with the metadata given (``meta``: the others then only
        say ``size`` and ``rows``), or made now with ``lengths`` (dim -> int array per
        row) as ``meta.lengths``."""
        batch = cls(fields, size, rows, pos0, ordinals, records)
        if meta is not None:
            batch._meta = meta
        elif lengths:
            batch._meta = BatchMeta(
                size, rows, pos0, ordinals, records, lengths, _converter_like(fields)
            )
        return batch

    @property
    def meta(self) -> BatchMeta:
        """The batch's metadata (``BatchMeta``), made on first use and kept."""
        m = self._meta
        if m is None:
            # (positional arguments: keywords cost a batch's metadata a quarter more)
            m = self._meta = BatchMeta(
                self._size,
                self._rows,
                self._pos0,
                self._ordinals,
                self._records,
                None,
                _converter_like(self.__dict__),
            )
        return m

    def __getattr__(self, name: str) -> Any:  # only reached for a name that is not set
        if name in _DEPRECATED:
            warnings.warn(
                f"batch.{name} is deprecated: the batch's metadata is "
                f"batch.meta.{name} (batch.{name} is a field of that name, "
                f"when the record has one)",
                DeprecationWarning,
                stacklevel=2,
            )
            return getattr(self.meta, name)
        if name.startswith("_"):  # not yet set (unpickling) or not a field
            raise AttributeError(name)
        raise AttributeError(
            f"the batch has no field `{name}` (fields: "
            f"{', '.join(self.__dict__)}; metadata: batch.meta)"
        )

    def __getitem__(self, name: str) -> Any:
        return self.__dict__[name]

    def __len__(self) -> int:
        return self._rows

    def keys(self) -> Any:
        """The field names (as ``dict.keys()``; a field named ``keys`` hides this:
        use ``batch.fields.keys()``)."""
        return self.__dict__.keys()

    @property
    def fields(self) -> dict[str, Any]:
        """The field arrays by name."""
        return self.__dict__

    def to(self, device: Any, non_blocking: bool = False) -> Batch:
        """The batch with its torch tensors (fields and metadata) on ``device``, as
        ``Tensor.to``; other fields (bytes, str) are the batch's own. (A field named
        ``to`` hides this: ``Batch.to(batch, ...)`` still reaches it.)"""
        return self._tensors_mapped(lambda t: t.to(device, non_blocking=non_blocking))

    def pin_memory(self) -> Batch:
        """The batch with its torch tensors in pinned (page-locked) host memory, so a
        later ``.to("cuda", non_blocking=True)`` overlaps the copy: torch's
        ``DataLoader(..., pin_memory=True)`` calls this on each batch it is given."""
        return self._tensors_mapped(lambda t: t.pin_memory())

    def _tensors_mapped(self, move: Callable[[Any], Any]) -> Batch:
        torch = sys.modules.get("torch")
        if torch is None:  # not loaded: no field is a tensor
            return self

        def each(a: Any) -> Any:
            return move(a) if isinstance(a, torch.Tensor) else a

        fields = {n: each(a) for n, a in self.__dict__.items()}
        meta = self.meta.converted(each)
        return Batch.with_meta(
            fields, self._size, self._rows, self._pos0, self._ordinals, self._records, meta=meta
        )

    def __repr__(self) -> str:
        shapes = ", ".join(
            f"{k}={tuple(getattr(v, 'shape', ()))}" for k, v in self.__dict__.items()
        )
        return f"Batch(size={self._size}, rows={self._rows}, {shapes})"
