/* Rows gathered by index into arrays, by the calling thread and by helper threads that
 * never hold the GIL: the plain path's chunks of batches (feedline/_base/rowcopy.py).
 *
 * A Task is one chunk: for each field f, rows recs[i] of source ords[i] (its column of
 * that field) copied to row i of dst[f]. Its rows are claimed in blocks with an atomic
 * counter, so any number of threads copy one task at once, each block exactly once:
 * the helpers (pthreads started here, waiting on a queue of tasks) and any Python
 * thread that calls Task.run() (which copies blocks until none is left, then waits for
 * the blocks in flight, copying blocks of the queue's other tasks meanwhile).
 *
 * The arrays read are a Sources object (prepare()): a buffer of every source's column,
 * taken once and shared by the tasks of a loader (a manifest's 1,024 shards were 2,048
 * buffers taken again at each chunk). A task holds its Sources and a buffer of every
 * array it writes until it is freed; it is freed only once no helper is in it
 * (`users`), and a task
 * freed before it was complete is cancelled first (its unclaimed rows are never
 * copied). After a fork, the child has no helpers: tasks of the parent's (an earlier
 * fork generation) are refused (run) or freed without waiting (dealloc); the fork
 * handlers are set when the module loads, so no fork finds the queue's lock held.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <errno.h>

#define MAX_HELPERS 15
/* Bytes of rows a block holds at most: small enough that two threads end a chunk
 * together (a block of 3 KB rows is copied in about 10 us), large enough that the
 * atomic counter costs nothing beside the copies. */
#define BLOCK_BYTES (64 * 1024)
/* Rows at random are each a wait for memory: the first two cache lines of the row AHEAD
 * rows on are fetched while this one is copied (the hardware follows a row once it has
 * begun). Measured on the 2-core reference machine, one thread, chunks of a 4M-row
 * array of 264-byte rows and a 500k-row one of 3,080-byte rows, mapped from the page
 * cache, medians of 5 alternated rounds: 4 rows ahead fetching one or two lines gave
 * 1.05 - 1.2x no prefetch, 8 rows two lines 1.08 - 1.24x numpy's np.take (no prefetch:
 * 0.7 - 1.0x), 16 rows best for the small rows and worse for the large, whole rows
 * 0.8x. */
#define AHEAD 8

/* The columns rows are read from: ns sources of nf fields, every source's field f of
 * rows of rb[f] bytes (items of isz[f] bytes). */
typedef struct {
    PyObject_HEAD
    int nf, ns;
    Py_buffer *views;       /* [ns*nf], nviews of them taken */
    int nviews;
    const char **src;       /* [ns*nf]: source s, field f at s*nf+f */
    Py_ssize_t *rows;       /* [ns] rows of each source (its shortest field's) */
    Py_ssize_t *rb, *isz;   /* [nf] */
} Sources;

typedef struct Task {
    PyObject_HEAD
    int nf, ns;             /* fields, sources */
    Py_ssize_t n, blk;      /* rows, rows a block */
    Py_buffer *views;       /* every buffer held: dst (nf), recs, ords */
    int nviews;
    PyObject *sources;      /* the Sources read (a reference held) */
    char **dst;             /* [nf] */
    const char **src;       /* the Sources' */
    Py_ssize_t *rb;         /* [nf] bytes a row */
    const Py_ssize_t *rows; /* the Sources' */
    const int64_t *recs, *ords;  /* ords NULL: one source */
    _Atomic Py_ssize_t next, done;
    _Atomic int bad;        /* a record out of its source's range was met */
    _Atomic int cut;        /* cancelled before every row was claimed */
    int users;              /* helpers in it (under mu) */
    int queued;             /* in the queue (under mu) */
    struct Task *qnext;
    unsigned long generation;  /* the fork generation it was made in */
} Task;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t work_cv = PTHREAD_COND_INITIALIZER;  /* helpers wait for tasks */
static pthread_cond_t done_cv = PTHREAD_COND_INITIALIZER;  /* a task done, a user gone */
static Task *qhead, *qtail;
static int helpers;
static unsigned long generation;  /* forks this process descends through */

