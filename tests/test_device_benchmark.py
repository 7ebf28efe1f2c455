"""The GPU benchmark (``benchmarks/device.py``, issue 20) is a prepared script for the
sessions that have a GPU: it must run there at the first try, so its smoke run on the
CPU is tested here (its figures are never asserted)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_the_device_benchmark_runs_its_three_measures_on_the_cpu():
    pytest.importorskip("torch")
    out = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "device.py"), "--device", "cpu", "--quick"],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.splitlines()
    assert lines[0].startswith("device cpu")
    measures = [line for line in lines[1:] if "first pass" in line and "baseline" in line]
    assert [m.split("  ")[0] for m in measures] == [
        "device-kept dataset (264-byte rows)",
        "host-to-device, .flr (264-byte rows)",
        "host-to-device images + Normalize",
    ]
    assert all(m.count("x)") == 2 for m in measures)  # each beside its baseline
