"""Batches of variable-length examples made in worker processes (issue 16): the workers
gather, the loader collates out of their shared memory as in process, so the stream is
the same for any number of workers; every fault of the pool loses and repeats nothing;
no shared memory outlives the loader. Exactly-once is counted in ``(source, record)``
pairs."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections import Counter

import numpy as np
import pytest

import feedline as fl

from .test_ledger import pairs, pass_through_interrupts


class Doc(fl.Record, dims={"T": None, "H": None, "W": fl.Varying(max=9), "V": 1000}):
    tokens = fl.field("T", "int32", domain=fl.Index("V"))
    tags = fl.field("T", "int8", pad=-1)
    patch = fl.field(("H", 2, "W"), "float32", pad=0.5)
    name = fl.field((), "str")
    blob = fl.field((), "bytes")
    noise = fl.field((), "float64")
    label = fl.field((), "int64")


def make_doc(example, rng):
    """A decode: examples of every kind of varying field, drawn from the example's own
    generator (importable: it runs in the workers)."""
    i = int(example["i"])
    t = int(rng.integers(0, 40))
    return {
        "tokens": (np.arange(t) + i) % 1000,
        "tags": np.full(t, i % 100, np.int8),
        "patch": rng.random((i % 4, 2, 1 + i % 9)).astype(np.float32),
        "name": f"doc-{i}-é",
        "blob": rng.integers(0, 256, i % 50, dtype=np.uint8).tobytes(),
        "noise": rng.random(),
        "label": i,
    }


def make_doc_slowly(example, rng):
    time.sleep(0.01)
    return make_doc(example, rng)


def hang_on_13(example, rng):
    if int(example["i"]) == 13:
        time.sleep(3600)
    return make_doc(example, rng)


def docs(n: int = 90, fn=make_doc, seed: int = 7) -> fl.Dataset:
    return fl.Dataset.from_arrays(i=np.arange(n)).map(fn, seed=seed, record=Doc)


def summarize(batch) -> dict:
    """A batch transform (runs in the workers): it sees the batch collated."""
    return {
        "tokens": np.asarray(batch.tokens).tolist(),
        "T": np.asarray(batch.meta.lengths["T"]).tolist(),
        "W": np.asarray(batch.meta.lengths["W"]).tolist(),
        "name": list(batch.name),
        "blob": list(batch.blob),
        "mask": np.asarray(batch.meta.mask).tolist(),
    }


def _array(x) -> np.ndarray:
    return x.numpy() if hasattr(x, "numpy") and not isinstance(x, np.ndarray) else np.asarray(x)


def plain(batch) -> dict:
    """A batch field by field, its metadata and lengths included, as numpy and lists."""
    if isinstance(batch, dict):  # a batch transform's result
        return batch
    out: dict = {}
    for name in Doc.fields:
        value = batch[name]
        out[name] = list(value) if isinstance(value, list) else _array(value)
    m = batch.meta
    out["meta"] = {
        "size": m.size,
        "mask": _array(m.mask),
        "positions": _array(m.positions),
        "source_ordinals": _array(m.source_ordinals),
        "record_indices": _array(m.record_indices),
        "lengths": {k: _array(v) for k, v in m.lengths.items()},
    }
    return out


def same(a, b) -> bool:
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, np.ndarray):
        return (
            isinstance(b, np.ndarray)
            and a.dtype == b.dtype
            and a.shape == b.shape
            and np.array_equal(a, b)
        )
    return a == b


def assert_same_stream(want: list, got: list) -> None:
    assert len(want) == len(got)
    for k, (w, g) in enumerate(zip(want, got)):
        assert same(w, g), f"batch {k} differs"


@pytest.fixture
def created(monkeypatch):
    """The names of every shared-memory segment the pools create (slots grown included)."""
    from multiprocessing import shared_memory

    from feedline.loader import _workers

    names: list[str] = []
    real = shared_memory.SharedMemory

    def recording(*args, **kwargs):
        shm = real(*args, **kwargs)
        if kwargs.get("create"):
            names.append(shm.name.lstrip("/"))
        return shm

    monkeypatch.setattr(_workers, "SharedMemory", recording)
    return names


def assert_unlinked(names: list[str]) -> None:
    assert names
    left = [n for n in names if os.path.exists(f"/dev/shm/{n}")]
    assert not left


OPTIONS = [
    {},
    {"pad": True},
    {"drop_last": True, "pad_to_multiple": 8},
    {"pad_to": {"T": (16, 32, 64), "H": (4,)}},
    {"shard": (1, 3), "even": True},
    {"batch_transform": summarize, "pad": True},
    {"output": "torch", "pad": True},
]


@pytest.mark.parametrize("options", OPTIONS, ids=lambda o: ",".join(o) or "default")
def test_the_stream_is_the_same_whatever_the_number_of_workers(options, created):
    if options.get("output") == "torch":
        pytest.importorskip("torch")
    ds = docs()
    want = [plain(b) for b in fl.Loader(ds, 8, seed=3, workers=0, **options)]
    for workers in (1, 2) if not options else (2,):
        loader = fl.Loader(ds, 8, seed=3, workers=workers, prefetch=2, **options)
        got = [plain(b) for b in loader]
        assert loader._pool is not None  # made in worker processes
        assert loader._plan.transform_in_workers == ("batch_transform" in options)
        loader.close()
        assert_same_stream(want, got)
    assert_unlinked(created)


def test_a_mix_of_sources_gives_every_pair_once_the_same_with_workers():
    seq = fl.Seq.mix([docs(40, seed=1).shuffle(1), docs(30, seed=2).shuffle(2)])
    want = [plain(b) for b in fl.Loader(seq, 6, workers=0, pad=True)]
    with fl.Loader(seq, 6, workers=2, pad=True) as loader:
        batches = list(loader)
    assert_same_stream(want, [plain(b) for b in batches])
    seen = Counter(p for b in batches for p in pairs(b))
    assert seen == Counter([(0, i) for i in range(40)] + [(1, i) for i in range(30)])


def test_many_sources_of_varying_rows_put_each_row_in_its_place():
    """Nine decoded sources shuffled as one: a batch draws from more sources than the
    gather scans for one by one (it sorts them), and each row, fixed or varying, is
    its own record's wherever it comes from."""
    seq = fl.Seq.concat([docs(7 + 3 * k, seed=k) for k in range(9)]).shuffle(3)
    seen = Counter()
    with fl.Loader(seq, 24, workers=0, pad=True) as loader:
        for b in loader:
            m = b.meta
            rows = range(m.size)
            recs, ords = _array(m.record_indices), _array(m.source_ordinals)
            assert len(set(ords[: m.size].tolist())) > 6 or m.size < 24
            assert _array(b.label)[: m.size].tolist() == recs[: m.size].tolist()
            assert [b.name[r] for r in rows] == [f"doc-{int(recs[r])}-é" for r in rows]
            assert [len(b.blob[r]) for r in rows] == [int(recs[r]) % 50 for r in rows]
            tags, lengths = _array(b.tags), _array(m.lengths["T"])
            for r in rows:
                assert (tags[r, : lengths[r]] == recs[r] % 100).all()
                assert (tags[r, lengths[r] :] == -1).all()
            seen.update(zip(ords[: m.size].tolist(), recs[: m.size].tolist()))
    assert seen == Counter((k, i) for k in range(9) for i in range(7 + 3 * k))


