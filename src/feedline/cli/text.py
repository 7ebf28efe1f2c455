"""``feedline text build CORPUS... -o OUT``: corpora to a .nndataset or a compact .flr.

OUT ending ``.flr`` gets the compact corpus (tokens as uint16/uint32, one row a
document), any other name a ``.nndataset``.

Each CORPUS is a text file (a document a line, or between ``--sep``s), a ``.jsonl``
(``--text-field``, or ``--chat`` conversations) or a ``.parquet`` (``--text-field``
column). The tokenizer is ``byte`` (the default), ``bpe:VOCAB_SIZE`` (a byte-level
BPE trained on all the corpora first, with the chat specials for ``--chat`` or
``--loss-scope assistant`` and the ``--eos``/``--bos`` names) or a path: a
``tokenizer.json``, or a ``.nnvocab``/``.nndataset`` whose vocabulary is reused.
Progress goes to stderr, the summary to stdout.
"""

from __future__ import annotations

import argparse
import codecs
import sys
from typing import Any


def add_parser(sub: Any) -> None:
    """Register ``text build`` on the top-level subparsers ``sub``."""
    text = sub.add_parser("text", help="text corpora: build .nndataset or compact .flr files")
    text_sub = text.add_subparsers(dest="text_command", required=True)
    b = text_sub.add_parser(
        "build",
        help="tokenize corpora (text, JSONL, Parquet, chats) into a .nndataset or a .flr",
        description=__doc__.splitlines()[0],
    )
    b.add_argument(
        "corpus", nargs="+", help="text files (a document a line), .jsonl or .parquet files"
    )
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
    b.add_argument(
        "--loss-scope",
        choices=("all", "assistant"),
        default=None,
        help="the tokens whose loss counts (default: assistant with --chat, else all)",
    )
    b.add_argument(
        "--eos", default=None, help="a token id or special name put after every document"
    )
    b.add_argument(
        "--bos", default=None, help="a token id or special name put before every document"
    )
    b.add_argument(
        "--sep",
        default=None,
        help=r"text files: documents between SEP, not lines (escapes read: '\n\n')",
    )
    b.add_argument(
        "--text-field", default="text", help="the JSONL field or Parquet column of the text"
    )
    b.add_argument(
        "--chat", action="store_true", help="the .jsonl corpora are chats (messages lists)"
    )
    b.add_argument("--messages-field", default="messages", help="the chats' messages field")
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


def _unescape(sep: str) -> str:
    """``--sep`` with its backslash escapes read (``\\n``, ``\\t``, ``\\x1e``...)."""
    return codecs.decode(sep.encode("latin-1", "backslashreplace"), "unicode_escape")


def _end(value: str | None) -> int | str | None:
    """``--eos``/``--bos``: an id when it is digits, else a special's name."""
    return int(value) if value is not None and value.isdigit() else value


def _tokenizer(spec: str, args: argparse.Namespace, inputs: Any, progress: bool) -> Any:
    from .. import text

    if spec == "byte":
        return text.ByteTokenizer()
    if spec.startswith("bpe:"):
        size = spec[4:]
        if not size.isdigit():
            raise ValueError(f"--tokenizer bpe:VOCAB_SIZE needs a number, got {spec!r}")
        specials = list(text.CHAT_SPECIALS) if args.chat or args.loss_scope == "assistant" else []
        for name in (args.eos, args.bos):
            if isinstance(name, str) and name not in specials:
                specials.append(name)
        return text.BPETokenizer.train(inputs, int(size), specials, show_progress=progress)
    return text.load_tokenizer(spec)


def _inputs(args: argparse.Namespace, sep: str | None) -> Any:
    from ..text._inputs import as_inputs

    return as_inputs(
        args.corpus,
        sep=sep,
        text_field=args.text_field,
        chat=args.chat,
        messages_field=args.messages_field,
    )


def run_build(args: argparse.Namespace) -> int:
    """Run ``feedline text build``; 0 on success, 2 with a one-line error otherwise."""
    from .. import text
    from ..text._build import check_out_path

    progress = not args.quiet and sys.stderr.isatty()
    try:
        check_out_path(args.out, "-o")  # both targets, before the build
        if args.vocab:
            check_out_path(args.vocab, "--vocab")
        args.eos, args.bos = _end(args.eos), _end(args.bos)
        sep = None if args.sep is None else _unescape(args.sep)
        inputs = _inputs(args, sep)
        tokenizer = _tokenizer(args.tokenizer, args, inputs, progress)
        summary = text.build(
            inputs,
            args.out,
            tokenizer,
            test_docs=args.test_docs,
            test_split=args.test_split,
            loss_scope=args.loss_scope,
            eos=args.eos,
            bos=args.bos,
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
