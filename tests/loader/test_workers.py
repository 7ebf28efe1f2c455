"""Worker processes: the same stream, errors that reach the caller, deaths, clean-up."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import numpy as np
import pytest

import feedline as fl


class Rows(fl.Record, dims={"D": 3}):
    x = fl.field("D", "float32")
    y = fl.field((), "int64")


class ItemSource:
    """A map-style source read item by item (so workers are used)."""

    def __init__(self, n: int, bad: int | None = None) -> None:
        self.n, self.bad = n, bad

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict:
        if i == self.bad:
            raise KeyError(f"item {i} is broken")
        return {"x": [i, i + 0.5, -i], "y": i}


class SlowSource(ItemSource):
    def __getitem__(self, i: int) -> dict:
        import time

        time.sleep(0.05)
        return super().__getitem__(i)


def shm_segments() -> set[str]:
    return {n for n in os.listdir("/dev/shm") if n.startswith("psm_")}


def stream(loader) -> list[tuple]:
    return [
        (b.meta.record_indices.tolist(), b.x.tolist(), b.y.tolist(), b.meta.mask.tolist())
        for b in loader
    ]


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_the_stream_is_the_same_whatever_the_number_of_workers(workers):
    ds = fl.Dataset(Rows, ItemSource(203))
    want = stream(fl.Loader(ds, 16, seed=4, pad=True, workers=0))
    with fl.Loader(ds, 16, seed=4, pad=True, workers=workers, prefetch=2) as loader:
        assert stream(loader) == want
        assert stream(loader) == stream(_second_pass(ds))


def _second_pass(ds):
    loader = fl.Loader(ds, 16, seed=4, pad=True, workers=0)
    list(loader)
    return loader


def test_a_mix_of_file_sources_gives_the_same_stream_with_workers(tmp_path):
    paths = []
    for k, n in enumerate((120, 70)):
        path = tmp_path / f"{k}.flr"
        fl.recfile.write(
            path, Rows, {"x": np.full((n, 3), k, np.float32), "y": np.arange(n) + 1000 * k}
        )
        paths.append(path)
    files = [fl.recfile.open(p) for p in paths]
    seq = fl.Seq.mix([fl.Dataset(f.record, f).shuffle(k + 1) for k, f in enumerate(files)])
    want = stream(fl.Loader(seq, 32, workers=0))
    with fl.Loader(seq, 32, workers=2) as loader:
        assert stream(loader) == want


def test_resume_with_workers_continues_after_the_batches_delivered():
    ds = fl.Dataset(Rows, ItemSource(100))
    want = stream(fl.Loader(ds, 8, seed=1, workers=0))
    with fl.Loader(ds, 8, seed=1, workers=2, prefetch=3) as loader:
        it = iter(loader)
        head = [next(it) for _ in range(4)]
        state = loader.state_dict()
        assert state["batches"] == 4  # delivered, not prefetched
    with fl.Loader(ds, 8, seed=1, workers=2) as resumed:
        resumed.load_state_dict(state)
        assert stream(resumed) == want[4:]
    assert [b.y.tolist() for b in head] == [w[2] for w in want[:4]]


def test_a_worker_exception_reaches_the_caller_with_its_traceback():
    ds = fl.Dataset(Rows, ItemSource(50, bad=17))
    with fl.Loader(ds, 10, workers=2) as loader, pytest.raises(KeyError) as info:
        list(loader)
    notes = "\n".join(getattr(info.value, "__notes__", []))
    assert "raised in a loader worker" in notes and "item 17 is broken" in notes
    assert "__getitem__" in notes


def test_a_worker_exception_gets_its_note_where_exceptions_have_no_add_note():
    # Python 3.10's exceptions have no add_note (calling it raised an AttributeError
    # instead of the worker's exception); the note goes to __notes__ by hand there.
    from feedline.errors import add_note as _add_note  # shared by the maps' notes

    class Old(KeyError):
        add_note = None

    exc = Old("item 17")
    exc.__notes__ = ["an earlier note"]
    _add_note(exc, "raised in a loader worker:\ntraceback text")
    assert exc.__notes__ == ["an earlier note", "raised in a loader worker:\ntraceback text"]
    plain = KeyError("item 17")
    _add_note(plain, "raised in a loader worker")
    assert plain.__notes__ == ["raised in a loader worker"]


def own_segments(loader) -> set[str]:
    """The loader's shared-memory segments (other processes may create their own)."""
    return {s.name.lstrip("/") for s in loader._pool.slots}