def test_a_batch_that_cannot_be_collated_is_passed_over_as_in_process():
    def outcomes(loader) -> list:
        got = []
        while True:
            try:
                got.append(plain(next(loader)))
            except StopIteration:
                return got
            except fl.ShapeError as e:
                got.append(str(e))

    ds = docs(60)
    want = outcomes(fl.Loader(ds, 4, seed=5, workers=0, pad_to={"T": (30,)}))
    assert any(isinstance(o, str) for o in want) and any(isinstance(o, dict) for o in want)
    with fl.Loader(ds, 4, seed=5, workers=2, pad_to={"T": (30,)}) as loader:
        got = outcomes(loader)
        assert loader.state_dict()["ended"]
        assert len(loader._pool.free) == len(loader._pool.slots)  # no slot kept
    assert [o if isinstance(o, str) else "ok" for o in got] == [
        o if isinstance(o, str) else "ok" for o in want
    ]
    assert_same_stream(
        [o for o in want if not isinstance(o, str)], [o for o in got if not isinstance(o, str)]
    )


# -- values larger than a slot ----------------------------------------------------------


class Pic(fl.Record):
    jpeg = fl.field((), "bytes")
    label = fl.field((), "int64")


def make_pic(example, rng):
    """~50 KB of bytes an example: a batch of 32 holds more than a slot starts with."""
    i = int(example["i"])
    n = 40_000 + int(rng.integers(0, 20_000))
    return {"jpeg": rng.integers(0, 256, n, dtype=np.uint8).tobytes(), "label": i}


