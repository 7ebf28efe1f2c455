"""An HF ``Image`` column converted with each image's width and height beside its bytes.

An HF dataset (a ``save_to_disk`` directory, or the Parquet files of the hub, which
carry the same ``huggingface`` schema metadata) marks its image columns as features of
``_type`` ``Image``; ``convert`` stores such a column's encoded files as they are, and,
when the table has one image column and no ``width``/``height`` of its own, the two
fields an image folder's conversion has: read from each image's header (microseconds
for a JPEG, no decoding), so ``fl.images`` draws a crop before it decodes.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from ..records import Record, record_from_schema
from ._imagehead import size_of


def hf_image_columns(schema: Any) -> list[str]:
    """The columns an HF schema's metadata declares ``Image`` features."""
    meta = (schema.metadata or {}).get(b"huggingface")
    if not meta:
        return []
    try:
        features = json.loads(meta)["info"]["features"]
    except (ValueError, KeyError, TypeError):
        return []
    if not isinstance(features, dict):
        return []
    return [k for k, v in features.items() if isinstance(v, dict) and v.get("_type") == "Image"]


class SizedInput:
    """``inner`` (an ``ArrowInput``) with ``width`` and ``height`` of column ``image``."""

    def __init__(self, inner: Any, image: str) -> None:
        self.inner, self.image, self.where, self.rows = inner, image, inner.where, inner.rows
        schema = inner.record.schema()
        extra: list[dict[str, Any]] = [
            {"name": n, "dims": [], "dtype": "<i4", "domain": None, "doc": "pixels"}
            for n in ("width", "height")
        ]
        schema = {**schema, "fields": [*schema["fields"], *extra]}
        self.record: type[Record] = record_from_schema(schema, inner.where)

    def chunks(self, progress: Callable[[int, int], None] | None = None) -> Iterator[dict]:
        first = 0
        for chunk in self.inner.chunks(progress):
            blobs = chunk[self.image].blobs()
            sizes = np.array(
                [
                    size_of(b, f"{self.where}: column {self.image!r} row {first + i:,}")
                    for i, b in enumerate(blobs)
                ],
                dtype=np.int32,
            ).reshape(-1, 2)
            first += len(blobs)
            yield {**chunk, "width": sizes[:, 0], "height": sizes[:, 1]}


def with_sizes(inp: Any, schema: Any) -> Any:
    """``inp``, with its image column's sizes when it has exactly one and no sizes."""
    fields = inp.record.fields
    images = [c for c in hf_image_columns(schema) if c in fields]
    if len(images) != 1 or "width" in fields or "height" in fields:
        return inp
    return SizedInput(inp, images[0])
