/* Packed rows without the GIL (feedline/_base/packing.py): the placement of a plan's
 * pieces into rows (first fit, best fit; text/_pack_place.py is the same in Python, and
 * numba compiles it) and the fill of a batch of packed rows from a corpus's tokens
 * (text/_pack_jit.fill_packed; segment ids and positions int32). Every index read is
 * checked against its array first:
 * a bad one raises IndexError or ValueError.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <string.h>

#define MAXV 20

typedef struct {
    Py_buffer b[MAXV];
    int n;
    int64_t *own;  /* private copies of the arguments read without the GIL */
} Views;

static void let_go(Views *v) {
    for (int i = 0; i < v->n; i++) PyBuffer_Release(&v->b[i]);
    v->n = 0;
    PyMem_Free(v->own);
    v->own = NULL;
}

/* Whether a buffer's items are signed integers of isz bytes (native order: the extension
 * is used on little-endian machines only), or bools / bytes for isz 1. */
static int is_int(const Py_buffer *b, Py_ssize_t isz) {
    const char *f = b->format ? b->format : "B";
    if (*f == '<' || *f == '=' || *f == '@') f++;
    if (b->itemsize != isz) return 0;
    if (isz == 8) return !strcmp(f, "l") || !strcmp(f, "q");
    if (isz == 4) return !strcmp(f, "i") || (sizeof(long) == 4 && !strcmp(f, "l"));
    return !strcmp(f, "?") || !strcmp(f, "B") || !strcmp(f, "b");
}

/* A view of o (writable or not) whose items are signed integers of isz bytes (bools or
 * bytes for 1; 0: any items), and its items. */
static Py_buffer *view(Views *v, PyObject *o, int writable, Py_ssize_t isz, const char *what) {
    Py_buffer *b = &v->b[v->n];
    int flags = PyBUF_C_CONTIGUOUS | PyBUF_ND | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(o, b, flags) < 0) return NULL;
    v->n++;
    if (isz && !is_int(b, isz)) {
        PyErr_Format(PyExc_ValueError, "%s: %s", what,
                     isz == 8 ? "int64" : isz == 4 ? "int32" : "bool or uint8");
        return NULL;
    }
    return b;
}

static Py_ssize_t items(Py_buffer *b) { return b->itemsize ? b->len / b->itemsize : 0; }

/* The pieces and blocks of a placement, checked: sizes in [0, cap], blocks within the
 * pieces in order. */
static int placement_args(PyObject *args, Views *v, const int64_t **size, Py_ssize_t *n,
                          const int64_t **ptr, Py_ssize_t *nb, int64_t *cap, int64_t **local,
                          int64_t **per_block, int64_t *most) {
    PyObject *o[4];
    long long c;
    if (!PyArg_ParseTuple(args, "OOLOO", &o[0], &o[1], &c, &o[2], &o[3])) return -1;
    Py_buffer *bs = view(v, o[0], 0, 8, "size"), *bp = bs ? view(v, o[1], 0, 8, "block_ptr") : NULL;
    Py_buffer *bl = bp ? view(v, o[2], 1, 8, "local") : NULL;
    Py_buffer *bb = bl ? view(v, o[3], 1, 8, "per_block") : NULL;
    if (!bb) return -1;
    /* The placement runs without the GIL: it reads private copies of what it checks (a
     * thread writing the arrays meanwhile cannot make it index out of bounds). */
    int64_t *own = PyMem_Malloc(sizeof(int64_t) * (size_t)(items(bs) + items(bp) + 1));
    if (!own) {
        PyErr_NoMemory();
        return -1;
    }
    memcpy(own, bs->buf, (size_t)bs->len);
    memcpy(own + items(bs), bp->buf, (size_t)bp->len);
    v->own = own;
    *size = own, *n = items(bs), *ptr = own + items(bs), *nb = items(bp) - 1, *cap = c;
    *local = bl->buf, *per_block = bb->buf;
    if (items(bl) != *n || *nb < 0 || items(bb) < *nb || c < 0 || c > (1LL << 40)) {
        PyErr_SetString(PyExc_ValueError, "placement: local as long as size, a count a block");
        return -1;
    }
    for (Py_ssize_t b = 0; b < *nb; b++)
        if ((*ptr)[b] < 0 || (*ptr)[b] > (*ptr)[b + 1] || (*ptr)[b + 1] > *n) {
            PyErr_Format(PyExc_IndexError, "block %zd: pieces [%lld, %lld) of %zd", b,
                         (long long)(*ptr)[b], (long long)(*ptr)[b + 1], *n);
            return -1;
        }
    *most = 1;  /* pieces in the largest block (at least 1) */
    for (Py_ssize_t b = 0; b < *nb; b++)
        if ((*ptr)[b + 1] - (*ptr)[b] > *most) *most = (*ptr)[b + 1] - (*ptr)[b];
    for (Py_ssize_t i = 0; i < *n; i++)
        if ((*size)[i] < 0 || (*size)[i] > c) {
            PyErr_Format(PyExc_ValueError, "piece %zd of %lld pairs, rows of %lld", i,
                         (long long)(*size)[i], c);
            return -1;
        }
    return 0;
}

