"""``Windows``: language-model training windows read from a ``.nndataset`` or a
compact ``.flr`` corpus (``_compact``; the same windows for the same documents).

A subset's documents, concatenated in order, form its token flow. Window ``k`` takes
``seq_len + 1`` consecutive flow tokens from ``k * stride``: ``input_ids`` are the first
``seq_len``, ``targets`` the last ``seq_len`` (shifted by one), so each of a full
window's ``seq_len`` targets is trained, and with the default ``stride = seq_len`` every
target of the flow (every token but the first) is trained exactly once per pass. This
is where feedline departs from neuralnet.cpp's trainer, which trains ``w - 1`` targets
of a ``w``-token window and so never the token after each window.

- ``loss_mask`` is the targets' mask (from the file: the assistant spans with
  loss_scope "assistant", else all True); ``doc_ids`` (the document's position + 1,
  as stored) and, with ``position_ids=True``, the position inside its document belong
  to the inputs, for block-diagonal attention and positions that restart per document.
- The last window of the flow may be short: its tail is padding (``pad_id``, mask
  False, doc id 0, position 0).
- ``cross_docs=False``: windows never cross a document; each document is cut on its
  own (from its first token, by ``stride``) and the tail of its last window is
  padding. A document of fewer than two tokens has no target and no window.

A batch of windows is assembled by one compiled call (C, ``_base.windowfill``, built at
install; else numba's kernel, the ``fast`` extra; the GIL released) straight from the
memory map: the token bytes are copied once into the batch, nothing else is read.
Without either the same arrays come from numpy slices, one per window and document
piece.
"""

from __future__ import annotations

import os
from typing import Any, cast

import numpy as np

from .._base import kernels, windowfill
from ..errors import BoundsError, FormatError
from ..formats import nndataset
from ..records import Record, make_record
from ._compact import FlrCorpus, is_flr_path

_FIELDS = ("input_ids", "targets", "loss_mask", "doc_ids", "position_ids")
# Token ids are checked to fit int64 once per block of this many flow tokens (the high
# byte of each read in place, once), not in every batch: after one pass a batch costs
# one comparison.
_ID_BLOCK = 1 << 16
_UNCHECKED, _CLEAN, _BIG = 0, 1, 2


