"""Schedules: when a part of a mix contributes, on the mix's virtual clock [0, 1].

A schedule is a trapezoid of rate over the clock with breakpoints
``0 <= start <= full <= fade <= off <= 1`` (``start < off``): the rate rises
linearly from 0 at ``start`` to its peak at ``full``, stays there until ``fade`` and
falls to 0 at ``off``. The peak ``R = 2 / ((fade - full) + (off - start))`` makes the
area 1. Element ``j`` of a part of ``n`` elements and rank ``r`` (of ``k`` non-empty
parts) has the key ``Q((j + (2r + 1) / (2k)) * (1 / n))``, where ``Q`` inverts the
cumulative rate; the mix orders all elements by ``(key, rank, j)``.

=====================  =========================  ====================================
constructor            trapezoid                  meaning
=====================  =========================  ====================================
``uniform()``          (identity, ``Q(y) = y``)   constant rate over the whole clock
``delayed(at)``        ``(at, at, 1, 1)``         nothing before ``at``, constant after
``ramp(start, full)``  ``(start, full, 1, 1)``    rises linearly, then constant
``until(at)``          ``(0, 0, at, at)``         constant until ``at``, nothing after
``fade(fade, off)``    ``(0, 0, fade, off)``      constant, then falls linearly to 0
``trapezoid(s,f,d,o)`` ``(s, f, d, o)``           the general shape
=====================  =========================  ====================================

Every expression is evaluated in IEEE double precision in the crate's order, so
keys are bit-identical to the crate's.
"""

from __future__ import annotations

import enum
import itertools
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import OrderError, OrderErrorKind

MAX_SEGMENTS = 5


class ScheduleReason(enum.Enum):
    """Why a schedule is invalid (the crate's ``ScheduleReason``); ``.value`` says it."""

    NON_FINITE = "a breakpoint is not finite"
    INVALID_BREAKPOINTS = (
        "breakpoints are out of range, out of order, or have zero area "
        "(0 <= start <= full <= fade <= off <= 1 and start < off)"
    )
    COEFFICIENT_OVERFLOW = "derived profile coefficients exceed floating-point range"


