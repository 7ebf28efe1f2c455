/* Spans of a ragged column copied without the GIL (feedline/_base/spans.py): a batch of
 * examples of varying length gathered into one array, or straight into the rows of a
 * padded batch; the spans of one ragged field in many sources (a manifest's shards)
 * located and gathered by one call; and many files checked for a truncation under the
 * reader. The values are read as items of their buffer's size, whatever their
 * dtype: a copy of bytes. Every span is checked against the buffers before the first
 * byte is copied, so a bad one raises IndexError and writes nothing.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <limits.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

/* The buffers a call reads and writes: b[i] taken when bit i of held is set. */
typedef struct {
    Py_buffer b[5];
    int held;
} Views;

static void let_go(Views *v) {
    for (int i = 0; i < 5; i++)
        if (v->held & (1 << i)) PyBuffer_Release(&v->b[i]);
}

/* Views of objs[0 .. k) (named names[i]), those whose bit is set in writable writable. */
static int take_all(Views *v, PyObject *const *objs, const char *const *names, int k,
                    int writable) {
    for (int i = 0; i < k; i++) {
        int w = (writable >> i) & 1;
        int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | PyBUF_ND | (w ? PyBUF_WRITABLE : 0);
        if (PyObject_GetBuffer(objs[i], &v->b[i], flags) < 0) return -1;
        v->held |= 1 << i;
        if (v->b[i].itemsize < 1) {
            PyErr_Format(PyExc_ValueError, "%s: items of at least one byte", names[i]);
            return -1;
        }
    }
    return 0;
}

static int is_int64(Py_buffer *b) {
    return b->itemsize == 8 && b->ndim == 1 &&
           (!b->format || !strcmp(b->format, "l") || !strcmp(b->format, "q") ||
            !strcmp(b->format, "<l") || !strcmp(b->format, "<q")) &&
           *(const char *)&(int){1} == 1;  /* little-endian: "<" is native */
}

/* Whether b[first .. first + k) are int64 arrays of one length (else a ValueError naming
 * them as what). */
static int int64s(Views *v, int first, int k, const char *what) {
    for (int i = first; i < first + k; i++)
        if (!is_int64(&v->b[i]) || v->b[i].len != v->b[first].len) {
            PyErr_Format(PyExc_ValueError, "%s: int64 arrays of one length", what);
            return 0;
        }
    return 1;
}

/* starts and counts: int64 of one length, every span inside values' n items, and their
 * sum (or, with width >= 0, each count) within the room given; the number of spans. */
static Py_ssize_t check(Views *v, Py_ssize_t room, Py_ssize_t width) {
    if (!int64s(v, 1, 2, "starts and counts")) return -1;
    Py_ssize_t n = v->b[1].len / 8, items = v->b[0].len / v->b[0].itemsize;
    const int64_t *s = v->b[1].buf, *c = v->b[2].buf;
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
        if (width < 0 && c[i] > room - total) {  /* total <= room: never overflows */
            PyErr_Format(PyExc_IndexError, "span %zd (%lld items) ends past dst's room for %zd",
                         i, (long long)c[i], room);
            return -1;
        }
        total += c[i];
    }
    return n;
}

/* The copy loops run without the GIL and read their spans again: another thread may
 * have changed the arrays since check(). Each span is read once into locals and checked
 * again (one branch), so a changed one stops the copy (CHANGED) instead of writing out of
 * bounds. */
#define CHANGED "the spans changed while they were copied (another thread wrote them)"

static int span_ok(int64_t s, int64_t k, Py_ssize_t items, Py_ssize_t room) {
    return s >= 0 && k >= 0 && s <= items && k <= items - s && k <= room;
}

/* Spans i < n (k[i] items of isz bytes from s[i] of source ords[i]'s values vals[] of
 * nvals[] items; ords NULL: source 0) one after another into out (room items), without
 * the GIL; 1 where a span changed since it was checked (CHANGED), else 0. */
