"""``Order``: a compiled configuration answering "which record is at position p".

Semantics
    ``order.get(p)`` is the item iteration yields at position ``p``; a cursor seeked
    anywhere yields the same items as a walk from the start.

Cost
    ``Order(seq)`` is O(number of nodes); it and every lookup use memory that grows
    with the number of sources and the configuration's depth, never with the
    number of records. A shuffle lookup is O(1); a mix lookup counts and searches
    on the virtual clock (O(parts x log) per seek), then walks in sorted blocks.

Stability
    The same configuration, sources and seed give the same order on every platform
    and every feedline version with the same ``ORDERING_VERSION``, and the same as
    the dataorder crate 0.4.
"""

from __future__ import annotations

import operator
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

from .._base.hashing import MASK64
from .._base.recycle import Recycler
from ..errors import BoundsError
from ._compile import compile_seq
from ._nodes import Node
from ._seq import Seq


@dataclass(frozen=True, order=True)
class Item:
    """One position's record: ``record_index`` of ``sources[source_ordinal]``.

    Items compare and hash by ``(source_ordinal, record_index)``.
    """

    source_ordinal: int
    source: object = field(compare=False, hash=False)
    record_index: int = 0

    def __repr__(self) -> str:
        return f"Item(source_ordinal={self.source_ordinal}, record_index={self.record_index})"


class Order:
    """A validated, compiled ordering: random access, lookups and cursors.

    >>> order = Order(Seq.source(10).shuffle(1))
    >>> len(order), order[0] == order.get(0)
    (10, True)
    """

    def __init__(self, seq: Seq, *, seed: int = 0) -> None:
        if not isinstance(seq, Seq):
            seq = Seq.source(seq)
        self.seq = seq
        self._root, _ = compile_seq(seq)
        self.seed = operator.index(seed) & MASK64
        self.epoch = 0
        self._sources = tuple(seq.sources())
        # Records fit int64 unless a source has 2**63 records or more.
        self._wide = any(leaf.length > 1 << 63 for leaf in self._root.leaves())

    # -- basics -------------------------------------------------------------------------
    def __len__(self) -> int:
        return self._root.n

    @property
    def length(self) -> int:
        """The number of positions (also for orders of 2**63 or more, which ``len`` refuses)."""
        return self._root.n

    @property
    def sources(self) -> tuple[object, ...]:
        """The source handles, indexed by ``source_ordinal`` (tree order)."""
        return self._sources

    def with_seed(self, seed: int) -> Order:
        """The same configuration with every shuffle reseeded (the order seed is ``seed``)."""
        other = self._copy()
        other.seed = operator.index(seed) & MASK64
        return other

    def set_seed(self, seed: int) -> None:
        """Reseed every shuffle of this order in place (the crate's ``set_seed``): the
        order becomes ``with_seed(seed)``. Takes constant time; copies keep their seeds."""
        self.seed = operator.index(seed) & MASK64

    def with_epoch(self, epoch: int) -> Order:
        """This order as pass ``epoch`` of an enclosing repeat: ``seq.repeat(k)``'s
        positions ``[epoch * len, (epoch + 1) * len)`` for any ``k > epoch`` (each
        shuffle inside reseeded as that repeat reseeds it). The loader's passes."""
        epoch = operator.index(epoch)
        if not 0 <= epoch <= MASK64:
            raise ValueError(f"an epoch is in [0, 2**64), got {epoch}")
        other = self._copy()
        other.epoch = epoch
        return other

    def _copy(self) -> Order:
        other = object.__new__(Order)
        other.__dict__.update(self.__dict__)
        return other

    def __repr__(self) -> str:
        epoch = f", epoch={self.epoch}" if self.epoch else ""
        return f"Order(len={self.length}, seed={self.seed}{epoch}, sources={len(self._sources)})"

    @property
    def root(self) -> Node:
        return self._root

    # -- random access ------------------------------------------------------------------
    def get(self, pos: int) -> Item | None:
        """The item at ``pos``, or None when ``pos`` is not in ``[0, len)``."""
        pos = operator.index(pos)
        if not 0 <= pos < self._root.n:
            return None
        ords, recs = self._root.locate(np.array([pos], dtype=np.uint64), self.seed, self.epoch, {})
        o = int(ords[0])
        return Item(o, self._sources[o], int(recs[0]))

    def __getitem__(self, pos: int) -> Item:
        given = pos = operator.index(pos)
        n = self._root.n
        if pos < 0:
            pos += n
        if not 0 <= pos < n:
            raise BoundsError(f"position {given} is outside the order of length {n}")
        return self.get(pos)  # type: ignore[return-value]

    def lookup(self, positions) -> tuple[np.ndarray, np.ndarray]:
        """Vectorised lookup: positions in, ``(source_ordinals, record_indices)`` out.

        Both outputs are ``int64`` arrays of the positions' shape (records of 2**63 or
        more, which no real dataset has, come back as ``uint64``). Every position must be
        in ``[0, len)``; a ``BoundsError`` names the first one that is not.
        """
        arr = np.asarray(positions)
        if arr.dtype.kind not in "iu":
            if arr.size == 0:
                arr = arr.astype(np.int64)
            else:
                raise TypeError(f"positions must be integers, got dtype {arr.dtype}")
        flat = arr.reshape(-1)
        n = self._root.n
        if flat.size and (int(flat.min()) < 0 or int(flat.max()) >= n):
            bad = (flat < 0) | (flat >= n)
            first = int(flat[np.flatnonzero(bad)[0]])
            raise BoundsError(f"position {first} is outside the order of length {n}")
        ords, recs = self._root.locate(flat.astype(np.uint64, copy=True), self.seed, self.epoch, {})
        # Records are below 2**63 (orders are addressed by int64 positions), so a view
        # reinterprets them without a copy.
        return ords.reshape(arr.shape), _records(recs, self._wide).reshape(arr.shape)

    # -- walking ------------------------------------------------------------------------
    def cursor(self, start: int = 0, stop: int | None = None) -> Cursor:
        """A cursor over positions ``[start, stop)`` (``stop`` defaults to the end)."""
        return Cursor(self, start, stop)

    def __iter__(self) -> Iterator[Item]:
        return iter(self.cursor())


