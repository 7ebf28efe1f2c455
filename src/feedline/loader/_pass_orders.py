"""A loader's orders: the configuration it was given, pass 0's order for a seed dealt to
this shard after ``base`` positions (a few kept), and the current pass's.

A pure function of the configuration and the ledger's (seed, epoch, base): nothing here
is state of the loader, and nothing refers back to it (the ledger's geometry asks for
pass lengths through it without a cycle).
"""

from __future__ import annotations

from ..order import Order, Seq


class PassOrders:
    """The orders of one loader's passes."""

    def __init__(
        self,
        seq: Seq,
        one_dataset: bool,
        split: tuple[int, int] | None,
        shard: tuple[int, int] | None,
    ) -> None:
        self.seq: Seq | None = seq  # the order before split and shard (the fingerprint's)
        # given one dataset (not a Seq/Order): a positive seed shuffles it
        self.one_dataset = one_dataset
        self.split, self.shard = split, shard
        self._cache: dict[tuple, Order] = {}
        self._pass: tuple | None = None  # ((seed, epoch, base), the pass's order)

    def sources(self) -> Seq:
        """The order before split and shard; a closed loader has let go of it."""
        if self.seq is None:
            raise ValueError("the loader is closed")
        return self.seq

    def split_seq(self) -> Seq:
        seq = self.sources()
        return seq if self.split is None else seq.split(*self.split)

    def order(self, seed: int | None, base: int = 0) -> Order:
        """Pass 0's order for ``seed``, dealt to this shard after ``base`` positions."""
        key = (seed, base)
        order = self._cache.get(key)
        if order is None:
            seq = self.split_seq()
            if self.one_dataset and seed is not None and seed > 0:
                seq = seq.shuffle(seed)
            if self.shard is not None:
                seq = (seq.skip(base) if base else seq).shard(*self.shard)
            order = Order(seq) if self.one_dataset else Order(seq, seed=seed or 0)
            if len(self._cache) >= 8:  # reset(seed) each epoch must not grow it forever
                self._cache.clear()
            self._cache[key] = order
        return order

    def length(self, base: int) -> int:
        """This rank's pass length after ``base`` positions (shuffles keep lengths, so any
        seed's order tells it)."""
        return self.order(None, base).length

    def current(self, seed: int | None, epoch: int, base: int) -> Order:
        """The order of pass ``epoch`` (after ``base`` positions), kept while it lasts."""
        key = (seed, epoch, base)
        cached = self._pass
        if cached is not None and cached[0] == key:
            return cached[1]
        order = self.order(seed, base)
        if epoch:
            # Pass e is pass e of an enclosing repeat: seq.repeat(k)'s e-th pass.
            order = order.with_epoch(epoch)
        self._pass = (key, order)
        return order

    def close(self) -> None:
        """Let go of the configuration and its orders (the loader closes)."""
        self.seq = None
        self._cache.clear()
        self._pass = None
