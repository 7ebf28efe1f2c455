"""Building a corpus: ``fl.text.build`` with the byte tokenizer and with a trained BPE.

A synthetic corpus of ``--mb`` MB is generated once (kept in ``--dir``): one document
a line, documents of geometric length (mean ~1.3 KB), words drawn from a Zipf law over
50,000 random "words" (so the BPE sees a realistic spread of rare and common words),
and a fifth of the documents shaped as chats, ``question <|assistant|> answer
<|end_of_assistant|>``. Every figure is the best of ``--repeat`` runs, the corpus in
the page cache:

- byte tokenizer, loss_scope "all" and "assistant", ``workers`` 0, 1 (the default)
  and 2: MB of text per second (target: >= 50 MB/s with 2 workers);
- an 8k byte-level BPE trained on the first ``--train-mb`` MB: ``fl.text.build`` (which
  also reads, hashes and counts the file, marks the spans and writes 9 bytes a token)
  beside the ``tokenizers`` batch encoder alone, ``encode_batch_fast`` on the same
  documents already decoded in memory, in build's chunks and all at once; the runs
  alternate so a busy machine slows both alike (target: >= 0.8x of the faster).

    python benchmarks/text_build.py [--mb 100] [--dir /tmp/feedline-bench-text]
"""

from __future__ import annotations

import argparse
import itertools
import os
import time

import numpy as np

import feedline as fl

WORDS, DOC_MEAN_WORDS = 50_000, 170


def synthetic_words(rng: np.random.Generator, count: int = WORDS) -> list[bytes]:
    """``count`` made-up words of 1 to 11 letters drawn with English-like frequencies."""
    letters = np.frombuffer(b"etaoinshrdlcumwfgypbvkjxqz", np.uint8)
    weights = 1 / np.arange(1, 27) ** 0.9
    lengths = rng.integers(1, 12, count)
    chars = rng.choice(letters, size=int(lengths.sum()), p=weights / weights.sum()).tobytes()
    cuts = np.concatenate(([0], np.cumsum(lengths))).tolist()
    return [chars[a:b] for a, b in itertools.pairwise(cuts)]


def make_corpus(folder: str, mb: int) -> str:
    path = os.path.join(folder, f"corpus-{mb}mb.txt")
    if os.path.exists(path):
        return path
    os.makedirs(folder, exist_ok=True)
    rng = np.random.default_rng(0)
    vocab = synthetic_words(rng)
    target = mb * 1_000_000
    out, size = [], 0
    while size < target:
        n_docs = 20_000
        n_words = rng.geometric(1 / DOC_MEAN_WORDS, n_docs)
        ids = np.minimum(rng.zipf(1.15, int(n_words.sum())), WORDS) - 1
        words = [vocab[i] for i in ids.tolist()]
        ends = np.cumsum(n_words).tolist()
        chat = (rng.random(n_docs) < 0.2).tolist()
        start = 0
        for end, is_chat in zip(ends, chat):
            doc = b" ".join(words[start:end])
            if is_chat:
                mid = len(doc) // 3
                doc = doc[:mid] + b" <|assistant|>" + doc[mid:] + b"<|end_of_assistant|>"
            out.append(doc)
            size += len(doc) + 1
            start = end
    with open(path, "wb") as f:
        f.write(b"\n".join(out)[:target].rsplit(b"\n", 1)[0] + b"\n")
    return path


def best(repeat: int, fn, out: str | None = None) -> float:
    """The best time of ``repeat`` calls (``out`` removed first: a fresh file each time)."""
    times = []
    for _ in range(repeat):
        if out and os.path.exists(out):
            os.unlink(out)
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=int, default=100)
    ap.add_argument("--train-mb", type=int, default=20)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--dir", default="/tmp/feedline-bench-text")
    ap.add_argument("--only", choices=("byte", "bpe"), help="run one half only")
    args = ap.parse_args()
    t = time.perf_counter()
    corpus = make_corpus(args.dir, args.mb)
    size = os.path.getsize(corpus)
    print(
        f"corpus: {corpus}, {size / 1e6:.1f} MB ({time.perf_counter() - t:.1f} s to make or "
        f"find); {os.cpu_count()} CPUs"
    )
    out = os.path.join(args.dir, "out.nndataset")
    if args.only != "bpe":
        bench_byte(corpus, out, size, args.repeat)
    if args.only != "byte":
        bench_bpe(corpus, out, size, args.repeat, args.dir, args.train_mb)


def bench_byte(corpus: str, out: str, size: int, repeat: int) -> None:
    byte = fl.text.ByteTokenizer()
    print(
        "\nbyte tokenizer, 1,000 test documents (MB of text a second; target >= 50 with 2 workers)"
    )
    for scope in ("all", "assistant"):
        for workers in (0, 1, 2):
            s = best(
                repeat,
                lambda scope=scope, workers=workers: fl.text.build(
                    corpus, out, byte, loss_scope=scope, workers=workers, test_docs=1000
                ),
                out,
            )
            print(
                f"  loss_scope {scope:<9} workers {workers}: {size / 1e6 / s:7.1f} MB/s "
                f"({s:.2f} s; {os.path.getsize(out) / 1e6:,.0f} MB written)"
            )


def bench_bpe(corpus: str, out: str, size: int, repeat: int, folder: str, train_mb: int) -> None:
    train = os.path.join(folder, f"train-{train_mb}mb.txt")
    with open(corpus, "rb") as src, open(train, "wb") as dst:
        dst.write(src.read(train_mb * 1_000_000).rsplit(b"\n", 1)[0] + b"\n")
    t = time.perf_counter()
    bpe = fl.text.BPETokenizer.train(train, 8192, specials=fl.text.CHAT_SPECIALS[:2])
    print(
        f"\n8k BPE trained on {train_mb} MB in {time.perf_counter() - t:.1f} s; "
        "loss_scope assistant, 1,000 test documents"
    )
    # the baseline's documents are decoded text already in memory, in build's chunks
    chunks = [[d.decode() for d in c] for c in fl.text.iter_doc_chunks(corpus)]
    encode = bpe.hf_tokenizer.encode_batch_fast

    def chunked() -> None:
        for c in chunks:
            encode(c, add_special_tokens=False)

    def at_once() -> None:
        encode([d for c in chunks for d in c], add_special_tokens=False)

    base = {"chunked": [], "at once": []}
    ours: dict[int, list[float]] = {1: [], 2: []}
    for _ in range(repeat):  # interleaved, so a busy machine slows both alike
        base["chunked"].append(best(1, chunked))
        base["at once"].append(best(1, at_once))
        for workers in ours:
            ours[workers].append(
                best(
                    1,
                    lambda workers=workers: fl.text.build(
                        corpus, out, bpe, loss_scope="assistant", workers=workers, test_docs=1000
                    ),
                    out,
                )
            )
    for name, times in base.items():
        print(
            f"  tokenizers encode_batch_fast alone, {name:<8}: {size / 1e6 / min(times):6.2f} "
            f"MB/s ({min(times):.2f} s)"
        )
    fastest = min(min(times) for times in base.values())
    for workers, times in ours.items():
        s = min(times)
        print(
            f"  fl.text.build, workers {workers}:                {size / 1e6 / s:6.2f} MB/s "
            f"({s:.2f} s) = {fastest / s:.2f}x the faster encoder alone (target >= 0.8x)"
        )


if __name__ == "__main__":
    main()