def _records(recs: np.ndarray, wide: bool) -> np.ndarray:
    """Record indices as int64 (a view, no copy), or uint64 for sources of 2**63+ records."""
    recs = np.ascontiguousarray(recs, dtype=np.uint64)
    if wide and recs.size and int(recs.max()) >= 1 << 63:
        return recs
    return recs.view(np.int64)


def _check_range(n: int, start: int, stop: int | None) -> tuple[int, int]:
    start = operator.index(start)
    stop = n if stop is None else operator.index(stop)
    if not 0 <= start <= n:
        raise BoundsError(f"cursor start {start} is outside [0, {n}]")
    if not 0 <= stop <= n:
        raise BoundsError(f"cursor stop {stop} is outside [0, {n}]")
    if start > stop:
        raise BoundsError(f"cursor range [{start}, {stop}) is reversed")
    return start, stop


# Iteration fetches items this many positions at a time.
_ITER_BLOCK = 4096

# A block's positions, before the order's nodes map them to records (a shuffle in place:
# then the array is the block's records), are written into an array of the cursor's
# that no earlier block's records view any more: a new array each block cost its page
# faults, under the GIL, as much as the shuffle's rounds did (a 4,000,000-record pass in
# blocks of 256k: 49 ms an epoch against 25 ms with these and a leaf's ordinals in
# recycled arrays too, ``_nodes._ordinals``). Blocks of up to ``_IOTA_LEN`` positions are
# ``_iota`` plus their first.
_IOTA_LEN = 1 << 19
_iota: list[np.ndarray] = []