def test_a_killed_worker_is_a_worker_error_and_leaves_no_shared_memory():
    ds = fl.Dataset(Rows, SlowSource(400))
    loader = fl.Loader(ds, 4, workers=2, prefetch=2)
    it = iter(loader)
    next(it)
    mine = own_segments(loader)
    assert mine <= shm_segments()
    os.kill(loader._pool.workers[0].proc.pid, signal.SIGKILL)
    with pytest.raises(fl.WorkerError, match="SIGKILL"):
        for _ in it:
            pass
    loader.close()
    assert not mine & shm_segments()


def test_workers_are_kept_across_passes_and_resets():
    ds = fl.Dataset(Rows, ItemSource(40))
    with fl.Loader(ds, 8, seed=2, workers=2) as loader:
        list(loader)
        pids = [w.proc.pid for w in loader._pool.workers]
        list(loader)
        loader.reset(5)
        list(loader)
        assert [w.proc.pid for w in loader._pool.workers] == pids


def test_in_memory_arrays_are_gathered_in_process_even_with_workers():
    ds = fl.Dataset.from_arrays(x=np.arange(30.0).reshape(10, 3))
    with fl.Loader(ds, 4, workers=2) as loader:
        assert len(list(loader)) == 3
        assert loader._pool is None


_MAIN_SCRIPT = """
{prelude}
import os
import threading
import warnings
import numpy as np
import feedline as fl

class Local:
    def __len__(self):
        return 20
    def __getitem__(self, i):
        return {{"x": [i, i, i], "y": i}}

class R(fl.Record, dims={{"D": 3}}):
    x = fl.field("D", "float32")
    y = fl.field((), "int64")

class Out(fl.Record, dims={{"D": 3}}):
    x = fl.field("D", "float32")
    y = fl.field((), "int64")
    pid = fl.field((), "int64")

LOCK = threading.Lock() if {lock} else None

def jitter(example, rng):
    if LOCK is not None:
        with LOCK:
            pass
    x = example["x"] + rng.standard_normal(3).astype(np.float32)
    return {{"x": x, "y": example["y"], "pid": os.getpid()}}

ds = fl.Dataset(R, Local()).map(jitter, seed=3, record=Out)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    here = [(b.x.tolist(), b.y.tolist()) for b in fl.Loader(ds, 8, seed=1, workers=0)]
    loader = fl.Loader(ds, 8, seed=1, workers=2)
    batches = list(loader)
there = [(b.x.tolist(), b.y.tolist()) for b in batches]
pids = {{int(p) for b in batches for p in b.pid}}
print(here == there, sum(b.meta.size for b in batches), os.getpid() in pids, len(pids))
print([str(w.message) for w in caught if w.category is RuntimeWarning])
"""


def _run_main(tmp_path, prelude: str = "", lock: bool = False) -> list[str]:
    script = tmp_path / "train.py"
    script.write_text(_MAIN_SCRIPT.format(prelude=prelude, lock=lock))
    out = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    return out.stdout.splitlines()


def test_a_map_record_and_source_of_main_go_to_the_workers_by_value(tmp_path):
    """A script's own source, records and map function (defined in ``__main__``, which a
    worker never imports) reach the workers through cloudpickle: the batches are made
    there, the stream is the in-process one, and nothing warns (issue 20, part 3; they
    used to be loaded in the calling process with a warning)."""
    same, rows, here, n_pids = _run_main(tmp_path)[0].split()
    assert (same, rows, here) == ("True", "20", "False")  # made in the workers, not here
    assert int(n_pids) >= 1
    assert _run_main(tmp_path)[1] == "[]"


def test_without_cloudpickle_main_loads_in_process_with_a_warning_naming_the_extra(tmp_path):
    lines = _run_main(tmp_path, prelude="import sys; sys.modules['cloudpickle'] = None")
    assert lines[0].split()[:3] == ["True", "20", "True"]  # made here, all of them
    assert "defined in __main__" in lines[1] and "feedline[workers]" in lines[1]


def test_what_cloudpickle_cannot_send_loads_in_process_with_a_warning_saying_why(tmp_path):
    lines = _run_main(tmp_path, lock=True)  # the map's globals hold a lock
    assert lines[0].split()[:3] == ["True", "20", "True"]
    assert "cloudpickle cannot send it" in lines[1] and "lock" in lines[1]


