"""An independent oracle for feedline's ordering engine (the dataorder crate 0.4).

Ordering version 2: written from the algorithm's reference as corrected on
2026-12-01 (``shared/reference/dataorder-algorithm.md``), in plain Python with the standard
library only: it imports neither feedline nor numpy, so a bug in the engine cannot
hide in a shared helper.

It evaluates configurations by brute force: every node is materialised as the full
list of ``(source_ordinal, record_index)`` pairs, and a mix computes every element's
key and sorts by ``(key, rank, j)``. For configurations too long to materialise,
``point`` evaluates single positions with exact big-integer arithmetic (a mix by
binary searches over its parts' keys).

Configurations are the plain data of ``Seq.to_dict()["seq"]``, except that mix
schedules name their constructor: ``{"delayed": [0.5]}``, ``{"uniform": []}``, or
``None`` for a bare part (uniform by default).

The rules that decide an order are read off the configuration as written: a
shuffle's salt is its child's configuration salt (sources salted with their original
lengths, empty or selected away; concats and mixes folded left to right), a repeat
multiplies the enclosing epoch by its count as given (``.repeat(3).repeat(2)`` is
``.repeat(6)``), and a mix below a shuffle is an error (a fixture case with
``"error"``).

    python tools/order_oracle.py --write   # (re)write tests/fixtures/order_oracle.json
    python tools/order_oracle.py --check   # fail if the file differs from a fresh run
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import math
import random
import sys
from pathlib import Path

FIXTURE = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "order_oracle.json"

M64 = (1 << 64) - 1
PHI = 0x9E3779B97F4A7C15

# -- hashing -------------------------------------------------------------------------------


def mix64(z: int) -> int:
    z &= M64
    z ^= z >> 30
    z = (z * 0xBF58476D1CE4E5B9) & M64
    z ^= z >> 27
    z = (z * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def fnv1a(data: bytes) -> int:
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & M64
    return h


def round_keys(seed: int, ctx: int, salt: int) -> list[int]:
    a = (mix64(seed ^ 0x2545F4914F6CDD1D) + ctx * PHI + mix64(salt)) & M64
    a = mix64(a ^ 0x1F83D9ABFB41BD6B)
    return [mix64(a + i * PHI) for i in range(6)]


def permute(n: int, keys: list[int], x: int) -> int:
    """The Feistel bijection on ``[0, n)`` with cycle walking."""
    if n <= 1:
        return x
    k = (n - 1).bit_length()
    lb = k // 2
    rb = k - lb
    masks = [(1 << lb) - 1 if i % 2 == 0 else (1 << rb) - 1 for i in range(6)]
    while True:
        left, right = x >> rb, x & ((1 << rb) - 1)
        for i in range(6):
            left, right = right, (left ^ mix64(right + keys[i])) & masks[i]
        x = (left << rb) | right
        if x < n:
            return x


# -- schedules -----------------------------------------------------------------------------

SCHEDULES = {
    "uniform": lambda: None,
    "delayed": lambda at: (at, at, 1.0, 1.0),
    "ramp": lambda s, f: (s, f, 1.0, 1.0),
    "until": lambda at: (0.0, 0.0, at, at),
    "fade": lambda d, o: (0.0, 0.0, d, o),
    "trapezoid": lambda s, f, d, o: (s, f, d, o),
}


class Curve:
    """The inverse ``Q`` of a schedule's cumulative rate, with the crate's reciprocals."""

    def __init__(self, schedule: dict | None) -> None:
        if schedule is None:
            trapezoid = None
        else:
            ((name, args),) = schedule.items()
            trapezoid = SCHEDULES[name](*[float(a) for a in args])
        if trapezoid is None:
            points = [(0.0, 1.0), (1.0, 1.0)]
        else:
            s, f, d, o = trapezoid
            if not (0.0 <= s <= f <= d <= o <= 1.0 and s < o):
                raise ValueError(f"invalid schedule {schedule}")
            peak = 2.0 / ((d - f) + (o - s))
            points = [(0.0, 0.0), (s, 0.0), (f, peak), (d, peak), (o, 0.0), (1.0, 0.0)]
        self.segments = []
        share = 0.0
        for (x0, r0), (x1, r1) in itertools.pairwise(points):
            if x1 - x0 == 0.0:
                continue
            c = (r1 - r0) / (2.0 * (x1 - x0))
            inv_r0 = 1.0 / r0 if (r1 == r0 and r0 > 0.0) else 0.0
            inv_2c = 1.0 / (2.0 * c) if (c > 0.0 and r0 == 0.0) else 0.0
            self.segments.append((x0, x1, r0, share, c, inv_r0, inv_2c))
            share += (r0 + r1) / 2.0 * (x1 - x0)

    def q(self, y: float) -> float:
        chosen = self.segments[0]
        for seg in self.segments:
            if seg[3] < y:
                chosen = seg
        x0, x1, r0, share, c, inv_r0, inv_2c = chosen
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


class MixKeys:
    """The keys of the non-empty parts of one mix: ``key(r, j) = Q_r((j + phi_r) / n_r)``."""

    def __init__(self, lengths: list[int], schedules: list[dict | None]) -> None:
        k = len(lengths)
        self.lengths = lengths
        self.curves = [Curve(s) for s in schedules]
        self.phis = [float(2 * r + 1) / float(2 * k) for r in range(k)]
        self.recips = [1.0 / float(n) for n in lengths]

    def key(self, r: int, j: int) -> float:
        return self.curves[r].q((float(j) + self.phis[r]) * self.recips[r])

    def count_below(self, s: int, key: float, inclusive: bool) -> int:
        """How many elements of part ``s`` have a key below (or equal to) ``key``."""
        lo, hi = 0, self.lengths[s]
        while lo < hi:
            mid = (lo + hi) // 2
            km = self.key(s, mid)
            if km < key or (inclusive and km == key):
                lo = mid + 1
            else:
                hi = mid
        return lo

    def rank(self, r: int, j: int) -> int:
        """The mix position of element ``j`` of part ``r`` (keys are monotone in ``j``)."""
        key = self.key(r, j)
        total = j
        for s in range(len(self.lengths)):
            if s != r:
                total += self.count_below(s, key, inclusive=s < r)
        return total

    def element_at(self, pos: int) -> tuple[int, int]:
        for r, n in enumerate(self.lengths):
            lo, hi = 0, n - 1
            if self.rank(r, 0) > pos:
                continue
            while lo < hi:  # the last j with rank(r, j) <= pos
                mid = (lo + hi + 1) // 2
                if self.rank(r, mid) <= pos:
                    lo = mid
                else:
                    hi = mid - 1
            if self.rank(r, lo) == pos:
                return r, lo
        raise AssertionError(f"no element at mix position {pos}")


# -- the configuration: lengths, salts, ordinals and mixes, by path -----------------------


def combine_salts(salts: list[int]) -> int:
    """A concat's or a mix's salt: its children's salts folded left to right."""
    if not salts:
        return 0
    acc = salts[0]
    for s in salts[1:]:
        acc = mix64(((acc + PHI) & M64) ^ s)
    return acc


