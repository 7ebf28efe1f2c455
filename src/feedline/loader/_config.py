"""The process-wide number of loader workers: ShapeScript's ``loader_workers(n)``.

"Batches are built by worker processes, 4 unless the machine has fewer CPUs;
``loader_workers(n)`` changes that, and 0 loads them in the calling process."
A ``Loader`` built with ``workers=None`` (the default) takes this number when it is
built; ``workers=N`` overrides it for that loader.
"""

from __future__ import annotations

import os
import sys
import threading

from ._util import check_int

# At most this many workers by default (ShapeScript's 4). They start only where a batch
# needs Python per example or per batch (maps, item-by-item sources, batch transforms);
# measured by benchmarks/workers.py on a 2-core machine (2 workers, load average 0.8),
# examples/s in process -> through the workers: Dataset.map 0.084 -> 0.129 M (1.5x), a
# 50 us-per-item source 0.018 -> 0.032 M (1.8x), a batch transform with Python per row
# 0.14 -> 0.18 M (1.3x). Plain gathers stay in process whatever the number: arrays in
# memory 13.6 -> 3.4 M/s (0.25x), a memory-mapped .flr 17.1 -> 3.6 M/s (0.21x). A batch
# transform of a few numpy calls over arrays in memory is the case the default loses
# (3.4 -> 0.48 M/s): there workers=0 is the faster choice.
_DEFAULT_MAX = 4

_lock = threading.Lock()
_setting: int | None = None
_UNSET = object()


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity mask where the OS has one)."""
    count = getattr(os, "process_cpu_count", None)
    if count is not None:
        n = count()
    elif hasattr(os, "sched_getaffinity"):
        n = len(os.sched_getaffinity(0))
    else:
        n = os.cpu_count()
    return max(1, n or 1)


def _in_torch_worker() -> bool:
    """Whether this process is a torch DataLoader worker (its batches are already made
    in parallel processes: workers of its own would only compete with its siblings)."""
    torch = sys.modules.get("torch")
    data = getattr(getattr(torch, "utils", None), "data", None)
    info = getattr(data, "get_worker_info", None)
    return info is not None and info() is not None


def default_workers() -> int:
    """The workers a loader built now with ``workers=None`` starts."""
    if _setting is not None:
        return _setting
    if _in_torch_worker():
        return 0
    return min(_DEFAULT_MAX, usable_cpus())


def workers_are_set() -> bool:
    """Whether ``loader_workers(n)`` chose the number (rather than the machine)."""
    return _setting is not None


def loader_workers(n: int | None = _UNSET) -> int | None:  # type: ignore[assignment]
    """Read or set the number of worker processes loaders start by default.

    ==========================  ===================================================
    call                        effect
    ==========================  ===================================================
    ``loader_workers()``        returns the number a ``Loader(..., workers=None)``
                                built now starts: the setting, else
                                ``min(4, usable CPUs)`` (0 inside a torch
                                DataLoader worker)
    ``loader_workers(n)``       sets it to ``n >= 0`` for the whole process (0: load
                                in the calling process); returns the previous
                                setting (None when there was none)
    ``loader_workers(None)``    back to the machine's default; returns the previous
                                setting
    ==========================  ===================================================

    The number is read when a loader is built; ``workers=N`` overrides it for one
    loader. Workers are used only where they make batches faster: arrays in memory and
    memory-mapped files are gathered in the calling process whatever the number.

    >>> import feedline as fl
    >>> previous = fl.loader_workers(0)
    >>> fl.loader_workers()
    0
    >>> fl.loader_workers(previous) == 0
    True
    """
    global _setting
    if n is _UNSET:
        return default_workers()
    if n is not None:
        n = check_int("loader_workers", n, 0)
    with _lock:
        previous, _setting = _setting, n
    return previous
