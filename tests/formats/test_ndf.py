""".ndf (data.nu's rows): the byte layout, round trips, the loader, and every open error."""

from __future__ import annotations

import os
import pickle
import struct
import time
import tracemalloc

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import feedline as fl

HEADER = struct.Struct("<4sQQQ")
U64 = 2**64 - 1
# A liveness bound for a fuzzed file's open and reads (a hang fails the test), not a timing.
LIVENESS_S = 30.0


def header(n: int, d: int, l: int, magic: bytes = b"NDF1") -> bytes:  # noqa: E741
    return HEADER.pack(magic, n, d, l)


def random_rows(n: int, d: int, l: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:  # noqa: E741
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, d)), rng.standard_normal((n, l))


def open_error(path) -> fl.FormatError:
    """The FormatError that opening ``path`` raises (asserting its path and offset)."""
    size = os.path.getsize(path)
    with pytest.raises(fl.FormatError) as info:
        fl.ndf.open(path)
    err = info.value
    assert err.path == os.fspath(path)
    assert os.fspath(path) in str(err)
    assert isinstance(err.offset, int) and 0 <= err.offset <= max(size, 28)
    return err


@pytest.fixture
def small(tmp_path):
    """A 37-row file with 5 features and 2 labels, and its arrays."""
    x, y = random_rows(37, 5, 2)
    path = tmp_path / "small.ndf"
    fl.ndf.save(path, x, y)
    return path, x, y


# -- the layout, byte for byte ------------------------------------------------------------


def test_a_tiny_file_is_the_header_then_the_rows_features_first(tmp_path):
    path = tmp_path / "tiny.ndf"
    fl.ndf.save(path, [[1.5, -2.0], [3.0, 0.25]], [[7.0], [8.0]])
    expected = (
        b"NDF1"
        + struct.pack("<QQQ", 2, 2, 1)
        + struct.pack("<ddd", 1.5, -2.0, 7.0)
        + struct.pack("<ddd", 3.0, 0.25, 8.0)
    )
    assert path.read_bytes() == expected
    assert len(expected) == 28 + 2 * 3 * 8


def test_a_file_without_labels_has_l_zero_and_only_features(tmp_path):
    path = tmp_path / "nolabels.ndf"
    fl.ndf.save(path, [[1.0, 2.0, 3.0]])
    assert path.read_bytes() == b"NDF1" + struct.pack("<QQQ3d", 1, 3, 0, 1.0, 2.0, 3.0)


def test_row_i_starts_at_28_plus_i_times_the_row_bytes(small):
    path, x, y = small
    data = path.read_bytes()
    row = (5 + 2) * 8
    for i in (0, 1, 17, 36):
        values = struct.unpack_from("<7d", data, 28 + i * row)
        assert values == tuple(x[i]) + tuple(y[i])


def test_a_file_packed_by_hand_reads_back_as_packed(tmp_path):
    path = tmp_path / "hand.ndf"
    path.write_bytes(header(3, 2, 1) + struct.pack("<9d", *range(9)))
    with fl.ndf.open(path) as f:
        assert (len(f), f.n, f.d, f.l) == (3, 3, 2, 1)
        for i in range(3):
            x, y = f.read_row(i)
            assert x.tolist() == [3 * i, 3 * i + 1] and y.tolist() == [3 * i + 2]


def test_values_are_stored_as_float64_whatever_the_input_dtype(tmp_path):
    path = tmp_path / "cast.ndf"
    fl.ndf.save(
        path,
        np.arange(6, dtype=np.int32).reshape(3, 2),
        np.array([0.5, 1.5, 2.5], dtype=np.float32),
    )
    assert (
        path.read_bytes()[28:]
        == np.array([[0, 1, 0.5], [2, 3, 1.5], [4, 5, 2.5]], dtype="<f8").tobytes()
    )


def test_a_one_dimensional_y_is_one_label_per_row(tmp_path):
    path = tmp_path / "y1.ndf"
    fl.ndf.save(path, np.zeros((4, 2)), np.arange(4.0))
    with fl.ndf.open(path) as f:
        assert f.l == 1
        assert f.rows(range(4))[1][:, 0].tolist() == [0, 1, 2, 3]


