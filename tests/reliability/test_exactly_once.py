"""Exactly once: random orders x shards x workers x resume points (see exactly_once.py).

Sized for CI: a few hundred cases in process and a few with 2 workers (each worker
loader starts two interpreters). ``benchmarks/reliability.py`` runs thousands.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings

from .exactly_once import Case, cases, check_case, check_workers_case

CI = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
CI_WORKERS = settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@CI
@given(cases())
def test_every_position_is_delivered_once_across_shards_passes_and_resumes(case: Case):
    stats = check_case(case)
    assert stats["cases"] == 1 and stats["shards"] == case.shards


@CI_WORKERS
@given(cases(workers=2))
def test_two_workers_deliver_the_stream_of_the_loader_in_process_and_resume_it(case: Case):
    stats = check_workers_case(case)
    assert stats["cases"] == 1
