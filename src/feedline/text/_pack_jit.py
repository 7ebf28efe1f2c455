"""The numba kernels of packing (imported only with numba): the placement of a plan's
pieces (``_pack_place``'s Python functions, compiled as they stand) and the kernel that
fills packed rows from a corpus's memory map.

Kept at module level so numba caches their machine code on disk; ``_packed`` holds the
numpy path that computes the same rows, and the tests compare the two.
"""

import numba

from . import _pack_place

place_first_fit = numba.njit(cache=True, nogil=True)(_pack_place.place_first_fit)
place_best_fit = numba.njit(cache=True, nogil=True)(_pack_place.place_best_fit)


@numba.njit(cache=True, nogil=True)
def fill_packed(
    rows,
    row_ptr,
    seg_doc,
    seg_off,
    seg_pairs,
    wide,
    tok,
    u8,
    tstart,
    mbytes,
    mstart,
    has_mask,
    pad_id,
    inp,
    tgt,
    inp8,
    tgt8,
    loss_mask,
    seg_ids,
    pos_ids,
    doc_ids,
    want_doc,
):
    """Row ``w`` of the batch is packed row ``rows[w]``: its segments one after the
    other, each pairs ``[off, off + n)`` of its document (inputs tokens ``[off, off +
    n)``, targets ``[off + 1, off + n + 1)``; the mask is the targets' mask), then
    padding (``pad_id``, mask False, segment, position and doc id 0). ``doc_ids`` is
    written only ``want_doc``.

    ``wide``: the tokens are u64 bytes in ``u8`` (a ``.nndataset``), document ``d``'s
    first at byte ``tstart[d]``; else a typed array ``tok`` (uint8/16/32), its first at
    ``tok[tstart[d]]``. The mask bytes of document ``d`` start at ``mbytes[mstart[d]]``.
    """
    seq_len = inp.shape[1]
    u = numba.uint64  # unsigned indices: numba drops its negative-index checks and
    # LLVM vectorises the copies (see _window_jit._copy_flow)
    for w in range(len(rows)):
        r = rows[w]
        ir, tr, lm = inp[w], tgt[w], loss_mask[w]
        sg, ps, ds = seg_ids[w], pos_ids[w], doc_ids[w]
        j = 0
        for s in range(row_ptr[r], row_ptr[r + 1]):
            d, o, n = seg_doc[s], seg_off[s], seg_pairs[s]
            uj, un = u(j), u(n)
            if wide:
                src, nxt, dst = u(tstart[d] + 8 * o), u(tstart[d] + 8 * o + 8), u(8 * j)
                i8, t8 = inp8[w], tgt8[w]
                for k in range(u(8 * n)):
                    i8[dst + k] = u8[src + k]
                for k in range(u(8 * n)):
                    t8[dst + k] = u8[nxt + k]
            else:
                src, nxt = u(tstart[d] + o), u(tstart[d] + o + 1)
                for k in range(un):
                    ir[uj + k] = tok[src + k]
                for k in range(un):
                    tr[uj + k] = tok[nxt + k]
            if has_mask:
                m = u(mstart[d] + o + 1)
                for k in range(un):
                    lm[uj + k] = mbytes[m + k] != 0
            else:
                for k in range(un):
                    lm[uj + k] = True
            seg, doc = s - row_ptr[r] + 1, d + 1
            for k in range(un):
                sg[uj + k] = seg
            for k in range(un):
                ps[uj + k] = k
            if want_doc:
                for k in range(un):
                    ds[uj + k] = doc
            j += n
        for k in range(u(j), u(seq_len)):
            ir[k] = pad_id
            tr[k] = pad_id
            lm[k] = False
            sg[k] = 0
            ps[k] = 0
            if want_doc:
                ds[k] = 0
