"""The demo's last part: the ordering engine at work on a billion records.

Three named datasets (lengths only, no records on disk yet) are shuffled, mixed
with schedules, repeated for two epochs and sharded over four ranks; the demo
seeks deep into the order, walks it, checks that the ranks together see every
position exactly once, saves the configuration, and resumes from it. Every
figure printed is measured in this run. Outputs go to one folder.
"""

from __future__ import annotations

import os
import time

import numpy as np

from .._base import kernels
from ..order import Order, Schedule, Seq, salt
from ..order._warm import warm_up


class NamedDataset:
    """A dataset known by its name and length; its salt comes from the name."""

    def __init__(self, name: str, length: int) -> None:
        self.name = name
        self.length = length
        self.salt = salt(name)

    def __len__(self) -> int:
        return self.length

    def __repr__(self) -> str:
        return f"{self.name} ({self.length:,} records)"


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.2f} ms" if seconds < 1 else f"{seconds:.2f} s"


def build_config(sources: list[NamedDataset]) -> Seq:
    web, code, books = sources
    one_epoch = Seq.mix(
        [
            (Seq.source(web).shuffle(1), Schedule.uniform()),
            # code: twice over (reshuffled) and fading out at the end of each epoch
            (Seq.source(code).shuffle(2).cycle_to(2 * len(code)), Schedule.fade(0.6, 1.0)),
            # books: introduced after a tenth of each epoch, ramping up
            (Seq.source(books).shuffle(3), Schedule.ramp(0.1, 0.4)),
        ]
    )
    return one_epoch.repeat(2)


def orders_at_scale(out_dir: str) -> dict:
    """Seeks, walks, shards and resumes a 2,000,000,000-position order; the figures."""
    sources = [
        NamedDataset("web", 600_000_000),
        NamedDataset("code", 150_000_000),
        NamedDataset("books", 100_000_000),
    ]
    print("\n9. The same engine at a billion positions")
    if kernels.enabled():
        print(
            f"   path: compiled kernels (numba), loaded in {warm_up():.1f} s "
            "(compiled once per machine, then cached)"
        )
    else:
        print("   path: numpy (install the 'fast' extra for compiled kernels)")
    for s in sources:
        print(f"   source {s!r}, salt {s.salt:#018x}")

    seq = build_config(sources)
    t = time.perf_counter()
    order = Order(seq)
    t_build = time.perf_counter() - t
    n = len(order)
    print(
        f"\n   a. Order(mix of 3 scheduled parts, 2 epochs): {n:,} positions, built in "
        f"{_ms(t_build)}"
    )

    print("\n   b. Each source's share of the stream (the schedules at work):")
    print("   window starting at     web    code   books")
    windows = [0, n // 40, n // 8, n // 4, 3 * n // 8, 9 * n // 20, n // 2, 11 * n // 20]
    shares = []
    for w in windows:
        cur = order.cursor(w, min(w + 20_000, n))
        ords, _ = cur.next_block(20_000)
        frac = np.bincount(ords, minlength=3) / len(ords)
        shares.append((w, *frac.tolist()))
        print(f"   {w:>19,}   {frac[0]:5.1%}  {frac[1]:5.1%}  {frac[2]:5.1%}")

    print("\n   c. Seek anywhere, without replaying (epoch 2, deep inside):")
    for p in (1_234_567_890, n - 1):
        t = time.perf_counter()
        item = order[p]
        dt = time.perf_counter() - t
        source = order.sources[item.source_ordinal]
        assert isinstance(source, NamedDataset)
        print(
            f"   position {p:>13,} -> {source.name:<5} record "
            f"{item.record_index:>11,}   ({dt * 1e6:.0f} us)"
        )

    walk = 2_000_000
    cur = order.cursor(1_000_000_000)
    t = time.perf_counter()
    got = 0
    while got < walk:
        got += len(cur.next_block(min(1 << 16, walk - got))[0])
    dt = time.perf_counter() - t
    print(
        f"   walked {walk:,} positions from 1,000,000,000 in {_ms(dt)} "
        f"({walk / dt / 1e6:.1f} M positions/s)"
    )

    ranks = 4
    print(f"\n   d. Sharded over {ranks} ranks (shard(i, {ranks}): positions dealt round-robin):")
    start, span = 777_777_776, 40_000
    global_ords, global_recs = order.cursor(start, start + span).next_block(span)
    seen = np.zeros(span, dtype=bool)
    for r in range(ranks):
        shard = Order(seq.shard(r, ranks))
        first = start // ranks
        so, sr = shard.cursor(first, first + span // ranks).next_block(span // ranks)
        idx = np.arange(span // ranks) * ranks + r
        assert (global_ords[idx] == so).all() and (global_recs[idx] == sr).all()
        seen[idx] = True
        print(
            f"   rank {r}: {len(shard):,} positions; its {span // ranks:,} from {first:,} "
            f"match the global order"
        )
    print(f"   together: {int(seen.sum()):,} of {span:,} positions, each exactly once")

    print("\n   e. Resume: the configuration is data")
    config_path = os.path.join(out_dir, "billion-order.json")
    with open(config_path, "w", encoding="utf-8") as f:
        f.write(seq.to_json(indent=2))
    with open(config_path, encoding="utf-8") as f:
        resumed = Order(Seq.from_json(f.read(), sources))
    probe = np.random.default_rng(7).integers(0, n, 10_000)
    a = order.lookup(probe)
    b = resumed.lookup(probe)
    same = bool((a[0] == b[0]).all() and (a[1] == b[1]).all())
    print(
        f"   saved {config_path}; reloaded with the same sources: 10,000 random positions "
        f"{'identical' if same else 'DIFFER'}"
    )
    changed = [sources[0], NamedDataset("code", 150_000_001), sources[2]]
    try:
        Seq.from_json(seq.to_json(), changed)
        print("   a changed dataset was NOT detected")
    except ValueError as e:
        print(f"   a dataset that grew by one record is refused: {type(e).__name__}: {e}")

    with open(os.path.join(out_dir, "shares.csv"), "w", encoding="utf-8") as f:
        f.write("position,web,code,books\n")
        for w, *fr in shares:
            f.write(f"{w},{fr[0]:.4f},{fr[1]:.4f},{fr[2]:.4f}\n")
    return {
        "positions": n,
        "build_s": t_build,
        "walk_mps": walk / dt / 1e6,
        "resumed_identical": same,
    }
