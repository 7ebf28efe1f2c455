"""The ordering benchmarks: feedline's figures beside baselines run in the same process.

``feedline bench`` (or ``python benchmarks/order.py``) runs them; ``--quick`` uses
small sizes for a smoke test. Each line prints feedline's figure and a baseline
measured in the same run, so a ratio is meaningful on whatever machine runs it.
Peak memory is measured in a child process (``ru_maxrss`` against an idle one).
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from collections.abc import Callable

import numpy as np

from .._base import kernels
from ..order import Order, Schedule, Seq
from ..order._nodes import Mix, Shuffle
from ..order._warm import warm_up

BLOCK = 1 << 16


def _best(f: Callable[[], object], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        f()
        best = min(best, time.perf_counter() - t)
    return best


def _mix64(z: np.ndarray) -> np.ndarray:
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def _naive_feistel(n: int, rk: list[int], idx: np.ndarray) -> np.ndarray:
    """The baseline: the same six-round Feistel with cycle walking, written plainly in
    numpy (whole arrays, fresh temporaries), as one would without tuning."""
    bits = max(n - 1, 0).bit_length()
    lb, rb = bits // 2, bits - bits // 2
    masks = (np.uint64((1 << lb) - 1), np.uint64((1 << rb) - 1))
    x = idx.astype(np.uint64)
    todo = np.arange(len(x))
    while len(todo):
        v = x[todo]
        left, right = v >> np.uint64(rb), v & masks[1]
        for i in range(6):
            left, right = right, (left ^ _mix64(right + np.uint64(rk[i]))) & masks[i % 2]
        v = (left << np.uint64(rb)) | right
        x[todo] = v
        todo = todo[v >= np.uint64(n)]
    return x


def _line(name: str, ours: str, base: str = "") -> None:
    print(f"  {name:<44} {ours:>18}   {base}")


def bench_shuffle(n: int, repeat: int) -> dict:
    rng = np.random.default_rng(0)
    order = Order(Seq.source(n).shuffle(42))
    pos = rng.integers(0, n, BLOCK)
    order.lookup(pos)
    t = _best(lambda: order.lookup(pos), repeat * 4)
    lookup = BLOCK / t / 1e6
    cur = order.cursor(n // 2)
    cur.next_block(BLOCK)
    walk = BLOCK / _best(lambda: cur.next_block(BLOCK), repeat * 4) / 1e6
    seeks = rng.integers(0, n, 2000)
    t0 = time.perf_counter()
    for p in seeks:
        order.get(int(p))
    seek_us = (time.perf_counter() - t0) / len(seeks) * 1e6
    root = order.root
    assert isinstance(root, Shuffle)  # a shuffled source compiles to its shuffle
    rk = [int(k) for k in root.keys(order.seed, order.epoch)]
    expected = order.lookup(pos[:1000])[1]
    assert (_naive_feistel(n, rk, pos[:1000]).astype(np.int64) == expected).all()
    naive = BLOCK / _best(lambda: _naive_feistel(n, rk, pos), repeat) / 1e6
    m = min(n, 10**8 if repeat > 3 else 10**6)
    t0 = time.perf_counter()
    perm = np.random.default_rng(1).permutation(m)
    perm_s = time.perf_counter() - t0
    perm_mb = perm.nbytes / 2**20
    del perm
    print(f"shuffle of {n:,} records")
    _line(
        "lookup, blocks of 64k random positions",
        f"{lookup:8.1f} M/s",
        f"plain numpy Feistel (same function) {naive:.1f} M/s",
    )
    _line("walk (cursor blocks of 64k)", f"{walk:8.1f} M/s")
    _line(
        "seek (get one random position)",
        f"{seek_us:8.1f} us",
        f"numpy.random.permutation({m:,}): {perm_s:.2f} s, {perm_mb:,.0f} MB",
    )
    return {
        "lookup_mps": lookup,
        "walk_mps": walk,
        "seek_us": seek_us,
        "naive_feistel_mps": naive,
        "permutation_s": perm_s,
        "permutation_mb": perm_mb,
        "permutation_n": m,
    }


def _mix_seq(parts: int, part_len: int, scheduled_share: float) -> Seq:
    items: list = []
    every = round(1 / scheduled_share) if scheduled_share else 0
    for i in range(parts):
        s = Seq.source(part_len + i).shuffle(i)
        if every and i % every == 0:
            a = (i % 7) / 20
            items.append((s, Schedule.trapezoid(a, a + 0.2, 0.7, 0.9)))
        else:
            items.append(s)
    return Seq.mix(items)


def bench_mix(parts: int, part_len: int, scheduled_share: float, repeat: int) -> dict:
    seq = _mix_seq(parts, part_len, scheduled_share)
    # Each build starts from a freshly built configuration (nothing cached on it).
    build_ms = _best(lambda: Order(_mix_seq(parts, part_len, scheduled_share)), max(repeat, 3))
    build_ms = (build_ms - _best(lambda: _mix_seq(parts, part_len, scheduled_share), 3)) * 1e3
    order = Order(seq)
    n = len(order)
    rng = np.random.default_rng(0)
    cur = order.cursor(n // 3)
    cur.next_block(BLOCK)
    walk = BLOCK / _best(lambda: cur.next_block(BLOCK), repeat) / 1e6
    seeks = rng.integers(0, n, 50)
    order.get(int(seeks[0]))
    t0 = time.perf_counter()
    for p in seeks:
        order.get(int(p))
    seek_us = (time.perf_counter() - t0) / len(seeks) * 1e6
    # Baseline: materialise a prefix of the mix by sorting every key (what a simple
    # implementation does), per element.
    small = Order(_mix_seq(parts, max(part_len // 1000, 50), scheduled_share))
    root = small.root
    assert isinstance(root, Mix) and root.plan is not None  # a mix of non-empty parts
    plan = root.plan
    part = np.repeat(np.arange(plan.k), plan.n)
    j = np.concatenate([np.arange(x) for x in plan.n])
    t = _best(lambda: np.lexsort((j, part, plan.keys(part, j))), max(repeat // 2, 1))
    sort_mps = len(part) / t / 1e6
    label = f"mix of {parts} shuffled parts"
    if scheduled_share:
        label += f", {scheduled_share:.0%} scheduled"
    print(f"{label} ({n:,} records)")
    _line("Order(...) construction", f"{build_ms:8.2f} ms")
    _line(
        "walk (cursor blocks of 64k)",
        f"{walk:8.2f} M/s",
        f"materialise-and-sort baseline {sort_mps:.2f} M/s (and O(n) memory)",
    )
    _line("seek (get one random position)", f"{seek_us:8.1f} us")
    return {
        "build_ms": build_ms,
        "walk_mps": walk,
        "seek_us": seek_us,
        "sort_baseline_mps": sort_mps,
    }


_MEMORY_CHILD = """
import resource, sys, json
import numpy as np
import feedline as fl
order = fl.Order(fl.Seq.source(10**9).shuffle(42))
order.lookup(np.arange(10))
idle = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
cur = order.cursor(0, int(sys.argv[1]))
while len(cur.next_block(1 << 16)[0]):
    pass
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"idle_kb": idle, "peak_kb": peak}))
"""


def bench_memory(walk_len: int) -> dict:
    t0 = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-c", _MEMORY_CHILD, str(walk_len)],
        check=True,
        capture_output=True,
        text=True,
        env=os.environ.copy(),
    )
    secs = time.perf_counter() - t0
    r = json.loads(out.stdout)
    grow = (r["peak_kb"] - r["idle_kb"]) / 1024
    perm_mb = walk_len * 8 / 2**20
    print(f"memory walking {walk_len:,} positions of a 1e9 shuffle")
    _line(
        "peak RSS above the idle interpreter",
        f"{grow:8.1f} MB",
        f"a permutation array of the walk alone: {perm_mb:,.0f} MB ({secs:.1f} s run)",
    )
    return {"peak_growth_mb": grow, "idle_mb": r["idle_kb"] / 1024}


def run_bench(quick: bool = False) -> int:
    run_benchmarks(quick)
    return 0


def run_benchmarks(quick: bool = False) -> dict:
    """Run every benchmark, printing each line; returns the figures (what ``--plot`` draws)."""
    compiled = kernels.enabled()
    path = "compiled (numba)" if compiled else "numpy"
    if compiled:
        warm_up()
    print(f"feedline ordering benchmarks, {path} path, pid {os.getpid()}")
    results: dict = {"path": path}
    repeat = 3 if quick else 15
    results["shuffle"] = bench_shuffle(10**9, repeat)
    results["mix100"] = bench_mix(100, 10**5 if quick else 10**7, 0.0, repeat)
    results["mix1000"] = bench_mix(1000, 10**4 if quick else 10**6, 0.2, repeat)
    results["memory"] = bench_memory(10**6 if quick else 10**8)
    results["loader"] = bench_loader(10**5 if quick else 4 * 10**6, 2 if quick else 3)
    results["device"] = bench_device(10**5 if quick else 4 * 10**6, 2 if quick else 3)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"(this process peaked at {peak:,.0f} MB, mostly the permutation baseline)")
    if os.environ.get("FEEDLINE_BENCH_JSON"):
        with open(os.environ["FEEDLINE_BENCH_JSON"], "w", encoding="utf-8") as f:
            json.dump(results, f, indent=2)
    return results


def bench_loader(n: int, repeat: int) -> dict:
    """The in-process loader over in-memory arrays against numpy and torch baselines."""
    from .. import Dataset, Loader, Record, field

    class Example(Record, dims={"D": 64}):
        x = field("D", "float32")
        y = field((), "int64")

    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, 64), dtype=np.float32)
    y = rng.integers(0, 10, n)
    b = 512
    out: dict[str, np.ndarray] = {"x": np.empty((b, 64), np.float32), "y": np.empty(b, np.int64)}

    def numpy_epoch() -> int:
        perm = np.random.default_rng(1).permutation(n)
        rows = 0
        for s in range(0, n, b):
            idx = perm[s : s + b]
            np.take(x, idx, axis=0, out=out["x"][: len(idx)], mode="clip")
            np.take(y, idx, axis=0, out=out["y"][: len(idx)], mode="clip")
            rows += len(idx)
        return rows

    ds = Dataset(Example, {"x": x, "y": y})

    def feedline_epoch() -> int:
        rows = 0
        for batch in Loader(ds, b, seed=1):
            rows += batch.meta.size
        return rows

    def feedline_into() -> int:
        loader = Loader(ds, b, seed=1)
        rows = 0
        while k := loader.next_into(out):
            rows += k
        return rows

    t_np = _best(numpy_epoch, repeat)
    t_fl = _best(feedline_epoch, repeat)
    t_into = _best(feedline_into, repeat)
    t0 = time.perf_counter()
    next(iter(Loader(Dataset(Example, {"x": x, "y": y}), b, seed=2)))
    first_ms = (time.perf_counter() - t0) * 1e3
    torch_rate = None
    try:
        import torch
        from torch.utils.data import BatchSampler, DataLoader, RandomSampler, TensorDataset

        tds = TensorDataset(torch.from_numpy(x), torch.from_numpy(y))

        def torch_epoch() -> int:
            sampler = BatchSampler(
                RandomSampler(tds, generator=torch.Generator().manual_seed(1)), b, drop_last=False
            )
            rows = 0
            for xb, _yb in DataLoader(tds, sampler=sampler, batch_size=None):
                rows += len(xb)
            return rows

        torch_rate = n / _best(torch_epoch, max(1, repeat - 1)) / 1e6
    except ImportError:
        pass
    rate_np, rate_fl, rate_into = n / t_np / 1e6, n / t_fl / 1e6, n / t_into / 1e6
    print(f"loader over {n:,} in-memory examples (64 float32 + int64), shuffled, batches of {b}")
    _line(
        "iteration (fresh arrays per batch)",
        f"{rate_fl:8.2f} M/s",
        f"{rate_fl / rate_np:.2f}x numpy's take into preallocated arrays ({rate_np:.2f} M/s)",
    )
    _line(
        "next_into (caller's arrays)", f"{rate_into:8.2f} M/s", f"{rate_into / rate_np:.2f}x numpy"
    )
    if torch_rate:
        _line(
            "",
            "",
            f"{rate_fl / torch_rate:.2f}x torch DataLoader + BatchSampler ({torch_rate:.2f} M/s)",
        )
    _line("time to first batch", f"{first_ms:8.1f} ms")
    return {
        "numpy_mps": rate_np,
        "feedline_mps": rate_fl,
        "next_into_mps": rate_into,
        "torch_mps": torch_rate,
        "first_batch_ms": first_ms,
    }


def bench_device(n: int, repeat: int) -> dict | None:
    """Batches gathered on the device against a plain ``torch.index_select`` loop."""
    try:
        import torch
    except ImportError:
        return None
    from .. import Dataset, Loader, Record, field

    class Example(Record, dims={"D": 64}):
        x = field("D", "float32")
        y = field((), "int64")

    device = "cuda" if torch.cuda.is_available() else "cpu"
    rng = np.random.default_rng(0)
    x = torch.from_numpy(rng.standard_normal((n, 64), dtype=np.float32)).to(device)
    y = torch.from_numpy(rng.integers(0, 10, n)).to(device)
    b = 512
    ds = Dataset(Example, torch.utils.data.TensorDataset(x.cpu(), y.cpu()))

    def plain() -> None:
        perm = torch.randperm(n, generator=torch.Generator().manual_seed(1)).to(device)
        for s in range(0, n, b):
            idx = perm[s : s + b]
            x.index_select(0, idx)
            y.index_select(0, idx)
        if device == "cuda":
            torch.cuda.synchronize()

    def feedline_pass() -> None:
        for _batch in Loader(ds, b, seed=1, device=device):
            pass
        if device == "cuda":
            torch.cuda.synchronize()

    t_plain = _best(plain, repeat)
    t_fl = _best(feedline_pass, repeat)
    print(f"batches of {b} gathered on the device ({device}) from {n:,} examples")
    _line(
        "feedline Loader(device=...)",
        f"{n / t_fl / 1e6:8.2f} M/s",
        f"{t_plain / t_fl:.2f}x torch.index_select with a randperm ({n / t_plain / 1e6:.2f} M/s)",
    )
    return {"device": device, "feedline_mps": n / t_fl / 1e6, "index_select_mps": n / t_plain / 1e6}