@pytest.mark.parametrize(
    "x, y",
    [
        (np.zeros(3), None),  # x must be n x d
        (np.zeros((2, 2, 2)), None),
        (np.zeros((3, 2)), np.zeros((4, 1))),  # y must have n rows
        (np.zeros((3, 2)), np.zeros((3, 1, 1))),
    ],
)
def test_save_refuses_arrays_of_the_wrong_shape_and_writes_nothing(tmp_path, x, y):
    with pytest.raises(ValueError):
        fl.ndf.save(tmp_path / "bad.ndf", x, y)
    assert os.listdir(tmp_path) == []


# -- saving a dataset (data.nu's data_save_ndf(path, DataSet)) ----------------------------


def test_a_dataset_of_x_and_y_saves_as_its_arrays_would(tmp_path):
    x, y = random_rows(23, 4, 3, seed=5)
    fl.ndf.save(tmp_path / "arrays.ndf", x, y)
    fl.ndf.save(tmp_path / "dataset.ndf", fl.Dataset.from_arrays(x=x, y=y))
    assert (tmp_path / "dataset.ndf").read_bytes() == (tmp_path / "arrays.ndf").read_bytes()


def test_a_dataset_without_y_saves_with_l_zero(tmp_path):
    x, _ = random_rows(6, 2, 0)
    fl.ndf.save(tmp_path / "x.ndf", fl.Dataset.from_arrays(x=x))
    assert (tmp_path / "x.ndf").read_bytes() == header(6, 2, 0) + x.astype("<f8").tobytes()


def test_an_open_ndf_saves_as_a_byte_identical_copy(small, tmp_path):
    path, _, _ = small
    with fl.ndf.open(path) as f:
        fl.ndf.save(tmp_path / "copy.ndf", f)  # a typed source: .record, len, getitems
        fl.ndf.save(tmp_path / "via-dataset.ndf", fl.Dataset(f.record, f))
    assert (tmp_path / "copy.ndf").read_bytes() == path.read_bytes()
    assert (tmp_path / "via-dataset.ndf").read_bytes() == path.read_bytes()


class Pair(fl.Record, dims={"D": 3, "L": 2}):
    """A row of data.nu's DataSet, declared with other dtypes."""

    x = fl.field("D", "float32")
    y = fl.field("L", "int64")


def test_fields_of_other_dtypes_are_stored_as_float64(tmp_path):
    items = [{"x": np.arange(3, dtype=np.float32) + i, "y": np.array([i, -i])} for i in range(5)]
    fl.ndf.save(tmp_path / "p.ndf", fl.Dataset(Pair, items))  # read item by item
    with fl.ndf.open(tmp_path / "p.ndf") as f:
        assert (len(f), f.d, f.l) == (5, 3, 2)
        x, y = f.rows(range(5))
        assert x.tolist() == [[i, i + 1, i + 2] for i in range(5)]
        assert y.tolist() == [[i, -i] for i in range(5)]


class ItemsOnly:
    """A typed source with __getitem__ only (no getitems)."""

    def __init__(self, record, items):
        self.record, self.items = record, items

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        return self.items[i]


def test_a_typed_source_read_item_by_item_saves_in_bounded_chunks(tmp_path, monkeypatch):
    monkeypatch.setattr(fl.ndf, "_CHUNK_BYTES", 64)  # a chunk of 1 row: 5 values of 8 bytes
    items = [{"x": np.full(3, float(i)), "y": np.array([i, 2 * i])} for i in range(7)]
    fl.ndf.save(tmp_path / "i.ndf", ItemsOnly(Pair, items))
    x = np.array([it["x"] for it in items])
    y = np.array([it["y"] for it in items], dtype=np.float64)
    fl.ndf.save(tmp_path / "a.ndf", x, y)
    assert (tmp_path / "i.ndf").read_bytes() == (tmp_path / "a.ndf").read_bytes()
    big_x, big_y = random_rows(50, 3, 2, seed=9)
    fl.ndf.save(tmp_path / "b.ndf", fl.Dataset.from_arrays(x=big_x, y=big_y))
    with fl.ndf.open(tmp_path / "b.ndf") as f:
        assert np.array_equal(f.rows(range(50))[0], big_x)
        assert np.array_equal(f.rows(range(50))[1], big_y)


