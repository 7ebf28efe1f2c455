"""Corrupted files: a sample of benchmarks/fuzz_formats.py's cases (it runs 100,000 per
format); every mutated file opens or raises FormatError, nothing else (fuzzing.py)."""

from __future__ import annotations

import pytest

from .fuzzing import sample

CASES = 600  # per format; about 0.2 s each


@pytest.mark.parametrize("fmt", ["ndf", "flr", "nndataset"])
def test_a_mutated_file_opens_or_is_a_format_error_naming_its_path_and_offset(fmt, tmp_path):
    counts, failures = sample(fmt, CASES, seed=8, directory=tmp_path)
    assert sum(counts.values()) == CASES
    assert [(seed, kind, repr(exc)) for seed, kind, exc in failures] == []
    assert counts["FormatError"] > counts["ok"]  # the mutations are mostly caught
