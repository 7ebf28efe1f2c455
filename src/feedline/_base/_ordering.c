/* The order's hot loops in C, without the GIL (feedline/_base/ordering.py).
 *
 * 1. permute_tabled(tables, rb, lb, n, x, out) -> bool: a shuffle's positions through
 * the round tables of its six-round Feistel network (order/_perm.py).
 *
 * tables: six C-contiguous uint16 arrays, round i's function of the right half (of rb
 * bits in the even rounds, lb in the odd ones: 2**rb and 2**lb entries). Each x[i] in
 * [0, n) is split into a left half (x >> rb) and a right half (x & (2**rb - 1)); a round
 * maps (l, r) to (r, l ^ table[r]); the six rounds are applied again (cycle walking)
 * while the result is at or above n. The result is written to out[i] (out may be x).
 *
 * The same arithmetic as the numpy path (_perm._rounds_tabled), one element at a time
 * in registers, the tables as uint16 (a 4,000,000-row shuffle's six in 24 kB): 4 ns a
 * position, where numpy's took 8 - 9 ns in calls that each took the GIL from the
 * threads gathering rows (measured on the 2-core reference machine, 64k - 256k blocks).
 *
 * Each round's result is masked to its half's width, so the network is a bijection of
 * [0, 2**(rb+lb)) whatever the tables hold and every walk ends (for the tables the
 * order makes, the masks change nothing). An x outside [0, n) (a negative one too) is
 * refused: False, nothing written, and the caller takes numpy's way.
 *
 * 2. walk(taken, n, phi, inv, uniform, T, count, out_part, out_j) -> (emitted, last): a
 * mix's next count elements (order/_mixplan.py), a heap merge of its k parts by (key,
 * part, j), element j of part i keyed (j + phi[i]) * inv[i], or that share's quantile
 * of the part's schedule (the table T[i, segment, 8]) where it is not uniform. taken[i]
 * (element j of part i is next) is advanced. The keys are the numpy path's and numba's
 * (ScheduleTable.inverse, _jit.key_of): the same IEEE double operations in the same
 * order, built with -ffp-contract=off (no fused multiply-add). A mix of two 1,000,000-row
 * shuffles read 256k positions at a time took 30 - 35 ns a position on the numpy path
 * (a threshold's span of keys made and sorted in about 40 numpy calls a block, and the
 * page faults of their temporaries) and on numba's; here 3.5 (and 3. below, 6 - 7).
 *
 * 3. locate(part, j, tables, n, offset, ordinal, ords, recs) -> bool: a mix's elements
 * (element j of part q) as source ordinals and records, where every part is a source or
 * a shuffle of one: the shuffle's image of j through its round tables (as 1.), plus the
 * source's offset. The numpy path grouped the elements by part and permuted each group.
 *
 * 4. concat_locate(pos, table, ends, shift, passes, ordinal, shift_of, ords, recs) ->
 * bool: a concat of sources (a manifest's shards) located: each position's child by the
 * concat's bucket table (order/_child_table.py), its ordinal and record, in one pass
 * where numpy made five (a gather and two compare-and-add passes, two more gathers).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <math.h>
#include <stdint.h>

/* A walk is at most this many rounds: from a position in [0, n) it ends in a few (fewer
 * than two on average; runs of 2**20 images at or above n have odds of 2**-(2**20)). It
 * is bounded all the same: the arrays are read again after they were checked, with the
 * GIL free, and another thread changing them could start a walk on a cycle that never
 * comes back below n. */
#define WALK_MAX (1 << 20)

/* Whether a buffer's format is of kind 'i' (int64), 'u' (uint64), 'f' (float64) or '?'
 * (bool), in native order. */
