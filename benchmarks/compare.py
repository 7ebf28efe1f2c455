"""feedline beside other data loaders, in one run on this machine.

Two workloads on local disk (a temporary directory; the page cache warm: each file's
pages dropped once after it is written and read back, so that all are cached alike,
``warm``), read in shuffled batches:

- A: 4,000,000 examples of 64 float32 and an int64 label, batches of 512;
- B: 500,000 32x32x3 uint8 images and an int64 label, batches of 256.

Systems (``--only`` takes these names, comma-separated):

- ``numpy``: the bare baseline, always run: ``np.take(..., out=..., mode="clip")`` from
  the memory-mapped ``.npy`` files into preallocated arrays, with a permutation computed
  before the loop;
- ``feedline``: ``fl.Loader(fl.recfile.open(path), batch, seed=1, workers=0 or 2)`` at
  its defaults (two gather threads while a core is spare, ``default_threads``);
  ``feedline-2threads``: the same with ``threads=2`` (a helper thread gathers chunks of
  batches ahead whatever the load); ``feedline-numpy-copies``: the default with
  ``FEEDLINE_NATIVE=0`` (chunks taken by numpy on Python threads, as where the compiled
  row copies are not built: the design before them);
- ``torch-item``: ``torch.utils.data.DataLoader`` over a map-style dataset that returns
  one example from the memory maps, default collate, ``shuffle=True``, 0 and 2 workers;
- ``torch-batch``: the same DataLoader with ``batch_size=None`` and
  ``sampler=BatchSampler(RandomSampler(ds))``; ``__getitem__`` gathers a list of indices;
- ``hf``: HuggingFace ``datasets`` saved with ``save_to_disk``, ``load_from_disk``,
  ``with_format("numpy")`` and ``ds[indices]`` for each shuffled batch of indices;
- ``grain-dl``: ``grain.python.DataLoader`` with an ``IndexSampler(shuffle=True)`` and a
  ``Batch`` operation over a data source reading the memory maps (``worker_count`` 0, 2);
- ``grain-map``: ``grain.python.MapDataset.source(...).shuffle(seed).batch(b)``; with 2
  workers, ``.to_iter_dataset().mp_prefetch(...)``;
- ``streaming``: Mosaic Streaming, MDS shards written with ``MDSWriter``, read with
  ``StreamingDataset(shuffle=True)`` and a torch ``DataLoader`` (0 and 2 workers);
- ``litdata``: LitData, written with ``litdata.optimize``, read with
  ``StreamingDataset(shuffle=True)`` and ``StreamingDataLoader`` (0 and 2 workers), at
  its defaults; ``litdata-item``: the same with ``batch_decode=0`` (decode only the
  requested item: the default's 256-item decode windows collapse with 2 workers here).

Every system and worker count runs in a fresh child process (see ``_compare_systems.py``)
for one epoch, or until ``--cap`` seconds have passed after its first batch; the systems
whose epoch is short run ``--repeat`` times, in rounds over those systems, and the
table shows each one's median run. Figures:

- vs numpy gather: for systems run in rounds, the median over the rounds of the rate
  over numpy's in the same round (runs a few seconds apart, where this machine's drift
  over minutes cancels); otherwise the rate over numpy's median;

- samples/s, first pass: the rows after the first batch over the time after it, in the
  fresh process's first epoch, as a user's job or benchmark runs it (nothing of the
  library's is loaded or warmed before the clock);
- steady state: a second epoch in the same process (the data opened again, whatever the
  library loads on first use loaded; the rows after its first batch over the time after
  it), for the systems whose first epoch took under ``STEADY_S`` (10 s); "first pass /
  steady" is their ratio;
- machine limit: ``shared/tools/gather_limit.c``, compiled and run in the same run on the
  workload's rows, row size and batch size: random rows copied into a batch buffer by one
  thread and by two, in C (best of 5) - what no loader on this machine can beat;
- time to the first batch: from opening the stored data (libraries already imported) to
  holding the first batch; for numpy it includes computing the permutation;
- peak memory growth: the largest value, while the loop runs, of the child's RssAnon +
  RssShmem plus its worker processes' Private_Dirty (sampled from this process, the child
  every 20 ms), less the child's RssAnon + RssShmem before it opened the data: what the
  loader and its workers allocate, not the file pages they map (those are page cache),
  and not the pages forked workers share with their parent;
- main RSS growth: the peak of the child's VmRSS (sampled likewise) less its VmRSS before
  it opened the data; this one counts the file pages the child maps (a memory-mapped
  reader that touches the whole file shows the file's size here; one whose workers read
  shows little). The child also reports its ``ru_maxrss`` growth in its JSON result, but
  that high-water mark hides growth below the peak its imports already set.

Optional systems that are not installed or fail at import are skipped with the reason.

    python benchmarks/compare.py [--quick] [--only feedline,torch-batch] [--cap 15]
                                 [--workloads A,B] [--markdown results.md] [--dir /tmp]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import _compare_limits as limits  # noqa: E402
import _compare_systems as cs  # noqa: E402

import feedline as fl  # noqa: E402

WORKLOADS = {
    "A": {
        "n": 4_000_000,
        "batch": 512,
        "title": "4,000,000 examples of 64 float32 + an int64 label, batches of 512",
        "row_bytes": 264,
    },
    "B": {
        "n": 500_000,
        "batch": 256,
        "title": "500,000 32x32x3 uint8 images + an int64 label, batches of 256",
        "row_bytes": 3080,
    },
}

# (system, workers) in the order they run; numpy first, as the reference.
RUNS = [
    ("numpy", 0),
    ("feedline", 0),
    ("feedline", 2),
    ("feedline-2threads", 0),
    ("feedline-numpy-copies", 0),
    ("torch-batch", 0),
    ("torch-batch", 2),
    ("torch-item", 0),
    ("torch-item", 2),
    ("hf", 0),
    ("grain-dl", 0),
    ("grain-dl", 2),
    ("grain-map", 0),
    ("grain-map", 2),
    ("streaming", 0),
    ("streaming", 2),
    ("litdata", 0),
    ("litdata", 2),
    ("litdata-item", 0),
    ("litdata-item", 2),
]
NEEDS_PREP = {"hf", "streaming", "litdata"}
PREP_OF = {"litdata-item": "litdata"}  # systems that read another system's format
STORES = {
    "feedline": ["data.flr"],
    "feedline-2threads": ["data.flr"],
    "feedline-numpy-copies": ["data.flr"],
    "hf": ["hf"],
    "streaming": ["mds"],
    "litdata": ["lit"],
    "litdata-item": ["lit"],
}
LABELS = {
    "numpy": "numpy memmap gather (np.take, preallocated)",
    "feedline": "feedline Loader over .flr",
    "feedline-2threads": "feedline Loader over .flr, threads=2",
    "feedline-numpy-copies": "feedline Loader over .flr, numpy's takes (FEEDLINE_NATIVE=0)",
    "torch-item": "torch DataLoader, per-item Dataset",
    "torch-batch": "torch DataLoader, BatchSampler",
    "hf": "HF datasets (arrow, numpy format, ds[idx])",
    "grain-dl": "grain DataLoader + IndexSampler",
    "grain-map": "grain MapDataset .shuffle().batch()",
    "streaming": "Mosaic Streaming (MDS) + torch DataLoader",
    "litdata": "LitData StreamingDataLoader",
    "litdata-item": "LitData StreamingDataLoader, batch_decode=0",
}
ALIASES = {
    "grain": ["grain-dl", "grain-map"],
    "torch": ["torch-item", "torch-batch"],
    "lit": ["litdata", "litdata-item"],
    "mosaic": ["streaming"],
    "datasets": ["hf"],
    "fl": ["feedline", "feedline-2threads", "feedline-numpy-copies"],
}

FAST_S = 5.0  # a full epoch faster than this is measured --repeat times

BOOT = (
    "import sys; sys.path.insert(0, {here!r}); import _compare_systems as m; "
    "m.child_main(sys.argv[1])"
)


# ---------------------------------------------------------------------------------------
# Memory of a process tree, sampled from outside (no thread in the measured process).


def _ppids() -> dict[int, int]:
    out = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat", "rb") as f:
                    s = f.read()
                out[int(d)] = int(s[s.rfind(b")") + 2 :].split()[1])
            except (OSError, ValueError, IndexError):
                pass
    return out


def _tree(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for pid, ppid in _ppids().items():
        children.setdefault(ppid, []).append(pid)
    out, todo = [], [root]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, []))
    return out


def _status_kb(pid: int) -> tuple[int, int] | None:
    """(RssAnon + RssShmem, VmRSS) of ``pid`` in kB (cheap: /proc/PID/status)."""
    anon = rss = 0
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                key, _, rest = line.partition(":")
                if key in ("RssAnon", "RssShmem"):
                    anon += int(rest.split()[0])
                elif key == "VmRSS":
                    rss = int(rest.split()[0])
    except (OSError, ValueError):
        return None
    return anon, rss


def _private_kb(pid: int) -> int | None:
    """Private_Dirty of ``pid`` (/proc/PID/smaps_rollup): what a worker allocated itself,
    not the pages it shares copy-on-write with the process that forked it."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Private_Dirty:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


