"""The order-blocks stage: a claim's positions, read from blocks of the pass's order.

The order is read about 256k positions at a time (rounded to whole batches): one lookup
amortised over many batches, and few numpy calls a position on the numpy order path
(each takes the GIL from the threads gathering rows; 64k blocks ran 8 - 14% slower in
a fresh process's pass of 2 gather threads, issue 20), at 4 MiB a block; a pass's
first block is 64k (``_FIRST_BLOCK``). The block after the
current one is made ahead (``_ahead``) while batches are gathered from this one: on the
look-ahead thread, or where helper threads gather the rows, by a helper between its
chunks. A block is a pure function of the pass's order and its first position,
and it carries the ledger's generation: a block of another pass (or of the same pass
before a reset or a restore) is never read.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..order import Order
from ._ahead import Ahead
from ._ledger import Claim, Ledger

_BLOCK = 1 << 18
# A block the caller waits for (a pass's first, or the first after a seek or a restore)
# is shorter: a fresh process's first batch came in 5 - 7 ms with 64k, 9 - 33 ms with 256k.
_FIRST_BLOCK = 1 << 16

# A ``Claim`` made of its seven fields without the named tuple's ``__new__`` (a Python
# function that cost a third of a microsecond a batch more).
_new = tuple.__new__


class OrderBlocks:
    """The current block of a loader's pass order and the one being made ahead."""

    def __init__(self, batch_size: int) -> None:
        self.batch_size = batch_size
        # (first position, ordinals, records, pass length, end, generation)
        self.block: tuple | None = None
        self.ahead: Ahead | None = None
        # the next block is made by the loader's own threads (``Ahead``'s ``here``), not
        # the look-ahead thread: set while helper threads gather its chunks (``_gather_ahead``)
        self.here = False

    def clear(self) -> None:
        self.block = None
        self.ahead = None

    def claim(self, led: Ledger, index: int, pass_order: Callable[[], Order]) -> Claim:
        """Under the ledger's lock: the claim of batch ``index`` of the ledger's share."""
        w, k = led.share
        b = self.batch_size
        start = (index * k + w) * b
        block = self.block
        if block is not None and block[5] == led.gen:
            # the common case, written out (a batch of the plain path pays each call): a
            # claim inside the current block
            stop = start + b
            if stop > block[3]:
                stop = block[3]
            if block[0] <= start < stop <= block[4]:
                a, z = start - block[0], stop - block[0]
                got = (led.gen, index, start, stop, block[1][a:z], block[2][a:z], None)
                return _new(Claim, got)
        if block is not None and block[5] != led.gen:
            block = None
        stop = min(start + b, block[3] if block is not None else pass_order().length)
        if start >= stop:  # an all-padding step of a short rank (even=True)
            empty = np.zeros(0, dtype=np.int64)
            return Claim(led.gen, index, start, start, empty, empty)
        if block is None or not block[0] <= start or stop > block[4]:
            block = self._fetch(pass_order(), start, led)
        offset = block[0]
        return Claim(
            led.gen,
            index,
            start,
            stop,
            block[1][start - offset : stop - offset],
            block[2][start - offset : stop - offset],
        )

    def _fetch(self, order: Order, start: int, led: Ledger) -> tuple:
        """The block starting at ``start`` (made ahead, if the last fetch made it), and
        the next one started ahead (``Ahead``: on the look-ahead thread, or ``here``)."""
        b = self.batch_size
        length = max(b, -(-_BLOCK // b) * b)
        ahead, self.ahead = self.ahead, None
        if ahead is not None and ahead.matches(order, start):
            ords, recs = ahead.result()
            cursor = ahead.cursor
        else:
            cursor = order.cursor(start)
            ords, recs = Ahead.make(cursor, max(b, -(-_FIRST_BLOCK // b) * b))
        self.block = (start, ords, recs, order.length, start + len(ords), led.gen)
        # the next block starts at this share's next batch past this one (with a share
        # of k, the first of its batches at or after the block's end)
        w, k = led.share
        after = -(-(start + len(ords)) // b)
        after = (after + (w - after) % k) * b
        if after < order.length:
            self.ahead = Ahead(order, after, length, cursor, self.here)
        return self.block
