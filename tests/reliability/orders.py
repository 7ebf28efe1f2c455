"""Random cases for the exactly-once campaign: orders over self-naming datasets, loader
options, shards and resume points (a hypothesis strategy, ``cases``), and a count
model that says, without feedline, which records a pass holds when it can tell.

Every dataset's rows name themselves: ``src`` (the dataset), ``i`` (the row) and ``x``
(both again, as a vector).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from hypothesis import assume
from hypothesis import strategies as st

import feedline as fl

from . import maps

MAX_LEN = 300  # positions in a configuration (keeps a case at a few milliseconds)
SEEDS = st.integers(0, 2**64 - 1)
TAILS = ("keep", "drop_last", "pad")


def source_dataset(k: int, n: int, workers: bool) -> fl.Dataset:
    """Dataset ``k`` of ``n`` rows; each row names itself. Mapped (read in the workers)
    when the case runs with workers."""
    i = np.arange(n, dtype=np.int64)
    ds = fl.Dataset.from_arrays(
        name=f"s{k}",
        src=np.full(n, k, np.int64),
        i=i,
        x=np.stack([np.full(n, k), i, k * 1000 + i], axis=1).astype(np.float32).reshape(n, 3),
    )
    return ds.map(maps.identity) if workers else ds


# -- the count model: which records a pass holds, computed without feedline --------------

Counts = dict[int, np.ndarray] | None  # dataset -> how often each row appears in a pass


def _scaled(counts: Counts, factor: int) -> Counts:
    return None if counts is None else {k: v * factor for k, v in counts.items()}


def _summed(parts: list[Counts]) -> Counts:
    if any(p is None for p in parts):
        return None
    out: dict[int, np.ndarray] = {}
    for p in parts:
        out.update(p)  # every dataset is a leaf of one part only
    return out


@dataclass
class Node:
    seq: fl.Seq
    length: int
    counts: Counts
    has_mix: bool


@st.composite
def schedules(draw) -> fl.Schedule:
    kind = draw(st.sampled_from(["uniform", "delayed", "ramp", "until", "fade", "trapezoid"]))
    s, f, d, o = sorted(p / 20 for p in draw(st.lists(st.integers(0, 20), min_size=4, max_size=4)))
    if kind == "uniform":
        return fl.Schedule.uniform()
    if kind == "delayed":
        return fl.Schedule.delayed(min(s, 0.95))
    if kind == "ramp":
        return fl.Schedule.ramp(min(s, 0.95), max(f, min(s, 0.95)))
    if kind == "until":
        return fl.Schedule.until(max(o, 0.05))
    if kind == "fade":
        return fl.Schedule.fade(d, max(o, d, 0.05))
    if s == o:
        s, f, d, o = (s, s, 1.0, 1.0) if o < 1 else (0.0, 0.0, 1.0, 1.0)
    return fl.Schedule.trapezoid(s, f, d, o)


def _node(draw, depth: int, leaves: list[fl.Dataset], workers: bool) -> Node:
    if depth == 0 or len(leaves) >= 6 or draw(st.integers(0, 3)) == 0:
        n = 0 if draw(st.integers(0, 9)) == 9 else draw(st.integers(1, 40))
        k = len(leaves)
        ds = source_dataset(k, n, workers)
        leaves.append(ds)
        seq = fl.Seq.source(ds)
        if draw(st.booleans()):
            seq = seq.shuffle(draw(SEEDS))
        return Node(seq, n, {k: np.ones(n, np.int64)}, False)
    op = draw(
        st.sampled_from(
            ["shuffle", "concat", "mix", "mix", "repeat", "cycle_to", "take", "skip", "step_by"]
        )
    )
    if op in ("concat", "mix"):
        parts = [_node(draw, depth - 1, leaves, workers) for _ in range(draw(st.integers(1, 3)))]
        length = sum(p.length for p in parts)
        if length > MAX_LEN:  # too long: keep the first part alone
            return parts[0]
        counts = _summed([p.counts for p in parts])
        if op == "concat":
            seq = fl.Seq.concat([p.seq for p in parts])
        else:
            seq = fl.Seq.mix([(p.seq, draw(schedules())) for p in parts])
        return Node(seq, length, counts, op == "mix" or any(p.has_mix for p in parts))
    child = _node(draw, depth - 1, leaves, workers)
    n = child.length
    if op == "shuffle" and child.has_mix:  # a shuffle may not hold a mix
        op = "take"
    if op == "shuffle":
        return Node(child.seq.shuffle(draw(SEEDS)), n, child.counts, False)
    if op == "repeat":
        t = draw(st.integers(1, max(1, min(3, MAX_LEN // max(n, 1)))))
        return Node(child.seq.repeat(t), n * t, _scaled(child.counts, t), child.has_mix)
    if op == "cycle_to":
        if n == 0:  # cycling an empty sequence to a positive length is an error
            return Node(child.seq.cycle_to(0), 0, _scaled(child.counts, 0), child.has_mix)
        length = draw(
            st.one_of(
                st.integers(0, min(2 * n, MAX_LEN)),
                st.sampled_from([n * m for m in (1, 2, 3) if n * m <= MAX_LEN]),
            )
        )
        counts = _scaled(child.counts, length // n) if length % n == 0 else None
        return Node(child.seq.cycle_to(length), length, counts, child.has_mix)
    if op in ("take", "skip"):
        m = draw(st.integers(0, n))
        kept = m if op == "take" else n - m
        if kept == n:  # the child unchanged
            counts = child.counts
        elif kept == 0:
            counts = _scaled(child.counts, 0)
        else:  # which records remain depends on the order
            counts = None
        seq = child.seq.take(m) if op == "take" else child.seq.skip(m)
        return Node(seq, kept, counts, child.has_mix)
    step = draw(st.integers(1, 3))
    counts = child.counts if step == 1 or n <= 1 else None
    return Node(child.seq.step_by(step), -(-n // step), counts, child.has_mix)


@dataclass
class Case:
    """One configuration and what to do with it."""

    plain: fl.Dataset | None  # a plain dataset (data.nu's loader), else an order:
    seq: fl.Seq | None
    as_order: bool  # hand the loader an fl.Order rather than the Seq
    length: int  # positions of a pass (unsharded)
    counts: Counts
    ids: list[int] = field(repr=False)  # the ``src`` of each source ordinal's rows
    batch_size: int = 1
    seed: int | None = None
    tail: str = "keep"
    even: bool = False
    passes: int = 1
    cuts: tuple[int, ...] = ()  # resume points: batches delivered, across passes
    shards: int = 1  # shards (i, shards) for every i
    resume_shard: int = 0  # the shard resumed at shard_cut
    shard_cut: int = 0
    new_shards: int = 1  # ranks that resume a checkpoint of all shards (elastic resume)
    elastic_step: int = 0  # the step of that checkpoint
    workers: int = 0

    def options(self, shard: tuple[int, int] | None) -> dict[str, Any]:
        opts: dict[str, Any] = {"seed": self.seed, "shard": shard}
        if self.tail != "keep":
            opts[self.tail] = True
        if shard is not None and self.even:
            opts["even"] = True
        return opts

    def source(self) -> Any:
        if self.plain is not None:
            return self.plain
        return fl.Order(self.seq, seed=self.seed or 0) if self.as_order else self.seq

    def loader(self, shard: tuple[int, int] | None = None, workers: int = 0) -> fl.Loader:
        opts = self.options(shard)
        if self.as_order and self.plain is None:
            opts["seed"] = None  # the Order carries it
        return fl.Loader(self.source(), self.batch_size, workers=workers, prefetch=2, **opts)


@st.composite
def cases(draw, workers: int = 0) -> Case:
    """A random case; ``workers`` > 0 maps the datasets so the workers read them."""
    mapped = workers > 0
    plain = draw(st.integers(0, 4)) == 0
    if plain:
        n = 0 if draw(st.integers(0, 19)) == 19 else draw(st.integers(1, 200))
        ds = source_dataset(0, n, mapped)
        seq, as_order, counts, ids = None, False, {0: np.ones(n, np.int64)}, [0]
        seed = draw(st.one_of(st.none(), st.integers(-3, 0), st.integers(1, 2**63 - 1)))
    else:
        node = _node(draw, draw(st.integers(1, 3)), [], mapped)
        ds, seq, n, counts = None, node.seq, node.length, node.counts
        ids = [int(src.name[1:]) for src in seq.sources()]  # dataset k is named f"s{k}"
        as_order = draw(st.integers(0, 5)) == 0
        seed = draw(st.one_of(st.none(), SEEDS))
    if mapped:  # worker cases are few: none of them trivial
        assume(n >= 16)
    b = draw(st.one_of(st.integers(1, 8), st.integers(1, 64)))
    tail = draw(st.sampled_from(TAILS))
    passes = draw(st.integers(1, 2))
    shards = draw(st.integers(2, 4))
    even = draw(st.booleans())
    # Resume points anywhere in the stream, its ends included (estimated from the
    # unsharded length; points past the end resume an exhausted loader).
    steps = n // b if tail == "drop_last" else -(-n // b)
    cuts = tuple(
        sorted(
            draw(
                st.lists(
                    st.integers(0, steps * passes + 1), min_size=1, max_size=1 if mapped else 3
                )
            )
        )
    )
    resume_shard = draw(st.integers(0, shards - 1))
    shard_cut = draw(st.integers(0, -(-steps // shards) * passes + 1))
    new_shards = draw(st.integers(1, 5))
    elastic_step = draw(st.integers(0, -(-steps // shards) + 1))
    return Case(
        ds,
        seq,
        as_order,
        n,
        counts,
        ids,
        b,
        seed,
        tail,
        even,
        passes,
        cuts,
        shards,
        resume_shard,
        shard_cut,
        new_shards,
        elastic_step,
        workers,
    )