class TreeSampler(threading.Thread):
    """Samples, while ``active`` is set, the measured process's RssAnon + RssShmem (every
    20 ms) plus its descendants' Private_Dirty (each read costs a page-table walk, so a
    descendant is read at most every 50x that read's cost, and at least every 50 ms).
    Summing the workers' RssAnon instead would count the parent's heap once per forked
    worker."""

    def __init__(self, root: int, interval: float = 0.02) -> None:
        super().__init__(daemon=True)
        self.root, self.interval = root, interval
        self.active = threading.Event()
        self.stopped = threading.Event()
        self.peak_kb = 0
        self.peak_rss_kb = 0
        self.max_workers = 0
        self.workers: dict[int, int] = {}

    def note_main(self, anon_kb: int, rss_kb: int) -> None:
        """Count a reading of the measured process's own (sent at the loop's end)."""
        self.peak_kb = max(self.peak_kb, anon_kb + sum(self.workers.values()))
        self.peak_rss_kb = max(self.peak_rss_kb, rss_kb)

    def run(self) -> None:
        workers = self.workers
        due: dict[int, float] = {}
        rescan = 0.0
        while not self.stopped.is_set():
            if self.active.is_set():
                now = time.monotonic()
                if now >= rescan:
                    alive = set(_tree(self.root)) - {self.root}
                    for pid in set(workers) - alive:
                        del workers[pid]
                    for pid in alive:
                        due.setdefault(pid, 0.0)
                    for pid in set(due) - alive:
                        del due[pid]
                    self.max_workers = max(self.max_workers, len(alive))
                    rescan = now + 0.2
                for pid, at in list(due.items()):
                    if now >= at:
                        t = time.perf_counter()
                        kb = _private_kb(pid)
                        if kb is not None:
                            workers[pid] = kb
                        due[pid] = now + max(0.05, 50 * (time.perf_counter() - t))
                main = _status_kb(self.root)
                if main is not None:
                    self.peak_kb = max(self.peak_kb, main[0] + sum(workers.values()))
                    self.peak_rss_kb = max(self.peak_rss_kb, main[1])
            self.stopped.wait(self.interval)


