"""Compiled kernels (numba, the ``fast`` extra) for the ordering hot paths.

Each kernel computes exactly what the numpy path computes, bit for bit (the same
integer arithmetic; the same IEEE double expressions in the same order, without
fused multiply-add), and the tests check the two against each other. numba is
imported on first use, never at ``import feedline``; set ``FEEDLINE_NUMBA=0`` to
use the numpy path. Compiled code is cached on disk, so a second process does not
pay the compile time.
"""

from __future__ import annotations

import os
import threading
from typing import Any

_lock = threading.Lock()
_state: dict[str, Any] = {}
_local = threading.local()


def enabled() -> bool:
    """Whether compiled kernels are in use (numba installed and not disabled)."""
    return get() is not None


def get(background: bool = False):
    """The kernel namespace, or None when numba is missing or disabled.

    Inside ``deferred()``, a thread that finds the kernels not yet loaded gets None
    (the numpy path, same results) instead of waiting for numba to load; with
    ``background``, numba starts loading meanwhile (``load_in_background``). A path
    asks for that where its numpy fallback is several times slower than its kernel (a
    mix's merge); a shuffle's does not: loading numba costs a second of CPU and holds
    the GIL, which a fresh process's first pass would pay (see ``order._perm``).
    """
    if "k" in _state:
        return _state["k"]
    if getattr(_local, "defer", False):
        if background:
            load_in_background()
        return None
    with _lock:
        if "k" not in _state:
            _state["k"] = _build() if os.environ.get("FEEDLINE_NUMBA", "1") != "0" else None
    return _state["k"]


class deferred:
    """Within this block, use the numpy path until the kernels have loaded.

    A loader's first batch should not wait a third of a second for numba to import;
    ``load_in_background`` loads them meanwhile.
    """

    def __enter__(self) -> None:
        self._before = getattr(_local, "defer", False)
        _local.defer = True

    def __exit__(self, *exc: object) -> None:
        _local.defer = self._before


def load_in_background() -> None:
    """Start loading the kernels in a daemon thread (once); returns at once.

    A process that forks while that thread imports numba would give the child an import
    lock that no thread of the child will release (torch's DataLoader forks its workers):
    a fork waits for the loading to finish first.
    """
    if "k" in _state or "loading" in _state:
        return
    with _lock:
        if "k" in _state or "loading" in _state:
            return
        _state["loading"] = True
        thread = threading.Thread(target=get, name="feedline-kernels", daemon=True)
        _state["thread"] = thread
        if hasattr(os, "register_at_fork"):
            os.register_at_fork(before=_finish_loading)
    thread.start()


def _finish_loading() -> None:
    """Before a fork: let the loading thread finish (see ``load_in_background``)."""
    thread = _state.get("thread")
    if thread is not None and thread.is_alive() and thread is not threading.current_thread():
        thread.join()


def _build():
    try:
        from . import _jit
    except ImportError:
        return None
    return _jit


_ready: set = set()  # (kernel name, signature key) whose machine code is loaded
_warming: dict = {}  # the same -> the thread loading it


def when_ready(name: str, key: Any, warm: Any) -> Any:
    """Kernel ``name`` if its machine code for ``key`` (say, a dtype) is loaded, else
    None: the caller takes the numpy path while a daemon thread runs ``warm(kernel)``
    (a call on tiny arrays of that signature, which loads or compiles it). A kernel's
    first call of a signature costs numba a third of a second or more: never a batch's.
    """
    if (name, key) in _ready:
        return getattr(_state["k"], name)
    with deferred():
        k = get()
    if k is None:
        load_in_background()
        return None
    with _lock:
        if (name, key) in _ready:
            return getattr(k, name)
        if (name, key) not in _warming:

            def run() -> None:
                try:
                    warm(getattr(k, name))
                except Exception:  # a signature numba cannot compile (float16): numpy's path
                    return  # for good (the key stays in ``_warming``: no thread again)
                _ready.add((name, key))

            thread = threading.Thread(target=run, name=f"feedline-{name}", daemon=True)
            _warming[(name, key)] = thread
            if not _state.get("warm_fork_hook") and hasattr(os, "register_at_fork"):
                os.register_at_fork(before=_finish_warming)
                _state["warm_fork_hook"] = True
            thread.start()
    return None


def _finish_warming() -> None:
    """Before a fork: let the threads loading kernels finish (see ``load_in_background``)."""
    for thread in list(_warming.values()):
        if thread.is_alive() and thread is not threading.current_thread():
            thread.join()
