"""The merge of a mix: counting, seeking and walking on the virtual clock.

Part ``i`` (of ``k`` non-empty parts, in configuration order) has ``n_i`` elements;
element ``j`` has the key ``Q_i((j + phi_i) * (1 / n_i))`` with
``phi_i = (2i + 1) / (2k)``. The mix is all elements sorted by ``(key, i, j)``.
Keys grow with ``j`` within a part, so the number of elements of part ``i`` with a
key below a clock time ``t``, ``c_i(t)``, is found by a short search around the
continuous estimate ``n_i * F_i(t) - phi_i``. A seek narrows a clock interval by
interpolation on the integer counts until it holds few elements, then sorts just
those; a walk takes every element below a threshold and sorts that block. Nothing
is replayed from the start, and memory is O(k + block).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .._base import kernels, ordering
from ._mixlocate import c_locates_any
from ._schedule import _BY_PART, Schedule, ScheduleTable

# Walks shorter than this merge with a heap (compiled path); longer ones take every
# element below a threshold and bucket-sort the block.
_HEAP_WALK_MAX = 2048
# A mix of at most this many parts walks with C's heap whatever the walk's length
# (``ordering.walk``), and does not load numba's kernels for it (``load_kernels``). The
# heap's cost grows with the parts; its order (walk and ``ordering.locate``), ns a
# position, 4,000,000 positions read 256k at a time, against numba's kernels (their
# bucket-sorted merge, C's locate) and numpy's path (2026-12-07, 18:20 - 19:05): 16 parts
# 28 / 29 / 60, 32 parts 35 / 39 / 89, 64 parts 43 / 42 / 100; 256 parts 49 / 41 / 150
# (C's locate for all). Past 64 parts the kernels' merge serves once loaded (where they
# load: ``load_kernels``), C's heap while they load or where they do not.
_C_HEAP_PARTS = 64
# Past that, where C serves a mix and the kernels are not loaded, C's heap walks; once it
# has walked this many positions in the process, the kernels load in the background:
# their merge saves 8 - 12 ns a position there, and loading them costs 0.5 - 1.4 s of CPU.
_C_LOAD_AFTER = 1 << 26
_c_walked = [0]
# 0, 1, 2, ...: a part's run of j is its first plus a slice of this (``_span_keys``);
# made on first use (two threads making it at once make it twice: harmless)
_IOTA_LEN = 1 << 19
_iota: list[np.ndarray] = []

# The compiled block merge packs (part, j) into one word: j < 2**46, part below this.
_MAX_PACKED_PARTS = 1 << 17

# A seek stops narrowing when its clock interval holds at most this many elements
# (plus one per part); sorting that many keys is cheaper than more count rounds.
_SEEK_WINDOW = 256

# A mix of at most this many parts merges on the numpy path at 1.15 - 1.6x the kernels'
# time, and does not load them for a fresh process's first pass (``load_kernels``); with
# more, the numpy path (part by part up to ``_schedule._BY_PART`` parts) takes 2x and more.
_FEW_PARTS = 16


@dataclass
class MixState:
    """Where a walk stands: ``pos`` elements emitted, ``taken[i]`` of them from part i.

    Every clock time ``t >= floor`` has ``c_i(t) >= taken[i]`` for all parts.
    """

    pos: int
    taken: np.ndarray
    floor: float


class MixPlan:
    """The merge order of a mix's non-empty parts, independent of contexts and seeds."""

    def __init__(self, lengths: list[int], schedules: list[Schedule]) -> None:
        k = len(lengths)
        self.k = k
        self.n = np.array(lengths, dtype=np.int64)
        self.nf = self.n.astype(np.float64)
        self.total = int(sum(lengths))
        self.phi = np.array([(2.0 * r + 1.0) / (2.0 * k) for r in range(k)])
        self.inv = np.array([1.0 / n for n in lengths])
        self.table = ScheduleTable(schedules)
        self.schedules = schedules
        self._all = np.arange(k)
        self._c_locates_any = c_locates_any(lengths)
        tb = self.table
        self._kargs = (self.phi, self.inv, tb.uniform, tb.stacked())

    @property
    def load_kernels(self) -> bool:
        """Whether a walk's or a lookup's first use of the kernels starts loading them in
        the background: for more than ``_FEW_PARTS`` parts, unless C walks and locates
        them (where the C loops are built and on: up to ``_C_HEAP_PARTS`` parts, or
        ``_mixlocate._C_MANY_PARTS`` whose tables are small, ``c_locates_any``; past
        ``_C_HEAP_PARTS`` they load after a long run, ``_C_LOAD_AFTER``). A loader
        over 256 shuffled files of 15,625 rows: first pass 4.6 - 5.9 M rows/s while
        numba loaded (its import holding the GIL), 10.5 - 12.1 M with C alone; the
        second pass 11.7 - 13.6 against 10.2 - 12.4 (3 fresh rounds, 2026-12-07)."""
        # A few parts merge (and locate, ``Mix.locate``) on the numpy path at 1.15 - 1.6x
        # the kernels' time (two 1,000,000-element shuffles read 256k at a time: 40 - 48
        # ns a position against 35 uniform, 59 against 37 with one delayed), less than
        # loading numba costs a fresh process's first pass (0.4 s, most of it holding the
        # GIL): they load once the numpy path has done more work than that
        # (``_nodes._LOAD_AFTER``).
        k = self.k
        if k <= _FEW_PARTS:
            return False
        return not (ordering.available() and (k <= _C_HEAP_PARTS or self._c_locates_any))

    # -- keys and counts ----------------------------------------------------------------
    def keys(self, part: np.ndarray, j: np.ndarray) -> np.ndarray:
        """Keys of elements ``j`` of parts ``part`` (arrays of equal length)."""
        y = (j.astype(np.float64) + self.phi[part]) * self.inv[part]
        return self.table.inverse(part, y)

    def _key_lt(self, part: np.ndarray, j: np.ndarray, t: float) -> np.ndarray:
        return self.keys(part, j) < t

    def counts(self, t: float) -> np.ndarray:
        """``c_i(t)`` for every part: how many of its elements have a key below ``t``."""
        k, n = self.k, self.n
        if t <= 0.0:
            return np.zeros(k, dtype=np.int64)
        # C has no seek: past a few parts, a seek's counts load the kernels (numpy's path
        # took 20 - 45x theirs for lookups of scattered runs in mixes of 256 - 1,024
        # parts), also where C walks and locates the mix (``load_kernels`` False)
        kern = kernels.get(background=k > _FEW_PARTS)
        if kern is not None:
            out = np.empty(k, dtype=np.int64)
            kern.counts(float(t), n, *self._kargs, out)
            return out
        with np.errstate(invalid="ignore"):
            est = np.ceil(self.nf * self.table.cdf(self._all, t) - self.phi)
        guess = np.clip(np.nan_to_num(est), 0, n).astype(np.int64)
        lo = np.maximum(guess - 2, 0)
        hi = np.minimum(guess + 2, n)
        # Widen until every part brackets its count: all j < lo below t, j = hi at or above.
        step = 8
        while True:
            bad_lo = (lo > 0) & self._key_lt_at(lo - 1, t, invert=True)
            bad_hi = (hi < n) & self._key_lt_at(hi, t)
            if not (bad_lo.any() or bad_hi.any()):
                break
            lo = np.where(bad_lo, np.maximum(lo - step, 0), lo)
            hi = np.where(bad_hi, np.minimum(hi + step, n), hi)
            step *= 8
        # Bisect: the first j in [lo, hi] whose key is at or above t (hi if none).
        active = np.flatnonzero(lo < hi)
        while len(active):
            mid = (lo[active] + hi[active]) // 2
            below = self._key_lt(active, mid, t)
            lo[active] = np.where(below, mid + 1, lo[active])
            hi[active] = np.where(below, hi[active], mid)
            active = active[lo[active] < hi[active]]
        return lo

    def _key_lt_at(self, j: np.ndarray, t: float, invert: bool = False) -> np.ndarray:
        """For every part: key(i, j_i) < t (or >= t with ``invert``); j_i clipped in range."""
        jj = np.clip(j, 0, np.maximum(self.n - 1, 0))
        below = self.keys(self._all, jj) < t
        return ~below if invert else below

    # -- seeking ------------------------------------------------------------------------
    def seek(self, a: int) -> MixState:
        """The state after the first ``a`` elements (``0 <= a <= total``), by counting."""
        if a <= 0:
            return MixState(0, np.zeros(self.k, dtype=np.int64), -np.inf)
        if a >= self.total:
            return MixState(self.total, self.n.copy(), np.inf)
        lo_t, c_lo = 0.0, np.zeros(self.k, dtype=np.int64)
        hi_t, c_hi = 2.0, self.n.copy()
        s_lo, s_hi = 0, self.total
        window = _SEEK_WINDOW + self.k
        bisect = False
        while s_hi - s_lo > window:
            if bisect:
                t = 0.5 * (lo_t + hi_t)
            else:
                frac = (a - s_lo + 0.5) / (s_hi - s_lo)
                t = lo_t + (hi_t - lo_t) * frac
            if not lo_t < t < hi_t:
                t = 0.5 * (lo_t + hi_t)
                if not lo_t < t < hi_t:
                    break  # adjacent clock values: the rest are ties, sorted below
            c = self.counts(t)
            s = int(c.sum())
            before = s_hi - s_lo
            if s <= a:
                lo_t, c_lo, s_lo = t, c, s
            else:
                hi_t, c_hi, s_hi = t, c, s
            # Interpolate while it at least halves the interval; otherwise bisect once.
            bisect = (s_hi - s_lo) * 2 > before and not bisect
        part, j = self._span(c_lo, c_hi)
        keys = self.keys(part, j)
        order = np.argsort(keys, kind="stable")
        r = a - s_lo
        taken = c_lo + np.bincount(part[order[:r]], minlength=self.k)
        floor = float(np.nextafter(keys[order[r - 1]], np.inf)) if r > 0 else lo_t
        return MixState(a, taken, floor)

    def _span_keys(
        self, start: np.ndarray, stop: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``_span(start, stop)`` and the ``keys`` of its elements, each part's run
        written in place with its constants as scalars: the same values, in a third of
        the arrays (a walk's new arrays cost it their page faults: 2,300 a block of
        256k, 26 of a walk's 47 ns a position on the numpy path)."""
        lens = stop - start
        present = np.flatnonzero(lens).tolist()
        if len(present) > _BY_PART and not self.table.all_uniform:
            part, j = self._span(start, stop)  # ``inverse`` over the array: as ``keys``
            return part, j, self.keys(part, j)
        total = int(lens.sum())
        part = np.empty(total, np.int64)
        j = np.empty(total, np.int64)
        keys = np.empty(total, np.float64)
        at = 0
        for i in present:
            lo, n = int(start[i]), int(lens[i])
            end = at + n
            part[at:end] = i
            jj, y = j[at:end], keys[at:end]
            if n <= _IOTA_LEN:
                if not _iota:
                    _iota.append(np.arange(_IOTA_LEN, dtype=np.int64))
                np.add(_iota[0][:n], lo, out=jj)
            else:
                jj[:] = np.arange(lo, lo + n, dtype=np.int64)
            # (j as float64 + phi) * inv, as ``keys``: the same conversion and operations
            np.add(jj, self.phi[i], out=y)
            np.multiply(y, self.inv[i], out=y)
            if not self.table.uniform[i]:
                y[:] = self.table._inverse_of(i, y)
            at = end
        return part, j, keys

    def _span(self, start: np.ndarray, stop: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """All (part, j) with ``start[i] <= j < stop[i]``, parts in rank order, j ascending."""
        lens = stop - start
        total = int(lens.sum())
        part = np.repeat(self._all, lens)
        first = np.cumsum(lens) - lens
        j = np.arange(total, dtype=np.int64) - np.repeat(first - start, lens)
        return part, j

    # -- walking ------------------------------------------------------------------------
    def walk(
        self, state: MixState, count: int, out: tuple[np.ndarray, np.ndarray] | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """The next ``count`` elements after ``state`` as (part, j) arrays; advances it.
        ``out``: two int64 arrays of at least ``count`` elements that C's walk may write
        them into (a fresh pair a block cost their page faults)."""
        count = min(count, self.total - state.pos)
        if count <= 0:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        c = ordering.available()
        native = c and (count < _HEAP_WALK_MAX or self.k <= _C_HEAP_PARTS)
        kern = None
        if not native and c and not self.load_kernels:
            # C serves the mix: the kernels' merge once loaded (1,024 parts: 58 ns a
            # position against C's heap's 69), loaded after a long run of C's
            with kernels.deferred():
                kern = kernels.get()
            if kern is None:
                _c_walked[0] += count
                if _c_walked[0] > _C_LOAD_AFTER:
                    kernels.load_in_background()
        elif not native:
            kern = kernels.get(background=self.load_kernels)
        native = native or (c and kern is None)  # C's heap while the kernels load
        if native or (kern is not None and count < _HEAP_WALK_MAX):
            if native and out is not None and min(len(out[0]), len(out[1])) >= count:
                part, j = out[0][:count], out[1][:count]
            else:
                part = np.empty(count, dtype=np.int64)
                j = np.empty(count, dtype=np.int64)
            taken = state.taken.copy()
            if native:
                done, last = ordering.walk(taken, self.n, self._kargs, count, part, j)
            else:
                assert kern is not None
                done, last = kern.walk(taken, self.n, *self._kargs, count, part, j)
            state.taken = taken
            state.pos += done
            state.floor = float(np.nextafter(last, np.inf))
            return part[:done], j[:done]
        thr, stop = self._threshold(state, count)
        if kern is None or self.k >= _MAX_PACKED_PARTS:
            span_p, span_j, order = self._sorted_span(state, count, thr, stop)
            return span_p[order], span_j[order]
        m = int((stop - state.taken).sum())
        part = np.empty(m, dtype=np.int64)
        j = np.empty(m, dtype=np.int64)
        keys = np.empty(m, dtype=np.float64)
        kern.merge_block(state.taken, stop, *self._kargs, part, j, keys)
        if len(part) > count:
            part, j = part[:count], j[:count]
            state.floor = float(np.nextafter(keys[count - 1], np.inf))
        else:
            state.floor = float(thr)
        state.taken = state.taken + np.bincount(part, minlength=self.k)
        state.pos += len(part)
        return part, j

    def _threshold(self, state: MixState, count: int) -> tuple[float, np.ndarray]:
        """A clock time and each part's count below it (``stop``, at least the counts
        taken) such that the next ``count`` elements, and up to an eighth more, are the
        elements between ``state`` and it."""
        target = state.pos + count
        thr, c = np.inf, self.n
        if target < self.total:
            # A threshold whose block holds count elements or up to an eighth more (sorted,
            # then cut), found by interpolating the integer counts; failing that, the
            # exact state at target.
            slack = max(count // 8, 64)
            lo_t, s_lo = max(state.floor, 0.0), state.pos
            hi_t, s_hi = 2.0, self.total
            found = False
            for attempt in range(12):
                if attempt % 3 == 2:
                    t = 0.5 * (lo_t + hi_t)
                else:
                    t = lo_t + (hi_t - lo_t) * min((target - s_lo + 0.5) / (s_hi - s_lo), 1.0)
                if not lo_t < t < hi_t:
                    t = 0.5 * (lo_t + hi_t)
                    if not lo_t < t < hi_t:
                        break
                ct = self.counts(t)
                s = int(ct.sum())
                if s < target:
                    lo_t, s_lo = t, s
                elif s > target + slack:
                    hi_t, s_hi = t, s
                else:
                    thr, c, found = t, ct, True
                    break
            if not found:
                end = self.seek(target)
                thr, c = end.floor, end.taken
        return thr, np.maximum(c, state.taken)

    def _sorted_span(
        self, state: MixState, count: int, thr: float, stop: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The span from ``state.taken`` to ``stop``, and the indices of its first
        ``count`` elements by key (a stable sort: ties in rank order); advances ``state``."""
        span_p, span_j, keys = self._span_keys(state.taken, stop)
        order = np.argsort(keys, kind="stable")
        taken = np.bincount(span_p, minlength=self.k)
        if len(order) > count:
            taken -= np.bincount(span_p[order[count:]], minlength=self.k)  # the cut: few
            order = order[:count]
            state.floor = float(np.nextafter(keys[order[-1]], np.inf))
        else:
            state.floor = float(thr)
        state.taken = state.taken + taken
        state.pos += len(order)
        return span_p, span_j, order
