"""The numba kernels themselves (imported only when numba is installed and enabled).

Kept at module level so that numba can cache their machine code on disk; see
``_kernels`` for how they are chosen and checked against the numpy path.
"""

import math

import numba
import numpy as np

jit = numba.njit(cache=True, nogil=True)
# Small helpers are inlined into the kernels at numba's IR level: as plain calls,
# each passed ten array structures and cost more than the arithmetic.
inline = numba.njit(cache=True, nogil=True, inline="always")
u64 = np.uint64
M1 = u64(0xBF58476D1CE4E5B9)
M2 = u64(0x94D049BB133111EB)
S30, S27, S31 = u64(30), u64(27), u64(31)


@inline
def mix64(z):
    z = (z ^ (z >> S30)) * M1
    z = (z ^ (z >> S27)) * M2
    return z ^ (z >> S31)


@inline
def permute_one(n, rb, lm, rm, k0, k1, k2, k3, k4, k5, x):
    while True:
        left = x >> rb
        right = x & rm
        left, right = right, (left ^ mix64(right + k0)) & lm
        left, right = right, (left ^ mix64(right + k1)) & rm
        left, right = right, (left ^ mix64(right + k2)) & lm
        left, right = right, (left ^ mix64(right + k3)) & rm
        left, right = right, (left ^ mix64(right + k4)) & lm
        left, right = right, (left ^ mix64(right + k5)) & rm
        x = (left << rb) | right
        if x < n:
            return x


@inline
def rounds(rb, lm, rm, k0, k1, k2, k3, k4, k5, x):
    left = x >> rb
    right = x & rm
    left, right = right, (left ^ mix64(right + k0)) & lm
    left, right = right, (left ^ mix64(right + k1)) & rm
    left, right = right, (left ^ mix64(right + k2)) & lm
    left, right = right, (left ^ mix64(right + k3)) & rm
    left, right = right, (left ^ mix64(right + k4)) & lm
    left, right = right, (left ^ mix64(right + k5)) & rm
    return (left << rb) | right


@jit
def permute_block(n, rb, lm, rm, rk, idx, out):
    # In chunks, two passes: the six rounds of every element into a scratch buffer in a
    # loop without branches, which LLVM vectorises (4x faster here than four interleaved
    # scalar chains; the scratch keeps `out`, often `idx` itself, from aliasing the
    # loop's input, which would keep it scalar), then the cycle walk of the few
    # elements that landed past n.
    k0, k1, k2, k3, k4, k5 = rk[0], rk[1], rk[2], rk[3], rk[4], rk[5]
    m = idx.shape[0]
    step = 512
    tmp = np.empty(step, dtype=np.uint64)
    for a in range(0, m, step):
        c = min(step, m - a)
        for i in range(c):
            tmp[i] = rounds(rb, lm, rm, k0, k1, k2, k3, k4, k5, idx[a + i])
        for i in range(c):
            x = tmp[i]
            out[a + i] = x if x < n else permute_one(n, rb, lm, rm, k0, k1, k2, k3, k4, k5, x)


@jit
def permute_per_element(n, rb, lm, rm, rk, idx, out):
    for e in range(idx.shape[0]):
        out[e] = permute_one(
            n, rb, lm, rm, rk[0, e], rk[1, e], rk[2, e], rk[3, e], rk[4, e], rk[5, e], idx[e]
        )


@jit
def permute_parts(n, rb, lm, rm, rk, part, j, offset, out):
    """out[e] = permutation of part[e] applied to j[e], plus the part's offset."""
    one = u64(1)
    for e in range(j.shape[0]):
        p = part[e]
        x = j[e]
        if n[p] > one:
            x = permute_one(
                n[p],
                rb[p],
                lm[p],
                rm[p],
                rk[0, p],
                rk[1, p],
                rk[2, p],
                rk[3, p],
                rk[4, p],
                rk[5, p],
                x,
            )
        out[e] = x + offset[p]


# The schedule table T[part, segment, column] has the columns of ScheduleTable:
# x0, x1, r0, r1, share, c, inv_r0, inv_2c (unused segments: share = x0 = +inf).
@inline
def quantile(i, y, T):
    m = 0
    for s in range(1, T.shape[1]):
        if T[i, s, 4] < y:
            m = s
    z = max(y - T[i, m, 4], 0.0)
    ci = T[i, m, 5]
    if ci == 0.0:
        x = z * T[i, m, 6]
    else:
        a = T[i, m, 2]
        root = math.sqrt(max(a * a + 4.0 * ci * z, 0.0))
        if ci > 0.0:
            x = root * T[i, m, 7]
        elif a + root > 0.0:
            x = 2.0 * z / (a + root)
        else:
            x = 0.0
    lo = T[i, m, 0]
    return min(max(lo + x, lo), T[i, m, 1])


@inline
def key_of(i, j, phi, inv, uniform, T):
    y = (float(j) + phi[i]) * inv[i]
    if uniform[i]:
        return y
    return quantile(i, y, T)