static int copy_spans(const char *const *vals, const Py_ssize_t *nvals, int ns,
                      const int64_t *ords, const int64_t *s, const int64_t *k, Py_ssize_t n,
                      Py_ssize_t isz, char *out, Py_ssize_t room) {
    int changed = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t o = ords ? ords[i] : 0, si = s[i], ki = k[i];
        if (o < 0 || o >= ns || !span_ok(si, ki, nvals[o], room)) {
            changed = 1;
            break;
        }
        size_t bytes = (size_t)ki * (size_t)isz;
        memmove(out, vals[o] + (size_t)si * (size_t)isz, bytes);  /* dst may overlap */
        out += bytes;
        room -= ki;
    }
    Py_END_ALLOW_THREADS
    if (changed) PyErr_SetString(PyExc_IndexError, CHANGED);
    return changed;
}

/* gather(values, starts, counts, dst): span i (counts[i] items from starts[i]) of values
 * copied to dst after span i - 1. */
static PyObject *gather(PyObject *self, PyObject *args) {
    (void)self;
    static const char *const names[] = {"values", "starts", "counts", "dst"};
    PyObject *o[4];
    if (!PyArg_ParseTuple(args, "OOOO", &o[0], &o[1], &o[2], &o[3])) return NULL;
    Views v = {.held = 0};
    if (take_all(&v, o, names, 4, 1 << 3) < 0) goto fail;
    Py_ssize_t isz = v.b[0].itemsize;
    if (v.b[3].itemsize != isz) {
        PyErr_SetString(PyExc_ValueError, "dst: items of the values' size");
        goto fail;
    }
    Py_ssize_t n = check(&v, v.b[3].len / isz, -1);
    if (n < 0) goto fail;
    const char *src = v.b[0].buf;
    Py_ssize_t items = v.b[0].len / isz;
    if (copy_spans(&src, &items, 1, NULL, v.b[1].buf, v.b[2].buf, n, isz, v.b[3].buf,
                   v.b[3].len / isz))
        goto fail;
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
    static const char *const names[] = {"values", "starts", "counts", "dst", "pad"};
    PyObject *o[5];
    if (!PyArg_ParseTuple(args, "OOOOO", &o[0], &o[1], &o[2], &o[3], &o[4])) return NULL;
    Views v = {.held = 0};
    if (take_all(&v, o, names, 5, 1 << 3) < 0) goto fail;
    Py_ssize_t isz = v.b[0].itemsize;
    if (v.b[3].itemsize != isz || v.b[4].len != isz || v.b[3].ndim != 2) {
        PyErr_SetString(PyExc_ValueError,
                        "dst: rows x width items of the values' size; pad: one such item");
        goto fail;
    }
    Py_ssize_t rows = v.b[3].shape[0], width = v.b[3].shape[1];
    Py_ssize_t n = check(&v, 0, width);
    if (n < 0) goto fail;
    if (n > rows) {
        PyErr_Format(PyExc_IndexError, "%zd spans, %zd rows", n, rows);
        goto fail;
    }
    const char *src = v.b[0].buf, *item = v.b[4].buf;
    int zero = 1;
    for (Py_ssize_t j = 0; j < isz; j++) zero &= item[j] == 0;
    char *out = v.b[3].buf;
    const int64_t *s = v.b[1].buf, *k = v.b[2].buf;
    size_t row = (size_t)width * (size_t)isz;
    Py_ssize_t items = v.b[0].len / isz;
    int changed = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t si = s[i], ki = k[i];
        if (!span_ok(si, ki, items, width)) {
            changed = 1;
            break;
        }
        size_t bytes = (size_t)ki * (size_t)isz;
        memmove(out, src + (size_t)si * (size_t)isz, bytes);
        fill(out + bytes, row - bytes, item, (size_t)isz, zero);
        out += row;
    }
    if (!changed) fill(out, (size_t)(rows - n) * row, item, (size_t)isz, zero);
    Py_END_ALLOW_THREADS
    if (changed) {
        PyErr_SetString(PyExc_IndexError, CHANGED);
        goto fail;
    }
    let_go(&v);
    Py_RETURN_NONE;