def test_closing_the_loader_stops_its_workers_and_unlinks_its_memory():
    ds = fl.Dataset(Rows, ItemSource(64))
    loader = fl.Loader(ds, 8, workers=2)
    next(iter(loader))
    procs = [w.proc for w in loader._pool.workers]
    mine = own_segments(loader)
    assert mine and mine <= shm_segments()
    loader.close()
    assert all(p.poll() is not None for p in procs)
    assert not mine & shm_segments()


def jitter(example, rng):
    """An augmentation: noise from the example's own generator."""
    return {"x": example["x"] + rng.standard_normal(3).astype(np.float32), "y": example["y"]}


def double(example):
    return {"x": example["x"] * 2, "y": example["y"]}


def augmented_stream(loader):
    return [(b.y.tolist(), np.round(b.x, 5).tolist()) for b in loader]


@pytest.mark.parametrize("workers", [0, 2])
def test_a_mapped_stream_is_reproducible_and_the_same_with_workers(workers):
    base = fl.Dataset(Rows, ItemSource(90))
    ds = base.map(jitter, seed=11).map(double)
    want = augmented_stream(fl.Loader(ds, 16, seed=3, workers=0))
    with fl.Loader(ds, 16, seed=3, workers=workers) as loader:
        got = augmented_stream(loader)
        assert got == want
        again = augmented_stream(loader)  # the next pass draws new noise
    assert again != want
    plain = augmented_stream(fl.Loader(base, 16, seed=3, workers=0))
    assert [g[0] for g in got] == [p[0] for p in plain]
    assert got != plain


def test_a_mapped_stream_resumes_exactly():
    ds = fl.Dataset.from_arrays(x=np.zeros((40, 3), np.float32)).map(
        lambda e, rng: {"x": rng.random(3).astype(np.float32)}, seed=5
    )
    want = [b.x.tolist() for b in fl.Loader(ds, 6, seed=2)]
    loader = fl.Loader(ds, 6, seed=2)
    it = iter(loader)
    next(it), next(it)
    state = loader.state_dict()
    resumed = fl.Loader(ds, 6, seed=2)
    resumed.load_state_dict(state)
    assert [b.x.tolist() for b in resumed] == want[2:]


def test_a_map_whose_output_does_not_fit_the_record_is_a_shape_error():
    ds = fl.Dataset(Rows, ItemSource(10)).map(lambda e: {"x": e["x"][:2], "y": e["y"]})
    with pytest.raises(fl.ShapeError, match="`x`"):
        list(fl.Loader(ds, 4))


def refuse_7(example):
    """A map that raises on one example (record 7)."""
    if int(example["y"]) == 7:
        raise ValueError("seven is not allowed")
    return example


@pytest.mark.parametrize("workers", [0, 2])
def test_a_map_error_is_the_maps_own_naming_the_example(workers):
    ds = fl.Dataset(Rows, ItemSource(12)).map(refuse_7)
    with pytest.raises(ValueError, match="seven is not allowed") as e:
        list(fl.Loader(ds, 4, seed=1, workers=workers))
    notes = "\n".join(getattr(e.value, "__notes__", []))
    assert "in the map refuse_7 of Rows item 7, position " in notes, notes


def total_y(batch):
    """A batch transform: runs in the worker; its result comes back pickled."""
    return {"pid": os.getpid(), "sum": int(batch.y.sum()), "size": batch.meta.size}


def test_a_batch_transform_runs_in_the_workers():
    ds = fl.Dataset(Rows, ItemSource(40))
    want = [int(b.y.sum()) for b in fl.Loader(ds, 8, seed=3, workers=0)]
    with fl.Loader(ds, 8, seed=3, workers=2, batch_transform=total_y) as loader:
        got = list(loader)
    assert [g["sum"] for g in got] == want
    assert os.getpid() not in {g["pid"] for g in got}


def test_a_batch_transform_on_arrays_in_memory_runs_in_the_workers_too():
    ds = fl.Dataset.from_arrays(y=np.arange(30))
    with fl.Loader(ds, 10, workers=2, batch_transform=total_y) as loader:
        got = list(loader)
    assert [g["sum"] for g in got] == [45, 145, 245]
    assert os.getpid() not in {g["pid"] for g in got}


def noise_by_record(loader) -> dict[int, list]:
    """Each example's augmented features, by record (the noise is x minus the record's)."""
    return {
        int(r): np.round(x, 5).tolist() for b in loader for r, x in zip(b.meta.record_indices, b.x)
    }


