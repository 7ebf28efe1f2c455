"""Pictures: ``feedline order plot`` (an order's mix over training) and ``bench --plot``
(drawn by ``plot_bench``).

The computations are plain functions returning arrays, cheap for orders of any length:
``source_shares`` looks up ``points`` windows of consecutive positions (vectorised, one
``order.lookup``), ``pass_boundaries`` reads the repeats off the ``Seq`` tree, and
``parse_compare_markdown`` reads the tables of ``benchmarks/compare.py --markdown``.
Drawing needs matplotlib (the ``plot`` extra), imported only when a picture is drawn,
on the Agg canvas (no window, no global backend switch).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..order import Order, Schedule, Seq
from ..order._sources import source_len

COLORS = [
    "#4C72B0",
    "#DD8452",
    "#55A868",
    "#C44E52",
    "#8172B3",
    "#937860",
    "#DA8BC3",
    "#8C8C8C",
    "#CCB974",
    "#64B5CD",
]
MAX_LEGEND = 10  # more sources than this: the largest nine, and "other"


from ._draw import PlotInputError, _human, _matplotlib, _save  # noqa: E402


# -- an order's mix ------------------------------------------------------------------------
def source_shares(
    order: Order, points: int = 200, window: int = 2048
) -> tuple[np.ndarray, np.ndarray]:
    """Each source's share of the output in ``points`` windows spread over the order.

    The positions ``[0, len)`` are cut into ``points`` equal bins; in the middle of each,
    ``min(window, len // points)`` consecutive positions are looked up (one vectorised
    ``order.lookup``, so an order of 1e9 positions costs ``points * window`` lookups).
    Returns ``(centers, shares)``: the float middle position of each window, and a
    ``(points, len(order.sources))`` array whose rows sum to 1.
    """
    n = order.length
    if n == 0:
        raise PlotInputError("the order is empty: there is nothing to draw")
    points = max(1, min(points, n))
    w = max(1, min(window, n // points))
    edges = [i * n // points for i in range(points + 1)]
    starts = np.array(
        [edges[i] + (edges[i + 1] - edges[i] - w) // 2 for i in range(points)], dtype=np.uint64
    )
    pos = (starts[:, None] + np.arange(w, dtype=np.uint64)).reshape(-1)
    ords = order.lookup(pos)[0].reshape(points, w)
    k = len(order.sources)
    rows = np.repeat(np.arange(points) * k, w)
    counts = np.bincount(rows + ords.reshape(-1), minlength=points * k).reshape(points, k)
    return starts.astype(np.float64) + w / 2, counts / w


def seq_length(seq: Seq) -> int:
    """The number of positions of a (valid) configuration, from its tree alone."""
    op, a = seq.op, seq.args
    if op == "source":
        return source_len(a[0].obj)
    if op in ("concat", "mix"):
        return sum(seq_length(c) for c in seq.children)
    n = seq_length(seq.children[0])
    if op == "shuffle":
        return n
    if op == "repeat":
        return n * a[0]
    if op in ("cycle_to", "take"):
        return a[0]
    if op == "skip":
        return n - a[0]
    if op == "step_by":
        return -(-n // a[0])
    i, c = a
    if op == "shard":
        return max(0, -(-(n - i) // c))
    return (i + 1) * n // c - i * n // c  # split


def pass_boundaries(seq: Seq, limit: int = 1000) -> list[tuple[int, int]]:
    """Where passes of a repeat (or ``cycle_to``) end, as ``(position, level)`` pairs.

    Level 0 is the outermost repeat; a repeat inside it is level 1, and so on. Passes
    are followed through ``concat``, ``skip``, ``take``, ``step_by``, ``shard`` and
    ``split``; a ``shuffle`` or ``mix`` above a repeat interleaves its passes, so none is
    reported under one. At most ``limit`` boundaries, the first ones, sorted.
    """
    return sorted(set(_bounds(seq, 0, limit)))[:limit]


def _bounds(seq: Seq, level: int, limit: int) -> list[tuple[int, int]]:
    op, a = seq.op, seq.args
    if op in ("source", "shuffle", "mix"):
        return []
    if op == "concat":
        out: list[tuple[int, int]] = []
        at = 0
        for c in seq.children:
            out += [(at + p, lv) for p, lv in _bounds(c, level, limit)]
            at += seq_length(c)
        return out
    child = seq.children[0]
    n = seq_length(child)
    if op in ("repeat", "cycle_to"):
        total = n * a[0] if op == "repeat" else a[0]
        inner = _bounds(child, level + 1, limit)
        out = []
        m = 0
        while n and m * n < total and len(out) < limit:
            if m:
                out.append((m * n, level))
            out += [(m * n + p, lv) for p, lv in inner if m * n + p < total]
            m += 1
        return out
    inner = _bounds(child, level, limit)
    if op == "skip":
        return [(p - a[0], lv) for p, lv in inner if p > a[0]]
    if op == "take":
        return [(p, lv) for p, lv in inner if p < a[0]]
    if op == "split":
        lo, hi = a[0] * n // a[1], (a[0] + 1) * n // a[1]
        return [(p - lo, lv) for p, lv in inner if lo < p < hi]
    first, step = (0, a[0]) if op == "step_by" else a  # shard: first index, count
    length = seq_length(seq)
    out = [(-(-(p - first) // step), lv) for p, lv in inner if p > first]
    return [(p, lv) for p, lv in out if 0 < p < length]


def describe_schedule(s: Schedule) -> str:
    """A schedule as the constructor a user would have written."""
    if s.is_uniform:
        return "uniform"
    st, f, d, o = s.start, s.full, s.fade_start, s.off
    if d == 1.0 and o == 1.0:
        return f"delayed({st:g})" if st == f else f"ramp({st:g}, {f:g})"
    if st == 0.0 and f == 0.0:
        return f"until({d:g})" if d == o else f"fade({d:g}, {o:g})"
    return f"trapezoid({st:g}, {f:g}, {d:g}, {o:g})"


def _schedule_labels(seq: Seq) -> list[str]:
    """Per source ordinal: the schedules of the mix parts it is in ('' if in no mix)."""
    out: list[str] = []

    def walk(node: Seq, path: list[Schedule]) -> None:
        if node.op == "source":
            named = [describe_schedule(s) for s in path if not s.is_uniform]
            out.append(" then ".join(named) or ("uniform" if path else ""))
        elif node.op == "mix":
            for c, s in zip(node.children, node.args):
                walk(c, [*path, s])
        else:
            for c in node.children:
                walk(c, path)

    walk(seq, [])
    return out


def source_names(order: Order, names: list[str] | None = None) -> list[str]:
    """``names`` if given, else each source's ``name`` attribute, else 'source i'."""
    k = len(order.sources)
    if names is not None:
        if len(names) != k:
            raise PlotInputError(f"--names gives {len(names)} names; the order has {k} sources")
        return list(names)
    out = []
    for i, src in enumerate(order.sources):
        name = getattr(src, "name", None)
        out.append(name if isinstance(name, str) and name else f"source {i}")
    return out


