"""A batch made in this thread, stage by stage: read (and map) the claim's examples,
collate them (padding), copy them to torch (and the device), transform the batch. Each
stage is a function of the claim and the loader's options, timed for ``loader.stats()``
(``_base.clock``: the map's own time is counted inside the read, by the dataset).
"""

from __future__ import annotations

from time import perf_counter_ns
from typing import Any

import numpy as np

from .._base import clock, hashing
from ..order import Order
from . import _collate
from ._batch import Batch
from ._gather import gather as gather_fields
from ._many import many_sources
from ._util import pinned_rows, to_torch


def positions(loader: Any, claim: Any) -> np.ndarray | None:
    """The positions, in the whole pass before dealing or splitting, of the claim's rows:
    with the pass, they seed mapped datasets' generators, so every rank draws its own and
    a resume with another number of ranks draws the same. None when no dataset is
    mapped."""
    if not loader._mapped:
        return None
    p = claim.pos if claim.pos is not None else np.arange(claim.start, claim.stop)
    opts = loader.options
    if opts.shard is not None:  # dealt round-robin after skipping the ledger's base
        index, count = opts.shard
        return loader._ledger.base + p * count + index
    if opts.split is not None:  # data.nu's contiguous slice
        index, count = opts.split
        return p + index * Order(loader._orders.sources()).length // count
    return p


def context(loader: Any) -> int:
    """The pass's context: it seeds mapped datasets' per-example generators."""
    if not loader._mapped:
        return 0
    order = loader._pass_order()
    return order.seed if not order.epoch else hashing.epoch_word(order.seed, order.epoch)


def gather(
    loader: Any, claim: Any, rows: int, out: dict[str, np.ndarray] | None = None
) -> dict[str, np.ndarray]:
    """Read (and map) the claim's examples: the fields stacked, padded to ``rows``."""
    if loader.options.check_values and not loader._values_checked:
        for ds in loader._datasets:
            if ds.in_memory:  # checked whole, once; others batch by batch, as they load
                ds.check_values()
        loader._values_checked = True
    return gather_fields(
        loader._datasets,
        loader.record.fields,
        claim.ords,
        claim.recs,
        rows,
        positions(loader, claim),
        context(loader),
        loader.options.check_values,
        out,
        many_sources(loader),  # a manifest's shards: every source's columns at once
    )


def make(loader: Any, claim: Any) -> Any:
    """The batch of ``claim``: read, map, collate, copy, transform."""
    rows = loader.rows_for(claim.size)
    opts = loader.options
    t0 = perf_counter_ns()
    # to a CUDA device: gathered straight into pinned memory, copied from there
    pinned = None
    if opts.output == "torch":
        pinned = pinned_rows(loader.record.fields, rows, opts.device)
    if pinned is None:
        got = gather(loader, claim, rows)
    else:
        got = gather(loader, claim, rows, out={n: t.numpy() for n, t in pinned.items()})
        _collate.fill_padding(got, loader.record.fields, claim.size, rows)
    t1 = perf_counter_ns()
    fields, lengths = _collate.collate(
        loader.record.fields,
        got,
        claim.size,
        rows,
        opts.pad_to_multiple,
        opts.pad_bounds,
        opts.nested,
    )
    t2 = perf_counter_ns()
    clock.add("read", t1 - t0)
    clock.add("collate", t2 - t1)
    if pinned is not None:
        fields = {n: t.to(opts.device, non_blocking=True) for n, t in pinned.items()}
        clock.add("copy", perf_counter_ns() - t2)
    elif opts.output == "torch":
        fields = to_torch(fields, opts.device)
        clock.add("copy", perf_counter_ns() - t2)
    return finish(
        loader,
        Batch.with_meta(
            dict(fields),
            claim.size,
            rows,
            claim.pos0,
            claim.ords,
            claim.recs,
            lengths=lengths,
        ),
    )


def finish(loader: Any, batch: Batch) -> Any:
    """The batch through the loader's batch transform, if it has one."""
    transform = loader.options.batch_transform
    if transform is None:
        return batch
    t = perf_counter_ns()
    out = transform(batch)
    clock.add("transform", perf_counter_ns() - t)
    return out


def next_made(loader: Any, make: Any, counted: list | None = None) -> tuple[Any, Any] | None:
    """``Loader.next_made``: the claim held in one try from the first step, the tally
    closed before the delivery, which is the last step."""
    led = loader._ledger
    held: list = []
    acc = clock.tally()
    try:
        try:
            if loader.claim(held) is None:
                return None
            claim = held[0]
            result = make(claim, acc)
        finally:
            clock.untally()
        led.deliver(claim, claim.size)
        return claim, result
    except Exception:
        if held:
            led.deliver(held[0], None)
        raise
    except BaseException:
        if held and led.give_back(held[0]) and counted is not None:
            loader._stats.undo(counted)
        raise