@inline
def cdf(i, t, T):
    m = 0
    for s in range(1, T.shape[1]):
        if T[i, s, 0] <= t:
            m = s
    lo = T[i, m, 0]
    x = min(max(t - lo, 0.0), T[i, m, 1] - lo)
    return T[i, m, 4] + x * (T[i, m, 2] + T[i, m, 5] * x)


@jit
def counts(t, n, phi, inv, uniform, T, out):
    """out[i] = #{j < n[i] : key(i, j) < t}, by a search around the CDF estimate."""
    for i in range(n.shape[0]):
        ni = n[i]
        if uniform[i]:
            f = min(max(t, 0.0), 1.0)
        else:
            f = min(max(cdf(i, t, T), 0.0), 1.0)
        est = math.ceil(float(ni) * f - phi[i])
        g = 0
        if est > 0.0:
            g = ni if est >= float(ni) else int(est)
        # Gallop to a bracket [lo, hi], then bisect.
        lo = g
        step = 1
        while lo > 0 and not (key_of(i, lo - 1, phi, inv, uniform, T) < t):
            lo = max(lo - step, 0)
            step *= 2
        hi = g
        step = 1
        while hi < ni and key_of(i, hi, phi, inv, uniform, T) < t:
            hi = min(hi + step, ni)
            step *= 2
        while lo < hi:
            mid = (lo + hi) // 2
            if key_of(i, mid, phi, inv, uniform, T) < t:
                lo = mid + 1
            else:
                hi = mid
        out[i] = lo


@inline
def heap_less(ka, ra, kb, rb):
    # Bitwise, not short-circuit: compiles without branches (the comparisons of a
    # merge are unpredictable, and mispredictions dominated its cost).
    return (ka < kb) | ((ka == kb) & (ra < rb))


@jit
def walk(taken, n, phi, inv, uniform, T, count, out_part, out_j):
    """The next ``count`` elements of the merge after ``taken``: a k-way heap merge
    by (key, part, j). Returns (elements emitted, key of the last one)."""
    k = n.shape[0]
    hk = np.empty(k, dtype=np.float64)
    hr = np.empty(k, dtype=np.int64)
    size = 0
    for i in range(k):
        if taken[i] < n[i]:
            key = key_of(i, taken[i], phi, inv, uniform, T)
            pos = size
            size += 1
            while pos > 0:
                parent = (pos - 1) // 2
                if heap_less(key, i, hk[parent], hr[parent]):
                    hk[pos] = hk[parent]
                    hr[pos] = hr[parent]
                    pos = parent
                else:
                    break
            hk[pos] = key
            hr[pos] = i
    last = -np.inf
    emitted = 0
    while emitted < count and size > 0:
        i = hr[0]
        last = hk[0]
        out_part[emitted] = i
        out_j[emitted] = taken[i]
        emitted += 1
        taken[i] += 1
        if taken[i] < n[i]:
            key = key_of(i, taken[i], phi, inv, uniform, T)
            rank = i
        else:
            size -= 1
            if size == 0:
                break
            key = hk[size]
            rank = hr[size]
        # Bottom-up replacement of the root: move the hole to a leaf along the smaller
        # children (one comparison a level), then sift the new entry up from there; the
        # new key is usually large, so it rarely climbs.
        pos = 0
        child = 1
        while child < size:
            if child + 1 < size:
                child += np.int64(heap_less(hk[child + 1], hr[child + 1], hk[child], hr[child]))
            hk[pos] = hk[child]
            hr[pos] = hr[child]
            pos = child
            child = 2 * pos + 1
        while pos > 0:
            parent = (pos - 1) // 2
            if heap_less(key, rank, hk[parent], hr[parent]):
                hk[pos] = hk[parent]
                hr[pos] = hr[parent]
                pos = parent
            else:
                break
        hk[pos] = key
        hr[pos] = rank
    return emitted, last


_PACK = np.int64(46)  # j < 2**46 in any mix; the part index goes above it


