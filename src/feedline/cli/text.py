"""``feedline text build CORPUS -o OUT``: a text corpus to a ``.nndataset``, or to a
compact ``.flr`` (tokens as uint16/uint32, one row a document) when OUT ends ``.flr``.

The tokenizer is ``byte`` (the default), ``bpe:VOCAB_SIZE`` (a byte-level BPE trained
on the corpus first) or a path: a ``tokenizer.json``, or a ``.nnvocab``/``.nndataset``
whose vocabulary is reused. Progress goes to stderr, the summary to stdout.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any


def add_parser(sub: Any) -> None:
    """Register ``text build`` on the top-level subparsers ``sub``."""
    text = sub.add_parser("text", help="text corpora: build .nndataset or compact .flr files")
    text_sub = text.add_subparsers(dest="text_command", required=True)
    b = text_sub.add_parser(
        "build",
        help="tokenize a text corpus (one document a line) into a .nndataset or a .flr",
        description=__doc__.splitlines()[0],
    )
    b.add_argument("corpus", help="a text file, one document a line")
    b.add_argument(
        "-o",
        "--out",
        required=True,
        help="the file to write: a compact .flr by its suffix, else a .nndataset",
    )
    b.add_argument(
        "--tokenizer",
        default="byte",
        help="byte | bpe:VOCAB_SIZE | PATH (tokenizer.json, .nnvocab or .nndataset)",
    )
    b.add_argument("--test-docs", type=int, default=0, help="documents for the test subset")
    b.add_argument(
        "--test-split",
        choices=("random", "last"),
        default="random",
        help="which documents are test: a seeded random choice, or the last N",
    )
    b.add_argument("--loss-scope", choices=("all", "assistant"), default="all")
    b.add_argument("--workers", type=int, default=None, help="tokenizing threads (default 1)")
    b.add_argument("--seed", type=int, default=0, help="seed of the test choice")
    b.add_argument(
        "--created",
        type=int,
        default=None,
        help="the timestamp to store (default: now), for reproducible files",
    )
    b.add_argument("--vocab", default=None, help="also write the vocabulary as a .nnvocab")
    b.add_argument("--quiet", action="store_true", help="no progress bar")
    b.set_defaults(func=run_build)


def _tokenizer(spec: str, corpus: str, progress: bool) -> Any:
    from .. import text

    if spec == "byte":
        return text.ByteTokenizer()
    if spec.startswith("bpe:"):
        size = spec[4:]
        if not size.isdigit():
            raise ValueError(f"--tokenizer bpe:VOCAB_SIZE needs a number, got {spec!r}")
        return text.BPETokenizer.train(corpus, int(size), show_progress=progress)
    return text.load_tokenizer(spec)


def run_build(args: argparse.Namespace) -> int:
    """Run ``feedline text build``; 0 on success, 2 with a one-line error otherwise."""
    from .. import text
    from ..text._build import check_out_path

    progress = not args.quiet and sys.stderr.isatty()
    try:
        check_out_path(args.out, "-o")  # both targets, before the build
        if args.vocab:
            check_out_path(args.vocab, "--vocab")
        tokenizer = _tokenizer(args.tokenizer, args.corpus, progress)
        summary = text.build(
            args.corpus,
            args.out,
            tokenizer,
            test_docs=args.test_docs,
            test_split=args.test_split,
            loss_scope=args.loss_scope,
            workers=args.workers,
            seed=args.seed,
            created=args.created,
            progress=progress,
        )
        if args.vocab:
            text.write_vocab(args.vocab, tokenizer)
    except (OSError, ValueError, TypeError, ImportError) as e:
        print(f"feedline text build: {e}", file=sys.stderr)
        return 2
    print(summary)
    print(f"  tokenizer {tokenizer!r}")
    if args.vocab:
        print(f"  vocabulary written to {args.vocab}")
    return 0
