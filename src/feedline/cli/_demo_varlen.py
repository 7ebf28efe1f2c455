"""The demo's variable-length part: the Python documentation's paragraphs as documents
of any length (byte tokens and a topic name), padded per batch, bucketed by length,
each paragraph delivered once."""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

import numpy as np

from ..loader import Loader
from ..records import Record, Varying, field
from ..sources import Dataset


class Paragraph(Record, dims={"T": Varying(max=2048, truncate=True)}):
    """A paragraph of the Python documentation: its UTF-8 bytes as tokens, its topic."""

    tokens = field("T", "int32", doc="UTF-8 bytes of the paragraph")
    topic = field((), "str", doc="the pydoc topic it is from")


def paragraphs() -> list[dict[str, Any]]:
    """Every paragraph of pydoc_data's topics (the corpus the demo's text part uses)."""
    import pydoc_data.topics

    out = []
    for topic in sorted(pydoc_data.topics.topics):
        for para in pydoc_data.topics.topics[topic].split("\n\n"):
            para = " ".join(para.split())
            if para:
                raw = np.frombuffer(para.encode("utf-8"), dtype=np.uint8).astype(np.int32)
                out.append({"tokens": raw, "topic": topic})
    return out


def varlen_pass(batch: int = 64) -> dict[str, Any]:
    """Padding with and without bucketing over one shuffled pass each, and the count of
    paragraphs delivered exactly once."""
    items = paragraphs()
    ds = Dataset(Paragraph, items, name="pydoc-paragraphs")
    lengths = ds.lengths("T")
    result: dict[str, Any] = {
        "documents": len(ds),
        "min": int(lengths.min()),
        "median": int(np.median(lengths)),
        "max": int(lengths.max()),
    }
    runs: list[tuple[str, dict[str, Any]]] = [("plain", {}), ("bucketed", {"bucket": "T"})]
    for name, options in runs:
        real = padded = 0
        seen: Counter = Counter()
        t = time.perf_counter()
        loader = Loader(ds, batch, seed=1, workers=0, pad_to_multiple=8, **options)
        for b in loader:
            real += int(b.meta.lengths["T"].sum())
            padded += b.tokens.size
            seen.update(b.meta.record_indices.tolist())
        elapsed = time.perf_counter() - t
        result[name] = {
            "padding": 1 - real / padded,
            "once": sum(1 for c in seen.values() if c == 1) == len(ds) == len(seen),
            "tokens_per_s": real / elapsed,
        }
    return result