@dataclass(frozen=True)
class Schedule:
    """When a mix part contributes: uniform, or a trapezoid of rate over the clock.

    Build one with the class methods; ``Schedule.uniform()`` is the default of a part.

    >>> Schedule.delayed(0.5)
    Schedule.trapezoid(0.5, 0.5, 1.0, 1.0)
    """

    is_uniform: bool = True
    start: float = 0.0
    full: float = 0.0
    fade_start: float = 1.0
    off: float = 1.0
    _segments: tuple | None = field(default=None, compare=False, hash=False, repr=False)

    # -- constructors -------------------------------------------------------------------
    @classmethod
    def uniform(cls) -> Schedule:
        """Constant rate over the whole clock (the default)."""
        return _UNIFORM

    @classmethod
    def trapezoid(cls, start: float, full: float, fade: float, off: float) -> Schedule:
        """Rate rising from ``start`` to ``full``, constant to ``fade``, falling to ``off``."""
        return cls(False, float(start), float(full), float(fade), float(off))

    @classmethod
    def delayed(cls, at: float) -> Schedule:
        """Nothing before ``at``, constant rate after it."""
        return cls.trapezoid(at, at, 1.0, 1.0)

    @classmethod
    def ramp(cls, start: float, full: float) -> Schedule:
        """Rate rising linearly from ``start`` to ``full``, then constant."""
        return cls.trapezoid(start, full, 1.0, 1.0)

    @classmethod
    def until(cls, at: float) -> Schedule:
        """Constant rate until ``at``, nothing after it."""
        return cls.trapezoid(0.0, 0.0, at, at)

    @classmethod
    def fade(cls, fade: float, off: float) -> Schedule:
        """Constant rate until ``fade``, then falling linearly to zero at ``off``."""
        return cls.trapezoid(0.0, 0.0, fade, off)

    def __repr__(self) -> str:
        if self.is_uniform:
            return "Schedule.uniform()"
        return (
            f"Schedule.trapezoid({self.start!r}, {self.full!r}, {self.fade_start!r}, {self.off!r})"
        )

    # -- validation ---------------------------------------------------------------------
    def problem(self) -> ScheduleReason | None:
        """Why this schedule is invalid, or None."""
        if self.is_uniform:
            return None
        if "_problem" in self.__dict__:
            return self.__dict__["_problem"]
        found = self._find_problem()
        object.__setattr__(self, "_problem", found)
        return found

    def _find_problem(self) -> ScheduleReason | None:
        pts = (self.start, self.full, self.fade_start, self.off)
        if not all(math.isfinite(p) for p in pts):
            return ScheduleReason.NON_FINITE
        s, f, d, o = pts
        if not (0.0 <= s <= f <= d <= o <= 1.0) or not s < o:
            return ScheduleReason.INVALID_BREAKPOINTS
        if not self.finite():
            return ScheduleReason.COEFFICIENT_OVERFLOW
        return None

    @property
    def peak(self) -> float:
        """The peak rate ``R = 2 / ((fade - full) + (off - start))`` (1 for uniform)."""
        if self.is_uniform:
            return 1.0
        width = (self.fade_start - self.full) + (self.off - self.start)
        return 2.0 / width if width > 0.0 else math.inf

    # -- the curve ----------------------------------------------------------------------
    def segments(self) -> tuple[tuple[float, ...], ...]:
        """Kept segments ``(x0, x1, r0, r1, share, c, inv_r0, inv_2c)`` of the rate curve.

        ``share`` is the area before the segment, ``c = (r1 - r0) / (2 (x1 - x0))``, and
        the two reciprocals are computed once, as the crate does, so that keys agree
        to the last bit.
        """
        if self._segments is not None:
            return self._segments
        if self.is_uniform:
            pts = [(0.0, 1.0), (1.0, 1.0)]
        else:
            r = self.peak
            pts = [
                (0.0, 0.0),
                (self.start, 0.0),
                (self.full, r),
                (self.fade_start, r),
                (self.off, 0.0),
                (1.0, 0.0),
            ]
        out = []
        share = 0.0
        for (x0, r0), (x1, r1) in itertools.pairwise(pts):
            if not x1 > x0:
                continue
            c = (r1 - r0) / (2.0 * (x1 - x0))
            inv_r0 = 1.0 / r0 if (r1 == r0 and r0 > 0.0) else 0.0
            inv_2c = 1.0 / (2.0 * c) if (c > 0.0 and r0 == 0.0) else 0.0
            out.append((x0, x1, r0, r1, share, c, inv_r0, inv_2c))
            share = share + (r0 + r1) / 2.0 * (x1 - x0)
        segs = tuple(out)
        object.__setattr__(self, "_segments", segs)
        return segs

    def finite(self) -> bool:
        """Whether every derived coefficient is a finite float."""
        return all(math.isfinite(v) for seg in self.segments() for v in (*seg[2:], 4.0 * seg[5]))

    def rows(self) -> np.ndarray:
        """The segments as a ``(MAX_SEGMENTS, 8)`` array, padded with never-selected rows."""
        cached = self.__dict__.get("_rows")
        if cached is None:
            segs = self.segments()
            cached = np.zeros((MAX_SEGMENTS, 8))
            cached[:, 0] = np.inf  # x0: never the segment of a clock time
            cached[:, 4] = np.inf  # share: never the segment of a quantile
            cached[: len(segs)] = segs
            cached.flags.writeable = False
            object.__setattr__(self, "_rows", cached)
        return cached

    def peak_rate(self) -> float:
        """The highest rate of any kept segment (what the steepness limit applies to)."""
        return max(max(seg[2], seg[3]) for seg in self.segments())

    def inverse(self, y: float) -> float:
        """``Q(y)``: the clock time by which a share ``y`` of the part has been drawn."""
        segs = self.segments()
        seg = segs[0]
        for s in segs:
            if s[4] < y:
                seg = s
        x0, x1, r0, _r1, share, c, inv_r0, inv_2c = seg
        z = max(y - share, 0.0)
        if c == 0.0:
            x = z * inv_r0
        else:
            root = math.sqrt(max(r0 * r0 + 4.0 * c * z, 0.0))
            if c > 0.0:
                x = root * inv_2c
            elif r0 + root > 0.0:
                x = 2.0 * z / (r0 + root)
            else:
                x = 0.0
        return min(max(x0 + x, x0), x1)

    def cdf(self, t: float) -> float:
        """``F(t)``: the share of the part drawn by clock time ``t`` (estimates only)."""
        segs = self.segments()
        seg = segs[0]
        for s in segs:
            if s[0] <= t:
                seg = s
        x0, x1, r0, _r1, share, c = seg[:6]
        x = min(max(t - x0, 0.0), x1 - x0)
        return share + x * (r0 + c * x)

    # -- configuration as data ----------------------------------------------------------
    def to_dict(self) -> dict:
        if self.is_uniform:
            return {"uniform": {}}
        return {"trapezoid": [self.start, self.full, self.fade_start, self.off]}

    @classmethod
    def from_dict(cls, d: object) -> Schedule:
        if not isinstance(d, dict) or len(d) != 1:
            raise OrderError(
                OrderErrorKind.INVALID_JSON,
                f"a schedule is {{'uniform': {{}}}} or {{'trapezoid': [...]}}, got {d!r}",
            )
        ((name, value),) = d.items()
        if name == "uniform" and value == {}:
            return cls.uniform()
        if (
            name == "trapezoid"
            and isinstance(value, list)
            and len(value) == 4
            and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value)
        ):
            try:
                points = [float(v) for v in value]
            except OverflowError:
                points = None
            if points is None or not all(math.isfinite(v) for v in points):
                raise OrderError(
                    OrderErrorKind.INVALID_JSON,
                    f"a trapezoid's points are finite numbers, got {value!r:.80}",
                )
            return cls.trapezoid(*points)
        raise OrderError(OrderErrorKind.INVALID_JSON, f"unknown schedule {d!r}")


