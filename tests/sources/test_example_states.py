"""Each mapped example's generator state (``sources._items.example_states``): hashed
for a batch at once, the same as the reference formula one example at a time, and
pinned (a resumed or re-run job draws the same)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from feedline._base.hashing import MASK64, PHI, mix64
from feedline.sources._items import example_states

U64 = st.integers(0, 2**64 - 1)


def example_state(seed: int, context: int, position: int) -> dict:
    """The reference: one example's state hashed with Python ints (the formula
    ``example_states`` computes as arrays; it was the library's own before them)."""
    a = mix64((seed * PHI + mix64(context ^ 0x9E3779B97F4A7C15)) & MASK64)
    hi = mix64(a ^ mix64(position))
    lo = mix64(hi ^ (position * PHI & MASK64) ^ 0xD1B54A32D192ED03)
    return {
        "bit_generator": "PCG64",
        "state": {"state": (hi << 64) | lo, "inc": (mix64(a) << 1) | 1},
        "has_uint32": 0,
        "uinteger": 0,
    }


@settings(max_examples=80, deadline=None)
@given(
    seed=U64,
    context=st.integers(0, 2**40),
    positions=st.lists(st.integers(0, 2**63 - 1), max_size=40),
)
def test_a_batchs_states_are_each_examples_state(seed, context, positions):
    pos = np.array(positions, dtype=np.int64)
    assert example_states(seed, context, pos) == [
        example_state(seed, context, p) for p in positions
    ]


def test_the_states_are_pinned():
    state = example_states(3, 1, np.array([12345]))[0]["state"]
    assert state == example_state(3, 1, 12345)["state"]
    rng = np.random.Generator(np.random.PCG64(0))
    rng.bit_generator.state = example_state(3, 1, 12345)
    assert rng.integers(0, 2**32, 3).tolist() == PINNED


PINNED = [2381884307, 3104759807, 1168040976]  # drawn at 47a505c, before the batch hashing
