"""A loader worker killed with SIGKILL: WorkerError, soon; no shared memory left (workers.py)."""

from __future__ import annotations

import pytest

from .workers import kill_one

# A liveness bound, not a timing: the loader checks its workers every 0.5 s.
SOON = 30.0


@pytest.mark.parametrize(
    "moment, before, which",
    [("busy", 1, 0), ("busy", 13, 1), ("idle", 5, 0), ("between passes", 0, 1)],
)
def test_a_killed_worker_is_a_worker_error_and_its_loader_leaves_no_shared_memory(
    moment, before, which
):
    killed = kill_one(before, which, moment)
    assert killed.raised == "WorkerError", killed
    assert "SIGKILL" in killed.message
    assert killed.seconds < SOON
    assert killed.segments == 4  # 2 workers x prefetch 2
    assert killed.segments_left == 0
    assert killed.workers_left == 0