static int of_kind(const char *f, char kind) {
    if (!f) return 0;
    if (*f == '@' || *f == '=' || (*f == '<' && PY_LITTLE_ENDIAN)) f++;
    if (!f[0] || f[1]) return 0;
    switch (kind) {
    case 'i': return f[0] == 'q' || (f[0] == 'l' && sizeof(long) == 8);
    case 'u': return f[0] == 'Q' || (f[0] == 'L' && sizeof(long) == 8);
    case 'f': return f[0] == 'd';
    default: return f[0] == '?';
    }
}

static const char *kind_name(char kind) {
    return kind == 'i' ? "int64" : kind == 'u' ? "uint64" : kind == 'f' ? "float64" : "bool";
}

/* Whether a buffer's format is uint16 in native order. */
static int is_uint16(const char *f) {
    if (!f) return 0;
    if (*f == '@' || *f == '=' || (*f == '<' && PY_LITTLE_ENDIAN)) f++;
    return f[0] == 'H' && !f[1];
}

static int table_view(PyObject *obj, Py_buffer *view, Py_ssize_t want) {
    if (PyObject_GetBuffer(obj, view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) return -1;
    const char *f = view->format;
    if (!is_uint16(f)) {
        PyErr_Format(PyExc_TypeError, "a round table must be uint16, found format %s",
                     f ? f : "?");
        PyBuffer_Release(view);
        return -1;
    }
    if (view->len / 2 != want) {
        PyErr_Format(PyExc_ValueError, "a round table of %zd entries was expected, found %zd",
                     want, view->len / 2);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

/* The six rounds of v: t[0] - t[5] the tables, rb the right half's bits, rm and lm the
 * halves' masks. */
static inline uint64_t rounds(const uint16_t *const *t, int rb, uint64_t rm, uint64_t lm,
                              uint64_t v) {
    uint64_t l = v >> rb, r = v & rm, f;
    f = (l ^ t[0][r]) & lm; l = r; r = f;
    f = (l ^ t[1][r]) & rm; l = r; r = f;
    f = (l ^ t[2][r]) & lm; l = r; r = f;
    f = (l ^ t[3][r]) & rm; l = r; r = f;
    f = (l ^ t[4][r]) & lm; l = r; r = f;
    f = (l ^ t[5][r]) & rm; l = r; r = f;
    return (l << rb) | r;
}

/* *v walked through the rounds until it is below un; 0 if that took WALK_MAX rounds. */
static inline int walk_in(const uint16_t *const *t, int rb, uint64_t rm, uint64_t lm,
                          uint64_t un, uint64_t *v) {
    uint64_t x = *v;
    for (int s = 0; x >= un; s++) {
        if (s == WALK_MAX) return 0;
        x = rounds(t, rb, rm, lm, x);
    }
    *v = x;
    return 1;
}

/* A loop's answer: ok (False: refused, nothing written), or, where it was lost, the
 * error of a walk past WALK_MAX rounds or of an array found out of range when read
 * again: after outputs were written (a refusal, False, writes nothing), so the caller
 * cannot take numpy's way with what it passed. Only another thread writing the arrays
 * during the call, or round tables not made by _perm._tables, lead here. */
static PyObject *answer(int ok, int lost) {
    if (!lost) return PyBool_FromLong(ok);
    PyErr_SetString(PyExc_RuntimeError,
                    "the order's arrays changed while they were read (another thread wrote "
                    "them), or a cycle walk took 2**20 rounds (round tables not made by "
                    "_perm._tables): the output is not written whole");
    return NULL;
}

/* A C-contiguous view of obj, of kind (of_kind) and want items (any number if < 0). */
static int view(PyObject *obj, Py_buffer *v, int writable, char kind, Py_ssize_t want,
                const char *what) {
    int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj, v, flags) < 0) return -1;
    if (!of_kind(v->format, kind)) {
        PyErr_Format(PyExc_TypeError, "%s: an array of %s was expected, found format %s", what,
                     kind_name(kind), v->format ? v->format : "?");
        PyBuffer_Release(v);
        return -1;
    }
    if (want >= 0 && v->len / v->itemsize != want) {
        PyErr_Format(PyExc_ValueError, "%s: %zd items were expected, found %zd", what, want,
                     v->len / v->itemsize);
        PyBuffer_Release(v);
        return -1;
    }
    return 0;
}

/* View i of the array a (a Py_buffer[]) taken of obj (view()'s checks), counted in got
 * (the views a function's exit releases); to done where it fails. */
#define TAKE(a, i, obj, writable, kind, want, what)                                        \
    do {                                                                                   \
        if (view((obj), &(a)[(i)], (writable), (kind), (want), (what)) < 0) goto done;     \
        got = (i) + 1;                                                                     \
    } while (0)

/* Whether the outputs a[first_out..got) are apart from every other buffer taken (inputs,
 * and each other): a loop reads an input after it wrote an output, so an output over an
 * input would be read back written. The one exception, an in-place use, is output
 * same_out over input same_in when both are the same memory (each element read before its
 * own output is written); -1: none. A ValueError where they are not. */
static int apart(const Py_buffer *a, int got, int first_out, int same_in, int same_out) {
    for (int o = first_out; o < got; o++) {
        const uintptr_t o0 = (uintptr_t)a[o].buf, o1 = o0 + (uintptr_t)a[o].len;
        for (int i = 0; i < o; i++) {
            const uintptr_t i0 = (uintptr_t)a[i].buf, i1 = i0 + (uintptr_t)a[i].len;
            if (!a[o].len || !a[i].len || o1 <= i0 || i1 <= o0) continue;
            if (i == same_in && o == same_out && o0 == i0 && a[o].len == a[i].len) continue;
            PyErr_SetString(PyExc_ValueError,
                             "an output overlaps an input or another output: apart, or the "
                             "same array where it is written in place, was expected");
            return -1;
        }
    }
    return 0;
}

static PyObject *permute_tabled(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *tables, *xo, *outo;
    int rb, lb;
    long long n;
    if (!PyArg_ParseTuple(args, "O!iiLOO", &PyTuple_Type, &tables, &rb, &lb, &n, &xo, &outo))
        return NULL;
    if (PyTuple_GET_SIZE(tables) != 6) {
        PyErr_Format(PyExc_ValueError, "6 round tables were expected, found %zd",
                     PyTuple_GET_SIZE(tables));
        return NULL;
    }
    if (rb < 0 || lb < 0 || rb > 16 || lb > 16 || n < 0 || n > (1LL << (rb + lb))) {
        PyErr_Format(PyExc_ValueError,
                     "halves of 0 - 16 bits and 0 <= n <= 2**(rb+lb) were expected, found "
                     "rb=%d, lb=%d, n=%lld", rb, lb, n);
        return NULL;
    }
    Py_buffer a[8];  /* the six tables, x, out */
    int got = 0;
    PyObject *result = NULL;
    for (; got < 6; got++) {
        Py_ssize_t want = (Py_ssize_t)1 << (got % 2 == 0 ? rb : lb);
        if (table_view(PyTuple_GET_ITEM(tables, got), &a[got], want) < 0) goto done;
    }
    TAKE(a, 6, xo, 0, 'i', -1, "the positions");
    const Py_ssize_t m = a[6].len / 8;
    TAKE(a, 7, outo, 1, 'i', m, "the output");
    const uint16_t *t[6];
    for (int i = 0; i < 6; i++) t[i] = a[i].buf;
    const int64_t *x = a[6].buf;
    int64_t *out = a[7].buf;
    if (apart(a, got, 7, 6, 7) < 0) goto done;  /* out may be x itself */
    const uint64_t rm = ((uint64_t)1 << rb) - 1, lm = ((uint64_t)1 << lb) - 1;
    const uint64_t un = (uint64_t)n;
    int ok = 1, lost = 0;
    Py_BEGIN_ALLOW_THREADS
    uint64_t bad = 0;  /* first every position checked: nothing is written on a refusal */
    for (Py_ssize_t i = 0; i < m; i++) bad |= (uint64_t)((uint64_t)x[i] >= un);
    if (bad) {
        ok = 0;
    } else {
        /* every position's six rounds with no branch, four positions' lookups side by
         * side (3.8 against 4.5 ns a position one by one), then the walk of those at or
         * above n */
        Py_ssize_t i = 0;
        for (; i + 4 <= m; i += 4) {
            uint64_t l[4], r[4];
            for (int j = 0; j < 4; j++) {
                l[j] = (uint64_t)x[i + j] >> rb;
                r[j] = (uint64_t)x[i + j] & rm;
            }
            for (int k = 0; k < 6; k++) {
                const uint16_t *tk = t[k];
                const uint64_t mk = k % 2 ? rm : lm;
                for (int j = 0; j < 4; j++) {
                    const uint64_t f = (l[j] ^ tk[r[j]]) & mk;
                    l[j] = r[j];
                    r[j] = f;
                }
            }
            for (int j = 0; j < 4; j++) out[i + j] = (int64_t)((l[j] << rb) | r[j]);
        }
        for (; i < m; i++) out[i] = (int64_t)rounds(t, rb, rm, lm, (uint64_t)x[i]);
        for (Py_ssize_t i = 0; i < m && !lost; i++) {
            uint64_t v = (uint64_t)out[i];
            lost = !walk_in(t, rb, rm, lm, un, &v);
            out[i] = (int64_t)v;
        }
    }
    Py_END_ALLOW_THREADS
    result = answer(ok, lost);
done:
    for (int i = 0; i < got; i++) PyBuffer_Release(&a[i]);
    return result;
}

/* ---- a mix's walk ----------------------------------------------------------------- */

/* Python's max(a, b) and min(a, b) of two floats (the first where neither is greater). */
static inline double py_max(double a, double b) { return b > a ? b : a; }
static inline double py_min(double a, double b) { return b < a ? b : a; }

/* The quantile of share y in row Ti (S segments of 8 columns: x0, x1, r0, r1, share, c,
 * inv_r0, inv_2c) of a schedule table: _jit.quantile, Schedule.inverse. */
static inline double quantile(const double *Ti, Py_ssize_t S, double y) {
    Py_ssize_t m = 0;
    for (Py_ssize_t s = 1; s < S; s++)
        if (Ti[s * 8 + 4] < y) m = s;
    const double *g = Ti + m * 8;
    const double z = py_max(y - g[4], 0.0);
    const double c = g[5];
    double x;
    if (c == 0.0) {
        x = z * g[6];
    } else {
        const double a = g[2];
        const double root = sqrt(py_max(a * a + 4.0 * c * z, 0.0));
        if (c > 0.0)
            x = root * g[7];
        else if (a + root > 0.0)
            x = 2.0 * z / (a + root);
        else
            x = 0.0;
    }
    const double lo = g[0];
    return py_min(py_max(lo + x, lo), g[1]);
}

typedef struct {
    const double *phi, *inv, *T;
    const uint8_t *uniform;
    Py_ssize_t S;
} Keys;

static inline double key_of(const Keys *K, int64_t i, int64_t j) {
    const double y = ((double)j + K->phi[i]) * K->inv[i];
    return K->uniform[i] ? y : quantile(K->T + i * K->S * 8, K->S, y);
}

/* (ka, ra) before (kb, rb): bitwise, without branches (a merge's comparisons are
 * unpredictable) */
static inline int heap_less(double ka, int64_t ra, double kb, int64_t rb) {
    return (ka < kb) | ((ka == kb) & (ra < rb));
}

/* (key, rank) put in the heap's hole at pos, moved up past the entries it comes before. */
static inline void sift_up(double *hk, int64_t *hr, Py_ssize_t pos, double key, int64_t rank) {
    while (pos > 0) {
        const Py_ssize_t parent = (pos - 1) / 2;
        if (!heap_less(key, rank, hk[parent], hr[parent])) break;
        hk[pos] = hk[parent];
        hr[pos] = hr[parent];
        pos = parent;
    }
    hk[pos] = key;
    hr[pos] = rank;
}

/* The heap walk (_jit.walk): hk/hr hold the k parts' next keys and ranks. */
static Py_ssize_t walk_heap(const Keys *K, int64_t *taken, const int64_t *n, Py_ssize_t k,
                            Py_ssize_t count, int64_t *out_part, int64_t *out_j,
                            double *hk, int64_t *hr, double *last_key) {
    Py_ssize_t size = 0;
    for (Py_ssize_t i = 0; i < k; i++) {
        if (taken[i] >= n[i]) continue;
        sift_up(hk, hr, size++, key_of(K, i, taken[i]), i);
    }
    double last = -HUGE_VAL;
    Py_ssize_t emitted = 0;
    while (emitted < count && size > 0) {
        const int64_t i = hr[0];
        last = hk[0];
        out_part[emitted] = i;
        out_j[emitted] = taken[i];
        emitted++;
        taken[i]++;
        double key;
        int64_t rank;
        if (taken[i] < n[i]) {
            key = key_of(K, i, taken[i]);
            rank = i;
        } else {
            if (--size == 0) break;
            key = hk[size];
            rank = hr[size];
        }
        /* the root replaced bottom-up: the hole moved to a leaf along the smaller
         * children, then the new entry sifted up from there (it rarely climbs) */
        Py_ssize_t pos = 0, child = 1;
        while (child < size) {
            if (child + 1 < size)
                child += heap_less(hk[child + 1], hr[child + 1], hk[child], hr[child]);
            hk[pos] = hk[child];
            hr[pos] = hr[child];
            pos = child;
            child = 2 * pos + 1;
        }
        sift_up(hk, hr, pos, key, rank);
    }
    *last_key = last;
    return emitted;
}

static PyObject *walk(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *o[6], *po, *jo;
    Py_ssize_t count;
    if (!PyArg_ParseTuple(args, "OOOOOOnOO", &o[0], &o[1], &o[2], &o[3], &o[4], &o[5], &count,
                          &po, &jo))
        return NULL;
    Py_buffer v[8];
    int got = 0;
    PyObject *result = NULL;
    double *hk = NULL;
    int64_t *hr = NULL;
    TAKE(v, 0, o[0], 1, 'i', -1, "taken");
    const Py_ssize_t k = v[0].len / 8;
    TAKE(v, 1, o[1], 0, 'i', k, "n");
    TAKE(v, 2, o[2], 0, 'f', k, "phi");
    TAKE(v, 3, o[3], 0, 'f', k, "inv");
    TAKE(v, 4, o[4], 0, '?', k, "uniform");
    TAKE(v, 5, o[5], 0, 'f', -1, "T");
    if (v[5].ndim != 3 || v[5].shape[0] != k || v[5].shape[1] < 1 || v[5].shape[2] != 8) {
        PyErr_Format(PyExc_ValueError, "T of shape (%zd, segments, 8) was expected", k);
        goto done;
    }
    if (count < 0) {
        PyErr_Format(PyExc_ValueError, "count must be at least 0, found %zd", count);
        goto done;
    }
    TAKE(v, 6, po, 1, 'i', -1, "out_part");
    TAKE(v, 7, jo, 1, 'i', -1, "out_j");
    if (v[6].len / 8 < count || v[7].len / 8 < count) {
        PyErr_Format(PyExc_ValueError, "outputs of %zd elements were expected, found %zd and %zd",
                     count, v[6].len / 8, v[7].len / 8);
        goto done;
    }
    int64_t *taken = v[0].buf;
    const int64_t *n = v[1].buf;
    for (Py_ssize_t i = 0; i < k; i++) {
        if (n[i] < 0 || taken[i] < 0 || taken[i] > n[i]) {
            PyErr_Format(PyExc_ValueError,
                         "part %zd: 0 <= taken <= n was expected, found taken=%lld, n=%lld", i,
                         (long long)taken[i], (long long)n[i]);
            goto done;
        }
    }
    hk = PyMem_Malloc(sizeof(double) * (size_t)(k ? k : 1));
    hr = PyMem_Malloc(sizeof(int64_t) * (size_t)(k ? k : 1));
    if (!hk || !hr) {
        PyErr_NoMemory();
        goto done;
    }
    Keys K = {v[2].buf, v[3].buf, v[5].buf, v[4].buf, v[5].shape[1]};
    double last;
    Py_ssize_t emitted;
    Py_BEGIN_ALLOW_THREADS
    emitted = walk_heap(&K, taken, n, k, count, v[6].buf, v[7].buf, hk, hr, &last);
    Py_END_ALLOW_THREADS
    result = Py_BuildValue("nd", emitted, last);
done:
    PyMem_Free(hk);
    PyMem_Free(hr);
    for (int i = 0; i < got; i++) PyBuffer_Release(&v[i]);
    return result;
}

/* ---- a mix's elements located ------------------------------------------------------ */

typedef struct {
    const uint16_t *t[6];  /* t[0] NULL: a source, not shuffled */
    int rb;
    uint64_t rm, lm;
} Part;

/* The round tables of each part (None: a source): their views taken into v (6 a part,
 * *nv of them taken) and their shapes into P. */
static int part_tables(PyObject *tables, Py_ssize_t k, const int64_t *n, Part *P,
                       Py_buffer *v, int *nv) {
    if (!PyTuple_Check(tables) || PyTuple_GET_SIZE(tables) != k) {
        PyErr_Format(PyExc_ValueError, "a tuple of %zd parts' round tables was expected", k);
        return -1;
    }
    for (Py_ssize_t q = 0; q < k; q++) {
        PyObject *tq = PyTuple_GET_ITEM(tables, q);
        P[q].t[0] = NULL;
        if (tq == Py_None) continue;
        if (!PyTuple_Check(tq) || PyTuple_GET_SIZE(tq) != 6) {
            PyErr_Format(PyExc_ValueError, "part %zd: 6 round tables or None were expected", q);
            return -1;
        }
        Py_ssize_t len[2] = {0, 0};
        for (int r = 0; r < 6; r++) {
            Py_buffer *b = &v[*nv];
            if (PyObject_GetBuffer(PyTuple_GET_ITEM(tq, r), b, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0)
                return -1;
            (*nv)++;
            const Py_ssize_t m = b->len / 2;
            if (!is_uint16(b->format) || m < 1 || (m & (m - 1)) || m > 65536 ||
                (r >= 2 && m != len[r % 2])) {
                PyErr_Format(PyExc_ValueError,
                             "part %zd: uint16 round tables of 2**rb and 2**lb entries "
                             "(at most 2**16) were expected, table %d has %zd", q, r, m);
                return -1;
            }
            len[r % 2] = m;
            P[q].t[r] = b->buf;
        }
        int rb = 0, lb = 0;
        while (((Py_ssize_t)1 << rb) < len[0]) rb++;
        while (((Py_ssize_t)1 << lb) < len[1]) lb++;
        if (n[q] > ((int64_t)1 << (rb + lb))) {
            PyErr_Format(PyExc_ValueError, "part %zd: %lld elements beyond its tables' 2**%d",
                         q, (long long)n[q], rb + lb);
            return -1;
        }
        P[q].rb = rb;
        P[q].rm = ((uint64_t)1 << rb) - 1;
        P[q].lm = ((uint64_t)1 << lb) - 1;
    }
    return 0;
}

static PyObject *locate(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *po, *jo, *tables, *no, *offo, *ordo, *oo, *ro;
    if (!PyArg_ParseTuple(args, "OOOOOOOO", &po, &jo, &tables, &no, &offo, &ordo, &oo, &ro))
        return NULL;
    Py_buffer a[8];
    int got = 0, nv = 0;
    Part *P = NULL;
    Py_buffer *tv = NULL;
    PyObject *result = NULL;
    TAKE(a, 0, no, 0, 'i', -1, "n");
    const Py_ssize_t k = a[0].len / 8;
    TAKE(a, 1, offo, 0, 'u', k, "offset");
    TAKE(a, 2, ordo, 0, 'i', k, "ordinal");
    TAKE(a, 3, po, 0, 'i', -1, "part");
    const Py_ssize_t m = a[3].len / 8;
    TAKE(a, 4, jo, 0, 'i', m, "j");
    TAKE(a, 5, oo, 1, 'i', m, "ords");
    TAKE(a, 6, ro, 1, 'u', m, "recs");
    if (apart(a, got, 5, -1, -1) < 0) goto done;
    P = PyMem_Calloc((size_t)(k ? k : 1), sizeof(Part));
    tv = PyMem_Calloc((size_t)(6 * k + 1), sizeof(Py_buffer));
    if (!P || !tv) {
        PyErr_NoMemory();
        goto done;
    }
    const int64_t *n = a[0].buf;
    if (part_tables(tables, k, n, P, tv, &nv) < 0) goto done;
    const uint64_t *offset = a[1].buf;
    const int64_t *ordinal = a[2].buf, *part = a[3].buf, *j = a[4].buf;
    int64_t *ords = a[5].buf;
    uint64_t *recs = a[6].buf;
    int ok = 1, lost = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t e = 0; e < m; e++) {  /* checked first: nothing written on a refusal */
        const int64_t q = part[e];
        if (q < 0 || q >= k || j[e] < 0 || j[e] >= n[q]) {
            ok = 0;
            break;
        }
    }
    /* as permute_tabled: every element's first six rounds, then the walks and the
     * offsets; each part read again is checked again (see WALK_MAX) */
    for (Py_ssize_t e = 0; e < m && ok && !lost; e++) {
        const int64_t q = part[e];
        if ((lost = !(q >= 0 && q < k))) break;
        const Part *pq = &P[q];
        const uint64_t x = (uint64_t)j[e];
        recs[e] = pq->t[0] ? rounds(pq->t, pq->rb, pq->rm, pq->lm, x) : x;
    }
    for (Py_ssize_t e = 0; e < m && ok && !lost; e++) {
        const int64_t q = part[e];
        if ((lost = !(q >= 0 && q < k))) break;
        const Part *pq = &P[q];
        uint64_t x = recs[e];
        if (pq->t[0]) lost = !walk_in(pq->t, pq->rb, pq->rm, pq->lm, (uint64_t)n[q], &x);
        ords[e] = ordinal[q];
        recs[e] = x + offset[q];
    }
    Py_END_ALLOW_THREADS
    result = answer(ok, lost);
done:
    for (int i = 0; i < nv; i++) PyBuffer_Release(&tv[i]);
    for (int i = 0; i < got; i++) PyBuffer_Release(&a[i]);
    PyMem_Free(tv);
    PyMem_Free(P);
    return result;
}

/* ---- a concat of sources located --------------------------------------------------- */

static PyObject *concat_locate(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *po, *to, *eo, *oo, *so, *ordo, *ro;
    int shift, passes;
    if (!PyArg_ParseTuple(args, "OOOiiOOOO", &po, &to, &eo, &shift, &passes, &oo, &so, &ordo,
                          &ro))
        return NULL;
    Py_buffer a[7];
    int got = 0;
    PyObject *result = NULL;
    if (shift < 0 || shift > 63 || passes < 0) {
        PyErr_Format(PyExc_ValueError, "0 <= shift < 64 and passes >= 0 were expected, found "
                     "%d and %d", shift, passes);
        return NULL;
    }
    TAKE(a, 0, eo, 0, 'u', -1, "ends");
    const Py_ssize_t k = a[0].len / 8;
    TAKE(a, 1, oo, 0, 'i', k, "ordinal");
    TAKE(a, 2, so, 0, 'u', k, "shift");
    TAKE(a, 3, to, 0, 'i', -1, "table");
    TAKE(a, 4, po, 0, 'u', -1, "positions");
    const Py_ssize_t m = a[4].len / 8;
    TAKE(a, 5, ordo, 1, 'i', m, "ords");
    TAKE(a, 6, ro, 1, 'u', m, "recs");
    if (apart(a, got, 5, 4, 6) < 0) goto done;  /* recs may be the positions */
    const uint64_t *pos = a[4].buf, *ends = a[0].buf, *sh = a[2].buf;
    const int64_t *table = a[3].buf, *ordinal = a[1].buf;
    int64_t *ords = a[5].buf;
    uint64_t *recs = a[6].buf;
    const Py_ssize_t buckets = a[3].len / 8;
    const uint64_t n = k ? ends[k - 1] : 0;
    int ok = 1, lost = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t e = 0; e < m; e++) {  /* checked first: nothing written on a refusal */
        const uint64_t p = pos[e];
        if (p >= n || (p >> shift) >= (uint64_t)buckets) {
            ok = 0;
            break;
        }
        int64_t w = table[p >> shift];
        for (int i = 0; i < passes && w >= 0 && w < k; i++) w += p >= ends[w];
        if (w < 0 || w >= k || p >= ends[w] || (w > 0 && p < ends[w - 1])) {
            ok = 0;  /* a table that does not give the child holding p */
            break;
        }
    }
    for (Py_ssize_t e = 0; e < m && ok; e++) {
        /* each position read again is checked again (another thread may change it) */
        const uint64_t p = pos[e];  /* read before recs[e] is written: recs may be pos */
        if (p >= n || (p >> shift) >= (uint64_t)buckets) {
            lost = 1;
            break;
        }
        int64_t w = table[p >> shift];
        for (int i = 0; i < passes && w >= 0 && w < k; i++) w += p >= ends[w];
        if (w < 0 || w >= k) {
            lost = 1;
            break;
        }
        ords[e] = ordinal[w];
        recs[e] = p + sh[w];
    }
    Py_END_ALLOW_THREADS
    result = answer(ok, lost);
done:
    for (int i = 0; i < got; i++) PyBuffer_Release(&a[i]);
    return result;
}

