"""Compiled kernels (numba, the ``fast`` extra) for the ordering hot paths.

Each kernel computes exactly what the numpy path computes, bit for bit (the same
integer arithmetic; the same IEEE double expressions in the same order, without
fused multiply-add), and the tests check the two against each other. numba is
imported on first use, never at ``import feedline``; set ``FEEDLINE_NUMBA=0`` to
use the numpy path. Compiled code is cached on disk, so a second process does not
pay the compile time.
"""

from __future__ import annotations

import math
import os
import threading

_lock = threading.Lock()
_state: dict[str, object] = {}


def enabled() -> bool:
    """Whether compiled kernels are in use (numba installed and not disabled)."""
    return get() is not None


def get():
    """The kernel namespace, or None when numba is missing or disabled."""
    if "k" in _state:
        return _state["k"]
    with _lock:
        if "k" not in _state:
            _state["k"] = _build() if os.environ.get("FEEDLINE_NUMBA", "1") != "0" else None
    return _state["k"]


def _build():
    try:
        import numba  # noqa: PLC0415
        import numpy as np  # noqa: PLC0415
    except ImportError:
        return None

    jit = numba.njit(cache=True, nogil=True)
    u64 = np.uint64
    M1 = u64(0xBF58476D1CE4E5B9)
    M2 = u64(0x94D049BB133111EB)
    S30, S27, S31 = u64(30), u64(27), u64(31)

    @jit
    def mix64(z):
        z = (z ^ (z >> S30)) * M1
        z = (z ^ (z >> S27)) * M2
        return z ^ (z >> S31)

    @jit
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

    @jit
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
        # The six rounds of one element form a chain of dependent multiplies; four
        # independent chains side by side let the CPU overlap them (about 2x faster).
        k0, k1, k2, k3, k4, k5 = rk[0], rk[1], rk[2], rk[3], rk[4], rk[5]
        m = idx.shape[0]
        e = 0
        while e + 4 <= m:
            a = rounds(rb, lm, rm, k0, k1, k2, k3, k4, k5, idx[e])
            b = rounds(rb, lm, rm, k0, k1, k2, k3, k4, k5, idx[e + 1])
            c = rounds(rb, lm, rm, k0, k1, k2, k3, k4, k5, idx[e + 2])
            d = rounds(rb, lm, rm, k0, k1, k2, k3, k4, k5, idx[e + 3])
            out[e] = a if a < n else permute_one(n, rb, lm, rm, k0, k1, k2, k3, k4, k5, a)
            out[e + 1] = b if b < n else permute_one(n, rb, lm, rm, k0, k1, k2, k3, k4, k5, b)
            out[e + 2] = c if c < n else permute_one(n, rb, lm, rm, k0, k1, k2, k3, k4, k5, c)
            out[e + 3] = d if d < n else permute_one(n, rb, lm, rm, k0, k1, k2, k3, k4, k5, d)
            e += 4
        while e < m:
            out[e] = permute_one(n, rb, lm, rm, k0, k1, k2, k3, k4, k5, idx[e])
            e += 1

    @jit
    def permute_per_element(n, rb, lm, rm, rk, idx, out):
        for e in range(idx.shape[0]):
            out[e] = permute_one(n, rb, lm, rm, rk[0, e], rk[1, e], rk[2, e], rk[3, e],
                                 rk[4, e], rk[5, e], idx[e])

    @jit
    def permute_parts(n, rb, lm, rm, rk, part, j, offset, out):
        """out[e] = permutation of part[e] applied to j[e], plus the part's offset."""
        one = u64(1)
        for e in range(j.shape[0]):
            p = part[e]
            x = j[e]
            if n[p] > one:
                x = permute_one(n[p], rb[p], lm[p], rm[p], rk[0, p], rk[1, p], rk[2, p],
                                rk[3, p], rk[4, p], rk[5, p], x)
            out[e] = x + offset[p]

    @jit
    def quantile(i, y, share, x0, x1, r0, c, inv_r0, inv_2c):
        m = 0
        for s in range(1, share.shape[1]):
            if share[i, s] < y:
                m = s
        z = max(y - share[i, m], 0.0)
        ci = c[i, m]
        if ci == 0.0:
            x = z * inv_r0[i, m]
        else:
            a = r0[i, m]
            root = math.sqrt(max(a * a + 4.0 * ci * z, 0.0))
            if ci > 0.0:
                x = root * inv_2c[i, m]
            elif a + root > 0.0:
                x = 2.0 * z / (a + root)
            else:
                x = 0.0
        lo = x0[i, m]
        return min(max(lo + x, lo), x1[i, m])

    @jit
    def key_of(i, j, phi, inv, uniform, share, x0, x1, r0, c, inv_r0, inv_2c):
        y = (float(j) + phi[i]) * inv[i]
        if uniform[i]:
            return y
        return quantile(i, y, share, x0, x1, r0, c, inv_r0, inv_2c)

    @jit
    def cdf(i, t, share, x0, x1, r0, c):
        m = 0
        for s in range(1, x0.shape[1]):
            if x0[i, s] <= t:
                m = s
        lo = x0[i, m]
        x = min(max(t - lo, 0.0), x1[i, m] - lo)
        return share[i, m] + x * (r0[i, m] + c[i, m] * x)

    @jit
    def counts(t, n, phi, inv, uniform, share, x0, x1, r0, c, inv_r0, inv_2c, out):
        """out[i] = #{j < n[i] : key(i, j) < t}, by a search around the CDF estimate."""
        for i in range(n.shape[0]):
            ni = n[i]
            if uniform[i]:
                f = min(max(t, 0.0), 1.0)
            else:
                f = min(max(cdf(i, t, share, x0, x1, r0, c), 0.0), 1.0)
            est = math.ceil(float(ni) * f - phi[i])
            g = 0
            if est > 0.0:
                g = ni if est >= float(ni) else int(est)
            # Gallop to a bracket [lo, hi], then bisect.
            lo = g
            step = 1
            while lo > 0 and not (key_of(i, lo - 1, phi, inv, uniform, share, x0, x1, r0, c,
                                         inv_r0, inv_2c) < t):
                lo = max(lo - step, 0)
                step *= 2
            hi = g
            step = 1
            while hi < ni and key_of(i, hi, phi, inv, uniform, share, x0, x1, r0, c,
                                     inv_r0, inv_2c) < t:
                hi = min(hi + step, ni)
                step *= 2
            while lo < hi:
                mid = (lo + hi) // 2
                if key_of(i, mid, phi, inv, uniform, share, x0, x1, r0, c, inv_r0,
                          inv_2c) < t:
                    lo = mid + 1
                else:
                    hi = mid
            out[i] = lo

    @jit
    def heap_less(ka, ra, kb, rb):
        return ka < kb or (ka == kb and ra < rb)

    @jit
    def walk(taken, n, phi, inv, uniform, share, x0, x1, r0, c, inv_r0, inv_2c,
             count, out_part, out_j):
        """The next ``count`` elements of the merge after ``taken``: a k-way heap merge
        by (key, part, j). Returns (elements emitted, key of the last one)."""
        k = n.shape[0]
        hk = np.empty(k, dtype=np.float64)
        hr = np.empty(k, dtype=np.int64)
        size = 0
        for i in range(k):
            if taken[i] < n[i]:
                key = key_of(i, taken[i], phi, inv, uniform, share, x0, x1, r0, c, inv_r0,
                             inv_2c)
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
                key = key_of(i, taken[i], phi, inv, uniform, share, x0, x1, r0, c, inv_r0,
                             inv_2c)
                rank = i
            else:
                size -= 1
                key = hk[size]
                rank = hr[size]
            # Sift the new (key, rank) down from the root.
            pos = 0
            while True:
                child = 2 * pos + 1
                if child >= size:
                    break
                if child + 1 < size and heap_less(hk[child + 1], hr[child + 1], hk[child],
                                                  hr[child]):
                    child += 1
                if heap_less(hk[child], hr[child], key, rank):
                    hk[pos] = hk[child]
                    hr[pos] = hr[child]
                    pos = child
                else:
                    break
            if size > 0:
                hk[pos] = key
                hr[pos] = rank
        return emitted, last

    class Kernels:
        pass

    ns = Kernels()
    for f in (permute_block, permute_per_element, permute_parts, counts, walk):
        setattr(ns, f.__name__, f)
    return ns
