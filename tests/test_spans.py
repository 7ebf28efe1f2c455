"""The compiled span copies (``feedline._base.spans``): numpy's gather and padding, value
for value, for any dtype and pad; nothing written where a span is outside its arrays;
and a fresh process pads ragged batches from its first batch without loading numba."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from feedline._base import spans

pytestmark = pytest.mark.skipif(
    not spans.available(), reason="the compiled span copies are not built here"
)

_DTYPES = ["uint8", "int8", "int16", "float32", "int64", "complex128", "bool", ">i4", "V3"]


def _numpy_gather(values, starts, counts):
    if not len(starts):
        return values[:0].copy()
    # concatenate gives native byte order: the values' own dtype again
    return np.concatenate([values[s : s + c] for s, c in zip(starts, counts)]).astype(values.dtype)


def _numpy_pad(values, starts, counts, rows, width, pad):
    out = np.full((rows, width), pad, dtype=values.dtype)
    for r, (s, c) in enumerate(zip(starts, counts)):
        out[r, :c] = values[s : s + c]
    return out


def _values(dtype: str, n: int, seed: int) -> np.ndarray:
    raw = np.random.default_rng(seed).integers(0, 256, n * np.dtype(dtype).itemsize)
    return raw.astype(np.uint8).view(dtype)


@settings(max_examples=60, deadline=None)
@given(
    dtype=st.sampled_from(_DTYPES),
    n=st.integers(0, 200),
    spans_=st.lists(st.tuples(st.integers(0, 250), st.integers(0, 40)), max_size=30),
    seed=st.integers(0, 2**16),
)
def test_gather_is_numpy_concatenating_the_spans(dtype, n, spans_, seed):
    values = _values(dtype, n, seed)
    ok = [(s, c) for s, c in spans_ if s + c <= n]
    starts = np.array([s for s, _ in ok], dtype=np.int64)
    counts = np.array([c for _, c in ok], dtype=np.int64)
    got = spans.gather(values, starts, counts)
    want = _numpy_gather(values, starts, counts)
    assert got.dtype == values.dtype and got.tobytes() == want.tobytes()


@settings(max_examples=60, deadline=None)
@given(
    dtype=st.sampled_from([d for d in _DTYPES if d != "V3"]),
    n=st.integers(0, 200),
    spans_=st.lists(st.tuples(st.integers(0, 250), st.integers(0, 12)), max_size=20),
    extra=st.integers(0, 3),
    width=st.integers(12, 16),
    pad=st.integers(0, 1),
    seed=st.integers(0, 2**16),
)
def test_pad_is_numpy_padding_each_span_to_its_row(dtype, n, spans_, extra, width, pad, seed):
    values = _values(dtype, n, seed)
    if values.dtype == bool:
        values = values.view(np.uint8) % 2 == 1  # bools of 0 and 1 only
    ok = [(s, c) for s, c in spans_ if s + c <= n]
    starts = np.array([s for s, _ in ok], dtype=np.int64)
    counts = np.array([c for _, c in ok], dtype=np.int64)
    item = values.dtype.type(pad * 7 if values.dtype != bool else pad)
    rows = len(ok) + extra
    got = spans.pad(values, starts, counts, np.empty((rows, width), values.dtype), item)
    want = _numpy_pad(values, starts, counts, rows, width, item)
    assert got.tobytes() == want.tobytes()


def test_pad_fills_multibyte_pads_of_any_bytes():
    values = np.arange(10, dtype=np.float64)
    out = spans.pad(values, [2, 9], [3, 1], np.empty((3, 37), np.float64), -1.5)
    assert out[0, :3].tolist() == [2, 3, 4] and (out[0, 3:] == -1.5).all()
    assert out[1, 0] == 9 and (out[1, 1:] == -1.5).all() and (out[2] == -1.5).all()


def test_a_memory_map_and_a_strided_array_are_read_in_place_or_copied(tmp_path):
    path = tmp_path / "v.npy"
    np.save(path, np.arange(100, dtype=np.int32))
    mapped = np.load(path, mmap_mode="r")
    assert spans.gather(mapped, [90, 5], [3, 2]).tolist() == [90, 91, 92, 5, 6]
    strided = np.arange(200, dtype=np.int32)[::2]  # not contiguous
    assert spans.gather(strided, [1], [3]).tolist() == [2, 4, 6]


@pytest.mark.parametrize(
    "starts, counts, match",
    [
        ([0, 8], [2, 3], "span 1 .start 8, 3 items. outside the 10 values"),
        ([-1], [1], "span 0 .start -1"),
        ([2], [-1], "span 0"),
        ([2**62], [2**62], "span 0"),
    ],
)
def test_a_span_outside_the_values_raises_and_writes_nothing(starts, counts, match):
    values = np.arange(10, dtype=np.int16)
    dst = np.full(20, 99, np.int16)
    with pytest.raises(IndexError, match=match):
        spans._spans.gather(values, np.array(starts), np.array(counts), dst)
    assert (dst == 99).all()
    out = np.full((3, 4), 99, np.int16)
    with pytest.raises(IndexError, match=match):
        spans.pad(values, starts, counts, out, 0)
    assert (out == 99).all()


def test_refusals_name_what_is_wrong():
    values = np.arange(10, dtype=np.int16)
    with pytest.raises(IndexError, match=r"span 0 \(5 items\) ends past dst's room for 4"):
        spans._spans.gather(values, np.array([0]), np.array([5]), np.empty(4, np.int16))
    with pytest.raises(ValueError, match="dst: items of the values' size"):
        spans._spans.gather(values, np.array([0]), np.array([1]), np.empty(4, np.int32))
    with pytest.raises(ValueError, match="int64 arrays of one length"):
        spans._spans.gather(values, np.array([0, 1]), np.array([1]), np.empty(4, np.int16))
    with pytest.raises(ValueError, match="int64 arrays"):
        spans._spans.gather(values, np.array([0], np.int32), np.array([1]), np.empty(4, np.int16))
    with pytest.raises(IndexError, match="span 0 of 5 items, rows of 4"):
        spans.pad(values, [0], [5], np.empty((2, 4), np.int16), 0)
    with pytest.raises(IndexError, match="2 spans, 1 rows"):
        spans.pad(values, [0, 1], [1, 1], np.empty((1, 4), np.int16), 0)
    with pytest.raises(ValueError, match="rows x width"):
        spans.pad(values, [0], [1], np.empty(4, np.int16), 0)
    read_only = np.zeros(4, np.int16)
    read_only.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        spans._spans.gather(values, np.array([0]), np.array([1]), read_only)


def test_without_the_compiled_copies_numpy_gathers_the_same(monkeypatch):
    values = np.arange(50, dtype=np.float32)
    starts, counts = np.array([40, 0, 7, 7]), np.array([10, 0, 3, 1])
    fast = spans.gather(values, starts, counts)
    monkeypatch.setenv("FEEDLINE_NATIVE", "0")
    assert not spans.available()
    assert np.array_equal(spans.gather(values, starts, counts), fast)
    assert spans.gather(values, [3], [4]).tolist() == [3, 4, 5, 6]


_FRESH = """
import sys
import numpy as np
import feedline as fl
class Doc(fl.Record, dims={{"T": None}}):
    tokens = fl.field("T", "int32", pad=-1)
    title = fl.field((), "str")
