"""The systems that ``benchmarks/compare.py`` measures, each run in a fresh child process.

``compare.py`` starts ``python -c "...; _compare_systems.child_main(spec)"`` once per
system and number of workers (and once per format to write), so every measurement starts
from a clean interpreter: its time to the first batch and its memory are its own. A child
talks to the driver in lines on stdout starting with ``@@CMP `` and a JSON object:

- ``{"event": "start", "base_kb": ...}``: the libraries are imported and the clock starts
  (the data is opened after this line); ``base_kb`` is this process's RssAnon + RssShmem.
- ``{"event": "end"}``: the measured loop is over (the driver stops sampling memory).
- ``{"event": "result", ...}``, ``{"event": "skip", "reason": ...}`` or
  ``{"event": "prepared", ...}``.

Everything else a library prints goes to the driver's log, shown when a child fails.
The classes here live in an importable module so that worker processes (torch's forked
ones, grain's spawned ones) can unpickle them.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import gc
import importlib.util
import json
import os
import resource
import sys
import time
import types
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

import feedline as fl

SEED = 1
STEADY_S = 10.0  # a first epoch shorter than this is followed by a second (the steady state)

# workload -> (feature field, its shape, its dtype, label field)
LAYOUTS = {
    "A": ("x", (64,), "float32", "y"),
    "B": ("img", (32, 32, 3), "uint8", "label"),
}


class Example(fl.Record, dims={"D": 64}):
    """Workload A: 64 float32 features and an int64 label."""

    x = fl.field("D", "float32")
    y = fl.field((), "int64")


class Image(fl.Record):
    """Workload B: a 32x32x3 uint8 image and an int64 label."""

    img = fl.field((32, 32, 3), "uint8")
    label = fl.field((), "int64")


RECORDS = {"A": Example, "B": Image}


def emit(event: str, **fields: Any) -> None:
    sys.stdout.write("@@CMP " + json.dumps({"event": event, **fields}) + "\n")
    sys.stdout.flush()


class Skip(Exception):
    """A system that cannot run here (not installed, fails at import)."""


def _status_kb(keys: tuple[str, ...]) -> int:
    total = 0
    with open("/proc/self/status") as f:
        for line in f:
            key, _, rest = line.partition(":")
            if key in keys:
                total += int(rest.split()[0])
    return total


# ---------------------------------------------------------------------------------------
# The memory-mapped arrays every non-feedline system reads (plain .npy files).


def open_npy(wdir: str, workload: str) -> tuple[np.ndarray, np.ndarray]:
    feat, _, _, label = LAYOUTS[workload]
    return (
        np.load(os.path.join(wdir, f"{feat}.npy"), mmap_mode="r"),
        np.load(os.path.join(wdir, f"{label}.npy"), mmap_mode="r"),
    )


class _Lazy:
    """Opens the memory maps on first use, in whichever process uses it; pickles as the
    path alone (never the arrays)."""

    def __init__(self, wdir: str, workload: str) -> None:
        self.wdir, self.workload = wdir, workload
        self.n = int(
            np.load(os.path.join(wdir, f"{LAYOUTS[workload][3]}.npy"), mmap_mode="r").shape[0]
        )
        self._arrays: tuple[np.ndarray, np.ndarray] | None = None

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        a = self._arrays
        if a is None:  # one assignment, so threads never see half of it
            a = self._arrays = open_npy(self.wdir, self.workload)
        return a

    def __len__(self) -> int:
        return self.n

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_arrays": None}


class TorchItems(_Lazy):
    """A map-style dataset: one example per ``__getitem__`` (default collate batches)."""

    def __getitem__(self, i: int) -> tuple[np.ndarray, np.int64]:
        x, y = self.arrays()
        return x[i], y[i]


class TorchBatches(_Lazy):
    """``__getitem__`` takes a list of indices (from a BatchSampler) and gathers them."""

    def __getitem__(self, idx: list[int]) -> tuple[Any, Any]:
        import torch

        x, y = self.arrays()
        idx = np.asarray(idx)
        return torch.from_numpy(np.take(x, idx, axis=0)), torch.from_numpy(np.take(y, idx))


class GrainSource(_Lazy):
    """A grain RandomAccessDataSource over the memory maps: a dict per record."""

    def __getitem__(self, i: int) -> dict[str, np.ndarray]:
        x, y = self.arrays()
        feat, _, _, label = LAYOUTS[self.workload]
        return {feat: x[i], label: y[i]}


# ---------------------------------------------------------------------------------------
# Imports that may fail: each raises Skip with the reason.


def _import(name: str) -> Any:
    try:
        return importlib.import_module(name)
    except Exception as e:  # an installed package may fail at import for many reasons
        raise Skip(f"`import {name}` failed: {type(e).__name__}: {e}") from e


def import_streaming() -> tuple[Any, str]:
    """Mosaic Streaming's ``streaming.base``; the note says how it was imported.

    ``streaming/__init__`` imports its vision and text datasets, which need torchvision and
    transformers 4.x; neither is needed to write and read MDS shards, and both would pull
    another torch (or break ``datasets``) here. When that import fails, ``streaming.base``
    is imported without running the package's ``__init__``, and transformers' two batch
    classes its DataLoader wrapper names are stubbed if transformers is missing."""
    try:
        import streaming.base as sb

        return sb, ""
    except Exception as e:
        first = f"{type(e).__name__}: {e}"
    for key in list(sys.modules):
        if key.split(".")[0] in ("streaming", "transformers"):
            del sys.modules[key]
    spec = importlib.util.find_spec("streaming")
    if spec is None or not spec.submodule_search_locations:
        raise Skip(f"`import streaming` failed: {first}")
    shell = types.ModuleType("streaming")
    shell.__path__ = list(spec.submodule_search_locations)
    sys.modules["streaming"] = shell
    stubbed = ""
    try:
        importlib.import_module("transformers.feature_extraction_utils")
        importlib.import_module("transformers.tokenization_utils_base")
    except Exception:
        for key in list(sys.modules):
            if key.split(".")[0] == "transformers":
                del sys.modules[key]
        fe = types.ModuleType("transformers.feature_extraction_utils")
        tk = types.ModuleType("transformers.tokenization_utils_base")
        fe.BatchFeature = type("BatchFeature", (dict,), {})
        tk.BatchEncoding = type("BatchEncoding", (dict,), {})
        sys.modules.update(
            {
                "transformers": types.ModuleType("transformers"),
                "transformers.feature_extraction_utils": fe,
                "transformers.tokenization_utils_base": tk,
            }
        )
        stubbed = "; transformers' BatchFeature/BatchEncoding stubbed"
    try:
        import streaming.base as sb
    except Exception as e:
        raise Skip(
            f"`import streaming.base` failed: {type(e).__name__}: {e} "
            f"(after `import streaming`: {first})"
        ) from e
    return sb, f"`import streaming` failed ({first}): imported streaming.base alone{stubbed}"


def import_grain() -> Any:
    gp = _import("grain.python")
    try:  # grain reads absl flags; a program without absl.app must mark them parsed
        from absl import flags

        if not flags.FLAGS.is_parsed():
            flags.FLAGS.mark_as_parsed()
    except Exception:
        pass
    return gp


# ---------------------------------------------------------------------------------------
# Writing each system's own format (a "prep" child).


def _mds_part(wdir: str, workload: str, lo: int, hi: int, out: str) -> None:
    sb, _ = import_streaming()
    feat, shape, dtype, label = LAYOUTS[workload]
    x, y = open_npy(wdir, workload)
    columns = {feat: f"ndarray:{dtype}:{','.join(map(str, shape))}", label: "int64"}
    with sb.MDSWriter(out=out, columns=columns, compression=None) as w:
        for i in range(lo, hi):
            w.write({feat: x[i], label: y[i]})


def _lit_items(wdir: str, workload: str, span: tuple[int, int]) -> Iterator[dict]:
    feat, _, _, label = LAYOUTS[workload]
    x, y = open_npy(wdir, workload)
    for i in range(*span):
        yield {feat: np.asarray(x[i]), label: int(y[i])}


def prepare(system: str, wdir: str, workload: str, n: int) -> str:
    """Write ``system``'s format of the workload into ``wdir``; returns a note."""
    feat, shape, dtype, label = LAYOUTS[workload]
    if system == "hf":
        datasets = _import("datasets")
        import pyarrow as pa

        datasets.disable_progress_bars()
        x, y = open_npy(wdir, workload)
        values = pa.array(np.ascontiguousarray(x).reshape(-1))
        if workload == "A":  # a fixed-size list: with_format("numpy") gives (k, 64) float32
            col = pa.FixedSizeListArray.from_arrays(values, shape[0])
        else:  # Array3D, built from its list<list<list<uint8>>> storage directly
            from datasets.features.features import Array3DExtensionType

            # innermost lists first: n*32*32 lists of 3, n*32 of 32, n of 32
            counts = [n * shape[0] * shape[1], n * shape[0], n]
            for count, k in zip(counts, reversed(shape)):
                offsets = pa.array(np.arange(0, (count + 1) * k, k, dtype=np.int32))
                values = pa.ListArray.from_arrays(offsets, values)
            col = pa.ExtensionArray.from_storage(Array3DExtensionType(shape, dtype), values)
        table = pa.table({feat: col, label: pa.array(np.asarray(y))})
        ds = datasets.Dataset(datasets.table.InMemoryTable(table), fingerprint="compare")
        ds.save_to_disk(os.path.join(wdir, "hf"))
        return ""
    if system == "streaming":
        _, note = import_streaming()
        import multiprocessing as mp

        root = os.path.join(wdir, "mds")
        parts = 2
        spans = [(p * n // parts, (p + 1) * n // parts) for p in range(parts)]
        ctx = mp.get_context("fork")
        procs = [
            ctx.Process(
                target=_mds_part, args=(wdir, workload, lo, hi, os.path.join(root, f"part{p}"))
            )
            for p, (lo, hi) in enumerate(spans)
        ]
        for p in procs:
            p.start()
        for p in procs:
            p.join()
            if p.exitcode:
                raise RuntimeError(f"an MDS writer exited with {p.exitcode}")
        import_streaming()[0].util.merge_index(root, keep_local=True)
        return note
    if system == "litdata":
        ld = _import("litdata")
        step = 50_000
        spans = [(s, min(s + step, n)) for s in range(0, n, step)]
        ld.optimize(
            fn=functools.partial(_lit_items, wdir, workload),
            inputs=spans,
            output_dir=os.path.join(wdir, "lit"),
            chunk_bytes="64MB",
            num_workers=2,
        )
        return ""
    raise ValueError(f"nothing to prepare for {system}")


# ---------------------------------------------------------------------------------------
# The measured systems: each returns a function that opens the stored data and iterates
# batches as (features, labels) pairs; the clock starts before that function is called.

Opener = Callable[[], Iterator[tuple[Any, Any]]]


def sys_numpy(wdir: str, workload: str, n: int, b: int, workers: int) -> tuple[Opener, str]:
    _, shape, dtype, _ = LAYOUTS[workload]

    def run() -> Iterator[tuple[Any, Any]]:
        x, y = open_npy(wdir, workload)
        perm = np.random.default_rng(SEED).permutation(n)
        ox, oy = np.empty((b, *shape), dtype), np.empty(b, np.int64)
        for s in range(0, n, b):
            idx = perm[s : s + b]
            k = len(idx)
            np.take(x, idx, axis=0, out=ox[:k], mode="clip")
            np.take(y, idx, axis=0, out=oy[:k], mode="clip")
            yield ox[:k], oy[:k]

    return run, ""


def _feedline(threads: int | None, native: bool = True) -> Callable[..., tuple[Opener, str]]:
    def make(wdir: str, workload: str, n: int, b: int, workers: int) -> tuple[Opener, str]:
        feat, _, _, label = LAYOUTS[workload]
        if not native:  # this child process only: chunks taken by numpy on Python threads
            os.environ["FEEDLINE_NATIVE"] = "0"
        # Nothing is loaded before the clock: as a user's job runs it (a plain shuffle
        # never loads the compiled kernels; a note says if they were loaded at the end).
        t = "" if threads is None else f", threads={threads}"

        def run() -> Iterator[tuple[Any, Any]]:
            f = fl.recfile.open(os.path.join(wdir, "data.flr"))
            with fl.Loader(f, b, seed=SEED, workers=workers, threads=threads) as loader:
                for batch in loader:
                    yield getattr(batch, feat), getattr(batch, label)

        env = "" if native else " with FEEDLINE_NATIVE=0 (numpy's takes on Python threads)"
        return run, f"fl.Loader(fl.recfile.open(path), {b}, seed=1, workers=w{t}){env}"

    return make


def _torch_loader(ds: Any, workers: int, **kw: Any) -> Any:
    from torch.utils.data import DataLoader

    return DataLoader(ds, num_workers=workers, **kw)


def sys_torch_item(wdir: str, workload: str, n: int, b: int, workers: int) -> tuple[Opener, str]:
    torch = _import("torch")

    def run() -> Iterator[tuple[Any, Any]]:
        ds = TorchItems(wdir, workload)
        g = torch.Generator().manual_seed(SEED)
        yield from _torch_loader(ds, workers, batch_size=b, shuffle=True, generator=g)

    return run, ""


def sys_torch_batch(wdir: str, workload: str, n: int, b: int, workers: int) -> tuple[Opener, str]:
    torch = _import("torch")
    from torch.utils.data import BatchSampler, RandomSampler

    def run() -> Iterator[tuple[Any, Any]]:
        ds = TorchBatches(wdir, workload)
        g = torch.Generator().manual_seed(SEED)
        sampler = BatchSampler(RandomSampler(ds, generator=g), b, drop_last=False)
        yield from _torch_loader(ds, workers, batch_size=None, sampler=sampler)

    return run, ""


def sys_hf(wdir: str, workload: str, n: int, b: int, workers: int) -> tuple[Opener, str]:
    datasets = _import("datasets")
    datasets.disable_progress_bars()
    feat, _, _, label = LAYOUTS[workload]

    def run() -> Iterator[tuple[Any, Any]]:
        ds = datasets.load_from_disk(os.path.join(wdir, "hf")).with_format("numpy")
        perm = np.random.default_rng(SEED).permutation(n)
        for s in range(0, n, b):
            batch = ds[perm[s : s + b].tolist()]
            yield batch[feat], batch[label]

    return run, ""


def sys_grain_dl(wdir: str, workload: str, n: int, b: int, workers: int) -> tuple[Opener, str]:
    gp = import_grain()
    feat, _, _, label = LAYOUTS[workload]

    def run() -> Iterator[tuple[Any, Any]]:
        src = GrainSource(wdir, workload)
        sampler = gp.IndexSampler(
            num_records=len(src),
            shard_options=gp.NoSharding(),
            shuffle=True,
            num_epochs=1,
            seed=SEED,
        )
        loader = gp.DataLoader(
            data_source=src,
            sampler=sampler,
            operations=[gp.Batch(b, drop_remainder=False)],
            worker_count=workers,
            read_options=gp.ReadOptions(num_threads=0, prefetch_buffer_size=0),
        )
        for batch in loader:
            yield batch[feat], batch[label]

    return run, (
        "ReadOptions(num_threads=0, prefetch_buffer_size=0): grain's default 16 "
        "reader threads were 6-8x slower in a trial on this 2-core machine"
    )


def sys_grain_map(wdir: str, workload: str, n: int, b: int, workers: int) -> tuple[Opener, str]:
    gp = import_grain()
    feat, _, _, label = LAYOUTS[workload]

    def run() -> Iterator[tuple[Any, Any]]:
        ds = gp.MapDataset.source(GrainSource(wdir, workload)).shuffle(seed=SEED).batch(b)
        if workers:
            ds = ds.to_iter_dataset().mp_prefetch(gp.MultiprocessingOptions(num_workers=workers))
        for batch in ds:
            yield batch[feat], batch[label]

    return run, ""


def sys_streaming(wdir: str, workload: str, n: int, b: int, workers: int) -> tuple[Opener, str]:
    sb, note = import_streaming()
    _import("torch")
    feat, _, _, label = LAYOUTS[workload]

    def run() -> Iterator[tuple[Any, Any]]:
        ds = sb.StreamingDataset(
            local=os.path.join(wdir, "mds"), shuffle=True, shuffle_seed=SEED, batch_size=b
        )
        for batch in _torch_loader(ds, workers, batch_size=b):
            yield batch[feat], batch[label]

    shuffle = (
        "its default shuffle (py1e) permutes samples within blocks of shards, not the whole dataset"
    )
    return run, f"{shuffle}; {note}" if note else shuffle


def _litdata(item_decode: bool) -> Callable[..., tuple[Opener, str]]:
    def make(wdir: str, workload: str, n: int, b: int, workers: int) -> tuple[Opener, str]:
        ld = _import("litdata")
        feat, _, _, label = LAYOUTS[workload]
        # batch_decode=0: decode only the requested item. The default ("auto") decodes
        # aligned windows of up to 256 items, paired with an in-chunk block shuffle.
        kw = {"batch_decode": 0} if item_decode else {}

        def run() -> Iterator[tuple[Any, Any]]:
            ds = ld.StreamingDataset(os.path.join(wdir, "lit"), shuffle=True, seed=SEED, **kw)
            for batch in ld.StreamingDataLoader(ds, batch_size=b, num_workers=workers):
                yield batch[feat], batch[label]

        return run, (
            "its shuffle permutes the chunks (64 MB) and, inside each, blocks of "
            "256 items, not the whole dataset"
        )

    return make


SYSTEMS: dict[str, Callable[..., tuple[Opener, str]]] = {
    "numpy": sys_numpy,
    "feedline": _feedline(None),
    "feedline-2threads": _feedline(2),
    "feedline-numpy-copies": _feedline(None, native=False),
    "torch-item": sys_torch_item,
    "torch-batch": sys_torch_batch,
    "hf": sys_hf,
    "grain-dl": sys_grain_dl,
    "grain-map": sys_grain_map,
    "streaming": sys_streaming,
    "litdata": _litdata(item_decode=False),
    "litdata-item": _litdata(item_decode=True),
}


def _as_numpy(a: Any) -> np.ndarray:
    return a.numpy() if hasattr(a, "numpy") and not isinstance(a, np.ndarray) else np.asarray(a)


def _settle() -> None:
    """Free what set-up left behind (garbage, glibc's free lists), so the baseline is not
    above what the loop later needs."""
    gc.collect()
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def measure(spec: dict) -> dict:
    make, note = SYSTEMS[spec["system"]](
        spec["dir"], spec["workload"], spec["n"], spec["batch"], spec["workers"]
    )
    cap = float(spec["cap_s"])
    _settle()
    base_kb = _status_kb(("RssAnon", "RssShmem"))
    base_rss_kb = _status_kb(("VmRSS",))
    base_hwm = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    emit("start", base_kb=base_kb, base_rss_kb=base_rss_kb)
    t0 = time.perf_counter()
    it = make()
    x, y = next(it)
    t1 = time.perf_counter()
    first = (tuple(x.shape), str(_as_numpy(x).dtype), str(_as_numpy(y).dtype))
    rows = len(y)
    label_sum = int(_as_numpy(y).sum())
    complete = True
    end = t1
    for _x, y in it:
        rows += len(y)
        label_sum += int(_as_numpy(y).sum())
        end = time.perf_counter()
        if end - t1 >= cap:
            complete = rows >= spec["n"]
            break
    end = time.perf_counter()
    close = getattr(it, "close", None)
    if close is not None:
        close()  # generators: closes the loaders inside (feedline's workers, torch's)
    # The steady state: another epoch in the same process, opened again (libraries'
    # kernels loaded, file pages mapped), for the systems whose first took under STEADY_S.
    steady = None
    if complete and end - t0 < STEADY_S:
        again = make()
        next(again)  # as the first pass's rate: the rows after the first batch
        s0 = time.perf_counter()
        rest = sum(len(y) for _x, y in again)
        steady = rest / (time.perf_counter() - s0)
    # the loop's last state, for runs too short for the driver's 20 ms sampling
    emit("end", anon_kb=_status_kb(("RssAnon", "RssShmem")), rss_kb=_status_kb(("VmRSS",)))
    hwm = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    first_rows = first[0][0]
    secs = end - t1
    kernels = sys.modules.get("feedline._base.kernels")
    if spec["system"].startswith("feedline") and kernels is not None:
        loaded = "k" in kernels._state and kernels._state["k"] is not None
        note = f"{note}; compiled kernels loaded by the end: {'yes' if loaded else 'no'}"
    result = {
        "first_s": t1 - t0,
        "rows": rows,
        "seconds": secs,
        "epoch_rate": rows / (end - t0) if complete else None,
        "steady_rate": steady,
        "rate": (rows - first_rows) / secs if secs > 0 and rows > first_rows else None,
        "complete": complete,
        "rows_ok": (rows == spec["n"]) if complete else None,
        "labels_ok": (label_sum == spec["label_sum"]) if complete else None,
        "first_shape": list(first[0]),
        "feat_dtype": first[1],
        "label_dtype": first[2],
        "hwm_growth_kb": hwm - base_hwm,
        "note": note,
    }
    return result


def child_main(spec_json: str) -> None:
    warnings.filterwarnings("ignore")
    spec = json.loads(spec_json)
    try:
        if spec["mode"] == "prep":
            t0 = time.perf_counter()
            note = prepare(spec["system"], spec["dir"], spec["workload"], spec["n"])
            emit("prepared", seconds=time.perf_counter() - t0, note=note)
        else:
            emit("result", **measure(spec))
    except Skip as e:
        emit("skip", reason=str(e))
    sys.stdout.flush()
