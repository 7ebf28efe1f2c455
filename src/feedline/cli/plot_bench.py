"""Pictures of benchmark results: ``feedline bench --plot`` (bars beside baselines).

``parse_compare_markdown`` reads the tables ``benchmarks/compare.py --markdown`` writes;
``plot_bench_compare`` draws them, ``plot_bench_run`` draws one ``feedline bench`` run.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ._draw import PlotInputError, _human, _matplotlib, _save


# -- the side-by-side benchmark ------------------------------------------------------------
@dataclass(frozen=True)
class BenchRow:
    system: str
    workers: int
    rate: float | None  # samples/s; None when the run was skipped or failed


_RATE = re.compile(r"^\s*([0-9.]+)\s*([kMG]?)\s*$")


def _parse_rate(text: str) -> float | None:
    m = _RATE.match(text)
    if not m:
        return None
    return float(m.group(1)) * {"": 1, "k": 1e3, "M": 1e6, "G": 1e9}[m.group(2)]


def parse_compare_markdown(text: str) -> tuple[str, list[tuple[str, list[BenchRow]]]]:
    """The side-by-side tables of ``benchmarks/compare.py --markdown`` (or docs/benchmarks.md).

    Returns ``(header, workloads)``: the run's header line ('' if absent) and, per
    workload heading (``## A: ...``), its rows in table order.
    """
    header = next(
        (
            ln.strip()
            for ln in text.splitlines()
            if ln.startswith("feedline ") and "beside other loaders" in ln
        ),
        "",
    )
    out: list[tuple[str, list[BenchRow]]] = []
    title = ""
    in_table = False
    for line in text.splitlines():
        heading = re.match(r"^#{2,4}\s+(.+?)\s*$", line)
        if heading:
            title, in_table = heading.group(1), False
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if (
            line.startswith("|")
            and cells[:2] == ["system", "workers"]
            and len(cells) > 2
            and cells[2].startswith("samples/s")  # "samples/s, first pass" since issue 20
        ):
            in_table = True
            out.append((title, []))
        elif in_table and line.startswith("|") and not set(cells[0]) <= set("-: "):
            if len(cells) >= 3 and cells[1] in ("—", "-"):
                continue  # the machine's own limit (a C gather), not a loader
            if len(cells) < 3 or not cells[1].isdigit():
                raise PlotInputError(
                    f"a results row is not 'system | workers | samples/s': {line.strip()[:80]!r}"
                )
            out[-1][1].append(BenchRow(cells[0], int(cells[1]), _parse_rate(cells[2])))
        elif not line.startswith("|"):
            in_table = False
    if not out:
        raise PlotInputError(
            "no side-by-side results table found (a '| system | workers | "
            "samples/s |' table, as benchmarks/compare.py --markdown writes)"
        )
    return header, out


def plot_bench_compare(header: str, workloads: list[tuple[str, list[BenchRow]]], path: str) -> str:
    """Bars of samples/s per system (log scale), one bar per worker count, numpy marked."""
    Figure, Canvas = _matplotlib()
    systems_max = max(len({r.system for r in rows}) for _, rows in workloads)
    fig = Figure(
        figsize=(12, 1.4 + len(workloads) * (0.9 + 0.42 * systems_max)), layout="constrained"
    )
    axes = fig.subplots(len(workloads), 1, squeeze=False)[:, 0]
    worker_counts = sorted({r.workers for _, rows in workloads for r in rows})
    wcolor = {w: c for w, c in zip(worker_counts, ["#4C72B0", "#DD8452", "#55A868", "#8172B3"])}
    for ax, (title, rows) in zip(axes, workloads):
        systems = list(dict.fromkeys(r.system for r in rows))
        base = next((r.rate for r in rows if r.system.startswith("numpy") and r.rate), None)
        h = 0.8 / len(worker_counts)
        top = max((r.rate for r in rows if r.rate), default=1.0)
        for r in rows:
            y = systems.index(r.system) - 0.4 + h * (worker_counts.index(r.workers) + 0.5)
            if r.rate is None:
                ax.text(
                    1,
                    y,
                    f"  {r.workers} workers: not measured (skipped or failed)",
                    va="center",
                    fontsize=7.5,
                    color="#777777",
                    transform=ax.get_yaxis_transform(),
                )
                continue
            ax.barh(
                y,
                r.rate,
                height=h * 0.92,
                color=wcolor[r.workers],
                edgecolor="black" if r.system.startswith("feedline") else "none",
            )
            ratio = (
                f" ({r.rate / base:.2g}x numpy)"
                if base and not r.system.startswith("numpy")
                else ""
            )
            ax.text(
                r.rate * 1.08,
                y,
                f"{_human(r.rate)} /s{ratio}",
                va="center",
                fontsize=7.5,
                bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.7, "pad": 0.5},
            )
        if base:
            ax.axvline(base, color="black", linestyle="--", linewidth=1.2)
        ax.set_xscale("log")
        ax.set_xlim(left=min(r.rate for r in rows if r.rate) / 2, right=top * 8)
        ax.xaxis.set_major_formatter(_human)
        ax.set_yticks(range(len(systems)), systems, fontsize=8.5)
        for tick in ax.get_yticklabels():
            if tick.get_text().startswith("feedline"):
                tick.set_fontweight("bold")
        ax.set_ylim(len(systems) - 0.5, -0.5)
        ax.set_xlabel("samples per second (log scale; longer is faster)")
        ax.set_title(title, loc="left", fontsize=10)
        ax.grid(axis="x", which="major", alpha=0.3)
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    handles = [
        Patch(color=wcolor[w], label=f"{w} workers" if w else "0 workers (in the main process)")
        for w in worker_counts
    ]
    handles.append(
        Line2D(
            [],
            [],
            color="black",
            linestyle="--",
            label="numpy baseline: np.take from the memory map",
        )
    )
    axes[0].legend(handles=handles, loc="lower right", fontsize=8.5, framealpha=0.95)
    fig.suptitle(
        "feedline beside other data loaders: samples per second reading shuffled "
        "batches from local disk",
        x=0.01,
        ha="left",
        fontsize=12,
    )
    if header:
        fig.supxlabel(header, fontsize=7.5, color="#555555", x=0.01, ha="left")
    _save(fig, Canvas, path)
    return f"{sum(len(rows) for _, rows in workloads)} runs in {len(workloads)} workloads"


def plot_bench_run(results: dict, path: str, note: str = "") -> str:
    """The figures of one ``feedline bench`` run beside the baselines measured with them."""
    Figure, Canvas = _matplotlib()
    groups: list[tuple[str, list[tuple[str, float | None, str]]]] = []
    s = results.get("shuffle") or {}
    groups.append(
        (
            "shuffle of 1e9 records:\nlookup of 64k random positions",
            [
                ("feedline", s.get("lookup_mps"), "feedline"),
                ("the same Feistel in plain numpy", s.get("naive_feistel_mps"), "base"),
            ],
        )
    )
    groups.append(
        (
            "shuffle of 1e9 records:\nwalk (cursor blocks of 64k)",
            [("feedline", s.get("walk_mps"), "feedline")],
        )
    )
    for key, label in (
        ("mix100", "mix of 100 shuffled parts:\nwalk"),
        ("mix1000", "mix of 1,000 parts, 20% scheduled:\nwalk"),
    ):
        m = results.get(key) or {}
        groups.append(
            (
                label,
                [
                    ("feedline", m.get("walk_mps"), "feedline"),
                    ("materialise and sort every key", m.get("sort_baseline_mps"), "base"),
                ],
            )
        )
    ld = results.get("loader") or {}
    groups.append(
        (
            "loader over in-memory arrays:\nbatches of 512, shuffled",
            [
                ("feedline Loader", ld.get("feedline_mps"), "feedline"),
                ("feedline next_into", ld.get("next_into_mps"), "feedline"),
                ("numpy take, precomputed permutation", ld.get("numpy_mps"), "base"),
                ("torch DataLoader + BatchSampler", ld.get("torch_mps"), "other"),
            ],
        )
    )
    dv = results.get("device") or {}
    if dv:
        groups.append(
            (
                f"batches gathered on the device\n({dv.get('device')})",
                [
                    ("feedline Loader(device=...)", dv.get("feedline_mps"), "feedline"),
                    ("torch index_select + randperm", dv.get("index_select_mps"), "base"),
                ],
            )
        )
    drawn: list[tuple[str, list[tuple[str, float, str]]]] = [
        (g, [(name, rate, kind) for name, rate, kind in bars if rate]) for g, bars in groups
    ]
    drawn = [(g, bars) for g, bars in drawn if bars]
    if not drawn:
        raise PlotInputError("the benchmark results hold no throughput to draw")
    color = {"feedline": "#4C72B0", "base": "#8C8C8C", "other": "#DD8452"}
    fig = Figure(figsize=(11, 1.2 + 0.36 * sum(len(b) + 1 for _, b in drawn)), layout="constrained")
    ax = fig.subplots()
    y, ticks = 0.0, []
    rates = [b[1] for _, bars in drawn for b in bars]
    for label, bars in drawn:
        ticks.append((y + (len(bars) - 1) / 2, label))
        for name, rate, kind in bars:
            ax.barh(y, rate, height=0.8, color=color[kind])
            ax.text(rate * 1.06, y, f"{name}: {_human(rate * 1e6)} /s", va="center", fontsize=8)
            y += 1
        y += 0.8
    ax.set_xscale("log")
    ax.set_xlim(min(rates) / 2, max(rates) * 30)
    ax.xaxis.set_major_formatter(lambda x, _p: _human(x * 1e6))
    ax.set_yticks([t for t, _ in ticks], [lab for _, lab in ticks], fontsize=8.5)
    ax.set_ylim(y - 0.5, -0.7)
    ax.set_xlabel(
        "per second: positions for the orders, examples for the loaders "
        "(log scale; longer is faster)"
    )
    ax.grid(axis="x", alpha=0.3)
    from matplotlib.patches import Patch

    ax.legend(
        handles=[
            Patch(color=color["feedline"], label="feedline"),
            Patch(color=color["base"], label="baseline measured in the same run"),
            Patch(color=color["other"], label="torch, same run"),
        ],
        loc="lower right",
        fontsize=8.5,
    )
    ax.set_title(
        "feedline bench: each figure beside the baseline measured in the same run\n"
        f"{results.get('path', '?')} path{note}",
        loc="left",
    )
    _save(fig, Canvas, path)
    return f"{len(rates)} figures"
