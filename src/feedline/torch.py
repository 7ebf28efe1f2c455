"""PyTorch integration: a loader as a ``torch.utils.data.IterableDataset``.

::

    import feedline as fl
    from torch.utils.data import DataLoader

    batches = fl.torch.IterableDataset(dataset_or_seq, 512, seed=1)
    for batch in DataLoader(batches, batch_size=None, num_workers=2):
        batch.x, batch.y                  # torch tensors, batch axis first

Inside a ``DataLoader`` with ``num_workers=K``, torch worker ``w`` makes batches
``w, w + K, ...`` of each pass; torch hands them out in turn, so the stream is the
loader's own, every example exactly once, whatever ``K`` is, epoch after epoch (each a
new pass, reshuffled). Workers that are not persistent start afresh, from a pickled
copy, for every epoch: each worker records the passes it has finished in a small file
beside the dataset's configuration, and the next epoch's workers start after the
passes all of them finished (an epoch left part-way is made again, from its start).
``set_epoch(e)`` (as with torch's ``DistributedSampler``) makes pass ``e`` next
instead.
``state_dict`` and ``load_state_dict`` have the form torchdata's ``StatefulDataLoader`` calls on a
dataset (in each worker), so its checkpoints resume exactly. ``shard="auto"`` is the
default: under ``torch.distributed`` (or torchrun's environment) each rank takes its
share of the positions, and ``even=True`` is the default, so every rank takes the same
number of steps (``even=False`` to turn it off).

Needs PyTorch: ``pip install 'feedline[torch]'``.
"""

from __future__ import annotations

import contextlib
import os
import struct
import tempfile
import weakref
from typing import Any

try:
    import torch as _torch
    from torch.utils.data import IterableDataset as _TorchIterable
    from torch.utils.data import get_worker_info
except ImportError as e:  # pragma: no cover - exercised where torch is missing
    raise ImportError("feedline.torch needs PyTorch: pip install 'feedline[torch]'") from e

from .loader import Loader

__all__ = ["IterableDataset"]


class IterableDataset(_TorchIterable):
    """A feedline loader as a torch ``IterableDataset`` yielding ``fl.Batch`` objects of
    tensors (use ``DataLoader(..., batch_size=None)``).

    ``source`` and the options are ``fl.Loader``'s; ``output`` is ``"torch"``. The loader
    is built inside each torch worker (only the configuration is pickled).
    """

    def __init__(self, source: Any, batch_size: int, **loader_options: Any) -> None:
        super().__init__()
        if loader_options.get("split") is None:  # a split is the ranks' slice instead
            loader_options.setdefault("shard", "auto")
        # Every rank takes the same number of steps (the short ranks' last batch padded
        # with masked examples): a DDP job whose ranks differ by one batch hangs at the
        # last collective. fl.jax has the same default.
        loader_options.setdefault("even", True)
        loader_options.setdefault("output", "torch")
        self.source = source
        self.batch_size = batch_size
        self.options = loader_options
        self._loader: Loader | None = None
        self._made_in: tuple[int, int | None] | None = None  # (pid, torch worker id)
        self._pending_state: dict | None = None
        self._epoch: int | None = None
        # Validate the configuration now, in the calling process.
        Loader(source, batch_size, **loader_options).close()
        self._passes = _Passes()

    def _make(self) -> Loader:
        info = get_worker_info()
        here = (os.getpid(), None if info is None else info.id)
        if self._loader is not None and self._made_in != here:
            # A loader built in another process (the parent's, copied by a fork into a
            # torch worker): it is not this worker's share, and its workers are not ours.
            self._loader = None
        if self._loader is None:
            loader = Loader(self.source, self.batch_size, **self.options)
            self._made_in = here
            if info is not None and info.num_workers > 1:
                loader.share_batches(info.id, info.num_workers)
            if self._pending_state is not None:
                loader.load_state_dict(self._pending_state)
                self._pending_state = None
            elif info is not None and self._epoch is None:
                done = self._passes.finished_by_all(info.num_workers)
                if done:  # a fresh worker of a later epoch: the next pass
                    loader.reset(epoch=done)
            self._loader = loader
        return self._loader

    def set_epoch(self, epoch: int) -> None:
        """Make pass ``epoch`` next (from its start, unless the loader is already in it):
        call it before each epoch when torch's workers are not persistent."""
        if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
            raise ValueError(f"epoch must be an int >= 0, got {epoch!r}")
        self._epoch = epoch

    def __iter__(self):
        loader = self._make()
        if self._epoch is not None:  # applied once by each copy (a persistent worker's
            # copy never sees a later set_epoch: its passes follow on by themselves)
            upcoming = loader.epoch + 1 if loader._ledger.finished() else loader.epoch
            if upcoming != self._epoch:  # a fresh worker's copy, or a jump
                loader.reset(epoch=self._epoch)
            self._epoch = None
        return self._pass(loader)

    def _pass(self, loader: Loader) -> Any:
        yield from loader
        info = get_worker_info()
        if info is not None:  # this worker's share of the pass is done
            self._passes.record(info.id, loader.epoch + 1)

    def __len__(self) -> int:
        return len(Loader(self.source, self.batch_size, **self.options))

    def state_dict(self) -> dict:
        """The loader's state (in a torch worker: that worker's share)."""
        return self._make().state_dict()

    def load_state_dict(self, state: dict) -> None:
        """Resume after the batches recorded in ``state`` (applied in each worker)."""
        if self._loader is None:
            self._pending_state = dict(state)
        else:
            self._loader.load_state_dict(state)

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_loader"] = None  # each worker builds its own
        return state


class _Passes:
    """The passes each torch worker of a dataset has finished: 8 bytes per worker in a
    small file, made by the process that built the dataset (removed with it), whose
    path travels in the pickled copies that torch gives the workers of every epoch."""

    def __init__(self) -> None:
        fd, self.path = tempfile.mkstemp(prefix="feedline-torch-passes-")
        os.close(fd)
        weakref.finalize(self, _remove, self.path, os.getpid())

    def record(self, worker: int, passes: int) -> None:
        with contextlib.suppress(OSError):  # the dataset's owner has gone: nothing to tell
            fd = os.open(self.path, os.O_WRONLY)
            try:
                os.pwrite(fd, struct.pack("<Q", passes), 8 * worker)
            finally:
                os.close(fd)

    def finished_by_all(self, workers: int) -> int:
        """The passes every one of ``workers`` workers has finished (0 if unknown)."""
        try:
            with open(self.path, "rb") as f:
                data = f.read(8 * workers)
        except OSError:
            return 0
        if len(data) < 8 * workers:
            return 0
        return min(struct.unpack(f"<{workers}Q", data))

    def __reduce__(self) -> Any:  # a pickled copy (a worker's) refers to the same file
        return (_Passes._of, (self.path,))

    def __deepcopy__(self, memo: dict) -> _Passes:
        """A copy made in this process (``copy.deepcopy`` of the dataset): a file of its
        own, starting from this one's record, so neither outlives the other's."""
        twin = _Passes()
        with contextlib.suppress(OSError), open(self.path, "rb") as f, open(twin.path, "wb") as g:
            g.write(f.read())
        return twin

    @staticmethod
    def _of(path: str) -> _Passes:
        passes = _Passes.__new__(_Passes)
        passes.path = path
        return passes


def _remove(path: str, owner: int) -> None:
    if os.getpid() == owner:  # not from a forked worker's copy of the finalizer
        with contextlib.suppress(OSError):
            os.unlink(path)


def tensor(x: Any) -> Any:
    """``x`` as a torch tensor (a helper for batch transforms)."""
    return _torch.as_tensor(x)