/* ---- copying (no GIL) ---------------------------------------------------------- */

static void copy_rows(Task *t, Py_ssize_t s, Py_ssize_t e) {
    const int nf = t->nf;
    const int64_t *recs = t->recs, *ords = t->ords;
    for (int f = 0; f < nf; f++) {
        const Py_ssize_t rb = t->rb[f];
        char *d = t->dst[f] + s * rb;
        for (Py_ssize_t i = s; i < e; i++, d += rb) {
            const int64_t o = ords ? ords[i] : 0;
            const int64_t r = recs[i];
            if (i + AHEAD < e) {  /* the row AHEAD rows on: its first lines on their way */
                const int64_t o2 = ords ? ords[i + AHEAD] : 0;
                const int64_t r2 = recs[i + AHEAD];
                if (o2 >= 0 && o2 < t->ns && r2 >= 0 && r2 < t->rows[o2]) {
                    const char *q = t->src[o2 * nf + f] + r2 * rb;
                    __builtin_prefetch(q, 0, 0);
                    if (rb > 64) __builtin_prefetch(q + 64, 0, 0);
                }
            }
            if (o < 0 || o >= t->ns || r < 0 || r >= t->rows[o]) {
                atomic_store(&t->bad, 1);
                continue;
            }
            const char *p = t->src[o * nf + f] + r * rb;
            switch (rb) {  /* the small fields' copies inlined */
            case 1: *d = *p; break;
            case 2: memcpy(d, p, 2); break;
            case 4: memcpy(d, p, 4); break;
            case 8: memcpy(d, p, 8); break;
            case 16: memcpy(d, p, 16); break;
            default: memcpy(d, p, (size_t)rb);
            }
        }
    }
}

static void finished(Task *t, Py_ssize_t k) {
    if (atomic_fetch_add(&t->done, k) + k == t->n) {
        pthread_mutex_lock(&mu);
        pthread_cond_broadcast(&done_cv);
        pthread_mutex_unlock(&mu);
    }
}

/* Claim and copy one block; 0 when none is left. */
static int one_block(Task *t) {
    Py_ssize_t s = atomic_fetch_add(&t->next, t->blk);
    if (s >= t->n) return 0;
    Py_ssize_t e = s + t->blk < t->n ? s + t->blk : t->n;
    copy_rows(t, s, e);
    finished(t, e - s);
    return 1;
}

/* The queue's first task with rows unclaimed, with a user taken (under mu); tasks with
 * none left are dropped from the queue on the way. */
static Task *first_open(void) {
    while (qhead && atomic_load(&qhead->next) >= qhead->n) {
        Task *t = qhead;
        qhead = t->qnext;
        if (!qhead) qtail = NULL;
        t->qnext = NULL;
        t->queued = 0;
    }
    if (qhead) qhead->users++;
    return qhead;
}

static void let_go(Task *t) {  /* under mu */
    if (--t->users == 0) pthread_cond_broadcast(&done_cv);
}

static void *helper_main(void *arg) {
    (void)arg;
    pthread_mutex_lock(&mu);
    for (;;) {
        Task *t = first_open();
        if (!t) {
            pthread_cond_wait(&work_cv, &mu);
            continue;
        }
        pthread_mutex_unlock(&mu);
        while (one_block(t)) {
        }
        pthread_mutex_lock(&mu);
        let_go(t);
    }
    return NULL;
}

static void before_fork(void) { pthread_mutex_lock(&mu); }
static void after_fork_parent(void) { pthread_mutex_unlock(&mu); }
static void after_fork_child(void) {
    /* no helper is here: the parent's queue and counts mean nothing in this process (the
     * condition variables' waiters were the parent's threads) */
    pthread_cond_init(&work_cv, NULL);
    pthread_cond_init(&done_cv, NULL);
    qhead = qtail = NULL;
    helpers = 0;
    generation++;
    pthread_mutex_unlock(&mu);  /* locked by this thread in before_fork */
}

