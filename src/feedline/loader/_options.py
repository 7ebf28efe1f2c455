"""A loader's options, as data: one frozen dataclass, checked once, one meaning each.

=====================  ====================================================================
option                 meaning (the same for every kind of source)
=====================  ====================================================================
``batch_size``         examples per batch (``n`` in ShapeScript's ``batches(n)``)
``seed``               the seed of the order's shuffles: a plain source's records are
                       shuffled with it (``None`` or ``<= 0``: in order, data.nu's rule);
                       a ``Seq``'s shuffles are reseeded by it (the order seed)
``shard``              ``(index, count)`` or ``"auto"``: the pass's positions dealt
                       round-robin to ranks, after shuffling (``"auto"``: this process's
                       rank in torch.distributed, torchrun or JAX)
``split``              ``(index, count)``: data.nu's contiguous slice
                       ``[index*n//count, (index+1)*n//count)`` of the positions, taken
                       before shuffling (so a plain source is shuffled within its slice)
``even``               with ``shard``: every rank takes the same number of steps (the
                       short ranks' last batch padded with masked examples)
``drop_last`` ``pad``  the last partial batch dropped, or padded to ``batch_size`` with
                       masked rows (data.nu's words); without either it is kept short
``workers``            worker processes for batches that need Python (``None``: the
                       process-wide ``fl.loader_workers()``); plain gathers stay here
``prefetch``           batches made ahead per worker, at most 64
``threads``            threads gathering plain batches (rows of memory-mapped files, read
                       only) in this process, a chunk of batches at a time: ``None`` is 2
                       with two CPUs or more, the helper only while a core is spare
                       (``_gather_ahead``), 1 the calling thread alone, batch by batch;
                       the batches are the same for any number
``device``             a torch device: batches (and in-memory datasets) go there
``output``             ``"numpy"`` or ``"torch"`` (implied by ``device``)
``check_values``       check every example's domains as it loads
``batch_transform``    a function of each ``Batch``; its result is what iteration yields
``timeout``            seconds a worker may take over one batch before a ``WorkerError``
                       naming the batch and the worker (``None``: no limit)
``pad_to_multiple``    a varying dim is padded to the batch's longest example rounded up
                       to a multiple of this (8: tensor cores)
``pad_to``             boundaries (ascending ints, or a dict dim -> boundaries): a varying
                       dim is padded to the smallest boundary that holds the batch's
                       longest example (static shapes for XLA); a longer one is an error
``bucket``             a varying dim: batches of similar lengths on it, drawn from groups
                       of ``bucket_batches`` batches of the order (``_buckets``)
``bucket_batches``     batches per bucketing group (64): more sorts wider, less padding
``progress``           a tqdm bar over each pass: rows/s and the share of the time the
                       caller waited (``loader.stats()`` has the figures at any time)
``nested``             varying fields as torch nested tensors (jagged layout, one varying
                       axis, the first) instead of padded ones; ``output="torch"`` only
=====================  ====================================================================
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from ._config import default_workers
from ._gather_ahead import default_threads
from ._ranks import detect_rank
from ._util import check_int

# A state records the seed as a JSON integer: int64 for negative seeds, uint64 for the rest.
SEED_MIN, SEED_MAX = -(1 << 63), (1 << 64) - 1
# Slots of shared memory per worker: more only holds memory, the workers stay as busy.
MAX_PREFETCH = 64


def _flag(name: str, value: Any) -> bool:
    """A yes/no option: a bool (a string such as ``"no"`` would be true)."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be True or False, got {value!r}")
    return bool(value)


def _pair(name: str, value: Any) -> tuple[int, int]:
    if not (isinstance(value, tuple) and len(value) == 2):
        raise ValueError(f"{name} is (index, count), got {value!r}")
    index = check_int(f"{name} index", value[0], 0)
    count = check_int(f"{name} count", value[1], 1)
    if index >= count:
        raise ValueError(f"{name} index must be < count, got {index} of {count}")
    return index, count


def _ascending(name: str, value: Any) -> tuple[int, ...]:
    if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
        raise TypeError(f"{name} is a sequence of ascending ints, got {value!r}")
    bounds = tuple(check_int(name, b, 1) for b in value)
    if not bounds or any(a >= b for a, b in itertools.pairwise(bounds)):
        raise ValueError(f"{name} is a non-empty sequence of ascending ints, got {value!r}")
    return bounds


def _boundaries(value: Any) -> tuple[int, ...] | tuple[tuple[str, tuple[int, ...]], ...]:
    """``pad_to``: boundaries for every varying dim, or a dict dim -> boundaries."""
    if isinstance(value, dict):
        if not value:
            raise ValueError("pad_to is boundaries or a dict dim -> boundaries, got {}")
        for k in value:
            if not isinstance(k, str):
                raise TypeError(f"pad_to: a dim is named by a str, got {k!r}")
        return tuple(sorted((k, _ascending(f"pad_to[{k!r}]", v)) for k, v in value.items()))
    return _ascending("pad_to", value)