def test_scalar_fields_are_one_value_a_row(tmp_path):
    x = np.arange(4.0)
    fl.ndf.save(tmp_path / "s.ndf", fl.Dataset.from_arrays(x=x, y=x * 2))
    with fl.ndf.open(tmp_path / "s.ndf") as f:
        assert (f.d, f.l) == (1, 1) and f.rows([3])[1].tolist() == [[6.0]]


class Extra(fl.Record):
    """x and y and something .ndf cannot hold."""

    x = fl.field(2, "float64")
    y = fl.field(1, "float64")
    ids = fl.field((), "int64")


class Grid(fl.Record):
    """An x that is not a vector."""

    x = fl.field((2, 2), "float64")


class Words(fl.Record):
    """No x at all."""

    tokens = fl.field(4, "int64")


class Complex(fl.Record):
    """An x that float64 cannot hold."""

    x = fl.field(2, "complex64")


@pytest.mark.parametrize(
    ("record", "error", "message"),
    [
        (
            Words,
            fl.RecordError,
            r"expected a dataset with fields x \[d\] and optionally y \[l\], "
            r"found Words with fields tokens",
        ),
        (Extra, fl.RecordError, r"field `ids`.*\.ndf holds x and y only"),
        (Grid, fl.ShapeError, r"Grid field `x` .*should be \[d\].*shape \(2, 2\)"),
        (Complex, fl.RecordError, r"Complex field `x`.*complex64.*float64"),
    ],
)
def test_a_dataset_that_is_not_x_and_y_is_refused_naming_its_fields(
    tmp_path, record, error, message
):
    with pytest.raises(error, match=message) as e:
        fl.ndf.save(tmp_path / "bad.ndf", ItemsOnly(record, []))
    assert "test_ndf.py" in str(e.value)  # where the field was declared
    assert os.listdir(tmp_path) == []


def test_y_with_a_dataset_is_refused(tmp_path):
    ds = fl.Dataset.from_arrays(x=np.zeros((2, 2)))
    with pytest.raises(TypeError, match="y comes from the dataset"):
        fl.ndf.save(tmp_path / "bad.ndf", ds, np.zeros((2, 1)))
    assert os.listdir(tmp_path) == []


def test_a_source_whose_batch_does_not_fit_its_record_is_a_shape_error(tmp_path):
    items = [{"x": np.zeros(3), "y": np.zeros(2)}, {"x": np.zeros(4), "y": np.zeros(2)}]
    with pytest.raises(fl.ShapeError, match=r"item 1.*x.*\(3,\).*\(4,\)"):
        fl.ndf.save(tmp_path / "bad.ndf", ItemsOnly(Pair, items))
    assert os.listdir(tmp_path) == []


# -- round trips ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "n, d, l", [(1, 1, 0), (37, 5, 2), (0, 4, 1), (0, 3, 0), (200, 1, 9), (5, 0, 3)]
)
def test_round_trips_keep_every_value_bit_for_bit(tmp_path, n, d, l):  # noqa: E741
    x, y = random_rows(n, d, l, seed=n + d + l)
    if n and d:
        x.flat[0], x.flat[-1] = np.nan, -0.0
    if n > 2 and d:
        x[1, 0] = 5e-324  # a subnormal
    if n and l:
        y.flat[0] = np.inf
    path = tmp_path / "rt.ndf"
    fl.ndf.save(path, x, y if l else None)
    assert os.path.getsize(path) == 28 + n * (d + l) * 8
    with fl.ndf.open(path) as f:
        assert (len(f), f.d, f.l) == (n, d, l)
        X, Y = f.rows(np.arange(n))
        assert X.shape == (n, d) and Y.shape == (n, l)
        assert X.dtype == Y.dtype == np.float64
        assert X.view(np.int64).tolist() == x.view(np.int64).tolist()
        assert Y.view(np.int64).tolist() == y.view(np.int64).tolist()


def test_read_row_rows_getitems_and_indexing_equal_the_arrays(small):
    path, x, y = small
    idx = np.array([36, 0, 5, 5, 17, 2])  # unsorted, with a repeat
    with fl.ndf.open(path) as f:
        for i in range(len(f)):
            rx, ry = f.read_row(i)
            assert np.array_equal(rx, x[i]) and np.array_equal(ry, y[i])
            item = f[i]
            assert set(item) == {"x", "y"}
            assert np.array_equal(item["x"], x[i]) and np.array_equal(item["y"], y[i])
        X, Y = f.rows(idx)
        assert np.array_equal(X, x[idx]) and np.array_equal(Y, y[idx])
        batch = f.getitems(idx)
        assert np.array_equal(batch["x"], x[idx]) and np.array_equal(batch["y"], y[idx])
        X0, Y0 = f.rows([])
        assert X0.shape == (0, 5) and Y0.shape == (0, 2)


