"""``Batch``: one batch of examples, stacked field by field, batch axis first."""

from __future__ import annotations

from typing import Any

import numpy as np


class Batch:
    """A batch: one attribute per field, plus where its rows came from.

    ``len(batch)`` is the number of rows (padding included); ``batch.size`` the real
    examples; ``batch.mask`` is False on padding rows. ``source_ordinals``,
    ``record_indices`` and ``positions`` (in the order) are -1 on padding rows.
    """

    __slots__ = ("_fields", "_ordinals", "_pos0", "_records", "_rows", "size")

    def __init__(self, fields: dict[str, Any], size: int, rows: int, pos0: int,
                 ordinals: np.ndarray, records: np.ndarray) -> None:
        self._fields = fields
        self.size = size
        self._rows = rows
        self._pos0 = pos0
        self._ordinals = ordinals
        self._records = records

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):  # not yet set (unpickling) or not a field
            raise AttributeError(name)
        try:
            return self._fields[name]
        except KeyError:
            raise AttributeError(f"the batch has no field `{name}` (fields: "
                                 f"{', '.join(self._fields)})") from None

    def __getitem__(self, name: str) -> Any:
        return self._fields[name]

    def __len__(self) -> int:
        return self._rows

    def keys(self):
        return self._fields.keys()

    @property
    def fields(self) -> dict[str, Any]:
        """The field arrays by name."""
        return self._fields

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
        shapes = ", ".join(f"{k}={tuple(getattr(v, 'shape', ()))}" for k, v in self._fields.items())
        return f"Batch(size={self.size}, rows={self._rows}, {shapes})"
