"""The command line: the demo, order inspection and the benchmark smoke test."""

from __future__ import annotations

import json
import subprocess
import sys

import feedline as fl
from feedline._base import spans
from feedline.cli import main


def test_the_demo_trains_resumes_identically_and_reads_every_window_once(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "feedline.cli", "demo", "--out", str(tmp_path / "demo")],
        check=True,
        capture_output=True,
        text=True,
    )
    assert "the resumed stream equals the uninterrupted one: True" in out.stdout
    assert "each exactly once" in out.stdout
    assert "(2 of them, in one pass)" in out.stdout
    assert "1,500 of 1,500 records delivered exactly once" in out.stdout
    summary = json.loads((tmp_path / "demo" / "summary.json").read_text())
    assert summary["resumed_identical"] is True
    assert summary["accuracy"] > 0.7
    assert summary["windows"]["trained"] == summary["windows"]["expected"]
    assert summary["windows"]["each_once"] is True
    assert "every window read once: True" in out.stdout
    assert summary["orders"]["positions"] == 2_000_000_000
    assert set(summary["bench"]) == {
        "numpy gather", "feedline, 0 workers", "feedline, 2 workers", "feedline, a mix of 2 files",
        "feedline, 256 shards",
    }  # fmt: skip
    assert all(rate > 0 for rate in summary["bench"].values())
    var = summary["variable_length"]
    assert var["plain"]["once"] and var["bucketed"]["once"]
    assert var["min"] < var["median"] < var["max"] == 2048
    assert var["bucketed"]["padding"] < var["plain"]["padding"] / 2
    assert "every paragraph once in each pass: True" in out.stdout
    assert var["shards"]["once"] and var["shards"]["files"] == 32
    assert var["shards"]["together"] == spans.available()
    assert "shuffled as one (their columns read together: " in out.stdout
    pics = summary["images"]
    assert pics["once"] and pics["same_stream"] and pics["images"] == 240
    assert "the stream with 1 and 2 threads is identical: True" in out.stdout
    lm, chats, tables = summary["packing"], summary["chats"], summary["tables"]
    assert lm["trained"] == lm["expected"] and lm["padding"] < lm["padding_per_doc"] / 4
    assert chats["trained"] == chats["answers"] < chats["tokens"]
    assert tables["same_batches"] and tables["round_trip"] and tables["rows"] == 1797
    assert "exactly the answers" in out.stdout and "to .flr and back to Parquet" in out.stdout
    seq = fl.Seq.from_json(
        (tmp_path / "demo" / "order.json").read_text(), _digit_sources(tmp_path / "demo")
    )
    assert len(fl.Order(seq)) == 9000
    for rank in range(2):
        state = json.loads((tmp_path / "demo" / f"state-rank{rank}.json").read_text())
        assert state["format"] == "feedline.loader.state" and state["batches"] == 40


def _digit_sources(folder):
    f = fl.recfile.open(folder / "digits.flr")
    clean = fl.Dataset(f.record, f, name="digits")
    f.close()
    return [clean, fl.Dataset(clean.record, clean.source, name="digits-augmented")]


def test_order_show_prints_the_positions_of_a_saved_configuration(tmp_path, capsys):
    path = tmp_path / "order.json"
    path.write_text(fl.Seq.source(1000).shuffle(7).to_json())
    assert main(["order", "show", str(path), "--count", "3"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "1,000 positions over 1 sources"
    assert [int(line.split()[-1]) for line in lines[1:]] == [629, 114, 228]


def test_a_bad_configuration_is_reported_without_a_traceback(tmp_path, capsys):
    path = tmp_path / "order.json"
    path.write_text('{"format": "feedline.order", "ordering_version": 1, "seq": {"x": 1}}')
    assert main(["order", "show", str(path)]) == 2
    assert "OrderError" in capsys.readouterr().err


def test_the_benchmark_runs_in_quick_mode(capsys):
    assert main(["bench", "--quick"]) == 0
    out = capsys.readouterr().out
    assert "plain numpy Feistel" in out and "peak RSS above the idle interpreter" in out


def test_a_missing_configuration_is_reported_in_one_line(tmp_path, capsys):
    path = tmp_path / "nope.json"
    assert main(["order", "show", str(path)]) == 2
    assert capsys.readouterr().err == f"feedline: cannot read {path}: No such file or directory\n"
