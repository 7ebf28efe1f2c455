"""Shared fixtures: the two execution paths of the ordering engine."""

from __future__ import annotations

import pytest

from feedline._base import kernels as _kernels


@pytest.fixture
def numpy_path(monkeypatch: pytest.MonkeyPatch):
    """Run the test on the numpy path (compiled kernels switched off)."""
    monkeypatch.setitem(_kernels._state, "k", None)
    yield


@pytest.fixture
def compiled_path():
    """The compiled kernels; skips when numba is not installed."""
    if _kernels.get() is None:
        pytest.skip("numba (the 'fast' extra) is not installed")
    yield _kernels.get()