@jit
def merge_block(start, stop, phi, inv, uniform, T, out_part, out_j, out_key):
    """Every element with ``start[i] <= j < stop[i]``, sorted by (key, part, j).

    A bucket sort: keys are spread nearly evenly over the block's clock interval, so
    a counting sort on the key's bucket, stable in (part, j) order, then an insertion
    sort within each (small) bucket costs a few passes and no unpredictable
    comparisons. Bucket indices grow monotonically with the key, so the result is
    exact whatever the distribution. (part, j) travel packed in one word while
    sorting. Returns the element count.
    """
    k = start.shape[0]
    total = 0
    for i in range(k):
        total += stop[i] - start[i]
    if total == 0:
        return 0
    keys = np.empty(total, dtype=np.float64)
    e = 0
    lo = np.inf
    hi = -np.inf
    for i in range(k):
        # Per part, not per element: the check inside the loop cost 30 ns an element.
        uni = uniform[i]
        for j in range(start[i], stop[i]):
            key = (float(j) + phi[i]) * inv[i]
            if not uni:
                key = quantile(i, key, T)
            keys[e] = key
            lo = min(lo, key)
            hi = max(hi, key)
            e += 1
    nb = total
    scale = 0.0
    if hi > lo:
        scale = (nb - 1) / (hi - lo)
    fill = np.zeros(nb + 1, dtype=np.int64)
    for e in range(total):
        b = min(max(int((keys[e] - lo) * scale), 0), nb - 1)
        fill[b + 1] += 1
    for b in range(nb):
        fill[b + 1] += fill[b]
    e = 0
    for i in range(k):
        base = np.int64(i) << _PACK
        for j in range(start[i], stop[i]):
            key = keys[e]
            b = min(max(int((key - lo) * scale), 0), nb - 1)
            d = fill[b]
            fill[b] = d + 1
            out_key[d] = key
            out_j[d] = base | j
            e += 1
    # fill[b] is now the end of bucket b; sort each bucket by key, stably.
    begin = 0
    for b in range(nb):
        end = fill[b]
        for x in range(begin + 1, end):
            key = out_key[x]
            packed = out_j[x]
            y = x - 1
            while y >= begin and out_key[y] > key:
                out_key[y + 1] = out_key[y]
                out_j[y + 1] = out_j[y]
                y -= 1
            out_key[y + 1] = key
            out_j[y + 1] = packed
        begin = end
    low = (np.int64(1) << _PACK) - 1
    for d in range(total):
        packed = out_j[d]
        out_part[d] = packed >> _PACK
        out_j[d] = packed & low
    return total


@jit
def locate_flat(part, j, n, rb, lm, rm, rk, offset, ordinal, out_ord, out_rec):
    """Source and record of (part, j) pairs whose parts are sources or shuffled sources.

    Elements are grouped by part first (a counting sort), so each part's keys and
    shape stay in registers, and four independent Feistel chains run side by side
    (a source part has n = 1 in the shape table and is not permuted).
    """
    k = n.shape[0]
    m = j.shape[0]
    start = np.zeros(k + 1, dtype=np.int64)
    for e in range(m):
        start[part[e] + 1] += 1
    for q in range(k):
        start[q + 1] += start[q]
    fill = start[:k].copy()
    idx = np.empty(m, dtype=np.int64)
    for e in range(m):
        q = part[e]
        idx[fill[q]] = e
        fill[q] += 1
        out_ord[e] = ordinal[q]
    one = u64(1)
    for q in range(k):
        lo = start[q]
        hi = start[q + 1]
        nq = n[q]
        off = offset[q]
        if nq <= one:
            for f in range(lo, hi):
                e = idx[f]
                out_rec[e] = u64(j[e]) + off
            continue
        b, lmq, rmq = rb[q], lm[q], rm[q]
        k0, k1, k2, k3, k4, k5 = rk[0, q], rk[1, q], rk[2, q], rk[3, q], rk[4, q], rk[5, q]
        f = lo
        while f + 4 <= hi:
            e0, e1, e2, e3 = idx[f], idx[f + 1], idx[f + 2], idx[f + 3]
            x0 = rounds(b, lmq, rmq, k0, k1, k2, k3, k4, k5, u64(j[e0]))
            x1 = rounds(b, lmq, rmq, k0, k1, k2, k3, k4, k5, u64(j[e1]))
            x2 = rounds(b, lmq, rmq, k0, k1, k2, k3, k4, k5, u64(j[e2]))
            x3 = rounds(b, lmq, rmq, k0, k1, k2, k3, k4, k5, u64(j[e3]))
            if x0 >= nq:
                x0 = permute_one(nq, b, lmq, rmq, k0, k1, k2, k3, k4, k5, x0)
            if x1 >= nq:
                x1 = permute_one(nq, b, lmq, rmq, k0, k1, k2, k3, k4, k5, x1)
            if x2 >= nq:
                x2 = permute_one(nq, b, lmq, rmq, k0, k1, k2, k3, k4, k5, x2)
            if x3 >= nq:
                x3 = permute_one(nq, b, lmq, rmq, k0, k1, k2, k3, k4, k5, x3)
            out_rec[e0] = x0 + off
            out_rec[e1] = x1 + off
            out_rec[e2] = x2 + off
            out_rec[e3] = x3 + off
            f += 4
        while f < hi:
            e = idx[f]
            out_rec[e] = permute_one(nq, b, lmq, rmq, k0, k1, k2, k3, k4, k5, u64(j[e])) + off
            f += 1


@jit
def pad_spans(values, starts, counts, out, pad):
    """Rows of a padded batch from spans of ``values``: row ``r`` is ``values[starts[r] :
    starts[r] + counts[r]]`` then ``pad`` to the row's end; rows past ``len(starts)`` are
    all ``pad``. One pass over ``out`` (2-D: rows x elements of one padded example)."""
    rows, width = out.shape
    n = len(starts)
    for r in range(rows):
        c = counts[r] if r < n else 0
        s = starts[r] if r < n else 0
        for j in range(c):
            out[r, j] = values[s + j]
        for j in range(c, width):
            out[r, j] = pad
