"""The plan of a packing: which piece of which document goes where in which row.

A document of ``n`` tokens has ``n - 1`` targets, i.e. ``n - 1`` (input, target) pairs:
pair ``k`` is token ``k`` predicting token ``k + 1``. A row holds ``seq_len`` pairs, so
a document of more than ``seq_len + 1`` tokens is first cut into pieces of
``seq_len`` pairs (piece ``i`` reads tokens ``[i * seq_len, (i + 1) * seq_len + 1)``:
consecutive pieces share one token, the last input of one being the first of the
next, so every target stays trained once). A piece (a *segment* of its row) costs its
number of pairs; a document of fewer than two tokens has no pair and no piece.

The plan is three arrays in row order (``doc``, ``off``: the piece's first pair in
its document, ``pairs``) and ``row_ptr`` (row ``r``'s segments are
``[row_ptr[r], row_ptr[r + 1])``, in the order they were placed). It is computed once
per ``Packed`` from the documents' lengths, the document order and the options only:

- ``concat``: the documents' pairs, in order, end to end, cut every ``seq_len`` pairs
  (only the last row has padding).
- ``first_fit`` / ``best_fit`` (decreasing): the order is cut into blocks of ``block``
  documents; a block's pieces, longest first (ties in order), go each into the first
  open row with room (first fit) or the open row left with the least room (best fit;
  ties: the row that reached that room last), else into a new row. Blocks are packed
  on their own, so a block's rows depend on that block's documents only.

The placement is ``_pack_place``'s functions (segment trees: O(log) a piece), compiled
by ``_pack_jit`` or, without numba, run as Python (identical rows, much slower).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .._base import hashing, kernels, packing
from ..order import Order, Seq
from . import _pack_place

STRATEGIES = ("concat", "first_fit", "best_fit")
_ORDER_SALT = 0x7061636B65642D31  # b"packed-1": the documents' order of a packing


@dataclass(frozen=True, eq=False)
class Plan:
    """Row ``r`` holds segments ``[row_ptr[r], row_ptr[r + 1])``; segment ``s`` is pairs
    ``[off[s], off[s] + pairs[s])`` of document ``doc[s]`` (its subset index)."""

    row_ptr: np.ndarray
    doc: np.ndarray
    off: np.ndarray
    pairs: np.ndarray

    @property
    def rows(self) -> int:
        return len(self.row_ptr) - 1


def order_seed(seed: int, epoch: int) -> int:
    """The shuffle seed of the documents' order: (seed, epoch) hashed, never added."""
    return hashing.mix64(hashing.mix64(seed ^ _ORDER_SALT) ^ (epoch & hashing.MASK64))


def document_order(n: int, seed: int | None, epoch: int) -> np.ndarray:
    """The documents' order of a pass: file order with no seed, else feedline's seeded
    permutation (the order of ``fl.Seq.source(n).shuffle(...)``)."""
    if seed is None or n <= 1:
        return np.arange(n, dtype=np.int64)
    order = Order(Seq.source(n).shuffle(order_seed(seed, epoch)))
    with kernels.deferred():  # the numpy path (the same order), not a wait for numba
        return np.asarray(order.lookup(np.arange(n, dtype=np.int64))[1], dtype=np.int64)


def plan(counts: np.ndarray, order: np.ndarray, seq_len: int, strategy: str, block: int) -> Plan:
    """The packing of documents of ``counts`` tokens in ``order`` (see the module doc)."""
    pairs = np.maximum(np.asarray(counts, dtype=np.int64)[order] - 1, 0)
    if strategy == "concat":
        return _concat(order, pairs, seq_len)
    keep = pairs > 0
    docs, pairs, where = order[keep], pairs[keep], np.flatnonzero(keep)
    n_pieces = -(-pairs // seq_len)
    first = np.cumsum(n_pieces) - n_pieces
    piece_doc = np.repeat(docs, n_pieces)
    k = np.arange(int(n_pieces.sum()), dtype=np.int64) - np.repeat(first, n_pieces)
    off = k * seq_len
    size = np.minimum(seq_len, np.repeat(pairs, n_pieces) - off)
    blk = np.repeat(where // block, n_pieces)  # a block: `block` documents of the order
    # longest first within each block; ties keep the order (lexsort is stable)
    by = np.lexsort((-size, blk))
    piece_doc, off, size, blk = piece_doc[by], off[by], size[by], blk[by]
    bounds = np.flatnonzero(np.diff(blk)) + 1
    block_ptr = np.concatenate(([0], bounds, [len(size)])).astype(np.int64)
    if not len(size):
        block_ptr = np.zeros(1, dtype=np.int64)
    local = np.empty(len(size), dtype=np.int64)
    per_block = np.empty(len(block_ptr) - 1, dtype=np.int64)
    place = _placer(strategy)
    place(size, block_ptr, seq_len, local, per_block)
    base = np.cumsum(per_block) - per_block
    row = local + np.repeat(base, np.diff(block_ptr))
    in_row = np.argsort(row, kind="stable")  # placement order within each row
    rows = int(per_block.sum())
    row_ptr = np.zeros(rows + 1, dtype=np.int64)
    np.cumsum(np.bincount(row, minlength=rows), out=row_ptr[1:])
    return Plan(row_ptr, piece_doc[in_row], off[in_row], size[in_row])


def _concat(order: np.ndarray, pairs: np.ndarray, seq_len: int) -> Plan:
    """Every document's pairs end to end, cut into rows of ``seq_len`` pairs."""
    keep = pairs > 0
    docs, pairs = order[keep], pairs[keep]
    end = np.cumsum(pairs)
    begin = end - pairs
    total = int(end[-1]) if len(end) else 0
    rows = -(-total // seq_len)
    r0, r1 = begin // seq_len, (end - 1) // seq_len
    n_seg = r1 - r0 + 1
    seg_doc_i = np.repeat(np.arange(len(docs)), n_seg)
    first = np.cumsum(n_seg) - n_seg
    row = np.repeat(r0, n_seg) + (np.arange(int(n_seg.sum())) - np.repeat(first, n_seg))
    lo = np.maximum(row * seq_len, begin[seg_doc_i])
    hi = np.minimum((row + 1) * seq_len, end[seg_doc_i])
    row_ptr = np.zeros(rows + 1, dtype=np.int64)
    np.cumsum(np.bincount(row, minlength=rows), out=row_ptr[1:])
    return Plan(row_ptr, docs[seg_doc_i], lo - begin[seg_doc_i], hi - lo)


def _placer(strategy: str):
    if packing.available():  # C: no kernels to load (the same rows)
        return packing.placer(strategy)
    if kernels.get(background=True) is not None:  # Python placement: 20x slower
        from . import _pack_jit

        return _pack_jit.place_first_fit if strategy == "first_fit" else _pack_jit.place_best_fit
    return _pack_place.place_first_fit if strategy == "first_fit" else _pack_place.place_best_fit