def pics(n: int) -> fl.Dataset:
    return fl.Dataset.from_arrays(i=np.arange(n)).map(make_pic, seed=2, record=Pic)


def pic_stream(loader) -> list:
    return [(b.jpeg, b.label.tolist(), b.meta.record_indices.tolist()) for b in loader]


def test_values_larger_than_a_slot_travel_by_the_pipe_and_the_slots_grow(created):
    from feedline.loader._slots import VALUES_START

    ds = pics(320)
    want = pic_stream(fl.Loader(ds, 32, seed=1, workers=0))
    loader = fl.Loader(ds, 32, seed=1, workers=2, prefetch=2)
    assert pic_stream(loader) == want
    pool = loader._pool
    assert max(pool.capacities) >= 32 * 60_000 > VALUES_START  # grown to hold a batch
    assert pic_stream(loader)[0] != want[0]  # the next pass, in the grown slots
    loader.close()
    assert len(created) > len(pool.slots)  # slots were replaced
    assert_unlinked(created)


def test_slots_never_grow_past_their_limit_or_the_memory_there_is(monkeypatch, created):
    from feedline.loader import _slots, _workers

    ds = pics(160)
    want = pic_stream(fl.Loader(ds, 32, seed=1, workers=0))
    monkeypatch.setattr(_slots, "VALUES_MAX", 1 << 20)
    with fl.Loader(ds, 32, seed=1, workers=2, prefetch=2) as loader:
        assert pic_stream(loader) == want
        assert loader._pool.capacities == [_slots.VALUES_START] * 4
    monkeypatch.setattr(_slots, "VALUES_MAX", 64 << 20)

    def full(shm):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(_workers, "reserve", full)
    with fl.Loader(ds, 32, seed=1, workers=2, prefetch=2) as loader:
        assert pic_stream(loader) == want
        assert loader._pool.capacities == [_slots.VALUES_START] * 4
    assert_unlinked(created)


# -- faults -------------------------------------------------------------------------------


def test_resume_mid_pass_with_workers_gives_the_remaining_batches_exactly():
    ds = docs(70)
    full = [plain(b) for b in fl.Loader(ds, 6, seed=4, workers=0, pad=True)]
    with fl.Loader(ds, 6, seed=4, workers=2, pad=True) as first:
        it = iter(first)
        head = [plain(next(it)) for _ in range(4)]
        state = first.state_dict()
    with fl.Loader(ds, 6, seed=4, workers=2, pad=True) as second:
        second.load_state_dict(state)
        tail = [plain(b) for b in second]
    assert_same_stream(full, head + tail)


def test_a_killed_worker_loses_and_repeats_nothing_and_leaves_no_shared_memory(created):
    loader = fl.Loader(docs(120, make_doc_slowly), 4, seed=2, workers=2, prefetch=2)
    seen = Counter(pairs(next(loader)))
    os.kill(loader._pool.workers[0].proc.pid, signal.SIGKILL)
    with pytest.raises(fl.WorkerError, match="SIGKILL"):
        for b in loader:
            seen.update(pairs(b))
    loader.load_state_dict(loader.state_dict())  # new workers continue the pass
    for b in loader:
        seen.update(pairs(b))
    assert seen == Counter((0, i) for i in range(120))
    loader.close()
    assert_unlinked(created)


