"""fl.jax: batches as jax.Arrays and global arrays over a device mesh."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import feedline as fl

jax = pytest.importorskip("jax")


class Row(fl.Record, dims={"D": 2}):
    x = fl.field("D", "float32")
    y = fl.field((), "int64")


def dataset(n: int = 37) -> fl.Dataset:  # for the tests that need no JAX runtime
    return fl.Dataset(Row, {"x": np.arange(2.0 * n).reshape(n, 2), "y": np.arange(n)})


def run_jax(code: str, devices: int = 1) -> str:
    """Run ``code`` in a fresh process: JAX's runtime starts threads, and a process that
    has them must not fork (as torch's DataLoader workers do, in other tests)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    if devices > 1:
        env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout.strip()


def test_batches_are_jax_arrays_equal_to_the_loaders():
    assert (
        run_jax("""
        import numpy as np, jax, feedline as fl
        class Row(fl.Record, dims={"D": 2}):
            x = fl.field("D", "float32")
            y = fl.field((), "int64")
        n = 37
        ds = fl.Dataset(Row, {"x": np.arange(2.0 * n).reshape(n, 2), "y": np.arange(n)})
        want = [(b.x, b.y, b.meta.mask) for b in fl.Loader(ds, 8, seed=3, shard=None)]
        got = list(fl.jax.batches(ds, 8, seed=3, shard=None, even=False))
        assert len(got) == len(want)
        for g, (x, y, m) in zip(got, want):
            assert isinstance(g["x"], jax.Array)
            np.testing.assert_array_equal(np.asarray(g["x"]), x)
            np.testing.assert_array_equal(np.asarray(g["y"]), y)
            np.testing.assert_array_equal(np.asarray(g.meta.mask), m)
        print("ok")
    """)
        == "ok"
    )


def test_a_global_batch_is_sharded_over_the_mesh():
    # Two CPU devices need a fresh process (XLA reads the flag when it starts).
    assert (
        run_jax(
            """
        import numpy as np, jax, feedline as fl
        from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
        class Row(fl.Record, dims={"D": 2}):
            x = fl.field("D", "float32")
            y = fl.field((), "int64")
        ds = fl.Dataset(Row, {"x": np.arange(40.0).reshape(20, 2), "y": np.arange(20)})
        sharding = NamedSharding(Mesh(np.array(jax.devices()), ("data",)), P("data"))
        want = [b.y for b in fl.Loader(ds, 8, seed=1, pad=True)]
        got = list(fl.jax.batches(ds, 8, seed=1, sharding=sharding, pad=True))
        assert len(jax.devices()) == 2
        assert all(len(g["y"].sharding.device_set) == 2 for g in got)
        assert [np.asarray(g["y"]).tolist() for g in got] == [w.tolist() for w in want]
        print("ok", sum(int(np.asarray(g.meta.mask).sum()) for g in got))
    """,
            devices=2,
        )
        == "ok 20"
    )


def test_a_two_dimensional_spec_shards_every_field_by_its_own_axes():
    assert (
        run_jax(
            """
        import numpy as np, jax, feedline as fl
        from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
        ds = fl.Dataset.from_arrays(x=np.arange(64.0, dtype=np.float32).reshape(16, 4),
                                    y=np.arange(16))
        sharding = NamedSharding(Mesh(np.array(jax.devices()), ("data",)), P("data", None))
        got = list(fl.jax.batches(ds, 8, sharding=sharding, shard=None))
        want = list(fl.Loader(ds, 8, shard=None))
        for g, w in zip(got, want, strict=True):
            assert g["x"].sharding.spec == P("data", None) and g["y"].sharding.spec == P("data")
            np.testing.assert_array_equal(np.asarray(g["x"]), w.x)
            np.testing.assert_array_equal(np.asarray(g.meta.mask), w.meta.mask)
        print("ok")
    """,
            devices=2,
        )
        == "ok"
    )


def test_int64_values_that_jax_would_wrap_to_32_bits_are_refused():
    assert (
        run_jax("""
        import numpy as np, jax, feedline as fl
        big = fl.Dataset.from_arrays(x=np.array([[2**40], [3]], dtype=np.int64))
        try:
            next(fl.jax.batches(big, 2, shard=None))
        except fl.DomainError as e:
            assert "field `x`" in str(e) and "jax_enable_x64" in str(e), e
        else:
            raise AssertionError("2**40 was wrapped to 32 bits")
        small = fl.Dataset.from_arrays(x=np.array([[-5], [3]], dtype=np.int64))
        assert np.asarray(next(fl.jax.batches(small, 2, shard=None))["x"]).tolist() == [[-5], [3]]
        jax.config.update("jax_enable_x64", True)
        got = next(fl.jax.batches(big, 2, shard=None))["x"]
        assert got.dtype == np.int64 and np.asarray(got).tolist() == [[2**40], [3]]
        print("ok")
    """)
        == "ok"
    )


def test_shard_auto_reads_jax_process_index(monkeypatch):
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    from feedline.loader import _ranks

    monkeypatch.setattr(_ranks, "jax_distributed", lambda: True)
    monkeypatch.setattr(jax, "process_index", lambda: 1)
    monkeypatch.setattr(jax, "process_count", lambda: 2)
    mine = np.concatenate(
        [b.y[b.meta.mask] for b in fl.Loader(dataset(), 5, seed=2, shard="auto", even=True)]
    )
    monkeypatch.setattr(jax, "process_index", lambda: 0)
    other = np.concatenate(
        [b.y[b.meta.mask] for b in fl.Loader(dataset(), 5, seed=2, shard="auto", even=True)]
    )
    assert sorted(mine.tolist() + other.tolist()) == list(range(37))


def test_variable_length_batches_are_padded_jax_arrays_with_strings_kept_static():
    assert (
        run_jax("""
        import numpy as np, jax, feedline as fl
        class Doc(fl.Record, dims={"T": None}):
            tokens = fl.field("T", "int32")
            text = fl.field((), "str")
        items = [{"tokens": np.arange(i % 6), "text": f"doc {i}"} for i in range(20)]
        ds = fl.Dataset(Doc, items)
        want = list(fl.Loader(ds, 8, seed=1, pad_to=(4, 8)))
        got = list(fl.jax.batches(ds, 8, seed=1, shard=None, even=False, pad_to=(4, 8)))
        for g, w in zip(got, want):
            assert isinstance(g.tokens, jax.Array) and g.tokens.shape[1] in (4, 8)
            np.testing.assert_array_equal(np.asarray(g.tokens), w.tokens)
            np.testing.assert_array_equal(np.asarray(g.meta.lengths["T"]), w.meta.lengths["T"])
            assert g.text == w.text
            leaves, tree = jax.tree_util.tree_flatten(g)
            assert all(isinstance(x, (jax.Array, int)) for x in leaves)
            again = jax.tree_util.tree_unflatten(tree, leaves)
            assert again.text == g.text and list(again.fields) == ["tokens", "text"]
            total = jax.jit(lambda b: (b.tokens * b.meta.mask[:, None]).sum())(g)
            assert int(total) == int((w.tokens * w.meta.mask[:, None]).sum())
        print("ok")
    """)
        == "ok"
    )
