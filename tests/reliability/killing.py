"""kill -9 at random moments during a write of a ``.flr`` or a ``.nndataset``.

A writer runs in a child process (``child_main``: KIND TARGET SEED SIZE) that builds its
data, says "go", writes, and says "done". The parent waits for "go", sleeps a random
delay and sends SIGKILL. The target must then be the old file or
the complete new one (compared byte for byte with the same write done beforehand in
the parent), never partial.

What a killed writer leaves (``feedline/_base/files.py``, ``recfile._write_stream``): a
killed process runs no clean-up, so the atomic writer's temporary
``.<target>.<random>.tmp`` (created by ``tempfile.mkstemp`` beside the target) and, for a
streamed ``.flr``, one spool per field ``.<target>.<random>.<field>.spool`` may remain.
Their names start with a dot and the target's name; no reader opens them and a later
write to the target is not disturbed by them, but nothing removes them either.
``classify`` returns them so the callers can count and check them.
"""

from __future__ import annotations

import os
import re
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

import feedline as fl

ROOT = Path(__file__).resolve().parents[2]
KINDS = ("flr", "flr-stream", "nndataset")
# Rows (documents for .nndataset) of the new file; the old one has half. Sized so a write
# takes tens of milliseconds here: the kills land before, during and after it.
SIZES = {"flr": 150_000, "flr-stream": 20_000, "nndataset": 120}
# The child imports this module by its name, so its records are the parent's.
CHILD = "import sys; from tests.reliability.killing import child_main; child_main(sys.argv[1:])"


class Big(fl.Record, dims={"D": 64}):
    """64 features and a label."""

    x = fl.field("D", "float32")
    y = fl.field((), "int64")


def flr_columns(seed: int, rows: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "x": rng.standard_normal((rows, 64)).astype(np.float32),
        "y": np.arange(rows, dtype=np.int64) + seed,
    }


def nndataset_build(seed: int, docs: int) -> fl.nndataset.Build:
    rng = np.random.default_rng(seed)
    train = [rng.integers(0, 50_000, 20_000 + k) for k in range(docs)]
    return fl.nndataset.Build(
        {"tokens": 50_000, "name": "bytes", "ids": [1, 2, 3]},
        "corpus.txt",
        "ab" * 32,
        docs,
        train_docs=train,
        created=1,
    )


def prepare(kind: str, seed: int, size: int) -> Callable[[str | os.PathLike[str]], object]:
    """A function writing version ``seed`` of a file of ``kind``, ``size`` rows (or
    documents) long; the data are built here, so calling it is only the write."""
    if kind == "flr":
        data = flr_columns(seed, size)
        return lambda path: fl.recfile.write(path, Big, data)
    if kind == "flr-stream":  # items streamed through one spool per field
        cols = flr_columns(seed, size)
        return lambda path: fl.recfile.write(
            path, Big, ({"x": cols["x"][i], "y": cols["y"][i]} for i in range(size))
        )
    build = nndataset_build(seed, size)
    return lambda path: fl.nndataset.write(path, build)


def check_file(kind: str, path: Path) -> None:
    """Open the file and read it through (checksums for ``.flr``)."""
    if kind.startswith("flr"):
        with fl.recfile.open(path) as f:
            f.verify()
            f.getitems(np.array([0, len(f) - 1]))
    else:
        with fl.nndataset.open(path) as f:
            corpus = f.load_text("train")
            assert corpus.num_docs == f.info.num_docs


def leftover_pattern(target: Path) -> re.Pattern[str]:
    name = re.escape(target.name)
    return re.compile(rf"\.{name}\.[A-Za-z0-9_]+\.(tmp|[A-Za-z_]\w*\.spool)")


def child_main(argv: list[str]) -> None:
    kind, target, seed, size = argv[0], argv[1], int(argv[2]), int(argv[3])
    go = prepare(kind, seed, size)  # before "go": the kill lands in the write itself
    print("go", flush=True)
    t = time.perf_counter()
    go(target)
    print(f"done {time.perf_counter() - t:.6f}", flush=True)


@dataclass
class Outcome:
    killed: bool  # False: the writer finished and exited before the signal
    target: str  # "old", "new" or "absent"
    leftovers: list[str] = field(default_factory=list)
    leftover_bytes: int = 0


def _child(kind: str, target: Path, seed: int, size: int) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), *sys.path])}
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, kind, str(target), str(seed), str(size)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        cwd=ROOT,
    )
    ready, _, _ = select.select([proc.stdout], [], [], 60)
    line = proc.stdout.readline() if ready else b""
    if line.strip() != b"go":
        proc.kill()
        proc.wait()
        raise AssertionError(f"the writer did not start: {proc.stderr.read().decode()}")
    return proc


def _finish(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait()
    proc.stdout.close()
    proc.stderr.close()


def kill_writer(kind: str, target: Path, seed: int, size: int, delay: float) -> bool:
    """Run the writer in a child; SIGKILL it ``delay`` s after it starts writing.
    Returns whether the kill landed (else the child had already exited)."""
    proc = _child(kind, target, seed, size)
    try:
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
    finally:
        _finish(proc)
    return proc.returncode == -signal.SIGKILL


def child_write_time(kind: str, target: Path, seed: int, size: int) -> float:
    """How long the child's write takes when nothing kills it (the kills' delays are
    drawn over that time); the target is then the complete new file."""
    proc = _child(kind, target, seed, size)
    try:
        out, err = proc.communicate(timeout=120)
    finally:
        _finish(proc)
    if proc.returncode != 0 or not out.startswith(b"done "):
        raise AssertionError(f"the writer failed: {err.decode()}")
    return float(out.split()[1])


def classify(kind: str, target: Path, old: bytes | None, new: bytes, killed: bool) -> Outcome:
    """What a kill left; raises AssertionError if the target is partial or a stray file
    is not one of the writer's own temporaries."""
    names = sorted(n for n in os.listdir(target.parent) if n != target.name)
    pattern = leftover_pattern(target)
    strays = [n for n in names if not pattern.fullmatch(n)]
    assert not strays, f"files that are not the writer's temporaries: {strays}"
    if not target.exists():
        assert old is None, "the old file vanished"
        state = "absent"
    else:
        data = target.read_bytes()
        if data == new:
            state = "new"
        else:
            assert data == old, (
                f"the target is partial: {len(data)} bytes, neither the old "
                f"({None if old is None else len(old)}) nor the new "
                f"({len(new)}) file"
            )
            state = "old"
        check_file(kind, target)
    if not killed:
        assert state == "new" and not names, "a writer that finished left temporaries"
    size = sum((target.parent / n).stat().st_size for n in names)
    return Outcome(killed, state, names, size)


def remove_leftovers(outcome: Outcome, directory: Path) -> None:
    for name in outcome.leftovers:
        (directory / name).unlink()


def reference(kind: str, directory: Path, seed: int, size: int) -> bytes:
    """The bytes of version ``seed``, written here."""
    path = directory / f"reference.{kind}"
    prepare(kind, seed, size)(path)
    data = path.read_bytes()
    path.unlink()
    return data