/* Wait (without the GIL) until t is done, copying blocks of the queue's tasks meanwhile. */
static void wait_done(Task *t) {
    while (atomic_load(&t->done) < t->n) {
        pthread_mutex_lock(&mu);
        Task *h = first_open();
        pthread_mutex_unlock(&mu);
        if (h) {
            one_block(h);
            pthread_mutex_lock(&mu);
            let_go(h);
            pthread_mutex_unlock(&mu);
            continue;
        }
        pthread_mutex_lock(&mu);
        while (atomic_load(&t->done) < t->n) pthread_cond_wait(&done_cv, &mu);
        pthread_mutex_unlock(&mu);
    }
}

/* Stop t: its unclaimed rows are never copied (counted done); wait for the blocks in
 * flight (a helper's, or another thread's in run()), and take it out of the queue. */
static void cancel(Task *t) {
    Py_ssize_t was = atomic_exchange(&t->next, t->n);
    if (was < t->n) {
        atomic_store(&t->cut, 1);
        finished(t, t->n - was);
    }
    pthread_mutex_lock(&mu);
    if (t->queued) {
        Task **p = &qhead, *prev = NULL;
        while (*p && *p != t) {
            prev = *p;
            p = &(*p)->qnext;
        }
        if (*p) {
            *p = t->qnext;
            if (qtail == t) qtail = prev;
        }
        t->qnext = NULL;
        t->queued = 0;
    }
    while (t->users > 0 || atomic_load(&t->done) < t->n) pthread_cond_wait(&done_cv, &mu);
    pthread_mutex_unlock(&mu);
}

/* ---- the Python type -------------------------------------------------------------- */

static void release_views(Task *t) {
    for (int i = 0; i < t->nviews; i++) PyBuffer_Release(&t->views[i]);
    t->nviews = 0;
}

static void Task_dealloc(Task *t) {
    if (t->generation == generation) {
        Py_BEGIN_ALLOW_THREADS
        cancel(t);
        Py_END_ALLOW_THREADS
    }
    release_views(t);
    Py_CLEAR(t->sources);  /* after the cancel: no thread reads its columns any more */
    PyMem_Free(t->views);
    PyMem_Free(t->dst);
    PyMem_Free(t->rb);
    Py_TYPE(t)->tp_free((PyObject *)t);
}

static PyObject *Task_run(Task *t, PyObject *unused) {
    (void)unused;
    if (t->generation != generation) {
        PyErr_SetString(PyExc_RuntimeError, "a row copy made in another process");
        return NULL;
    }
    if (atomic_load(&t->done) < t->n) {
        Py_BEGIN_ALLOW_THREADS
        while (one_block(t)) {
        }
        wait_done(t);
        Py_END_ALLOW_THREADS
    }
    if (atomic_load(&t->bad)) {
        PyErr_SetString(PyExc_IndexError, "a record is outside its source's rows");
        return NULL;
    }
    /* the arrays stay held until the task is freed: its owner's buffers must not look
     * unviewed (free to be written again) before the owner views them itself */
    return PyBool_FromLong(!atomic_load(&t->cut));
}

static PyObject *Task_cancel(Task *t, PyObject *unused) {
    (void)unused;
    if (t->generation == generation) {
        Py_BEGIN_ALLOW_THREADS
        cancel(t);
        Py_END_ALLOW_THREADS
    }
    Py_RETURN_NONE;
}

static PyObject *Task_get_done(Task *t, void *closure) {
    (void)closure;
    return PyBool_FromLong(atomic_load(&t->done) >= t->n);
}

