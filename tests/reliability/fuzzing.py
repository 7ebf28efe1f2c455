"""The format fuzzer of ``benchmarks/fuzz_formats.py``, reused (not copied) by this suite.

``fuzz_formats()`` imports the script as a module; ``sample`` runs some of its cases
(each a valid file mutated, written and opened: "ok", "FormatError", or "other", a bug).
"""

from __future__ import annotations

import importlib.util
import signal
import sys
from collections import Counter
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]


def fuzz_formats() -> ModuleType:
    """``benchmarks/fuzz_formats.py`` as the module ``fuzz_formats``."""
    module = sys.modules.get("fuzz_formats")
    if module is None:
        spec = importlib.util.spec_from_file_location(
            "fuzz_formats", ROOT / "benchmarks" / "fuzz_formats.py"
        )
        module = importlib.util.module_from_spec(spec)
        sys.modules["fuzz_formats"] = module
        spec.loader.exec_module(module)
    return module


def sample(
    fmt: str,
    cases: int,
    seed: int,
    directory: Path,
    timeout: float = 5.0,
    fs_share: float = 0.05,
    by_kind: Counter | None = None,
) -> tuple[Counter, list[tuple[int, str, BaseException]]]:
    """Outcomes of ``cases`` fuzz cases of ``fmt`` (the run ``--seed seed --fs-share
    fs_share`` of the script would make), and the failures as (case seed, mutation,
    exception); ``by_kind`` (if given) counts (mutation, outcome) pairs;
    ``python benchmarks/fuzz_formats.py --replay CASE_SEED --formats FMT`` reruns one."""
    fuzz = fuzz_formats()
    bases = fuzz.make_bases(str(directory))
    path = str(directory / f"case.{fmt}")
    counts: Counter = Counter()
    failures = []
    previous = signal.signal(signal.SIGALRM, fuzz._alarm)  # run_case's time limit
    try:
        for i in range(cases):
            case_seed = seed * 1_000_000_007 + i
            outcome, kind, exc = fuzz.run_case(fmt, bases[fmt], case_seed, path, timeout, fs_share)
            counts[outcome] += 1
            if by_kind is not None:
                by_kind[kind, outcome] += 1
            if outcome == "other":
                failures.append((case_seed, kind, exc))
    finally:
        signal.signal(signal.SIGALRM, previous)
    return counts, failures
