"""Compiled ordering nodes: each maps an array of its positions to (source, record).

``locate(pos, seed, epoch, cache)`` takes a ``uint64`` array of positions (all below
the node's length; the node may overwrite it, so callers pass arrays they own), the
order seed and the total epoch number of the context: one ``int`` for every position,
or a ``uint64`` array, one per position. A repeat of ``t`` passes turns epoch ``E``
into ``E * t + e`` for its pass ``e``; a shuffle keys with ``(seed, epoch)``; every
other node passes the context through. It returns ``(ordinals, records)`` as ``int64``
and ``uint64`` arrays. ``cache`` is a per-cursor dict where mixes keep the state of
their last walk, so consecutive blocks continue without a new seek, and leaves the
arrays they write ordinals into.
"""

from __future__ import annotations

import abc
import itertools
from dataclasses import dataclass, field

import numpy as np

from .._base import hashing, kernels, ordering
from .._base.recycle import Recycler
from . import _perm
from ._child_table import child_table
from ._mixlocate import c_locates, locate_parts, part_tables
from ._mixplan import MixPlan, MixState
from ._schedule import _BY_PART, by_part

# Above this many distinct contexts in one call, a shuffle derives keys per element
# instead of looping over the groups.
_MAX_CTX_GROUPS = 8


def _subset(epoch: int | np.ndarray, idx: np.ndarray) -> int | np.ndarray:
    return epoch if isinstance(epoch, int) else epoch[idx]


def _empty_result() -> tuple[np.ndarray, np.ndarray]:
    return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.uint64)


@dataclass(eq=False)
class Node(abc.ABC):
    """Base of compiled nodes: ``n`` positions."""

    n: int

    def leaves(self) -> list[Leaf]:
        return []

    @abc.abstractmethod
    def locate(
        self, pos: np.ndarray, seed: int, epoch, cache: dict
    ) -> tuple[np.ndarray, np.ndarray]:
        """(source ordinals, records) of positions ``pos`` in context ``(seed, epoch)``."""


@dataclass(eq=False)
class Empty(Node):
    """No positions (what empty sources, take(0), repeat(0)... compile to)."""

    def locate(self, pos, seed, epoch, cache):
        return _empty_result()


@dataclass(eq=False)
class Leaf(Node):
    """Records ``offset .. offset + n`` of source ``ordinal`` (original length ``length``)."""

    ordinal: int = 0
    length: int = 0
    salt: int = 0
    offset: int = 0

    def leaves(self) -> list[Leaf]:
        return [self]

    def locate(self, pos, seed, epoch, cache):
        # Without an offset the positions are the records (callers never write into them).
        rec = pos + np.uint64(self.offset) if self.offset else pos
        return _ordinals(self.ordinal, len(pos), cache), rec


# A cursor's ordinals are written into arrays of its own (kept in its ``cache``, which is
# the cursor's alone) once no block's ordinals view them any more: a fresh array a block
# cost its page faults, under the GIL, more than the fill (see ``_order._positions``).
# Each is its caller's to write into, as a fresh array was: an array shared by every
# order, read-only, was written all the same through ``torch.from_dlpack``, which does
# not keep numpy's flag.
_ORDINALS = "ordinals"  # the cache's key (node keys are ints)


_RECORDS = "records"  # a mix's records (``Mix.locate``), likewise
_WALKED = ("walked parts", "walked elements")  # a mix's walk (``Mix._walk_range``)


def _recycled(cache: dict, key: str, dtype: type) -> Recycler:
    """The cursor's recycled arrays under ``key``."""
    arrays = cache.get(key)
    if arrays is None:
        arrays = cache[key] = Recycler(dtype, keep=3)
    return arrays


def _ordinal_arrays(cache: dict) -> Recycler:
    return _recycled(cache, _ORDINALS, np.int64)


def _ordinals(ordinal: int, m: int, cache: dict) -> np.ndarray:
    """``m`` ordinals ``ordinal`` as int64, in an array from the cursor's ``cache``."""
    out = _ordinal_arrays(cache).get(m)
    out.fill(ordinal)
    return out