def plot_order(
    seq: Seq,
    path: str,
    *,
    seed: int = 0,
    shards: int = 4,
    points: int = 200,
    window: int = 2048,
    names: list[str] | None = None,
    columns: int = 12,
    shard_at: int | None = None,
) -> str:
    """Draw ``seq``'s mix over training positions and a sample of its shards into ``path``.

    The top panel stacks each source's share of the output (``source_shares``) with the
    ends of repeat passes marked; the bottom one tabulates the first ``columns``
    positions of each of ``shards`` shards (``seq.shard(i, shards)``) from the global
    position ``shard_at`` (default: the sampled window where the mix is most varied):
    colour is the source, the number the record index. Returns a one-line summary.
    """
    Figure, Canvas = _matplotlib()
    order = Order(seq, seed=seed)
    labels = source_names(order, names)
    centers, shares = source_shares(order, points, window)
    w = max(1, min(window, order.length // max(1, min(points, order.length))))
    sched = _schedule_labels(seq)
    groups = _legend_groups(shares, labels, sched)

    fig = Figure(figsize=(12, 8.6), layout="constrained")
    top, bottom = fig.subplots(2, 1, height_ratios=[2.3, 1.2])
    stack = [shares[:, ords].sum(axis=1) for _, ords in groups]
    top.stackplot(
        centers,
        stack,
        labels=[g for g, _ in groups],
        colors=[COLORS[i % len(COLORS)] for i in range(len(groups))],
        alpha=0.9,
    )
    n = order.length
    top.set_xlim(0, n)
    top.set_ylim(0, 1)
    top.xaxis.set_major_formatter(_human)
    top.yaxis.set_major_formatter(lambda y, _p: f"{y:.0%}")
    top.set_xlabel("training position (index in the order's output)")
    top.set_ylabel("share of the output")
    top.set_title(
        f"Each source's share of the output over training - {n:,} positions, "
        f"{len(labels)} sources, order seed {seed}",
        loc="left",
    )
    top.grid(axis="y", color="white", alpha=0.5, linewidth=0.6)
    handles, _ = top.get_legend_handles_labels()
    handles += _draw_boundaries(top, pass_boundaries(seq), n)
    top.legend(
        handles=handles,
        loc="upper left",
        bbox_to_anchor=(1.01, 1.0),
        fontsize=9,
        frameon=False,
        title="source (its mix schedule)" if any(sched) else "source",
        title_fontsize=9,
        alignment="left",
    )
    if shard_at is None:  # where the mix is most varied, so that the sample shows it
        p = np.clip(shares, 1e-12, 1)
        shard_at = int(centers[int(np.argmax(-(p * np.log(p)).sum(axis=1)))])
    elif not 0 <= shard_at < n:
        raise PlotInputError(f"--shard-at {shard_at} is outside the order's {n:,} positions")
    _draw_shards(bottom, seq, seed, shards, columns, shard_at // shards, groups)
    note = (
        " Schedules act on the mix's virtual clock [0, 1] (anew in each pass of a repeat "
        "around it), not on positions: a part's share also depends on its length."
        if any(sched)
        else ""
    )
    fig.supxlabel(
        f"Shares measured in {len(centers)} windows of {w:,} consecutive positions." + note,
        fontsize=8,
        color="#555555",
        x=0.01,
        ha="left",
    )
    _save(fig, Canvas, path)
    return (
        f"{n:,} positions over {len(labels)} sources; shares in {len(centers)} "
        f"windows of {w:,} positions"
    )


def _legend_groups(
    shares: np.ndarray, labels: list[str], sched: list[str]
) -> list[tuple[str, list[int]]]:
    k = len(labels)
    named = [f"{lab} ({s})" if s else lab for lab, s in zip(labels, sched)]
    if k <= MAX_LEGEND:
        return [(named[i], [i]) for i in range(k)]
    top = sorted(np.argsort(-shares.mean(axis=0), kind="stable")[: MAX_LEGEND - 1].tolist())
    rest = [i for i in range(k) if i not in set(top)]
    return [*((named[i], [i]) for i in top), (f"other ({len(rest)} sources)", rest)]


def _draw_boundaries(ax: Any, bounds: list[tuple[int, int]], n: int) -> list[Any]:
    from matplotlib.lines import Line2D

    outer = [p for p, lv in bounds if lv == 0]
    inner = [p for p, lv in bounds if lv > 0]
    if len(outer) + len(inner) > 60:
        inner = []
    if len(outer) > 60:
        outer = []
    for p in inner:
        ax.axvline(p, color="black", linewidth=0.8, linestyle=":", alpha=0.7)
    for p in outer:
        ax.axvline(p, color="black", linewidth=1.6, linestyle="--")
    handles = []
    if outer:
        handles.append(
            Line2D(
                [],
                [],
                color="black",
                linewidth=1.6,
                linestyle="--",
                label="end of a pass (epoch) of\nthe outermost repeat",
            )
        )
        edges = [0, *outer, n]
        if len(edges) <= 13:
            for i in range(len(edges) - 1):
                ax.text(
                    (edges[i] + edges[i + 1]) / 2,
                    0.975,
                    f"pass {i + 1}",
                    ha="center",
                    va="top",
                    fontsize=9,
                    transform=ax.get_xaxis_transform(),
                    bbox={
                        "boxstyle": "round,pad=0.25",
                        "facecolor": "white",
                        "edgecolor": "none",
                        "alpha": 0.85,
                    },
                )
    if inner:
        handles.append(
            Line2D(
                [],
                [],
                color="black",
                linewidth=0.8,
                linestyle=":",
                label="end of a pass of an\ninner repeat or cycle_to",
            )
        )
    return handles


def _draw_shards(
    ax: Any,
    seq: Seq,
    seed: int,
    shards: int,
    columns: int,
    first: int,
    groups: list[tuple[str, list[int]]],
) -> None:
    from matplotlib.patches import Rectangle

    rows = min(shards, 8)
    color_of = {o: COLORS[g % len(COLORS)] for g, (_, ords) in enumerate(groups) for o in ords}
    for r in range(rows):
        order = Order(seq.shard(r, shards), seed=seed)
        m = max(0, min(columns, order.length - first))
        ords, recs = order.lookup(np.arange(first, first + m))
        for j, (o, rec) in enumerate(zip(ords.tolist(), recs.tolist())):
            ax.add_patch(
                Rectangle(
                    (j, r),
                    1,
                    1,
                    facecolor=color_of[o],
                    alpha=0.55,
                    edgecolor="white",
                    linewidth=1.5,
                )
            )
            ax.text(j + 0.5, r + 0.5, f"{rec:,}", ha="center", va="center", fontsize=7.5)
    ax.set_xlim(0, columns)
    ax.set_ylim(rows, 0)
    ax.set_xticks(np.arange(columns) + 0.5, [f"{first + j:,}" for j in range(columns)], fontsize=8)
    ax.set_yticks(np.arange(rows) + 0.5, [f"shard {r}" for r in range(rows)])
    ax.tick_params(length=0)
    for side in ax.spines.values():
        side.set_visible(False)
    ax.set_xlabel(
        f"position j within the shard (shard i's position j is the order's "
        f"position i + {shards} x j)"
    )
    more = f", the first {rows} shown" if rows < shards else ""
    where = (
        "first positions"
        if first == 0
        else f"positions from j = {first:,} (the order's positions from {first * shards:,})"
    )
    ax.set_title(
        f"Sharded over {shards} ranks with seq.shard(i, {shards}){more}: each shard's "
        f"{where}\ncolour = source (as above), number = the record index it reads",
        loc="left",
        fontsize=10,
    )


from .plot_bench import (  # noqa: E402  (it uses the helpers above)
    BenchRow,
    parse_compare_markdown,
    plot_bench_compare,
    plot_bench_run,
)

__all__ = [
    "BenchRow",
    "PlotInputError",
    "parse_compare_markdown",
    "pass_boundaries",
    "plot_bench_compare",
    "plot_bench_run",
    "plot_order",
    "source_shares",
]
