"""The demo's variable-length part: the Python documentation's paragraphs as documents
of any length (byte tokens and a topic name), padded per batch, bucketed by length,
each paragraph delivered once; then written as 32 ``.flr`` shards and read shuffled as
one dataset (every source's ragged columns read together, ``loader._many``)."""

from __future__ import annotations

import os
import time
from collections import Counter
from typing import Any

import numpy as np

from ..formats import recfile
from ..loader import Loader
from ..loader._many import many_sources
from ..order import Seq
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


def varlen_pass(out_dir: str, batch: int = 64) -> dict[str, Any]:
    """Padding with and without bucketing over one shuffled pass each, and the count of
    paragraphs delivered exactly once; the same from shards (``shards_pass``)."""
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
    result["shards"] = shards_pass(out_dir, items, batch)
    return result


def shards_pass(out_dir: str, items: list[dict[str, Any]], batch: int, k: int = 32) -> dict:
    """The paragraphs as ``k`` .flr shards, concatenated and shuffled as one: tokens/s,
    whether the sources were read together, and whether each paragraph came once."""
    folder = os.path.join(out_dir, "paragraph-shards")
    os.makedirs(folder, exist_ok=True)
    cuts = np.linspace(0, len(items), k + 1).astype(int)
    files = []
    for i in range(k):
        path = os.path.join(folder, f"{i:03d}.flr")
        recfile.write(path, Paragraph, items[cuts[i] : cuts[i + 1]])
        files.append(recfile.open(path))
    seq = Seq.concat([Seq.source(Dataset(Paragraph, f)) for f in files]).shuffle(2)
    seen: Counter = Counter()
    real = 0
    t = time.perf_counter()
    with Loader(seq, batch, seed=1, workers=0, pad_to_multiple=8) as loader:
        for b in loader:
            real += int(b.meta.lengths["T"].sum())
            # a paragraph is (its shard, its row there)
            seen.update(zip(b.meta.source_ordinals.tolist(), b.meta.record_indices.tolist()))
        together = many_sources(loader) is not None
    elapsed = time.perf_counter() - t
    for f in files:
        f.close()
    once = all(c == 1 for c in seen.values()) and len(seen) == len(items)
    return {"files": k, "tokens_per_s": real / elapsed, "together": together, "once": once}