def _ordinals_of(table: np.ndarray, which: np.ndarray, cache: dict) -> np.ndarray:
    """``table[which]`` (int64 ordinals), in an array from the cursor's ``cache``."""
    return np.take(table, which, out=_ordinal_arrays(cache).get(len(which)))


@dataclass(eq=False)
class Select(Node):
    """Positions ``start + i * step`` of the child, for ``i < n``."""

    child: Node = field(default_factory=lambda: Empty(0))
    start: int = 0
    step: int = 1

    def leaves(self):
        return self.child.leaves()

    def locate(self, pos, seed, epoch, cache):
        p = pos * np.uint64(self.step) if self.step != 1 else pos
        if self.start:
            p = p + np.uint64(self.start)
        return self.child.locate(p, seed, epoch, cache)


@dataclass(eq=False)
class Concat(Node):
    """The children one after another; ``offsets[i]`` is where child ``i`` starts."""

    children: tuple[Node, ...] = ()
    offsets: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        self._starts = np.array(self.offsets, dtype=np.uint64)
        self._which = child_table(self._starts, self.n)
        # Every child a leaf (sources, or ranges of them: a manifest's shards): each
        # position's ordinal and record from two per-child tables, with no call per child.
        self._ordinal: np.ndarray | None = None
        self._shift: np.ndarray | None = None
        leaves = [c for c in self.children if isinstance(c, Leaf)]
        if len(leaves) == len(self.children):
            self._ordinal = np.array([c.ordinal for c in leaves], dtype=np.int64)
            # record = position - child's start + leaf's offset, in uint64's arithmetic
            # modulo 2**64 (the sum is below the source's length)
            self._shift = np.array(
                [(c.offset - at) % (1 << 64) for c, at in zip(leaves, self.offsets)],
                dtype=np.uint64,
            )

    def leaves(self):
        return [leaf for c in self.children for leaf in c.leaves()]

    def children_of(self, pos: np.ndarray) -> np.ndarray:
        """The child holding each position (``pos`` below ``n``), as intp."""
        if self._which is None:
            return np.searchsorted(self._starts, pos, side="right") - 1
        shift, table, ends, passes = self._which
        which = table[pos >> shift]
        for _ in range(passes):  # a bucket's first child, then each boundary inside it
            which += pos >= ends[which]
        return which

    def locate(self, pos, seed, epoch, cache):
        if (
            self._ordinal is not None
            and self._shift is not None
            and self._which is not None
            and ordering.available()
            and pos.dtype == np.uint64
            and pos.flags.c_contiguous
        ):  # in C, one pass (a 1,024-shard shuffle's order: 16 against 8 ns a position)
            ords = _ordinal_arrays(cache).get(len(pos))
            if ordering.concat_locate(pos, self._which, self._ordinal, self._shift, ords, pos):
                return ords, pos
        which = self.children_of(pos)
        if self._ordinal is not None and self._shift is not None:
            ords = _ordinals_of(self._ordinal, which, cache)
            return ords, np.add(pos, self._shift[which], out=pos)
        ords = np.empty(len(pos), dtype=np.int64)
        recs = np.empty(len(pos), dtype=np.uint64)
        for i, at in by_part(which, len(self.children)):
            child = self.children[i]
            o, r = child.locate(pos[at] - self._starts[i], seed, _subset(epoch, at), cache)
            ords[at] = o
            recs[at] = r
        return ords, recs