def _check_int(name: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if int(value) < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {int(value)}")
    return int(value)


def window_record(seq_len: int, position_ids: bool = False) -> type[Record]:
    """The record of windows of ``seq_len`` tokens (the same for every corpus, so
    windows of several corpora mix in one order)."""
    specs: dict[str, Any] = {
        "input_ids": ((seq_len,), np.int64),
        "targets": ((seq_len,), np.int64),
        "loss_mask": ((seq_len,), np.bool_),
        "doc_ids": ((seq_len,), np.int64),
    }
    if position_ids:
        specs["position_ids"] = ((seq_len,), np.int64)
    return make_record(
        f"Window{seq_len}", specs, doc=f"Language-model windows of {seq_len} tokens."
    )


class Windows:
    """Language-model windows over one subset of a ``.nndataset`` or of a compact
    ``.flr`` corpus (an open ``RecFile`` or a path ending ``.flr``): a typed source.

    ``Windows(path_or_open_dataset, seq_len, stride=None, subset="train",
    cross_docs=True, position_ids=False, pad_id=0)``. ``len`` counts windows;
    ``w[i]`` is one window, ``w.getitems(indices)`` a batch (one kernel call). Give it
    to ``fl.Loader`` (or ``fl.Dataset(w.record, w)``) to shuffle, mix, shard and resume.
    The file stays open while a loader uses it; ``close()`` gives up this handle.

    >>> import os, tempfile, feedline as fl
    >>> p = os.path.join(tempfile.mkdtemp(), "t.nndataset")
    >>> fl.nndataset.write(p, fl.nndataset.Build({}, "c.txt", "", 2,
    ...                                          train_docs=[[5, 6, 7], [8, 9]]))
    >>> w = fl.text.Windows(p, 2)
    >>> len(w), w[0]["input_ids"].tolist(), w[0]["targets"].tolist(), w[1]["doc_ids"].tolist()
    (2, [5, 6], [6, 7], [1, 2])
    >>> w[1]["targets"].tolist(), w[1]["loss_mask"].tolist()
    ([8, 9], [True, True])
    >>> w.close()
    """

    fixed_layout = True  # the record fixes every shape and dtype: no per-batch checks

    def __init__(
        self,
        dataset: str | os.PathLike[str] | nndataset.Nndataset,
        seq_len: int,
        *,
        stride: int | None = None,
        subset: str = "train",
        cross_docs: bool = True,
        position_ids: bool = False,
        pad_id: int = 0,
    ) -> None:
        self.seq_len = _check_int("seq_len", seq_len, 1)
        self.stride = self.seq_len if stride is None else _check_int("stride", stride, 1)
        self.cross_docs = bool(cross_docs)
        self.position_ids = bool(position_ids)
        self.pad_id = _check_int("pad_id", pad_id, 0)
        if self.pad_id >= 2**63:  # the kernels write it into int64 windows
            raise ValueError(f"pad_id must be in [0, 2**63), got {self.pad_id}")
        self.subset = subset
        self._flr: FlrCorpus | None = None
        self._ds: Any
        self._layout: Any  # nndataset._Layout or FlrCorpus: cum, counts, the rest per kind
        if is_flr_path(dataset):  # a compact corpus: a .flr of documents
            self._flr = self._layout = FlrCorpus(cast("Any", dataset), subset)
            self._ds = self._flr.file
        else:
            if isinstance(dataset, nndataset.Nndataset):
                self._ds = dataset.share()
            else:
                self._ds = nndataset.open(dataset)
            try:
                self._layout = self._ds._layout(subset)
            except BaseException:
                self._ds.close()
                raise
        self.path = self._ds.path
        self.record = window_record(self.seq_len, self.position_ids)
        self.salt = 0
        cum = self._layout.cum
        self.num_tokens = int(cum[-1])
        if self.cross_docs:
            self._win_cum = None
            self._n = -(-(self.num_tokens - 1) // self.stride) if self.num_tokens >= 2 else 0
        else:
            counts = self._layout.counts
            per_doc = np.where(counts >= 2, -(-(counts - 1) // self.stride), 0)
            self._win_cum = np.concatenate(([0], np.cumsum(per_doc))).astype(np.int64)
            self._n = int(self._win_cum[-1])
        # per block of the flow: unchecked, clean, or holding an id of 2**63 or more
        self._id_blocks = np.zeros(-(-self.num_tokens // _ID_BLOCK), dtype=np.uint8)
        self._id_clean = (
            0 if self._flr is None else len(self._id_blocks)
        )  # blocks found clean; all of them: nothing left to check

    # -- the source protocol -----------------------------------------------------------
    def __len__(self) -> int:
        return self._n

    def spans(self, indices: Any) -> tuple[np.ndarray, np.ndarray]:
        """The flow ranges ``[a, b)`` that windows ``indices`` read (int64 arrays)."""
        idx = np.asarray(indices, dtype=np.int64)
        if idx.size and (int(idx.min()) < 0 or int(idx.max()) >= self._n):
            raise BoundsError(
                f"window indices must be in [0, {self._n}), got {int(idx.min())}..{int(idx.max())}"
            )
        span = self.seq_len + 1
        if self._win_cum is None:
            a = idx * self.stride
            return a, np.minimum(a + span, self.num_tokens)
        cum = self._layout.cum
        d = np.searchsorted(self._win_cum, idx, "right") - 1
        a = cum[d] + (idx - self._win_cum[d]) * self.stride
        return a, np.minimum(a + span, cum[d + 1])

    def getitems(
        self, indices: Any, out: dict[str, np.ndarray] | None = None
    ) -> dict[str, np.ndarray]:
        """Windows ``indices`` as columns ``[len(indices), seq_len]`` (into ``out``'s first
        rows when given)."""
        a, b = self.spans(indices)
        rows = len(a)
        fields = self.record.fields
        if out is None:
            batch = {
                k: np.empty((rows, *f.fixed_shape("windows")), dtype=f.dtype)
                for k, f in fields.items()
            }
        else:
            batch = {k: out[k][:rows] for k in fields}
        if self._flr is not None:  # narrow ids: they all fit int64, nothing to check
            self._flr.fill(a, b, self.pad_id, self.position_ids, batch)
            return batch
        u8 = self._ds._u8
        if u8 is None:
            raise ValueError(f"{self.path}: the dataset is closed")
        self._ds._file.check_intact()  # a file truncated under us: an error, not SIGBUS
        if rows and not isinstance(u8, np.ndarray):  # a remote file: fetch the documents
            cum, offsets = self._layout.cum, self._layout.offsets
            first = np.searchsorted(cum, a, "right") - 1
            last = np.searchsorted(cum, b - 1, "right") - 1
            with u8.spans(offsets[first], offsets[last + 1]) as local:
                self._fill(local, a, b, batch)
        else:
            self._fill(u8, a, b, batch)
        if rows and self._id_clean < len(self._id_blocks):
            self._check_ids(a, b, batch, isinstance(u8, np.ndarray))
        return batch

    def _check_ids(
        self, a: np.ndarray, b: np.ndarray, batch: dict[str, np.ndarray], local: bool
    ) -> None:
        """Token ids are u64 in the file, int64 in a window: one of 2**63 or more would
        read as negative. A local file is checked by blocks of the flow, each read once
        (the windows' blocks all clean: nothing more to do); a remote one, or a block
        holding such an id, by the batch itself."""
        if local:
            lo, hi = a // _ID_BLOCK, (b - 1) // _ID_BLOCK
            span = int((hi - lo).max())
            blocks = (
                np.concatenate((lo, hi))
                if span <= 1
                else np.concatenate([np.arange(x, y + 1) for x, y in zip(lo.tolist(), hi.tolist())])
            )
            state = self._id_blocks[blocks]
            if (state == _CLEAN).all():
                return
            for k in np.unique(blocks[state == _UNCHECKED]).tolist():
                self._check_block(k)
            if not (self._id_blocks[blocks] == _BIG).any():
                return
        self._check_batch(a, batch)

    def _check_block(self, k: int) -> None:
        """Whether the documents holding flow block ``k`` have an id of 2**63 or more:
        the high byte of each token (little-endian u64) read in place, no copy."""
        lay, u8 = self._layout, self._ds._u8
        assert u8 is not None  # getitems refused a closed dataset
        lo, hi = k * _ID_BLOCK, min(self.num_tokens, (k + 1) * _ID_BLOCK)
        d0 = int(np.searchsorted(lay.cum, lo, "right")) - 1
        d1 = int(np.searchsorted(lay.cum, hi - 1, "right")) - 1
        if not lay.has_mask:  # documents back to back: [count][tokens], all on 8 bytes
            # (a count's high byte is 0: no file holds 2**56 tokens)
            top = u8[int(lay.tok_start[d0]) + 7 : int(lay.offsets[d1 + 1]) : 8]
            big = bool(top.size) and int(top.max()) >= 0x80
        else:  # a mask section between documents: each document's tokens on their own
            big = any(
                int(u8[t + 7 : t + 8 * n : 8].max()) >= 0x80
                for t, n in zip(
                    lay.tok_start[d0 : d1 + 1].tolist(), lay.counts[d0 : d1 + 1].tolist()
                )
                if n
            )
        self._id_blocks[k] = _BIG if big else _CLEAN
        self._id_clean += not big

    def _check_batch(self, a: np.ndarray, batch: dict[str, np.ndarray]) -> None:
        """Each window's inputs after the first are its targets shifted, so the targets
        and the first inputs hold every token read (padding is >= 0)."""
        tgt, first = batch["targets"], batch["input_ids"][:, 0]
        if int(tgt.min()) >= 0 and int(first.min()) >= 0:
            return
        if int(first.min()) < 0:
            w = int(np.argmax(first < 0))
            pos, value = int(a[w]), int(first[w])
        else:
            row, j = np.unravel_index(int(np.argmax(tgt < 0)), tgt.shape)
            pos, value = int(a[row]) + int(j) + 1, int(tgt[row, j])
        lay = self._layout
        d = int(np.searchsorted(lay.cum, pos, "right")) - 1
        offset = int(lay.tok_start[d]) + 8 * (pos - int(lay.cum[d]))
        raise FormatError(
            f"{self.subset} document {d} (doc_id {d + 1}) holds the token id "
            f"{value + 2**64} at flow position {pos}: windows are int64 and hold "
            f"ids below 2**63 only",
            self.path,
            offset,
        )

    def _fill(
        self, u8: np.ndarray, a: np.ndarray, b: np.ndarray, batch: dict[str, np.ndarray]
    ) -> None:
        lay = self._layout
        if len(a) and windowfill.fits(batch, u8):  # C: no kernels to load
            windowfill.fill_arena(u8, lay, a, b, self.pad_id, batch)
            return
        k = kernels.get()
        if k is not None and len(a) and all(v.flags.c_contiguous for v in batch.values()):
            from . import _window_jit

            pos = batch.get("position_ids", batch["doc_ids"])
            inp, tgt = batch["input_ids"], batch["targets"]
            _window_jit.fill_windows(
                u8,
                lay.cum,
                lay.tok_start,
                lay.mask_start,
                lay.has_mask,
                a,
                b,
                self.pad_id,
                inp.view(np.uint8),
                tgt.view(np.uint8),
                inp,
                tgt,
                batch["loss_mask"],
                batch["doc_ids"],
                pos,
                self.position_ids,
            )
        else:
            _fill_numpy(u8, lay, a, b, self.pad_id, batch)

    def __getitem__(self, i: int) -> dict[str, np.ndarray]:
        if isinstance(i, bool) or not isinstance(i, (int, np.integer)):
            raise TypeError(f"a window index is an int, got {type(i).__name__}")
        return {k: v[0] for k, v in self.getitems(np.array([int(i)])).items()}

    # -- handles -----------------------------------------------------------------------
    def share(self) -> Windows:
        """Another handle on the same open file."""
        return Windows(
            self._ds,
            self.seq_len,
            stride=self.stride,
            subset=self.subset,
            cross_docs=self.cross_docs,
            position_ids=self.position_ids,
            pad_id=self.pad_id,
        )

    def close(self) -> None:
        """Give up this handle's share of the file."""
        self._ds.close()

    def __enter__(self) -> Windows:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __reduce__(self):
        return (
            _reopen,
            (
                self.path,
                self.seq_len,
                self.stride,
                self.subset,
                self.cross_docs,
                self.position_ids,
                self.pad_id,
            ),
        )

    def __repr__(self) -> str:
        mode = "packed" if self.cross_docs else "per document"
        return (
            f"Windows({self.path!r}, {self.subset}, seq_len={self.seq_len}, "
            f"stride={self.stride}, {mode}, {self._n:,} windows)"
        )


def _reopen(
    path: str,
    seq_len: int,
    stride: int,
    subset: str,
    cross_docs: bool,
    position_ids: bool,
    pad_id: int,
) -> Windows:
    return Windows(
        path,
        seq_len,
        stride=stride,
        subset=subset,
        cross_docs=cross_docs,
        position_ids=position_ids,
        pad_id=pad_id,
    )


def _fill_numpy(
    u8: np.ndarray,
    lay: Any,
    a: np.ndarray,
    b: np.ndarray,
    pad_id: int,
    batch: dict[str, np.ndarray],
) -> None:
    """The numpy path of ``fill_windows``: one slice copy per window and document piece."""
    cum = lay.cum
    for w, (p, q) in enumerate(zip(a.tolist(), b.tolist())):
        pairs = q - p - 1
        d0 = int(np.searchsorted(cum, p, "right")) - 1
        d1 = int(np.searchsorted(cum, q, "left"))  # documents [d0, d1) overlap [p, q)
        starts = np.maximum(cum[d0:d1], p)
        ends = np.minimum(cum[d0 + 1 : d1 + 1], q)
        flow = np.empty(q - p, dtype=np.int64)
        mask = np.ones(q - p, dtype=np.bool_)
        docs = np.repeat(np.arange(d0 + 1, d1 + 1, dtype=np.int64), ends - starts)
        for d, s, e in zip(range(d0, d1), starts.tolist(), ends.tolist()):
            within = s - int(cum[d])
            t = int(lay.tok_start[d]) + 8 * within
            flow[s - p : e - p] = u8[t : t + 8 * (e - s)].view("<i8")
            if lay.has_mask:
                m = int(lay.mask_start[d]) + within
                mask[s - p : e - p] = u8[m : m + e - s] != 0
        batch["input_ids"][w, :pairs] = flow[:-1]
        batch["targets"][w, :pairs] = flow[1:]
        batch["loss_mask"][w, :pairs] = mask[1:]
        batch["doc_ids"][w, :pairs] = docs[:-1]
        if "position_ids" in batch:
            batch["position_ids"][w, :pairs] = (
                np.arange(p, q - 1, dtype=np.int64) - cum[docs[:-1] - 1]
            )
        for k, v in batch.items():
            v[w, pairs:] = pad_id if k in ("input_ids", "targets") else 0
