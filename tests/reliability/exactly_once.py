"""Exactly once: random orders x shards x workers x resume points, and what each must give.

A case (``orders.cases``) is a random ordering configuration over small datasets whose
rows name themselves, plus loader options, shards and resume points. ``check_case``
runs it and asserts:

- every pass delivers each position of the order once, in batches of the expected
  sizes (drop_last, pad, even), and each row holds the record its batch says it holds;
- pass 0 is exactly the order (``fl.Order`` iterated item by item); with a plain
  dataset, exactly the records of the shard, in order when unshuffled;
- every pass holds the multiset of records an independent count model predicts, where
  the model can tell (shuffle, concat, mix, repeat, whole cycles);
- shards ``(i, k)`` for every ``i`` are disjoint and together are exactly the pass
  (round-robin positions of the shuffled order, for a plain dataset too: contract 2);
- a chain of resumes (``state_dict`` after a number of batches, through JSON, into a
  fresh loader) gives the uninterrupted stream, also for a shard;
- a checkpoint of all shards at one step, resumed by another number of ranks (elastic
  resume), finishes the pass with every record once;
- with 2 workers, the stream and its resumes are those of the loader in process.

Used by ``test_exactly_once.py`` (a few hundred cases) and ``benchmarks/reliability.py``
(thousands).
"""

from __future__ import annotations

import json
import os
from collections import Counter
from typing import Any

import numpy as np

import feedline as fl

from .orders import Case, cases

__all__ = ["Case", "cases", "check_case", "check_workers_case"]


# -- running a loader ------------------------------------------------------------------------


def snap(batch: Any, case: Case) -> tuple:
    """One batch as plain data, after checking that its rows are the records it names."""
    size, rows = batch.meta.size, len(batch)
    ords, recs, pos = batch.meta.source_ordinals, batch.meta.record_indices, batch.meta.positions
    assert batch.meta.mask.tolist() == [True] * size + [False] * (rows - size)
    assert (ords[size:] == -1).all() and (recs[size:] == -1).all() and (pos[size:] == -1).all()
    if size:
        assert pos[:size].tolist() == list(range(pos[0], pos[0] + size))
    ids = np.array(case.ids, np.int64)
    src, i, x = batch.src, batch.i, batch.x
    assert src.shape == (rows,) and i.shape == (rows,) and x.shape == (rows, 3)
    assert (src[:size] == ids[ords[:size]]).all(), "a row holds another dataset's record"
    assert (i[:size] == recs[:size]).all(), "a row holds another record than it names"
    want_x = np.stack([src[:size], i[:size], src[:size] * 1000 + i[:size]], axis=1)
    assert (x[:size] == want_x).all()
    assert not src[size:].any() and not i[size:].any() and not x[size:].any(), (
        "padding rows are not zero"
    )
    return (size, rows, pos[:size].tolist(), ords[:size].tolist(), recs[:size].tolist())


def run_passes(loader: fl.Loader, passes: int, case: Case) -> list[list[tuple]]:
    """``passes`` passes of ``loader``, each a list of batch snapshots."""
    out = []
    for _ in range(passes):
        out.append([snap(b, case) for b in loader])
    return out


def take(loader: fl.Loader, count: int | None, case: Case, limit: int) -> list[tuple]:
    """The next ``count`` batches (None: to the end of the stream of ``limit`` batches),
    crossing into later passes as a training loop's ``for`` loops would."""
    out: list[tuple] = []
    it = iter(loader)
    idle = 0
    while count is None or len(out) < count:
        if len(out) >= limit:
            break
        try:
            out.append(snap(next(it), case))
            idle = 0
        except StopIteration:
            idle += 1
            if idle > 2:  # passes of no batches
                break
            it = iter(loader)
    return out


def resumed_stream(
    case: Case,
    cuts: tuple[int, ...],
    total: int,
    *,
    shard: tuple[int, int] | None = None,
    workers: int = 0,
) -> list[tuple]:
    """The stream of ``total`` batches read by a chain of fresh loaders, each resumed
    from the previous one's state (through JSON) after the batches up to each cut."""
    got: list[tuple] = []
    state = None
    for cut in (*cuts, None):
        loader = case.loader(shard, workers)
        try:
            if state is not None:
                loader.load_state_dict(json.loads(json.dumps(state)))
            if workers:
                assert loader._workers_pool() is not None, "the workers were not used"
            want = None if cut is None else max(0, min(cut, total) - len(got))
            got += take(loader, want, case, total - len(got))
            state = loader.state_dict()
        finally:
            loader.close()
    return got


# -- the checks ---------------------------------------------------------------------------------


