"""Ranks under a real ``torchrun`` (gloo on CPU): disjoint, complete, elastic resume."""

from __future__ import annotations

import contextlib
import glob
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("torch.distributed")

JOB = Path(__file__).with_name("_torchrun_job.py")
N = 203


def torchrun(out: Path, nproc: int, mode: str) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join(sys.path)}
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc_per_node={nproc}",
        str(JOB),
        str(out),
        mode,
    ]
    return subprocess.Popen(
        cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True
    )


def kill(proc: subprocess.Popen, out: Path) -> bytes:
    """SIGKILL the job: torchrun and its ranks (each rank runs in a session of its own and
    wrote its pid), as a preemption would; returns torchrun's output."""
    for f in glob.glob(str(out / "pid-*.json")):
        with contextlib.suppress(ProcessLookupError):
            os.kill(json.loads(Path(f).read_text()), signal.SIGKILL)
        os.remove(f)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    return proc.communicate()[0]


def finish(proc: subprocess.Popen, out: Path, timeout: float = 120) -> None:
    try:
        output, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        output = kill(proc, out)
        pytest.fail(f"torchrun did not finish:\n{output.decode()[-3000:]}")
    assert proc.returncode == 0, output.decode()[-3000:]


def results(out: Path, mode: str) -> list[dict]:
    files = sorted(glob.glob(str(out / f"{mode}-*.json")))
    return [json.loads(Path(f).read_text()) for f in files]


def test_two_ranks_under_torchrun_read_one_pass_exactly_once(tmp_path):
    finish(torchrun(tmp_path, 2, "full"), tmp_path)
    ranks = results(tmp_path, "full")
    assert len(ranks) == 2
    a, b = (set(r["seen"]) for r in ranks)
    assert not a & b
    assert sorted(ranks[0]["seen"] + ranks[1]["seen"]) == list(range(N))
    # even=True: both ranks took the same steps (the all-reduce never hung)
    assert ranks[0]["steps"] == ranks[1]["steps"] and ranks[0]["total"] == N


def test_a_killed_job_resumes_with_another_number_of_ranks_exactly_once(tmp_path):
    proc = torchrun(tmp_path, 2, "stop:5")
    deadline = time.monotonic() + 120
    while len(glob.glob(str(tmp_path / "ready-*.json"))) < 2:
        if proc.poll() is not None or time.monotonic() > deadline:
            output = kill(proc, tmp_path)
            pytest.fail(f"the job never reached its checkpoint:\n{output.decode()[-3000:]}")
        time.sleep(0.1)
    kill(proc, tmp_path)  # a preemption: no clean shutdown
    before = [
        x
        for f in sorted(glob.glob(str(tmp_path / "before-*.json")))
        for x in json.loads(Path(f).read_text())
    ]
    assert len(before) == 2 * 5 * 8
    finish(torchrun(tmp_path, 3, "resume"), tmp_path)
    after = [x for r in results(tmp_path, "resume") for x in r["seen"]]
    assert len(results(tmp_path, "resume")) == 3
    assert sorted(before + after) == list(range(N))
