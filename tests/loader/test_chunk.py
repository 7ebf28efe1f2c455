"""What decides whether a plain path's columns are gathered ahead in chunks, and by the
compiled copies (``_chunk``)."""

from __future__ import annotations

import mmap

import numpy as np
import pytest

from feedline._base import rowcopy
from feedline.loader._chunk import _alike, _arrays_of, _fields_of, _prepared, _unwritten


def test_sources_of_other_dtypes_are_not_alike_for_the_compiled_copies():
    a = {"x": np.zeros((4, 2), "<f4"), "y": np.zeros(4, np.int64)}
    assert _alike(a) and _alike((a, dict(a)))
    assert not _alike((a, {"x": np.zeros((4, 2), ">f4"), "y": a["y"]}))  # byte order
    assert not _alike((a, {"x": a["x"], "y": np.zeros(4, np.int32)}))
    assert not _alike((a, {"x": a["x"]}))  # a field missing
    assert _fields_of((a, {})) is a and len(_arrays_of((a, a))) == 4


def test_only_memory_nothing_writes_is_unwritten(tmp_path):
    path = tmp_path / "f"
    path.write_bytes(bytes(64))
    with open(path, "rb") as f:
        m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        mapped = np.frombuffer(m, np.int64)
        assert _unwritten(mapped) and _unwritten(mapped[::2])
        del mapped
        m.close()
    owned = np.zeros(8)
    owned.flags.writeable = False  # its owner may lift the flag again
    assert not _unwritten(owned)
    view = np.zeros(8)[:4]
    view.flags.writeable = False  # a read-only view of writable memory
    assert not _unwritten(view)
    assert _unwritten(np.frombuffer(bytes(16), np.int64))


@pytest.mark.skipif(not rowcopy.available(), reason="the compiled row copies are not built here")
def test_columns_c_cannot_read_as_rows_are_left_to_numpy():
    a = {"x": np.zeros((4, 2), "<f4"), "y": np.zeros(4, np.int64)}
    got = _prepared((a, dict(a)))
    assert got is not None and got.parts == 2 and got.names == ("x", "y")
    assert _prepared({"x": a["x"][::2]}) is None  # not contiguous
    # alike (the same dtypes) but rows of other widths: refused by prepare, not raised
    assert _alike((a, {"x": np.zeros((4, 3), "<f4"), "y": a["y"]}))
    assert _prepared((a, {"x": np.zeros((4, 3), "<f4"), "y": a["y"]})) is None
