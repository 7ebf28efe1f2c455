"""fl.Batch: a record's fields are its attributes whatever their names; the batch's own
metadata is ``batch.meta`` (contract section 8), in numpy, torch and JAX outputs alike."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import feedline as fl
from feedline.loader._batch import BatchMeta


class Padded(fl.Record, dims={"T": 3}):
    """ShapeScript's padding pattern: a field ``mask``; and fields named like the
    metadata."""

    tokens = fl.field("T", "int64")
    mask = fl.field("T", "bool", domain=fl.Mask)
    size = fl.field((), "int64")
    positions = fl.field("T", "int64")
    source_ordinals = fl.field((), "float32")
    record_indices = fl.field((), "int64")


class Plain(fl.Record, dims={"D": 2}):
    x = fl.field("D", "float32")
    y = fl.field((), "int64")


class WithMeta(fl.Record):
    meta = fl.field((), "int64")
    y = fl.field((), "int64")


def padded(n: int = 5) -> fl.Dataset:
    i = np.arange(n)
    return fl.Dataset(
        Padded,
        {
            "tokens": i[:, None] * 3 + np.arange(3),
            "mask": (i[:, None] + np.arange(3)) % 2 == 0,
            "size": 100 + i,
            "positions": i[:, None] * np.ones(3, np.int64),
            "source_ordinals": (i / 2).astype(np.float32),
            "record_indices": 1000 + i,
        },
    )


def plain(n: int = 5) -> fl.Dataset:
    return fl.Dataset(Plain, {"x": np.arange(2.0 * n).reshape(n, 2), "y": np.arange(n)})


def test_fields_named_like_the_metadata_are_the_batchs_attributes():
    ds = padded()
    batches = list(fl.Loader(ds, 2, pad=True))
    last = batches[-1]
    assert last.mask.shape == (2, 3) and last.mask.dtype == np.bool_
    np.testing.assert_array_equal(last.mask, [[True, False, True], [False, False, False]])
    np.testing.assert_array_equal(last.size, [104, 0])
    np.testing.assert_array_equal(last.positions, [[4, 4, 4], [0, 0, 0]])
    np.testing.assert_array_equal(last.source_ordinals, [2.0, 0.0])
    np.testing.assert_array_equal(last.record_indices, [1004, 0])
    for name in ("mask", "size", "positions", "source_ordinals", "record_indices"):
        assert getattr(last, name) is last[name]
    # ... and the metadata is batch.meta
    assert last.meta.size == 1 and len(last) == 2
    assert last.meta.mask.tolist() == [True, False]
    assert last.meta.positions.tolist() == [4, -1]
    assert last.meta.source_ordinals.tolist() == [0, -1]
    assert last.meta.record_indices.tolist() == [4, -1]


def test_the_metadata_of_a_padded_batch():
    (*_, last) = fl.Loader(plain(5), 3, pad=True)
    m = last.meta
    assert isinstance(m, BatchMeta)
    assert m.size == 2
    assert m.mask.dtype == np.bool_ and m.mask.tolist() == [True, True, False]
    for name in ("positions", "source_ordinals", "record_indices"):
        assert getattr(m, name).dtype == np.int64
    assert m.positions.tolist() == [3, 4, -1]
    assert m.source_ordinals.tolist() == [0, 0, -1]
    assert m.record_indices.tolist() == [3, 4, -1]
    assert dict(m.lengths) == {}  # no variable-length dims in this record


def test_the_metadata_is_made_once_and_is_read_only():
    b = next(iter(fl.Loader(plain(), 2)))
    assert b.meta is b.meta
    assert b.meta.mask is b.meta.mask
    with pytest.raises(AttributeError):
        b.meta.size = 3
    with pytest.raises(AttributeError):
        b.meta.mask = np.zeros(2, bool)
    with pytest.raises(AttributeError):
        b.meta.extra = 1
    with pytest.raises(AttributeError):
        b.meta = None


def test_a_field_named_meta_is_read_with_getitem():
    ds = fl.Dataset(WithMeta, {"meta": np.arange(4) * 7, "y": np.arange(4)})
    b = next(iter(fl.Loader(ds, 4)))
    assert isinstance(b.meta, BatchMeta) and b.meta.size == 4
    assert b["meta"].tolist() == [0, 7, 14, 21]
    assert list(b.keys()) == ["meta", "y"]


def test_the_old_metadata_names_warn_and_read_batch_meta():
    b = list(fl.Loader(plain(5), 3, pad=True))[-1]
    for name in ("size", "mask", "positions", "source_ordinals", "record_indices"):
        with pytest.warns(DeprecationWarning, match=rf"batch\.meta\.{name}"):
            old = getattr(b, name)
        new = getattr(b.meta, name)
        if name == "size":
            assert old == new == 2
        else:
            np.testing.assert_array_equal(old, new)


def test_setting_an_attribute_named_like_the_metadata_sets_a_field():
    b = next(iter(fl.Loader(plain(), 2)))
    b.mask = np.array([[1, 0], [0, 1]])
    assert b["mask"].tolist() == [[1, 0], [0, 1]] and b.mask is b["mask"]
    assert b.meta.mask.tolist() == [True, True]


def test_a_missing_field_names_the_fields_and_the_metadata():
    b = next(iter(fl.Loader(plain(), 2)))
    with pytest.raises(AttributeError, match=r"fields: x, y; metadata: batch\.meta"):
        b.z  # noqa: B018


def test_a_batch_pickles_with_its_metadata():
    b = list(fl.Loader(padded(5), 2, pad=True))[-1]
    b.meta.mask  # noqa: B018 - made before pickling, and not
    c = pickle.loads(pickle.dumps(b))
    assert c.mask.tolist() == b.mask.tolist() and c.meta.size == 1
    assert c.meta.mask.tolist() == [True, False]
    assert c.meta.record_indices.tolist() == [4, -1]
    fresh = list(fl.Loader(plain(5), 2, pad=True))[-1]
    d = pickle.loads(pickle.dumps(fresh))
    assert d.meta.positions.tolist() == [4, -1] and d.x.tolist() == fresh.x.tolist()


def test_the_constructor_takes_the_loaders_arguments_and_metadata_is_lazy():
    ords, recs = np.zeros(2, np.int64), np.array([5, 9])
    b = fl.Batch({"x": np.ones((3, 2))}, 2, 3, 10, ords, recs)
    assert len(b) == 3 and b.meta.size == 2
    assert b.meta.positions.tolist() == [10, 11, -1]
    assert b.meta.record_indices.tolist() == [5, 9, -1]
    lengths = {"T": np.array([3, 1, 0])}
    b = fl.Batch.with_meta({"x": np.ones((3, 2))}, 2, 3, 10, ords, recs, lengths=lengths)
    assert list(b.meta.lengths) == ["T"] and b.meta.lengths["T"].tolist() == [3, 1, 0]


# -- torch ------------------------------------------------------------------------------


def test_under_torch_output_the_metadata_is_tensors_on_the_fields_device():
    torch = pytest.importorskip("torch")
    (*_, last) = fl.Loader(plain(5), 3, pad=True, output="torch")
    m = last.meta
    assert isinstance(m.mask, torch.Tensor) and m.mask.dtype == torch.bool
    assert m.mask.device == last.x.device
    loss = torch.ones(3)
    assert (loss * m.mask).tolist() == [1.0, 1.0, 0.0]  # failed: a numpy mask
    for name in ("positions", "source_ordinals", "record_indices"):
        t = getattr(m, name)
        assert isinstance(t, torch.Tensor) and t.dtype == torch.int64
        assert t.device == last.x.device
    assert m.positions.tolist() == [3, 4, -1]
    assert m.size == 2 and isinstance(m.size, int)


def test_under_torch_output_a_field_named_mask_is_the_fields_tensor():
    torch = pytest.importorskip("torch")
    b = next(iter(fl.Loader(padded(4), 4, output="torch")))
    assert isinstance(b.mask, torch.Tensor) and tuple(b.mask.shape) == (4, 3)
    assert tuple(b.meta.mask.shape) == (4,) and bool(b.meta.mask.all())


def test_torch_batches_through_a_dataloader_worker_keep_their_metadata():
    torch = pytest.importorskip("torch")
    import feedline.torch  # noqa: F401

    ds = fl.torch.IterableDataset(plain(5), 2, shard=None, even=False)
    got = list(torch.utils.data.DataLoader(ds, batch_size=None, num_workers=1))
    assert [b.meta.size for b in got] == [2, 2, 1]
    assert all(isinstance(b.meta.mask, torch.Tensor) for b in got)
    assert torch.cat([b.meta.record_indices for b in got]).tolist() == [0, 1, 2, 3, 4]


# -- JAX --------------------------------------------------------------------------------


def _run_jax(code: str) -> str:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout.strip()


def test_under_jax_fields_and_metadata_never_share_keys():
    pytest.importorskip("jax")
    # JAX's runtime starts threads: it runs in its own process (other tests fork).
    assert (
        _run_jax("""
        import numpy as np, jax, feedline as fl
        class Padded(fl.Record, dims={"T": 3}):
            tokens = fl.field("T", "int32")
            mask = fl.field("T", "bool")
        i = np.arange(5)
        ds = fl.Dataset(Padded, {"tokens": (i[:, None] + np.arange(3)).astype(np.int32),
                                 "mask": (i[:, None] + np.arange(3)) % 2 == 0})
        got = list(fl.jax.batches(ds, 4, shard=None, pad=True))
        last = got[-1]
        assert isinstance(last["mask"], jax.Array) and last["mask"].shape == (4, 3)
        assert last.mask is last["mask"] and list(last.keys()) == ["tokens", "mask"]
        assert isinstance(last.meta.mask, jax.Array) and last.meta.mask.shape == (4,)
        assert np.asarray(last.meta.mask).tolist() == [True, False, False, False]
        assert np.asarray(last.meta.record_indices).tolist() == [4, -1, -1, -1]
        assert last.meta.size == 1
        # a batch is a pytree: it goes through jit, fields and metadata apart
        f = jax.jit(lambda b: (b.tokens * b.mask * b.meta.mask[:, None]).sum() + b.meta.size)
        assert int(f(last)) == 4 + 6 + 1, int(f(last))  # row 0: tokens 4, 5, 6 masked 1, 0, 1
        print("ok")
    """)
        == "ok"
    )


# -- next_into --------------------------------------------------------------------------


def test_next_into_fills_a_field_named_mask_as_a_field():
    ds = padded(5)
    out = {n: np.full((2, *f.shape), 9, dtype=f.dtype) for n, f in Padded.fields.items()}
    loader = fl.Loader(ds, 2)
    assert loader.next_into(out) == 2  # was refused: out["mask"] taken for the batch's mask
    np.testing.assert_array_equal(out["mask"], ds.source["mask"][:2])
    np.testing.assert_array_equal(out["size"], [100, 101])
    np.testing.assert_array_equal(out["positions"], ds.source["positions"][:2])


def test_next_into_fills_the_metadata_it_is_given():
    ds = padded(5)
    out = {n: np.zeros((4, *f.shape), dtype=f.dtype) for n, f in Padded.fields.items()}
    meta = {
        "mask": np.ones(4, bool),
        "positions": np.zeros(4, np.int64),
        "source_ordinals": np.zeros(4, np.int64),
        "record_indices": np.zeros(4, np.int64),
    }
    loader = fl.Loader(ds, 4, pad=True)
    want = list(fl.Loader(ds, 4, pad=True))
    for w in want:
        assert loader.next_into(out, meta=meta) == w.meta.size
        for name, a in meta.items():
            assert a.tolist() == getattr(w.meta, name).tolist(), name
        np.testing.assert_array_equal(out["mask"], w.mask)
    assert loader.next_into(out, meta=meta) == 0


def test_next_into_refuses_metadata_it_does_not_know_or_cannot_write():
    loader = fl.Loader(plain(), 2)
    out = {"x": np.zeros((2, 2), np.float32), "y": np.zeros(2, np.int64)}
    with pytest.raises(ValueError, match="not 'lengths'"):
        loader.next_into(out, meta={"lengths": np.zeros(2, np.int64)})
    with pytest.raises(ValueError, match="meta\\['mask'\\] must be a writable bool"):
        loader.next_into(out, meta={"mask": np.zeros(2, np.int64)})
    frozen = np.zeros(2, bool)
    frozen.flags.writeable = False
    with pytest.raises(ValueError, match="writable"):
        loader.next_into(out, meta={"mask": frozen})
    assert loader.next_into(out) == 2  # nothing was claimed by the refused calls
    assert out["y"].tolist() == [0, 1]


def test_next_into_still_takes_the_mask_in_out_for_a_record_without_one():
    loader = fl.Loader(plain(3), 2, pad=True)
    out = {"x": np.zeros((2, 2), np.float32), "y": np.zeros(2, np.int64), "mask": np.zeros(2, bool)}
    assert loader.next_into(out, meta={"mask": out["mask"]}) == 2
    with pytest.warns(DeprecationWarning, match=r"meta=\{'mask'"):
        assert loader.next_into(out) == 1
    assert out["mask"].tolist() == [True, False]


def test_the_modules_docstring_examples_pass():
    import doctest

    import feedline.loader._batch

    assert doctest.testmod(feedline.loader._batch).failed == 0
