"""Fuzz of an order block's arrays (``Cursor.next_block``): blocks' positions are written
into arrays of the cursor's again once nothing views them (``_base.recycle``), and so
are one source's ordinals (``order._nodes._ordinals``).

Random configurations of every node kind are walked by cursors with random block sizes
(0, 1, past the end, past the shared ranges of ``1 << 19``), interleaved with iteration,
``reset`` and ``last``. Each block is checked against the order's whole reference,
computed once before the walk and copied (no block, recycled or not, can touch it), and
some against a fresh cursor's block; some blocks, or views of them made in many ways
(slices, memoryviews, buffers, DLPack, torch tensors, containers), are held and checked
to keep their contents while later blocks are made. Writable blocks are sometimes
written into (the caller's to keep): no later block may see it. Deterministic seeds.
"""

from __future__ import annotations

import gc
import itertools
import pickle
import warnings
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pytest

import feedline as fl
from feedline.order import LengthSource

try:
    import torch
except ImportError:  # pragma: no cover - torch is an optional extra
    torch = None

# Past the ranges the shared iota and zeros cover (``1 << 19``): fresh arrays again.
BIG = (1 << 19) + 4321


# -- random configurations ---------------------------------------------------------------


def _schedule(rng: np.random.Generator) -> fl.Schedule:
    a, b = sorted(float(x) for x in rng.uniform(0.0, 1.0, 2))
    kind = int(rng.integers(5))
    if kind == 0:
        return fl.Schedule.uniform()
    if kind == 1:
        return fl.Schedule.delayed(min(a, 0.9))
    if kind == 2:
        a = min(a, 0.9)
        return fl.Schedule.ramp(a, max(b, a + 0.05))
    if kind == 3:
        return fl.Schedule.until(max(b, 0.1))
    b = max(b, 0.1)
    return fl.Schedule.fade(min(a, b - 0.02), b)