fail:
    let_go(&v);
    return NULL;
}

/* The spans of one ragged field in ns sources (prepare()): each source's values and
 * offsets (int64, a record's values from offsets[r] to offsets[r + 1]), their buffers
 * held until this is freed. */
typedef struct {
    PyObject_HEAD
    int ns, nviews;
    Py_buffer *views;
    const char **vals;
    Py_ssize_t *nvals;      /* items of each source's values */
    const int64_t **offs;
    Py_ssize_t *nrecs;      /* records of each source (its offsets less one) */
    Py_ssize_t isz;
} Columns;

static void Columns_dealloc(Columns *c) {
    for (int i = 0; i < c->nviews; i++) PyBuffer_Release(&c->views[i]);
    PyMem_Free(c->views);
    PyMem_Free(c->vals);
    PyMem_Free(c->nvals);
    PyMem_Free(c->offs);
    PyMem_Free(c->nrecs);
    Py_TYPE(c)->tp_free((PyObject *)c);
}

static PyTypeObject ColumnsType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "feedline._base._spans.Columns",
    .tp_basicsize = sizeof(Columns),
    .tp_dealloc = (destructor)Columns_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A ragged field's values and offsets in many sources: see prepare().",
};

/* prepare(values, offsets) -> Columns: two tuples of ns arrays, values of items of one
 * size, offsets int64 (at least one each). */
static PyObject *prepare(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *vt, *ot;
    if (!PyArg_ParseTuple(args, "O!O!", &PyTuple_Type, &vt, &PyTuple_Type, &ot)) return NULL;
    Py_ssize_t ns = PyTuple_GET_SIZE(vt);
    if (ns < 1 || ns != PyTuple_GET_SIZE(ot) || ns > (1 << 24)) {
        PyErr_SetString(PyExc_ValueError, "values and offsets: one of each a source");
        return NULL;
    }
    Columns *c = PyObject_New(Columns, &ColumnsType);
    if (!c) return NULL;
    c->ns = (int)ns;
    c->nviews = 0;
    c->isz = 0;
    c->views = PyMem_Calloc((size_t)(2 * ns), sizeof(Py_buffer));
    c->vals = PyMem_Calloc((size_t)ns, sizeof(char *));
    c->nvals = PyMem_Calloc((size_t)ns, sizeof(Py_ssize_t));
    c->offs = PyMem_Calloc((size_t)ns, sizeof(int64_t *));
    c->nrecs = PyMem_Calloc((size_t)ns, sizeof(Py_ssize_t));
    if (!c->views || !c->vals || !c->nvals || !c->offs || !c->nrecs) {
        Py_DECREF(c);
        return PyErr_NoMemory();
    }
    int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | PyBUF_ND;
    for (Py_ssize_t s = 0; s < ns; s++) {
        Py_buffer *v = &c->views[c->nviews];
        if (PyObject_GetBuffer(PyTuple_GET_ITEM(vt, s), v, flags) < 0) goto fail;
        c->nviews++;
        if (v->itemsize < 1 || (s && v->itemsize != c->isz)) {
            PyErr_SetString(PyExc_ValueError, "values: items of one size in every source");
            goto fail;
        }
        c->isz = v->itemsize;
        c->vals[s] = v->buf;
        c->nvals[s] = v->len / v->itemsize;
        Py_buffer *o = &c->views[c->nviews];
        if (PyObject_GetBuffer(PyTuple_GET_ITEM(ot, s), o, flags) < 0) goto fail;
        c->nviews++;
        if (!is_int64(o) || o->len < 8) {
            PyErr_SetString(PyExc_ValueError, "offsets: int64 arrays of one record's at least");
            goto fail;
        }
        c->offs[s] = o->buf;
        c->nrecs[s] = o->len / 8 - 1;
    }
    return (PyObject *)c;
fail:
    Py_DECREF(c);
    return NULL;
}