@dataclass(eq=False)
class Shuffle(Node):
    """A seeded Feistel permutation of the child's positions (``n >= 2``)."""

    child: Node = field(default_factory=lambda: Empty(0))
    seed: int = 0
    salt: int = 0

    def __post_init__(self) -> None:
        self.shape = _perm.Shape.of(self.n)
        self._keys: dict[tuple[int, int], np.ndarray] = {}

    def leaves(self):
        return self.child.leaves()

    def keys(self, seed: int, epoch: int) -> np.ndarray:
        rk = self._keys.get((seed, epoch))
        if rk is None:
            word = hashing.epoch_word(seed, epoch)
            rk = _perm.keys_array(hashing.round_keys(self.seed, word, self.salt))
            if len(self._keys) > 64:
                self._keys.clear()
            self._keys[(seed, epoch)] = rk
        return rk

    def permute(self, pos: np.ndarray, seed: int, epoch, in_place: bool = False) -> np.ndarray:
        if isinstance(epoch, int):
            return _perm.permute_array(self.shape, self.keys(seed, epoch), pos, in_place)
        groups, inverse = np.unique(epoch, return_inverse=True)
        if len(groups) == 1:
            return _perm.permute_array(self.shape, self.keys(seed, int(groups[0])), pos)
        if len(groups) <= _MAX_CTX_GROUPS:
            out = np.empty(len(pos), dtype=np.uint64)
            for g, e in enumerate(groups):
                idx = np.flatnonzero(inverse == g)
                out[idx] = _perm.permute_array(self.shape, self.keys(seed, int(e)), pos[idx])
            return out
        words = hashing.epoch_word_array(seed, epoch)
        rk = hashing.round_keys_array(self.seed, words, self.salt)
        return _perm.permute_array(self.shape, rk, pos)

    def locate(self, pos, seed, epoch, cache):
        return self.child.locate(self.permute(pos, seed, epoch, in_place=True), seed, epoch, cache)


@dataclass(eq=False)
class Repeat(Node):
    """``times`` passes over the child (the last one cut short when ``n`` is less):
    pass ``e`` of epoch ``E`` runs in epoch ``E * times + e``, so nested repeats count
    total epochs. A selection of a repeat keeps ``times``, even one within its first
    pass: an enclosing repeat multiplies by it."""

    child: Node = field(default_factory=lambda: Empty(0))
    times: int = 0

    def leaves(self):
        return self.child.leaves()

    def locate(self, pos, seed, epoch, cache):
        cn = np.uint64(self.child.n)
        e = pos // cn
        inner = pos - e * cn
        if isinstance(epoch, int) and len(pos) and e[0] == e[-1] and (e == e[0]).all():
            total = (epoch * self.times + int(e[0])) & hashing.MASK64
            return self.child.locate(inner, seed, total, cache)
        base = np.full(len(pos), epoch, dtype=np.uint64) if isinstance(epoch, int) else epoch
        return self.child.locate(inner, seed, base * np.uint64(self.times) + e, cache)


# Positions further apart than this are located by separate seeks, nearer ones by
# walking the mix between them (a walk costs about one sort slot per position).
_WALK_GAP = 4096
# Walk this many positions per step when a block is long.
_WALK_BLOCK = 1 << 16


# Fewer positions than this in a new context are located without making its tables.
_C_MADE_FOR = 1024

# A mix of a few parts is merged and located on the numpy path without loading the
# compiled kernels (``MixPlan.load_kernels``): in a loader's steady state that path costs
# about 20 ns a position more (the order thread's numpy calls hold the GIL from the
# thread gathering rows: 6.6 against 7.7 M rows/s, two 1,000,000-row files mixed
# uniformly), and loading them about 0.4 s (numba's import, 0.13 s, and the kernels'
# cached machine code). Once the numpy path has located this many positions in the
# process, more than loading them costs, they load in the background.
_LOAD_AFTER = 1 << 25
_numpy_located = [0]


