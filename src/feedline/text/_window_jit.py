"""The numba kernel that assembles language-model windows (imported only with numba).

Kept at module level so numba caches its machine code on disk. ``_windows`` holds
the numpy path that computes the same arrays; the tests compare the two.
"""

import numba
import numpy as np


@numba.njit(cache=True, nogil=True, inline="always")
def _copy_flow(u8, cum, tok_start, d, p, q, out8, o):
    """Copy flow tokens [p, q) (u64, little-endian) into out8's bytes from token o.

    ``d`` is a document at or before the one holding ``p``; returns the document
    holding the last token copied, so the caller can continue from it.
    """
    while p < q:
        while cum[d + 1] <= p:
            d += 1
        n = min(cum[d + 1], q) - p
        src = tok_start[d] + 8 * (p - cum[d])
        dst = 8 * o
        out8[dst:dst + 8 * n] = u8[src:src + 8 * n]
        p += n
        o += n
    return d


@numba.njit(cache=True, nogil=True, parallel=True)
def fill_windows(u8, cum, tok_start, mask_start, has_mask, a, b, pad_id,
                 inp8, tgt8, inp, tgt, loss_mask, doc_ids, pos_ids, want_pos):
    """Window w reads flow tokens [a[w], b[w]) (at most seq_len + 1 of them): inputs
    are tokens [a, b - 1), targets [a + 1, b), the loss mask is the targets' mask, the
    doc ids (position + 1) and position ids belong to the inputs; the rest is padding
    (``pad_id``, mask False, doc id 0, position 0)."""
    seq_len = inp.shape[1]
    for w in numba.prange(len(a)):
        p, q = a[w], b[w]
        pairs = q - p - 1
        d = np.searchsorted(cum, p, "right") - 1
        _copy_flow(u8, cum, tok_start, d, p, q - 1, inp8[w], 0)
        _copy_flow(u8, cum, tok_start, d, p + 1, q, tgt8[w], 0)
        # per-token doc ids, positions and the targets' mask, one document at a time
        j = 0
        e = d
        while j < pairs:
            x = p + j
            while cum[e + 1] <= x:
                e += 1
            n = min(cum[e + 1] - x, pairs - j)
            for k in range(n):
                doc_ids[w, j + k] = e + 1
            if want_pos:
                first = x - cum[e]
                for k in range(n):
                    pos_ids[w, j + k] = first + k
            j += n
        if has_mask:
            j = 0
            e = d
            while j < pairs:
                x = p + 1 + j
                while cum[e + 1] <= x:
                    e += 1
                n = min(cum[e + 1] - x, pairs - j)
                src = mask_start[e] + (x - cum[e])
                for k in range(n):
                    loss_mask[w, j + k] = u8[src + k] != 0
                j += n
        else:
            for k in range(pairs):
                loss_mask[w, k] = True
        for k in range(max(pairs, 0), seq_len):
            inp[w, k] = pad_id
            tgt[w, k] = pad_id
            loss_mask[w, k] = False
            doc_ids[w, k] = 0
            if want_pos:
                pos_ids[w, k] = 0
