"""How a loader makes its batches: one plan, chosen when the loader is built.

=================  ========================================================================
plan               when
=================  ========================================================================
``PlainPlan``      datasets whose batch is nothing but a gather from arrays in memory or
                   a memory map (no map, no check, no padding; numpy out, or torch
                   tensors over the same memory): one claim and one ``take`` per field
                   (per source, for a mix), in the calling thread, or a chunk of
                   batches at a time shared with a gather thread (``_gather_ahead``)
``DevicePlan``     torch output, datasets in memory (on the CPU, where the plain path does
                   not serve: a mix, padding, checks, a transform): the columns live on
                   the device and a batch is one ``index_select`` per field there
``WorkerPlan``     batches that need Python (maps, item-by-item sources, batch transforms)
                   with ``workers > 0``: worker processes make them ahead, into shared
                   memory (``_workers``, ``_slots``), from pools kept for the loops over
                   a dataset (``_pools``); ragged fields are collated here, out of the
                   workers' memory, as in process
``LocalPlan``      everything else: read, map, collate and deliver in the calling thread
=================  ========================================================================

A plan is also what ``iter(loader)`` returns: an iterator with no ``close`` (so a
generator around it that is dropped part-way never closes the loader), whose
``__next__`` is its ``next``: nothing stands between a ``for`` loop and the plan.

Every plan claims from the loader's ledger and reports back to it (``Loader.deliver``):
a batch is delivered when it reaches the caller, passed over when its error does, and
made again when an interrupt (or a worker's death) keeps it from the caller.
"""

from __future__ import annotations

from typing import Any

from ._device import DeviceColumns
from ._local_plan import DevicePlan, LocalPlan, PlainPlan
from ._util import on_host
from ._worker_plan import WorkerPlan

__all__ = ["DevicePlan", "LocalPlan", "PlainPlan", "WorkerPlan", "choose_plan"]


def choose_plan(loader: Any) -> Any:
    """The plan of ``loader``, from its options and datasets."""
    opts = loader.options
    datasets = loader._datasets
    cheap = all(ds.cheap_gathers for ds in datasets) and opts.batch_transform is None
    if opts.workers > 0 and not cheap:
        # Arrays in memory and memory-mapped files gather faster here than batches
        # travel between processes (benchmarks/workers.py; the figures are beside the
        # default in _config.py), and sending arrays would copy them into every worker.
        return WorkerPlan(loader)
    if any(f.ragged for f in loader.record.fields.values()):
        return LocalPlan(loader)  # the device and plain paths gather fixed fields only
    if (
        not opts.check_values
        and (opts.output == "numpy" or (opts.output == "torch" and on_host(opts.device)))
        and opts.batch_transform is None
        and not opts.padded
        and (plain := _plain_sources(datasets)) is not None
    ):
        # Before the device path on the CPU: np.take and tensors over its arrays ran at
        # 1.2 - 1.3x an index_select a batch there (2,000,000 rows of 264 bytes in
        # memory, batches of 512, passes alternated in one process; in fresh processes
        # alternated, 8 rounds, a median 1.37x, 0.90 - 1.80x, load average 1.1 - 1.6).
        # A mix's batch here is one take per field per source (``take_mixed``): 1.57x the
        # general path's rows/s in the steady state, 1.23x in a fresh process's first
        # pass (two .flr files of 1,000,000 rows of 264 bytes, mixed evenly, batches of
        # 512; benchmarks/mix.py, 3 rounds).
        return PlainPlan(loader, plain)
    if (
        opts.output == "torch"
        and all(ds.in_memory and not ds.mapped for ds in datasets)
        and DeviceColumns.fits(datasets, opts.device)
    ):
        return DevicePlan(loader)
    return LocalPlan(loader)


def _plain_sources(datasets: list) -> Any:
    """The dataset (or a mix's list of them) whose batches are nothing but takes from
    arrays: unmapped, with columns in memory or memory-mapped, and for a mix the same
    fields of the same dtypes and row shapes in every source; None otherwise."""
    if any(ds.mapped or (ds.columns is None and not ds._mapped_columns) for ds in datasets):
        return None
    if len(datasets) == 1:
        return datasets[0]
    shapes = [
        {n: (a.dtype, a.shape[1:]) for n, a in (ds._columns or ds._mapped_columns).items()}
        for ds in datasets
    ]
    return list(datasets) if all(s == shapes[0] for s in shapes) else None