def test_rows_read_are_copies_not_views_of_the_file(small):
    path, x, _ = small
    with fl.ndf.open(path) as f:
        rx, _ = f.read_row(0)
        rx[:] = 99.0
        X, _ = f.rows([0, 1])
        X[:] = 99.0
        assert np.array_equal(f.read_row(0)[0], x[0])
    assert np.array_equal(fl.ndf.open(path).read_row(0)[0], x[0])


def test_the_record_has_a_float64_vector_per_part(small):
    path, _, _ = small
    with fl.ndf.open(path) as f:
        fields = f.record.fields
        assert list(fields) == ["x", "y"]
        assert fields["x"].shape == (5,) and fields["y"].shape == (2,)
        assert fields["x"].dtype == fields["y"].dtype == np.float64


@pytest.mark.parametrize("bad", [-1, 37, 38, 2**63])
def test_rows_out_of_range_are_an_index_error(small, bad):
    path, _, _ = small
    with fl.ndf.open(path) as f:
        with pytest.raises(IndexError):
            f.read_row(bad)
        with pytest.raises(IndexError):
            f[bad]
        if bad < 2**63:
            with pytest.raises(IndexError):
                f.rows([0, bad])
            with pytest.raises(IndexError):
                f.getitems([bad])


def test_an_empty_file_has_no_rows_and_no_batches(tmp_path):
    path = tmp_path / "empty.ndf"
    fl.ndf.save(path, np.zeros((0, 3)), np.zeros((0, 2)))
    assert path.read_bytes() == header(0, 3, 2)
    with fl.ndf.open(path) as f:
        assert len(f) == 0
        with pytest.raises(IndexError):
            f.read_row(0)
        assert list(fl.Loader(f, 4, seed=1)) == []


# -- as a loader source --------------------------------------------------------------------


def batches(loader) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    return [(b.x.copy(), b.y.copy(), b.meta.record_indices.copy()) for b in loader]


@pytest.mark.parametrize(
    "seed, options", [(1, {}), (7, {"drop_last": True}), (None, {}), (3, {"shard": (1, 3)})]
)
@pytest.mark.parametrize("l", [2, 0])
def test_a_loader_over_an_ndf_equals_one_over_the_same_arrays(tmp_path, seed, options, l):  # noqa: E741
    x, y = random_rows(1000, 6, l, seed=4)
    path = tmp_path / "loader.ndf"
    fl.ndf.save(path, x, y if l else None)
    with fl.ndf.open(path) as f:
        got = batches(fl.Loader(f, 64, seed=seed, **options))
    want = batches(fl.Loader(fl.Dataset.from_arrays(x=x, y=y), 64, seed=seed, **options))
    assert len(got) == len(want) > 0
    for (gx, gy, gi), (wx, wy, wi) in zip(got, want):
        assert np.array_equal(gi, wi)
        assert np.array_equal(gx, wx) and np.array_equal(gy, wy)
        assert gy.shape == (len(gi), l)
    seen = np.concatenate([g[2] for g in got])
    if seed and not options:
        assert sorted(seen.tolist()) == list(range(1000))
        assert seen.tolist() != list(range(1000))  # shuffled


def test_a_dataset_over_an_ndf_reads_the_same_rows(small):
    path, x, y = small
    with fl.ndf.open(path) as f:
        ds = fl.Dataset(f.record, f)
        assert len(ds) == 37
        batch = ds.getitems(np.array([3, 1, 4]))
        assert np.array_equal(batch["x"], x[[3, 1, 4]])
        assert np.array_equal(ds[9]["y"], y[9])


# -- handles -------------------------------------------------------------------------------


def test_share_close_context_manager_and_pickle(small):
    path, x, _ = small
    f = fl.ndf.open(path)
    g = f.share()
    f.close()
    f.close()  # idempotent
    assert np.array_equal(g.read_row(4)[0], x[4])
    h = pickle.loads(pickle.dumps(g))
    g.close()
    assert h is not g and h.path == os.fspath(path)
    assert np.array_equal(h.rows([1, 2])[0], x[[1, 2]])
    with h:
        assert len(h) == 37
    assert repr(h).startswith("NdfFile(")


