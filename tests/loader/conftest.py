"""Fixtures of the loader's tests: a file of 700,000 int64 rows whose values are their
record indices (several order blocks, many chunks), and chunks of a few batches."""

from __future__ import annotations

import numpy as np
import pytest

import feedline as fl
from feedline._base import rowcopy
from feedline.loader import _gather_ahead, _local_plan

from ._rows import N, Row


@pytest.fixture(scope="module")
def rows_flr(tmp_path_factory):
    path = tmp_path_factory.mktemp("rows") / "rows.flr"
    fl.recfile.write(path, Row, {"y": np.arange(N, dtype=np.int64)})
    return path


@pytest.fixture
def small_chunks(monkeypatch):
    """Chunks of a few batches, so that a pass has hundreds of them (a module may set
    its own)."""
    monkeypatch.setattr(_gather_ahead, "_CHUNK_BYTES", 50_000)


@pytest.fixture(params=["compiled", "numpy"])
def copies(request, monkeypatch):
    """Chunks copied by C's threads (``rowcopy``), or by numpy's takes on Python
    threads (``FEEDLINE_NATIVE=0``, as where the extension is not built)."""
    if request.param == "numpy":
        monkeypatch.setenv("FEEDLINE_NATIVE", "0")
    elif not rowcopy.available():
        pytest.skip("the compiled row copies are not built here")
    else:  # a one-thread plain batch of any size copied in C too (``PlainPlan._take``)
        monkeypatch.setattr(_local_plan, "_COPY_BYTES", 0)
    return request.param


@pytest.fixture
def numpy_copies(monkeypatch):
    """Chunks copied by numpy's takes on Python helper threads (``FEEDLINE_NATIVE=0``):
    for the tests of those threads' own ways (the order blocks they make, their places
    given back), which C's threads do not have."""
    monkeypatch.setenv("FEEDLINE_NATIVE", "0")
