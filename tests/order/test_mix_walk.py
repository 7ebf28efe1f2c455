"""A mix's walk on the numpy path writes each part's run of the span and its keys in
place (``MixPlan._span_keys``): the same elements and the same keys, bit for bit, as
``_span`` and ``keys`` over the whole span."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import feedline as fl
from feedline.order._mixplan import MixPlan

SCHEDULES = [
    fl.Schedule.uniform(),
    fl.Schedule.delayed(0.3),
    fl.Schedule.until(0.6),
    fl.Schedule.fade(0.2, 0.9),
    fl.Schedule.trapezoid(0.1, 0.3, 0.6, 0.9),
    fl.Schedule.ramp(0.0, 0.4),
]


@settings(max_examples=100, deadline=None)
@given(
    parts=st.lists(
        st.tuples(st.integers(1, 5_000), st.integers(0, len(SCHEDULES) - 1)),
        min_size=2,
        max_size=9,
    ),
    seed=st.integers(0, 2**32 - 1),
)
def test_a_spans_runs_and_keys_written_in_place_are_the_wholes(parts, seed):
    plan = MixPlan([n for n, _ in parts], [SCHEDULES[s] for _, s in parts])
    rng = np.random.default_rng(seed)
    n = plan.n
    start = rng.integers(0, n + 1)
    stop = np.minimum(start + rng.integers(0, 3_000, len(n)), n)
    empty = rng.random(len(n)) < 0.3
    stop[empty] = start[empty]  # some parts with nothing in the span
    part, j, keys = plan._span_keys(start, stop)
    want_p, want_j = plan._span(start, stop)
    assert np.array_equal(part, want_p) and np.array_equal(j, want_j)
    want = plan.keys(want_p, want_j)
    assert keys.dtype == want.dtype and np.array_equal(keys.view(np.uint64), want.view(np.uint64))


@pytest.mark.parametrize("native", ["0", "1"], ids=["numpy", "c"])
def test_a_walk_is_the_same_in_pieces_of_any_size(numpy_path, native, monkeypatch):
    """Walks of 1, 777 and 262,144 elements at a time give one sequence (the numpy
    path's cut of a sorted span, the eighth more it sorts, the floor it keeps; C's heap,
    ``ordering.walk``, where it is built and on)."""
    monkeypatch.setenv("FEEDLINE_NATIVE", native)
    plan = MixPlan([30_001, 17_000, 5], [SCHEDULES[0], SCHEDULES[1], SCHEDULES[4]])
    got = []
    for size, upto in ((1, 2_000), (777, plan.total), (262_144, plan.total)):
        state, ps, js = plan.seek(0), [], []
        while state.pos < upto:
            p, j = plan.walk(state, size)
            ps.append(p)
            js.append(j)
        got.append((np.concatenate(ps), np.concatenate(js)))
    assert len(got[1][0]) == plan.total
    for p, j in got:
        assert np.array_equal(p, got[1][0][: len(p)]) and np.array_equal(j, got[1][1][: len(j)])
