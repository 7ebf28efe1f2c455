/* Language-model windows assembled without the GIL (feedline/_base/windowfill.py): for
 * each window w, the flow tokens [a[w], b[w]) of a corpus of documents (document e holds
 * flow tokens [cum[e], cum[e + 1])) become its inputs (tokens [a, b - 1)), targets
 * ([a + 1, b)), the targets' loss mask, the inputs' document ids (e + 1) and positions
 * in their documents; the rest of the row is padding (pad_id, False, 0, 0).
 *
 * Token x of document e lies at byte tok_base[e] * scale + width * (x - cum[e]) of the
 * token buffer (width 8: little-endian int64 words of an .nndataset's arena, scale 1;
 * width 1, 2 or 4: a compact corpus's uint8 / 16 / 32 items, scale = width), its mask byte
 * at mask_base[e] + (x - cum[e]) of the mask buffer. Every read is checked against its
 * buffer (IndexError), every window against the corpus and the rows.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <string.h>

#define NB 11  /* buffers: tok, tok_base, mask, mask_base, cum, a, b, inp, tgt, lm, ids */
enum { TOK, TOKB, MASK, MASKB, CUM, A, B, INP, TGT, LM, IDS };

typedef struct {
    Py_buffer b[NB + 1];  /* + pos */
    int held;
} Views;

static void let_go(Views *v) {
    for (int i = 0; i < NB + 1; i++)
        if (v->held & (1 << i)) PyBuffer_Release(&v->b[i]);
}

static int take(Views *v, int i, PyObject *o, int writable) {
    int flags = PyBUF_C_CONTIGUOUS | PyBUF_ND | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(o, &v->b[i], flags) < 0) return -1;
    v->held |= 1 << i;
    return 0;
}

/* Whether b holds int64 (native: the extension is used on little-endian machines only). */
static int is_i64(const Py_buffer *b) {
    const char *f = b->format ? b->format : "B";
    if (*f == '<' || *f == '=' || *f == '@') f++;
    return b->itemsize == 8 && (!strcmp(f, "l") || !strcmp(f, "q"));
}

/* Whether b holds bools (or bytes). */
static int is_bool(const Py_buffer *b) {
    const char *f = b->format ? b->format : "B";
    return b->itemsize == 1 && (!strcmp(f, "?") || !strcmp(f, "B"));
}

typedef struct {
    const char *tok;
    Py_ssize_t tok_len;
    const int64_t *tok_base;
    const uint8_t *mask;
    Py_ssize_t mask_len;
    const int64_t *mask_base;
    const int64_t *cum;
    Py_ssize_t ndocs;
    Py_ssize_t scale, width;
} Corpus;

/* The document holding flow token p (the last e with cum[e] <= p). */
static Py_ssize_t doc_of(const Corpus *c, int64_t p) {
    Py_ssize_t lo = 0, hi = c->ndocs;  /* cum[lo] <= p < cum[hi] */
    while (hi - lo > 1) {
        Py_ssize_t mid = lo + (hi - lo) / 2;
        if (c->cum[mid] <= p) lo = mid;
        else hi = mid;
    }
    return lo;
}

/* Byte base * scale + width * rel of a buffer of len bytes, where n items of width
 * bytes from there fit in it; else -1. Each part is bounded first: no overflow. */
static int64_t inside(int64_t base, int64_t scale, int64_t rel, int64_t width, int64_t n,
                      Py_ssize_t len) {
    if (base < 0 || rel < 0 || n < 0 || base > len / scale || rel > len / width) return -1;
    int64_t at = base * scale + width * rel;
    if (at > len || n > (len - at) / width) return -1;
    return at;
}

/* Tokens [x, x + n) of document e into out[0 .. n) (int64); 0, or -1 out of the buffer.
 * Items of 2 or 4 bytes are read with memcpy: a compact corpus's array may be unaligned. */
static int tokens(const Corpus *c, Py_ssize_t e, int64_t x, int64_t n, int64_t *out) {
    int64_t at = inside(c->tok_base[e], c->scale, x - c->cum[e], c->width, n, c->tok_len);
    if (at < 0) return -1;
    const char *src = c->tok + at;
    if (c->width == 8) {
        memcpy(out, src, (size_t)n * 8);  /* little-endian words (checked in Python) */
    } else if (c->width == 4) {
        for (int64_t k = 0; k < n; k++) {
            uint32_t t;
            memcpy(&t, src + 4 * k, 4);
            out[k] = t;
        }
    } else if (c->width == 2) {
        for (int64_t k = 0; k < n; k++) {
            uint16_t t;
            memcpy(&t, src + 2 * k, 2);
            out[k] = t;
        }
    } else {
        const uint8_t *s = (const uint8_t *)src;
        for (int64_t k = 0; k < n; k++) out[k] = s[k];
    }
    return 0;
}

/* One window's row: see the module. 0; 1 for a window outside the corpus or longer than
 * a row; 2 for a read outside a buffer (called without the GIL: the caller raises). */
