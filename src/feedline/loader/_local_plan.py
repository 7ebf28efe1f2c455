"""The plans that make batches in the calling thread: ``LocalPlan`` (read, map, collate,
deliver), ``PlainPlan`` (one take per field) and ``DevicePlan`` (the columns on the
device); ``_plan`` says which a loader uses."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from time import perf_counter_ns
from typing import Any

import numpy as np

from .._base import clock, rowcopy
from ..sources._watched import columns_changed
from . import _into
from ._batch import Batch
from ._chunk import _fields_of, _prepared, _row_bytes
from ._device import DeviceColumns
from ._gather import take_mixed
from ._gather_ahead import for_plain
from ._util import Plan, torch_module

# A batch of fewer bytes is taken by numpy: the compiled copy's set-up (3 - 4 us) is then
# more than its prefetch gains (measured below, ``PlainPlan._take``).
_COPY_BYTES = 64 << 10


class LocalPlan(Plan):
    """Read, map, collate and deliver in the calling thread."""

    def __iter__(self) -> Any:
        return self

    def __next__(self) -> Any:
        return self.next()

    def _step(self, make: Any) -> tuple[Any, Any] | None:
        """The next claim and ``make(claim)``, timed for ``loader.stats()`` and delivered
        (``Loader.next_made``); None at the end of the pass. The claim is held from the
        start: an interrupt anywhere before this returns gives the batch back."""
        loader = self.loader
        stats = loader._stats
        t0 = stats.start()
        counted: list[int] = []  # the rows, once the stats count the batch

        def made(claim: Any, acc: dict[str, int]) -> Any:
            result = make(claim)
            stats.batch(t0, acc, claim.size, counted)
            return result

        return loader.next_made(made, counted)

    def next(self) -> Any:
        step = self._step(self._make)
        if step is None:
            self._held = None  # the pass ended: a dropped loader is freed (``Plan``)
            raise StopIteration
        return step[1]

    def _make(self, claim: Any) -> Any:
        """The batch of ``claim``, made in this thread (``_making``)."""
        return self.loader.make(claim)

    def next_into(
        self, out: Mapping[str, np.ndarray], meta: Mapping[str, np.ndarray], padded: bool
    ) -> int:
        def fill(claim: Any) -> int:
            t = perf_counter_ns()
            self._fill(claim, out)
            clock.add("read", perf_counter_ns() - t)
            return _into.finish(self.loader, claim, out, meta, padded)  # before delivery

        step = self._step(fill)
        return 0 if step is None else step[1]

    def _fill(self, claim: Any, out: Mapping[str, np.ndarray]) -> None:
        """Write the claim's rows into ``out``'s first rows."""
        loader = self.loader
        loader.gather(claim, claim.size, out={n: out[n] for n in loader.record.fields})

    def drain(self) -> None:
        pass

    def shutdown(self) -> None:
        pass


class PlainPlan(LocalPlan):
    """The fastest sources' path: one claim and one take per field, nothing else. The
    dataset's columns are read at each batch (``refresh`` may replace them)."""

    def __init__(self, loader: Any, dataset: Any) -> None:
        super().__init__(loader)
        # one dataset (None once the loader is closed), or a mix's (``sources``)
        mixed = isinstance(dataset, list)
        self.dataset: Any = None if mixed else dataset
        self.sources: list | None = dataset if mixed else None
        # the sources' columns, one tuple while none changes (``GatherAhead`` knows its
        # chunks' columns by identity)
        # (``columns_changed()`` when last read, the mix's columns then or None, its
        # TensorDataset sources: read again at each batch if their tensors changed)
        self._mix: tuple[int, tuple | None, list] = (-1, None, [])
        # A source's columns read again (a TensorDataset's new tensors, a ``refresh``) may
        # hold fewer rows than the order's records reach: its batches' records are then
        # checked (the general path's ``BoundsError``), never clipped by ``np.take``.
        self._need = [len(ds) for ds in (self.sources or [dataset])]
        self._sized: Any = None  # the columns last measured against ``_need``
        self._short: tuple[int, ...] = ()  # the sources shorter than that
        self.ahead = for_plain(loader)  # a chunk of batches at a time, by threads
        # (columns, bytes a row, their buffers taken for the compiled row copies:
        # ``rowcopy.prepare``; None where numpy's takes serve): ``_take``
        self._copy: tuple[Any, int, Any] = (None, 0, None)
        # output="torch" (on the CPU): tensors over the gathered arrays' memory
        self.tensors = torch_module().from_numpy if loader.options.output == "torch" else None

    def _cols(self) -> Any:
        """The dataset's columns, or a mix's (a tuple of each source's); None or empty
        where a source has none (the general path serves)."""
        ds = self.dataset
        if ds is None:
            return self._mix_cols()
        return ds._columns if ds._columns is not None else ds._mapped_columns

    def _mix_cols(self) -> tuple | None:
        """The sources' columns as one tuple, the same object while none of them changed
        (one number read a batch, whatever the number of sources)."""
        sources = self.sources
        if sources is None:
            raise ValueError("the loader is closed")
        seen, mix, tensors = self._mix
        for ds in tensors:  # a TensorDataset: read again if it changed (a new number)
            ds._read_if_changed()
        now = columns_changed()
        if now == seen:
            return mix
        cols = []
        for ds in sources:
            if ds._seen is not None:
                ds._read_if_changed()
            got = ds._cols if ds._cols is not None else ds._mapped_columns
            if not got:
                break
            cols.append(got)
        if len(cols) < len(sources):
            mix = None  # a source without columns: the general path serves
        elif mix is None or len(mix) != len(cols) or any(a is not b for a, b in zip(mix, cols)):
            mix = tuple(cols)
        # one assignment: another thread reads the three together
        self._mix = (now, mix, [ds for ds in sources if ds._seen is not None])
        return mix

    def next(self) -> Any:
        # The hottest path of all: the claim and the ledger's report are written out here
        # (each call left out is a tenth of a microsecond, at tens of thousands a second).
        loader = self._held
        if loader is None:
            loader = self.loader  # the weak reference (``Plan``)
        led, stats = loader._ledger, loader._stats
        t0 = stats.start()
        counted: list[int] = []  # the rows, once the stats count the batch
        index = claim = None
        # One try from before the claim: the number is taken with no call after the
        # change (``take_number``), and from there an interrupt anywhere gives it back
        # (``untake`` before the claim is made, ``give_back`` after, even after the
        # delivery is recorded: the lock's release is a call).
        try:
            with led.lock:
                index = led.take_number()
                if index is None:
                    self._held = None  # the pass ended: a dropped loader is freed (``Plan``)
                    raise StopIteration
                blocks = loader._blocks
                claim = blocks.claim(led, index, loader._pass_order)  # _claim_positions
                ahead = self.ahead
                block = blocks.block if ahead is not None else None
            t1 = perf_counter_ns()
            if stats.progress:  # the pass's bar (``Loader.claim`` opens it elsewhere)
                stats.open_bar(led.share_steps, led.epoch)
            ds = self.dataset  # _cols, with the ``_columns`` property written out
            recs = claim.recs
            if ds is None:  # a mix, or closed by another thread since the claim
                cols = self._mix_cols()
                if cols is None:
                    fields = loader.gather(claim, claim.size)
                else:
                    if cols is not self._sized or self._short:
                        self._bounds(cols, claim, self.sources)
                    if ahead is None or (fields := ahead.fields(claim, block, cols)) is None:
                        fields = self._take(cols, claim.ords, recs)
            else:
                if ds._seen is not None:  # a TensorDataset: read again if it changed
                    ds._read_if_changed()
                cols = ds._cols if ds._cols is not None else ds._mapped_columns
                if not cols:
                    fields = loader.gather(claim, claim.size)
                else:
                    if cols is not self._sized or self._short:
                        self._bounds(cols, claim, [ds])
                    if ahead is None or (fields := ahead.fields(claim, block, cols)) is None:
                        fields = self._take(cols, claim.ords, recs)
            if self.tensors is not None:
                fields = {k: self.tensors(a) for k, a in fields.items()}
            size = claim.stop - claim.start
            batch = Batch(fields, size, size, claim.start, claim.ords, recs)
            # counted before the delivery, the last step
            stats.plain(t0, t1, perf_counter_ns(), size, counted)
            led.deliver(claim, size)
            return batch
        except Exception:
            if claim is not None:
                led.deliver(claim, None)
            elif index is not None:
                with led.lock:
                    led.untake(index)  # the order raised: nothing is claimed
            raise
        except BaseException:
            if claim is not None:
                if led.give_back(claim):
                    stats.undo(counted)
            elif index is not None:
                with led.lock:
                    led.untake(index)
            raise

    __next__ = next

    def _take(self, cols: Any, ords: np.ndarray, recs: np.ndarray) -> dict[str, np.ndarray]:
        """One batch's rows of ``cols`` (a dataset's columns, or a mix's tuple of them),
        in new arrays: by the compiled row copies in this thread where they serve
        (``rowcopy``: the next rows' first lines fetched ahead, a mix's rows put in place
        in one pass), else one ``np.take`` per field (per source for a mix).

        One thread, passes alternated in one process, medians of 6 (2026-12-07): 500,000
        rows of 3,080 bytes in batches of 256, 1.15x numpy's takes; a mix of two files of
        1,000,000 rows of 264 bytes in batches of 512, 1.46x; one file of 4,000,000 such
        rows, 1.0x."""
        if cols is not self._copy[0]:
            prepared = _prepared(cols)
            self._copy = (cols, _row_bytes(cols) if prepared is not None else 0, prepared)
        _, rows, prepared = self._copy
        if prepared is not None and rows * len(recs) >= _COPY_BYTES:
            first = _fields_of(cols)
            out = {n: np.empty((len(recs), *a.shape[1:]), a.dtype) for n, a in first.items()}
            task = rowcopy.submit(out, cols, recs, ords, queue=False, prepared=prepared)
            if task.run():
                return out
        if isinstance(cols, tuple):
            return take_mixed(cols, ords, recs)
        return {k: col.take(recs, axis=0) for k, col in cols.items()}

    def _bounds(self, cols: Any, claim: Any, sources: Any) -> None:
        """Measure new columns (of ``sources``) against the rows the order reaches
        (``_need``), and check the claim's records of any source found shorter (a
        ``BoundsError``)."""
        if cols is not self._sized:
            each = cols if isinstance(cols, tuple) else (cols,)
            rows = [len(next(iter(c.values()))) for c in each]
            self._short = tuple(i for i, (n, need) in enumerate(zip(rows, self._need)) if n < need)
            self._sized = cols
        if sources is None:  # closed by another thread meanwhile
            raise ValueError("the loader is closed")
        for i in self._short:
            recs = claim.recs if len(sources) == 1 else claim.recs[claim.ords == i]
            sources[i]._check_bounds(recs)

    def shutdown(self) -> None:
        # the loader closes: the dataset and the chunks (views of its columns) go now,
        # not when the collector frees the loader and this plan (they refer to each other)
        self.dataset = self.sources = self._sized = None
        self._mix = (-1, None, [])
        self._copy = (None, 0, None)
        if self.ahead is not None:
            self.ahead.release()

    def _fill(self, claim: Any, out: Mapping[str, np.ndarray]) -> None:
        cols = self._cols()
        if not cols:
            return super()._fill(claim, out)
        if cols is not self._sized or self._short:
            self._bounds(cols, claim, self.sources or [self.dataset])
        size = claim.size
        ahead = self.ahead
        if ahead is not None:
            # The claim's rows from their chunk, gathered ahead by the threads: a copy of
            # contiguous rows where the caller would gather them. The block is the
            # claim's if it holds the claim's positions in the claim's pass (a block is
            # a pure function of those): read after the claim, another thread's claim
            # may have moved it on, and then the caller gathers.
            block = self.loader._blocks.block
            if (
                block is not None
                and block[5] == claim.gen
                and block[0] <= claim.start
                and claim.stop <= block[4]
                and (fields := ahead.fields(claim, block, cols)) is not None
            ):
                for n, a in fields.items():
                    out[n][:size] = a
                return None
        if isinstance(cols, tuple):  # a mix
            take_mixed(cols, claim.ords, claim.recs, out=out)
            return None
        # the order's records are in range: "clip" spares numpy a buffered copy
        for n, col in cols.items():
            np.take(col, claim.recs, axis=0, out=out[n][:size], mode="clip")
        return None