rng = np.random.default_rng(0)
docs = [{{"tokens": np.arange(k, dtype=np.int32), "title": "t" * int(k % 5)}}
        for k in rng.integers(0, 40, 3000)]
fl.recfile.write({path!r}, Doc, docs)
ds = fl.Dataset(Doc, fl.recfile.open({path!r}))
total = 0
for batch in fl.Loader(ds.shuffle(3), 128, seed=1, workers=0, **{options}):
    lengths = batch.meta.lengths["T"]
    assert (batch.tokens[np.arange(batch.tokens.shape[1]) >= lengths[:, None]] == -1).all()
    total += int(batch.tokens.clip(0).sum())
print(total, "numba" in sys.modules)
"""


@pytest.mark.parametrize("options", [{}, {"bucket": "T"}], ids=["plain", "bucketed"])
def test_a_fresh_process_pads_ragged_batches_without_loading_numba(tmp_path, options):
    # The first batches of a fresh process ran at a quarter of the later ones' speed while
    # numba's kernel for the padding loaded beside them: the C copies need no loading.
    # Bucketing started numba's loading too (its first pass at 0.15x the second): its
    # order's numpy path serves a group's positions at once.
    code = _FRESH.format(path=str(tmp_path / "d.flr"), options=options)
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True
    )
    total, numba_imported = done.stdout.split()
    lengths = np.random.default_rng(0).integers(0, 40, 3000)
    assert int(total) == int(sum(k * (k - 1) // 2 for k in lengths))
    assert numba_imported == "False"


def _sources(k: int, seed: int):
    rng = np.random.default_rng(seed)
    values, offsets = [], []
    for _ in range(k):
        lengths = rng.integers(0, 9, rng.integers(1, 30))
        o = np.zeros(len(lengths) + 1, np.int64)
        np.cumsum(lengths, out=o[1:])
        values.append(rng.integers(-1000, 1000, int(o[-1])).astype(np.int16))
        offsets.append(o)
    return values, offsets


@settings(max_examples=40, deadline=None)
@given(k=st.integers(1, 12), rows=st.integers(0, 60), seed=st.integers(0, 2**16))
def test_take_mixed_is_each_sources_record_in_order(k, rows, seed):
    values, offsets = _sources(k, seed)
    rng = np.random.default_rng(seed + 1)
    ords = rng.integers(0, k, rows)
    recs = np.array([rng.integers(0, len(offsets[o]) - 1) for o in ords], dtype=np.int64)
    columns = spans.prepare(tuple(values), tuple(offsets))
    got, counts = spans.take_mixed(columns, ords, recs, np.dtype(np.int16))
    want = [values[o][offsets[o][r] : offsets[o][r + 1]] for o, r in zip(ords, recs)]
    assert counts.tolist() == [len(w) for w in want]
    assert got.dtype == np.int16
    assert got.tolist() == (np.concatenate(want).tolist() if want else [])


def test_take_mixed_refuses_records_and_offsets_outside_their_sources():
    values, offsets = _sources(3, 0)
    columns = spans.prepare(tuple(values), tuple(offsets))
    last = len(offsets[1]) - 1
    with pytest.raises(IndexError, match=f"row 1: record {last} of source 1 is outside it"):
        spans.take_mixed(columns, [0, 1], [0, last], np.dtype(np.int16))
    with pytest.raises(IndexError, match="record 0 of source 3 is outside it"):
        spans.take_mixed(columns, [3], [0], np.dtype(np.int16))
    with pytest.raises(IndexError, match="record -1 of source 0"):
        spans.take_mixed(columns, [0], [-1], np.dtype(np.int16))
    bad = offsets[2].copy()
    bad[1] = len(values[2]) + 5  # an offset past the values (a damaged file)
    damaged = spans.prepare(tuple(values), (offsets[0], offsets[1], bad))
    with pytest.raises(IndexError, match=r"row 0: record 0 of source 2 spans \[0, "):
        spans.take_mixed(damaged, [2], [0], np.dtype(np.int16))
    dst = np.full(50, 7, np.int16)  # take() checks every span before a byte is copied
    with pytest.raises(IndexError, match="span 1 outside its source's values"):
        spans._spans.take(columns, np.array([0, 0]), np.array([0, 10**6]), np.array([1, 1]), dst)
    assert (dst == 7).all()
    with pytest.raises(ValueError, match="items of one size in every source"):
        spans.prepare((values[0], values[1].astype(np.int32)), tuple(offsets[:2]))
    with pytest.raises(ValueError, match="offsets: int64"):
        spans.prepare((values[0],), (offsets[0].astype(np.int32),))
    with pytest.raises(ValueError, match="one of each a source"):
        spans.prepare((values[0],), ())


def test_prepared_columns_hold_their_buffers():
    values, offsets = _sources(2, 3)
    want = values[1][offsets[1][0] : offsets[1][1]].tolist()
    columns = spans.prepare((values[0], values[1].copy()), tuple(o.copy() for o in offsets))
    del values, offsets  # the copies live on in the columns' buffers
    got, _ = spans.take_mixed(columns, [1], [0], np.dtype(np.int16))
    assert got.tolist() == want


def test_shrunk_names_the_first_file_shorter_than_it_was(tmp_path):
    import os

    fds, sizes = [], []
    for k in range(4):
        path = tmp_path / f"{k}"
        path.write_bytes(b"x" * 1000)
        fds.append(os.open(path, os.O_RDONLY))
        sizes.append(1000)
    try:
        assert spans.shrunk(np.array(fds), np.array(sizes)) == -1
        os.truncate(tmp_path / "2", 10)
        assert spans.shrunk(np.array(fds), np.array(sizes)) == 2
        assert spans.shrunk(np.array(fds[:2]), np.array(sizes[:2])) == -1
        assert spans.shrunk(np.array([fds[0], -1]), np.array([1000, 0])) == 1  # no descriptor
        assert spans.shrunk(np.array([], np.int64), np.array([], np.int64)) == -1
    finally:
        for fd in fds:
            os.close(fd)
    assert spans.shrunk(np.array(fds[:1]), np.array([0])) == 0  # closed: cannot be asked


_RACE = """
import threading, numpy as np
from feedline._base import _spans
n = 2_000_000
values = np.zeros(n, np.uint8)
dst = np.empty(n, np.uint8)
starts = np.arange(n, dtype=np.int64)
counts = np.ones(n, np.int64)
go = threading.Event()
def writer():
    go.wait()
    counts[-1] = 1 << 30  # as soon as gather lets the GIL go, after its checks