def _positions(arrays: Recycler, start: int, end: int) -> np.ndarray:
    """Positions ``start .. end`` as ``uint64``, in an array from ``arrays``."""
    m = end - start
    if m > _IOTA_LEN:
        return np.arange(start, end, dtype=np.uint64)
    if not _iota:  # made once (two threads making it at once make it twice: harmless)
        _iota.append(np.arange(_IOTA_LEN, dtype=np.uint64))
    out = arrays.get(m)
    np.add(_iota[0][:m], np.uint64(start), out=out)
    return out


class Cursor:
    """A seekable walk over a range of an order's positions.

    ``offset`` is the next absolute position. ``next_block(k)`` returns the next
    ``<= k`` positions' ``(ordinals, records)`` as arrays (empty at the end);
    iterating yields ``Item`` objects. ``reset(start, stop)`` re-seeks in place;
    a failed reset leaves the cursor unchanged.
    """

    def __init__(self, order: Order, start: int = 0, stop: int | None = None) -> None:
        self._order = order
        self._start, self._stop = _check_range(order.length, start, stop)
        self._offset = self._start
        self._cache: dict = {}
        self._buf: tuple[np.ndarray, np.ndarray] | None = None
        self._buf_at = 0
        self._positions = Recycler(np.uint64, keep=3)

    @property
    def offset(self) -> int:
        """The next absolute position this cursor yields."""
        return self._offset

    @property
    def stop(self) -> int:
        return self._stop

    def __len__(self) -> int:
        """Positions left in the range."""
        return self._stop - self._offset

    def reset(self, start: int = 0, stop: int | None = None) -> None:
        """Move to ``[start, stop)`` (absolute positions; ``stop`` defaults to the end)."""
        self._start, self._stop = _check_range(self._order.length, start, stop)
        self._offset = self._start
        self._buf = None

    def next_block(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The next ``<= k`` positions as ``(source_ordinals, record_indices)`` int64 arrays."""
        k = operator.index(k)
        if k < 0:
            raise ValueError(f"block size must be >= 0, got {k}")
        if self._buf is not None:
            # Items fetched ahead by iteration come first, then fresh positions.
            o, r = self._buf
            i = self._buf_at
            take = min(k, len(o) - i)
            self._buf_at += take
            if self._buf_at >= len(o):
                self._buf = None
            self._offset += take
            head = (o[i : i + take], r[i : i + take])
            if take == k or self._buf is not None:
                return head
            tail = self.next_block(k - take)
            return np.concatenate((head[0], tail[0])), np.concatenate((head[1], tail[1]))
        end = min(self._offset + k, self._stop)
        if end <= self._offset:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        pos = _positions(self._positions, self._offset, end)
        order = self._order
        ords, recs = order.root.locate(pos, order.seed, order.epoch, self._cache)
        self._offset = end
        return ords, _records(recs, order._wide)

    def __iter__(self) -> Iterator[Item]:
        return self

    def __next__(self) -> Item:
        if self._buf is None:
            if self._offset >= self._stop:
                raise StopIteration
            at = self._offset
            o, r = self.next_block(_ITER_BLOCK)
            self._offset = at
            self._buf = (o, r)
            self._buf_at = 0
        o, r = self._buf
        i = self._buf_at
        self._buf_at += 1
        self._offset += 1
        if self._buf_at >= len(o):
            self._buf = None
        ordinal = int(o[i])
        return Item(ordinal, self._order.sources[ordinal], int(r[i]))

    def last(self) -> Item | None:
        """The last item of the range left, by a direct lookup; consumes the cursor."""
        if self._offset >= self._stop:
            return None
        item = self._order.get(self._stop - 1)
        self._offset = self._stop
        self._buf = None
        return item

    def position(self, predicate) -> int | None:
        """The index (from the cursor's current item) of the first item for which
        ``predicate(item)`` is true, consuming the items up to and including it; None
        (and the cursor exhausted) when no item is."""
        for i, item in enumerate(self):
            if predicate(item):
                return i
        return None

    def __repr__(self) -> str:
        return f"Cursor(offset={self._offset}, stop={self._stop})"
