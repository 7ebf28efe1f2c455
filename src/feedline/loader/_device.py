"""Datasets kept on the device: checked once, copied once, gathered there per batch.

A loader with ``device=`` (or ``output="torch"``) over datasets held in memory (dicts
of arrays, ``TensorDataset``s whose items are their rows) copies their columns to the
device once, when they take at most a quarter of the device's free memory (always on
the CPU, where the tensors share the arrays' memory), and gathers each batch there
with one ``index_select`` per field: no workers, no host copy and no check per batch.
A ``TensorDataset``'s tensors are copied again when they change (their version
counters tell, in-place changes included).
"""

from __future__ import annotations

from typing import Any

import numpy as np


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
            self._tensors[k] = {
                n: self.torch.from_numpy(np.ascontiguousarray(c)).to(self.device)
                for n, c in ds.columns.items()
            }
            self._versions[k] = versions
        return self._tensors[k]

    def gather(self, ords: np.ndarray, recs: np.ndarray, rows: int) -> dict[str, Any]:
        torch = self.torch
        size = len(recs)
        idx = torch.from_numpy(np.ascontiguousarray(recs)).to(self.device, non_blocking=True)
        if len(self.datasets) == 1 or (size and ords.min() == ords.max()):
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
        out = {
            n: torch.zeros((rows, *f.shape), dtype=_torch_dtype(torch, f.dtype), device=self.device)
            for n, f in self.fields.items()
        }
        for o in np.unique(ords):
            sel = np.flatnonzero(ords == o)
            where = torch.from_numpy(sel).to(self.device)
            cols = self.tensors(int(o))
            for n, t in cols.items():
                out[n].index_copy_(0, where, t.index_select(0, idx[where]))
        return out


def _torch_dtype(torch: Any, dtype: np.dtype) -> Any:
    return torch.from_numpy(np.zeros(0, dtype=dtype)).dtype
