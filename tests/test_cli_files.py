"""feedline inspect, verify and convert."""

from __future__ import annotations

import os

import numpy as np
import pytest

import feedline as fl
from feedline.cli import main
from feedline.formats.convert import sniff


class Digit(fl.Record, dims={"D": 4, "C": 10}):
    """A small labelled vector."""

    img = fl.field("D", "float32")
    label = fl.field((), "int64", domain=fl.Index("C"))


@pytest.fixture
def flr(tmp_path):
    path = tmp_path / "d.flr"
    rng = np.random.default_rng(0)
    fl.recfile.write(path, Digit, {"img": rng.random((300, 4)), "label": np.arange(300) % 10})
    return path


def test_inspect_shows_the_schema_and_the_columns(flr, capsys):
    assert main(["inspect", str(flr)]) == 0
    out = capsys.readouterr().out
    assert "rows 300" in out and "label: [] int64 Index[C]" in out and "column img" in out


def test_verify_passes_a_good_file_and_names_the_bad_column(flr, capsys):
    assert main(["verify", str(flr)]) == 0
    data = bytearray(flr.read_bytes())
    with fl.recfile.open(flr) as f:
        offset = f._crcs["label"][0]
    data[offset + 3] ^= 0xFF
    flr.write_bytes(bytes(data))
    assert main(["verify", str(flr)]) == 2
    assert "column `label` checksum" in capsys.readouterr().err


def test_ndf_to_flr_and_back_is_byte_exact(tmp_path):
    rng = np.random.default_rng(1)
    fl.ndf.save(tmp_path / "a.ndf", rng.random((50, 3)), rng.random((50, 2)))
    assert main(["convert", str(tmp_path / "a.ndf"), str(tmp_path / "a.flr")]) == 0
    assert main(["convert", str(tmp_path / "a.flr"), str(tmp_path / "b.ndf")]) == 0
    assert (tmp_path / "a.ndf").read_bytes() == (tmp_path / "b.ndf").read_bytes()
    with fl.recfile.open(tmp_path / "a.flr") as f:
        f.verify()
        assert f.record.fields["x"].shape == (3,) and len(f) == 50


def test_flr_to_npz_to_flr_keeps_the_columns(flr, tmp_path):
    assert main(["convert", str(flr), str(tmp_path / "d.npz")]) == 0
    assert main(["convert", str(tmp_path / "d.npz"), str(tmp_path / "e.flr")]) == 0
    with fl.recfile.open(flr) as a, fl.recfile.open(tmp_path / "e.flr") as b:
        for name in ("img", "label"):
            np.testing.assert_array_equal(a.columns[name], b.columns[name])


def test_npy_converts_to_a_one_field_flr(tmp_path):
    np.save(tmp_path / "x.npy", np.arange(12.0).reshape(6, 2))
    assert main(["convert", str(tmp_path / "x.npy"), str(tmp_path / "x.flr")]) == 0
    with fl.recfile.open(tmp_path / "x.flr") as f:
        np.testing.assert_array_equal(f.columns["x"], np.arange(12.0).reshape(6, 2))


def test_a_huggingface_dataset_directory_converts_to_flr(tmp_path):
    datasets = pytest.importorskip("datasets")
    hf = datasets.Dataset.from_dict(
        {"v": np.arange(20.0).reshape(10, 2).tolist(), "k": list(range(10))}
    )
    hf.save_to_disk(str(tmp_path / "hf"))
    assert sniff(tmp_path / "hf") == "hf"
    assert main(["convert", str(tmp_path / "hf"), str(tmp_path / "hf.flr")]) == 0
    with fl.recfile.open(tmp_path / "hf.flr") as f:
        np.testing.assert_array_equal(f.columns["k"], np.arange(10))
        np.testing.assert_array_equal(f.columns["v"], np.arange(20.0).reshape(10, 2))


