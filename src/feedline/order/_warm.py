"""Loading every ordering kernel before it is needed (the demo's and benchmarks' warm-up).

Above the orders it exercises; the kernels themselves are ``feedline._base.kernels``.
"""

from __future__ import annotations

import time

import numpy as np

from .._base import kernels
from ._order import Order
from ._schedule import Schedule
from ._seq import Seq


def warm_up() -> float:
    """Load (or compile, the first time on a machine) every kernel; returns the seconds.

    Kernels otherwise load on their first use, which would then carry the cost.
    """
    t = time.perf_counter()
    if kernels.get() is None:
        return 0.0
    parts: list[Seq | tuple[Seq, Schedule]] = [
        Seq.source(5000).shuffle(1),
        (Seq.source(3000).shuffle(2), Schedule.ramp(0.1, 0.3)),
        Seq.source(2000),
        Seq.source(100).shuffle(3).repeat(3),
    ]
    order = Order(Seq.mix(parts).repeat(2))
    n = len(order)
    order.lookup(np.arange(0, n, 7))
    order.lookup(np.arange(n))
    cur = order.cursor(n // 3)
    cur.next_block(100)
    cur.next_block(5000)
    for p in (1, n // 2, n - 1):
        order.get(p)
    Order(Seq.source(10**6).shuffle(4).repeat(3)).lookup(np.arange(999_000, 1_001_000))
    return time.perf_counter() - t
