"""``Loader``: batches from an order over typed datasets (data.nu's DataLoader).

Semantics
    One pass yields every position of the order once, in batches of ``batch_size``:
    all full but the last, which is partial, dropped (``drop_last``) or padded to full
    size with ``mask`` False (``pad``). ``len(loader)`` is the number of batches in a
    pass. A ``for`` loop over the loader continues where the last one stopped; after a
    finished pass the next loop starts the next pass, reshuffled (pass ``e`` runs in its
    own context, hashed from the seed and ``e``). ``reset(seed)`` rewinds to the start
    of pass 0 as a pure function of the seed. ``state_dict`` / ``load_state_dict``
    resume exactly after the last batch delivered.

With a plain source
    ``seed`` shuffles (``None`` or ``<= 0``: in order) and ``shard=(index, count)`` takes
    data.nu's contiguous slice ``[index*n//count, (index+1)*n//count)`` before shuffling;
    ``shard="auto"`` deals the shuffled order's positions to the job's ranks.

With a ``Seq`` or an ``Order``
    ``seed`` reseeds every shuffle (the order seed); ``shard=(index, count)`` deals the
    order's positions round-robin; ``shard="auto"`` does so for this process's rank.

Cost
    The order is read in blocks of about 64k positions, the next block made on a
    look-ahead thread (compiled kernels, without the GIL) while batches are gathered
    from the current one; each batch is one gather per field per source (``np.take``
    for in-memory arrays), done outside the lock, so threads sharing a loader gather in
    parallel and each batch goes to exactly one.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any, Literal

import numpy as np

from ..errors import RecordError
from ..order import Order, Seq, _kernels, _seq
from ..sources import Dataset
from ._ahead import Ahead
from ._batch import Batch
from ._config import default_workers
from ._device import DeviceColumns
from ._gather import gather
from ._into import IntoArrays
from ._pools import PoolMode, PoolSpec
from ._ranks import detect_rank
from ._resume import Resumable
from ._util import as_dataset, check_int, to_torch
from ._workers import WorkerPool

# The order is fetched this many positions at a time (rounded to whole batches): one
# lookup amortised over many batches, small enough to stay in cache.
_BLOCK = 1 << 16


class Loader(Resumable, PoolMode, IntoArrays):
    """Batches of typed examples from a dataset, a ``Seq`` or an ``Order``.

    >>> import numpy as np, feedline as fl
    >>> ds = fl.Dataset.from_arrays(x=np.arange(10.0).reshape(5, 2))
    >>> [b.size for b in fl.Loader(ds, 2)]
    [2, 2, 1]
    """

    def __init__(self, source: Any, batch_size: int, *, seed: int | None = None,
                 shard: tuple[int, int] | Literal["auto"] | None = None, even: bool = False,
                 drop_last: bool = False, pad: bool = False, workers: int | None = None,
                 prefetch: int = 2, device: Any = None,
                 output: Literal["numpy", "torch"] = "numpy", check_values: bool = False,
                 batch_transform: Callable[[Batch], Any] | None = None) -> None:
        self.batch_size = check_int("batch_size", batch_size, 1)
        if seed is not None:
            seed = check_int("seed", seed)
        # None: fl.loader_workers(), else min(4, usable CPUs) (ShapeScript's default; the
        # measurement behind it is beside _config._DEFAULT_MAX). Workers start only for
        # datasets that need Python per batch: see PoolMode._plan_pool.
        self._workers_default = workers is None
        self.workers = default_workers() if workers is None else check_int("workers", workers, 0)
        self.prefetch = check_int("prefetch", prefetch, 1)
        if drop_last and pad:
            raise ValueError("drop_last and pad exclude each other: the last partial batch is "
                             "either dropped or padded")
        if output not in ("numpy", "torch"):
            raise ValueError(f"output must be 'numpy' or 'torch', got {output!r}")
        if device is not None:
            output = "torch"
        self.drop_last, self.pad, self.even = bool(drop_last), bool(pad), bool(even)
        self.check_values = bool(check_values)
        self.output, self.device = output, device
        self.batch_transform = batch_transform

        self._deal: tuple[int, int] | None = None
        if shard == "auto":
            shard = detect_rank()
            self._deal = shard
        elif shard is not None:
            if not (isinstance(shard, tuple) and len(shard) == 2):
                raise ValueError(f"shard is None, 'auto' or (index, count), got {shard!r}")
            index = check_int("shard index", shard[0], 0)
            count = check_int("shard count", shard[1], 1)
            if index >= count:
                raise ValueError(f"shard index must be < count, got {index} of {count}")
            shard = (index, count)
        self.shard = shard

        self._own_dataset = False
        # Dealt: the order's positions go round-robin to the shards (every shard of a Seq
        # or Order; "auto" for a plain source). The sharding is then applied when a pass's
        # order is built, after skipping ``_base`` positions (non-zero in a pass resumed
        # with another number of ranks), so a state saved with W ranks resumes with W'.
        self._dealt = shard is not None and (self._deal is not None
                                             or isinstance(source, (Order, Seq)))
        self._base = 0
        if isinstance(source, Order):
            self._plain: Dataset | None = None
            self._seq = source.seq
            self._base_seed = source.seed if seed is None else seed
        elif isinstance(source, Seq):
            self._plain = None
            self._seq = source
            self._base_seed = 0 if seed is None else seed
        else:
            # A plain source: data.nu's contiguous shard before shuffling; with "auto",
            # the shuffled order's positions are dealt to the ranks instead.
            self._own_dataset = not isinstance(source, Dataset)
            self._plain = as_dataset(source)
            seq = Seq.source(self._plain)
            self._seq = seq if shard is None or self._deal else seq.split(*shard)
            self._base_seed = seed
        # Unsharded length, for even steps across ranks.
        self._full_len = self._full_length(source)
        self._datasets = self._check_sources()
        self.record = self._datasets[0].record
        self._mapped = any(ds.mapped for ds in self._datasets)
        self._fingerprint = self._make_fingerprint()
        self._lock = threading.Lock()
        self._orders: dict[int | None, Order] = {}
        self._pass_cache: tuple | None = None
        self._seed = self._base_seed
        self._epoch = 0
        self._claimed = 0
        self._ended = False
        self._block: tuple[int, np.ndarray, np.ndarray, int, int] | None = None
        self._ahead: Ahead | None = None
        self._closed = False
        self._values_checked = False
        self._steps = self._count_steps()
        self._delivered = 0  # batches delivered in this pass, counted without a gap
        self._done_ahead: set[int] = set()  # batches delivered past the gap (threads)
        self._pool: WorkerPool | None = None
        self._pool_spec: PoolSpec | None = None
        self._pool_decided = False
        self._last_rows = 0
        self._transform_in_workers = False
        self._inflight: deque = deque()
        self._share = (0, 1)
        self._device: DeviceColumns | None = None
        self._device_decided = False
        self._next_lock = threading.Lock()
        self._plain_decided = False
        self._plain_cols: Dataset | None = None

    # -- construction helpers -----------------------------------------------------------
    def _full_length(self, source: Any) -> int:
        """The length of a pass before sharding (for even steps and elastic resume)."""
        if self.shard is None:
            return -1
        if isinstance(source, Order):
            return Order(source.seq).length
        if isinstance(source, Seq):
            return Order(source).length
        return len(self._plain)

    def _check_sources(self) -> list[Dataset]:
        sources = self._seq.sources()
        if not sources:
            raise TypeError("the loader's order has no sources")
        datasets = []
        for src in sources:
            if not isinstance(src, Dataset):
                raise TypeError(
                    f"the loader reads typed records: every source of its order must be a "
                    f"fl.Dataset, found {type(src).__name__}")
            datasets.append(src)
        first = datasets[0].record
        for ds in datasets[1:]:
            if ds.record is not first and not first.same_schema(ds.record):
                raise RecordError(
                    f"one loader reads one record: its datasets' records differ:\n"
                    f"{first.describe()}\n{ds.record.describe()}")
        return datasets

    def _order(self, seed: int | None, base: int = 0) -> Order:
        """Pass 0's order for ``seed``, dealt to this shard after ``base`` positions."""
        order = self._orders.get((seed, base))
        if order is None:
            seq = self._seq
            if self._plain is not None and seed is not None and seed > 0:
                seq = seq.shuffle(seed)
            if self._dealt:
                seq = (seq.skip(base) if base else seq).shard(*self.shard)
            order = Order(seq) if self._plain is not None else Order(seq, seed=seed or 0)
            if len(self._orders) >= 8:  # reset(seed) each epoch must not grow it forever
                self._orders.clear()
            self._orders[(seed, base)] = order
        return order

    def _pass_order(self) -> Order:
        key = (self._seed, self._epoch, self._base)
        cached = self._pass_cache
        if cached is not None and cached[0] == key:
            return cached[1]
        order = self._order(self._seed, self._base)
        if self._epoch:
            # Pass e is pass e of an enclosing repeat: seq.repeat(k)'s e-th pass.
            order = order.with_epoch(self._epoch)
        self._pass_cache = (key, order)
        return order

    def _share_index(self, start: int) -> int:
        """The number, within this loader's share, of the batch starting at ``start``."""
        return (start // self.batch_size) // self._share[1]

    def share_batches(self, index: int, count: int) -> None:
        """Take only batches ``index, index + count, ...`` of every pass (a share of the
        batches for one of ``count`` consumers, such as torch DataLoader workers); the
        state then counts this share's batches. Call it before the first batch."""
        index = check_int("share index", index, 0)
        count = check_int("share count", count, 1)
        if index >= count:
            raise ValueError(f"share index must be < count, got {index} of {count}")
        with self._lock:
            if self._claimed or self._epoch:
                raise ValueError("share_batches must be called before the first batch")
            self._share = (index, count)
            self._fingerprint = self._make_fingerprint()

    def _count_steps(self) -> int:
        n = self._order(self._seed, self._base).length
        b = self.batch_size
        if self.even and self.shard is not None:
            count = self.shard[1]
            full = self._full_len - self._base
            if self.drop_last:  # every rank takes the full batches the shortest rank has
                return (full // count) // b
            longest = -(-full // count)
            return -(-longest // b)
        return n // b if self.drop_last else -(-n // b)

    # -- the stream ---------------------------------------------------------------------
    def __len__(self) -> int:
        """Batches in one pass (data.nu's ``dl_num_batches``; of this share, if shared)."""
        w, k = self._share
        return max(0, -(-(self._steps - w) // k))

    @property
    def epoch(self) -> int:
        """The pass the loader is in (0 after construction or ``reset``)."""
        return self._epoch

    @property
    def seed(self) -> int | None:
        return self._seed

    @property
    def last_rows(self) -> int:
        """The real rows of the batch this loader delivered last (data.nu's
        ``dl_last_rows``): 0 before the first, and 0 once a pass has ended (the call
        that found the end, as ``dl_next`` returning 0 sets it). Padding rows do not
        count; a reset or a restored state leaves it as it was."""
        return self._last_rows

    def _claim(self) -> tuple[int, int, np.ndarray, np.ndarray] | None:
        """The next batch's (start, stop, ordinals, records), or None at the end."""
        with self._lock:
            return self._claim_locked()

    def _claim_locked(self) -> tuple[int, int, np.ndarray, np.ndarray] | None:
        if self._closed:
            raise ValueError("the loader is closed")
        # Batches delivered before a restore (listed, or passed by the count) are skipped.
        while self._claimed < self._delivered or self._claimed in self._done_ahead:
            self._claimed += 1
        w, k = self._share
        index = self._claimed * k + w  # this loader's share of the pass's batches
        if self._ended or index >= self._steps:
            return None
        b = self.batch_size
        start = index * b
        block = self._block  # (first position, ordinals, records, the pass's length, end)
        stop = min(start + b, block[3] if block is not None else self._pass_order().length)
        if start >= stop:  # an all-padding step of a short rank (even=True)
            self._claimed += 1
            empty = np.zeros(0, dtype=np.int64)
            return start, start, empty, empty
        if block is None or not block[0] <= start or stop > block[4]:
            block = self._fetch(start)  # if the order raises, nothing is claimed
        self._claimed += 1
        offset = block[0]
        return (start, stop, block[1][start - offset:stop - offset],
                block[2][start - offset:stop - offset])

    def _claim_or_stop(self) -> tuple[int, int, np.ndarray, np.ndarray]:
        """The next batch's claim; at the end of the pass, mark it ended and stop."""
        claim = self._claim()
        if claim is None:
            with self._lock:
                self._ended = True
                self._last_rows = 0
            raise StopIteration
        return claim

    def _fetch(self, start: int) -> tuple[int, np.ndarray, np.ndarray, int, int]:
        """The order block starting at ``start`` (made ahead, if the last fetch made it),
        and the next one started on the look-ahead thread."""
        b = self.batch_size
        length = max(b, -(-_BLOCK // b) * b)
        order = self._pass_order()
        ahead, self._ahead = self._ahead, None
        cursor = None
        if ahead is not None and ahead.matches(order, start):
            ords, recs = ahead.result()
            cursor = ahead.cursor
        else:
            _kernels.load_in_background()
            cursor = order.cursor(start)
            ords, recs = Ahead.make(cursor, length)
        self._block = (start, ords, recs, order.length, start + len(ords))
        # the next block starts at this loader's next batch past this one (with a share
        # of k, the first of its batches at or after the block's end)
        w, k = self._share
        after = -(-(start + len(ords)) // b)
        after = (after + (w - after) % k) * b
        if after < order.length:
            self._ahead = Ahead(order, after, length, cursor)
        return self._block

    def _gather(self, ords: np.ndarray, recs: np.ndarray, rows: int, start: int,
                out: dict[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
        """The fields of the given records, stacked; padded with zeros to ``rows``."""
        if self.check_values and not self._values_checked:
            for ds in self._datasets:
                if ds.in_memory:  # checked whole, once; others batch by batch, as they load
                    ds.check_values()
            self._values_checked = True
        return gather(self._datasets, self.record.fields, ords, recs, rows,
                      self._seeds(start, len(recs)), self._context(), self.check_values, out)

    def _context(self) -> int:
        """The pass's context: it seeds mapped datasets' per-example generators."""
        return self._pass_order().seed if self._mapped else 0

    def _rows_for(self, size: int) -> int:
        if self.pad or (self.even and self.shard is not None):
            return self.batch_size
        return size

    def __iter__(self) -> Iterator[Any]:
        with self._lock:
            if self._ended:
                self._epoch += 1
                self._claimed = 0
                self._delivered = 0
                self._done_ahead.clear()
                self._ended = False
                self._block = None
                self._ahead = None
                if self._base:  # a pass resumed with another number of ranks has ended
                    self._base = 0
                    self._steps = self._count_steps()
        return self

    def _use_device(self) -> DeviceColumns | None:
        """The datasets' columns on the device, when they are in memory (else None)."""
        if self._device_decided:
            return self._device
        self._device_decided = True
        if self.output != "torch" or not all(
                ds.in_memory and not ds.mapped for ds in self._datasets):
            return None
        if not DeviceColumns.fits(self._datasets, self.device):
            return None
        if self.check_values:
            for ds in self._datasets:
                ds.check_values()
        self._device = DeviceColumns(self._datasets, dict(self.record.fields), self.device)
        return self._device

    def _plain_source(self) -> Dataset | None:
        """The columns of the one source when a batch is nothing but a gather from them
        (arrays in memory or a memory-mapped file, no map, no check, no padding, numpy
        out, in this process): the path of the fastest sources, without layers. Its
        columns are read at each batch (``refresh`` may replace them)."""
        if self._plain_decided:
            return self._plain_cols
        self._plain_decided = True
        ds = self._datasets[0] if len(self._datasets) == 1 else None
        if (ds is None or ds.mapped or self.check_values or self.output != "numpy"
                or self.batch_transform is not None or self._rows_for(0) != 0
                or (ds.columns is None and not ds._mapped_columns)
                or self._use_pool() is not None):
            return None
        self._plain_cols = ds
        return ds

    def __next__(self) -> Any:
        plain = self._plain_cols if self._plain_decided else self._plain_source()
        if plain is not None:
            # The fastest sources' path: one claim and one take per field, nothing else.
            with self._lock:
                claim = self._claim_locked()
                if claim is None:
                    self._ended = True
                    self._last_rows = 0
                    raise StopIteration
            start, stop, ords, recs = claim
            cols = plain._columns if plain._columns is not None else plain._mapped_columns
            try:
                if cols:
                    fields = {}
                    for k, col in cols.items():
                        fields[k] = col.take(recs, axis=0)
                else:
                    fields = self._gather(ords, recs, stop - start, start)
            finally:
                self._passed(start)
            self._last_rows = stop - start
            return Batch(fields, stop - start, stop - start, start, ords, recs)
        if self._use_pool() is not None:
            return self._next_from_pool()
        start, stop, ords, recs = self._claim_or_stop()
        size = stop - start
        rows = self._rows_for(size)
        device = self._use_device()
        if device is not None:
            try:
                fields = device.gather(ords, recs, rows)
            finally:
                self._passed(start)
            self._last_rows = size
            batch = Batch(fields, size, rows, start, ords, recs)
            return batch if self.batch_transform is None else self.batch_transform(batch)
        # Every batch gets fresh arrays: reusing the arrays of batches the caller dropped
        # was tried and is unsafe, as JAX and asynchronous copies may still read memory
        # that no Python reference holds.
        try:
            fields = self._gather(ords, recs, rows, start)
        finally:
            self._passed(start)
        self._last_rows = size
        if self.output == "torch":
            fields = self._to_torch(fields)
        batch = Batch(dict(fields), size, rows, start, ords, recs)
        if self.batch_transform is not None:
            return self.batch_transform(batch)
        return batch

    def _to_torch(self, fields: dict[str, np.ndarray]) -> dict[str, Any]:
        return to_torch(fields, self.device)

    # -- control ------------------------------------------------------------------------
    def reset(self, seed: int | None = None, *, epoch: int = 0) -> None:
        """Rewind to the start of pass ``epoch`` (0: the first): a pure function of
        ``seed`` (None: the current) and ``epoch``."""
        if seed is not None:
            seed = check_int("seed", seed)
        epoch = check_int("epoch", epoch, 0)
        self._drain()
        with self._lock:
            if seed is not None:
                self._seed = seed
            self._epoch = epoch
            self._base = 0
            self._claimed = 0
            self._delivered = 0
            self._done_ahead.clear()
            self._ended = False
            self._block = None
            self._ahead = None
            self._steps = self._count_steps()

    def close(self) -> None:
        """Stop the workers this loader holds and release its share of its sources; later
        use raises ValueError. (A loader whose pass ended and that is dropped without
        ``close`` leaves its workers to the next loader over the same datasets.)"""
        self._release_pool()
        with self._lock:
            if self._own_dataset and self._plain is not None and not self._closed:
                self._plain.close()  # the dataset this loader made for a file it was given
            self._closed = True
            self._datasets = []
            self._plain_cols, self._plain_decided = None, True
            self._orders.clear()
            self._block = None
            self._ahead = None

    def __enter__(self) -> Loader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"Loader({self.record.__name__}, batch_size={self.batch_size}, "
                f"{self._steps} batches a pass, epoch {self._epoch})")


_seq.LOADER = [Loader]