_UNIFORM = Schedule()
# ``inverse`` part by part (1-d gathers and one search each) for up to this many parts in
# the array, not over a (positions, segments) array: two 1,000,000-element shuffles, one
# delayed, took 111 ns a position to merge and locate this way, 135 the other; mixes of
# 4,000,000 elements in 17, 32, 64 and 128 shuffles, a third of them ramped, took 107,
# 128, 191 and 360 ns a position merged and located part by part (with ``Mix.locate``),
# 228, 237, 237 and 298 ns the other way (the kernels: 54, 64, 60).
_BY_PART = 64


# Parts present up to which ``by_part`` finds each part's indices by a scan of the whole
# array (``flatnonzero(part == i)``: the array read once a part); above, by one stable
# sort of the parts (numpy's radix sort of 8- and 16-bit integers, one pass whatever the
# parts). 262,144 positions at random over k parts, ns a position, scans / sort: k = 4
# 3.4 / 4.1, 8 5.6 / 3.8, 300 88 / 10 (a shuffled concat of 1,024 shards located child
# by child took 410 ns a position with scans).
_SCAN_PARTS = 6


def by_part(part: np.ndarray, k: int) -> list[tuple[int, Any]]:
    """``(i, where)`` for each of the ``k`` parts present in ``part``: a slice where the
    parts come in runs (a walk's span, parts in rank order), else their indices in
    ascending order."""
    if len(part) > 1 and (part[1:] >= part[:-1]).all():
        cuts = np.searchsorted(part, np.arange(k + 1)).tolist()
        return [(i, slice(cuts[i], cuts[i + 1])) for i in range(k) if cuts[i] < cuts[i + 1]]
    counts = np.bincount(part, minlength=k)
    present = np.flatnonzero(counts).tolist()
    if len(present) <= _SCAN_PARTS:
        return [(i, np.flatnonzero(part == i)) for i in present]
    narrow = np.uint8 if k <= 1 << 8 else np.uint16 if k <= 1 << 16 else None
    order = np.argsort(part.astype(narrow) if narrow else part, kind="stable")
    ends = np.cumsum(counts).tolist()
    counts = counts.tolist()
    return [(i, order[ends[i] - counts[i] : ends[i]]) for i in present]