/* The Columns and four arrays of locate() and take(), named in names: those whose bit is
 * set in writable written, the first int64_arrays int64 of one length; NULL on an error
 * (the views let go). */
static Columns *columns_and_four(PyObject *args, Views *v, const char *const *names,
                                 int writable, int int64_arrays, const char *what) {
    PyObject *co, *o[4];
    if (!PyArg_ParseTuple(args, "O!OOOO", &ColumnsType, &co, &o[0], &o[1], &o[2], &o[3]) ||
        take_all(v, o, names, 4, writable) < 0 || !int64s(v, 0, int64_arrays, what)) {
        let_go(v);
        return NULL;
    }
    return (Columns *)co;
}

/* locate(columns, ords, recs, starts, counts): where record recs[i] of source ords[i]
 * lies in its values (starts[i], counts[i] items); IndexError for a record outside its
 * source or offsets outside its values. */
static PyObject *locate(PyObject *self, PyObject *args) {
    (void)self;
    static const char *const names[] = {"ords", "recs", "starts", "counts"};
    Views v = {.held = 0};
    Columns *c = columns_and_four(args, &v, names, 0xC, 4, "ords, recs, starts, counts");
    if (!c) return NULL;
    Py_ssize_t n = v.b[0].len / 8;
    const int64_t *ords = v.b[0].buf, *recs = v.b[1].buf;
    int64_t *starts = v.b[2].buf, *counts = v.b[3].buf;
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t s = ords[i], r = recs[i];
        if (s < 0 || s >= c->ns || r < 0 || r >= c->nrecs[s]) {
            PyErr_Format(PyExc_IndexError, "row %zd: record %lld of source %lld is outside it", i,
                         (long long)r, (long long)s);
            goto fail;
        }
        int64_t lo = c->offs[s][r], hi = c->offs[s][r + 1];
        if (lo < 0 || hi < lo || hi > c->nvals[s]) {
            PyErr_Format(PyExc_IndexError,
                         "row %zd: record %lld of source %lld spans [%lld, %lld) of %zd values",
                         i, (long long)r, (long long)s, (long long)lo, (long long)hi,
                         c->nvals[s]);
            goto fail;
        }
        starts[i] = lo;
        counts[i] = hi - lo;
    }
    let_go(&v);
    Py_RETURN_NONE;
fail:
    let_go(&v);
    return NULL;
}

/* take(columns, ords, starts, counts, dst): span i (counts[i] items from starts[i] of
 * source ords[i]'s values) copied to dst after span i - 1, every span checked first. */
static PyObject *take_spans(PyObject *self, PyObject *args) {
    (void)self;
    static const char *const names[] = {"ords", "starts", "counts", "dst"};
    Views v = {.held = 0};
    Columns *c = columns_and_four(args, &v, names, 0x8, 3, "ords, starts, counts");
    if (!c) return NULL;
    if (v.b[3].itemsize != c->isz) {
        PyErr_SetString(PyExc_ValueError, "dst: items of the values' size");
        goto fail;
    }
    Py_ssize_t n = v.b[0].len / 8, isz = c->isz;
    const int64_t *ords = v.b[0].buf, *s = v.b[1].buf, *k = v.b[2].buf;
    Py_ssize_t room = v.b[3].len / isz;
    for (Py_ssize_t i = 0, left = room; i < n; i++) {
        int64_t o = ords[i];
        if (o < 0 || o >= c->ns || !span_ok(s[i], k[i], c->nvals[o], PY_SSIZE_T_MAX)) {
            PyErr_Format(PyExc_IndexError, "span %zd outside its source's values", i);
            goto fail;
        }
        if (k[i] > left) {  /* left >= 0: never overflows */
            PyErr_Format(PyExc_IndexError, "span %zd (%lld items) ends past dst's room for %zd",
                         i, (long long)k[i], room);
            goto fail;
        }
        left -= k[i];
    }
    if (copy_spans(c->vals, c->nvals, c->ns, ords, s, k, n, isz, v.b[3].buf, room))
        goto fail;
    let_go(&v);
    Py_RETURN_NONE;
fail:
    let_go(&v);
    return NULL;
}

