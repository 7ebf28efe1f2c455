"""A compact corpus (a ``.flr`` of documents, as ``build(..., out="x.flr")`` writes it)
as the token flow ``Windows`` reads.

The file needs a ragged ``tokens`` column of one varying dim, in ``uint8``, ``uint16``
or ``uint32`` (so every id fits a window's int64); it may have a ``loss_mask`` column
(bool, the same lengths) and a scalar bool ``test`` column choosing each document's
subset (none: every document is a train one). A subset's documents are its rows in
file order; their tokens stay in the memory map, found by each document's first
element (``start``), so a batch is one kernel call (``fill_windows_typed``) or, without
numba, a handful of vectorised numpy gathers.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from .._base import kernels, windowfill
from ..errors import FormatError
from ..formats import recfile
from ..records import Ragged

__all__ = ["FlrCorpus", "is_flr_path"]

_TOKEN_DTYPES = ("uint8", "uint16", "uint32")


def is_flr_path(dataset: Any) -> bool:
    """Whether ``Windows`` reads ``dataset`` as a compact corpus: an open ``.flr`` or
    a path ending ``.flr``."""
    if isinstance(dataset, recfile.RecFile):
        return True
    return isinstance(dataset, (str, os.PathLike)) and os.fspath(dataset).lower().endswith(".flr")


class FlrCorpus:
    """One subset of a compact corpus: ``cum`` (flow position of each document, then
    the total), ``counts``, ``start`` (each document's first element in ``tok``)."""

    def __init__(self, dataset: str | os.PathLike[str] | recfile.RecFile, subset: str) -> None:
        if subset not in ("train", "test"):
            raise ValueError(f"subset must be 'train' or 'test', got {subset!r}")
        self.file = (
            dataset.share() if isinstance(dataset, recfile.RecFile) else recfile.open(dataset)
        )
        try:
            self._read(subset)
        except BaseException:
            self.file.close()
            raise

    def _read(self, subset: str) -> None:
        f, path = self.file, self.file.path
        fields, cols = f.record.fields, f.columns
        tokens = cols.get("tokens")
        if not isinstance(tokens, Ragged) or len(fields["tokens"].shape) != 1:
            found = "no tokens column" if tokens is None else f"tokens {fields['tokens']}"
            raise FormatError(
                f"expected a compact text corpus (a ragged 1-D tokens column, one row a "
                f"document), found {found}",
                path,
            )
        if fields["tokens"].dtype.name not in _TOKEN_DTYPES:
            raise FormatError(
                f"expected tokens of {', '.join(_TOKEN_DTYPES)} (ids a window's int64 "
                f"holds), found {fields['tokens'].dtype.name}",
                path,
            )
        offsets = np.asarray(tokens.offsets, dtype=np.int64)
        mask = cols.get("loss_mask")
        self.has_mask = mask is not None
        if mask is not None and (
            not isinstance(mask, Ragged)
            or fields["loss_mask"].dtype != np.bool_
            or fields["loss_mask"].dims != fields["tokens"].dims
        ):
            raise FormatError(
                f"expected loss_mask to be bool over the tokens' dim, found {fields['loss_mask']}",
                path,
            )
        n = len(f)
        if "test" in cols:
            is_test = np.asarray(cols["test"])
            if is_test.dtype != np.bool_ or is_test.shape != (n,):
                raise FormatError(
                    f"expected test to be one bool a row, found {fields['test']}", path
                )
            rows = np.flatnonzero(is_test if subset == "test" else ~is_test)
        elif subset == "test":
            raise FormatError("the corpus has no test subset (no test column)", path)
        else:
            rows = np.arange(n)
        self.start = offsets[rows]
        self.counts = offsets[rows + 1] - self.start
        self.cum = np.concatenate(([0], np.cumsum(self.counts))).astype(np.int64)
        self.tok = tokens.values
        self.mask8 = np.asarray(mask.values).view(np.uint8) if mask is not None else self.tok[:0]
        self.path = path

    def fill(
        self, a: np.ndarray, b: np.ndarray, pad_id: int, want_pos: bool, batch: dict[str, Any]
    ) -> None:
        """Windows reading flow ranges ``[a, b)`` into ``batch``'s rows."""
        self.file._file.check_intact()  # a file truncated under us: an error, not SIGBUS
        if len(a) and windowfill.fits(batch, self.tok, self.mask8):  # C: no kernels to load
            windowfill.fill_typed(
                self.tok, self.cum, self.start, self.mask8, self.has_mask, a, b, pad_id, batch
            )
            return
        pos = batch.get("position_ids", batch["doc_ids"])
        if (
            kernels.get() is not None
            and len(a)
            and all(v.flags.c_contiguous for v in batch.values())
        ):
            from ._window_jit import fill_windows_typed

            fill_windows_typed(
                self.tok,
                self.cum,
                self.start,
                self.mask8,
                self.has_mask,
                a,
                b,
                pad_id,
                batch["input_ids"],
                batch["targets"],
                batch["loss_mask"],
                batch["doc_ids"],
                pos,
                want_pos,
            )
            return
        self._fill_numpy(a, b, pad_id, batch)

    def _fill_numpy(self, a: np.ndarray, b: np.ndarray, pad_id: int, batch: dict[str, Any]) -> None:
        """The numpy path of ``fill_windows_typed``: the whole batch in a few gathers."""
        if not len(a):
            return
        seq_len = batch["input_ids"].shape[1]
        x = a[:, None] + np.arange(seq_len + 1)  # flow positions, inputs then one more
        real = x < b[:, None]
        xc = np.minimum(x, max(int(self.cum[-1]) - 1, 0))
        d = np.searchsorted(self.cum, xc, "right") - 1
        elem = self.start[d] + (xc - self.cum[d])
        flow = np.where(real, self.tok[elem].astype(np.int64), pad_id)
        keep = real[:, 1:]  # a pair is real when its target is
        batch["input_ids"][:] = np.where(keep, flow[:, :-1], pad_id)
        batch["targets"][:] = flow[:, 1:]
        lm = self.mask8[elem[:, 1:]] != 0 if self.has_mask else np.ones_like(keep)
        batch["loss_mask"][:] = lm & keep
        batch["doc_ids"][:] = np.where(keep, d[:, :-1] + 1, 0)
        if "position_ids" in batch:
            batch["position_ids"][:] = np.where(keep, xc[:, :-1] - self.cum[d[:, :-1]], 0)

    def share(self) -> recfile.RecFile:
        return self.file

    def close(self) -> None:
        self.file.close()