/* place_first_fit(size, block_ptr, cap, local, per_block): see _pack_place. */
static PyObject *first_fit(PyObject *self, PyObject *args) {
    (void)self;
    Views v = {.n = 0, .own = NULL};
    const int64_t *size, *ptr;
    int64_t cap, *local, *per_block, most;
    Py_ssize_t n, nb;
    if (placement_args(args, &v, &size, &n, &ptr, &nb, &cap, &local, &per_block, &most) < 0)
        goto fail;
    Py_ssize_t top = 1;
    while (top < most) top *= 2;
    int64_t *tree = PyMem_Malloc(sizeof(int64_t) * 2 * (size_t)top);
    if (!tree) {
        PyErr_NoMemory();
        goto fail;
    }
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t b = 0; b < nb; b++) {
        int64_t lo = ptr[b], hi = ptr[b + 1], leaves = 1, used = 0;
        while (leaves < hi - lo) leaves *= 2;
        for (int64_t k = 0; k < 2 * leaves; k++) tree[k] = cap;
        for (int64_t i = lo; i < hi; i++) {
            int64_t s = size[i], node = 1;
            while (node < leaves) node = tree[2 * node] >= s ? 2 * node : 2 * node + 1;
            int64_t r = node - leaves;
            local[i] = r;
            if (r + 1 > used) used = r + 1;
            tree[node] -= s;
            for (node /= 2; node >= 1; node /= 2) {
                int64_t l = tree[2 * node], rr = tree[2 * node + 1];
                tree[node] = l > rr ? l : rr;
            }
        }
        per_block[b] = used;
    }
    Py_END_ALLOW_THREADS
    PyMem_Free(tree);
    let_go(&v);
    Py_RETURN_NONE;
fail:
    let_go(&v);
    return NULL;
}

/* Unflag room c's leaf and the nodes above it left with no flagged child. */
static void unflag(uint8_t *tree, int64_t leaves, int64_t c) {
    int64_t node = c + leaves;
    tree[node] = 0;
    for (node /= 2; node >= 1 && tree[node] && !(tree[2 * node] | tree[2 * node + 1]); node /= 2)
        tree[node] = 0;
}

/* place_best_fit(size, block_ptr, cap, local, per_block): see _pack_place. */
static PyObject *best_fit(PyObject *self, PyObject *args) {
    (void)self;
    Views v = {.n = 0, .own = NULL};
    const int64_t *size, *ptr;
    int64_t cap, *local, *per_block, most;
    Py_ssize_t n, nb;
    if (placement_args(args, &v, &size, &n, &ptr, &nb, &cap, &local, &per_block, &most) < 0)
        goto fail;
    int64_t leaves = 1;
    while (leaves < cap + 1) leaves *= 2;
    uint8_t *tree = PyMem_Calloc(2 * (size_t)leaves, 1);
    int64_t *head = PyMem_Malloc(sizeof(int64_t) * (size_t)(cap + 1));
    int64_t *nxt = PyMem_Malloc(sizeof(int64_t) * (size_t)most);
    int64_t *room = PyMem_Malloc(sizeof(int64_t) * (size_t)most);
    if (!tree || !head || !nxt || !room) {
        PyMem_Free(tree), PyMem_Free(head), PyMem_Free(nxt), PyMem_Free(room);
        PyErr_NoMemory();
        goto fail;
    }
    for (int64_t k = 0; k <= cap; k++) head[k] = -1;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t b = 0; b < nb; b++) {
        int64_t used = 0;
        for (int64_t i = ptr[b]; i < ptr[b + 1]; i++) {
            int64_t s = size[i], node = s + leaves, c = tree[node] ? s : -1, r, left;
            while (c < 0 && node > 1) {  /* the smallest flagged room >= s */
                if (node % 2 == 0 && tree[node + 1]) {
                    node += 1;
                    while (node < leaves) node = tree[2 * node] ? 2 * node : 2 * node + 1;
                    c = node - leaves;
                }
                node /= 2;
            }
            if (c < 0) {  /* no open row holds it: a new row */
                r = used++;
                left = cap - s;
            } else {
                r = head[c];
                head[c] = nxt[r];
                if (head[c] < 0) unflag(tree, leaves, c);
                left = c - s;
            }
            local[i] = r;
            room[r] = left;
            if (left > 0) {
                if (head[left] < 0)  /* the first row of that room: flag it */
                    for (node = left + leaves; node >= 1 && !tree[node]; node /= 2) tree[node] = 1;
                nxt[r] = head[left];
                head[left] = r;
            }
        }
        for (int64_t r = 0; r < used; r++) {  /* empty the rooms for the next block */
            int64_t c = room[r];
            if (c > 0 && head[c] >= 0) {
                head[c] = -1;
                unflag(tree, leaves, c);
            }
        }
        per_block[b] = used;
    }
    Py_END_ALLOW_THREADS
    PyMem_Free(tree), PyMem_Free(head), PyMem_Free(nxt), PyMem_Free(room);
    let_go(&v);
    Py_RETURN_NONE;
