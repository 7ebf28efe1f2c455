"""The command lines of the pictures: ``feedline order plot`` and ``bench --plot``
(what ``plots`` computes and draws, from the arguments)."""

from __future__ import annotations

import argparse
import os
from typing import Any

from ..order import Seq
from ._draw import PlotInputError, _matplotlib
from ._report import fail as _fail
from ._report import reason
from .plot_bench import parse_compare_markdown, plot_bench_compare, plot_bench_run
from .plots import plot_order


# -- the command line ----------------------------------------------------------------------
def add_order_plot_parser(order_sub: Any) -> None:
    """Register ``order plot`` on the ``order`` subcommand's subparsers."""
    p = order_sub.add_parser(
        "plot",
        help="draw an order's mix over training and a sample of its shards (PNG)",
        description="Draw each source's share of the output over training positions (the "
        "schedules at work, repeat passes marked) and a sample of the positions "
        "each shard reads, for an order saved with Seq.to_json(). Needs "
        "matplotlib: pip install 'feedline[plot]'.",
    )
    p.add_argument("config", help="a JSON file written by Seq.to_json()")
    p.add_argument("-o", "--out", default="mix.png", help="the PNG to write (default mix.png)")
    p.add_argument("--seed", type=int, default=0, help="the order seed (default 0)")
    p.add_argument(
        "--shards",
        type=_positive,
        default=4,
        help="shard count for the lower panel (default 4; at most 8 rows shown)",
    )
    p.add_argument(
        "--points",
        type=_positive,
        default=200,
        help="windows sampled along the order (default 200)",
    )
    p.add_argument(
        "--window",
        type=_positive,
        default=2048,
        help="consecutive positions looked up per window (default 2048)",
    )
    p.add_argument(
        "--shard-at",
        type=int,
        default=None,
        metavar="POS",
        help="the order position where the shard sample starts (default: where "
        "the mix is most varied)",
    )
    p.add_argument(
        "--names",
        default=None,
        help="comma-separated source names, in source order (a saved "
        "configuration records lengths only; default 'source 0', ...)",
    )
    p.set_defaults(func=run_order_plot)


def add_bench_plot_options(bench: argparse.ArgumentParser) -> None:
    """Add ``--plot``, ``-o`` and ``--from-markdown`` to ``feedline bench``."""
    bench.epilog = (
        "--plot runs the benchmarks and draws each figure beside the baseline "
        "measured with it; --from-markdown FILE runs nothing and draws feedline "
        "beside other loaders from a saved side-by-side run."
    )
    bench.add_argument(
        "--plot",
        action="store_true",
        help="draw a bar chart (PNG, needs pip install 'feedline[plot]'): "
        "without --from-markdown, of this run's figures beside their "
        "baselines",
    )
    bench.add_argument("-o", "--out", default="bench.png", help="the PNG (default bench.png)")
    bench.add_argument(
        "--from-markdown",
        metavar="FILE",
        default=None,
        help="run nothing; draw the side-by-side tables that "
        "benchmarks/compare.py --markdown FILE wrote (docs/benchmarks.md "
        "works too): samples/s per system and worker count, log scale, "
        "numpy marked",
    )


def _positive(text: str) -> int:
    v = int(text)
    if v < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {v}")
    return v


def _picture_target(out: str) -> str | None:
    """Why the picture cannot be written to ``out``, found before drawing it, or None."""
    _, canvas = _matplotlib()
    kinds = canvas.get_supported_filetypes()
    ext = os.path.splitext(out)[1][1:].lower()
    if ext and ext not in kinds:  # no extension: matplotlib writes a PNG
        return (
            f"cannot write {out}: expected a picture name ending in "
            f"{', '.join('.' + k for k in sorted(kinds))}, found .{ext}"
        )
    parent = os.path.dirname(os.path.abspath(out))
    if not os.path.isdir(parent):
        return f"cannot write {out}: no such directory {parent}"
    return None


def run_order_plot(args: argparse.Namespace) -> int:
    """``feedline order plot``: 0 on success, 2 with a one-line error."""
    try:
        problem = _picture_target(args.out)
        if problem is None:
            with open(args.config, encoding="utf-8") as f:
                text = f.read()
    except ImportError as e:
        return _fail(str(e))
    except (OSError, UnicodeDecodeError) as e:
        return _fail(f"cannot read {args.config}: {reason(e, args.config)}")
    if problem is not None:
        return _fail(problem)
    seq = Seq.from_json(text)  # an OrderError is reported by main()
    names = [s.strip() for s in args.names.split(",")] if args.names else None
    return _draw_and_report(
        args.out,
        lambda: plot_order(
            seq,
            args.out,
            seed=args.seed,
            shards=args.shards,
            points=args.points,
            window=args.window,
            names=names,
            shard_at=args.shard_at,
        ),
    )


def _draw_and_report(out: str, draw: Any) -> int:
    """Run ``draw`` (which writes ``out`` and returns a summary): 0 and a line saying
    what was written, or 2 and a one-line error."""
    try:
        summary = draw()
    except PlotInputError as e:
        return _fail(str(e))
    except OSError as e:
        return _fail(f"cannot write {out}: {reason(e, out)}")
    print(f"wrote {out}: {summary}")
    return 0


def run_bench_plot(args: argparse.Namespace) -> int:
    """``feedline bench --plot``: run and draw, or draw a saved side-by-side table."""
    try:
        problem = _picture_target(args.out)  # before a long run, not after it
    except ImportError as e:
        return _fail(str(e))
    if problem is not None:
        return _fail(problem)
    if args.from_markdown:
        try:
            with open(args.from_markdown, encoding="utf-8") as f:
                text = f.read()
        except (OSError, UnicodeDecodeError) as e:
            return _fail(f"cannot read {args.from_markdown}: {reason(e, args.from_markdown)}")
        return _draw_and_report(
            args.out, lambda: plot_bench_compare(*parse_compare_markdown(text), args.out)
        )
    from .bench import run_benchmarks

    note = "; --quick: small sizes" if args.quick else ""
    return _draw_and_report(
        args.out, lambda: plot_bench_run(run_benchmarks(args.quick), args.out, note)
    )