static PyMethodDef methods[] = {
    {"concat_locate", concat_locate, METH_VARARGS,
     "concat_locate(pos, table, ends, shift, passes, ordinal, shift_of, ords, recs) -> bool: "
     "each position's child of a concat of sources (its bucket's first child in table, "
     "advanced past the ends at or below it, passes times): ords = ordinal[child], recs = "
     "pos + shift_of[child]; False, nothing written, where a position or the table is "
     "out of range."},
    {"locate", locate, METH_VARARGS,
     "locate(part, j, tables, n, offset, ordinal, ords, recs) -> bool: each element j of "
     "part q located: ords = ordinal[q], recs = its shuffle's image of j (tables[q], or j "
     "where None) + offset[q]; False, nothing written, where a part or j is out of range."},
    {"walk", walk, METH_VARARGS,
     "walk(taken, n, phi, inv, uniform, T, count, out_part, out_j) -> (emitted, last): a "
     "mix's next count elements by (key, part, j); taken advanced."},
    {"permute_tabled", permute_tabled, METH_VARARGS,
     "permute_tabled(tables, rb, lb, n, x, out) -> bool: x's positions permuted through "
     "the six round tables into out; False where a position is outside [0, n)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_ordering", NULL, -1, methods};

PyMODINIT_FUNC PyInit__ordering(void) { return PyModule_Create(&module); }
