"""The loader on a CUDA device: every path's batches equal the host's, bit for bit.

Skipped where torch sees no GPU (CI has none); on a machine with one:

    python -m pytest tests/loader/test_cuda.py

``FEEDLINE_TEST_DEVICE=cpu`` runs the same tests with the CPU as the device (a check of
the tests themselves where there is no GPU).

Each test builds the same loader twice, on the host and with ``device="cuda"``, and
compares every field and every metadata array of every batch, and checks that the
device batches live on the device.
"""

from __future__ import annotations

import gc
import os
import weakref
from collections import Counter

import numpy as np
import pytest

import feedline as fl

torch = pytest.importorskip("torch")
DEV = os.environ.get("FEEDLINE_TEST_DEVICE", "cuda")
pytestmark = pytest.mark.skipif(
    DEV == "cuda" and not torch.cuda.is_available(), reason="torch sees no CUDA device"
)


class Row(fl.Record):
    x = fl.field((4,), "float32")
    y = fl.field((), "int64")


class Doc(fl.Record, dims={"T": None}):
    tokens = fl.field("T", "int32")
    y = fl.field((), "int64")


class Image(fl.Record):
    image = fl.field((3, 8, 8), "uint8")
    y = fl.field((), "int64")


def rows(n: int, lo: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(lo)
    return {"x": rng.standard_normal((n, 4), dtype=np.float32), "y": np.arange(lo, lo + n)}


def host(a):
    if isinstance(a, list):
        return a
    if isinstance(a, torch.Tensor):
        assert not a.is_nested
        return a.cpu().numpy()
    return np.asarray(a)


def flat(batch) -> dict[str, object]:
    """Every field and metadata array of a batch, on the host."""
    m = batch.meta
    out = {n: host(a) for n, a in batch.fields.items()}
    out["meta.size"] = int(m.size)
    for name in ("mask", "positions", "source_ordinals", "record_indices"):
        out[f"meta.{name}"] = host(getattr(m, name))
    for name, a in m.lengths.items():
        out[f"meta.lengths.{name}"] = host(a)
    return out


def assert_same(got: list, want: list) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        fg, fw = flat(g), flat(w)
        assert fg.keys() == fw.keys()
        for k in fw:
            if isinstance(fw[k], np.ndarray):
                assert fg[k].dtype == fw[k].dtype, k
                np.testing.assert_array_equal(fg[k], fw[k], err_msg=k)
            else:
                assert fg[k] == fw[k], k


def on_device(batches: list, names: tuple[str, ...]) -> bool:
    return all(b[n].device.type == DEV for b in batches for n in names)


@pytest.mark.parametrize("pad", [False, True])
def test_a_dataset_kept_on_the_device_gives_the_host_batches(pad):
    ds = fl.Dataset(Row, rows(103))
    want = list(fl.Loader(ds, 10, seed=3, pad=pad, output="torch"))
    # (the CPU standing in: check_values takes it to the device path, as a GPU goes)
    kept = {"check_values": True} if DEV == "cpu" else {}
    loader = fl.Loader(ds, 10, seed=3, pad=pad, output="torch", device=DEV, **kept)
    got = list(loader)
    assert loader._device is not None  # gathered on the device
    assert on_device(got, ("x", "y"))
    assert_same(got, want)


@pytest.mark.parametrize("close", [True, False])
def test_a_closed_or_dropped_loader_frees_its_device_columns(close):
    """The device copy of the columns goes with the loader, by reference counts (the
    collector off): closed, or dropped after its pass (an eval loader made each epoch)."""
    ds = fl.Dataset(Row, rows(200_000))  # 4.8 MB of columns
    kept = {"check_values": True} if DEV == "cpu" else {}

    def used() -> int:
        return torch.cuda.memory_allocated() if DEV == "cuda" else 0

    gc.collect()
    gc.disable()
    try:
        before = used()
        loader = fl.Loader(ds, 1000, seed=3, output="torch", device=DEV, **kept)
        assert sum(len(b["y"]) for b in loader) == 200_000
        columns = weakref.ref(loader._device)
        if close:
            loader.close()
        del loader
        assert columns() is None
        assert used() < before + (1 << 20)
    finally:
        gc.enable()


def test_mixed_datasets_on_the_device_follow_the_order():
    a, b = fl.Dataset(Row, rows(40)), fl.Dataset(Row, rows(13, lo=1000))
    seq = fl.Seq.mix([a.shuffle(1), b.shuffle(2)])
    want = list(fl.Loader(seq, 6, pad=True, output="torch"))
    loader = fl.Loader(seq, 6, pad=True, output="torch", device=DEV)
    got = list(loader)
    assert loader._device is not None and on_device(got, ("x", "y"))
    assert_same(got, want)


def test_an_in_place_change_to_a_tensor_dataset_reaches_the_device_copy():
    from torch.utils.data import TensorDataset

    td = TensorDataset(torch.zeros(10, 4), torch.arange(10))
    loader = fl.Loader(fl.Dataset(Row, td), 5, device=DEV)
    assert [b.y.tolist() for b in loader] == [[0, 1, 2, 3, 4], [5, 6, 7, 8, 9]]
    td.tensors[1].add_(100)
    assert [b.y.tolist() for b in loader] == [[100, 101, 102, 103, 104], [105, 106, 107, 108, 109]]


@pytest.fixture
def flr(tmp_path):
    path = str(tmp_path / "rows.flr")
    fl.recfile.write(path, Row, [{"x": r[0], "y": r[1]} for r in zip(*rows(300).values())])
    with fl.recfile.open(path) as f:
        yield f


@pytest.mark.parametrize(("workers", "pad"), [(0, False), (0, True), (2, False), (2, True)])
def test_a_file_gathered_on_the_host_lands_on_the_device(flr, workers, pad):
    # (through pinned memory: each batch gathered into its own pinned buffers)
    ds = fl.Dataset(flr.record, flr)
    kw = dict(seed=5, output="torch", pad=pad, check_values=pad)
    here = fl.Loader(ds, 32, workers=0, **kw)
    loader = fl.Loader(ds, 32, device=DEV, workers=workers, **kw)
    for _ in range(2):  # a second pass too: no buffer handed out twice
        got, want = list(loader), list(here)
        assert on_device(got, ("x", "y"))
        assert_same(got, want)


def test_files_mixed_on_the_host_land_on_the_device(flr, tmp_path):
    other = str(tmp_path / "other.flr")
    fl.recfile.write(other, Row, [{"x": r[0], "y": r[1]} for r in zip(*rows(77, lo=500).values())])
    with fl.recfile.open(other) as g:
        seq = fl.Seq.mix([fl.Dataset(Row, flr).shuffle(1), fl.Dataset(Row, g).shuffle(2)])
        want = list(fl.Loader(seq, 24, pad=True, output="torch"))
        got = list(fl.Loader(seq, 24, pad=True, output="torch", device=DEV))
        assert on_device(got, ("x", "y"))
        assert_same(got, want)


def test_resume_on_the_device_continues_the_stream(flr):
    ds = fl.Dataset(flr.record, flr)
    want = list(fl.Loader(ds, 16, seed=9, output="torch"))
    first = fl.Loader(ds, 16, seed=9, output="torch", device=DEV)
    it = iter(first)
    got = [next(it) for _ in range(7)]
    state = first.state_dict()
    second = fl.Loader(ds, 16, seed=9, output="torch", device=DEV)
    second.load_state_dict(state)
    got += list(second)
    assert_same(got, want)
    seen = Counter(r for b in got for r in b.meta.record_indices.tolist())
    assert seen == Counter(range(300))


def docs(n: int) -> fl.Dataset:
    return fl.Dataset(
        Doc, [{"tokens": np.arange(i % 7, dtype=np.int32) + i, "y": i} for i in range(n)]
    )


@pytest.mark.parametrize("workers", [0, 2])
def test_padded_ragged_fields_and_their_lengths_land_on_the_device(workers):
    want = list(fl.Loader(docs(61), 8, seed=4, output="torch", workers=0))
    got = list(fl.Loader(docs(61), 8, seed=4, output="torch", device=DEV, workers=workers))
    assert on_device(got, ("tokens", "y"))
    assert_same(got, want)


@pytest.mark.parametrize("workers", [0, 2])
def test_nested_tensors_land_on_the_device(workers):
    kw = dict(output="torch", nested=True, pad=True)
    want = list(fl.Loader(docs(61), 8, seed=4, workers=0, **kw))
    got = list(fl.Loader(docs(61), 8, seed=4, device=DEV, workers=workers, **kw))
    for g, w in zip(got, want, strict=True):
        assert g.tokens.is_nested and g.tokens.device.type == DEV
        assert [t.tolist() for t in g.tokens.unbind()] == [t.tolist() for t in w.tokens.unbind()]
        assert g.y.device.type == DEV and g.y.tolist() == w.y.tolist()


def images(n: int) -> fl.Dataset:
    rng = np.random.default_rng(7)
    return fl.Dataset(
        Image,
        {"image": rng.integers(0, 256, (n, 3, 8, 8), dtype=np.uint8), "y": np.arange(n)},
    )


@pytest.mark.parametrize("workers", [0, 2])
def test_normalize_on_the_device_matches_numpy(workers):
    norm = fl.images.Normalize()
    want = list(fl.Loader(images(50), 8, seed=1, batch_transform=norm))  # numpy, on the host
    got = list(
        fl.Loader(
            images(50), 8, seed=1, output="torch", device=DEV, workers=workers,
            batch_transform=norm,
        )
    )  # fmt: skip
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g.image.device.type == DEV and g.image.dtype == torch.float32
        np.testing.assert_allclose(g.image.cpu().numpy(), w.image, rtol=1e-6, atol=1e-6)
        assert g.y.tolist() == w.y.tolist()


def test_the_torch_dataloader_with_pinned_memory_moves_every_record_once(flr):
    from torch.utils.data import DataLoader

    import feedline.torch as flt

    ds = fl.Dataset(flr.record, flr)
    it = flt.IterableDataset(ds, 32, shard=None, seed=2)
    seen = Counter()
    for b in DataLoader(it, batch_size=None, num_workers=2, pin_memory=DEV == "cuda"):
        assert isinstance(b, fl.Batch)
        if DEV == "cuda":  # the DataLoader's pinning thread called Batch.pin_memory
            assert b.x.is_pinned() and b.meta.mask.is_pinned()
        moved = b.to(DEV, non_blocking=True)
        assert moved.x.device.type == DEV and moved.meta.mask.device.type == DEV
        seen.update(moved.y[moved.meta.mask].tolist())
    assert seen == Counter(range(300))


_JAX_CHECK = """
import sys
import numpy as np
import jax
import feedline as fl
import feedline.jax as flj

platform, path = sys.argv[1], sys.argv[2]
if platform == "gpu":
    devices = [d for d in jax.devices() if d.platform == "gpu"]
else:
    devices = jax.devices("cpu")
if not devices:
    sys.exit(3)  # JAX sees no GPU
with fl.recfile.open(path) as f:
    ds = fl.Dataset(f.record, f)
    want = list(fl.Loader(ds, 32, seed=6))
    got = list(flj.batches(ds, 32, seed=6, device=devices[0]))
    assert len(got) == len(want) == 10, (len(got), len(want))
    for g, w in zip(got, want, strict=True):
        # even steps (fl.jax's default): the last batch is padded to the batch size
        size = int(w.meta.size)
        assert g.x.devices() == {devices[0]} and int(g.meta.size) == size
        np.testing.assert_array_equal(np.asarray(g.x)[:size], w.x)
        np.testing.assert_array_equal(np.asarray(g.y)[:size], w.y)
print("ok")
"""


def test_jax_batches_land_on_the_gpu(flr):
    # In a process of its own: JAX on a GPU warns at every later fork (torch's
    # DataLoader workers in the tests after this one), and warnings are errors here.
    import subprocess
    import sys

    pytest.importorskip("jax")
    platform = "gpu" if DEV == "cuda" else "cpu"
    run = subprocess.run(
        [sys.executable, "-c", _JAX_CHECK, platform, flr.path],
        capture_output=True,
        text=True,
        timeout=300,
    )
    if run.returncode == 3:
        pytest.skip("JAX sees no GPU")
    assert run.returncode == 0 and run.stdout.strip() == "ok", run.stderr
