"""The ``feedline`` command line: ``feedline demo``, ``bench``, ``text build``, ``order ...``."""

from __future__ import annotations

import argparse
import sys


def _cmd_demo(args: argparse.Namespace) -> int:
    from .demo import run_demo

    return run_demo(out_dir=args.out)


def _cmd_bench(args: argparse.Namespace) -> int:
    if args.file is not None:
        from ._bench_file import run

        return run(args)
    if args.plot or args.from_markdown:
        from ._plot_commands import run_bench_plot

        return run_bench_plot(args)
    from .bench import run_bench

    return run_bench(quick=args.quick)


def _cmd_order_show(args: argparse.Namespace) -> int:
    from ..order import Order, Seq
    from ._report import fail, reason

    try:
        with open(args.config, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as e:
        return fail(f"cannot read {args.config}: {reason(e, args.config)}")
    seq = Seq.from_json(text)  # an OrderError is reported by main()
    order = Order(seq, seed=args.seed)
    print(f"{order.length:,} positions over {len(order.sources)} sources")
    stop = min(order.length, args.start + args.count)
    ords, recs = order.lookup(list(range(args.start, stop)))
    for pos, o, r in zip(range(args.start, stop), ords, recs):
        print(f"{pos:>14,}  source {o:>4}  record {r:,}")
    return 0


def _cmd_inspect(args: argparse.Namespace) -> int:
    from .files import inspect

    return inspect(args.file)


def _cmd_verify(args: argparse.Namespace) -> int:
    from .files import verify

    return verify(args.file)


def _cmd_convert(args: argparse.Namespace) -> int:
    from .files import convert

    columns = None if args.columns is None else [c for c in args.columns.split(",") if c]
    return convert(args.src, args.dst, columns=columns, quiet=args.quiet)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="feedline", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    demo = sub.add_parser("demo", help="run the demo: orders over a billion records")
    demo.add_argument("--out", default="feedline-demo", help="folder for the demo's outputs")
    demo.set_defaults(func=_cmd_demo)

    bench = sub.add_parser(
        "bench", help="the loader on FILE beside numpy's gather; without FILE, the ordering engine"
    )
    bench.add_argument("--quick", action="store_true", help="smaller sizes, for a smoke test")
    from ._bench_file import add_options
    from ._plot_commands import add_bench_plot_options, add_order_plot_parser

    add_options(bench)  # feedline bench FILE [--batch 512 --workers 2 ...]

    add_bench_plot_options(bench)  # feedline bench --plot [-o PNG] [--from-markdown FILE]
    bench.set_defaults(func=_cmd_bench)

    inspect = sub.add_parser("inspect", help="format, header, schema, counts and sizes of a file")
    inspect.add_argument("file")
    inspect.set_defaults(func=_cmd_inspect)

    verify = sub.add_parser("verify", help="check a file's structure and checksums")
    verify.add_argument("file")
    verify.set_defaults(func=_cmd_verify)

    convert = sub.add_parser(
        "convert",
        help="convert .parquet, .arrow/.feather, .csv, .jsonl, HuggingFace dataset "
        "directories, image folders and WebDataset tars to .flr, .flr to .parquet, and "
        "between .ndf, .flr, .npy and .npz (streamed; local paths or s3:// and other URLs)",
    )
    convert.add_argument("src", help="the file, directory or URL to read")
    convert.add_argument("dst", help="the file to write (its format from its extension)")
    convert.add_argument(
        "--columns", default=None, help="the columns to convert, comma-separated (a,b,c)"
    )
    convert.add_argument("--quiet", action="store_true", help="no progress bar")
    convert.set_defaults(func=_cmd_convert)

    from .text import add_parser as add_text_parser

    add_text_parser(sub)  # feedline text build

    order = sub.add_parser("order", help="inspect ordering configurations")
    order_sub = order.add_subparsers(dest="order_command", required=True)
    show = order_sub.add_parser("show", help="print positions of an order saved as JSON")
    show.add_argument("config", help="a JSON file written by Seq.to_json()")
    show.add_argument("--start", type=int, default=0)
    show.add_argument("--count", type=int, default=10)
    show.add_argument("--seed", type=int, default=0, help="the order seed")
    show.set_defaults(func=_cmd_order_show)
    add_order_plot_parser(order_sub)  # feedline order plot CONFIG.json -o PNG
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the command line; the exit status. Bad input (a feedline error, or a file
    a command cannot read or write) is one line on stderr and status 2, no traceback:
    feedline's own errors are reported here, the others by the command that meets them,
    which names the file or argument (``_report``)."""
    from ..errors import FeedlineError

    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except BrokenPipeError:  # the output was piped into something that stopped reading
        return 0
    except FeedlineError as e:
        print(f"feedline: {type(e).__name__}: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