def test_reading_through_a_closed_handle_is_a_value_error(small):
    path, _, _ = small
    f = fl.ndf.open(path)
    f.close()
    with pytest.raises(ValueError):
        f.read_row(0)


def test_a_missing_file_is_file_not_found(tmp_path):
    with pytest.raises(FileNotFoundError):
        fl.ndf.open(tmp_path / "nope.ndf")


# -- open errors: each a FormatError naming the path and offset ----------------------------


@pytest.mark.parametrize("size", [0, 1, 4, 12, 27])
def test_a_file_shorter_than_the_header_is_a_format_error(tmp_path, size):
    path = tmp_path / "short.ndf"
    path.write_bytes(header(0, 1, 0)[:size])
    assert open_error(path).offset == 0


@pytest.mark.parametrize("magic", [b"NDF2", b"ndf1", b"\0\0\0\0", b"\x89FLR", b"1FDN"])
def test_a_bad_magic_is_a_format_error_at_offset_0(tmp_path, magic):
    path = tmp_path / "magic.ndf"
    path.write_bytes(header(1, 1, 0, magic) + struct.pack("<d", 1.0))
    err = open_error(path)
    assert err.offset == 0
    assert "magic" in str(err)


@pytest.mark.parametrize("cut", [1, 7, 8, 56, 8 * 7 * 37 - 1, 8 * 7 * 37])
def test_truncated_rows_are_a_format_error(small, cut):
    path, _, _ = small
    data = path.read_bytes()
    path.write_bytes(data[:-cut])
    err = open_error(path)
    assert "37" in str(err)  # the message says what the header claims


@pytest.mark.parametrize("extra", [b"\0", b"\0" * 8, b"x" * 56, b"\0" * 4096])
def test_extra_trailing_bytes_are_a_format_error(small, extra):
    path, _, _ = small
    path.write_bytes(path.read_bytes() + extra)
    open_error(path)


def test_a_file_truncated_at_any_length_is_a_format_error(tmp_path):
    path = tmp_path / "t.ndf"
    fl.ndf.save(path, *random_rows(3, 2, 1))
    data = path.read_bytes()
    for size in range(len(data)):
        path.write_bytes(data[:size])
        open_error(path)


@pytest.mark.parametrize(
    "n, d, l, body",
    [
        (U64, U64, U64, b""),  # n*(d+l)*8 far past 2**64
        (2**63, 1, 1, b""),  # 2**67
        (2**61 + 1, 1, 0, b"\0" * 8),  # 8*(2**61+1) = 2**64 + 8 wraps to 8: the body fits
        (1, U64, 1, b""),  # d + l = 2**64 wraps to 0: a C reader wants 28 bytes
        (2**32, 2**32, 0, b"\0" * 8),  # 2**64 * 8 wraps to 0
        (2**40, 2**20, 0, b""),  # 2**63 bytes: huge, and not there
        (10**9, 10**6, 10**6, b"\0" * 64),  # 16 PB
        (1, 2**60, 0, b"\0" * 8),
    ],
)
def test_a_header_that_overflows_or_is_huge_fails_at_once_without_allocating(
    tmp_path,
    n,
    d,
    l,  # noqa: E741
    body,
):
    path = tmp_path / "huge.ndf"
    path.write_bytes(header(n, d, l) + body)
    tracemalloc.start()
    try:
        err = open_error(path)
    finally:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    assert peak < 1 << 20  # "without allocating": the sizes were refused, not tried
    assert err.offset is not None


@pytest.mark.parametrize(
    "n, d, l",
    [(U64, 0, 0), (2**63, 0, 0), (2**62, 0, 0), (0, 0, 2**61 + 1), (0, U64, 0), (0, 2**60, 2**60)],
)
def test_a_zero_size_header_with_a_huge_field_is_a_format_error(tmp_path, n, d, l):  # noqa: E741
    path = tmp_path / "zero-size.ndf"
    path.write_bytes(header(n, d, l))
    with pytest.raises(fl.FormatError):
        fl.ndf.open(path)


# -- fuzz: opening a damaged file either works or is a FormatError -------------------------

