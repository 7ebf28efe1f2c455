"""Building a corpus from each kind of input: ``fl.text.build`` on the same documents as
a text file (one a line, with and without ``eos``), JSONL, Parquet and JSONL chats.

The documents are generated once (kept in ``--dir``): ``--docs`` documents of lognormal
length (mean ~1.1 KB), words drawn from a small vocabulary; the chats split each
document into a user turn and an assistant turn. The byte tokenizer (with the chat
specials and ``<|endoftext|>``) writes a compact ``.flr``; every figure is the best of
``--repeat`` runs, the files in the page cache, in MB of the documents' text a second
(the same text in every row, whatever each file's own size).

    python benchmarks/text_inputs.py [--docs 40000] [--dir /tmp/feedline-bench-inputs]
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np

import feedline as fl

WORDS = [
    "the",
    "of",
    "and",
    "to",
    "in",
    "is",
    "was",
    "that",
    "for",
    "on",
    "with",
    "as",
    "by",
    "at",
    "from",
    "his",
    "an",
    "were",
    "are",
    "which",
]


def write_inputs(folder: str, docs: int) -> dict[str, str]:
    """The documents as a text file, JSONL, Parquet and JSONL chats in ``folder``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    paths = {
        k: os.path.join(folder, f"docs-{docs}.{k}")
        for k in ("txt", "jsonl", "parquet", "chat.jsonl")
    }
    if all(os.path.exists(p) for p in paths.values()):
        return paths
    rng = np.random.default_rng(0)
    lengths = rng.lognormal(5.0, 0.6, docs).astype(int) + 1
    words = rng.choice(WORDS, int(lengths.sum()))
    cuts = np.cumsum(lengths)[:-1]
    texts = [" ".join(w) for w in np.split(words, cuts)]
    with open(paths["txt"], "w") as f:
        f.write("\n".join(texts) + "\n")
    with open(paths["jsonl"], "w") as f:
        f.writelines(json.dumps({"text": t}) + "\n" for t in texts)
    pq.write_table(pa.table({"text": texts}), paths["parquet"], row_group_size=4096)
    with open(paths["chat.jsonl"], "w") as f:
        for t in texts:
            turns = [("user", t[: len(t) // 2]), ("assistant", t[len(t) // 2 :])]
            messages = [{"role": r, "content": c} for r, c in turns]
            f.write(json.dumps({"messages": messages}) + "\n")
    return paths


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=40_000)
    parser.add_argument("--dir", default="/tmp/feedline-bench-inputs")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    os.makedirs(args.dir, exist_ok=True)
    paths = write_inputs(args.dir, args.docs)
    mb = os.path.getsize(paths["txt"]) / 1e6
    print(f"{args.docs:,} documents, {mb:.1f} MB of text, {os.cpu_count()} CPUs")
    eot = "<|endoftext|>"
    tok = fl.text.ByteTokenizer((*fl.text.CHAT_SPECIALS, eot))
    out = os.path.join(args.dir, "out.flr")
    runs = [
        ("text, a document a line", paths["txt"], {}),
        ("text, eos after each", paths["txt"], {"eos": eot}),
        ("JSONL, a text field", paths["jsonl"], {}),
        ("Parquet, a text column", paths["parquet"], {}),
        ("JSONL chats, loss on the assistant", paths["chat.jsonl"], {"chat": True}),
    ]
    for name, path, kwargs in runs:
        best = float("inf")
        for _ in range(args.repeat):
            t = time.perf_counter()
            fl.text.build(path, out, tok, **kwargs)
            best = min(best, time.perf_counter() - t)
        print(f"  {name:36s} {mb / best:6.1f} MB/s")


if __name__ == "__main__":
    main()
