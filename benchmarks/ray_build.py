"""Building a text corpus with Ray (``fl.ray.build_text``) beside ``fl.text.build``.

A synthetic corpus of ``--mb`` MB (default 1,000) is generated once and kept in
``--dir``: one document a line, words from a Zipf law over 50,000 random "words",
documents of geometric length (mean ~1 KB); ``--unique-mb`` MB of distinct text are
repeated to the full size (tokenizing costs the same whether or not a document was
seen before). Both builds read the same file from the page cache and use the same
tokenizer (the byte tokenizer, or with ``--bpe`` an 8k BPE trained on the first
``--unique-mb`` MB):

- single process: ``fl.text.build(corpus, out, tok)`` (its default: 2 tokenizing
  threads beside the writer);
- Ray: ``fl.ray.build_text(corpus, out_dir, tok, shard_bytes=...)`` on a local Ray
  instance of ``--cpus`` CPUs (started before the clock; its start is reported apart),
  one task per shard, each running ``fl.text.build`` on its part.

Each figure is MB of text per second, best of ``--repeat`` (the first runs are printed
too: Ray's first also starts its worker processes); the runs alternate. On
2 cores parity is the expectation: Ray's share of the work is splitting the file,
scheduling the tasks and copying each part to a local file; the point is that the
same call spreads over a cluster's nodes.

    python benchmarks/ray_build.py [--mb 1000] [--cpus 2] [--shard-mb 64] [--bpe]
"""

from __future__ import annotations

import argparse
import os
import shutil
import time
import warnings

import numpy as np
from text_build import synthetic_words  # this folder is on sys.path

import feedline as fl

WORDS, DOC_MEAN_WORDS = 50_000, 150


def make_corpus(folder: str, mb: int, unique_mb: int) -> str:
    path = os.path.join(folder, f"ray-corpus-{mb}mb.txt")
    if os.path.exists(path):
        return path
    os.makedirs(folder, exist_ok=True)
    rng = np.random.default_rng(0)
    vocab = synthetic_words(rng, WORDS)
    docs, size = [], 0
    while size < min(unique_mb, mb) * 1_000_000:
        n_words = rng.geometric(1 / DOC_MEAN_WORDS, 10_000)
        ids = (np.minimum(rng.zipf(1.15, int(n_words.sum())), WORDS) - 1).tolist()
        start = 0
        for end in np.cumsum(n_words).tolist():
            doc = b" ".join([vocab[i] for i in ids[start:end]])
            docs.append(doc)
            size += len(doc) + 1
            start = end
    block = b"\n".join(docs) + b"\n"
    target = mb * 1_000_000
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        written = 0
        while written < target:
            piece = block[: target - written]
            if len(piece) < len(block):  # end on a whole line
                piece = piece[: piece.rfind(b"\n") + 1] or piece
            f.write(piece)
            written += len(piece)
            if len(piece) < len(block):
                break
    os.replace(tmp, path)
    return path


def _drop(path: str) -> None:
    if os.path.isdir(path):
        shutil.rmtree(path)
    elif os.path.exists(path):
        os.unlink(path)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mb", type=int, default=1000, help="corpus size in MB")
    ap.add_argument("--unique-mb", type=int, default=64, help="distinct text, repeated")
    ap.add_argument("--dir", default="/tmp/feedline-bench-ray")
    ap.add_argument("--cpus", type=int, default=2, help="CPUs of the local Ray instance")
    ap.add_argument("--shard-mb", type=int, default=64, help="text per Ray shard")
    ap.add_argument(
        "--workers", type=int, default=0, help="fl.text.build threads inside each Ray task"
    )
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--bpe", action="store_true", help="an 8k BPE instead of bytes")
    args = ap.parse_args()

    warnings.filterwarnings("ignore", category=DeprecationWarning, module="ray")
    import ray

    t = time.perf_counter()
    corpus = make_corpus(args.dir, args.mb, args.unique_mb)
    size = os.path.getsize(corpus)
    print(
        f"corpus {corpus}: {size / 1e6:,.0f} MB ({time.perf_counter() - t:.1f} s to make or find)"
    )
    if args.bpe:
        sample = os.path.join(args.dir, "bpe-sample.txt")
        with open(corpus, "rb") as fin, open(sample, "wb") as fout:
            fout.write(fin.read(args.unique_mb * 1_000_000).rsplit(b"\n", 1)[0] + b"\n")
        tok = fl.text.BPETokenizer.train([sample], 8192)
        name = "BPE 8k"
    else:
        tok = fl.text.ByteTokenizer()
        name = "bytes"
    with open(corpus, "rb") as f:  # into the page cache, for both
        while f.read(64 << 20):
            pass

    t = time.perf_counter()
    ray.init(
        num_cpus=args.cpus, include_dashboard=False, log_to_driver=False, logging_level="warning"
    )
    ray.data.DataContext.get_current().enable_progress_bars = False
    ray_start = time.perf_counter() - t

    single_out = os.path.join(args.dir, "single.nndataset")
    ray_out = os.path.join(args.dir, "ray-shards")
    single, sharded, summary, info = [], [], None, None
    try:
        for _ in range(args.repeat):
            _drop(single_out)
            t = time.perf_counter()
            summary = fl.text.build(corpus, single_out, tok, created=0)
            single.append(time.perf_counter() - t)
            _drop(single_out)
            _drop(ray_out)
            t = time.perf_counter()
            info = fl.ray.build_text(
                corpus,
                ray_out,
                tok,
                shard_bytes=args.shard_mb << 20,
                workers=args.workers,
                created=0,
            )
            sharded.append(time.perf_counter() - t)
            tokens = sum(s.tokens for s in info.shards)
            if tokens != summary.tokens or len(info) != summary.documents:
                raise SystemExit(
                    f"the builds disagree: {tokens} tokens in {len(info)} "
                    f"documents against {summary.tokens} in "
                    f"{summary.documents}"
                )
            _drop(ray_out)
    finally:
        ray.shutdown()
        _drop(single_out)
        _drop(ray_out)
    mb = size / 1e6
    one, many = mb / min(single), mb / min(sharded)
    print(
        f"tokenizer {name}; {summary.documents:,} documents, {summary.tokens:,} tokens, "
        f"{summary.bytes / 1e6:,.0f} MB of .nndataset"
    )
    print(f"fl.text.build, one process (2 threads)   {min(single):7.2f} s  {one:7.1f} MB/s")
    print(
        f"fl.ray.build_text, {args.cpus} CPUs, {len(info.shards)} shards  "
        f"{min(sharded):7.2f} s  {many:7.1f} MB/s  ({many / one:.2f}x)"
    )
    if args.repeat > 1:
        print(
            f"first runs: one process {mb / single[0]:.1f} MB/s, Ray {mb / sharded[0]:.1f} "
            f"MB/s (its first run also starts the Ray workers and imports feedline there)"
        )
    print(f"(Ray's own start, not counted: {ray_start:.1f} s)")


if __name__ == "__main__":
    main()