# ---------------------------------------------------------------------------------------
# Children.


@dataclass
class Outcome:
    system: str
    workers: int
    result: dict | None = None
    skip: str | None = None
    error: str | None = None
    peak_kb: int | None = None
    max_workers: int = 0
    peak_rss_kb: int | None = None
    base_kb: int | None = None
    base_rss_kb: int | None = None
    log: list[str] = field(default_factory=list)
    rates: list[float] = field(default_factory=list)
    steady: list[float] = field(default_factory=list)  # the runs' second epochs
    paired: list[float] = field(default_factory=list)  # over numpy's rate, round by round


def run_child(spec: dict, timeout: float, sample: bool, tmp: str) -> Outcome:
    env = dict(os.environ)
    env["TMPDIR"] = tmp
    env["PYTHONPATH"] = HERE + os.pathsep + env.get("PYTHONPATH", "")
    env.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")
    proc = subprocess.Popen(
        [sys.executable, "-c", BOOT.format(here=HERE), json.dumps(spec)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        start_new_session=True,
        bufsize=1,
        errors="replace",
    )
    out = Outcome(spec["system"], spec.get("workers", 0))
    sampler = TreeSampler(proc.pid)
    if sample:
        sampler.start()
    killer = threading.Timer(timeout, _kill_group, (proc,))
    killer.start()
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            if not line.startswith("@@CMP "):
                out.log.append(line.rstrip("\n"))
                continue
            msg = json.loads(line[6:])
            ev = msg.pop("event")
            if ev == "start":
                out.base_kb, out.base_rss_kb = msg["base_kb"], msg["base_rss_kb"]
                sampler.active.set()
            elif ev == "end":
                sampler.active.clear()
                sampler.note_main(msg["anon_kb"], msg["rss_kb"])
            elif ev in ("result", "prepared"):
                out.result = msg
            elif ev == "skip":
                out.skip = msg["reason"]
        # the measurement is in; give the child a while to wind down, then end it
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            proc.wait()
    finally:
        killer.cancel()
        sampler.stopped.set()
    if sample:
        sampler.join()
        out.peak_kb = sampler.peak_kb
        out.max_workers = sampler.max_workers
        out.peak_rss_kb = sampler.peak_rss_kb
    if out.result is None and out.skip is None:
        tail = [s for s in out.log if s.strip()][-1:] or [f"exit status {proc.returncode}"]
        out.error = (
            f"timed out after {timeout:.0f} s"
            if proc.returncode in (-9, 137)
            else tail[0].strip()[:300]
        )
    return out


def _kill_group(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, 9)  # the child's own session: it and its workers only


# ---------------------------------------------------------------------------------------
# Data.


def make_workload(wdir: str, name: str, n: int) -> int:
    """Write the workload's .npy columns and its .flr; returns the labels' sum."""
    rng = np.random.default_rng(0)
    feat, shape, dtype, label = cs.LAYOUTS[name]
    y = rng.integers(0, 10, n, dtype=np.int64)
    x = np.empty((n, *shape), dtype)
    step = 1 << 16
    for s in range(0, n, step):
        k = min(step, n - s)
        if dtype == "float32":
            x[s : s + k] = rng.standard_normal((k, *shape), dtype=np.float32)
        else:
            x[s : s + k] = rng.integers(0, 256, (k, *shape), dtype=np.uint8)
    np.save(os.path.join(wdir, f"{feat}.npy"), x)
    np.save(os.path.join(wdir, f"{label}.npy"), y)
    fl.recfile.write(os.path.join(wdir, "data.flr"), cs.RECORDS[name], {feat: x, label: y})
    return int(y.sum())


# Files whose pages were dropped once and read back (``warm``).
_REREAD: set[str] = set()


def warm(path: str) -> None:
    """Read every file under ``path`` once, so its pages are in the page cache; the first
    time, after dropping the pages its writer left there, so that every system's files
    are cached alike, as read back from the disk.

    A file's cached pages keep the shape its writer gave them (this machine's kernel
    caches a file in large folios, their sizes set by the writes or by the read-ahead),
    and a fresh memory map's page faults cost by that shape: numpy's one-thread gather
    from the .npy that numpy wrote ran 1.21x slower than the same gather from the same
    bytes in the .flr (fresh processes, 8 rounds, B), and 1.02x once both were dropped
    and read back.
    """
    files = (
        [path]
        if os.path.isfile(path)
        else [os.path.join(d, f) for d, _, fs in os.walk(path) for f in fs]
    )
    buf = bytearray(1 << 24)
    for p in files:
        if p not in _REREAD and hasattr(os, "posix_fadvise"):
            _REREAD.add(p)
            fd = os.open(p, os.O_RDONLY)
            try:
                os.fsync(fd)  # written back first: only clean pages are dropped
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            except OSError:
                pass  # kept as written: the table's note says nothing else then
            finally:
                os.close(fd)
        with open(p, "rb", buffering=0) as f:
            while f.readinto(buf):
                pass


# ---------------------------------------------------------------------------------------
# Tables.


def _rate(r: float | None) -> str:
    if r is None:
        return "—"
    return f"{r / 1e6:.2f} M" if r >= 1e6 else f"{r / 1e3:.1f} k"


def _secs(s: float) -> str:
    return f"{s * 1e3:.1f} ms" if s < 1 else f"{s:.2f} s"


def _mb(kb: float | None) -> str:
    return "—" if kb is None else f"{kb / 1024:+.1f} MB"


def table(outcomes: list[Outcome]) -> list[str]:
    base = next(
        (
            o.result["rate"]
            for o in outcomes
            if o.system == "numpy" and o.result and o.result.get("rate")
        ),
        None,
    )
    lines = [
        "| system | workers | samples/s, first pass | vs numpy gather | steady state "
        "(2nd epoch) | first pass / steady | first batch | peak memory growth | "
        "main RSS growth (incl. file pages) | measured over |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for o in outcomes:
        name = LABELS[o.system]
        if o.skip or o.error:
            why = f"skipped: {o.skip}" if o.skip else f"failed: {o.error}"
            lines.append(
                f"| {name} | {o.workers} | — | — | — | — | — | — | — | {why.replace('|', '/')} |"
            )
            continue
        r = o.result or {}
        rate = r.get("rate")
        ratio = "—"
        if len(o.paired) > 1:  # rounds: the median of the ratios within each round
            ratio = f"{sorted(o.paired)[len(o.paired) // 2]:.2f}x"
        elif rate and base:
            ratio = f"{rate / base:.2f}x" if rate >= 0.1 * base else f"{rate / base:.2g}x"
        growth = rss = None
        if o.peak_kb and o.base_kb is not None:
            growth = o.peak_kb - o.base_kb
        if o.peak_rss_kb and o.base_rss_kb is not None:
            rss = o.peak_rss_kb - o.base_rss_kb
        if not r["complete"]:
            over = f"{r['seconds']:.1f} s ({r['rows']:,} samples)"
        elif len(o.rates) > 1:
            over = (
                f"one epoch; median of {len(o.rates)} runs "
                f"({_rate(o.rates[0])} - {_rate(o.rates[-1])})"
            )
            if len(o.paired) > 1 and o.system != "numpy":
                p = sorted(o.paired)
                over += f"; ratio within a round {p[0]:.2f} - {p[-1]:.2f}x"
        else:
            over = "one epoch"
        steady = _median([t for t in o.steady if t])
        warm = f"{rate / steady:.2f}x" if rate and steady else "—"
        lines.append(
            f"| {name} | {o.workers} | {_rate(rate)} | {ratio} | {_rate(steady)} | {warm} | "
            f"{_secs(r['first_s'])} | {_mb(growth)} | "
            f"{_mb(rss)} | {over} |"
        )
    return lines


def _median(xs: list[float]) -> float | None:
    return sorted(xs)[len(xs) // 2] if xs else None


def limit_rows(limit: dict | None, why: str, base: float | None) -> list[str]:
    """The machine's one- and two-thread gather limits as rows of the table."""
    if limit is None:
        return [f"| machine limit (gather_limit.c) | — | — | — | — | — | — | — | — | {why} |"]
    rows = []
    for threads, rate in ((1, limit["one"]), (limit["threads"], limit["two"])):
        ratio = f"{rate / base:.2f}x" if base else "—"
        rows.append(
            f"| machine limit: C gather, {threads} thread{'s' if threads > 1 else ''} "
            f"| — | {_rate(rate)} | {ratio} | — | — | — | — | — | best of 5 ({why}) |"
        )
    return rows


def notes_for(name: str, outcomes: list[Outcome]) -> list[str]:
    _, shape, dtype, _ = cs.LAYOUTS[name]
    notes: list[str] = []
    said: dict[str, list[str]] = {}  # a system's note (the first run's) -> the systems
    noted: set[str] = set()
    for o in outcomes:
        r = o.result
        if not r:
            continue
        tag = f"{o.system} (workers={o.workers})"
        text = r.get("note")
        if text and o.system not in noted:
            noted.add(o.system)
            if text in said:
                said[text].append(o.system)
            else:
                said[text] = [o.system]
                notes.append(text)
        if o.workers and not o.max_workers:
            notes.append(f"{tag}: no worker process was seen")
        if r["feat_dtype"] != dtype:
            notes.append(f"{tag}: features delivered as {r['feat_dtype']}, not {dtype}")
        if r["label_dtype"] != "int64":
            notes.append(f"{tag}: labels delivered as {r['label_dtype']}")
        if tuple(r["first_shape"][1:]) != shape:
            notes.append(f"{tag}: first batch shaped {r['first_shape']}")
        if r["complete"] and not (r["rows_ok"] and r["labels_ok"]):
            notes.append(
                f"{tag}: CHECK FAILED: {r['rows']:,} rows, labels' sum "
                f"{'matches' if r['labels_ok'] else 'differs'}"
            )
    return [f"{', '.join(said[s])}: {s}" if s in said else s for s in notes]


# ---------------------------------------------------------------------------------------


def _size(path: str) -> int:
    if os.path.isfile(path):
        return os.path.getsize(path)
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)


def run_workload(
    name: str,
    n: int,
    b: int,
    wdir: str,
    runs: list[tuple[str, int]],
    cap: float,
    repeat: int,
    tmp: str,
) -> tuple[list[Outcome], list[str]]:
    """Write the workload, then each system's format and measure it; returns the outcomes
    and the notes on the formats (sizes on disk, how they were written)."""
    t0 = time.perf_counter()
    label_sum = make_workload(wdir, name, n)
    feat, _, _, label = cs.LAYOUTS[name]
    npy = _size(os.path.join(wdir, f"{feat}.npy")) + _size(os.path.join(wdir, f"{label}.npy"))
    flr = _size(os.path.join(wdir, "data.flr"))
    sizes = [f".npy {npy / 1e9:.2f} GB", f".flr {flr / 1e9:.2f} GB"]
    print(
        f"\n== {name}: {n:,} rows written (.npy and .flr) in {time.perf_counter() - t0:.1f} s",
        flush=True,
    )
    prepared: dict[str, Outcome] = {}
    tries: dict[tuple[str, int], list[Outcome]] = {}
    skipped: dict[tuple[str, int], Outcome] = {}

    def measure(system: str, workers: int) -> Outcome:
        spec = {
            "mode": "measure",
            "system": system,
            "workers": workers,
            "dir": wdir,
            "workload": name,
            "n": n,
            "batch": b,
            "cap_s": cap,
            "label_sum": label_sum,
        }
        for store in STORES.get(system, [f"{feat}.npy", f"{label}.npy"]):
            warm(os.path.join(wdir, store))
        o = run_child(spec, cap + 240, sample=True, tmp=tmp)
        r = o.result
        msg = (
            f"skipped: {o.skip}"
            if o.skip
            else f"FAILED: {o.error}"
            if o.error
            else f"{_rate(r['rate'])} samples/s, first batch {_secs(r['first_s'])}"
            + ("" if r["complete"] else f" ({r['seconds']:.1f} s)")
        )
        print(f"   {system:<12} workers={workers}: {msg}", flush=True)
        if o.error:
            print("\n".join("     | " + s for s in o.log[-15:]), flush=True)
        tries.setdefault((system, workers), []).append(o)
        return o

    for system, workers in runs:
        fmt = PREP_OF.get(system, system)
        if fmt in NEEDS_PREP and fmt not in prepared:
            t0 = time.perf_counter()
            prep = run_child(
                {"mode": "prep", "system": fmt, "dir": wdir, "workload": name, "n": n},
                900,
                sample=False,
                tmp=tmp,
            )
            prepared[fmt] = prep
            secs = time.perf_counter() - t0
            what = (
                f"skipped: {prep.skip}"
                if prep.skip
                else f"FAILED: {prep.error}"
                if prep.error
                else f"written in {secs:.1f} s"
            )
            print(f"   {fmt} format {what}", flush=True)
            if prep.error:
                print("\n".join("     | " + s for s in prep.log[-15:]), flush=True)
            if prep.result:
                store = os.path.join(wdir, STORES[fmt][0])
                sizes.append(f"{fmt} {_size(store) / 1e9:.2f} GB (written in {secs:.0f} s)")
        prep = prepared.get(fmt)
        if prep is not None and (prep.skip or prep.error):
            skipped[(system, workers)] = Outcome(
                system, workers, skip=prep.skip, error=prep.error and f"writing: {prep.error}"
            )
            continue
        measure(system, workers)

    # A fast full epoch is noisy: the systems whose epoch took under FAST_S run again, a
    # fresh process each time, in rounds (numpy, feedline, ..., numpy, feedline, ...), so
    # that this machine's drift over minutes falls on every system alike. Every other
    # round runs them in the reverse order (... feedline, numpy; numpy, feedline ...):
    # a run's place in a round moved its rate by up to 15% on this kind of machine (the
    # run before it leaves the caches and the page cache's state behind), and so each
    # system's median is taken over both places alike.
    def fast(o: Outcome) -> bool:
        r = o.result
        return bool(r and r["complete"] and r["rate"] and r["seconds"] < FAST_S)

    for r in range(repeat - 1):
        keys = [k for k, ts in tries.items() if fast(ts[0])]
        for key in keys[::-1] if r % 2 == 0 else keys:
            measure(*key)

    outcomes: list[Outcome] = []
    for key in runs:
        if key in skipped:
            outcomes.append(skipped[key])
            continue
        got = tries[key]
        good = sorted(
            (t for t in got if t.result and t.result["rate"]), key=lambda t: t.result["rate"]
        )
        chosen = good[len(good) // 2] if good else got[-1]  # the median run
        chosen.rates = [t.result["rate"] for t in good]
        chosen.steady = [t.result.get("steady_rate") for t in good if t.result.get("steady_rate")]
        base = tries.get(("numpy", 0), [])
        if len(got) == len(base) > 1:
            rounds = list(zip(got, base))
            chosen.paired = [
                t.result["rate"] / u.result["rate"]
                for t, u in rounds
                if t.result and t.result["rate"] and u.result and u.result["rate"]
            ]
        outcomes.append(chosen)
    return outcomes, sizes


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--quick", action="store_true", help="a smoke run: 1/20 of the data and a 3 s cap"
    )
    p.add_argument(
        "--only",
        default="",
        help="comma-separated systems (numpy always runs): "
        + ", ".join(cs.SYSTEMS)
        + "; or "
        + ", ".join(ALIASES),
    )
    p.add_argument("--workloads", default="A,B", help="A, B or A,B")
    p.add_argument(
        "--cap",
        type=float,
        default=None,
        help="seconds to measure after the first batch (default 12; quick: 3)",
    )
    p.add_argument(
        "--repeat",
        type=int,
        default=None,
        help=f"fresh runs of a system whose epoch takes under {FAST_S:g} s; "
        "the table shows the median (default 3; quick: 1)",
    )
    p.add_argument("--markdown", metavar="FILE", help="also write the tables here")
    p.add_argument("--dir", default=None, help="where to make the temporary directory")
    p.add_argument("--keep", action="store_true", help="keep the written files")
    args = p.parse_args(argv)

    chosen: list[str] = []
    for s in filter(None, (t.strip() for t in args.only.split(","))):
        for nm in ALIASES.get(s, [s]):
            if nm not in cs.SYSTEMS:
                p.error(f"unknown system {s!r}; choose from {', '.join(cs.SYSTEMS)}")
            chosen.append(nm)
    runs = [r for r in RUNS if not chosen or r[0] in chosen or r[0] == "numpy"]
    workloads = [w.strip() for w in args.workloads.split(",") if w.strip()]
    for w in workloads:
        if w not in WORKLOADS:
            p.error(f"unknown workload {w!r}")
    cap = args.cap if args.cap is not None else (3.0 if args.quick else 12.0)
    scale = 20 if args.quick else 1
    repeat = args.repeat if args.repeat is not None else (1 if args.quick else 3)

    t_all = time.perf_counter()
    header = (
        f"feedline {getattr(fl, '__version__', '?')} beside other loaders: "
        f"{os.cpu_count()} CPUs, Python {platform.python_version()}, numpy "
        f"{np.__version__}, {time.strftime('%Y-%m-%d %H:%M')}; cap {cap:g} s after "
        f"the first batch" + (" (--quick: 1/20 of the data)" if args.quick else "")
    )
    print(header, flush=True)
    md: list[str] = ["# feedline beside other loaders", "", header, ""]
    root = tempfile.mkdtemp(prefix="feedline-compare-", dir=args.dir)
    tmp = os.path.join(root, "tmp")  # the children's TMPDIR (lock files, spools)
    os.makedirs(tmp)
    exe, built = limits.build(root)
    try:
        for name in workloads:
            wl = WORKLOADS[name]
            n, b = wl["n"] // scale, wl["batch"]
            wdir = os.path.join(root, name)
            os.makedirs(wdir)
            outcomes, sizes = run_workload(name, n, b, wdir, runs, cap, repeat, tmp)
            title = wl["title"] if scale == 1 else f"{n:,} rows (quick), batches of {b}"
            limit = limits.measure(exe, n, wl["row_bytes"], b) if exe else None
            if limit:
                print(f"   machine limit: {limit['line']}", flush=True)
            base = next(
                (o.result["rate"] for o in outcomes if o.system == "numpy" and o.result), None
            )
            rows = [*table(outcomes), *limit_rows(limit, built, base)]
            lines = [f"## {name}: {title}", "", *rows, ""]
            notes = [f"on disk: {', '.join(sizes)}", *notes_for(name, outcomes)]
            lines += ["Notes:", "", *[f"- {s}" for s in notes], ""]
            print("\n" + "\n".join(lines), flush=True)
            md += lines
            if not args.keep:
                shutil.rmtree(wdir, ignore_errors=True)
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
        else:
            print(f"files kept in {root}")
    total = time.perf_counter() - t_all
    tail = f"Total run time: {total / 60:.1f} min ({total:.0f} s)."
    print(tail)
    md += [tail, ""]
    if args.markdown:
        with open(args.markdown, "w", encoding="utf-8") as f:
            f.write("\n".join(md))
    return 0


if __name__ == "__main__":
    sys.exit(main())
