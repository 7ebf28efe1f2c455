"""A shuffle's positions permuted through its round tables in C, without the GIL
(``order._perm``'s tabled path, the one a loader's plain shuffle takes).

The numpy path makes the same positions in about 16 calls a 32k chunk, 8 - 9 ns a
position (C: 4 ns), each call taking the GIL from the threads that gather rows (on the 2-core
reference machine, a third of a core beside them in a 4,000,000-row epoch). Compiled at
install (``setup.py``); without it (no C compiler, ``FEEDLINE_NATIVE=0``)
``available()`` is False and ``_perm`` keeps numpy's way.
"""

from __future__ import annotations

import numpy as np

from . import native

try:
    from . import _feistel  # type: ignore[attr-defined]
except ImportError:  # not compiled (no C compiler at install)
    _feistel = None


def available() -> bool:
    """Whether the compiled rounds are here and not turned off (``FEEDLINE_NATIVE=0``)."""
    return native.enabled(_feistel)


def permute_tabled(
    tables: tuple[np.ndarray, ...], rb: int, lb: int, n: int, x: np.ndarray, out: np.ndarray
) -> bool:
    """``x``'s positions (int64, in ``[0, n)``) permuted through the six round ``tables``
    (uint16, ``_perm._tables``' ``small``: ``2**rb`` and ``2**lb`` entries) into ``out``
    (which may be ``x``); False, with nothing written, where a position is outside
    ``[0, n)``."""
    assert _feistel is not None
    return bool(_feistel.permute_tabled(tables, rb, lb, n, x, out))