def source_salt(salt: int, length: int) -> int:
    """A source's salt, from its own salt and its original length (also when 0)."""
    return mix64(mix64(salt ^ 0x6A09E667F3BCC908) ^ ((length * PHI) & M64))


def epoch_word(seed: int, epoch: int) -> int:
    """The one word a shuffle's keys take from the context ``(order seed, epoch)``."""
    if epoch == 0:
        return seed
    return mix64(((mix64(seed ^ 0x3C6EF372FE94F82B) + epoch * PHI) & M64) ^ PHI)


class ShuffleContainsMix(ValueError):
    """A mix anywhere below a shuffle (the crate's ``ShuffleContainsMix``).

    ``path`` is the path of the nearest shuffle above the mix.
    """

    def __init__(self, path: tuple) -> None:
        super().__init__(f"a shuffle at {list(path)} contains a mix")
        self.path = path


class Config:
    """A configuration with, for every node (by path), what evaluation needs to know.

    Everything is read off the configuration as written: a node's salt from its
    sources' salts and original lengths (empty and selected-away ones included), a
    repeat's count as given. Nothing is pruned, so nothing pruned can change an order.
    """

    def __init__(self, seq: dict) -> None:
        self.seq = seq
        self.ordinal: dict[tuple, int] = {}
        self.salt: dict[tuple, int] = {}
        self.length: dict[tuple, int] = {}
        self.mixes: dict[tuple, tuple[list[int], MixKeys | None]] = {}
        self._ordinals = 0
        self._visit(seq, (), shuffle_at=None)

    def _visit(self, node: dict, path: tuple, shuffle_at: tuple | None) -> None:
        ((op, body),) = node.items()
        if op == "source":
            self.ordinal[path] = self._ordinals
            self._ordinals += 1
            self.length[path] = body["len"]
            self.salt[path] = source_salt(body["salt"], body["len"])
            return
        if op in ("concat", "mix"):
            if op == "mix" and shuffle_at is not None:
                raise ShuffleContainsMix(shuffle_at)
            children = body if op == "concat" else [p["seq"] for p in body]
            for i, c in enumerate(children):
                self._visit(c, (*path, i), shuffle_at)
            lengths = [self.length[(*path, i)] for i in range(len(children))]
            self.length[path] = sum(lengths)
            self.salt[path] = combine_salts([self.salt[(*path, i)] for i in range(len(children))])
            if op == "mix":
                for p in body:
                    Curve(p["schedule"])  # validated even when its part is empty
                ranked = [i for i, n in enumerate(lengths) if n]
                keys = None
                if len(ranked) >= 2:
                    keys = MixKeys(
                        [lengths[i] for i in ranked], [body[i]["schedule"] for i in ranked]
                    )
                self.mixes[path] = (ranked, keys)
            return
        child = (*path, 0)
        self._visit(body["seq"], child, path if op == "shuffle" else shuffle_at)
        n = self.length[child]
        self.salt[path] = self.salt[child]
        if op == "shuffle":
            self.length[path] = n
        elif op == "repeat":
            self.length[path] = n * body["times"]
        elif op == "cycle_to":
            if body["length"] > 0 and n == 0:
                raise ValueError("cycle_to over an empty sequence")
            self.length[path] = body["length"]
        elif op in ("skip", "take"):
            if body["n"] > n:
                raise ValueError(f"{op} past the end")
            self.length[path] = n - body["n"] if op == "skip" else body["n"]
        elif op == "step_by":
            self.length[path] = -(-n // body["step"])
        else:
            raise ValueError(f"unknown operation {op!r}")

    def __len__(self) -> int:
        return self.length[()]

    def _times(self, op: str, body: dict, n: int) -> int:
        """The count an enclosing epoch is multiplied by below a repeat or a cycle."""
        if op == "repeat":
            return body["times"]
        return 1 if body["length"] <= n else -(-body["length"] // n)

    # -- brute force -------------------------------------------------------------------
    def evaluate(self, seed: int = 0) -> list[tuple[int, int]]:
        """The whole order, materialised."""
        return self._eval(self.seq, (), seed & M64, 0)

    def _eval(self, node: dict, path: tuple, seed: int, epoch: int) -> list[tuple[int, int]]:
        ((op, body),) = node.items()
        if op == "source":
            return [(self.ordinal[path], i) for i in range(body["len"])]
        if op == "concat":
            return [x for i, c in enumerate(body) for x in self._eval(c, (*path, i), seed, epoch)]
        if op == "mix":
            ranked, keys = self.mixes[path]
            parts = [self._eval(body[i]["seq"], (*path, i), seed, epoch) for i in ranked]
            if keys is None:
                return parts[0] if parts else []
            elements = []
            for r, part in enumerate(parts):
                part_keys = [keys.key(r, j) for j in range(len(part))]
                if any(a > b for a, b in itertools.pairwise(part_keys)):
                    raise AssertionError(f"keys of mix part {r} at {path} are not monotone")
                elements.extend((key, r, j) for j, key in enumerate(part_keys))
            elements.sort()
            return [parts[r][j] for _, r, j in elements]
        child_path = (*path, 0)
        if op == "shuffle":
            inner = self._eval(body["seq"], child_path, seed, epoch)
            n = len(inner)
            if n <= 1:
                return inner
            keys = round_keys(body["seed"], epoch_word(seed, epoch), self.salt[child_path])
            return [inner[permute(n, keys, p)] for p in range(n)]
        if op in ("repeat", "cycle_to"):
            n = self.length[child_path]
            length = self.length[path]
            if length == 0:
                return []
            times = self._times(op, body, n)
            if op == "cycle_to" and times == 1:
                return self._eval(body["seq"], child_path, seed, epoch)[:length]
            out: list[tuple[int, int]] = []
            for e in range(-(-length // n)):
                sub = (epoch * times + e) & M64
                out.extend(self._eval(body["seq"], child_path, seed, sub))
            return out[:length]
        inner = self._eval(body["seq"], child_path, seed, epoch)
        if op == "skip":
            return inner[body["n"] :]
        if op == "take":
            return inner[: body["n"]]
        if op == "step_by":
            return inner[:: body["step"]]
        raise ValueError(f"unknown operation {op!r}")

    # -- one position at a time, with no materialisation --------------------------------
    def point(self, pos: int, seed: int = 0) -> tuple[int, int]:
        if not 0 <= pos < len(self):
            raise IndexError(pos)
        return self._point(self.seq, (), pos, seed & M64, 0)

    def _point(self, node: dict, path: tuple, p: int, seed: int, epoch: int) -> tuple[int, int]:
        ((op, body),) = node.items()
        if op == "source":
            return self.ordinal[path], p
        if op == "concat":
            for i, c in enumerate(body):
                n = self.length[(*path, i)]
                if p < n:
                    return self._point(c, (*path, i), p, seed, epoch)
                p -= n
            raise IndexError(p)
        if op == "mix":
            ranked, keys = self.mixes[path]
            if keys is None:
                i = ranked[0]
                return self._point(body[i]["seq"], (*path, i), p, seed, epoch)
            r, j = keys.element_at(p)
            i = ranked[r]
            return self._point(body[i]["seq"], (*path, i), j, seed, epoch)
        child_path = (*path, 0)
        n = self.length[child_path]
        if op == "shuffle":
            if n > 1:
                keys = round_keys(body["seed"], epoch_word(seed, epoch), self.salt[child_path])
                p = permute(n, keys, p)
            return self._point(body["seq"], child_path, p, seed, epoch)
        if op in ("repeat", "cycle_to"):
            times = self._times(op, body, n)
            if op == "cycle_to" and times == 1:
                return self._point(body["seq"], child_path, p, seed, epoch)
            e, p = divmod(p, n)
            return self._point(body["seq"], child_path, p, seed, (epoch * times + e) & M64)
        if op == "skip":
            return self._point(body["seq"], child_path, p + body["n"], seed, epoch)
        if op == "take":
            return self._point(body["seq"], child_path, p, seed, epoch)
        if op == "step_by":
            return self._point(body["seq"], child_path, p * body["step"], seed, epoch)
        raise ValueError(f"unknown operation {op!r}")


# -- building configurations ---------------------------------------------------------------


class C:
    """A small builder mirroring ``fl.Seq``, producing plain configuration data."""

    def __init__(self, d: dict) -> None:
        self.d = d

    @staticmethod
    def source(length: int, salt: int = 0) -> C:
        return C({"source": {"len": length, "salt": salt}})

    @staticmethod
    def concat(parts: list[C]) -> C:
        return C({"concat": [p.d for p in parts]})

    @staticmethod
    def mix(parts: list) -> C:
        body = []
        for part in parts:
            if isinstance(part, tuple):
                seq, (name, *args) = part
                body.append({"seq": seq.d, "schedule": {name: list(args)}})
            else:
                body.append({"seq": part.d, "schedule": None})
        return C({"mix": body})

    def _unary(self, op: str, field: str, value: int) -> C:
        return C({op: {field: value, "seq": self.d}})

    def shuffle(self, seed: int) -> C:
        return self._unary("shuffle", "seed", seed)

    def repeat(self, times: int) -> C:
        return self._unary("repeat", "times", times)

    def cycle_to(self, length: int) -> C:
        return self._unary("cycle_to", "length", length)

    def skip(self, n: int) -> C:
        return self._unary("skip", "n", n)

    def take(self, n: int) -> C:
        return self._unary("take", "n", n)

    def step_by(self, step: int) -> C:
        return self._unary("step_by", "step", step)


src = C.source
U = ("uniform",)


def cases() -> list[tuple[str, C, int]]:
    """``(name, configuration, order seed)`` of every case in the fixture."""
    out: list[tuple[str, C, int]] = []

    def add(name: str, cfg: C, *seeds: int) -> None:
        for seed in seeds or (0,):
            out.append((name if len(seeds) <= 1 else f"{name}-seed{seed}", cfg, seed))

    # plain shuffles
    for n in sorted({1, 2, 3, 5, 17, *(4**k + 1 for k in range(1, 7)), 1000}):
        add(f"shuffle-{n}", src(n).shuffle(n % 7 + 1), 0)
    add("shuffle-1000-salted", src(1000, 0xFEEDBEEF).shuffle(7), 0)
    add("shuffle-1024-power-of-two", src(1024).shuffle(3), 0)
    add("shuffle-seed-max", src(200, 5).shuffle(M64), 0)
    # seeded orders
    add("shuffle-65-seeded", src(65).shuffle(2), 1, 42, M64)
    add("shuffle-1000-seeded", src(1000, 11).shuffle(7), 42)
    add("concat-shuffled-seeded", C.concat([src(40, 1).shuffle(1), src(25, 2)]).shuffle(9), 7)
    # repeats
    add("repeat-of-shuffle", src(10).shuffle(3).repeat(4), 0, 9)
    add("repeat-nested", src(7, 3).shuffle(1).repeat(3).repeat(2), 0, 5)
    add("repeat-nested-three", src(5).shuffle(2).repeat(2).repeat(3).repeat(2), 0)
    add("repeat-then-shuffle", src(20).shuffle(1).repeat(3).shuffle(2), 0, 3)
    add("repeat-of-concat", C.concat([src(9, 1).shuffle(1), src(6, 2).shuffle(2)]).repeat(3), 4)
    add("repeat-one-is-identity", src(30).shuffle(4).repeat(1).repeat(2), 0)
    add(
        "repeat-zero-in-concat",
        C.concat([src(5, 1).shuffle(1).repeat(0), src(40, 2).shuffle(2)]),
        0,
    )
    add("repeat-zero-is-empty", src(5).shuffle(1).repeat(0), 0)
    add("repeat-cut-by-take", src(50).shuffle(1).repeat(3).take(40).repeat(2), 0)
    add("repeat-kept-by-long-take", src(50).shuffle(1).repeat(3).take(60).repeat(2), 0)
    add("cycle-to-longer", src(30, 2).shuffle(1).cycle_to(100), 0, 8)
    add("cycle-to-shorter", src(30).shuffle(1).cycle_to(12), 0)
    add("cycle-to-of-repeat", src(30).shuffle(5).repeat(2).cycle_to(100), 0)
    add("cycle-to-then-repeat", src(11).shuffle(2).cycle_to(25).repeat(3), 0)
    # concats under shuffles
    add("concat-under-shuffle", C.concat([src(100, 5), src(37, 9).shuffle(4)]).shuffle(8), 0)
    add("concat-with-empty-source", C.concat([src(0, 3), src(40, 4)]).shuffle(1), 0)
    add(
        "concat-pruned-by-skip-take",
        C.concat([src(50, 1), src(60, 3), src(70, 4)]).skip(50).take(60).shuffle(2),
        0,
    )
    add(
        "concat-two-parts-touched",
        C.concat([src(50, 1), src(60, 3), src(70, 4)]).skip(55).take(60).shuffle(2),
        0,
    )
    add("concat-stepped-under-shuffle", C.concat([src(30), src(40, 2)]).step_by(3).shuffle(6), 0)
    add(
        "concat-of-shuffles-shuffled",
        C.concat([src(33, 1).shuffle(1), src(64, 2).shuffle(2), src(3, 3)]).shuffle(3),
        0,
    )
    # slices
    add("slice-skip-step-take", src(1000).shuffle(3).skip(17).step_by(5).take(100), 0)
    add("slice-take-of-shuffle", src(300, 6).shuffle(2).take(77), 0)
    add("slice-step-of-repeat", src(40).shuffle(1).repeat(3).skip(1).step_by(4), 0)
    add("slice-skip-into-second-pass", src(40).shuffle(1).repeat(3).skip(50).take(30), 0)
    # the published fact
    add(
        "published-mix",
        C.mix(
            [
                (src(300).shuffle(1).cycle_to(750), U),
                (src(100).shuffle(2).cycle_to(250), ("delayed", 0.5)),
            ]
        ),
        0,
    )
    # mixes with every schedule
    a, b, c, d = (src(120, 1).shuffle(1), src(80, 2).shuffle(2), src(50, 3), src(31, 4).shuffle(4))
    add("mix-uniform-bare", C.mix([a, b]), 0)
    add("mix-uniform-explicit-three", C.mix([(a, U), (b, U), (c, U)]), 0)
    add("mix-delayed", C.mix([a, (b, ("delayed", 0.3))]), 0)
    add("mix-delayed-late", C.mix([a, (c, ("delayed", 0.9))]), 0)
    add("mix-ramp", C.mix([a, (b, ("ramp", 0.2, 0.6))]), 0)
    add("mix-ramp-from-zero", C.mix([(b, ("ramp", 0.0, 0.5)), c]), 0)
    add("mix-until", C.mix([a, (b, ("until", 0.4))]), 0)
    add("mix-fade", C.mix([a, (b, ("fade", 0.3, 0.7))]), 0)
    add("mix-fade-to-the-end", C.mix([(c, ("fade", 0.5, 1.0)), a]), 0)
    add("mix-trapezoid", C.mix([a, (b, ("trapezoid", 0.1, 0.3, 0.6, 0.8))]), 0)
    add("mix-trapezoid-triangle", C.mix([a, (c, ("trapezoid", 0.2, 0.5, 0.5, 0.8))]), 0)
    add(
        "mix-four-overlapping",
        C.mix(
            [
                (a, ("ramp", 0.0, 0.3)),
                (b, ("trapezoid", 0.1, 0.2, 0.7, 0.9)),
                (c, ("until", 0.6)),
                (d, ("delayed", 0.25)),
            ]
        ),
        0,
    )
    add(
        "mix-with-a-gap",
        C.mix([(a, ("until", 0.3)), (b, ("delayed", 0.6)), (d, ("trapezoid", 0.7, 0.8, 0.8, 0.9))]),
        0,
    )
    add("mix-handover", C.mix([(a, ("until", 0.5)), (b, ("delayed", 0.5))]), 0)
    add("mix-early-enders", C.mix([(c, ("until", 0.2)), (d, ("fade", 0.1, 0.3)), a]), 0)
    add("mix-three-delayed", C.mix([(b, ("delayed", 0.1)), (c, ("delayed", 0.1)), a]), 0)
    add("mix-equal-parts-ties", C.mix([src(64), src(64, 1), src(64, 2), src(64, 3)]), 0)
    add("mix-with-empty-part", C.mix([src(0, 9), (a, ("ramp", 0.1, 0.2)), c]), 0)
    add("mix-one-nonempty-part", C.mix([(src(0), ("delayed", 0.5)), b]).skip(3), 0)
    add(
        "mix-of-sliced-parts",
        C.mix([a.skip(20).take(50), (b.cycle_to(130), ("ramp", 0.1, 0.9)), c.step_by(3)]),
        0,
    )
    add("mix-of-singletons", C.mix([src(1, 1), (src(1, 2), ("delayed", 0.5)), src(2, 3)]), 0)
    # nested mixes
    add("mix-nested", C.mix([C.mix([a, (b, ("delayed", 0.5))]), (c, ("until", 0.5))]), 0)
    add(
        "mix-nested-both-sides",
        C.mix([C.mix([a, c]), (C.mix([(b, ("fade", 0.2, 0.4)), d]), ("ramp", 0.3, 0.5))]),
        0,
    )
    add("mix-in-concat", C.concat([C.mix([a, b]), C.mix([(c, ("delayed", 0.2)), d])]), 0)
    # mixes under repeat and selections
    add("mix-under-repeat", C.mix([a, (b, ("delayed", 0.4))]).repeat(3), 0, 17)
    add("mix-of-repeats-under-repeat", C.mix([a.repeat(2), b.cycle_to(150)]).repeat(2), 0)
    add("mix-under-skip-step", C.mix([a, (b, ("ramp", 0.2, 0.4)), c]).skip(5).step_by(3), 0)
    add("mix-shards", C.mix([a, b, c]).skip(2).step_by(4), 0, 1)
    add("mix-under-take", C.mix([a, (d, ("until", 0.7))]).take(90), 0)
    add(
        "mix-repeated-then-sliced",
        C.mix([src(70, 1).shuffle(5), (src(30, 2).shuffle(6), ("trapezoid", 0.0, 0.5, 0.5, 1.0))])
        .repeat(4)
        .skip(33)
        .step_by(7),
        0,
    )
    # salts follow the original configuration
    add("salt-empty-source-first", C.concat([src(0), src(40)]).shuffle(1), 0)
    add("salt-empty-salted-source", C.concat([src(40, 1), src(0, 2)]).shuffle(1), 0)
    add("salt-selected-away-by-take", C.concat([src(50, 1), src(30, 2)]).take(50).shuffle(3), 0)
    add("salt-selected-away-by-skip", C.concat([src(20, 1), src(30, 2)]).skip(20).shuffle(3), 0)
    add("salt-original-length-under-take", src(1000).take(100).shuffle(2), 0)
    add("salt-repeat-zero-kept", C.concat([src(5, 1).repeat(0), src(40, 2)]).shuffle(4), 0)
    add("salt-take-zero-kept", C.concat([src(5, 1).take(0), src(40, 2)]).shuffle(4), 0)
    add("salt-plain-concat", C.concat([src(300), src(500)]).shuffle(5), 0)
    add(
        "salt-nested-concat-left",
        C.concat([C.concat([src(20, 1), src(21, 2)]), src(22, 3)]).shuffle(1),
        0,
    )
    add(
        "salt-nested-concat-right",
        C.concat([src(20, 1), C.concat([src(21, 2), src(22, 3)])]).shuffle(1),
        0,
    )
    add(
        "salt-nested-concat-three-deep",
        C.concat([src(9, 1), C.concat([src(8, 2), C.concat([src(7, 3), src(0, 4)])])]).shuffle(6),
        0,
        3,
    )
    add("salt-single-child-concat", C.concat([src(60, 5)]).shuffle(2), 0)
    add("salt-empty-concat-in-concat", C.concat([C.concat([]), src(33, 1)]).shuffle(2), 0)
    add("salt-shuffle-of-shuffle", src(64, 3).shuffle(1).shuffle(2), 0)
    # nested repeats count total epochs
    add("repeat-nested-equals-flat-6", src(100).shuffle(3).repeat(3).repeat(2), 0)
    add("repeat-flat-6", src(100).shuffle(3).repeat(6), 0)
    add(
        "repeat-nested-under-shuffle",
        C.concat([src(37, 1).shuffle(7), src(19, 2).shuffle(7).repeat(2)])
        .shuffle(11)
        .repeat(3)
        .repeat(2),
        51,
    )
    add("repeat-cycle-of-nested", src(13, 2).shuffle(1).repeat(2).cycle_to(60).repeat(2), 0)
    add("repeat-selection-keeps-count", src(17, 1).shuffle(7).repeat(3).take(17).repeat(3), 0, 51)
    add("repeat-stride-keeps-count", src(17, 1).shuffle(7).repeat(3).step_by(51).repeat(3), 0)
    add(
        "repeat-concat-prefix-keeps-count",
        C.concat([src(17, 1).shuffle(7).repeat(3), src(13, 2).shuffle(7)]).take(17).repeat(3),
        0,
    )
    # nested repeats under mixes: a part's epochs never depend on its siblings
    add(
        "mix-of-nested-repeats-repeated",
        C.mix([src(40, 1).shuffle(1), src(30, 2).shuffle(2).repeat(3).repeat(2)]).repeat(2),
        0,
    )
    add(
        "mix-of-flat-repeats-repeated",
        C.mix([src(40, 1).shuffle(1), src(30, 2).shuffle(2).repeat(6)]).repeat(2),
        0,
    )
    add(
        "mix-deep-repeats-nested-mix",
        C.mix(
            [
                C.mix(
                    [
                        src(17, 0).shuffle(7).repeat(2).repeat(3),
                        src(7, 2).shuffle(7).repeat(2).repeat(3).repeat(2).repeat(2),
                    ]
                ),
                src(11, 1).shuffle(7).cycle_to(29),
            ]
        ).repeat(3),
        51,
    )
    add(
        "mix-scheduled-repeats-under-repeat",
        C.mix([(src(37, 0).shuffle(7).repeat(2), U), (src(19, 1).shuffle(7), ("delayed", 0.3))])
        .repeat(3)
        .repeat(2),
        0,
    )
    # a shuffle containing any mix is an error, at the nearest enclosing shuffle
    add("error-shuffle-of-mix", C.mix([a, (c, ("until", 0.5))]).shuffle(11), 0)
    add("error-shuffle-of-single-part-mix", C.mix([a]).shuffle(1), 0)
    add("error-shuffle-of-empty-mix", C.mix([]).shuffle(1), 0)
    add("error-shuffle-of-taken-mix", C.mix([a, b]).take(10).shuffle(1), 0)
    add("error-shuffle-of-repeated-mix", C.mix([a, b]).repeat(2).shuffle(1), 0)
    add("error-shuffle-of-mix-in-concat", C.concat([c, C.mix([a, b]).take(3)]).shuffle(1), 0)
    add("error-nearest-shuffle", C.concat([c, C.mix([a]).shuffle(2)]).shuffle(1), 0)
    add("error-shuffle-in-a-mix", C.mix([c, C.concat([C.mix([a, b])]).shuffle(2)]), 0)
    # longer orders: fingerprints and windows
    add(
        "long-mix-three",
        C.mix(
            [
                (src(30000, 1).shuffle(1), U),
                (src(5000, 2).shuffle(2).cycle_to(12000), ("delayed", 0.35)),
                (src(9000, 3), ("fade", 0.4, 0.8)),
            ]
        ),
        3,
    )
    add(
        "long-shuffle-of-concat",
        C.concat([src(20000, 1), src(4096, 2).shuffle(3).repeat(2)]).shuffle(4),
        0,
    )
    return out


# -- the fixture ---------------------------------------------------------------------------

FULL_LIMIT = 1200
WINDOW = 48


def fingerprint(items: list[tuple[int, int]]) -> str:
    """SHA-256 over each item's ordinal and record as little-endian u64s."""
    h = hashlib.sha256()
    for o, r in items:
        h.update(o.to_bytes(8, "little") + r.to_bytes(8, "little"))
    return h.hexdigest()


def build_case(name: str, cfg: C, seed: int) -> dict:
    try:
        config = Config(cfg.d)
    except ShuffleContainsMix as e:
        if not name.startswith("error-"):
            raise
        return {
            "name": name,
            "seq": cfg.d,
            "seed": seed,
            "error": "shuffle_contains_mix",
            "path": list(e.path),
        }
    if name.startswith("error-"):
        raise AssertionError(f"{name}: the oracle accepted a configuration it should refuse")
    items = config.evaluate(seed)
    if len(items) != len(config):
        raise AssertionError(f"{name}: materialised {len(items)} of {len(config)} positions")
    rng = random.Random(name)
    probes = [0, len(items) - 1] + [rng.randrange(len(items)) for _ in range(3)] if items else []
    for p in probes:  # the point evaluator agrees with brute force
        if config.point(p, seed) != items[p]:
            raise AssertionError(f"{name}: point({p}) disagrees with the brute-force order")
    case = {"name": name, "seq": cfg.d, "seed": seed, "len": len(items)}
    if len(items) <= FULL_LIMIT:
        case["order"] = [list(x) for x in items]
    else:
        n = len(items)
        starts = sorted(
            {0, n // 2 - WINDOW // 2, n - WINDOW, *(rng.randrange(n - WINDOW) for _ in range(3))}
        )
        case["sha256"] = fingerprint(items)
        case["windows"] = [
            {"start": s, "order": [list(x) for x in items[s : s + WINDOW]]} for s in starts
        ]
    return case


def check_published_fact(case: dict) -> None:
    order = case["order"]
    draws = [sum(1 for o, _ in order if o == s) for s in (0, 1)]
    first = next(i for i, (o, _) in enumerate(order) if o == 1)
    if len(order) != 1000 or draws != [750, 250] or not 374 <= first <= 377:
        raise AssertionError(f"published fact fails: {len(order)}, {draws}, {first}")


def crate_golden() -> list[tuple[str, C, int, int]]:
    """The crate's own golden orders at the seed's state (its ``tests/golden.rs``):
    ``(name, configuration, order seed, FNV-1a fingerprint)``; a source's id is its salt."""
    s = C.source
    return [
        ("shuffle", s(1000, 0).shuffle(7), 0, 13510848840803686825),
        ("shuffle, seeded order", s(1000, 0).shuffle(7), 42, 5734682759774056529),
        ("shuffle.repeat", s(777, 0).shuffle(1).repeat(3), 0, 2152343650903757428),
        (
            "shuffle(concat)",
            C.concat([s(300, 0), s(500, 1).shuffle(2)]).shuffle(3),
            0,
            1077492288285509245,
        ),
        ("slice of shuffle", s(5000, 0).shuffle(9).skip(100).take(2000), 0, 2420967535336859100),
        (
            "mix uniform",
            C.mix([s(1000, 0).shuffle(1), s(300, 1).shuffle(2), s(50, 2)]),
            0,
            11125969817394475988,
        ),
        (
            "mix scheduled",
            C.mix(
                [
                    (s(2000, 0).shuffle(1), U),
                    (s(400, 1).shuffle(2), ("delayed", 0.5)),
                    (s(600, 2), ("ramp", 0.2, 0.6)),
                ]
            ),
            0,
            3696955324159907089,
        ),
        (
            "nested mixes, epochs, shard",
            C.mix(
                [
                    C.mix([s(500, 0).shuffle(1).repeat(2), s(300, 1).shuffle(2).repeat(3)]),
                    s(900, 2).shuffle(3),
                ]
            )
            .skip(1)
            .step_by(4),
            0,
            905848074036688221,
        ),
        (
            "stride over mix",
            C.mix([s(1000, 0), s(999, 1).shuffle(4)]).skip(3).step_by(7),
            0,
            12216569398622504889,
        ),
        (
            "repeat of mix",
            C.mix([s(200, 0).shuffle(1), s(100, 1).shuffle(2)]).repeat(4),
            0,
            4113493865489899877,
        ),
        (
            "mix with explicit counts",
            C.mix([s(100, 0).shuffle(1).cycle_to(1800), s(5000, 1).shuffle(2).cycle_to(1200)]),
            0,
            16159320458550980399,
        ),
        ("nested repeats", s(100, 0).shuffle(3).repeat(3).repeat(2), 0, 5178620365869428389),
        (
            "cycle of a shuffled repeat",
            s(300, 0).shuffle(5).repeat(2).cycle_to(1000),
            0,
            5043228978147298754,
        ),
        (
            "mix fading",
            C.mix(
                [
                    (s(1500, 0).shuffle(1), U),
                    (s(300, 1).shuffle(2), ("until", 0.4)),
                    (s(400, 2), ("trapezoid", 0.2, 0.4, 0.6, 0.9)),
                ]
            ),
            0,
            16685696649537605013,
        ),
    ]


def fnv_fingerprint(config: Config, items: list[tuple[int, int]]) -> int:
    """The crate's golden fingerprint: FNV-1a over each item's source id and record."""
    ids = {o: 0 for o in range(config._ordinals)}
    for path, o in config.ordinal.items():
        ((_, body),) = _node_at(config.seq, path).items()
        ids[o] = body["salt"]
    data = b"".join(ids[o].to_bytes(8, "little") + r.to_bytes(8, "little") for o, r in items)
    return fnv1a(data)


def _node_at(node: dict, path: tuple) -> dict:
    for i in path:
        ((op, body),) = node.items()
        if op == "concat":
            node = body[i]
        elif op == "mix":
            node = body[i]["seq"]
        else:
            node = body["seq"]
    return node


def check_crate_golden() -> None:
    """The oracle reproduces every golden order of the crate itself."""
    for name, cfg, seed, expected in crate_golden():
        config = Config(cfg.d)
        got = fnv_fingerprint(config, config.evaluate(seed))
        if got != expected:
            raise AssertionError(
                f"crate golden {name!r}: fingerprint {got}, the crate has {expected}"
            )


def render() -> str:
    check_crate_golden()
    built = [build_case(*c) for c in cases()]
    check_published_fact(next(c for c in built if c["name"] == "published-mix"))
    lines = [json.dumps(c, separators=(",", ":")) for c in built]
    return "[\n" + ",\n".join(lines) + "\n]\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", action="store_true", help=f"write {FIXTURE.name}")
    mode.add_argument("--check", action="store_true", help="fail if the fixture is stale")
    args = parser.parse_args(argv)
    text = render()
    if args.write:
        FIXTURE.parent.mkdir(parents=True, exist_ok=True)
        FIXTURE.write_text(text, encoding="utf-8")
        print(f"wrote {FIXTURE} ({len(text)} bytes)")
        return 0
    current = FIXTURE.read_text(encoding="utf-8") if FIXTURE.exists() else ""
    if current != text:
        print(f"{FIXTURE} is stale: run tools/order_oracle.py --write", file=sys.stderr)
        return 1
    print(f"{FIXTURE} is up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
