"""``Packed``: a corpus's documents packed into rows of ``seq_len`` (input, target)
pairs, with segment ids, positions that restart per document and a loss mask that
never crosses a document (a typed source, like ``Windows``; the plan is ``_pack_plan``).

A row follows ``Windows``' convention: ``seq_len + 1`` tokens of a document give
``seq_len`` inputs and the ``seq_len`` targets shifted by one. Packed, a row holds
several segments (pieces of documents) side by side, each its own inputs and targets,
so the last token of a document is a target and never an input whose target is the
next document's first token. Fields, each ``[seq_len]``:

============  ====================================================================
input_ids     int64: the segments' inputs, then ``pad_id``
targets       int64: the segments' targets (each input's next token), then ``pad_id``
loss_mask     True on a segment's targets (and the corpus's own mask there, if it
              has one: the assistant spans), False on padding
segment_ids   int32: 1, 2, ... per segment in the row (for block-diagonal attention),
              0 on padding
position_ids  int32: 0, 1, ... restarting at each segment (a piece of a split document
              too: the row is all the model sees of it), 0 on padding
doc_ids       with ``doc_ids=True``: the segment's document (its index in the subset +
              1, as ``Windows``), 0 on padding
============  ====================================================================

A batch is one compiled kernel (numba, the ``fast`` extra) straight from the memory
map, or without numba a few vectorised numpy gathers (the same arrays).
"""

from __future__ import annotations

import os
from typing import Any, cast

import numpy as np

from .._base import hashing, kernels, packing
from ..errors import BoundsError, DomainError, FormatError
from ..formats import nndataset
from ..records import Record, make_record
from . import _pack_plan
from ._compact import FlrCorpus, is_flr_path

# Documents per block for first fit / best fit. Measured by benchmarks/packing.py
# (20M tokens, lognormal lengths of mean 1,000 tokens, seq_len 2,048): best fit pads
# 2.3% at 64 documents a block, 0.64% at 256, 0.17% at 1,024, 0.041% at 4,096 and
# 0.020% at 16,384 (the blocks' last rows are most of it; Grain's best fit with 512
# open rows: 1.13%). At 1,024 documents (about 500 rows) padding is already a sixth of
# Grain's, and a row's documents stay within a thousand consecutive ones of the order.
DEFAULT_BLOCK = 1024