fail:
    let_go(&v);
    return NULL;
}

/* fill(rows, row_ptr, seg_doc, seg_off, seg_pairs, wide, tok, u8, tstart, mbytes, mstart,
 *      has_mask, pad_id, inp, tgt, loss_mask, seg_ids, pos_ids, doc_ids_or_None): see
 * _pack_jit.fill_packed (wide: u64 tokens in u8 from byte tstart[d]; else tok's items,
 * 1, 2 or 4 bytes, from tok[tstart[d]]). */
static PyObject *fill(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *o[16];
    int wide, has_mask;
    long long pad_id;
    if (!PyArg_ParseTuple(args, "OOOOOpOOOOOpLOOOOOO", &o[0], &o[1], &o[2], &o[3], &o[4], &wide,
                          &o[5], &o[6], &o[7], &o[8], &o[9], &has_mask, &pad_id, &o[10], &o[11],
                          &o[12], &o[13], &o[14], &o[15]))
        return NULL;
    Views v = {.n = 0, .own = NULL};
    static const char *const names[] = {"rows", "row_ptr", "seg_doc", "seg_off", "seg_pairs",
                                        "tok", "u8", "tstart", "mbytes", "mstart", "inp", "tgt",
                                        "loss_mask", "seg_ids", "pos_ids", "doc_ids"};
    static const Py_ssize_t sizes[] = {8, 8, 8, 8, 8, 0, 1, 8, 1, 8, 8, 8, 1, 4, 4, 8};
    Py_buffer *b[16];
    int want_doc = o[15] != Py_None;
    for (int i = 0; i < 16; i++) {
        if (i == 15 && !want_doc) {
            b[i] = NULL;
            break;
        }
        b[i] = view(&v, o[i], i >= 10, sizes[i], names[i]);
        if (!b[i]) goto fail;
    }
    Py_ssize_t W = items(b[0]), nrows = items(b[1]) - 1, nseg = items(b[2]);
    Py_ssize_t ndocs = items(b[7]), isz = b[5]->itemsize;
    Py_ssize_t L = b[10]->ndim == 2 ? b[10]->shape[1] : -1;
    int ok = nrows >= 0 && items(b[3]) == nseg && items(b[4]) == nseg && L >= 0 &&
             (wide || isz == 1 || isz == 2 || isz == 4) && (!has_mask || items(b[9]) >= ndocs);
    for (int i = 10; ok && i < 16; i++)
        ok = !b[i] || (b[i]->ndim == 2 && b[i]->shape[0] >= W && b[i]->shape[1] == L);
    if (!ok) {
        PyErr_SetString(PyExc_ValueError,
                        "fill: a plan of one length a segment; rows of one length, one a "
                        "batch row at least; tokens of 1, 2 or 4 bytes (or wide)");
        goto fail;
    }
    const int64_t *rows = b[0]->buf, *ptr = b[1]->buf, *sd = b[2]->buf, *so = b[3]->buf,
                  *sp = b[4]->buf, *tstart = b[7]->buf, *mstart = b[9]->buf;
    const char *tok = b[5]->buf;
    const uint8_t *u8 = b[6]->buf, *mb = b[8]->buf;
    Py_ssize_t ntok = items(b[5]), nu8 = b[6]->len, nmb = b[8]->len;
    int64_t *inp = b[10]->buf, *tgt = b[11]->buf;
    int32_t *sg = b[13]->buf, *ps = b[14]->buf;  /* int32: see text/_packed.packed_record */
    int64_t *ds = want_doc ? b[15]->buf : NULL;
    uint8_t *lm = b[12]->buf;
    Py_ssize_t bad = -1;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t w = 0; w < W && bad < 0; w++) {
        int64_t r = rows[w], j = 0;
        if (r < 0 || r >= nrows) {
            bad = w;
            break;
        }
        int64_t lo = ptr[r], hi = ptr[r + 1];  /* read once: checked as used */
        if (lo < 0 || lo > hi || hi > nseg) {
            bad = w;
            break;
        }
        int64_t *ir = inp + w * L, *tr = tgt + w * L;
        int32_t *sgr = sg + w * L, *psr = ps + w * L;
        int64_t *dsr = ds ? ds + w * L : NULL;
        uint8_t *lmr = lm + w * L;
        for (int64_t s = lo; s < hi; s++) {
            int64_t d = sd[s], off = so[s], n = sp[s];
            if (d < 0 || d >= ndocs || off < 0 || n < 0 || n > L - j) {
                bad = w;
                break;
            }
            int64_t base = tstart[d];
            if (wide) {  /* inputs [off, off + n), targets one on: n + 1 words */
                if (base < 0 || base > nu8 || off > (nu8 - base) / 8 ||
                    n + 1 > (nu8 - base - 8 * off) / 8) {
                    bad = w;
                    break;
                }
                int64_t at = base + 8 * off;
                memcpy(ir + j, u8 + at, (size_t)n * 8);
                memcpy(tr + j, u8 + at + 8, (size_t)n * 8);
            } else {
                if (base < 0 || base > ntok || off > ntok - base || n + 1 > ntok - base - off) {
                    bad = w;
                    break;
                }
                const char *at = tok + (base + off) * isz;  /* items read by memcpy: */
                for (int64_t k = 0; k <= n; k++) {         /* the array may be unaligned */
                    uint32_t t4 = 0;
                    uint16_t t2 = 0;
                    int64_t x;
                    if (isz == 4) memcpy(&t4, at + 4 * k, 4), x = t4;
                    else if (isz == 2) memcpy(&t2, at + 2 * k, 2), x = t2;
                    else x = ((const uint8_t *)at)[k];
                    if (k < n) ir[j + k] = x;
                    if (k > 0) tr[j + k - 1] = x;
                }
            }
            if (has_mask) {
                int64_t mbase = mstart[d];
                if (mbase < 0 || mbase > nmb || off + 1 > nmb - mbase || n > nmb - mbase - off - 1) {
                    bad = w;
                    break;
                }
                int64_t m = mbase + off + 1;
                for (int64_t k = 0; k < n; k++) lmr[j + k] = mb[m + k] != 0;
            } else {
                memset(lmr + j, 1, (size_t)n);
            }
            for (int64_t k = 0; k < n; k++) {
                sgr[j + k] = (int32_t)(s - lo + 1);
                psr[j + k] = (int32_t)k;
                if (dsr) dsr[j + k] = d + 1;
            }
            j += n;
        }
        for (int64_t k = j; k < L && bad < 0; k++) {
            ir[k] = pad_id;
            tr[k] = pad_id;
            lmr[k] = 0;
            sgr[k] = 0;
            psr[k] = 0;
            if (dsr) dsr[k] = 0;
        }
    }
    Py_END_ALLOW_THREADS
    if (bad >= 0) {
        PyErr_Format(PyExc_IndexError,
                     "batch row %zd (packed row %lld): its plan or its tokens lie outside "
                     "their arrays, or it is longer than a row",
                     bad, (long long)rows[bad]);
        goto fail;
    }
    let_go(&v);
    Py_RETURN_NONE;
fail:
    let_go(&v);
    return NULL;
}

static PyMethodDef methods[] = {
    {"place_first_fit", first_fit, METH_VARARGS, "see text/_pack_place.place_first_fit"},
    {"place_best_fit", best_fit, METH_VARARGS, "see text/_pack_place.place_best_fit"},
    {"fill", fill, METH_VARARGS, "see text/_pack_jit.fill_packed"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_packing", "Packed rows placed and filled without the GIL.", -1,
    methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__packing(void) { return PyModule_Create(&module); }
