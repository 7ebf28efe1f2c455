"""Corrupted files: a sample of benchmarks/fuzz_formats.py's cases (it runs 100,000 per
format); every mutated file opens or raises FormatError, nothing else (fuzzing.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from .fuzzing import sample

CASES = 600  # per format; about 0.2 s each


@pytest.mark.parametrize("fmt", ["ndf", "flr", "nndataset"])
def test_a_mutated_file_opens_or_is_a_format_error_naming_its_path_and_offset(fmt, tmp_path):
    counts, failures = sample(fmt, CASES, seed=8, directory=tmp_path)
    assert sum(counts.values()) == CASES
    assert [(seed, kind, repr(exc)) for seed, kind, exc in failures] == []
    assert counts["FormatError"] > counts["ok"]  # the mutations are mostly caught


FS_SCRIPT = textwrap.dedent("""
    import collections, pathlib, sys, tempfile
    sys.path.insert(0, sys.argv[1])
    from tests.reliability.fuzzing import sample
    fmt = sys.argv[2]
    by_kind = collections.Counter()
    with tempfile.TemporaryDirectory() as d:
        counts, failures = sample(fmt, 300, seed=9, directory=pathlib.Path(d), fs_share=1.0,
                                  by_kind=by_kind)
    assert not failures, [(s, k, repr(e)) for s, k, e in failures[:5]]
    for kind in ("fs:fifo", "fs:directory"):  # never opened, never waited on
        assert by_kind[kind, "ok"] == 0 and by_kind[kind, "FormatError"] > 0, by_kind
    assert by_kind["fs:truncate-open", "FormatError"] > 0, by_kind
    print("ok", sum(counts.values()))
""")


@pytest.mark.parametrize("fmt", ["ndf", "flr", "nndataset"])
def test_the_file_system_around_a_file_never_blocks_or_kills_a_reader(fmt):
    # in a child: a reader of a file truncated under it could die of SIGBUS, and a FIFO
    # could block it, which would take the test run with it
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.run(
        [sys.executable, "-c", FS_SCRIPT, root, fmt],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0 and proc.stdout.split() == ["ok", "300"], (
        proc.returncode,
        proc.stderr[-3000:],
    )
