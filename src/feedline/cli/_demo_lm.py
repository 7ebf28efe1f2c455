"""The demo's language-model parts: windows over the ``.nndataset``; the same Python
documentation as JSONL documents with an end-of-text token, packed into rows by best
fit; questions and answers made from it as chats, trained on the answers only; and the
digits as a Parquet table read where it lies, converted to ``.flr`` and back."""

from __future__ import annotations

import json
import os
import time
from typing import Any

import numpy as np

from .. import text
from ..loader import Loader

EOT = "<|endoftext|>"


def windows_pass(path: str, seq_len: int = 256, batch: int = 32) -> dict[str, Any]:
    """One shuffled pass of language-model windows: every target trained once."""
    t0 = time.perf_counter()
    windows = text.Windows(path, seq_len)
    loader = Loader(windows, batch, seed=1)
    first, trained, tokens = None, 0, 0
    read = np.zeros(len(windows), dtype=np.int64)  # times each window was read
    for b in loader:
        first = first or time.perf_counter() - t0
        trained += int(b["loss_mask"].sum())
        tokens += b["input_ids"].size
        np.add.at(read, b.meta.record_indices, 1)
    seconds = time.perf_counter() - t0
    expected = windows.num_tokens - 1
    loader.close()
    windows.close()
    return {
        "windows": len(windows),
        "trained": trained,
        "expected": expected,
        "each_once": bool((read == 1).all()),
        "tokens_per_s": tokens / seconds,
        "first_batch_s": first,
    }


def _topics() -> dict[str, list[str]]:
    import pydoc_data.topics

    out = {}
    for topic in sorted(pydoc_data.topics.topics):
        paras = [" ".join(p.split()) for p in pydoc_data.topics.topics[topic].split("\n\n")]
        out[topic] = [p for p in paras if p]
    return out


def packing_pass(out_dir: str, seq_len: int = 1024, batch: int = 16) -> dict[str, Any]:
    """The documentation's topics as JSONL documents (one a topic) to a compact ``.flr``
    with an end-of-text token, packed by best fit: the padding beside one document a
    row, and every target of every document trained once in a shuffled pass."""
    topics = _topics()
    docs = os.path.join(out_dir, "python-topics.jsonl")
    with open(docs, "w", encoding="utf-8") as f:
        for topic, paras in topics.items():
            f.write(json.dumps({"text": "\n".join(paras), "topic": topic}) + "\n")
    corpus = os.path.join(out_dir, "python-topics.flr")
    tok = text.ByteTokenizer(specials=(EOT,))
    summary = text.build(docs, corpus, tok, eos=EOT, progress=False, created=0)
    out: dict[str, Any] = {"documents": summary.documents, "tokens": summary.tokens}
    t0 = time.perf_counter()
    packed = text.Packed(corpus, seq_len, strategy="best_fit")
    out["plan_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    loader = Loader(packed, batch, seed=2, workers=0)
    trained = cells = 0
    for b in loader:
        trained += int(b["loss_mask"].sum())
        cells += b["segment_ids"].size
    seconds = time.perf_counter() - t0
    stats = loader.stats()
    loader.close()
    with packed_lengths(corpus) as lengths:
        pieces = -(-(lengths - 1) // seq_len)  # rows of one document each, (n - 1) pairs
        out["padding_per_doc"] = 1 - (lengths - 1).sum() / (pieces.sum() * seq_len)
        out["expected"] = int((lengths - 1).sum())
    out.update(
        rows=len(packed),
        trained=trained,
        padding=1 - trained / cells,
        tokens_per_s=cells / seconds,
        waited=stats.wait_fraction,
    )
    packed.close()
    return out


class packed_lengths:
    """The token count of each document of a compact corpus (a context manager)."""

    def __init__(self, corpus: str) -> None:
        from ..formats import recfile

        self.f = recfile.open(corpus)

    def __enter__(self) -> np.ndarray:
        return np.diff(self.f.columns["tokens"].offsets).astype(np.int64)

    def __exit__(self, *exc: object) -> None:
        self.f.close()


def chat_pass(out_dir: str, seq_len: int = 512, batch: int = 16) -> dict[str, Any]:
    """Each topic as a chat (a question, the topic's first paragraph as the answer) to a
    ``.flr`` whose loss mask holds the answers only, packed: what is trained is exactly
    the answers and their end tokens."""
    chats = os.path.join(out_dir, "python-chats.jsonl")
    answers = 0
    with open(chats, "w", encoding="utf-8") as f:
        for topic, paras in _topics().items():
            # the first paragraph that is prose (not a title's underline of stars)
            answer = next((p for p in paras if len(p) > 40 and "***" not in p), paras[-1])
            messages = [
                {"role": "user", "content": f"What is '{topic}' in Python?"},
                {"role": "assistant", "content": answer},
            ]
            answers += len(answer.encode("utf-8")) + 1  # the end-of-assistant token
            f.write(json.dumps({"messages": messages}) + "\n")
    tok = text.ByteTokenizer(text.CHAT_SPECIALS)
    corpus = os.path.join(out_dir, "python-chats.flr")
    summary = text.build(chats, corpus, tok, chat=True, progress=False, created=0)
    packed = text.Packed(corpus, seq_len, strategy="best_fit")
    trained = 0
    sample = ""
    for b in Loader(packed, batch, seed=3, workers=0):
        mask = b["loss_mask"]
        trained += int(mask.sum())
        if not sample:
            sample = tok.decode(b["targets"][0][mask[0]])[:60]
    packed.close()
    return {
        "chats": summary.documents,
        "tokens": summary.tokens,
        "trained": trained,
        "answers": answers,
        "sample": sample,
    }


def tables_pass(out_dir: str, imgs: np.ndarray, labels: np.ndarray) -> dict[str, Any]:
    """The digits as a Parquet table: read at random by row group through the loader
    (the same batches as from the ``.flr``), converted to ``.flr`` and back."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from ..formats import recfile
    from ..formats.convert import convert
    from ..sources import Dataset, parquet

    flat = imgs.reshape(len(imgs), -1).astype(np.float32)
    table = pa.table(
        {
            "pixels": pa.FixedSizeListArray.from_arrays(pa.array(flat.ravel()), flat.shape[1]),
            "label": pa.array(labels.astype(np.int64)),
        }
    )
    path = os.path.join(out_dir, "digits.parquet")
    pq.write_table(table, path, row_group_size=256)
    src = parquet(path)
    t0 = time.perf_counter()
    got = [(b.pixels.copy(), b.label.copy()) for b in Loader(src, 64, seed=4, workers=0)]
    seconds = time.perf_counter() - t0
    flr = os.path.join(out_dir, "digits-from-parquet.flr")
    convert(path, flr)
    back = os.path.join(out_dir, "digits-back.parquet")
    convert(flr, back)
    with recfile.open(flr) as f:
        same = all(
            np.array_equal(a[0], b.pixels) and np.array_equal(a[1], b.label)
            for a, b in zip(got, Loader(Dataset(f.record, f), 64, seed=4, workers=0))
        )
    return {
        "rows": len(src),
        "row_groups": pq.ParquetFile(path).num_row_groups,
        "record": ", ".join(f"{n} {f.declared}" for n, f in src.record.fields.items()),
        "rows_per_s": len(src) / seconds,
        "same_batches": same,
        "round_trip": pq.read_table(back).equals(table),
    }
