"""``Batch``: one batch of examples, stacked field by field, batch axis first."""

from __future__ import annotations

from typing import Any

import numpy as np


class Batch:
    """A batch: one attribute per field, plus where its rows came from.

    ``len(batch)`` is the number of rows (padding included); ``batch.size`` the real
    examples (setting an attribute sets a field: ``batch.aug = ...``); ``batch.mask``
    is False on padding rows. ``source_ordinals``, ``record_indices`` and
    ``positions`` (in the order) are -1 on padding rows.
    """

    # The fields dict is the instance's __dict__, so ``batch.x`` is a plain attribute
    # lookup (a __getattr__ per field cost a microsecond a batch). The slots and the
    # properties are data descriptors, so a field named like one of them is read with
    # ``batch["name"]``.
    __slots__ = ("__dict__", "_ordinals", "_pos0", "_records", "_rows", "size")

    def __init__(self, fields: dict[str, Any], size: int, rows: int, pos0: int,
                 ordinals: np.ndarray, records: np.ndarray) -> None:
        self.__dict__ = fields
        self.size = size
        self._rows = rows
        self._pos0 = pos0
        self._ordinals = ordinals
        self._records = records

    def __getattr__(self, name: str) -> Any:  # only reached for a name that is not set
        if name.startswith("_"):  # not yet set (unpickling) or not a field
            raise AttributeError(name)
        raise AttributeError(f"the batch has no field `{name}` (fields: "
                             f"{', '.join(self.__dict__)})")

    def __getitem__(self, name: str) -> Any:
        return self.__dict__[name]

    def __len__(self) -> int:
        return self._rows

    @property
    def keys(self):
        """The field names (``batch.keys()``, as for a dict)."""
        return self.__dict__.keys

    @property
    def fields(self) -> dict[str, Any]:
        """The field arrays by name."""
        return self.__dict__

    def _padded(self, values: np.ndarray, fill: int) -> np.ndarray:
        if self._rows == self.size:
            return values
        out = np.full(self._rows, fill, dtype=np.int64)
        out[: self.size] = values
        return out

    @property
    def mask(self) -> np.ndarray:
        """bool[len(batch)]: True for real examples, False for padding."""
        m = np.zeros(self._rows, dtype=bool)
        m[: self.size] = True
        return m

    @property
    def positions(self) -> np.ndarray:
        """The rows' positions in the loader's order (-1 on padding)."""
        return self._padded(np.arange(self._pos0, self._pos0 + self.size, dtype=np.int64), -1)

    @property
    def source_ordinals(self) -> np.ndarray:
        """Which source each row came from (index into the order's sources; -1 on padding)."""
        return self._padded(self._ordinals, -1)

    @property
    def record_indices(self) -> np.ndarray:
        """Each row's index in its source (-1 on padding)."""
        return self._padded(self._records, -1)

    def __repr__(self) -> str:
        shapes = ", ".join(f"{k}={tuple(getattr(v, 'shape', ()))}"
                           for k, v in self.__dict__.items())
        return f"Batch(size={self.size}, rows={self._rows}, {shapes})"