class ScheduleTable:
    """The schedules of a mix's non-empty parts as padded arrays, for vectorised keys.

    Row ``i`` holds part ``i``'s segments; unused segments have a share of +inf (never
    selected by ``inverse``) and a start of +inf (never selected by ``cdf``).
    """

    _COLS = ("x0", "x1", "r0", "r1", "share", "c", "inv_r0", "inv_2c")
    # the columns of ``_COLS``, each a ``(parts, segments)`` view set in ``__init__``
    x0: np.ndarray
    x1: np.ndarray
    r0: np.ndarray
    r1: np.ndarray
    share: np.ndarray
    c: np.ndarray
    inv_r0: np.ndarray
    inv_2c: np.ndarray

    def __init__(self, schedules: list[Schedule]) -> None:
        uniform = np.array([s.is_uniform for s in schedules], dtype=bool)
        table = np.broadcast_to(_UNIFORM.rows(), (len(schedules), MAX_SEGMENTS, 8)).copy()
        for i in np.flatnonzero(~uniform):
            segs = schedules[i].segments()
            table[i, : len(segs)] = segs
        self._table = table
        for c, name in enumerate(self._COLS):
            setattr(self, name, table[:, :, c])
        self.uniform = uniform
        self.all_uniform = bool(uniform.all())

    def stacked(self) -> np.ndarray:
        """All columns as one ``(parts, segments, 8)`` array (for the compiled kernels)."""
        return self._table

    def inverse(self, part: np.ndarray, y: np.ndarray) -> np.ndarray:
        """``Q_part(y)`` elementwise (``part``: int array of rows; ``y``: float64 array)."""
        if self.all_uniform:
            return y
        groups = by_part(part, len(self.uniform))
        if len(groups) <= _BY_PART:
            out = np.empty(len(y), np.float64)
            for i, at in groups:
                out[at] = self._inverse_of(i, y[at])
            return out
        seg = np.maximum((self.share[part] < y[:, None]).sum(axis=1) - 1, 0)
        return self._at(part, seg, y)

    def _at(self, rows: Any, seg: np.ndarray, y: np.ndarray) -> np.ndarray:
        """The quantiles of ``y`` in segments ``seg`` of rows ``rows`` (an array of
        parts, or one part), each element's constants gathered: every branch computed,
        each element's taken."""
        x0 = self.x0[rows, seg]
        r0 = self.r0[rows, seg]
        c = self.c[rows, seg]
        z = np.maximum(y - self.share[rows, seg], 0.0)
        root = np.sqrt(np.maximum(r0 * r0 + 4.0 * c * z, 0.0))
        denom = r0 + root
        with np.errstate(divide="ignore", invalid="ignore"):
            falling = np.where(denom > 0.0, 2.0 * z / denom, 0.0)
        x = np.where(
            c == 0.0,
            z * self.inv_r0[rows, seg],
            np.where(c > 0.0, root * self.inv_2c[rows, seg], falling),
        )
        return np.minimum(np.maximum(x0 + x, x0), self.x1[rows, seg])

    def _inverse_of(self, i: int, y: np.ndarray) -> np.ndarray:
        """``inverse`` of part ``i`` alone, by the same expressions. A part's keys are
        asked for in ascending order (its elements' ``j`` ascend in a walk): then each
        segment is a slice of ``y``, found by one search, and only its own branch is
        computed, with its constants as scalars; otherwise each element's segment is
        searched for (the shares ascend; padding is +inf)."""
        share = self.share[i]
        if len(y) > 1 and not (y[1:] >= y[:-1]).all():
            return self._at(i, np.maximum(np.searchsorted(share, y, side="left") - 1, 0), y)
        out = np.empty(len(y), np.float64)
        # segment m (m >= 1) holds the y above share[m]; segment 0 the rest
        cuts = [0, *np.searchsorted(y, share[1:], side="right").tolist(), len(y)]
        for m in range(len(share)):
            lo, hi = cuts[m], cuts[m + 1]
            if lo >= hi:
                continue
            x0, x1, r0, c = (float(v[i, m]) for v in (self.x0, self.x1, self.r0, self.c))
            z = np.maximum(y[lo:hi] - float(share[m]), 0.0)
            if c == 0.0:
                x = z * float(self.inv_r0[i, m])
            else:
                root = np.sqrt(np.maximum(r0 * r0 + 4.0 * c * z, 0.0))
                if c > 0.0:
                    x = root * float(self.inv_2c[i, m])
                else:
                    denom = r0 + root
                    with np.errstate(divide="ignore", invalid="ignore"):
                        x = np.where(denom > 0.0, 2.0 * z / denom, 0.0)
            out[lo:hi] = np.minimum(np.maximum(x0 + x, x0), x1)
        return out

    def cdf(self, part: np.ndarray, t: float) -> np.ndarray:
        """``F_part(t)`` for every listed part at one clock time (estimates only)."""
        if self.all_uniform:
            return np.full(len(part), min(max(t, 0.0), 1.0))
        seg = np.maximum((self.x0[part] <= t).sum(axis=1) - 1, 0)
        x0 = self.x0[part, seg]
        x = np.minimum(np.maximum(t - x0, 0.0), self.x1[part, seg] - x0)
        return self.share[part, seg] + x * (self.r0[part, seg] + self.c[part, seg] * x)
