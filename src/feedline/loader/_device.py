"""Datasets kept on the device: checked once, copied once, gathered there per batch.

A loader with ``device=`` (or ``output="torch"``) over datasets held in memory (dicts
of arrays, ``TensorDataset``s whose items are their rows) copies their columns to the
device once, when they take at most a quarter of the device's free memory (always on
the CPU, where the tensors share the arrays' memory), and gathers each batch there
with one ``index_select`` per field: no workers, no host copy and no check per batch
(on the CPU, one plain dataset's batches take the plain path instead: ``_plan``).
A ``TensorDataset``'s tensors are copied again when they change (their version
counters tell, in-place changes included).

From one dataset, the rows of several batches are gathered at once (a *chunk*, one
``index_select`` per field of up to ``_CHUNK_BATCHES`` batches) and each batch is a view
of its chunk, its own rows only: a kernel launch and a host-to-device copy of indices
cost tens of microseconds a batch, more than the gather itself. The order block's
records go to the device once (``block_records``). A chunk is a pure function of the
block's records, the positions and the columns it was gathered from (its key holds all
three), so a batch holds the same rows whichever chunk it was cut from.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from ._gather_ahead import _unwritten
from ._util import torch_dtype

# Batches a chunk holds at most, and its bytes at most. Measured on an H200 (issue 20,
# benchmarks/device.py, fresh processes), 4,000,000 rows of 264 bytes in batches of 512
# against two bare ``index_select`` calls a batch on indices already on the device: a
# batch at a time (its indices copied over each time) 0.52x, chunks of 16 batches 0.91x
# in the steady state (0.55x in the first pass, which copies the columns over).
_CHUNK_BATCHES = 16
_CHUNK_BYTES = 64 << 20


class DeviceColumns:
    """The columns of in-memory datasets as tensors on one device."""

    def __init__(self, datasets: list, fields: dict, device: Any) -> None:
        import torch

        self.torch = torch
        self.device = torch.device(device if device is not None else "cpu")
        self.datasets = datasets
        self.fields = fields
        self._tensors: list[dict[str, Any]] = [{} for _ in datasets]
        self._versions: list[tuple | None] = [None for _ in datasets]
        self.row_bytes = sum(
            int(np.prod(f.shape, dtype=np.int64)) * np.dtype(f.dtype).itemsize
            for f in fields.values()
        )
        # Chunks where the tensors are copies (a GPU's), or over memory nothing writes: on
        # the CPU they are the arrays themselves, and a batch gathered ahead in a chunk
        # would miss a write that the next batch must show (as on the plain path).
        self.chunks = self.device.type != "cpu" or all(
            _unwritten(c) for ds in datasets for c in ds.columns.values()
        )
        # (order block, its records on the device); the last chunk (``chunked``): each
        # one tuple, replaced whole (threads may gather at once)
        self._block: tuple[Any, Any] | None = None
        self._chunk: tuple[Any, int, Any, dict[str, Any]] | None = None

    @staticmethod
    def fits(datasets: list, device: Any) -> bool:
        """Whether the datasets' columns take at most a quarter of the device's free memory."""
        import torch

        dev = torch.device(device if device is not None else "cpu")
        if dev.type == "cpu":
            return True
        if dev.type != "cuda":
            return False
        free, _ = torch.cuda.mem_get_info(dev)
        need = sum(sum(c.nbytes for c in ds.columns.values()) for ds in datasets)
        return need <= free // 4

    def _source_versions(self, ds: Any) -> tuple | None:
        tensors = getattr(ds.source, "tensors", None)
        if tensors is None:
            return None
        return tuple(t._version for t in tensors)

    def tensors(self, k: int) -> dict[str, Any]:
        ds = self.datasets[k]
        versions = self._source_versions(ds)
        if not self._tensors[k] or versions != self._versions[k]:
            if versions is not None and self._versions[k] is not None:
                ds.refresh()  # the TensorDataset changed: check and convert it again
            with warnings.catch_warnings():
                # read-only columns (over bytes, a file mapped to read): the tensors are
                # only ever read (index_select), never handed out
                warnings.filterwarnings("ignore", "The given NumPy array is not writable")
                self._tensors[k] = {
                    n: self.torch.from_numpy(np.ascontiguousarray(c)).to(self.device)
                    for n, c in ds.columns.items()
                }
            self._versions[k] = versions
        return self._tensors[k]

    def block_records(self, block: tuple) -> Any:
        """The order block's records (``OrderBlocks.block``) on the device."""
        held = self._block
        if held is None or held[0] is not block:
            recs = self.torch.from_numpy(np.ascontiguousarray(block[2])).to(self.device)
            held = self._block = (block, recs)
        return held[1]

    def chunked(self, block: tuple, start: int, stop: int, batch: int) -> dict[str, Any]:
        """Positions ``start .. stop`` of ``block`` (a single dataset's, all of this
        loader's share) as views of their chunk: the block's batches a chunk at a time
        from its first position."""
        cols = self.tensors(0)
        most = max(1, _CHUNK_BYTES // max(1, self.row_bytes * batch))
        span = min(_CHUNK_BATCHES, most) * batch
        lo = block[0] + (start - block[0]) // span * span
        hi = min(lo + span, block[4])
        held = self._chunk  # (block, first position, columns, rows): its key by identity
        if held is None or held[0] is not block or held[1] != lo or held[2] is not cols:
            idx = self.block_records(block)[lo - block[0] : hi - block[0]]
            held = (block, lo, cols, {n: t.index_select(0, idx) for n, t in cols.items()})
            self._chunk = held
        a, z = start - lo, stop - lo
        return {n: t[a:z] for n, t in held[3].items()}

    def gather(
        self, ords: np.ndarray, recs: np.ndarray, rows: int, out: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """The batch of records ``recs`` of datasets ``ords``, padded to ``rows`` (with
        ``out``, its real rows already gathered, from ``chunked``)."""
        torch = self.torch
        size = len(recs)
        if out is not None or len(self.datasets) == 1 or (size and ords.min() == ords.max()):
            if out is None:
                idx = torch.from_numpy(np.ascontiguousarray(recs)).to(self.device)
                cols = self.tensors(int(ords[0]) if size else 0)
                out = {n: t.index_select(0, idx) for n, t in cols.items()}
            if rows == size:
                return out
            padded = {}
            for n, t in out.items():
                full = torch.zeros((rows, *t.shape[1:]), dtype=t.dtype, device=self.device)
                full[:size] = t
                padded[n] = full
            return padded
        idx = torch.from_numpy(np.ascontiguousarray(recs)).to(self.device)
        out = {
            n: torch.zeros((rows, *f.shape), dtype=torch_dtype(torch, f.dtype), device=self.device)
            for n, f in self.fields.items()
        }
        for o in np.unique(ords):
            sel = np.flatnonzero(ords == o)
            where = torch.from_numpy(sel).to(self.device)
            cols = self.tensors(int(o))
            for n, t in cols.items():
                out[n].index_copy_(0, where, t.index_select(0, idx[where]))
        return out
