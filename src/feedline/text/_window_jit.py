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
        # Unsigned indices: numba then drops its negative-index checks and LLVM turns
        # the loop into a vectorised copy (16x faster than signed indices or a slice).
        src = numba.uint64(tok_start[d] + 8 * (p - cum[d]))
        dst = numba.uint64(8 * o)
        for k in range(numba.uint64(8 * n)):
            out8[dst + k] = u8[src + k]
        p += n
        o += n
    return d


@numba.njit(cache=True, nogil=True)
def fill_windows(
    u8,
    cum,
    tok_start,
    mask_start,
    has_mask,
    a,
    b,
    pad_id,
    inp8,
    tgt8,
    inp,
    tgt,
    loss_mask,
    doc_ids,
    pos_ids,
    want_pos,
):
    """Window w reads flow tokens [a[w], b[w]) (at most seq_len + 1 of them): inputs
    are tokens [a, b - 1), targets [a + 1, b), the loss mask is the targets' mask, the
    doc ids (position + 1) and position ids belong to the inputs; the rest is padding
    (``pad_id``, mask False, doc id 0, position 0)."""
    seq_len = inp.shape[1]
    u = numba.uint64  # unsigned indices throughout: see _copy_flow
    for w in range(len(a)):
        p, q = a[w], b[w]
        pairs = q - p - 1
        d = np.searchsorted(cum, p, "right") - 1
        _copy_flow(u8, cum, tok_start, d, p, q - 1, inp8[w], 0)
        _copy_flow(u8, cum, tok_start, d, p + 1, q, tgt8[w], 0)
        ids, lm, pos = doc_ids[w], loss_mask[w], pos_ids[w]
        # per-token doc ids, positions and the targets' mask, one document at a time
        j = 0
        e = d
        while j < pairs:
            x = p + j
            while cum[e + 1] <= x:
                e += 1
            n = min(cum[e + 1] - x, pairs - j)
            for k in range(u(j), u(j + n)):
                ids[k] = e + 1
            if want_pos:
                first = x - cum[e] - j
                for k in range(u(j), u(j + n)):
                    pos[k] = first + numba.int64(k)
            j += n
        if has_mask:
            j = 0
            e = d
            while j < pairs:
                x = p + 1 + j
                while cum[e + 1] <= x:
                    e += 1
                n = min(cum[e + 1] - x, pairs - j)
                src = u(mask_start[e] + (x - cum[e]))
                for k in range(u(n)):
                    lm[u(j) + k] = u8[src + k] != 0
                j += n
        else:
            for k in range(u(pairs)):
                lm[k] = True
        ir, tr = inp[w], tgt[w]
        for k in range(u(max(pairs, 0)), u(seq_len)):
            ir[k] = pad_id
            tr[k] = pad_id
            lm[k] = False
            ids[k] = 0
            if want_pos:
                pos[k] = 0


@numba.njit(cache=True, nogil=True)
def fill_windows_typed(
    tok,
    cum,
    start,
    mask8,
    has_mask,
    a,
    b,
    pad_id,
    inp,
    tgt,
    loss_mask,
    doc_ids,
    pos_ids,
    want_pos,
):
    """``fill_windows`` for a compact corpus: the tokens are a typed array (uint16 or
    uint32, widened to int64 as they are copied), document ``d``'s first token at
    ``tok[start[d]]`` and its mask at ``mask8[start[d]]``."""
    seq_len = inp.shape[1]
    u = numba.uint64  # unsigned indices, so LLVM vectorises the copies (see _copy_flow)
    for w in range(len(a)):
        p, q = a[w], b[w]
        pairs = q - p - 1
        d = np.searchsorted(cum, p, "right") - 1
        ir, tr = inp[w], tgt[w]
        ids, lm, pos = doc_ids[w], loss_mask[w], pos_ids[w]
        j = 0
        e = d
        while j < pairs:  # inputs [p, q - 1): tokens, doc ids, positions
            x = p + j
            while cum[e + 1] <= x:
                e += 1
            n = min(cum[e + 1] - x, pairs - j)
            src = u(start[e] + (x - cum[e]))
            for k in range(u(n)):
                ir[u(j) + k] = tok[src + k]
            for k in range(u(j), u(j + n)):
                ids[k] = e + 1
            if want_pos:
                first = x - cum[e] - j
                for k in range(u(j), u(j + n)):
                    pos[k] = first + numba.int64(k)
            j += n
        j = 0
        e = d
        while j < pairs:  # targets [p + 1, q): tokens and the loss mask
            x = p + 1 + j
            while cum[e + 1] <= x:
                e += 1
            n = min(cum[e + 1] - x, pairs - j)
            src = u(start[e] + (x - cum[e]))
            for k in range(u(n)):
                tr[u(j) + k] = tok[src + k]
            if has_mask:
                for k in range(u(n)):
                    lm[u(j) + k] = mask8[src + k] != 0
            else:
                for k in range(u(j), u(j + n)):
                    lm[k] = True
            j += n
        for k in range(u(max(pairs, 0)), u(seq_len)):
            ir[k] = pad_id
            tr[k] = pad_id
            lm[k] = False
            ids[k] = 0
            if want_pos:
                pos[k] = 0