def expected_sizes(n_share: int, full: int, count: int, case: Case, sharded: bool) -> list[int]:
    """Real rows of each batch of a pass over ``n_share`` positions."""
    b = case.batch_size
    if sharded and case.even:  # every shard takes the steps of the longest one
        longest = -(-full // count)
        steps = (full // count) // b if case.tail == "drop_last" else -(-longest // b)
    else:
        steps = n_share // b if case.tail == "drop_last" else -(-n_share // b)
    return [max(0, min(b, n_share - s * b)) for s in range(steps)]


def check_pass(batches: list[tuple], sizes: list[int], case: Case, sharded: bool) -> None:
    b = case.batch_size
    assert [s[0] for s in batches] == sizes, "batches of unexpected sizes"
    padded = case.tail == "pad" or (sharded and case.even)
    assert [s[1] for s in batches] == [b if padded else s for s in sizes]
    positions = [p for s in batches for p in s[2]]
    assert positions == list(range(sum(sizes))), "positions lost, repeated or out of order"


def items(batches: list[tuple]) -> list[tuple[int, int]]:
    return [(o, r) for s in batches for o, r in zip(s[3], s[4])]


def check_counts(got: list[tuple[int, int]], case: Case) -> None:
    """The pass holds the records the count model predicts (when it can tell)."""
    if case.counts is None or case.tail == "drop_last":
        return
    want = Counter({(k, r): int(c) for k, v in case.counts.items() for r, c in enumerate(v) if c})
    assert Counter((case.ids[o], r) for o, r in got) == want, "a pass lost or repeated records"


def shard_length(case: Case, i: int, k: int) -> int:
    return max(0, -(-(case.length - i) // k))


def check_case(case: Case) -> dict[str, int]:
    """Run every check on ``case``; returns counts of what was compared."""
    stats = Counter()
    with case.loader() as loader:
        whole = run_passes(loader, case.passes, case)
        assert len(loader) == len(whole[0])
    sizes = expected_sizes(case.length, case.length, 1, case, False)
    for p in whole:
        check_pass(p, sizes, case, False)
        check_counts(items(p), case)
    got0 = items(whole[0])
    if case.plain is None:
        order = case.source() if case.as_order else fl.Order(case.seq, seed=case.seed or 0)
        assert order.length == case.length
        want0 = [(it.source_ordinal, it.record_index) for it in order]
        assert got0 == want0[: len(got0)], "pass 0 is not the order"
    else:
        recs = [r for _, r in got0]
        if case.tail != "drop_last":
            assert sorted(recs) == list(range(case.length))
        if case.seed is None or case.seed <= 0:
            assert recs == list(range(len(recs))), "an unshuffled pass is out of order"
    flat = [s for p in whole for s in p]
    stats["batches"] += len(flat)

    # A chain of resumes gives the uninterrupted stream.
    assert resumed_stream(case, case.cuts, len(flat)) == flat, "a resumed stream differs"
    stats["resumes"] += len(case.cuts)

    # Shards: disjoint, together exactly the pass, each resumable.
    k = case.shards
    seen: Counter = Counter()
    for i in range(k):
        with case.loader((i, k)) as loader:
            passes = run_passes(loader, case.passes, case)
        n_i = shard_length(case, i, k)
        sizes_i = expected_sizes(n_i, case.length, k, case, True)
        for e, p in enumerate(passes):
            check_pass(p, sizes_i, case, True)
            got = items(p)
            # round-robin: shard position j is position i + j*k (of a plain dataset's
            # shuffled order too: contract 2, shard deals; split is data.nu's slice)
            whole_items = items(whole[e])
            assert all(
                got[j] == whole_items[i + j * k]
                for j in range(len(got))
                if i + j * k < len(whole_items)
            ), "a shard is not its positions"
            seen.update((e, i + j * k) for j in range(len(got)))
        if i == case.resume_shard:
            flat_i = [s for p in passes for s in p]
            assert resumed_stream(case, (case.shard_cut,), len(flat_i), shard=(i, k)) == flat_i, (
                "a resumed shard differs"
            )
            stats["resumes"] += 1
        stats["shards"] += 1
    assert all(c == 1 for c in seen.values()), "shards overlap"
    if case.tail != "drop_last":
        assert set(seen) == {(e, p) for e in range(case.passes) for p in range(case.length)}, (
            "the shards do not cover the pass"
        )
    if case.tail != "drop_last":
        check_elastic(case, items(whole[0]))
        stats["elastic resumes"] += 1
    stats["cases"] += 1
    return dict(stats)


def check_elastic(case: Case, whole: list[tuple[int, int]]) -> None:
    """Every shard takes the same number of steps and saves (a checkpoint); another
    number of ranks loads that state and finishes the pass: every record of the pass
    once, before or after."""
    k, step = case.shards, case.elastic_step
    loaders = [case.loader((i, k)) for i in range(k)]
    step = min(step, *(len(loader) for loader in loaders))
    before, states = [], []
    for loader in loaders:
        with loader:
            it = iter(loader)
            for _ in range(step):
                before += items([snap(next(it), case)])
            states.append(json.loads(json.dumps(loader.state_dict())))
    assert all(s == states[0] for s in states), "ranks at one step saved different states"
    after = []
    for j in range(case.new_shards):
        with case.loader((j, case.new_shards)) as loader:
            loader.load_state_dict(states[0])
            after += items([snap(b, case) for b in loader])
    assert Counter(before + after) == Counter(whole), "an elastic resume lost or repeated"


def check_workers_case(case: Case) -> dict[str, int]:
    """With 2 workers: the stream of the loader in process, and its resumes."""
    shard = (case.resume_shard, case.shards) if case.seed is not None and case.seed % 2 else None
    with case.loader(shard) as loader:
        want = [s for p in run_passes(loader, case.passes, case) for s in p]
    with case.loader(shard, workers=case.workers) as loader:
        assert loader._workers_pool() is not None, "the workers were not used"
        segments = {s.name.lstrip("/") for s in loader._workers_pool().slots}
        got = [s for p in run_passes(loader, case.passes, case) for s in p]
    assert got == want, "workers changed the stream"
    assert resumed_stream(case, case.cuts, len(want), shard=shard, workers=case.workers) == want, (
        "a resumed stream with workers differs"
    )
    assert not segments & set(os.listdir("/dev/shm")), "shared memory left after close"
    return {
        "cases": 1,
        "batches": len(want),
        "resumes": len(case.cuts),
        "shards": int(shard is not None),
    }