@dataclass(eq=False)
class Mix(Node):
    """Parts interleaved by their schedules (at least two non-empty parts)."""

    parts: tuple[Node, ...] = ()
    plan: MixPlan | None = None

    def __post_init__(self) -> None:
        # Parts that are a source or a shuffle of a source are located together, one
        # vectorised pass for all of them, instead of one pass per part.
        flat: list[tuple[int, Shuffle | None, Leaf]] = []
        for i, p in enumerate(self.parts):
            if isinstance(p, Leaf):
                flat.append((i, None, p))
            elif isinstance(p, Shuffle) and isinstance(p.child, Leaf):
                flat.append((i, p, p.child))
        self._flat = np.zeros(len(self.parts), dtype=bool)
        self._flat[[i for i, _, _ in flat]] = True
        self._all_flat = bool(self._flat.all())
        shapes = [sh.shape if sh is not None else _perm.Shape.of(1) for _, sh, _ in flat]
        table = _perm.Shapes.table(shapes)
        k = len(self.parts)
        self._shapes = _perm.Shapes(*(np.ones(k, dtype=np.uint64) for _ in range(4)))
        for name in ("n", "rb", "lmask", "rmask"):
            getattr(self._shapes, name)[[i for i, _, _ in flat]] = getattr(table, name)
        self._flat_shuffles = [(i, sh) for i, sh, _ in flat if sh is not None]
        self._c_locates = c_locates(k, self._flat_shuffles)
        self._leaf_ordinal = np.zeros(k, dtype=np.int64)
        self._leaf_offset = np.zeros(k, dtype=np.uint64)
        for i, _, leaf in flat:
            self._leaf_ordinal[i] = leaf.ordinal
            self._leaf_offset[i] = leaf.offset
        self._ctx_keys: dict[tuple[int, int], np.ndarray] = {}
        self._ctx_tables: dict[tuple[int, int], tuple | None] = {}
        # each part's elements (``ordering.locate``'s bounds)
        self._part_n = np.array([p.n for p in self.parts], dtype=np.int64)

    def _keys_for(self, seed: int, epoch: int) -> np.ndarray:
        """Round keys of every flat shuffle part in context ``(seed, epoch)``: ``(6, k)``."""
        rk = self._ctx_keys.get((seed, epoch))
        if rk is None:
            rk = np.zeros((6, len(self.parts)), dtype=np.uint64)
            for i, sh in self._flat_shuffles:
                rk[:, i] = sh.keys(seed, epoch)
            if len(self._ctx_keys) > 64:
                self._ctx_keys.clear()
            self._ctx_keys[(seed, epoch)] = rk
        return rk

    def leaves(self):
        return [leaf for p in self.parts for leaf in p.leaves()]

    def _state_at(self, first: int, cache: dict) -> MixState:
        """The walk state at position ``first``: continued from the cache, or a seek."""
        plan = self.plan
        assert plan is not None  # compile always gives a mix its plan
        state = cache.get(id(self))
        if state is None or not (state.pos <= first <= state.pos + _WALK_GAP):
            state = plan.seek(first)
        elif state.pos < first:
            plan.walk(state, first - state.pos)
        return state

    def _walk_range(self, first: int, count: int, cache: dict):
        """(part, j) of the ``count`` positions from ``first`` on."""
        plan = self.plan
        assert plan is not None  # compile always gives a mix its plan
        state = self._state_at(first, cache)
        parts, js = [], []
        done = 0
        while done < count:
            step = min(_WALK_BLOCK * 4, count - done)
            # one walk (the common case: a block) into the cursor's recycled arrays
            out = None
            if step == count:
                out = (_recycled(cache, _WALKED[0], np.int64).get(step),
                       _recycled(cache, _WALKED[1], np.int64).get(step))  # fmt: skip
            p_, j_ = plan.walk(state, step, out)
            parts.append(p_)
            js.append(j_)
            done += len(p_)
        cache[id(self)] = state
        if len(parts) == 1:
            return parts[0], js[0]
        return np.concatenate(parts), np.concatenate(js)

    def merge(self, pos: np.ndarray, cache: dict) -> tuple[np.ndarray, np.ndarray]:
        """(part, j) of every position, by seeks and walks over runs of nearby positions."""
        if len(pos) == 0:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        first = int(pos[0])
        if int(pos[-1]) - first == len(pos) - 1 and (np.diff(pos) == 1).all():
            return self._walk_range(first, len(pos), cache)
        order = np.argsort(pos, kind="stable")
        sp = pos[order].astype(np.int64)
        part = np.empty(len(pos), dtype=np.int64)
        jj = np.empty(len(pos), dtype=np.int64)
        breaks = np.flatnonzero(np.diff(sp) > _WALK_GAP) + 1
        bounds = np.concatenate(([0], breaks, [len(sp)]))
        for a, b in itertools.pairwise(bounds):
            # Walk the run in pieces, keeping only the positions asked for: a run of
            # positions spread far apart (a shard of many ranks) would otherwise hold its
            # whole span in memory at once.
            start, last = int(sp[a]), int(sp[b - 1])
            lo = a
            while lo < b:
                piece = min(_WALK_BLOCK * 4, last + 1 - start)
                span_p, span_j = self._walk_range(start, piece, cache)
                hi = lo + int(np.searchsorted(sp[lo:b], start + piece))
                rel = sp[lo:hi] - start
                part[order[lo:hi]] = span_p[rel]
                jj[order[lo:hi]] = span_j[rel]
                lo, start = hi, start + piece
        return part, jj

    def locate(self, pos, seed, epoch, cache):
        part, j = self.merge(pos, cache)
        ords = _ordinal_arrays(cache).get(len(pos))
        recs = _recycled(cache, _RECORDS, np.uint64).get(len(pos))
        if len(pos) == 0:
            return ords, recs
        plan = self.plan
        assert plan is not None  # compile always gives a mix its plan
        if isinstance(epoch, int) and self._all_flat and self._c_locates:
            make = len(pos) >= _C_MADE_FOR  # tables for a block, not a few positions
            tables = part_tables(
                self._flat_shuffles, len(self.parts), self._ctx_tables, seed, epoch, make
            )
            if tables is not None and ordering.locate(
                part, j, tables, self._part_n, self._leaf_offset, self._leaf_ordinal, ords, recs
            ):
                return ords, recs
        few = self._all_flat and not plan.load_kernels  # the numpy path serves throughout
        kern = kernels.get(background=not few)
        if kern is not None and isinstance(epoch, int) and self._all_flat:
            sh = self._shapes
            kern.locate_flat(
                part,
                j,
                sh.n,
                sh.rb,
                sh.lmask,
                sh.rmask,
                self._keys_for(seed, epoch),
                self._leaf_offset,
                self._leaf_ordinal,
                ords,
                recs,
            )
            return ords, recs
        if kern is None and isinstance(epoch, int) and self._all_flat:
            if few:
                _numpy_located[0] += len(pos)
                if _numpy_located[0] > _LOAD_AFTER:
                    kernels.load_in_background()
            if len(self.parts) <= _BY_PART:  # each part at once (``_BY_PART``'s figures)
                return locate_parts(
                    self._flat_shuffles, self._leaf_offset, self._leaf_ordinal,
                    part, j, seed, epoch, ords, recs,
                )  # fmt: skip
        flat = self._flat[part] if isinstance(epoch, int) else np.zeros(len(part), dtype=bool)
        if flat.any():
            fi = np.flatnonzero(flat)
            fp = part[fi]
            kern = kernels.get(background=True)
            if kern is not None:
                rec = np.empty(len(fi), dtype=np.uint64)
                sh = self._shapes
                kern.permute_parts(
                    sh.n,
                    sh.rb,
                    sh.lmask,
                    sh.rmask,
                    self._keys_for(seed, epoch),
                    fp,
                    j[fi].astype(np.uint64),
                    self._leaf_offset,
                    rec,
                )
                recs[fi] = rec
            else:
                rk = self._keys_for(seed, epoch)[:, fp]
                rec = _perm.permute_many(self._shapes.take(fp), rk, j[fi].astype(np.uint64))
                recs[fi] = rec + self._leaf_offset[fp]
            ords[fi] = self._leaf_ordinal[fp]
            if len(fi) == len(part):
                return ords, recs
            rest = np.flatnonzero(~flat)
            part = part[rest]
        else:
            rest = np.arange(len(part))
        by_part = rest[np.argsort(part, kind="stable")]
        counts = np.bincount(part, minlength=len(self.parts))
        ends = np.cumsum(counts)
        for i in np.flatnonzero(counts):
            idx = by_part[ends[i] - counts[i] : ends[i]]
            o, r = self.parts[i].locate(j[idx].astype(np.uint64), seed, _subset(epoch, idx), cache)
            ords[idx] = o
            recs[idx] = r
        return ords, recs


def fresh_state(plan: MixPlan) -> MixState:
    return plan.seek(0)