threading.Thread(target=writer).start()
go.set()
try:
    _spans.gather(values, starts, counts, dst)
    print("copied")
except IndexError as e:
    print("refused" if "changed while they were copied" in str(e) else e)
"""


def test_spans_changed_by_another_thread_during_the_copy_are_refused_not_overrun():
    # The spans are checked with the GIL held and read again without it: a span another
    # thread changed in between ran the copy past its arrays (SIGSEGV). Each is now read
    # once and checked again as it is copied.
    for _ in range(3):
        done = subprocess.run(
            [sys.executable, "-c", _RACE], capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, done.stderr[-2000:]
        assert done.stdout.strip() in ("copied", "refused"), done.stdout


_OVERFLOW = """
import mmap, os, sys, numpy as np
from feedline._base import _spans
size = 1 << 43
path = sys.argv[1]
try:
    with open(path, "wb") as f:
        f.truncate(size)
    fd = os.open(path, os.O_RDONLY)
    mapped = mmap.mmap(fd, size, prot=mmap.PROT_READ)
    os.close(fd)
except (OSError, OverflowError, ValueError) as e:
    print("skip", e)
    raise SystemExit
values = np.frombuffer(mapped, np.uint8)
n = (1 << 20) + 1
dst = np.full(16, 7, np.uint8)
try:
    _spans.gather(values, np.zeros(n, np.int64), np.full(n, size, np.int64), dst)