static int window(const Corpus *c, int64_t p, int64_t q, Py_ssize_t L, int64_t pad_id,
                  int64_t *inp, int64_t *tgt, uint8_t *lm, int64_t *ids, int64_t *pos,
                  int has_mask) {
    int64_t pairs = q - p - 1;
    if (p < 0 || q < p || q > c->cum[c->ndocs] || pairs > L) return 1;
    if (pairs > 0) {
        if (c->ndocs < 1 || c->cum[0] > p) return 1;  /* no document holds token p */
        Py_ssize_t d = doc_of(c, p);
        for (int side = 0; side < 2; side++) {  /* inputs from p, targets from p + 1 */
            int64_t *out = side ? tgt : inp;
            Py_ssize_t e = d;
            for (int64_t j = 0; j < pairs;) {
                int64_t x = p + side + j;
                while (e + 1 < c->ndocs && c->cum[e + 1] <= x) e++;
                int64_t end = c->cum[e + 1];  /* e + 1 <= ndocs */
                if (end <= x || c->cum[e] < 0 || c->cum[e] > x) goto outside;  /* cum unsorted */
                int64_t n = end - x < pairs - j ? end - x : pairs - j;
                if (tokens(c, e, x, n, out + j) < 0) goto outside;
                if (!side) {
                    for (int64_t k = 0; k < n; k++) ids[j + k] = e + 1;
                    if (pos)
                        for (int64_t k = 0; k < n; k++) pos[j + k] = x - c->cum[e] + k;
                } else if (has_mask) {
                    int64_t m = inside(c->mask_base[e], 1, x - c->cum[e], 1, n, c->mask_len);
                    if (m < 0) goto outside;
                    for (int64_t k = 0; k < n; k++) lm[j + k] = c->mask[m + k] != 0;
                } else {
                    memset(lm + j, 1, (size_t)n);
                }
                j += n;
            }
        }
    }
    for (int64_t k = pairs > 0 ? pairs : 0; k < L; k++) {
        inp[k] = pad_id;
        tgt[k] = pad_id;
        ids[k] = 0;
        if (pos) pos[k] = 0;
    }
    if (pairs < L) memset(lm + (pairs > 0 ? pairs : 0), 0, (size_t)(L - (pairs > 0 ? pairs : 0)));
    return 0;
outside:
    return 2;
}

/* fill(tok, tok_base, scale, width, mask, mask_base, has_mask, cum, a, b, pad_id, inp,
 *      tgt, loss_mask, doc_ids, pos_ids_or_None) */
static PyObject *fill(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *o[NB + 1];
    Py_ssize_t scale, width;
    int has_mask;
    long long pad_id;
    if (!PyArg_ParseTuple(args, "OOnnOOpOOOLOOOOO", &o[TOK], &o[TOKB], &scale, &width,
                          &o[MASK], &o[MASKB], &has_mask, &o[CUM], &o[A], &o[B], &pad_id,
                          &o[INP], &o[TGT], &o[LM], &o[IDS], &o[NB]))
        return NULL;
    Views v = {.held = 0};
    for (int i = 0; i < NB; i++)
        if (take(&v, i, o[i], i >= INP) < 0) goto fail;
    int want_pos = o[NB] != Py_None;
    if (want_pos && take(&v, NB, o[NB], 1) < 0) goto fail;
    Py_buffer *b = v.b;
    Py_ssize_t ndocs = b[CUM].len / 8 - 1, W = b[A].len / 8;
    int ok = (width == 8 || width == 4 || width == 2 || width == 1) &&
             (scale == 1 || scale == width) && is_i64(&b[CUM]) && ndocs >= 0 &&
             is_i64(&b[TOKB]) && b[TOKB].len / 8 >= ndocs && is_i64(&b[MASKB]) &&
             (!has_mask || b[MASKB].len / 8 >= ndocs) && is_i64(&b[A]) && is_i64(&b[B]) &&
             b[B].len == b[A].len && b[INP].ndim == 2 && is_bool(&b[LM]);
    Py_ssize_t L = ok ? b[INP].shape[1] : 0;
    Py_buffer *rows[4] = {&b[INP], &b[TGT], &b[LM], want_pos ? &b[NB] : &b[IDS]};
    for (int i = 0; ok && i < 4; i++)
        ok = rows[i]->ndim == 2 && rows[i]->shape[0] >= W && rows[i]->shape[1] == L &&
             (i == 2 ? is_bool(rows[i]) : is_i64(rows[i]));
    ok = ok && b[IDS].ndim == 2 && b[IDS].shape[0] >= W && b[IDS].shape[1] == L &&
         is_i64(&b[IDS]);
    if (!ok) {
        PyErr_SetString(PyExc_ValueError,
                        "fill: int64 cum, bases and windows; rows of int64 (bool mask) of one "
                        "length, one a window at least; widths 1, 2, 4 or 8");
        goto fail;
    }
    Corpus c = {b[TOK].buf, b[TOK].len, b[TOKB].buf, b[MASK].buf, b[MASK].len,
                b[MASKB].buf, b[CUM].buf, ndocs, scale, width};
    const int64_t *a = b[A].buf, *q = b[B].buf;
    int64_t *inp = b[INP].buf, *tgt = b[TGT].buf, *ids = b[IDS].buf;
    int64_t *pos = want_pos ? b[NB].buf : NULL;
    uint8_t *lm = b[LM].buf;
    int bad = 0;
    Py_ssize_t w = 0;
    Py_BEGIN_ALLOW_THREADS
    for (; w < W; w++) {
        bad = window(&c, a[w], q[w], L, pad_id, inp + w * L, tgt + w * L, lm + w * L,
                     ids + w * L, pos ? pos + w * L : NULL, has_mask);
        if (bad) break;
    }
    Py_END_ALLOW_THREADS
    if (bad) {
        PyErr_Format(PyExc_IndexError,
                     bad == 1 ? "window %zd [%lld, %lld) outside the corpus's %lld tokens, or "
                                "longer than a row"
                              : "window %zd [%lld, %lld) reads past its corpus's buffers "
                                "(of %lld tokens)",
                     w, (long long)a[w], (long long)q[w], (long long)c.cum[ndocs]);
        goto fail;
    }
    let_go(&v);
    Py_RETURN_NONE;
fail:
    let_go(&v);
    return NULL;
}

static PyMethodDef methods[] = {
    {"fill", fill, METH_VARARGS, "fill(...): see the module."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_windows", "Language-model windows assembled without the GIL.", -1,
    methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__windows(void) { return PyModule_Create(&module); }