def _length(rng: np.random.Generator, budget: int) -> int:
    """Up to ``budget``: near it mostly, else log-uniform; rarely empty."""
    if rng.random() < 0.03:
        return 0
    if rng.random() < 0.7:
        return max(1, budget - int(rng.integers(0, 1 + budget // 8)))
    return max(1, round(budget ** rng.random()))


def _seq(
    rng: np.random.Generator, budget: int, depth: int, mix_ok: bool = True
) -> tuple[fl.Seq, int, bool]:
    """A random configuration of at most ``budget`` positions: (seq, length, has a mix)."""
    if depth <= 0 or budget < 4 or rng.random() < 0.2:
        n = _length(rng, budget)
        if rng.random() < 0.3:
            return fl.Seq.source(LengthSource(n, int(rng.integers(1, 1 << 62)))), n, False
        return fl.Seq.source(n), n, False
    ops = ["shuffle", "skip", "take", "repeat", "cycle_to", "step_by", "shard", "split"]
    ops += ["concat", "concat"] + (["mix", "mix"] if mix_ok else [])
    op = ops[int(rng.integers(len(ops)))]
    if op in ("concat", "mix"):
        k = int(rng.integers(2, 4))
        parts = [_seq(rng, budget // k, depth - 1, mix_ok) for _ in range(k)]
        n, has_mix = sum(p[1] for p in parts), any(p[2] for p in parts)
        if op == "concat":
            return fl.Seq.concat([p[0] for p in parts]), n, has_mix
        return fl.Seq.mix([(p[0], _schedule(rng)) for p in parts]), n, True
    if op == "repeat":
        t = int(rng.integers(0, 4))
        s, n, has_mix = _seq(rng, budget // max(t, 1), depth - 1, mix_ok)
        return s.repeat(t), n * t, has_mix
    if op == "cycle_to":
        s, n, has_mix = _seq(rng, max(budget // 3, 1), depth - 1, mix_ok)
        length = int(rng.integers(0, budget + 1)) if n else 0
        return s.cycle_to(length), length, has_mix
    s, n, has_mix = _seq(rng, budget, depth - 1, mix_ok and op != "shuffle")
    if op == "shuffle":
        return s.shuffle(int(rng.integers(0, 1 << 63))), n, has_mix
    if op in ("skip", "take"):
        c = int(rng.integers(0, n + 1)) if rng.random() < 0.5 else int(rng.integers(0, 9))
        c = min(c, n)
        return (s.skip(c), n - c, has_mix) if op == "skip" else (s.take(c), c, has_mix)
    if op == "step_by":
        step = int(rng.integers(1, 6))
        return s.step_by(step), len(range(0, n, step)), has_mix
    count = int(rng.integers(1, 5))
    i = int(rng.integers(0, count))
    if op == "shard":
        return s.shard(i, count), len(range(i, n, count)), has_mix
    return s.split(i, count), (i + 1) * n // count - i * n // count, has_mix


def _plain(rng: np.random.Generator, budget: int) -> tuple[fl.Seq, int]:
    """One source under wrappers that leave its records in the block's own positions
    array (a shuffle permutes it in place; a leading take, ``step_by(1)``, a one-child
    concat or mix... pass it on): the shapes whose blocks are the recycled arrays."""
    n = _length(rng, budget)
    s = fl.Seq.source(n if rng.random() < 0.7 else LengthSource(n, int(rng.integers(1, 99))))
    for _ in range(int(rng.integers(0, 4))):
        op = int(rng.integers(9))
        if op <= 2:
            s = s.shuffle(int(rng.integers(0, 1 << 63)))
        elif op == 3:
            n = int(rng.integers(0, n + 1))
            s = s.take(n) if rng.random() < 0.5 else s.cycle_to(n)
        elif op == 4:
            c = int(rng.integers(1, 4))
            s, n = s.split(0, c), n // c
        elif op == 5:
            s = s.step_by(1) if rng.random() < 0.5 else s.shard(0, 1)
        elif op == 6:
            s = s.repeat(1) if rng.random() < 0.5 else s.skip(0)
        else:
            s = fl.Seq.concat([s]) if op == 7 else fl.Seq.mix([s])
    return s, n


def _order(rng: np.random.Generator, budget: int) -> fl.Order:
    """A random order of at most ``budget`` positions, its length checked: a plain
    one (``_plain``) about half the time."""
    for _ in range(20):
        if rng.random() < 0.45:
            seq, n = _plain(rng, budget)
        else:
            seq, n, _ = _seq(rng, budget, depth=int(rng.integers(1, 5)))
        try:
            order = fl.Order(seq, seed=int(rng.integers(0, 1 << 64, dtype=np.uint64)))
        except fl.OrderError:  # pragma: no cover - a degenerate draw: draw again
            continue
        assert order.length == n, seq
        if rng.random() < 0.2:
            order = order.with_epoch(int(rng.integers(0, 5)))
        return order
    raise AssertionError("no valid configuration in 20 draws")


def _reference(order: fl.Order) -> tuple[np.ndarray, np.ndarray]:
    """The whole order, made by ``lookup`` (no cursor), copied at once."""
    o, r = order.lookup(np.arange(order.length, dtype=np.int64))
    o, r = np.array(o, dtype=np.int64, copy=True), np.array(r, dtype=np.int64, copy=True)
    if len(order.sources) == 1:  # independent of the shared zeros: a write into them shows
        assert not o.any()
    assert ((o >= 0) & (o < len(order.sources))).all()
    return o, r


# -- ways to hold a block ----------------------------------------------------------------

Held = tuple[str, Any, Callable[[Any], np.ndarray], np.ndarray]


def _cut(rng: np.random.Generator, m: int) -> tuple[int, int]:
    a = int(rng.integers(0, m + 1))
    return a, int(rng.integers(a, m + 1))


def _quiet(make: Callable[[], Any]) -> Any:
    """``make()`` without torch's warning about read-only arrays (the tensor is only read)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return make()


def _tensor_contents(t: Any) -> np.ndarray:
    return t.numpy().copy()


def _hold(rng: np.random.Generator, o: np.ndarray, r: np.ndarray) -> Held:
    """Something derived from the block ``(o, r)`` that keeps it (or part of it) viewed,
    with a function giving its contents as a fresh array, and those contents now."""
    m = len(r)
    a, b = _cut(rng, m)
    kinds: list[tuple[str, Callable[[], Any], Callable[[Any], np.ndarray]]] = [
        ("block", lambda: (o, r), lambda t: np.concatenate([t[0], t[1]])),
        ("records", lambda: r, np.array),
        ("ordinals", lambda: o, np.array),
        ("slice", lambda: r[a:b], np.array),
        ("ordinals slice", lambda: o[a:b], np.array),
        ("strided", lambda: r[:: int(rng.integers(1, 5))], np.array),
        ("reversed", lambda: r[::-1], np.array),
        ("uint64 view", lambda: r.view(np.uint64), np.array),
        ("column", lambda: r.reshape(-1, 1)[a:b], np.array),
        ("asarray", lambda: np.asarray(r), np.array),
        ("owner", lambda: r if r.base is None else r.base, np.array),
        ("ordinals owner", lambda: o if o.base is None else o.base, np.array),
        ("memoryview", lambda: memoryview(r), np.array),
        ("memoryview slice", lambda: memoryview(r)[a:b], np.array),
        ("buffer", lambda: np.frombuffer(memoryview(r), dtype=np.int64), np.array),
        ("np dlpack", lambda: np.from_dlpack(r[a:b]), np.array),
        ("list", lambda: [o[a:b], r[a:b]], lambda t: np.concatenate(t)),
        ("dict", lambda: {"o": o, "r": r[a:]}, lambda d: np.concatenate([d["o"], d["r"]])),
        ("nested", lambda: ((r[a:b],),), lambda t: np.array(t[0][0])),
    ]
    if m >= 2:
        window = np.lib.stride_tricks.sliding_window_view
        kinds.append(("windows", lambda: window(r, 2), np.array))
    if torch is not None:
        tensor = _tensor_contents
        kinds += [
            ("tensor", lambda: torch.from_numpy(r), tensor),
            ("tensor slice", lambda: torch.from_numpy(r)[a:b], tensor),
            ("tensor view", lambda: torch.from_numpy(r).view(-1, 1), tensor),
            ("torch dlpack", lambda: torch.from_dlpack(r), tensor),
            ("ordinals tensor", lambda: _quiet(lambda: torch.from_numpy(o)), tensor),
            (
                "tensors",
                lambda: (torch.from_numpy(r)[a:], torch.from_numpy(r)[:b]),
                lambda t: np.concatenate([tensor(t[0]), tensor(t[1])]),
            ),
        ]
    name, make, contents = kinds[int(rng.integers(len(kinds)))]
    obj = make()
    return name, obj, contents, np.array(contents(obj), copy=True)


def _check_held(held: list[Held]) -> None:
    for name, obj, contents, want in held:
        got = contents(obj)
        assert got.shape == want.shape and np.array_equal(got, want), f"a held {name} changed"


def _scribble(rng: np.random.Generator, o: np.ndarray, r: np.ndarray) -> None:
    """Write into the block's writable arrays, as their owner may."""
    if r.flags.writeable and len(r):
        r[int(rng.integers(len(r))) :] = -int(rng.integers(1, 1 << 40))
    if o.flags.writeable and len(o):
        o[: int(rng.integers(len(o))) + 1] = 1 << 33


# -- the walk ----------------------------------------------------------------------------


def _block_size(rng: np.random.Generator, left: int) -> int:
    c = rng.random()
    if c < 0.08:
        return 0
    if c < 0.16:
        return 1
    if c < 0.36:
        return int(rng.integers(2, 300))
    if c < 0.50:
        return int(rng.choice([4095, 4096, 4097, 1 << 16, (1 << 19) - 1, 1 << 19, BIG]))
    if c < 0.78:
        return int(rng.integers(1, max(left, 1) + 1))
    if c < 0.90:
        return left + int(rng.integers(0, 3))
    return int(rng.integers(left + 1, 1 << 40))


class Walker:
    """Cursors of one order, walked at random, their blocks checked and some held."""

    def __init__(
        self, rng: np.random.Generator, order: fl.Order, cursors: int, full_gc: bool = False
    ) -> None:
        self.rng, self.order, self.full_gc = rng, order, full_gc
        self.n = order.length
        self.ref = _reference(order)
        self.cursors = [self._cursor() for _ in range(cursors)]
        self.held: list[Held] = []
        self.blocks = 0

    def _range(self) -> tuple[int, int | None]:
        rng, n = self.rng, self.n
        start = 0 if rng.random() < 0.4 else int(rng.integers(0, n + 1))
        stop = None if rng.random() < 0.6 else int(rng.integers(start, n + 1))
        return start, stop

    def _cursor(self) -> fl.Cursor:
        return self.order.cursor(*self._range())

    def check_block(self, at: int, k: int, stop: int, o: np.ndarray, r: np.ndarray) -> None:
        m = max(0, min(k, stop - at))
        assert len(o) == len(r) == m, (at, k, stop)
        assert o.dtype == np.int64 and r.dtype == np.int64
        ro, rr = self.ref
        assert np.array_equal(o, ro[at : at + m]), f"ordinals of [{at}, {at + m})"
        assert np.array_equal(r, rr[at : at + m]), f"records of [{at}, {at + m})"

    def take(self, o: np.ndarray, r: np.ndarray) -> None:
        """What a caller does with a block: holds some of it, writes into some."""
        rng = self.rng
        if rng.random() < 0.1:
            _scribble(rng, o, r)
        if rng.random() < 0.5:
            self.held.append(_hold(rng, o, r))

    def drop_some(self) -> None:
        rng, held = self.rng, self.held
        while held and (len(held) > 12 or rng.random() < 0.25):
            _check_held([held.pop(int(rng.integers(len(held))))])
        if rng.random() < 0.1:
            # a full collection costs 0.1 s with torch imported: a few walks make them
            gc.collect() if self.full_gc and rng.random() < 0.3 else gc.collect(0)

    def step(self) -> None:
        rng = self.rng
        cur = self.cursors[int(rng.integers(len(self.cursors)))]
        at, stop = cur.offset, cur.stop
        c = rng.random()
        if c < 0.05:
            cur.reset(*self._range())
        elif c < 0.07:
            item = cur.last()
            assert (item is None) == (at >= stop)
            if item is not None:
                assert (item.source_ordinal, item.record_index) == (
                    self.ref[0][stop - 1],
                    self.ref[1][stop - 1],
                )
            assert len(cur) == 0
        elif c < 0.17:
            j = int(rng.choice([1, 2, 10, 4095, 4097, 6000]))
            got = [(i.source_ordinal, i.record_index) for i in itertools.islice(cur, j)]
            m = min(j, stop - at)
            want = list(zip(self.ref[0][at : at + m].tolist(), self.ref[1][at : at + m].tolist()))
            assert got == want and cur.offset == at + m
        else:
            k = _block_size(rng, stop - at)
            self.one_block(cur, at, k, stop)
        self.drop_some()

    def one_block(self, cur: fl.Cursor, at: int, k: int, stop: int) -> None:
        o, r = cur.next_block(k)
        assert cur.offset == at + len(r)
        self.check_block(at, k, stop, o, r)
        self.blocks += 1
        if self.rng.random() < 0.15 and len(r):
            # a fresh cursor's single block of the same positions, copied at once
            fo, fr = self.order.cursor(at).next_block(len(r))
            fo, fr = fo.copy(), fr.copy()
            assert np.array_equal(fo, o) and np.array_equal(fr, r)
        self.take(o, r)

    def finish(self) -> None:
        """Each cursor walks the whole order twice, holding some of the blocks of the
        first walk, none of the second's: what is held is checked in between."""
        for hold in (True, False):
            for cur in self.cursors:
                cur.reset(0)
                at = 0
                while at < self.n:
                    k = int(self.rng.integers(1, min(self.n // 2, 70_000) + 2))
                    o, r = cur.next_block(k)
                    self.check_block(at, k, self.n, o, r)
                    at += len(r)
                    if hold:
                        self.take(o, r)
                        self.drop_some()
                    del o, r
            _check_held(self.held)
            self.held.clear()
            gc.collect(0)


# (seed, largest order, steps): orders of 1 to 300k positions, a few past ``1 << 19``
CASES = [(s, b, 60) for s, b in itertools.product(range(10), [1, 7, 300, 5000])]
CASES += [(s, 300_000, 40) for s in range(100, 110)]
CASES += [(s, 700_000, 14) for s in range(200, 203)]


@pytest.mark.parametrize(("seed", "budget", "steps"), CASES)
def test_blocks_and_their_views_keep_their_contents(seed, budget, steps):
    rng = np.random.default_rng([seed, budget])
    walker = Walker(rng, _order(rng, budget), int(rng.integers(1, 4)), full_gc=seed % 5 == 0)
    for _ in range(steps):
        walker.step()
        if rng.random() < 0.3:
            _check_held(walker.held)
    walker.finish()


@pytest.mark.parametrize("seed", range(4))
def test_blocks_on_the_numpy_path(seed, numpy_path):
    rng = np.random.default_rng([seed, 77])
    walker = Walker(rng, _order(rng, 40_000), cursors=2)
    for _ in range(40):
        walker.step()
    walker.finish()


@pytest.mark.parametrize(
    "seq",
    [
        fl.Seq.source(9000),
        fl.Seq.source(9000).shuffle(4),
        fl.Seq.source(9000).skip(3),
        fl.Seq.source(9000).shuffle(4).repeat(3),
        fl.Seq.concat([fl.Seq.source(5000), fl.Seq.source(4000).shuffle(1)]),
        fl.Seq.mix([fl.Seq.source(5000).shuffle(2), fl.Seq.source(4000)]),
        fl.Seq.concat([fl.Seq.source(700 + i).skip(i % 3) for i in range(12)]).shuffle(5),
    ],
    ids=["identity", "shuffle", "offset", "repeat", "concat", "mix", "shards"],
)
@pytest.mark.parametrize("seed", range(3))
def test_every_block_held_or_dropped_in_turn(seq, seed):
    """One cursor, blocks held at random in every way and dropped in random order: the
    pattern that hands each array out again the soonest."""
    rng = np.random.default_rng([seed, 5])
    order = fl.Order(seq, seed=seed)
    walker = Walker(rng, order, cursors=1)
    cur = walker.cursors[0]
    cur.reset(0)
    at = 0
    while at < order.length:
        k = int(rng.choice([0, 1, 7, 100, 1000, 3000]))
        walker.one_block(cur, at, k, order.length)
        at = cur.offset
        walker.drop_some()
    walker.finish()


@pytest.mark.parametrize("seed", range(4))
def test_blocks_made_on_another_thread(seed):
    """As the loader's look-ahead makes them: the next block on a thread of its own while
    this one holds, views and drops the blocks before it."""
    rng = np.random.default_rng([seed, 31])
    walker = Walker(rng, _order(rng, 120_000), cursors=1)
    cur = walker.cursors[0]
    cur.reset(0)
    n, at = walker.n, 0
    with ThreadPoolExecutor(1) as pool:
        k = _block_size(rng, n)
        future = pool.submit(cur.next_block, k)
        while True:
            o, r = future.result()
            got_k, got_at = k, at
            at += len(r)
            if at < n:
                k = int(rng.integers(1, 20_000))
                future = pool.submit(cur.next_block, k)
            walker.check_block(got_at, got_k, n, o, r)
            walker.take(o, r)
            del o, r
            walker.drop_some()
            if at >= n:
                break
    walker.finish()


# -- ordinals and their consumers ----------------------------------------------------------


@pytest.mark.parametrize(
    ("seq", "k"),
    [
        (fl.Seq.source(3000), 1000),
        (fl.Seq.source(3000).shuffle(3), 1000),
        (fl.Seq.source(BIG + 9).shuffle(2), BIG),
        (fl.Seq.concat([fl.Seq.source(10), fl.Seq.source(3000)]), 1000),
        (fl.Seq.mix([fl.Seq.source(2000).shuffle(1), fl.Seq.source(1000)]), 1000),
        (fl.Seq.concat([fl.Seq.source(300 + i) for i in range(12)]).shuffle(3), 1000),
    ],
    ids=["identity", "shuffle", "past-shared", "concat", "mix", "shards"],
)
def test_ordinals_never_break_a_consumer(seq, k):
    order = fl.Order(seq, seed=9)
    ro, rr = _reference(order)
    cur = order.cursor(0)
    o, r = cur.next_block(k)
    assert np.array_equal(o, ro[:k]) and np.array_equal(r, rr[:k])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        one = np.add(o, 1)
        assert one.flags.writeable and np.array_equal(one, ro[:k] + 1)
        out = np.empty_like(o)
        np.add(o, r, out=out)
        assert np.array_equal(out, ro[:k] + rr[:k])
        assert np.array_equal(-o, -ro[:k]) and np.array_equal(o * 2 + r, ro[:k] * 2 + rr[:k])
        for made in (o.copy(), np.array(o), o.astype(np.int32), pickle.loads(pickle.dumps(o))):
            assert made.flags.writeable
            made[:] = 5
            made += 1
            assert (made == 6).all()
        assert o.tolist() == ro[:k].tolist()
        assert np.array_equal(np.concatenate([o, o]), np.concatenate([ro[:k], ro[:k]]))
        assert np.array_equal(np.bincount(o), np.bincount(ro[:k]))
        table = np.arange(len(order.sources)) * 10
        assert np.array_equal(table[o], table[ro[:k]]) and np.array_equal(
            np.sort(o), np.sort(ro[:k])
        )
        assert np.array_equal(np.unique(o), np.unique(ro[:k]))
        d = np.from_dlpack(o)
        assert d.flags.writeable == o.flags.writeable and np.array_equal(d, ro[:k])
        if torch is not None:
            from feedline.loader._batch import _tensor_on

            for t in (torch.from_numpy(o.copy()), torch.as_tensor(o.copy()), torch.tensor(o)):
                assert t.tolist() == ro[:k].tolist()
                t += 3
            # the loader's tensors: a copy of read-only ordinals (a writable array's
            # tensor is a view of it, the caller's)
            t = _tensor_on(o, "cpu")
            assert t.tolist() == ro[:k].tolist()
            if not o.flags.writeable:
                t += 3
    if not o.flags.writeable:
        writes: list[Callable[[], Any]] = [
            lambda: o.__setitem__(0, 1),
            lambda: o.__iadd__(1),
            lambda: np.add(o, 1, out=o),
            lambda: o.fill(3),
            lambda: o.sort(),
            lambda: np.copyto(o, 2),
            lambda: setattr(o.flags, "writeable", True),
        ]
        for write in writes:
            with pytest.raises(ValueError):
                write()
    assert np.array_equal(o, ro[:k]) and np.array_equal(r, rr[:k])
    # nothing the consumers did shows in later blocks, of this cursor or of a fresh one
    o2, r2 = cur.next_block(k)
    assert np.array_equal(o2, ro[k : 2 * k]) and np.array_equal(r2, rr[k : 2 * k])
    o3, r3 = order.cursor(0).next_block(k)
    assert np.array_equal(o3, ro[:k]) and np.array_equal(r3, rr[:k])
    assert np.array_equal(order.lookup(np.arange(k))[0], ro[:k])


@pytest.mark.skipif(torch is None, reason="torch is not installed")
def test_a_writable_tensor_of_a_blocks_ordinals_aliases_no_other_block():
    """``torch.from_dlpack`` gives a writable tensor whatever numpy's flag: its memory is
    no other block's, and a write into it shows in no later block of any order (the
    ordinals were once one read-only array of zeros shared by every order)."""
    cur = fl.Order(fl.Seq.source(1000).shuffle(1)).cursor(0)
    o, _ = cur.next_block(10)
    t = torch.from_dlpack(o)  # writable, no warning
    other, _ = fl.Order(fl.Seq.source(50)).cursor(0).next_block(5)
    lo = other.__array_interface__["data"][0]
    assert not (t.data_ptr() < lo + other.nbytes and lo < t.data_ptr() + t.numel() * 8)
    t.add_(7)
    assert other.tolist() == [0] * 5
    assert cur.next_block(10)[0].tolist() == [0] * 10
    assert fl.Order(fl.Seq.source(50)).cursor(0).next_block(5)[0].tolist() == [0] * 5