static PyMethodDef Task_methods[] = {
    {"run", (PyCFunction)Task_run, METH_NOARGS,
     "Copy the task's unclaimed rows in this thread (the GIL released), wait for the "
     "rest; True if every row was copied, False if the task was cancelled; IndexError "
     "if a record was outside its source."},
    {"cancel", (PyCFunction)Task_cancel, METH_NOARGS,
     "Copy no more of its rows; wait for the blocks being copied."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Task_getset[] = {
    {"done", (getter)Task_get_done, NULL, "whether every row is copied (or cancelled)", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject TaskType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "feedline._base._rowcopy.Task",
    .tp_basicsize = sizeof(Task),
    .tp_dealloc = (destructor)Task_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Rows being copied: see the module.",
    .tp_methods = Task_methods,
    .tp_getset = Task_getset,
};

static Py_ssize_t row_bytes(Py_buffer *v) {
    Py_ssize_t b = v->itemsize;
    for (int d = 1; d < v->ndim; d++) b *= v->shape[d];
    return b;
}

/* A buffer of o in views[*nviews] (counted once taken, to be released). */
static int take_view(Py_buffer *views, int *nviews, PyObject *o, int writable, const char *what) {
    Py_buffer *v = &views[*nviews];
    int flags = PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(o, v, flags) < 0) return -1;
    (*nviews)++;
    if (v->ndim < 1) {
        PyErr_Format(PyExc_ValueError, "%s: an array of rows (at least one dimension)", what);
        return -1;
    }
    return 0;
}

static int get_view(Task *t, PyObject *o, int writable, const char *what) {
    return take_view(t->views, &t->nviews, o, writable, what);
}

static void Sources_dealloc(Sources *s) {
    for (int i = 0; i < s->nviews; i++) PyBuffer_Release(&s->views[i]);
    PyMem_Free(s->views);
    PyMem_Free(s->src);
    PyMem_Free(s->rows);
    PyMem_Free(s->rb);
    PyMem_Free(s->isz);
    Py_TYPE(s)->tp_free((PyObject *)s);
}

static PyTypeObject SourcesType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "feedline._base._rowcopy.Sources",
    .tp_basicsize = sizeof(Sources),
    .tp_dealloc = (destructor)Sources_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Columns rows are copied from, their buffers held: see prepare().",
};

/* prepare(sources) -> Sources
 *   sources: tuple of ns tuples of nf C-contiguous arrays, every source's field f of
 *   rows of the same bytes and items of the same size. */
static PyObject *prepare(PyObject *self, PyObject *arg) {
    (void)self;
    if (!PyTuple_Check(arg)) {
        PyErr_SetString(PyExc_TypeError, "sources: a tuple of tuples of arrays");
        return NULL;
    }
    Py_ssize_t ns = PyTuple_GET_SIZE(arg);
    PyObject *first = ns > 0 ? PyTuple_GET_ITEM(arg, 0) : NULL;
    Py_ssize_t nf = first && PyTuple_Check(first) ? PyTuple_GET_SIZE(first) : 0;
    if (nf < 1 || ns < 1 || nf * ns > (1 << 24)) {
        PyErr_SetString(PyExc_ValueError,
                        "one field and source at least, 16,777,216 columns at most");
        return NULL;
    }
    Sources *S = PyObject_New(Sources, &SourcesType);
    if (!S) return NULL;
    S->nf = (int)nf;
    S->ns = (int)ns;
    S->nviews = 0;
    S->views = PyMem_Calloc((size_t)(ns * nf), sizeof(Py_buffer));
    S->src = PyMem_Calloc((size_t)(ns * nf), sizeof(char *));
    S->rows = PyMem_Calloc((size_t)ns, sizeof(Py_ssize_t));
    S->rb = PyMem_Calloc((size_t)nf, sizeof(Py_ssize_t));
    S->isz = PyMem_Calloc((size_t)nf, sizeof(Py_ssize_t));
    if (!S->views || !S->src || !S->rows || !S->rb || !S->isz) {
        Py_DECREF(S);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t s = 0; s < ns; s++) {
        PyObject *cols = PyTuple_GET_ITEM(arg, s);
        if (!PyTuple_Check(cols) || PyTuple_GET_SIZE(cols) != nf) {
            PyErr_SetString(PyExc_ValueError, "each source: a tuple of one array a field");
            goto fail;
        }
        for (Py_ssize_t f = 0; f < nf; f++) {
            if (take_view(S->views, &S->nviews, PyTuple_GET_ITEM(cols, f), 0, "source") < 0)
                goto fail;
            Py_buffer *v = &S->views[S->nviews - 1];
            if (s == 0) {
                S->rb[f] = row_bytes(v);
                S->isz[f] = v->itemsize;
            } else if (row_bytes(v) != S->rb[f] || v->itemsize != S->isz[f]) {
                PyErr_SetString(PyExc_ValueError, "a source's rows differ from the first's");
                goto fail;
            }
            Py_ssize_t r = v->shape[0];
            if (f == 0 || r < S->rows[s]) S->rows[s] = r;
            S->src[s * nf + f] = v->buf;
        }
    }
    return (PyObject *)S;
fail:
    Py_DECREF(S);
    return NULL;
}

/* submit(dst, sources, recs, ords, queue) -> Task
 *   dst: tuple of nf writable C-contiguous arrays, each of at least len(recs) rows;
 *   sources: a Sources (prepare()) of nf fields, row for row like dst's, or the tuple
 *   prepare() takes; recs: int64 array; ords: int64 array of source ordinals, or None
 *   (one source); queue: the helpers may copy it (else only threads that run() it). */
static PyObject *submit(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *dst, *sources, *recs, *ords;
    int queue;
    if (!PyArg_ParseTuple(args, "O!OOOp", &PyTuple_Type, &dst, &sources, &recs, &ords, &queue))
        return NULL;
    if (Py_IS_TYPE(sources, &SourcesType)) {
        Py_INCREF(sources);
    } else {
        sources = prepare(NULL, sources);
        if (!sources) return NULL;
    }
    Sources *S = (Sources *)sources;  /* a reference of this call's, given to the task */
    Py_ssize_t nf = PyTuple_GET_SIZE(dst), ns = S->ns;
    if (nf != S->nf) {
        PyErr_SetString(PyExc_ValueError, "dst: one array for each of the sources' fields");
        Py_DECREF(sources);
        return NULL;
    }
    if (ns > 1 && ords == Py_None) {
        PyErr_SetString(PyExc_ValueError, "several sources need ordinals");
        Py_DECREF(sources);
        return NULL;
    }
    Task *t = PyObject_New(Task, &TaskType);
    if (!t) {
        Py_DECREF(sources);
        return NULL;
    }
    t->sources = sources;
    t->src = S->src;
    t->rows = S->rows;
    t->nf = (int)nf;
    t->ns = (int)ns;
    t->nviews = 0;
    t->users = t->queued = 0;
    t->qnext = NULL;
    t->generation = generation;
    t->n = 0;
    atomic_init(&t->next, 0);
    atomic_init(&t->done, 0);
    atomic_init(&t->bad, 0);
    atomic_init(&t->cut, 0);
    t->recs = t->ords = NULL;
    t->views = PyMem_Calloc((size_t)(nf + 2), sizeof(Py_buffer));
    t->dst = PyMem_Calloc((size_t)nf, sizeof(char *));
    t->rb = PyMem_Calloc((size_t)nf, sizeof(Py_ssize_t));
    if (!t->views || !t->dst || !t->rb) {
        Py_DECREF(t);
        return PyErr_NoMemory();
    }
    /* the indices first: the rows needed of each dst */
    if (get_view(t, recs, 0, "recs") < 0) goto fail;
    Py_buffer *rv = &t->views[t->nviews - 1];
    if (rv->itemsize != 8 || rv->ndim != 1) {
        PyErr_SetString(PyExc_ValueError, "recs: a one-dimensional int64 array");
        goto fail;
    }
    t->recs = rv->buf;
    t->n = rv->shape[0];
    if (ords != Py_None) {
        if (get_view(t, ords, 0, "ords") < 0) goto fail;
        Py_buffer *ov = &t->views[t->nviews - 1];
        if (ov->itemsize != 8 || ov->ndim != 1 || ov->shape[0] != t->n) {
            PyErr_SetString(PyExc_ValueError, "ords: an int64 array as long as recs");
            goto fail;
        }
        t->ords = ov->buf;
    }
    Py_ssize_t total = 0;
    for (Py_ssize_t f = 0; f < nf; f++) {
        if (get_view(t, PyTuple_GET_ITEM(dst, f), 1, "dst") < 0) goto fail;
        Py_buffer *v = &t->views[t->nviews - 1];
        if (v->shape[0] < t->n) {
            PyErr_SetString(PyExc_ValueError, "dst: fewer rows than recs");
            goto fail;
        }
        t->dst[f] = v->buf;
        t->rb[f] = row_bytes(v);
        if (t->rb[f] != S->rb[f] || v->itemsize != S->isz[f]) {
            PyErr_SetString(PyExc_ValueError, "a source's rows differ from dst's");
            goto fail;
        }
        total += t->rb[f];
    }
    t->blk = total > 0 ? BLOCK_BYTES / total : t->n;
    if (t->blk < 1) t->blk = 1;
    if (queue && t->n > 0) {
        pthread_mutex_lock(&mu);
        t->queued = 1;
        if (qtail) qtail->qnext = t;
        else qhead = t;
        qtail = t;
        pthread_cond_broadcast(&work_cv);
        pthread_mutex_unlock(&mu);
    }
    return (PyObject *)t;
fail:
    Py_DECREF(t);
    return NULL;
}

/* start_helpers(k): at least k helper threads in this process (at most MAX_HELPERS);
 * returns how many there are. */
static PyObject *start_helpers(PyObject *self, PyObject *arg) {
    (void)self;
    long k = PyLong_AsLong(arg);
    if (k == -1 && PyErr_Occurred()) return NULL;
    if (k > MAX_HELPERS) k = MAX_HELPERS;
    pthread_mutex_lock(&mu);
    int err = 0;
    while (helpers < k) {
        pthread_t th;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        err = pthread_create(&th, &attr, helper_main, NULL);
        pthread_attr_destroy(&attr);
        if (err) break;
        helpers++;
    }
    int now = helpers;
    pthread_mutex_unlock(&mu);
    if (err && now == 0) {
        errno = err;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    return PyLong_FromLong(now);
}

static PyMethodDef methods[] = {
    {"submit", submit, METH_VARARGS,
     "submit(dst, sources, recs, ords, queue) -> Task: rows recs[i] of sources[ords[i]] "
     "into row i of each dst array"},
    {"prepare", prepare, METH_O,
     "prepare(sources) -> Sources: buffers of every source's columns (a tuple of tuples "
     "of arrays, one a field), held for the tasks that copy from them"},
    {"start_helpers", start_helpers, METH_O,
     "start_helpers(k) -> int: at least k helper threads (at most 15); how many run"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_rowcopy", "Rows copied by index without the GIL.", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__rowcopy(void) {
    static int forks_handled;
    if (!forks_handled) {  /* before any task can be queued */
        int err = pthread_atfork(before_fork, after_fork_parent, after_fork_child);
        if (err) {
            errno = err;
            return PyErr_SetFromErrno(PyExc_OSError);
        }
        forks_handled = 1;
    }
    if (PyType_Ready(&TaskType) < 0 || PyType_Ready(&SourcesType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    Py_INCREF(&TaskType);
    if (PyModule_AddObject(m, "Task", (PyObject *)&TaskType) < 0) {
        Py_DECREF(&TaskType);
        Py_DECREF(m);
        return NULL;
    }
    Py_INCREF(&SourcesType);
    if (PyModule_AddObject(m, "Sources", (PyObject *)&SourcesType) < 0) {
        Py_DECREF(&SourcesType);
        Py_DECREF(m);
        return NULL;
    }
    if (PyModule_AddIntConstant(m, "MAX_HELPERS", MAX_HELPERS) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
