/* Spans of a ragged column copied without the GIL (feedline/_base/spans.py): a batch of
 * examples of varying length gathered into one array, or straight into the rows of a
 * padded batch. The values are read as items of their buffer's size, whatever their
 * dtype: a copy of bytes. Every span is checked against the buffers before the first
 * byte is copied, so a bad one raises IndexError and writes nothing.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <string.h>

typedef struct {
    Py_buffer values, starts, counts, dst, pad;
    int held;  /* bit i: view i taken */
} Views;

static void let_go(Views *v) {
    Py_buffer *all[5] = {&v->values, &v->starts, &v->counts, &v->dst, &v->pad};
    for (int i = 0; i < 5; i++)
        if (v->held & (1 << i)) PyBuffer_Release(all[i]);
}

static int take(Views *v, int i, PyObject *o, int writable, const char *what) {
    Py_buffer *all[5] = {&v->values, &v->starts, &v->counts, &v->dst, &v->pad};
    int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | PyBUF_ND | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(o, all[i], flags) < 0) return -1;
    v->held |= 1 << i;
    if (all[i]->itemsize < 1) {
        PyErr_Format(PyExc_ValueError, "%s: items of at least one byte", what);
        return -1;
    }
    return 0;
}

/* starts and counts: int64 of one length, every span inside values' n items, and their
 * sum (or, with width >= 0, each count) within the room given; the number of spans. */
static Py_ssize_t check(Views *v, Py_ssize_t room, Py_ssize_t width) {
    if (v->starts.itemsize != 8 || v->counts.itemsize != 8 || v->starts.ndim != 1 ||
        v->counts.ndim != 1 || v->starts.len != v->counts.len ||
        (v->starts.format && strcmp(v->starts.format, "l") && strcmp(v->starts.format, "q")) ||
        (v->counts.format && strcmp(v->counts.format, "l") && strcmp(v->counts.format, "q"))) {
        PyErr_SetString(PyExc_ValueError, "starts and counts: int64 arrays of one length");
        return -1;
    }
    Py_ssize_t n = v->starts.len / 8, items = v->values.len / v->values.itemsize;
    const int64_t *s = v->starts.buf, *c = v->counts.buf;
    int64_t total = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (s[i] < 0 || c[i] < 0 || s[i] > items || c[i] > items - s[i]) {
            PyErr_Format(PyExc_IndexError,
                         "span %zd (start %lld, %lld items) outside the %zd values", i,
                         (long long)s[i], (long long)c[i], items);
            return -1;
        }
        if (width >= 0 && c[i] > width) {
            PyErr_Format(PyExc_IndexError, "span %zd of %lld items, rows of %zd", i,
                         (long long)c[i], width);
            return -1;
        }
        total += c[i];
    }
    if (width < 0 && total > room) {
        PyErr_Format(PyExc_IndexError, "spans of %lld items, room for %zd", (long long)total,
                     room);
        return -1;
    }
    return n;
}

/* gather(values, starts, counts, dst): span i (counts[i] items from starts[i]) of values
 * copied to dst after span i - 1. */
static PyObject *gather(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *a, *b, *c, *d;
    if (!PyArg_ParseTuple(args, "OOOO", &a, &b, &c, &d)) return NULL;
    Views v = {.held = 0};
    if (take(&v, 0, a, 0, "values") < 0 || take(&v, 1, b, 0, "starts") < 0 ||
        take(&v, 2, c, 0, "counts") < 0 || take(&v, 3, d, 1, "dst") < 0)
        goto fail;
    Py_ssize_t isz = v.values.itemsize;
    if (v.dst.itemsize != isz) {
        PyErr_SetString(PyExc_ValueError, "dst: items of the values' size");
        goto fail;
    }
    Py_ssize_t n = check(&v, v.dst.len / isz, -1);
    if (n < 0) goto fail;
    const char *src = v.values.buf;
    char *out = v.dst.buf;
    const int64_t *s = v.starts.buf, *k = v.counts.buf;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        size_t bytes = (size_t)k[i] * (size_t)isz;
        memcpy(out, src + (size_t)s[i] * (size_t)isz, bytes);
        out += bytes;
    }
    Py_END_ALLOW_THREADS
    let_go(&v);
    Py_RETURN_NONE;
fail:
    let_go(&v);
    return NULL;
}

/* bytes of one item repeated over [at, at + bytes) */
static void fill(char *at, size_t bytes, const char *item, size_t isz, int zero) {
    if (!bytes) return;
    if (zero || isz == 1) {
        memset(at, zero ? 0 : item[0], bytes);
        return;
    }
    memcpy(at, item, isz);
    size_t done = isz;
    while (done < bytes) {  /* doubling copies of what is written */
        size_t k = done < bytes - done ? done : bytes - done;
        memcpy(at + done, at, k);
        done += k;
    }
}

/* pad(values, starts, counts, dst, pad): row i of dst (2-D, rows x width items) holds
 * span i then the item pad to its end; rows past the spans hold only pad. */
static PyObject *pad(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *a, *b, *c, *d, *e;
    if (!PyArg_ParseTuple(args, "OOOOO", &a, &b, &c, &d, &e)) return NULL;
    Views v = {.held = 0};
    if (take(&v, 0, a, 0, "values") < 0 || take(&v, 1, b, 0, "starts") < 0 ||
        take(&v, 2, c, 0, "counts") < 0 || take(&v, 3, d, 1, "dst") < 0 ||
        take(&v, 4, e, 0, "pad") < 0)
        goto fail;
    Py_ssize_t isz = v.values.itemsize;
    if (v.dst.itemsize != isz || v.pad.len != isz || v.dst.ndim != 2) {
        PyErr_SetString(PyExc_ValueError,
                        "dst: rows x width items of the values' size; pad: one such item");
        goto fail;
    }
    Py_ssize_t rows = v.dst.shape[0], width = v.dst.shape[1];
    Py_ssize_t n = check(&v, 0, width);
    if (n < 0) goto fail;
    if (n > rows) {
        PyErr_Format(PyExc_IndexError, "%zd spans, %zd rows", n, rows);
        goto fail;
    }
    const char *src = v.values.buf, *item = v.pad.buf;
    int zero = 1;
    for (Py_ssize_t j = 0; j < isz; j++) zero &= item[j] == 0;
    char *out = v.dst.buf;
    const int64_t *s = v.starts.buf, *k = v.counts.buf;
    size_t row = (size_t)width * (size_t)isz;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        size_t bytes = (size_t)k[i] * (size_t)isz;
        memcpy(out, src + (size_t)s[i] * (size_t)isz, bytes);
        fill(out + bytes, row - bytes, item, (size_t)isz, zero);
        out += row;
    }
    fill(out, (size_t)(rows - n) * row, item, (size_t)isz, zero);
    Py_END_ALLOW_THREADS
    let_go(&v);
    Py_RETURN_NONE;
fail:
    let_go(&v);
    return NULL;
}

static PyMethodDef methods[] = {
    {"gather", gather, METH_VARARGS, "gather(values, starts, counts, dst): see the module."},
    {"pad", pad, METH_VARARGS, "pad(values, starts, counts, dst, pad): see the module."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_spans", "Spans of ragged columns copied without the GIL.", -1,
    methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__spans(void) { return PyModule_Create(&module); }