def test_a_batch_that_takes_longer_than_the_timeout_is_a_worker_error_naming_it(created):
    loader = fl.Loader(docs(40, hang_on_13), 4, workers=2, timeout=2)
    with pytest.raises(fl.WorkerError, match=r"batch 3 took longer than .* 2 s"):
        for _ in loader:
            pass
    loader.close()
    assert_unlinked(created)


@pytest.mark.parametrize("where", ["wait", "collate"])
def test_interrupts_while_a_ragged_batch_is_awaited_or_collated_lose_nothing(monkeypatch, where):
    from feedline.loader import _collate, _workers

    state = {"calls": 0, "armed": False}
    if where == "wait":
        real_result, real_receive = _workers.WorkerPool.result, _workers.WorkerPool._receive

        def result(self, *args, **kwargs):
            state["calls"] += 1
            state["armed"] = state["armed"] or state["calls"] in (3, 7, 11)
            return real_result(self, *args, **kwargs)

        def receive(self, *args, **kwargs):
            if state["armed"]:
                state["armed"] = False
                raise KeyboardInterrupt
            return real_receive(self, *args, **kwargs)

        monkeypatch.setattr(_workers.WorkerPool, "result", result)
        monkeypatch.setattr(_workers.WorkerPool, "_receive", receive)
    else:
        real_collate = _collate.collate

        def collate(*args, **kwargs):  # in the loader, out of the slot
            state["calls"] += 1
            if state["calls"] in (3, 7, 11):
                raise KeyboardInterrupt
            return real_collate(*args, **kwargs)

        monkeypatch.setattr(_collate, "collate", collate)
    loader = fl.Loader(docs(48, make_doc_slowly), 2, workers=2, prefetch=2, seed=1)
    seen, interrupts = pass_through_interrupts(loader)
    assert interrupts == 3
    assert seen == Counter((0, i) for i in range(48))
    assert loader.state_dict()["ended"]
    pool = loader._pool
    assert len(pool.free) == len(pool.slots)  # no slot leaked
    loader.close()


def test_close_from_another_thread_stops_the_wait_and_frees_the_memory(created):
    loader = fl.Loader(docs(400, make_doc_slowly), 2, workers=2, prefetch=1)
    next(loader)
    closer = threading.Timer(0.05, loader.close)
    closer.start()
    with pytest.raises((fl.WorkerError, ValueError), match="closed"):
        for _ in range(1000):
            next(loader)
    closer.join(20)  # close stops the workers (a busy one within a second), then unlinks
    assert_unlinked(created)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_cannot_take_the_parents_ragged_batches():
    loader = fl.Loader(docs(60, make_doc_slowly), 4, workers=2, seed=2)
    first = next(loader)
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            try:
                next(loader)
                code = 3  # it would have stolen the parent's batch
            except fl.WorkerError:
                pass
            loader.close()
        except BaseException:
            code = 4
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    seen = Counter(p for b in [first, *loader] for p in pairs(b))
    assert seen == Counter((0, i) for i in range(60))
    loader.close()


def test_a_worker_that_opens_the_ring_after_a_slot_grew_uses_the_grown_slot():
    """A slow worker may open the ring's names after the loader replaced (and unlinked)
    one of them for a larger one: it keeps the other slots and takes the new one from
    the message that follows, instead of dropping the ring (it then failed its next
    batch with an IndexError; seen in CI)."""
    from multiprocessing.shared_memory import SharedMemory

    from feedline.loader._worker_main import _open_slots, _replace_slot

    ring = [SharedMemory(create=True, size=64) for _ in range(3)]
    grown = SharedMemory(create=True, size=128)
    names = [s.name for s in ring]
    ring[1].close()
    ring[1].unlink()  # replaced by the loader before this worker opened the ring
    slots: list = []
    try:
        _open_slots(slots, names)
        assert len(slots) == 3 and slots[0].name == names[0] and slots[2].name == names[2]
        _replace_slot(slots, 1, grown.name)
        assert [s.name for s in slots] == [names[0], grown.name, names[2]]
        assert slots[1].size >= 128
    finally:
        for s in slots:
            if s is not None:
                s.close()
        for s in (ring[0], ring[2], grown):
            s.close()
            s.unlink()
