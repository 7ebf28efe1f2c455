"""``feedline inspect`` and ``convert`` with fields of any length (.flr version 2)."""

from __future__ import annotations

import numpy as np
import pytest

import feedline as fl
from feedline.cli import main


class Doc(fl.Record, dims={"T": None, "H": None}):
    tokens = fl.field("T", "int32")
    grid = fl.field(("H", 2, "H"), "uint8")
    title = fl.field((), "str")
    raw = fl.field((), "bytes")


def items():
    for n in (0, 3, 5, 9, 4):
        yield {
            "tokens": np.arange(n, dtype=np.int32),
            "grid": np.zeros((n % 3, 2, n % 3), np.uint8),
            "title": "é" * n,
            "raw": bytes(2 * n),
        }


@pytest.fixture
def doc_flr(tmp_path):
    path = tmp_path / "doc.flr"
    fl.recfile.write(path, Doc, items())
    return path


def test_inspect_shows_each_varying_dims_lengths_and_each_blobs_sizes(doc_flr, capsys):
    assert main(["inspect", str(doc_flr)]) == 0
    out = capsys.readouterr().out
    assert "lengths of tokens (T): min 0, median 4, max 9" in out
    assert "lengths of grid (H): min 0, median 0, max 2" in out  # once per varying axis
    assert out.count("lengths of grid (H)") == 2
    assert "sizes of title (str, bytes of UTF-8): min 0, median 8, max 18" in out
    assert "sizes of raw (bytes, bytes): min 0, median 8, max 18" in out
    assert "column grid.shapes: at byte" in out and "column tokens.offsets" in out


def test_inspect_of_an_empty_ragged_file_says_there_are_no_rows(tmp_path, capsys):
    fl.recfile.write(tmp_path / "e.flr", Doc, iter(()))
    assert main(["inspect", str(tmp_path / "e.flr")]) == 0
    assert "lengths of tokens (T): no rows" in capsys.readouterr().out


def test_a_ragged_flr_converts_to_flr_and_not_to_fixed_formats(doc_flr, tmp_path, capsys):
    assert main(["convert", str(doc_flr), str(tmp_path / "copy.flr")]) == 0
    assert (tmp_path / "copy.flr").read_bytes() == doc_flr.read_bytes()
    assert main(["convert", str(doc_flr), str(tmp_path / "x.npz")]) == 2
    err = capsys.readouterr().err
    assert "field `tokens` is [T] int32, which varies per example" in err
    assert not (tmp_path / "x.npz").exists()


def test_a_huggingface_directory_with_string_and_list_columns_converts(tmp_path):
    datasets = pytest.importorskip("datasets")
    rows = {
        "text": ["hello", "wörld", "", "a longer one"],
        "input_ids": [[1, 2, 3], [4], [], [5, 6, 7, 8, 9]],
        "attention_mask": [[1, 1, 1], [1], [], [1, 1, 1, 1, 1]],
        "boxes": [[[1, 2], [3, 4]], [[5, 6]], [], [[7, 8], [9, 10], [11, 12]]],
        "pair": [[1.0, 2.0]] * 4,
        "label": [0, 1, 0, 1],
        "blob": [b"\x00\x01", b"", b"x", b"yz"],
    }
    datasets.Dataset.from_dict(rows).save_to_disk(str(tmp_path / "hf"))
    assert main(["convert", str(tmp_path / "hf"), str(tmp_path / "hf.flr")]) == 0
    with fl.recfile.open(tmp_path / "hf.flr") as f:
        fields = f.record.fields
        assert fields["text"].kind == "str" and fields["blob"].kind == "bytes"
        # lists of varying length: a varying dim, shared where the lengths agree
        assert fields["input_ids"].varying == fields["attention_mask"].varying == ("T",)
        assert fields["boxes"].shape == (None, 2) and fields["boxes"].varying != ("T",)
        assert fields["pair"].shape == (2,)  # lists of one length: a fixed axis
        for i in range(4):
            row = f[i]
            assert row["text"] == rows["text"][i] and row["blob"] == rows["blob"][i]
            assert row["input_ids"].tolist() == rows["input_ids"][i]
            assert row["attention_mask"].tolist() == rows["attention_mask"][i]
            assert row["boxes"].reshape(-1, 2).tolist() == rows["boxes"][i]
            assert row["pair"].tolist() == rows["pair"][i] and row["label"] == rows["label"][i]
        batches = list(fl.Loader(f, 3, seed=0))
        assert sorted(int(i) for b in batches for i in b.meta.record_indices) == [0, 1, 2, 3]
