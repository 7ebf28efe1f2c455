"""kill -9 at random moments of a .flr or .nndataset write: the old file or the new one,
never a partial one; only the writer's own hidden temporaries may remain (killing.py)."""

from __future__ import annotations

import random

import pytest

from . import killing
from .killing import KINDS, SIZES, check_file, classify, kill_writer, prepare, reference

KILLS = 3


@pytest.mark.parametrize("kind", KINDS)
def test_a_writer_killed_at_a_random_moment_leaves_the_old_or_the_new_file(kind, tmp_path):
    refs, work = tmp_path / "refs", tmp_path / "work"
    refs.mkdir()
    work.mkdir()
    size = SIZES[kind]
    old = reference(kind, refs, 1, size // 2)
    new = reference(kind, refs, 2, size)
    assert old != new
    target = work / ("data.flr" if kind.startswith("flr") else "data.nndataset")
    seconds = killing.child_write_time(kind, target, 2, size)
    assert target.read_bytes() == new and classify(kind, target, old, new, False).leftovers == []
    rng = random.Random(f"{kind}-kills")
    outcomes = []
    for _ in range(KILLS):
        prepare(kind, 1, size // 2)(target)
        assert target.read_bytes() == old
        killed = kill_writer(kind, target, 2, size, rng.uniform(0, 1.25 * seconds))
        outcome = classify(kind, target, old, new, killed)  # asserts: old or new, not partial
        outcomes.append(outcome)
        killing.remove_leftovers(outcome, work)
    assert {o.target for o in outcomes} <= {"old", "new"}
    # Without an old file: nothing, or the new file.
    target.unlink()
    killed = kill_writer(kind, target, 2, size, rng.uniform(0, 1.25 * seconds))
    outcome = classify(kind, target, None, new, killed)
    assert outcome.target in ("absent", "new")
    # A later write is not disturbed by what a killed one left.
    prepare(kind, 1, size // 2)(target)
    assert target.read_bytes() == old
    check_file(kind, target)
    # (and leaves no temporary of its own; it does not remove the killed one's today)
    assert set(classify(kind, target, old, new, True).leftovers) <= set(outcome.leftovers)
