"""The order's hot loops in C, without the GIL (``_ordering.c``): a shuffle's positions
through its round tables (``order._perm``'s tabled path, the one a loader's plain
shuffle takes), a mix's merge walked (``order._mixplan``) and its elements located, and
a concat of sources (a manifest's shards) located (``order._nodes``).

numpy's way makes the same positions in many calls, each taking the GIL from the threads
that gather rows (a shuffle: 8 - 9 ns a position against C's 4; a mix of two shuffles
25 - 35 against 12). Compiled at install (``setup.py``); without it (no C compiler,
``FEEDLINE_NATIVE=0``) ``available()`` is False and the order keeps numpy's way (and
numba's kernels where they are loaded).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import native

try:
    from . import _ordering  # type: ignore[attr-defined]
except ImportError:  # not compiled (no C compiler at install)
    _ordering = None


def available() -> bool:
    """Whether the compiled loops are here and not turned off (``FEEDLINE_NATIVE=0``)."""
    return native.enabled(_ordering)


def permute_tabled(
    tables: tuple[np.ndarray, ...], rb: int, lb: int, n: int, x: np.ndarray, out: np.ndarray
) -> bool:
    """``x``'s positions (int64, in ``[0, n)``) permuted through the six round ``tables``
    (uint16, ``_perm._tables``' ``small``: ``2**rb`` and ``2**lb`` entries) into ``out``
    (which may be ``x``; an ``out`` otherwise over ``x`` or a table is a ValueError, as
    in the other loops: outputs apart from the inputs); False, with nothing
    written, where a position is outside ``[0, n)``. RuntimeError, the output part
    written, where a cycle walk takes 2**20 rounds (tables not made by ``_perm._tables``)
    or another thread writes the arrays meanwhile: numpy's way cannot then follow."""
    assert _ordering is not None
    return bool(_ordering.permute_tabled(tables, rb, lb, n, x, out))


def walk(
    taken: np.ndarray,
    n: np.ndarray,
    kargs: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
    count: int,
    out_part: np.ndarray,
    out_j: np.ndarray,
) -> tuple[int, float]:
    """A mix's next ``count`` elements (at most) after ``taken`` (int64, advanced in
    place), merged by (key, part, j) into ``out_part`` and ``out_j``: ``kargs`` are the
    plan's ``(phi, inv, uniform, T)``. Returns the elements written and the last one's
    key (``-inf`` if none)."""
    assert _ordering is not None
    emitted, last = _ordering.walk(taken, n, *kargs, count, out_part, out_j)
    return int(emitted), float(last)


def locate(
    part: np.ndarray,
    j: np.ndarray,
    tables: tuple,
    n: np.ndarray,
    offset: np.ndarray,
    ordinal: np.ndarray,
    ords: np.ndarray,
    recs: np.ndarray,
) -> bool:
    """Element ``j[e]`` of part ``part[e]`` of a mix whose parts are sources or shuffles
    of one: ``ords[e]`` its source's ordinal, ``recs[e]`` its record (the shuffle's image
    through ``tables[q]``, the part's six uint16 round tables, or None for a source;
    plus the source's ``offset``). ``n``: each part's elements. False, with nothing
    written, where a part or an element is out of range; RuntimeError as
    ``permute_tabled``'s."""
    assert _ordering is not None
    return bool(_ordering.locate(part, j, tables, n, offset, ordinal, ords, recs))


def concat_locate(
    pos: np.ndarray,
    which: tuple[Any, np.ndarray, np.ndarray, int],
    ordinal: np.ndarray,
    shift: np.ndarray,
    ords: np.ndarray,
    recs: np.ndarray,
) -> bool:
    """Positions ``pos`` (uint64) of a concat of sources: ``ords`` each one's source
    ordinal, ``recs`` (which may be ``pos``) its record, ``pos + shift[child]``; the child
    found by the concat's bucket table ``which`` (``_child_table.child_table``). False,
    with nothing written, where a position or the table is out of range; RuntimeError
    where a position is found out of range when read again (another thread wrote it)."""
    assert _ordering is not None
    bits, table, ends, passes = which
    return bool(
        _ordering.concat_locate(pos, table, ends, int(bits), passes, ordinal, shift, ords, recs)
    )