/* shrunk(fds, sizes) -> the first i whose file (descriptor fds[i]) is now shorter than
 * sizes[i] bytes or cannot be asked, else -1: a manifest's files checked for a
 * truncation under the reader in one call (an lseek each, without the GIL). A closed
 * descriptor whose number another file took is not told apart: the caller's handles
 * hold their descriptors open while it asks (a loader's shares of its files). */
static PyObject *shrunk(PyObject *self, PyObject *args) {
    (void)self;
    static const char *const names[] = {"fds", "sizes"};
    PyObject *o[2];
    if (!PyArg_ParseTuple(args, "OO", &o[0], &o[1])) return NULL;
    Views v = {.held = 0};
    if (take_all(&v, o, names, 2, 0) < 0 || !int64s(&v, 0, 2, "fds and sizes")) goto fail;
    Py_ssize_t n = v.b[0].len / 8, bad = -1;
    const int64_t *fds = v.b[0].buf, *sizes = v.b[1].buf;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n && bad < 0; i++) {
        off_t end = fds[i] < 0 || fds[i] > INT_MAX ? -1 : lseek((int)fds[i], 0, SEEK_END);
        if (end < 0 || (int64_t)end < sizes[i]) bad = i;
    }
    Py_END_ALLOW_THREADS
    let_go(&v);
    return PyLong_FromSsize_t(bad);
fail:
    let_go(&v);
    return NULL;
}

#define MAX_AXES 16

/* pad_nd(values, starts, shapes, dst, pad): example i (its values from starts[i], in C
 * order, of shape shapes[i, :]) into dst[i] (dst: rows x P_1 x .. x P_k), every other
 * item of dst pad: a batch of examples that vary on any of their axes (images of any
 * height and width), padded. Each example's runs along its last axis are copied whole. */
