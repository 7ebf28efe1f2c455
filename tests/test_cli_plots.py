"""Pictures: ``feedline order plot``, ``feedline bench --plot`` and what they compute."""

from __future__ import annotations

import struct
import sys
from pathlib import Path

import numpy as np
import pytest

import feedline as fl
from feedline.cli import main, plots

pytest.importorskip("matplotlib")

ROOT = Path(__file__).resolve().parents[1]
S = fl.Schedule


def _png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert data[12:16] == b"IHDR"
    assert len(data) > 20_000  # a drawn figure, not an empty canvas
    return struct.unpack(">II", data[16:24])


def _config(tmp_path: Path) -> Path:
    seq = fl.Seq.mix(
        [
            fl.Seq.source(3000).shuffle(1),
            (fl.Seq.source(1000).shuffle(2), S.ramp(0.1, 0.4)),
            (fl.Seq.source(500).shuffle(3).cycle_to(1000), S.delayed(0.5)),
        ]
    ).repeat(3)
    path = tmp_path / "mix.json"
    path.write_text(seq.to_json())
    return path


# -- the commands write pictures ------------------------------------------------------------
def test_order_plot_writes_a_png(tmp_path, capsys):
    out = tmp_path / "mix.png"
    assert (
        main(
            [
                "order",
                "plot",
                str(_config(tmp_path)),
                "-o",
                str(out),
                "--names",
                "web,code,math",
                "--shards",
                "3",
                "--points",
                "60",
            ]
        )
        == 0
    )
    width, height = _png_size(out)
    assert 1000 <= width <= 2000 and 700 <= height <= 1400
    assert "15,000 positions over 3 sources" in capsys.readouterr().out


def test_bench_plot_draws_a_saved_side_by_side_table(tmp_path):
    out = tmp_path / "bench.png"
    assert (
        main(
            [
                "bench",
                "--plot",
                "--from-markdown",
                str(ROOT / "docs" / "benchmarks.md"),
                "-o",
                str(out),
            ]
        )
        == 0
    )
    width, height = _png_size(out)
    assert width >= 1000 and height >= 800


def test_bench_plot_draws_the_figures_of_its_own_run(tmp_path, monkeypatch):
    results = {
        "path": "numpy",
        "shuffle": {"lookup_mps": 20.0, "walk_mps": 30.0, "naive_feistel_mps": 18.0},
        "mix100": {"walk_mps": 6.0, "sort_baseline_mps": 25.0},
        "mix1000": {"walk_mps": 4.0, "sort_baseline_mps": 5.0},
        "loader": {"feedline_mps": 9.0, "next_into_mps": 9.5, "numpy_mps": 9.3, "torch_mps": None},
        "device": None,
    }
    import feedline.cli.bench

    monkeypatch.setattr(feedline.cli.bench, "run_benchmarks", lambda quick: results)
    out = tmp_path / "run.png"
    assert main(["bench", "--plot", "--quick", "-o", str(out)]) == 0
    _png_size(out)


# -- what the pictures show -----------------------------------------------------------------
def test_a_delayed_source_has_no_share_before_it_starts_and_some_after():
    order = fl.Order(
        fl.Seq.mix(
            [
                fl.Seq.source(3000).shuffle(1),
                (fl.Seq.source(1000).shuffle(2), S.delayed(0.5)),
            ]
        )
    )
    centers, shares = plots.source_shares(order, points=40, window=50)
    assert shares.shape == (40, 2)
    assert np.allclose(shares.sum(axis=1), 1)
    # at clock 0.5 half of the 3000 uniform elements are out: the delayed part starts there
    first = int(np.argmax(order.lookup(np.arange(len(order)))[0] == 1))
    assert 1490 <= first <= 1510
    assert (shares[centers + 25 < first, 1] == 0).all()
    assert (shares[centers - 25 > first, 1] > 0.3).all()  # 1000 of the last 2500


def test_a_uniform_mix_gives_each_source_its_share_of_the_lengths():
    order = fl.Order(
        fl.Seq.mix(
            [fl.Seq.source(3_000_000).shuffle(1), fl.Seq.source(1_000_000).shuffle(2)]
        ).repeat(250)
    )
    assert len(order) == 10**9
    centers, shares = plots.source_shares(order, points=50, window=1000)
    assert centers[0] > 0 and centers[-1] < 10**9
    assert np.abs(shares - [0.75, 0.25]).max() < 0.01


def test_the_ends_of_a_repeat_s_passes_are_its_boundaries():
    one = fl.Seq.source(100).shuffle(1)
    assert plots.pass_boundaries(one.repeat(3)) == [(100, 0), (200, 0)]
    assert plots.pass_boundaries(one.repeat(2).repeat(2)) == [(100, 1), (200, 0), (300, 1)]
    assert plots.pass_boundaries(one.cycle_to(250)) == [(100, 0), (200, 0)]
    assert plots.pass_boundaries(one.repeat(3).skip(50).take(200)) == [(50, 0), (150, 0)]
    assert plots.pass_boundaries(fl.Seq.concat([one, one.repeat(2)])) == [(200, 0)]
    assert plots.pass_boundaries(one) == []
    assert plots.pass_boundaries(one.repeat(2).shuffle(5)) == []  # passes interleaved


def test_a_shard_s_boundary_is_its_first_position_in_the_next_pass():
    seq = fl.Seq.source(10).repeat(2)
    shard = seq.shard(1, 3)  # global positions 1, 4, 7, 10, ...
    assert plots.pass_boundaries(shard) == [(3, 0)]
    assert plots.seq_length(shard) == len(fl.Order(shard)) == 7
    assert plots.pass_boundaries(seq.split(1, 3)) == [(4, 0)]  # the slice [6, 13)
    assert plots.pass_boundaries(seq.step_by(4)) == [(3, 0)]  # 0, 4, 8, 12, 16
    # each is the shard's first position at or past the whole order's boundary, 10
    for s, to_global in (
        (shard, lambda p: 1 + 3 * p),
        (seq.split(1, 3), lambda p: 6 + p),
        (seq.step_by(4), lambda p: 4 * p),
    ):
        ((p, _),) = plots.pass_boundaries(s)
        assert to_global(p - 1) < 10 <= to_global(p)