@pytest.mark.parametrize("workers", [0, 2])
def test_ranks_draw_their_own_augmentation_the_whole_runs_draw(workers):
    ds = fl.Dataset(Rows, ItemSource(64)).map(jitter, seed=7)
    whole = noise_by_record(fl.Loader(fl.Seq.source(ds).shuffle(1), 4, workers=0))
    for count in (2, 3):  # dealt shards, also after an elastic change of rank count
        got = {}
        for index in range(count):
            with fl.Loader(
                fl.Seq.source(ds).shuffle(1), 4, shard=(index, count), workers=workers
            ) as loader:
                part = noise_by_record(loader)
            assert not set(part) & set(got)
            got.update(part)
        assert got == whole  # each example drew what it draws unsharded: ranks differ
    # a plain source's contiguous slices draw differently from one another too
    first = noise_by_record(fl.Loader(ds, 4, seed=1, shard=(0, 2), workers=0))
    second = noise_by_record(fl.Loader(ds, 4, seed=1, shard=(1, 2), workers=0))
    offsets = [
        np.round(np.subtract(v, ItemSource(64)[r]["x"]), 4).tolist()
        for part in (first, second)
        for r, v in part.items()
    ]
    assert len({tuple(o) for o in offsets}) == 64  # no two examples share their noise


def test_next_into_with_workers_takes_the_batches_in_order_and_resumes_exactly():
    ds = fl.Dataset(Rows, ItemSource(40))
    want = [b.meta.record_indices.tolist() for b in fl.Loader(ds, 4, seed=2, workers=0)]
    out = {"x": np.zeros((4, 3), np.float32), "y": np.zeros(4, np.int64)}
    with fl.Loader(ds, 4, seed=2, workers=2, prefetch=3) as loader:
        it = iter(loader)
        got = [next(it).meta.record_indices.tolist()]
        assert loader.next_into(out) == 4  # the workers had made this one ahead
        got.append(out["y"].tolist())
        got.append(next(it).meta.record_indices.tolist())
        state = loader.state_dict()
        assert got == want[:3] and state["batches"] == 3
    resumed = fl.Loader(ds, 4, seed=2)
    resumed.load_state_dict(state)
    assert [b.meta.record_indices.tolist() for b in resumed] == want[3:]


def test_threads_that_start_a_loader_together_all_wait_for_its_workers(monkeypatch):
    import threading

    in_process = []
    real = fl.Loader.gather
    monkeypatch.setattr(
        fl.Loader, "gather", lambda self, *a, **k: in_process.append(1) or real(self, *a, **k)
    )
    ds = fl.Dataset(Rows, ItemSource(400))
    with fl.Loader(ds, 8, seed=1, workers=2) as loader:
        iter(loader)
        barrier, got = threading.Barrier(3), []

        def work():
            barrier.wait()
            while (batch := next(loader, None)) is not None:
                got.extend(batch.meta.record_indices.tolist())

        threads = [threading.Thread(target=work) for _ in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert sorted(got) == list(range(400))
    assert in_process == []  # every batch came from the workers


def halve(batch):
    """A batch transform (importable, so it runs in the workers)."""
    return {"x": batch.x / 2}


def test_next_into_with_a_transform_in_the_workers_fills_the_records_fields():
    ds = fl.Dataset.from_arrays(x=np.arange(40.0).reshape(20, 2))
    want = [b.x.tolist() for b in fl.Loader(ds, 4, seed=1, workers=0)]
    out = {"x": np.zeros((4, 2))}
    with fl.Loader(ds, 4, seed=1, batch_transform=halve, workers=2) as loader:
        got = []
        while loader.next_into(out):
            got.append(out["x"].tolist())
    assert got == want  # next_into gives the fields, as with workers=0


def test_a_batch_that_raised_is_passed_over_and_the_state_stays_small():
    def flaky(example):
        if int(example["y"]) == 13:
            raise RuntimeError("bad example 13")
        return example

    ds = fl.Dataset.from_arrays(y=np.arange(100)).map(flaky)
    loader = fl.Loader(ds, 5)
    got, errors = [], 0
    while True:
        try:
            got.extend(next(loader).y.tolist())
        except RuntimeError:
            errors += 1
        except StopIteration:
            break
    assert errors == 1 and got == [i for i in range(100) if not 10 <= i < 15]
    state = loader.state_dict()
    assert state["batches"] == 20 and state["ahead"] == [] and state["ended"] is True