def _option_int(name: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise DomainError(f"Packed: {name} must be an int >= {minimum}, got {value!r}")
    if int(value) < minimum:
        raise DomainError(f"Packed: {name} must be >= {minimum}, got {int(value)}")
    return int(value)


def packed_record(seq_len: int, doc_ids: bool = False) -> type[Record]:
    """The record of packed rows of ``seq_len`` pairs (the same for every corpus, so the
    rows of several corpora mix in one order). Segment ids and positions are int32 (a
    row's 33 bytes a token, not 41: measured, the kernel is bound by its writes)."""
    specs: dict[str, Any] = {
        "input_ids": ((seq_len,), np.int64),
        "targets": ((seq_len,), np.int64),
        "loss_mask": ((seq_len,), np.bool_),
        "segment_ids": ((seq_len,), np.int32),
        "position_ids": ((seq_len,), np.int32),
    }
    if doc_ids:
        specs["doc_ids"] = ((seq_len,), np.int64)
    return make_record(
        f"Packed{seq_len}", specs, doc=f"Packed language-model rows of {seq_len} tokens."
    )


class Packed:
    """A corpus's documents packed into rows of ``seq_len`` pairs: a typed source.

    ``Packed(path_or_open_corpus, seq_len, strategy="best_fit", block=1024, seed=0,
    epoch=0, subset="train", pad_id=0, doc_ids=False)`` reads a ``.nndataset`` or a
    compact ``.flr`` (a path ending ``.flr`` or an open ``RecFile``). ``len`` counts
    rows; ``p[i]`` is one row, ``p.getitems(indices)`` a batch. Give it to
    ``fl.Loader`` (or a ``Seq``, ``fl.Seq.mix``) to shuffle the rows, shard, mix and
    resume like any source.

    ==========  ==========================================================================
    strategy    ``"concat"``: the documents end to end, cut every ``seq_len`` pairs
                (padding only in the last row); ``"first_fit"`` / ``"best_fit"``
                (decreasing, the default): within each block of ``block`` documents
                of the order, pieces longest first into the first row with room / the
                row left fullest; a document longer than a row is cut into pieces of
                ``seq_len`` pairs first
    block       documents per block of the order (first fit, best fit)
    seed        the documents' order before blocking: ``None`` is file order, an int
                a seeded permutation (hashed with ``epoch``); pass another ``epoch``
                for other neighbours in the rows (``len`` may change by a few rows)
    ==========  ==========================================================================

    Every target of every document (every token but its first) is in exactly one row.
    The packing is a pure function of the documents' lengths and the options, computed
    once when the source is built (a compiled kernel: 0.3 - 0.7 s a million documents),
    so ``len`` is known and seeking, sharding and resuming (with any number of ranks)
    are exact: the loader orders rows like any other records. ``p.padding`` is the
    fraction of the rows' slots that are padding. The file stays open while a loader
    uses it; ``close()`` gives up this handle.

    >>> import os, tempfile, feedline as fl
    >>> p = os.path.join(tempfile.mkdtemp(), "t.nndataset")
    >>> fl.nndataset.write(p, fl.nndataset.Build({}, "c.txt", "", 3,
    ...                    train_docs=[[5, 6, 7], [8, 9], [1, 2, 3, 4]]))
    >>> rows = fl.text.Packed(p, 4, seed=None)
    >>> len(rows), rows[0]["input_ids"].tolist(), rows[0]["targets"].tolist()
    (2, [1, 2, 3, 8], [2, 3, 4, 9])
    >>> rows[0]["segment_ids"].tolist(), rows[0]["position_ids"].tolist()
    ([1, 1, 1, 2], [0, 1, 2, 0])
    >>> rows[1]["input_ids"].tolist(), rows[1]["loss_mask"].tolist()
    ([5, 6, 0, 0], [True, True, False, False])
    >>> rows.close()
    """

    fixed_layout = True  # the record fixes every shape and dtype: no per-batch checks

    def __init__(
        self,
        dataset: str | os.PathLike[str] | nndataset.Nndataset | Any,
        seq_len: int,
        *,
        strategy: str = "best_fit",
        block: int = DEFAULT_BLOCK,
        seed: int | None = 0,
        epoch: int = 0,
        subset: str = "train",
        pad_id: int = 0,
        doc_ids: bool = False,
        _plan: _pack_plan.Plan | None = None,
    ) -> None:
        self.seq_len = _option_int("seq_len", seq_len, 1)
        if strategy not in _pack_plan.STRATEGIES:
            raise DomainError(
                f"Packed: strategy must be one of {', '.join(map(repr, _pack_plan.STRATEGIES))},"
                f" got {strategy!r}"
            )
        self.strategy = strategy
        self.block = _option_int("block", block, 1)
        self.seed = None if seed is None else _option_int("seed", seed, 0)
        self.epoch = _option_int("epoch", epoch, 0)
        self.pad_id = _option_int("pad_id", pad_id, 0)
        if self.pad_id >= 2**63:  # the kernels write it into int64 rows
            raise DomainError(f"Packed: pad_id must be in [0, 2**63), got {self.pad_id}")
        self.subset = subset
        self.doc_ids = bool(doc_ids)
        self._flr: FlrCorpus | None = None
        self._ds: Any
        self._layout: Any
        if is_flr_path(dataset):
            self._flr = self._layout = FlrCorpus(cast("Any", dataset), subset)
            self._ds = self._flr.file
        else:
            self._ds = (
                dataset.share()
                if isinstance(dataset, nndataset.Nndataset)
                else nndataset.open(dataset)
            )
            try:
                self._layout = self._ds._layout(subset)
            except BaseException:
                self._ds.close()
                raise
        self.path = self._ds.path
        if self._flr is not None:  # the kernel's corpus arguments, made once
            f = self._flr
            self._flr_args = (False, f.tok, f.tok[:0].view(np.uint8), f.start, f.mask8, f.start)
        self.record = packed_record(self.seq_len, self.doc_ids)
        counts = self._layout.counts
        if _plan is None:
            try:
                order = _pack_plan.document_order(len(counts), self.seed, self.epoch)
                _plan = _pack_plan.plan(counts, order, self.seq_len, self.strategy, self.block)
            except BaseException:  # an interrupt while planning: the handle is given up
                self._ds.close()
                raise
        self.plan = _plan
        self.num_targets = int(_plan.pairs.sum())
        # A fingerprint of the packing: a loader's saved state names it, so resuming
        # over another packing of the same length is refused, not silently wrong.
        self.salt = hashing.salt(
            f"packed:{self.strategy}:{self.block}:{self.seed}:{self.epoch}:{self.seq_len}"
        )

    # -- the source protocol -----------------------------------------------------------
    def __len__(self) -> int:
        return self.plan.rows

    @property
    def padding(self) -> float:
        """The fraction of the rows' ``len * seq_len`` slots that are padding."""
        slots = len(self) * self.seq_len
        return 1.0 - self.num_targets / slots if slots else 0.0

    def getitems(
        self, indices: Any, out: dict[str, np.ndarray] | None = None
    ) -> dict[str, np.ndarray]:
        """Rows ``indices`` as columns ``[len(indices), seq_len]`` (into ``out``'s first
        rows when given)."""
        idx = np.asarray(indices, dtype=np.int64).reshape(-1)
        n = self.plan.rows
        if idx.size and (int(idx.min()) < 0 or int(idx.max()) >= n):
            raise BoundsError(
                f"packed row indices must be in [0, {n}), got {int(idx.min())}..{int(idx.max())}"
            )
        fields = self.record.fields
        rows = len(idx)
        if out is None:
            batch = {
                k: np.empty((rows, *f.fixed_shape("packed rows")), dtype=f.dtype)
                for k, f in fields.items()
            }
        else:
            batch = {k: out[k][:rows] for k in fields}
        if not rows:
            return batch
        if self._flr is not None:
            self._flr.file._file.check_intact()  # truncated under us: an error, not SIGBUS
            self._fill(idx, batch, None)
            return batch
        u8 = self._ds._u8
        if u8 is None:
            raise ValueError(f"{self.path}: the dataset is closed")
        self._ds._file.check_intact()
        if isinstance(u8, np.ndarray):
            self._fill(idx, batch, u8)
        else:  # a remote file: fetch the rows' documents first
            p = self.plan
            docs = np.unique(p.doc[row_segments(p, idx)[0]])
            offsets = self._layout.offsets
            with u8.spans(offsets[docs], offsets[docs + 1]) as local:
                self._fill(idx, batch, local)
        self._check_ids(idx, batch)
        return batch

    def _fill(self, idx: np.ndarray, batch: dict[str, np.ndarray], u8: Any) -> None:
        """Rows ``idx`` into ``batch``: the kernel, or the numpy path without numba."""
        lay = self._layout
        if self._flr is not None:
            args = self._flr_args
        else:
            args = (True, np.empty(0, np.uint16), u8, lay.tok_start, u8, lay.mask_start)
        has_mask, p = bool(lay.has_mask), self.plan
        if len(idx) and packing.fits(batch, *args[1:3]):  # C: no kernels to load
            packing.fill(p, idx, args, has_mask, self.pad_id, batch)
            return
        # background: in a loader's deferred first batch, numba starts loading (the
        # numpy path is 8x slower than the kernel)
        k = kernels.get(background=True)
        if k is not None and all(v.flags.c_contiguous for v in batch.values()):
            from ._pack_jit import fill_packed

            inp, tgt = batch["input_ids"], batch["targets"]
            fill_packed(
                idx, p.row_ptr, p.doc, p.off, p.pairs, *args, has_mask, self.pad_id,
                inp, tgt, inp.view(np.uint8), tgt.view(np.uint8), batch["loss_mask"],
                batch["segment_ids"], batch["position_ids"],
                batch["doc_ids"] if self.doc_ids else np.empty((len(idx), 0), np.int64),
                self.doc_ids,
            )  # fmt: skip
        else:
            fill_numpy(p, idx, *args, has_mask, self.pad_id, batch)

    def _check_ids(self, idx: np.ndarray, batch: dict[str, np.ndarray]) -> None:
        """A ``.nndataset`` holds u64 ids; one of 2**63 or more would read as negative
        (padding is >= 0)."""
        for name in ("input_ids", "targets"):
            col = batch[name]
            if int(col.min()) >= 0:
                continue
            row, j = np.unravel_index(int(np.argmin(col)), col.shape)
            p = self.plan
            segs = np.arange(p.row_ptr[idx[row]], p.row_ptr[idx[row] + 1])
            s = segs[int(np.searchsorted(np.cumsum(p.pairs[segs]), j, "right"))]
            d = int(p.doc[s])
            at = int(p.off[s]) + int(batch["position_ids"][row, j]) + (name == "targets")
            raise FormatError(
                f"{self.subset} document {d} (doc_id {d + 1}) holds the token id "
                f"{int(col[row, j]) + 2**64} at token {at}: packed rows are int64 and "
                f"hold ids below 2**63 only",
                self.path,
                int(self._layout.tok_start[d]) + 8 * at,
            )

    def __getitem__(self, i: int) -> dict[str, np.ndarray]:
        if isinstance(i, bool) or not isinstance(i, (int, np.integer)):
            raise TypeError(f"a packed row index is an int, got {type(i).__name__}")
        return {k: v[0] for k, v in self.getitems(np.array([int(i)])).items()}

    # -- handles -----------------------------------------------------------------------
    def _options(self) -> dict[str, Any]:
        return {
            "strategy": self.strategy,
            "block": self.block,
            "seed": self.seed,
            "epoch": self.epoch,
            "subset": self.subset,
            "pad_id": self.pad_id,
            "doc_ids": self.doc_ids,
        }

    def share(self) -> Packed:
        """Another handle on the same open file (and the same plan)."""
        src = self._flr.file if self._flr is not None else self._ds
        return Packed(src, self.seq_len, **self._options(), _plan=self.plan)

    def close(self) -> None:
        """Give up this handle's share of the file."""
        self._ds.close()

    def __enter__(self) -> Packed:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __reduce__(self):
        return (_reopen, (self.path, self.seq_len, self._options()))

    def __repr__(self) -> str:
        return (
            f"Packed({self.path!r}, {self.subset}, seq_len={self.seq_len}, {self.strategy}, "
            f"{len(self):,} rows, {self.padding:.2%} padding)"
        )


def _reopen(path: str, seq_len: int, options: dict[str, Any]) -> Packed:
    return Packed(path, seq_len, **options)


def row_segments(p: _pack_plan.Plan, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The segments of rows ``idx``, row after row, and how many each row has."""
    first = p.row_ptr[idx]
    nseg = p.row_ptr[idx + 1] - first
    return np.repeat(first - (np.cumsum(nseg) - nseg), nseg) + np.arange(int(nseg.sum())), nseg


def fill_numpy(
    p: _pack_plan.Plan,
    idx: np.ndarray,
    wide: bool,
    tok: np.ndarray,
    u8: np.ndarray,
    tstart: np.ndarray,
    mbytes: np.ndarray,
    mstart: np.ndarray,
    has_mask: bool,
    pad_id: int,
    batch: dict[str, np.ndarray],
) -> None:
    """The numpy path of ``_pack_jit.fill_packed``: the whole batch in a few gathers.

    A row's segments fill its first cells, so the real cells of the batch, row after
    row, are a boolean mask's True cells in order: each field is one masked write."""
    seg, nseg = row_segments(p, idx)
    n = p.pairs[seg]
    used = np.zeros(len(idx), dtype=np.int64)
    np.add.at(used, np.repeat(np.arange(len(idx)), nseg), n)
    real = np.arange(batch["input_ids"].shape[1]) < used[:, None]
    starts = np.cumsum(n) - n
    k = np.arange(int(n.sum())) - np.repeat(starts, n)  # the pair within its segment
    d = np.repeat(p.doc[seg], n)
    pair = np.repeat(p.off[seg], n) + k  # the pair's input token in its document
    if wide:
        at = tstart[d] + 8 * pair
        both = np.ascontiguousarray(u8[at[:, None] + np.arange(16)]).view("<i8")
        inp, tgt = both[:, 0], both[:, 1]
    else:
        at = tstart[d] + pair
        inp, tgt = tok[at], tok[at + 1]
    cols = {
        "input_ids": inp,
        "targets": tgt,
        "loss_mask": mbytes[mstart[d] + pair + 1] != 0 if has_mask else True,
        "segment_ids": np.repeat(seg - np.repeat(p.row_ptr[idx], nseg) + 1, n),
        "position_ids": k,
        "doc_ids": d + 1,
    }
    for name, out in batch.items():
        out[~real] = pad_id if name in ("input_ids", "targets") else 0
        out[real] = cols[name]