def test_schedules_are_named_as_they_were_built():
    assert [
        plots.describe_schedule(s)
        for s in (
            S.uniform(),
            S.delayed(0.5),
            S.ramp(0.1, 0.4),
            S.until(0.7),
            S.fade(0.6, 1.0),
            S.trapezoid(0.1, 0.2, 0.7, 0.9),
        )
    ] == [
        "uniform",
        "delayed(0.5)",
        "ramp(0.1, 0.4)",
        "until(0.7)",
        "fade(0.6, 1)",
        "trapezoid(0.1, 0.2, 0.7, 0.9)",
    ]


def test_the_side_by_side_tables_are_read_from_the_benchmark_page():
    page = (ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    header, workloads = plots.parse_compare_markdown(page)
    # the numpy row of table A, read here by hand: "| numpy ... | 0 | 15.44 M | ..."
    table_a = page[page.index("### A:") :]
    cell = (
        next(line for line in table_a.splitlines() if line.startswith("| numpy"))
        .split("|")[3]
        .split()
    )
    numpy_rate = float(cell[0]) * {"M": 1e6, "k": 1e3}[cell[1]]
    assert header.startswith("feedline ") and "beside other loaders" in header
    assert [t[:2] for t, _ in workloads] == ["A:", "B:"]
    rows = workloads[0][1]
    assert rows[0].system.startswith("numpy") and rows[0].workers == 0
    assert rows[0].rate == pytest.approx(numpy_rate)
    assert {r.workers for r in rows} == {0, 2}
    table = "## A: x\n\n| system | workers | samples/s |\n|---|---|---|\n| hf | 0 | — |\n"
    assert plots.parse_compare_markdown(table)[1][0][1][0].rate is None


# -- errors ---------------------------------------------------------------------------------
def test_a_missing_configuration_is_a_one_line_error(tmp_path, capsys):
    assert main(["order", "plot", str(tmp_path / "nope.json"), "-o", str(tmp_path / "x.png")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("feedline: cannot read") and "nope.json" in err
    assert not (tmp_path / "x.png").exists()


def test_a_configuration_that_is_not_json_is_a_one_line_error(tmp_path, capsys):
    path = tmp_path / "bad.json"
    path.write_text("{not json")
    assert main(["order", "plot", str(path), "-o", str(tmp_path / "x.png")]) == 2
    err = capsys.readouterr().err
    assert "OrderError" in err and "not valid JSON" in err and "Traceback" not in err


def test_wrong_names_and_positions_are_one_line_errors(tmp_path, capsys):
    config = str(_config(tmp_path))
    assert main(["order", "plot", config, "-o", str(tmp_path / "x.png"), "--names", "a,b"]) == 2
    assert "2 names; the order has 3 sources" in capsys.readouterr().err
    assert (
        main(["order", "plot", config, "-o", str(tmp_path / "x.png"), "--shard-at", "15000"]) == 2
    )
    assert "outside the order's 15,000 positions" in capsys.readouterr().err


def test_a_file_without_a_results_table_is_a_one_line_error(tmp_path, capsys):
    path = tmp_path / "notes.md"
    path.write_text("# Notes\n\nno tables here\n")
    assert main(["bench", "--from-markdown", str(path), "-o", str(tmp_path / "b.png")]) == 2
    assert "no side-by-side results table" in capsys.readouterr().err
    assert main(["bench", "--from-markdown", str(tmp_path / "gone.md")]) == 2
    assert "cannot read" in capsys.readouterr().err


def test_without_matplotlib_the_error_names_the_extra(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    with pytest.raises(ImportError, match=r"pip install 'feedline\[plot\]'"):
        plots.plot_order(fl.Seq.source(10), str(tmp_path / "x.png"))
    assert main(["order", "plot", str(_config(tmp_path)), "-o", str(tmp_path / "x.png")]) == 2
    assert "pip install 'feedline[plot]'" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["plot", "show"])
def test_a_configuration_that_is_not_utf8_is_a_one_line_error(tmp_path, capsys, command):
    path = tmp_path / "bad.json"
    path.write_bytes(b"\xff\xfe{}")
    extra = ["-o", str(tmp_path / "x.png")] if command == "plot" else []
    assert main(["order", command, str(path), *extra]) == 2
    assert capsys.readouterr().err == (
        f"feedline: cannot read {path}: expected UTF-8 text, found the byte 0xff at byte 0\n"
    )


def test_a_picture_name_matplotlib_cannot_write_is_refused_before_drawing(
    tmp_path, capsys, monkeypatch
):
    out = tmp_path / "p.txt"
    assert main(["order", "plot", str(_config(tmp_path)), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"feedline: cannot write {out}: expected a picture name ending in ")
    assert err.endswith(".png, .ps, .raw, .rgba, .svg, .svgz, .tif, .tiff, .webp, found .txt\n")
    import feedline.cli.bench

    def no_run(quick):
        raise AssertionError("the benchmarks ran")

    monkeypatch.setattr(feedline.cli.bench, "run_benchmarks", no_run)
    missing = tmp_path / "gone" / "b.png"
    assert main(["bench", "--plot", "--quick", "-o", str(missing)]) == 2
    assert capsys.readouterr().err == (
        f"feedline: cannot write {missing}: no such directory {tmp_path / 'gone'}\n"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mix.json"]