except IndexError as e:
    print("refused" if "ends past dst's room for 16" in str(e) and (dst == 7).all() else e)
"""


def test_spans_whose_total_overflows_are_refused(tmp_path):
    # Each count fits the values, but their sum wraps int64: it passed the room check and
    # memcpy wrote terabytes into a 16-byte dst (SIGSEGV). Needs 8 TiB of values: a
    # sparse file, mapped (in a process of its own: a regression would kill this one).
    done = subprocess.run(
        [sys.executable, "-c", _OVERFLOW, str(tmp_path / "sparse")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    if done.stdout.startswith("skip"):
        pytest.skip(f"no 8 TiB sparse map here: {done.stdout}")
    assert done.stdout.strip() == "refused", done.stdout


@settings(max_examples=60, deadline=None)
@given(
    template=st.lists(st.sampled_from([None, 1, 2, 3]), min_size=1, max_size=4).filter(
        lambda t: None in t
    ),
    n=st.integers(0, 6),
    extra_rows=st.integers(0, 2),
    dtype=st.sampled_from(["uint8", "int16", "float32", "complex128", "bool"]),
    seed=st.integers(0, 2**16),
)
def test_padding_examples_that_vary_on_any_axis_is_numpys(template, n, extra_rows, dtype, seed):
    # pad_nd: images of any height and width, or any other axes varying; numpy's masks
    # (the way without C) ran 24x slower on 16 images of 300 - 500 x 300 - 500 x 3
    import feedline as fl
    from feedline.records import _ragged

    rng = np.random.default_rng(seed)
    shapes = [
        tuple(int(rng.integers(0, 4)) if d is None else d for d in template) for _ in range(n)
    ]
    examples = [rng.integers(0, 3, s).astype(dtype) for s in shapes]
    col = fl.Ragged.from_examples(examples, tuple(template), np.dtype(dtype))
    lengths = {
        a: max([s[a] for s in shapes], default=0) + int(rng.integers(0, 2))
        for a, d in enumerate(template)
        if d is None
    }
    pad = True if dtype == "bool" else 5
    views = [col, col.take(np.arange(n)[::-1].copy())]
    with_c = [v.padded(n + extra_rows, lengths, pad) for v in views]
    original = _ragged.spans.available
    _ragged.spans.available = lambda: False
    try:
        with_numpy = [v.padded(n + extra_rows, lengths, pad) for v in views]
    finally:
        _ragged.spans.available = original
    for a, b in zip(with_c, with_numpy):
        assert a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b)


def test_pad_nd_refuses_examples_outside_their_values_or_rows():
    values = np.arange(20, dtype=np.int32)
    out = np.full((2, 3, 4), 9, np.int32)
    with pytest.raises(IndexError, match="example 1: axis 1 of 5 items, rows of 4"):
        spans.pad_nd(values, [0, 6], [[2, 2], [1, 5]], out, 0)
    with pytest.raises(IndexError, match=r"example 0 \(start 18, 4 items\) outside the 20"):
        spans.pad_nd(values, [18], [[2, 2]], out, 0)
    assert (out == 9).all()
    with pytest.raises(ValueError, match="one row of k dims an example"):
        spans.pad_nd(values, [0], [[2, 2, 1]], out, 0)


def test_a_field_of_more_axes_than_pad_nd_takes_is_padded_by_numpy():
    import feedline as fl

    template = (1, None) + (1,) * 15  # 17 axes: past pad_nd's 16
    col = fl.Ragged.from_examples(
        [np.arange(k, dtype=np.int16).reshape((1, k) + (1,) * 15) for k in (2, 3)],
        template,
        np.dtype(np.int16),
    )
    out = col.padded(2, {1: 3}, -1)
    assert out.shape == (2, 1, 3) + (1,) * 15
    assert out.reshape(2, 3).tolist() == [[0, 1, -1], [0, 1, 2]]