@dataclass(frozen=True, kw_only=True)
class LoaderOptions:
    """A loader's options (``loader.options``), checked when it is built. ``shard`` is
    resolved: ``"auto"`` becomes this process's ``(rank, ranks)``."""

    batch_size: int
    seed: int | None = None
    shard: tuple[int, int] | None = None
    auto_shard: bool = False
    split: tuple[int, int] | None = None
    even: bool = False
    drop_last: bool = False
    pad: bool = False
    workers: int = 0
    workers_default: bool = False
    prefetch: int = 2
    threads: int = 1
    threads_default: bool = False
    device: Any = None
    output: Literal["numpy", "torch"] = "numpy"
    check_values: bool = False
    batch_transform: Callable[[Any], Any] | None = None
    timeout: float | None = None
    pad_to_multiple: int | None = None
    pad_to: tuple[int, ...] | tuple[tuple[str, tuple[int, ...]], ...] | None = None
    bucket: str | None = None
    bucket_batches: int = 64
    nested: bool = False
    progress: bool = False

    @classmethod
    def make(
        cls,
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
        batch_transform: Callable[[Any], Any] | None = None,
        timeout: float | None = None,
        pad_to_multiple: int | None = None,
        pad_to: Any = None,
        bucket: str | None = None,
        bucket_batches: int = 64,
        nested: bool = False,
        progress: bool = False,
    ) -> LoaderOptions:
        """The options of ``Loader(source, batch_size, **options)``, checked; every error
        names its option."""
        batch_size = check_int("batch_size", batch_size, 1)
        if seed is not None:
            seed = check_int("seed", seed, SEED_MIN, SEED_MAX)
        even, drop_last, pad, check_values = (
            _flag("even", even),
            _flag("drop_last", drop_last),
            _flag("pad", pad),
            _flag("check_values", check_values),
        )
        auto = False
        if shard == "auto":
            shard, auto = detect_rank(), True
        elif shard is not None:
            shard = _pair("shard", shard)
        if split is not None:
            split = _pair("split", split)
            if shard is not None:
                raise ValueError(
                    "shard and split exclude each other: shard deals the "
                    "positions to ranks, split slices them"
                )
        # even is about ranks: without a shard there is nothing to even out
        even = even and shard is not None
        if drop_last and pad:
            raise ValueError(
                "drop_last and pad exclude each other: the last partial batch is "
                "either dropped or padded"
            )
        # None: fl.loader_workers(), else min(4, usable CPUs) (ShapeScript's default; the
        # measurement behind it is beside _config._DEFAULT_MAX). Workers start only for
        # datasets that need Python per batch (see _plan).
        workers_default = workers is None
        workers = default_workers() if workers is None else check_int("workers", workers, 0)
        prefetch = check_int("prefetch", prefetch, 1, MAX_PREFETCH)
        threads_default = threads is None
        threads = default_threads() if threads is None else check_int("threads", threads, 1)
        if output is None:
            output = "numpy" if device is None else "torch"
        if output not in ("numpy", "torch"):
            raise ValueError(f"output must be 'numpy' or 'torch', got {output!r}")
        if device is not None and output != "torch":
            raise ValueError(
                f"device={device!r} puts batches on a torch device: output must be "
                f"'torch' (or left out), got {output!r}"
            )
        if batch_transform is not None and not callable(batch_transform):
            raise TypeError(
                f"batch_transform must be callable, got {type(batch_transform).__name__}"
            )
        if timeout is not None:
            if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
                raise TypeError(
                    f"timeout must be a number of seconds, got {type(timeout).__name__}"
                )
            if not (timeout > 0 and math.isfinite(timeout)):
                raise ValueError(f"timeout must be a positive number of seconds, got {timeout}")
            timeout = float(timeout)
        if pad_to_multiple is not None:
            pad_to_multiple = check_int("pad_to_multiple", pad_to_multiple, 1)
        if pad_to is not None:
            if pad_to_multiple is not None:
                raise ValueError(
                    "pad_to and pad_to_multiple exclude each other: a varying dim pads "
                    "either to a boundary or to a multiple"
                )
            pad_to = _boundaries(pad_to)
        if bucket is not None and not isinstance(bucket, str):
            raise TypeError(f"bucket is the name of a varying dim, got {bucket!r}")
        bucket_batches = check_int("bucket_batches", bucket_batches, 1)
        nested = _flag("nested", nested)
        progress = _flag("progress", progress)
        if nested and output != "torch":
            raise ValueError(
                f"nested=True makes torch nested tensors: output must be 'torch', got {output!r}"
            )
        if nested and (pad_to is not None or pad_to_multiple is not None):
            raise ValueError("nested=True does not pad: pad_to and pad_to_multiple do not apply")
        return cls(
            batch_size=batch_size,
            seed=seed,
            shard=shard,
            auto_shard=auto,
            split=split,
            even=bool(even),
            drop_last=bool(drop_last),
            pad=bool(pad),
            workers=workers,
            workers_default=workers_default,
            prefetch=prefetch,
            threads=threads,
            threads_default=threads_default,
            device=device,
            output=output,
            check_values=bool(check_values),
            batch_transform=batch_transform,
            timeout=timeout,
            pad_to_multiple=pad_to_multiple,
            pad_to=pad_to,
            bucket=bucket,
            bucket_batches=bucket_batches,
            nested=nested,
            progress=progress,
        )

    @property
    def pad_bounds(self) -> Any:
        """``pad_to`` as ``_collate`` takes it: one tuple for every dim, or a dict."""
        pad_to = self.pad_to
        if pad_to and isinstance(pad_to[0], tuple):
            return dict(pad_to)
        return pad_to

    @property
    def padded(self) -> bool:
        """Every batch has ``batch_size`` rows (``pad``, or even steps across ranks)."""
        return self.pad or (self.even and self.shard is not None)

    def stream(self) -> dict[str, Any]:
        """The options that decide which examples a state's batches hold (they are
        recorded in a state and must match when it loads; the rank and the number of
        ranks may change, see ``_state``)."""
        return {
            "batch_size": self.batch_size,
            "drop_last": self.drop_last,
            "pad": self.pad,
            "even": self.even,
            "split": list(self.split) if self.split else None,
            "sharded": self.shard is not None,
            # bucketing decides which examples share a batch (absent without it, so the
            # states saved before it existed still load)
            **({"bucket": [self.bucket, self.bucket_batches]} if self.bucket else {}),
        }
