"""Length bucketing: batches of similar lengths, drawn from groups of the pass's order.

With ``bucket="T"``, the pass's batches are taken in groups of ``bucket_batches``: the
positions of a group (``bucket_batches * batch_size`` consecutive positions of the
order) are sorted by their examples' length on dim ``T`` (ties by position), cut into
batches of ``batch_size``, and the group's full batches are put in a seeded order (a
hash of the pass's seed, its epoch and the group; a short last batch stays last). A
batch is therefore a pure function of (order, seed, pass, batch number): every
position is in exactly one batch, and seeking, sharding, workers and resume are as
exact as without bucketing. Padding shrinks because a batch's examples have similar
lengths; the shuffle of the order still decides which examples share a group.

Lengths come from the datasets (``Dataset.lengths``): offsets of a ragged column in
memory or in a file, read once otherwise.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .._base import hashing, kernels
from ..order import Order
from ._ledger import Claim, Ledger

_BUCKET_SALT = 0x5BD1E9955BD1E995


def group_order(seed: int, epoch: int, group: int, count: int) -> np.ndarray:
    """The seeded order of a group's ``count`` full batches: a permutation of
    ``0 .. count`` from 64-bit hashes of (seed, epoch, group, batch)."""
    word = hashing.epoch_word(seed & hashing.MASK64, epoch) ^ _BUCKET_SALT
    key = hashing.mix64(word ^ hashing.mix64(group))
    batches = np.arange(count, dtype=np.uint64)
    with np.errstate(over="ignore"):
        keys = hashing.mix64_array(batches * np.uint64(hashing.PHI) ^ np.uint64(key))
    return np.argsort(keys, kind="stable")


class Buckets:
    """The bucketing stage: the claims of a pass's batches, a group at a time."""

    def __init__(
        self,
        batch_size: int,
        group_batches: int,
        lengths_of: Callable[[np.ndarray, np.ndarray], np.ndarray],
    ) -> None:
        self.batch_size = batch_size
        self.group_batches = group_batches
        self.lengths_of = lengths_of
        # (generation, group, positions, ordinals, records): the group's rows in batch
        # order, each batch ``batch_size`` consecutive rows (a short one last)
        self.group: tuple | None = None

    def clear(self) -> None:
        self.group = None

    def claim(self, led: Ledger, index: int, pass_order: Callable[[], Order]) -> Claim:
        """Under the ledger's lock: the claim of batch ``index`` of the ledger's share."""
        w, k = led.share
        b = self.batch_size
        j = index * k + w  # the pass's batch
        order = pass_order()
        kept = min(order.length, led.steps * b)  # drop_last leaves the partial batch out
        start = j * b
        if start >= kept:  # an all-padding step of a short rank (even=True)
            empty = np.zeros(0, dtype=np.int64)
            return Claim(led.gen, index, start, start, empty, empty)
        g = j // self.group_batches
        group = self.group
        if group is None or group[0] != led.gen or group[1] != g:
            group = self.group = self._make(led, order, g, kept)
        lo = (j - g * self.group_batches) * b
        pos = group[2][lo : lo + b]
        return Claim(
            led.gen,
            index,
            start,
            start + len(pos),
            group[3][lo : lo + b],
            group[4][lo : lo + b],
            pos,
        )

    def _make(self, led: Ledger, order: Order, g: int, kept: int) -> tuple:
        b = self.batch_size
        first = g * self.group_batches * b
        last = min(kept, first + self.group_batches * b)
        positions = np.arange(first, last, dtype=np.int64)
        with kernels.deferred():  # the numpy path while numba loads: the same positions
            ords, recs = order.lookup(positions)
        ords = np.asarray(ords, dtype=np.int64)
        recs = np.asarray(recs, dtype=np.int64)
        lengths = self.lengths_of(ords, recs)
        by_length = np.argsort(lengths, kind="stable")  # ties keep the order's order
        full = len(positions) // b
        batches = group_order(order.seed, led.epoch, g, full)
        rows = (batches[:, None] * b + np.arange(b)).reshape(-1)
        rows = np.concatenate([rows, np.arange(full * b, len(positions))])
        pick = by_length[rows]
        return (led.gen, g, positions[pick], ords[pick], recs[pick])


def buckets_for(record: Any, datasets: list, opts: Any) -> Buckets:
    """The bucketing stage of a loader's ``bucket=dim`` (the dim must vary in the record);
    each dataset's lengths are read now (a file's: its offsets)."""
    dim = opts.bucket
    varying = {d for f in record.fields.values() for d in f.varying}
    if dim not in varying:
        raise ValueError(
            f"bucket={dim!r}: bucketing sorts by a varying dim of the record, and "
            f"{record.__name__}'s are {sorted(varying) or 'none'}"
        )
    for ds in datasets:
        ds.lengths(dim)

    def lengths_of(ords: np.ndarray, recs: np.ndarray) -> np.ndarray:
        if len(datasets) == 1:
            return datasets[0].lengths(dim)[recs]
        out = np.empty(len(recs), dtype=np.int64)
        for o in np.unique(ords):
            sel = ords == o
            out[sel] = datasets[int(o)].lengths(dim)[recs[sel]]
        return out

    return Buckets(opts.batch_size, opts.bucket_batches, lengths_of)