static PyObject *pad_nd(PyObject *self, PyObject *args) {
    (void)self;
    static const char *const names[] = {"values", "starts", "shapes", "dst", "pad"};
    PyObject *o[5];
    if (!PyArg_ParseTuple(args, "OOOOO", &o[0], &o[1], &o[2], &o[3], &o[4])) return NULL;
    Views v = {.held = 0};
    int64_t *own = NULL;
    if (take_all(&v, o, names, 5, 1 << 3) < 0) goto fail;
    Py_ssize_t isz = v.b[0].itemsize, k = v.b[3].ndim - 1, n = v.b[1].len / 8;
    if (v.b[3].itemsize != isz || v.b[4].len != isz || k < 1 || k > MAX_AXES ||
        !is_int64(&v.b[1]) || v.b[2].itemsize != 8 || v.b[2].ndim != 2 ||
        v.b[2].shape[0] != n || v.b[2].shape[1] != k || n > v.b[3].shape[0]) {
        PyErr_SetString(PyExc_ValueError,
                        "pad_nd: int64 starts and shapes (one row of k dims an example), dst "
                        "of rows x k dims of the values' items, pad one such item");
        goto fail;
    }
    const Py_ssize_t *P = v.b[3].shape + 1;
    Py_ssize_t items = v.b[0].len / isz, rows = v.b[3].shape[0], block = 1;
    for (Py_ssize_t j = 0; j < k; j++) block *= P[j];
    /* private copies of what is checked: the copy below runs without the GIL */
    own = PyMem_Malloc(sizeof(int64_t) * (size_t)(n * (k + 1) + 1));
    if (!own) {
        PyErr_NoMemory();
        goto fail;
    }
    memcpy(own, v.b[1].buf, (size_t)(n * 8));
    memcpy(own + n, v.b[2].buf, (size_t)(n * k * 8));
    const int64_t *st = own, *sh = own + n;
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t count = 1;
        for (Py_ssize_t j = 0; j < k; j++) {
            int64_t d = sh[i * k + j];
            if (d < 0 || d > P[j]) {
                PyErr_Format(PyExc_IndexError, "example %zd: axis %zd of %lld items, rows of %zd",
                             i, j, (long long)d, P[j]);
                goto fail;
            }
            count *= d;  /* <= the block's items: no overflow */
        }
        if (st[i] < 0 || st[i] > items || count > items - st[i]) {
            PyErr_Format(PyExc_IndexError, "example %zd (start %lld, %lld items) outside the "
                         "%zd values", i, (long long)st[i], (long long)count, items);
            goto fail;
        }
    }
    const char *src = v.b[0].buf, *item = v.b[4].buf;
    char *out = v.b[3].buf;
    int zero = 1;
    for (Py_ssize_t j = 0; j < isz; j++) zero &= item[j] == 0;
    Py_BEGIN_ALLOW_THREADS
    fill(out, (size_t)rows * (size_t)block * (size_t)isz, item, (size_t)isz, zero);
    for (Py_ssize_t i = 0; i < n; i++) {
        const int64_t *d = sh + i * k;
        int empty = 0;
        for (Py_ssize_t j = 0; j < k; j++) empty |= d[j] == 0;
        if (empty) continue;
        /* a run: the example's axes from m on, contiguous in dst too where every axis
         * after m is as long as dst's (an image of any height and width, 3 channels: a
         * run is a row of pixels, not a pixel) */
        Py_ssize_t m = k - 1;
        size_t tail = 1;  /* items of dst's axes after m */
        while (m > 0 && d[m] == P[m]) tail *= (size_t)P[m--];
        size_t run = (size_t)d[m] * tail * (size_t)isz;
        Py_ssize_t at[MAX_AXES] = {0};  /* the index over the example's axes before m */
        const char *from = src + (size_t)st[i] * (size_t)isz;
        char *base = out + (size_t)i * (size_t)block * (size_t)isz;
        for (;;) {
            size_t to = 0;  /* the run's first item in dst[i] */
            for (Py_ssize_t j = 0; j < m; j++) to = (to + (size_t)at[j]) * (size_t)P[j + 1];
            for (Py_ssize_t j = m + 1; j < k; j++) to *= (size_t)P[j];
            memmove(base + to * (size_t)isz, from, run);
            from += run;
            Py_ssize_t j = m - 1;
            while (j >= 0 && ++at[j] == d[j]) at[j--] = 0;
            if (j < 0) break;
        }
    }
    Py_END_ALLOW_THREADS
    PyMem_Free(own);
    let_go(&v);
    Py_RETURN_NONE;
fail:
    PyMem_Free(own);
    let_go(&v);
    return NULL;
}

static PyMethodDef methods[] = {
    {"pad_nd", pad_nd, METH_VARARGS, "pad_nd(values, starts, shapes, dst, pad): see it."},
    {"shrunk", shrunk, METH_VARARGS, "shrunk(fds, sizes) -> int: see the function."},
    {"prepare", prepare, METH_VARARGS, "prepare(values, offsets) -> Columns: see the module."},
    {"locate", locate, METH_VARARGS, "locate(columns, ords, recs, starts, counts)."},
    {"take", take_spans, METH_VARARGS, "take(columns, ords, starts, counts, dst)."},
    {"gather", gather, METH_VARARGS, "gather(values, starts, counts, dst): see the module."},
    {"pad", pad, METH_VARARGS, "pad(values, starts, counts, dst, pad): see the module."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_spans", "Spans of ragged columns copied without the GIL.", -1,
    methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__spans(void) {
    if (PyType_Ready(&ColumnsType) < 0) return NULL;
    return PyModule_Create(&module);
}
