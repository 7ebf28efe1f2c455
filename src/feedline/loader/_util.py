"""Small helpers of the loader: argument checks, sources as datasets, tensors."""

from __future__ import annotations

import weakref
from collections.abc import Mapping
from typing import Any, cast

import numpy as np

from ..errors import RecordError
from ..records._ragged import Ragged
from ..sources import Dataset


class Plan:
    """What every plan has: its loader, which also holds the plan. The plan refers to
    it strongly only while a pass is iterated (``Loader.__iter__`` sets ``_held``, the
    pass's end clears it), so that a loader dropped after its pass is freed by reference
    counts, with its device columns and file maps, not at the collector's next run; an
    iterator alone (``iter(fl.Loader(...))``) keeps its loader for the pass."""

    def __init__(self, loader: Any) -> None:
        self._ref = weakref.ref(loader)
        self._held: Any = None

    @property
    def loader(self) -> Any:
        held = self._held
        if held is not None:
            return held
        got = self._ref()
        if got is None:  # an iterator kept past its pass's end, its loader dropped
            raise StopIteration
        return got


def as_dataset(src: Any) -> Dataset:
    if isinstance(src, Dataset):
        return src
    if isinstance(src, Mapping):
        return Dataset.from_arrays(**src)
    record = getattr(src, "record", None)
    if record is not None and hasattr(src, "__len__"):
        return Dataset(record, src)
    raise TypeError(
        f"the loader reads typed records: give it a fl.Dataset(Record, source), a dict of "
        f"arrays, or a Seq / Order over datasets, not a {type(src).__name__}"
    )


def check_int(name: str, value: Any, minimum: int | None = None, maximum: int | None = None) -> int:
    """``value`` as an int in ``[minimum, maximum]``; the error names the option."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    value = int(value)
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise ValueError(f"{name} must be <= {maximum}, got {value}")
    return value


def torch_module() -> Any:
    """torch, or an ImportError naming the extra."""
    try:
        import torch
    except ImportError as e:
        raise ImportError("output='torch' needs PyTorch: pip install 'feedline[torch]'") from e
    return torch


def on_host(device: Any) -> bool:
    """Whether tensors for ``device`` stay in this process's memory (None or the CPU)."""
    return device is None or torch_module().device(device).type == "cpu"


def to_torch(fields: dict[str, Any], device: Any = None) -> dict[str, Any]:
    """Arrays as torch tensors (sharing their memory), moved to ``device`` if given."""
    torch = torch_module()
    out: dict[str, Any] = {}
    for n, a in fields.items():
        if isinstance(a, list):  # a bytes or str field: a list of them, as torch collates
            out[n] = a
            continue
        if isinstance(a, Ragged):  # nested=True: the jagged layout, no padding
            inner = cast("tuple[int, ...]", a.template[1:])  # fixed: one varying axis, the first
            size = int(np.prod(inner, dtype=np.int64)) if inner else 1
            values = torch.from_numpy(np.ascontiguousarray(a.values).reshape(-1, *inner))
            offsets = torch.from_numpy(a.offsets // size)
            if device is not None:
                values, offsets = values.to(device), offsets.to(device)
            out[n] = torch.nested.nested_tensor_from_jagged(values, offsets=offsets)
            continue
        t = torch.from_numpy(np.ascontiguousarray(a))
        if device is not None:
            dev = torch.device(device)
            t = t.pin_memory().to(dev, non_blocking=True) if dev.type == "cuda" else t.to(dev)
        out[n] = t
    return out


_CUDA: dict[str, bool] = {}  # str(device) -> whether it is a CUDA device


def torch_dtype(torch: Any, dtype: Any) -> Any:
    """The torch dtype of numpy's ``dtype``."""
    return torch.from_numpy(np.zeros(0, dtype=dtype)).dtype


def pinned_rows(fields: Mapping[str, Any], rows: int, device: Any) -> dict[str, Any] | None:
    """For a CUDA ``device``: torch tensors of ``rows`` rows of the record's fields in
    pinned host memory, to gather into and copy from without a copy between (torch's
    caching host allocator keeps each until its copy has landed); None for another
    device, or a record with ragged fields (collated into arrays of their own)."""
    key = str(device)
    cuda = _CUDA.get(key)
    if cuda is None:
        cuda = _CUDA[key] = device is not None and torch_module().device(device).type == "cuda"
    if not cuda or any(f.ragged for f in fields.values()):
        return None
    torch = torch_module()
    return {
        n: torch.empty((rows, *f.shape), dtype=torch_dtype(torch, f.dtype), pin_memory=True)
        for n, f in fields.items()
    }


def typed(seq: Any) -> Any:
    """``seq`` (a ``Seq``) with every typed source that is not a ``Dataset`` (a ``.flr``
    file, text windows: anything with a ``.record`` and a length) read through one: a
    typed source goes into an order without being wrapped by hand. The same source twice
    is one dataset."""
    made: dict[int, Dataset] = {}

    def untyped(src: Any) -> bool:
        return isinstance(src, Dataset) or getattr(src, "record", None) is None

    def wrap(src: Any) -> Any:
        if untyped(src):
            return src
        if id(src) not in made:
            made[id(src)] = as_dataset(src)
        return made[id(src)]

    return seq if all(untyped(s) for s in seq.sources()) else seq.map_sources(wrap)


def datasets_of(seq: Any) -> list[Dataset]:
    """The typed sources of a loader's order, of one record."""
    sources = seq.sources()
    if not sources:
        raise TypeError("the loader's order has no sources")
    for src in sources:
        if not isinstance(src, Dataset):
            raise TypeError(
                f"the loader reads typed records: every source of its order must be a "
                f"typed source (a fl.Dataset, a .flr file, text windows: anything with "
                f"a .record), found {type(src).__name__}"
            )
    datasets = cast("list[Dataset]", sources)  # each one checked just above
    first = datasets[0].record
    for ds in datasets[1:]:
        if ds.record is not first and not first.same_schema(ds.record):
            raise RecordError(
                f"one loader reads one record: its datasets' records differ:\n"
                f"{first.describe()}\n{ds.record.describe()}"
            )
    return list(datasets)