def test_an_unknown_target_extension_is_a_one_line_error(flr, tmp_path, capsys):
    assert main(["convert", str(flr), str(tmp_path / "d.csv")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(
        f"feedline: cannot convert {flr} to {tmp_path / 'd.csv'}: cannot tell the format to write"
    )
    assert err.count("\n") == 1 and not (tmp_path / "d.csv").exists()


def test_inspect_of_a_file_that_is_no_format_says_so(tmp_path, capsys):
    (tmp_path / "x.bin").write_bytes(b"hello world")
    assert main(["inspect", str(tmp_path / "x.bin")]) == 2
    assert "unknown" in capsys.readouterr().out


def test_inspect_and_verify_read_an_nndataset(tmp_path, capsys):
    path = tmp_path / "t.nndataset"
    fl.nndataset.write(
        path,
        fl.nndataset.Build(
            {"size": 3}, "c.txt", "ab", 2, train_docs=[[1, 2], [], [0]], test_docs=[[5]]
        ),
    )
    assert main(["inspect", str(path)]) == 0
    out = capsys.readouterr().out
    assert "num_docs: 3" in out and "test_docs: 1" in out
    assert main(["verify", str(path)]) == 0


@pytest.mark.parametrize("shape", [(0, 3), (4, 3)])
def test_npy_converts_to_ndf_with_or_without_rows(tmp_path, shape):
    x = np.arange(np.prod(shape), dtype=np.float64).reshape(shape)
    np.save(tmp_path / "e.npy", x)
    assert main(["convert", str(tmp_path / "e.npy"), str(tmp_path / "e.ndf")]) == 0
    with fl.ndf.open(tmp_path / "e.ndf") as f:
        assert len(f) == shape[0] and f.record.fields["x"].shape == (3,)
        if shape[0]:
            np.testing.assert_array_equal(f.rows(np.arange(shape[0]))[0], x)  # (x, y)


@pytest.mark.parametrize("command", [["inspect"], ["verify"], ["convert"]])
def test_a_missing_file_is_a_one_line_error(tmp_path, capsys, command):
    path = tmp_path / "nope.ndf"
    args = [*command, str(path)] + ([str(tmp_path / "x.flr")] if command == ["convert"] else [])
    assert main(args) == 2
    assert capsys.readouterr().err == f"feedline: cannot read {path}: No such file or directory\n"


def test_a_source_or_target_convert_cannot_handle_is_a_one_line_error(flr, tmp_path, capsys):
    text = tmp_path / "c.txt"
    text.write_text("not a table\n")
    assert main(["convert", str(text), str(tmp_path / "x.flr")]) == 2
    assert capsys.readouterr().err == (
        f"feedline: cannot convert {text} to {tmp_path / 'x.flr'}"
        f": {text}: not a format feedline converts (found "
        "unknown)\n"
    )
    assert main(["convert", str(flr), str(tmp_path / "x.npy")]) == 2
    assert "a .npy holds one array" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.txt", "d.flr"]


def test_a_target_that_cannot_be_written_is_named_not_its_temporary(
    flr, tmp_path, capsys, monkeypatch
):
    missing = tmp_path / "gone" / "x.ndf"
    assert main(["convert", str(flr), str(missing)]) == 2
    assert capsys.readouterr().err == (
        f"feedline: cannot write {missing}: no such directory {tmp_path / 'gone'}\n"
    )
    from feedline.formats import convert

    def refused(src, dst, **options):  # what a directory without write access does
        raise PermissionError(13, "Permission denied", str(tmp_path / ".x.flr.abc.x.spool"))

    monkeypatch.setattr(convert, "convert", refused)
    assert main(["convert", str(flr), str(tmp_path / "x.flr")]) == 2
    assert capsys.readouterr().err == (
        f"feedline: cannot write {tmp_path / 'x.flr'}: Permission denied\n"
    )


@pytest.mark.parametrize("command", ["inspect", "verify"])
@pytest.mark.parametrize("kind", ["fifo", "directory"])
def test_inspect_and_verify_refuse_what_is_not_a_regular_file_without_blocking(
    tmp_path, capsys, command, kind
):
    import signal

    path = tmp_path / "thing.flr"
    os.mkfifo(path) if kind == "fifo" else path.mkdir()

    def hang(signum, frame):
        raise TimeoutError(f"feedline {command} blocked")

    previous = signal.signal(signal.SIGALRM, hang)
    signal.setitimer(signal.ITIMER_REAL, 5.0)
    try:
        assert main([command, str(path)]) == 2
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    err = capsys.readouterr().err
    assert "FormatError" in err and str(path) in err
    assert ("FIFO" if kind == "fifo" else "directory") in err and len(err.splitlines()) == 1


def test_verify_of_an_nndataset_says_what_was_and_was_not_checked(tmp_path, capsys):
    path = tmp_path / "t.nndataset"
    fl.nndataset.write(path, fl.nndataset.Build({}, "c.txt", "", 1, train_docs=[[1, 2, 3]]))
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF  # a token flipped: the format cannot tell
    path.write_bytes(bytes(data))
    assert main(["verify", str(path)]) == 0
    out = capsys.readouterr().out
    assert "structure ok" in out and "the format carries no checksums" in out
    assert "not checked: the tokens" in out


@pytest.mark.parametrize("target", ["flr", "ndf", "npy", "npz"])
def test_convert_of_a_compressed_npz_streams_its_arrays(tmp_path, target):
    import tracemalloc

    src = tmp_path / "big.npz"
    n = 8_000_000  # x: 256 MiB, y: 64 MiB, compressed to under 2 MiB; a chunk is 32 MiB
    arrays = {"x": np.zeros((n, 4), np.float64)}
    if target != "npy":
        arrays["y"] = (np.arange(n) % 7).astype(np.float64)
    np.savez_compressed(src, **arrays)
    assert os.path.getsize(src) < 2 << 20
    dst = tmp_path / f"out.{target}"
    tracemalloc.start()
    try:
        assert main(["convert", str(src), str(dst)]) == 0
        peak_mib = tracemalloc.get_traced_memory()[1] / 2**20
    finally:
        tracemalloc.stop()
    assert peak_mib < 200, f"{peak_mib:.0f} MiB: the arrays were read whole"  # 256+ whole
    if target in ("npy", "npz"):
        got = np.load(dst)
        got = {"x": got} if target == "npy" else {k: got[k] for k in got.files}
    elif target == "ndf":
        with fl.ndf.open(dst) as f:
            got = {"x": np.asarray(f._rows[:, :4]), "y": np.asarray(f._rows[:, 4])}
    else:
        with fl.recfile.open(dst) as f:
            got = {k: np.array(v) for k, v in f.columns.items()}
    assert set(got) == set(arrays)
    assert all(np.array_equal(got[k].reshape(arrays[k].shape), arrays[k]) for k in arrays)


def test_an_hf_column_of_lists_of_strings_is_refused_saying_why(tmp_path, capsys):
    datasets = pytest.importorskip("datasets")
    datasets.Dataset.from_dict({"tags": [["a", "b"], ["c"]], "x": [1, 2]}).save_to_disk(
        str(tmp_path / "hf")
    )
    assert main(["convert", str(tmp_path / "hf"), str(tmp_path / "o.flr")]) != 0
    err = capsys.readouterr().err
    assert "HF column 'tags' holds lists of str values" in err and "remove_columns" in err
    assert not (tmp_path / "o.flr").exists()
