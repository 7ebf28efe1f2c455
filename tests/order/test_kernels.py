"""The compiled kernels and the numpy path give the same orders, bit for bit."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import feedline as fl
from feedline._base import kernels as _kernels
from feedline._base import ordering
from feedline.order._warm import warm_up

from .test_oracle import CASES, build

ROOT = Path(__file__).resolve().parents[2]


def _assert_same(a, b) -> None:
    """Nested tuples and lists of arrays (or values), equal item for item."""
    if isinstance(a, (tuple, list)):
        assert isinstance(b, (tuple, list)) and len(a) == len(b)
        for x, y in zip(a, b):
            _assert_same(x, y)
    else:
        np.testing.assert_array_equal(a, b)


def _both_paths(monkeypatch: pytest.MonkeyPatch, f):
    """``f()`` on the compiled path (numba's kernels), then on the numpy path, both with
    C's order loops off (``FEEDLINE_NATIVE=0``); where they are built, C's loops give
    the numpy path's results too (checked here)."""
    monkeypatch.setenv("FEEDLINE_NATIVE", "0")
    try:
        compiled = f()
        monkeypatch.setitem(_kernels._state, "k", None)
        plain = f()
        if ordering.available():
            monkeypatch.setenv("FEEDLINE_NATIVE", "1")
            _assert_same(f(), plain)
    finally:
        monkeypatch.undo()
    return compiled, plain


def _walk(order: fl.Order, start: int, sizes: list[int]) -> tuple[np.ndarray, np.ndarray]:
    cur = order.cursor(start)
    blocks = [cur.next_block(k) for k in sizes]
    return np.concatenate([b[0] for b in blocks]), np.concatenate([b[1] for b in blocks])


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_every_oracle_case_is_identical_on_both_paths(case, compiled_path, monkeypatch):
    order = fl.Order(build(case["seq"])).with_seed(case["seed"])
    n = len(order)
    rng = np.random.default_rng(1)
    probe = rng.integers(0, max(n, 1), 300) if n else np.zeros(0, dtype=np.int64)
    start = int(rng.integers(0, n)) if n else 0

    def run():
        return order.lookup(probe), _walk(order, start, [1, 7, 300, 4096])

    (a_lookup, a_walk), (b_lookup, b_walk) = _both_paths(monkeypatch, run)
    for x, y in zip((*a_lookup, *a_walk), (*b_lookup, *b_walk)):
        np.testing.assert_array_equal(x, y)


def _big_configs() -> list[fl.Seq]:
    parts = []
    for i in range(40):
        s = fl.Seq.source(10_000 + 37 * i).shuffle(i)
        if i % 5 == 0:
            parts.append((s, fl.Schedule.trapezoid(0.05 * (i % 4), 0.3, 0.6, 0.95)))
        elif i % 7 == 0:
            parts.append((s.repeat(2), fl.Schedule.ramp(0.2, 0.5)))
        else:
            parts.append(s)
    scheduled = fl.Seq.mix(parts)
    return [
        scheduled,
        scheduled.repeat(3),
        scheduled.shard(2, 5),
        fl.Seq.mix([fl.Seq.source(3 * 10**6).shuffle(1), fl.Seq.source(10**6)]).repeat(2),
        fl.Seq.source(10**9).shuffle(5).repeat(3),
        fl.Seq.concat([fl.Seq.source(1000).shuffle(1), scheduled]).repeat(2),
        fl.Seq.concat([fl.Seq.source(10**6).shuffle(1).repeat(3), fl.Seq.source(77_777)])
        .repeat(2)
        .shuffle(9),
    ]


@pytest.mark.parametrize("index", range(7))
def test_large_orders_are_identical_on_both_paths(index, compiled_path, monkeypatch):
    order = fl.Order(_big_configs()[index])
    n = len(order)
    rng = np.random.default_rng(index)
    probe = rng.integers(0, n, 2000)
    starts = [0, n // 3, n - 5000]

    def run():
        walks = [_walk(order, s, [64, 1, 5000 - 65]) for s in starts]
        return order.lookup(probe), walks

    (a_lookup, a_walks), (b_lookup, b_walks) = _both_paths(monkeypatch, run)
    np.testing.assert_array_equal(a_lookup[0], b_lookup[0])
    np.testing.assert_array_equal(a_lookup[1], b_lookup[1])
    for (ao, ar), (bo, br) in zip(a_walks, b_walks):
        np.testing.assert_array_equal(ao, bo)
        np.testing.assert_array_equal(ar, br)


def test_seeks_agree_with_walks_in_a_thousand_part_scheduled_mix(compiled_path):
    parts = [
        (fl.Seq.source(500 + i).shuffle(i), fl.Schedule.ramp(0.3, 0.6))
        if i % 5 == 0
        else fl.Seq.source(500 + i).shuffle(i)
        for i in range(1000)
    ]
    order = fl.Order(fl.Seq.mix(parts))
    n = len(order)
    start = n // 2 - 10_000
    ords, recs = _walk(order, start, [20_000])
    for k in (0, 1, 9_999, 10_000, 19_999):
        item = order[start + k]
        assert (item.source_ordinal, item.record_index) == (ords[k], recs[k])


def test_compiled_kernels_are_cached_on_disk(compiled_path):
    warm_up()
    cache_dir = Path(_kernels.get().__file__).parent / "__pycache__"
    cached = {p.name.split(".")[1].split("-")[0] for p in cache_dir.glob("_jit.*.nbi")}
    assert {"permute_block", "counts", "walk", "merge_block", "locate_flat"} <= cached


def test_the_numpy_path_is_used_when_kernels_are_off(numpy_path):
    assert not _kernels.enabled()
    order = fl.Order(fl.Seq.source(1000).shuffle(7))
    assert [order[k].record_index for k in range(6)] == [629, 114, 228, 812, 639, 604]


def test_fixture_path_is_the_oracles():
    assert json.loads((ROOT / "tests" / "fixtures" / "order_oracle.json").read_text())


def test_a_fork_while_the_kernels_load_waits_for_them_so_the_child_can_import(compiled_path):
    # A fresh interpreter starts loading numba on a thread and forks at once, as a torch
    # DataLoader forking its workers after a first feedline batch would. The child must
    # not inherit an import lock held by a thread it does not have.
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent("""
        import os, sys
        from feedline._base import kernels as _kernels
        _kernels.load_in_background()
        pid = os.fork()
        if pid == 0:
            import numba  # hangs if the parent's loading thread held numba's import lock
            os._exit(0 if _kernels.get() is not None else 3)
        _, status = os.waitpid(pid, 0)
        sys.exit(os.waitstatus_to_exitcode(status))
    """)
    # A liveness bound, not a timing: a deadlocked child never returns.
    done = subprocess.run([sys.executable, "-c", code], timeout=120, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]


def _few_part_mixes() -> list[fl.Seq]:
    """Mixes of a few sources and shuffles of sources: on the numpy path each part is
    located at once with its own keys, and scheduled keys are found part by part."""
    a, b, c = (fl.Seq.source(n) for n in (300_000, 170_001, 5))
    return [
        fl.Seq.mix([a.shuffle(1), b.shuffle(2)]),
        fl.Seq.mix([a, b.shuffle(2), c]),
        fl.Seq.mix([a.shuffle(1), (b.shuffle(2), fl.Schedule.delayed(0.4))]),
        fl.Seq.mix(
            [
                (a.shuffle(3), fl.Schedule.ramp(0.1, 0.7)),
                (b, fl.Schedule.trapezoid(0.0, 0.2, 0.5, 0.9)),
                (c.shuffle(4), fl.Schedule.until(0.3)),
            ]
        ),
        fl.Seq.mix([a.shuffle(1), b.shuffle(2)]).repeat(3).shard(1, 3),
    ]


@pytest.mark.parametrize("index", range(5))
def test_a_few_part_mix_is_identical_on_both_paths(index, compiled_path, monkeypatch):
    order = fl.Order(_few_part_mixes()[index]).with_seed(7)
    n = len(order)
    probe = np.random.default_rng(index).integers(0, n, 3000)

    def run():
        walks = [_walk(order, s, [1, 4095, 1 << 16]) for s in (0, n // 2, n - 70_000)]
        return order.lookup(probe), walks

    (a_lookup, a_walks), (b_lookup, b_walks) = _both_paths(monkeypatch, run)
    for x, y in zip(a_lookup, b_lookup):
        np.testing.assert_array_equal(x, y)
    for (ao, ar), (bo, br) in zip(a_walks, b_walks):
        np.testing.assert_array_equal(ao, bo)
        np.testing.assert_array_equal(ar, br)


_FRESH_MIX = """
import sys
import numpy as np
import feedline as fl
from feedline._base import kernels
from feedline.order import _mixplan, _nodes
_nodes._LOAD_AFTER = _mixplan._C_LOAD_AFTER = {load_after}
a = fl.Dataset.from_arrays(x=np.arange(40_000.0))
b = fl.Dataset(a.record, {{"x": -np.arange(30_000.0)}})
second = b.shuffle(2) if {uniform} else (b.shuffle(2), fl.Schedule.delayed(0.5))
parts = [a.shuffle(1), second]
if {many}:  # more parts than the numpy path serves part by part: the kernels pay
    pieces = np.array_split(np.arange(40_000.0), {many})  # a's rows in {many} pieces
    parts = [fl.Dataset(a.record, {{"x": x}}).shuffle(k) for k, x in enumerate(pieces)]
    parts.append(b.shuffle(2))
total = 0.0
for batch in fl.Loader(fl.Seq.mix(parts), 256, seed=3):
    total += float(np.abs(batch.x).sum())
started = "loading" in kernels._state or "k" in kernels._state
print(total, started, "numba" in sys.modules)
"""


@pytest.mark.parametrize(
    "uniform, many, load_after, native, loads",
    [
        (True, 0, 1 << 40, False, False),
        (False, 0, 1 << 40, False, False),
        (True, 0, 1000, False, True),
        (True, 20, 1 << 40, False, True),
        (True, 0, 1 << 40, True, False),
        (False, 0, 1 << 40, True, False),
        (True, 0, 1000, True, False),
        (True, 20, 1 << 40, True, False),
        (True, 200, 1 << 40, True, False),
        (True, 200, 1000, True, True),
        (True, 1100, 1 << 40, True, True),
    ],
    ids=[
        "uniform",
        "delayed",
        "long-run",
        "many-parts",
        "uniform-c",
        "delayed-c",
        "long-run-c",
        "many-parts-c",
        "hundreds-of-small-parts-c",
        "hundreds-long-run-c",
        "more-parts-than-c-serves",
    ],
)
def test_a_fresh_process_loads_the_kernels_for_a_mix_only_where_they_pay(
    uniform, many, load_after, native, loads, compiled_path
):
    # A few parts merge on the numpy path at nearly the kernels' speed: a fresh process's
    # first pass does not pay numba's import, until the numpy path has located more
    # positions than loading it costs; a mix of many parts loads them in the background.
    # Where C walks and locates a mix (``ordering``: up to 64 flat parts, or 1,024 with
    # small tables; 0.8 - 1.2x the kernels' speed), no run is long enough to load them
    # (the numpy path locates nothing); past that, they load.
    if native and not ordering.available():
        pytest.skip("the C order loops are not built")
    code = _FRESH_MIX.format(load_after=load_after, uniform=uniform, many=many)
    env = {**os.environ, "FEEDLINE_NATIVE": "1" if native else "0"}
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
        env=env,
    )
    total, started, numba_imported = done.stdout.split()
    assert float(total) == float(np.arange(40_000.0).sum() + np.arange(30_000.0).sum())
    assert started == str(loads)  # the kernels' loading started (in the background)
    if not loads:
        assert numba_imported == "False"


@pytest.mark.parametrize("parts", [65, 300])
def test_a_many_part_mix_is_identical_on_both_paths_and_in_c(parts, compiled_path, monkeypatch):
    # past C's heap (64 parts): the kernels' merge, numpy's path, and C's heap with C's
    # locate (as while the kernels load) give one order
    rng = np.random.default_rng(parts)
    lengths = rng.integers(1, 3_000, parts).tolist()
    scheds = [fl.Schedule.delayed(0.3), fl.Schedule.ramp(0.1, 0.6), None]
    seqs = []
    for i, n in enumerate(lengths):
        s = fl.Seq.source(n).shuffle(i) if i % 3 else fl.Seq.source(n)
        sched = scheds[i % 7] if i % 7 < len(scheds) else None
        seqs.append(s if sched is None else (s, sched))
    order = fl.Order(fl.Seq.mix(seqs)).with_seed(5)
    n = len(order)
    probe = rng.integers(0, n, 5000)

    def run():
        walks = [_walk(order, s, [1, 4095, 1 << 16]) for s in (0, n // 3)]
        return order.lookup(probe), walks

    _assert_same(*_both_paths(monkeypatch, run))


def test_c_locates_many_parts_only_where_their_tables_are_small():
    from feedline.order import _mixlocate

    def shuffles(k, n):
        return [(i, fl.Order(fl.Seq.source(n).shuffle(i))._root) for i in range(k)]

    assert _mixlocate.c_locates(64, [])  # sources only, or 64 parts of any size
    assert _mixlocate.c_locates(1024, [])
    assert not _mixlocate.c_locates(1025, [])
    few = [(i, sh) for i, sh in shuffles(1, 4_000)] * 1024
    big = [(i, sh) for i, sh in shuffles(1, 10_000_000)] * 200
    assert _mixlocate.c_locates(1024, few)  # 1,024 parts of 4,000 rows: small tables
    assert not _mixlocate.c_locates(200, big)  # 200 of 10,000,000: 4.9M entries
    # a plan (any of its parts may be shuffled) loads the kernels where C does not serve
    assert _mixlocate.c_locates_any([4_000] * 1024)
    assert not _mixlocate.c_locates_any([10_000_000] * 200)
    assert not _mixlocate.c_locates_any([10] * 1025)
    assert _mixlocate.c_locates_any([10_000_000] * 64)
    from feedline.order._mixplan import MixPlan

    for lengths, loads in (([4_000] * 1024, False), ([10_000_000] * 200, True), ([9] * 17, False)):
        plan = MixPlan(lengths, [fl.Schedule.uniform()] * len(lengths))
        # without the C loops, every mix of more than 16 parts loads them
        assert plan.load_kernels is (loads if ordering.available() else len(lengths) > 16)


_FRESH_SEEKS = """
import numpy as np
import feedline as fl
from feedline._base import kernels
parts = [fl.Seq.source(3_000).shuffle(i) for i in range({parts})]
order = fl.Order(fl.Seq.mix(parts)).with_seed(3)
rng = np.random.default_rng(0)
with kernels.deferred():  # as a loader reads its order: never waiting for the kernels
    for _ in range(3):
        starts = rng.integers(0, len(order) - 512, 4)
        order.lookup(np.concatenate([np.arange(s, s + 512) for s in starts]))
print("loading" in kernels._state or "k" in kernels._state)
"""


@pytest.mark.parametrize("parts, loads", [(10, False), (20, True), (200, True)])
def test_a_mix_c_serves_loads_the_kernels_for_its_seeks_past_c_heaps_parts(
    parts, loads, compiled_path
):
    # C walks and locates a mix of 20 or 200 small parts without the kernels, but has no
    # seek: its lookups of scattered runs count each part's elements below a key (the
    # plan's counts), 20 - 45x slower on numpy's path at 256 - 1,024 parts; they load the
    # kernels in the background. A few parts (10) seek on numpy's path.
    if not ordering.available():
        pytest.skip("the C order loops are not built")
    code = _FRESH_SEEKS.format(parts=parts)
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True
    )
    assert done.stdout.split() == [str(loads)]