FUZZ = settings(
    max_examples=200,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def fuzz_base(tmp_path) -> bytes:
    x, y = random_rows(6, 3, 2, seed=11)
    path = tmp_path / "base.ndf"
    fl.ndf.save(path, x, y)
    return path.read_bytes()


def open_or_format_error(path) -> None:
    t0 = time.perf_counter()
    try:
        with fl.ndf.open(path) as f:
            if len(f):
                f.read_row(len(f) - 1)
                f.rows([0, len(f) - 1])
    except fl.FormatError as e:
        assert e.path == os.fspath(path) and e.offset is not None
    assert time.perf_counter() - t0 < LIVENESS_S  # a hang would fail, not time


big = st.sampled_from([0, 1, 2, 3, 5, 6, 2**31, 2**32, 2**61 + 1, 2**63, U64]) | st.integers(0, U64)


@FUZZ
@given(data=st.data())
def test_fuzz_mutated_truncated_or_extended_ndf_files(tmp_path, data):
    base = fuzz_base(tmp_path)
    buf = bytearray(base)
    for _ in range(data.draw(st.integers(0, 4), "flips")):
        pos = data.draw(st.integers(0, len(buf) - 1) | st.integers(0, 27), "pos")
        buf[pos] = data.draw(st.integers(0, 255), "byte")
    kind = data.draw(st.sampled_from(["none", "truncate", "append"]), "kind")
    if kind == "truncate":
        buf = buf[: data.draw(st.integers(0, len(buf)), "size")]
    elif kind == "append":
        buf += data.draw(st.binary(min_size=1, max_size=64), "tail")
    path = tmp_path / "fuzz.ndf"
    path.write_bytes(bytes(buf))
    open_or_format_error(path)


@FUZZ
@given(n=big, d=big, l=big, body=st.sampled_from([0, 8, 40, 8 * 5 * 6]))
def test_fuzz_random_header_fields(tmp_path, n, d, l, body):  # noqa: E741
    data = header(n, d, l) + b"\0" * body
    path = tmp_path / "fields.ndf"
    path.write_bytes(data)
    open_or_format_error(path)


def test_save_refuses_rows_of_nothing_that_open_would_refuse(tmp_path):
    with pytest.raises(ValueError, match="at least one value"):
        fl.ndf.save(tmp_path / "a.ndf", np.zeros((5, 0)))
    assert not (tmp_path / "a.ndf").exists()
    fl.ndf.save(tmp_path / "empty.ndf", np.zeros((0, 0)))  # no rows: nothing to refuse
    with fl.ndf.open(tmp_path / "empty.ndf") as f:
        assert len(f) == 0


def test_zero_rows_with_one_dimensional_labels_save_and_open(tmp_path):
    fl.ndf.save(tmp_path / "a.ndf", np.zeros((0, 3)), np.zeros(0))
    with fl.ndf.open(tmp_path / "a.ndf") as f:
        assert len(f) == 0 and f.record.fields["x"].shape == (3,)
        assert f.record.fields["y"].shape == (1,)


def test_the_module_examples_pass():
    import doctest

    assert doctest.testmod(fl.ndf).failed == 0


@pytest.mark.parametrize(
    ("x", "y"),
    [
        ([[1.0, None]], None),  # was NaN
        ([["1.5", "2"]], None),  # was parsed as numbers
        (np.array([["a", "b"]]), None),
        ([[1.0, 2.0]], [["3"]]),
        ([[1.0, 2.0]], [[None]]),
        (np.ones((1, 2), np.complex64), None),
        (np.array([[1, b"2"]], dtype=object), None),
    ],
    ids=repr,
)
def test_save_refuses_values_that_are_not_numbers(tmp_path, x, y):
    path = tmp_path / "bad.ndf"
    with pytest.raises(fl.ShapeError, match="must hold numbers"):
        fl.ndf.save(path, x, y)
    assert not path.exists() and os.listdir(tmp_path) == []


def test_save_takes_python_numbers_and_bools_of_any_kind(tmp_path):
    path = tmp_path / "ok.ndf"
    fl.ndf.save(path, np.array([[1, 2.5, True]], dtype=object), [[False]])
    with fl.ndf.open(path) as f:
        assert f.read_row(0)[0].tolist() == [1.0, 2.5, 1.0] and f.read_row(0)[1].tolist() == [0]
