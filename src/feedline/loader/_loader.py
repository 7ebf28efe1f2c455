"""``Loader``: batches from an order over typed datasets (data.nu's DataLoader).

Semantics
    One pass yields every position of the order once, in batches of ``batch_size``:
    all full but the last, which is partial, dropped (``drop_last``) or padded to full
    size with ``meta.mask`` False (``pad``). ``len(loader)`` is the number of batches in
    a pass. A ``for`` loop over the loader continues where the last one stopped; after a
    finished pass the next loop starts the next pass, reshuffled (pass ``e`` is pass
    ``e`` of an enclosing repeat: ``Order.with_epoch(e)``). ``reset(seed)`` rewinds to
    the start of pass 0 as a pure function of the seed. ``state_dict`` /
    ``load_state_dict`` resume exactly after the last batch delivered.

The flow
    ledger (the only state: ``_ledger``) -> order blocks (``_ahead``: the next block made
    ahead, on a look-ahead thread or by a gather helper) -> read (``_gather``: one
    gather per field per source) -> map (``Dataset.map``, seeded by position) -> collate
    (rows padded to the batch) -> deliver (numpy, torch, the device; ``fl.jax``). Every
    stage is a function of the claimed positions and the seeds. How batches are made is
    one plan, chosen when the loader is built (``_plan``): a plain gather in this
    thread, a gather on the device, worker processes, or the general path in this
    thread.

Options (``_options``) have one meaning whatever the source: ``seed`` seeds the order's
shuffles, ``shard`` deals the pass's positions to ranks after shuffling, ``split`` takes
data.nu's contiguous slice before it.

Cost
    The order is read in blocks of about 256k positions, the next made ahead (on a
    look-ahead thread, or by a gather helper) while batches are gathered from the current
    one: one gather per field per source, outside the lock, so threads sharing a loader
    gather in parallel and each batch goes to exactly one; a memory-mapped file's by
    ``threads`` (``_gather_ahead``).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator, Mapping
from time import perf_counter_ns
from typing import Any, Literal

import numpy as np

from .._base import clock
from ..order import Order, Seq
from ..sources import Dataset
from . import _collate, _into, _making, _state
from ._batch import Batch
from ._blocks import OrderBlocks
from ._buckets import Buckets, buckets_for
from ._ledger import Claim, Ledger
from ._options import LoaderOptions, check_int
from ._pass_orders import PassOrders
from ._plan import PlainPlan, WorkerPlan, choose_plan
from ._stats import LoaderStats, Stats
from ._util import as_dataset, datasets_of, typed


class Loader:
    """Batches of typed examples from a dataset, a ``Seq`` or an ``Order``.

    >>> import numpy as np, feedline as fl
    >>> ds = fl.Dataset.from_arrays(x=np.arange(10.0).reshape(5, 2))
    >>> [b.meta.size for b in fl.Loader(ds, 2)]
    [2, 2, 1]
    """

    def __init__(
        self,
        source: Any,
        batch_size: int,
        *,
        seed: int | None = None,
        shard: tuple[int, int] | Literal["auto"] | None = None,
        split: tuple[int, int] | None = None,
        even: bool = False,
        drop_last: bool = False,
        pad: bool = False,
        workers: int | None = None,
        prefetch: int = 2,
        threads: int | None = None,
        device: Any = None,
        output: Literal["numpy", "torch"] | None = None,
        check_values: bool = False,
        batch_transform: Callable[[Batch], Any] | None = None,
        timeout: float | None = None,
        pad_to_multiple: int | None = None,
        pad_to: Any = None,
        bucket: str | None = None,
        bucket_batches: int = 64,
        nested: bool = False,
        progress: bool = False,
    ) -> None:
        opts = LoaderOptions.make(
            batch_size,
            seed=seed,
            shard=shard,
            split=split,
            even=even,
            drop_last=drop_last,
            pad=pad,
            workers=workers,
            prefetch=prefetch,
            threads=threads,
            device=device,
            output=output,
            check_values=check_values,
            batch_transform=batch_transform,
            timeout=timeout,
            pad_to_multiple=pad_to_multiple,
            pad_to=pad_to,
            bucket=bucket,
            bucket_batches=bucket_batches,
            nested=nested,
            progress=progress,
        )
        self.options = opts
        self._b = opts.batch_size
        self._own_dataset = False
        base_seed: int | None
        if isinstance(source, Order):
            self._plain: Dataset | None = None
            seq, base_seed = source.seq, (source.seed if opts.seed is None else opts.seed)
        elif isinstance(source, Seq):
            self._plain = None
            seq, base_seed = source, (0 if opts.seed is None else opts.seed)
        else:
            self._own_dataset = not isinstance(source, Dataset)
            self._plain = as_dataset(source)
            seq, base_seed = Seq.source(self._plain), opts.seed
        self._one_dataset = self._plain is not None  # given one dataset, not a Seq/Order
        self._orders = PassOrders(typed(seq), self._one_dataset, opts.split, opts.shard)
        self._datasets = datasets_of(self._orders.sources())
        self.record = self._datasets[0].record
        self._mapped = any(ds.mapped for ds in self._datasets)
        self._full_len = Order(self._orders.split_seq()).length if opts.shard is not None else -1
        self._geometry = _state.Geometry(
            opts.batch_size,
            opts.drop_last,
            opts.even,
            opts.shard,
            self._full_len,
            self._orders.length,  # the orders do not refer to the loader: not a cycle
        )
        self._ledger = Ledger(base_seed, self._geometry.steps(0))
        self._steps0 = self._ledger.steps
        if opts.nested:
            _collate.check_nested(self.record)
        _collate.check_pad_to(self.record, opts.pad_to)
        self._blocks: OrderBlocks | Buckets = (
            OrderBlocks(opts.batch_size)
            if opts.bucket is None
            else buckets_for(self.record, self._datasets, opts)
        )
        self._values_checked = False
        self._stream_fields: dict[str, Any] | None = None
        self._print = self._make_fingerprint()
        self._stats = Stats(opts.progress)
        self._plan = choose_plan(self)

    # -- options as attributes ------------------------------------------------------------
    batch_size = property(lambda self: self.options.batch_size)
    shard = property(lambda self: self.options.shard)
    split = property(lambda self: self.options.split)
    even = property(lambda self: self.options.even)
    drop_last = property(lambda self: self.options.drop_last)
    pad = property(lambda self: self.options.pad)
    workers = property(lambda self: self.options.workers)
    prefetch = property(lambda self: self.options.prefetch)
    device = property(lambda self: self.options.device)
    output = property(lambda self: self.options.output)
    check_values = property(lambda self: self.options.check_values)
    batch_transform = property(lambda self: self.options.batch_transform)
    timeout = property(lambda self: self.options.timeout)
    progress = property(lambda self: self.options.progress)

    # -- construction helpers -----------------------------------------------------------
    def _pass_order(self) -> Order:
        led = self._ledger
        return self._orders.current(led.seed, led.epoch, led.base)

    def _stream(self) -> dict[str, Any]:
        """What a state records in the clear (and a refusal names): the options that
        decide the batches, the pass's length before dealing, the number of sources and
        the maps' seeds. All fixed when the loader is made: worked out once, so a state
        saved after ``close`` (its sources let go) is the state saved before."""
        got = self._stream_fields
        if got is None:
            length = self._full_len if self.options.shard is not None else self._orders.length(0)
            seeds = _state.map_seeds(self._datasets)
            got = {**self.options.stream(), "length": length, "sources": len(self._datasets)}
            got = self._stream_fields = {**got, **seeds}
        return copy.deepcopy(got)  # a state's copy: a change to it leaves this one alone

    def _make_fingerprint(self) -> str:
        return _state.fingerprint(
            self._orders.sources().to_dict(),
            self._one_dataset,
            self.record,
            self._stream(),
            self._ledger.share,
        )

    def share_batches(self, index: int, count: int) -> None:
        """Take only batches ``index, index + count, ...`` of every pass (a share of the
        batches for one of ``count`` consumers, such as torch DataLoader workers); the
        state then counts this share's batches. Call it before the first batch."""
        index = check_int("share index", index, 0)
        count = check_int("share count", count, 1)
        if index >= count:
            raise ValueError(f"share index must be < count, got {index} of {count}")
        led = self._ledger
        with led.lock:
            if led.closed:
                raise ValueError("the loader is closed")
            if led.next or led.epoch or led.redo:
                raise ValueError("share_batches must be called before the first batch")
            led.share = (index, count)
        self._print = self._make_fingerprint()

    # -- the pass ---------------------------------------------------------------------------
    def __len__(self) -> int:
        """Batches in one pass (data.nu's ``dl_num_batches``; of this share, if shared)."""
        return self._ledger.share_steps

    @property
    def epoch(self) -> int:
        """The pass the loader is in (0 after construction or ``reset``)."""
        return self._ledger.epoch

    @property
    def seed(self) -> int | None:
        return self._ledger.seed

    @property
    def last_rows(self) -> int:
        """The real rows of the batch this loader delivered last (data.nu's
        ``dl_last_rows``): 0 before the first, and 0 once a pass has ended (the call
        that found the end, as ``dl_next`` returning 0 sets it). Padding rows do not
        count; a reset or a restored state leaves it as it was."""
        return self._ledger.last_rows

    def claim(self, into: list[Claim] | None = None) -> Claim | None:
        """The next batch's claim (its positions, sources and records), or None at the
        end of the pass (recorded as ended under the same lock). With ``into``, the
        claim is appended to it before any call that an interrupt could stop, so the
        caller's ``try`` around this call holds it (and gives it back) from the start."""
        led, t = self._ledger, perf_counter_ns()
        with led.lock:
            index = led.take_number()  # no call after the change: the try below holds it
            if index is None:
                return None
            try:
                claim = self._claim_positions(index)
                if into is not None:
                    into.append(claim)
            except BaseException:
                if not into:
                    led.untake(index)  # the order raised: nothing is claimed
                raise
        clock.add("order", perf_counter_ns() - t)
        if self._stats.progress:
            self._stats.open_bar(len(self), self.epoch)
        return claim

    def next_made(
        self, make: Callable[[Claim, dict[str, int]], Any], counted: list | None = None
    ) -> tuple[Claim, Any] | None:
        """The next claim and ``make(claim, tally)`` (``tally``: the batch's stages, open
        from before the claim to ``make``'s return), or None at the end of the pass. The
        claim is held from the first step: delivered when ``make`` returns, as the last
        step; passed over when it raises an error; given back when an interrupt lands
        anywhere before this returns, even after the delivery was recorded (then the stats
        take back what ``make`` counted in ``counted``, see ``Stats.undo``)."""
        return _making.next_made(self, make, counted)

    def _claim_positions(self, index: int) -> Claim:
        """Under the ledger's lock: the claim of batch ``index`` (``_blocks``)."""
        return self._blocks.claim(self._ledger, index, self._pass_order)

    # The order-blocks stage's state, for tests that look inside.
    _block = property(lambda self: getattr(self._blocks, "block", None))
    _ahead = property(lambda self: getattr(self._blocks, "ahead", None))

    def rows_for(self, size: int) -> int:
        return _collate.rows_for(size, self._b, self.options.padded)

    def positions(self, claim: Claim) -> np.ndarray | None:
        """The positions of the claim's rows in the whole pass (``_making.positions``)."""
        return _making.positions(self, claim)

    def context(self) -> int:
        """The pass's context: it seeds mapped datasets' per-example generators."""
        return _making.context(self)

    def gather(
        self, claim: Claim, rows: int, out: dict[str, np.ndarray] | None = None
    ) -> dict[str, np.ndarray]:
        """Read (and map) the claim's examples: the fields stacked, padded to ``rows``."""
        return _making.gather(self, claim, rows, out)

    def make(self, claim: Claim) -> Any:
        """The batch of ``claim`` made in this thread: read, map, collate, deliver."""
        return _making.make(self, claim)

    def finish(self, batch: Batch) -> Any:
        return _making.finish(self, batch)

    def stats(self, *, reset: bool = False) -> LoaderStats:
        """Where this loader's time went since it was made (or since ``stats(reset=True)``):
        rows/s, the first batch, the caller's wait, seconds per stage (order, read, map,
        collate, transform, copy, waiting for workers) and the workers' own (``_stats``)."""
        pool = getattr(self._plan, "pool", None)
        return self._stats.snapshot(len(pool.workers) if pool is not None else 0, reset)

    def deliver(
        self,
        claim: Claim,
        make: Callable[[Claim], Any],
        counted: list | None = None,
    ) -> Any:
        """``make(claim)``, recorded in the ledger: delivered when it returns, passed
        over when it raises an error (the error reached the caller), made again when an
        interrupt stops it (the caller got nothing; then the stats take back what
        ``make`` counted of it in the ``counted`` token, see ``Stats.undo``), also one
        that lands after the delivery was recorded, before the batch was returned. The
        caller holds ``claim`` (no other call may give it back)."""
        try:
            result = make(claim)
            self._ledger.deliver(claim, claim.size)
            return result
        except Exception:
            self._ledger.deliver(claim, None)
            raise
        except BaseException:
            if self._ledger.give_back(claim) and counted is not None:
                self._stats.undo(counted)
            raise

    def _workers_pool(self) -> Any:
        """The worker pool making this loader's batches (started now), or None when they
        are made in this process: for tests and diagnostics."""
        plan = self._plan
        return plan.started() if isinstance(plan, WorkerPlan) else None

    # What the plan holds, for tests that look inside: the worker pool (None before the
    # first batch or without workers), the device columns, the dataset of the plain path.
    _pool = property(lambda self: getattr(self._plan, "pool", None))
    _device = property(lambda self: getattr(self._plan, "_device", None))

    def _plain_source(self) -> Dataset | None:
        return self._plan.dataset if isinstance(self._plan, PlainPlan) else None

    def __iter__(self) -> Iterator[Any]:
        led = self._ledger
        with led.lock:  # the new pass and its empty block cache, in one step
            if led.start_next_pass(self._steps0):
                self._blocks.clear()
        # The plan is the iterator: it has no close(), so a generator around the loader
        # (yield from loader) that is dropped part-way never closes the loader. It holds
        # the loader for the pass (``_util.Plan``).
        plan = self._plan
        plan._held = self
        return plan

    def __next__(self) -> Any:
        return self._plan.next()

    def next_into(
        self, out: Mapping[str, np.ndarray], *, meta: Mapping[str, np.ndarray] | None = None
    ) -> int:
        """Gather the next batch into caller-provided arrays; returns its row count.

        ``out`` maps each field to a writable array of the field's dtype with at least
        ``batch_size`` rows (a field named ``mask`` is a field like any other).
        ``meta``, optionally, maps names of ``batch.meta`` to arrays of at least
        ``batch_size`` rows that receive the batch's metadata: ``"mask"`` (bool),
        ``"positions"``, ``"source_ordinals"``, ``"record_indices"`` (int64, -1 on
        padding rows). Rows past the count are left as they were. 0 marks the end of the
        pass, and every call after it returns 0 until ``reset()`` or a new iteration
        starts the next pass (so threads looping until 0 read one pass together).
        With ``even=True`` every step, an all-padding one included, returns ``batch_size``
        and ``meta["mask"]`` is required: it tells the real rows. The arrays are checked
        before a batch is claimed, so a buffer that cannot take one loses none.

        ``out["mask"]``, for a record without a field ``mask``, is still taken as
        ``meta["mask"]``, with a ``DeprecationWarning`` (it was the mask's place before
        ``meta``).
        """
        out, meta, padded = _into.check(self, out, meta)
        return self._plan.next_into(out, meta, padded)

    # -- control ------------------------------------------------------------------------
    def reset(self, seed: int | None = None, *, epoch: int = 0) -> None:
        """Rewind to the start of pass ``epoch`` (0: the first): a pure function of
        ``seed`` (None: the current) and ``epoch``."""
        if seed is not None:
            seed = check_int("seed", seed, -(1 << 63), (1 << 64) - 1)
        epoch = check_int("epoch", epoch, 0)
        self._plan.drain()
        self._stats.close_bar()
        led = self._ledger
        with led.lock:
            if led.closed:
                raise ValueError("the loader is closed")
            led.begin(epoch, 0, self._steps0, led.seed if seed is None else seed)
            self._blocks.clear()

    def state_dict(self) -> dict:
        """The state after the last batch delivered: a small JSON-ready dict."""
        led = self._ledger
        with led.lock:
            world = self.options.shard[1] if self.options.shard is not None else None
            return _state.to_dict(led, self._print, self._stream(), world)

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue exactly after the batches the saved loader had delivered.

        Raises ``StateError`` when the state is not a loader state, has another version,
        or was saved by a loader of another configuration; the message names the option
        that differs ("batch_size 64 saved, 32 here"). A state of dealt shards saved with
        another number of ranks continues the pass from the positions all ranks had
        consumed (see ``_state``).
        """
        led = self._ledger
        if led.closed:
            raise ValueError("the loader is closed")
        restored = _state.parse(
            state,
            self._print,
            self._stream(),
            self._geometry,
            led.share,
        )
        self._plan.drain()
        ahead = set(restored.ahead)
        with led.lock:  # the ledger changes whole or not at all (``begin``)
            led.begin(
                restored.epoch,
                restored.base,
                restored.steps,
                restored.seed,
                restored.batches,
                ahead,
                restored.ended,
            )
            self._blocks.clear()

    def close(self) -> None:
        """Stop the workers this loader holds and release its share of its sources; later
        use raises ValueError. (A loader whose pass ended and that is dropped without
        ``close`` leaves its workers to the next loader over the same datasets.)"""
        self._plan.shutdown()
        self._stats.close_bar()
        led = self._ledger
        with led.lock:
            if self._own_dataset and self._plain is not None and not led.closed:
                self._plain.close()  # the dataset this loader made for a file it was given
            led.closed = True
            # Nothing of the sources is held from here (the loader and its plan refer to
            # each other, so the collector alone would free them): a file dropped or
            # closed by its user is unmapped now. The state keeps what it recorded.
            self._plain = None
            self._datasets = []
            self.__dict__.pop("_many", None)  # the sources' buffers, taken for reading
            self._orders.close()
            self._blocks.clear()

    def __enter__(self) -> Loader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"Loader({self.record.__name__}, batch_size={self.options.batch_size}, "
            f"{self._ledger.steps} batches a pass, epoch {self._ledger.epoch})"
        )