class DevicePlan(LocalPlan):
    """The datasets' columns on the device; a batch is gathered there."""

    def __init__(self, loader: Any) -> None:
        super().__init__(loader)
        self._device: DeviceColumns | None = None
        self._lock = threading.Lock()

    def columns(self) -> DeviceColumns:
        if self._device is None:
            with self._lock:
                if self._device is None:
                    loader = self.loader
                    if loader.options.check_values:
                        for ds in loader._datasets:
                            ds.check_values()
                    self._device = DeviceColumns(
                        loader._datasets, dict(loader.record.fields), loader.options.device
                    )
        return self._device

    def shutdown(self) -> None:
        # the loader closes: the columns' copies on the device are freed now (the loader
        # and this plan refer to each other: only the collector would free them)
        with self._lock:
            self._device = None

    def _make(self, c: Any) -> Any:
        loader = self.loader
        rows = loader.rows_for(c.size)
        t = perf_counter_ns()
        dev = self.columns()
        # From one dataset and all of the share's positions, the claim's rows are cut
        # from a chunk of its order block (``DeviceColumns.chunked``; ``chunks``: where no
        # write to the columns can be missed). The block is the
        # claim's if it holds the claim's positions in the claim's pass (a block is a
        # pure function of those); read after the claim, another thread may have moved
        # it on, and then the claim is gathered alone.
        block = getattr(loader._blocks, "block", None)
        got = None
        if (
            block is not None
            and dev.chunks
            and c.pos is None
            and len(loader._datasets) == 1
            and loader._ledger.share[1] == 1
            and block[5] == c.gen
            and block[0] <= c.start
            and c.stop <= block[4]
        ):
            got = dev.chunked(block, c.start, c.stop, loader.options.batch_size)
        fields = dev.gather(c.ords, c.recs, rows, got)
        clock.add("read", perf_counter_ns() - t)  # on the device
        return loader.finish(Batch(fields, c.size, rows, c.pos0, c.ords, c.recs))
