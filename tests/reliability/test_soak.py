"""Soak: epochs of a scheduled, shuffled mix with 2 workers; memory, descriptors and
shared memory stay flat (soak.py; the benchmark runs 200 epochs)."""

from __future__ import annotations

from .soak import run

EPOCHS = 20


def test_epochs_with_two_workers_keep_memory_descriptors_and_shared_memory_flat():
    soak = run(EPOCHS)
    assert soak.batches == EPOCHS * -(-1000 // 32)  # every epoch checked its positions
    assert soak.growth(soak.rss) <= 0.05
    assert soak.fds == [soak.fds[0]] * EPOCHS
    assert len(soak.segments[0]) == 4 and soak.segments == [soak.segments[0]] * EPOCHS
    assert soak.worker_pids == [soak.worker_pids[0]] * EPOCHS
    assert soak.growth(soak.worker_rss) <= 0.05
    assert soak.worker_fds == [soak.worker_fds[0]] * EPOCHS
    assert soak.segments_left == 0
    assert soak.fds_after_close == soak.fds_before
