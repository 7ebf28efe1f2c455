"""fl.ray: shards written by Ray Data tasks on a local Ray instance, then read back as one
dataset through their manifest."""

from __future__ import annotations

import importlib
import os
import random
import sys

import numpy as np
import pytest

ray = pytest.importorskip("ray")
pytest.importorskip("ray.data")

import feedline as fl  # noqa: E402
from feedline.manifest import open_manifest  # noqa: E402

pytestmark = [
    # Ray Data's DataContext sets its own deprecated attributes when it is created.
    pytest.mark.filterwarnings("ignore::DeprecationWarning:ray.data.context"),
]


class Row(fl.Record):
    """A row with its own index, so order and completeness can be read back."""

    x = fl.field((3,), "float32")
    i = fl.field((), "int64")


def _columns(n: int, start: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(start)
    return {"x": rng.random((n, 3), dtype=np.float32), "i": np.arange(start, start + n)}


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        yield ray
    finally:
        ray.shutdown()


@pytest.fixture(scope="module")
def converted(local_ray, tmp_path_factory):
    """1,000 rows from an .flr file and a dict of arrays, as 4 shards."""
    d = tmp_path_factory.mktemp("convert")
    cols = _columns(1000)
    fl.recfile.write(d / "first.flr", Row, {k: v[:400] for k, v in cols.items()})
    info = fl.ray.convert(
        [str(d / "first.flr"), {k: v[400:] for k, v in cols.items()}], d / "web", Row, num_shards=4
    )
    return info, cols


def test_the_sharded_conversion_concatenates_to_the_input(converted):
    info, cols = converted
    assert [s.name for s in info.shards] == [f"web-0000{k}.flr" for k in range(4)]
    assert [s.rows for s in info.shards] == [250] * 4
    with open_manifest(info.path) as m:
        assert len(m) == 1000 and m.record.same_schema(Row)
        rows = np.concatenate([h.getitems(np.arange(len(h)))["x"] for h in m.handles])
        ids = np.concatenate([h.columns["i"] for h in m.handles])
        m.verify()
    np.testing.assert_array_equal(ids, cols["i"])
    np.testing.assert_array_equal(rows, cols["x"])


def test_a_loader_over_the_manifest_is_exactly_once(converted):
    info, _ = converted
    with open_manifest(info.path) as m:
        seq = m.seq().shuffle(7).repeat(2)
        seen = []
        for rank in range(2):
            with fl.Loader(seq.shard(rank, 2), 37) as loader:
                seen.extend(int(i) for b in loader for i in b.i[: b.meta.size])
        salts = [ds.salt for ds in m.datasets]
    assert sorted(seen) == sorted(list(range(1000)) * 2)
    assert salts == [fl.salt(f"web-0000{k}.flr") for k in range(4)]


def test_a_task_that_fails_once_is_retried_and_the_manifest_is_complete(local_ray, tmp_path):
    marker = tmp_path / "fail-once"
    marker.touch()

    class FlakyOnce:  # defined here, so Ray ships it by value to the workers
        """Rows of a dict of arrays; the first read of row 300 claims the marker and fails."""

        def __init__(self, cols, marker):
            self.cols, self.marker = cols, marker

        def __len__(self):
            return len(self.cols["i"])

        def getitems(self, idx):
            if 300 in idx:
                try:
                    os.unlink(self.marker)  # only one attempt can claim it
                except FileNotFoundError:
                    pass
                else:
                    raise RuntimeError("injected failure (first attempt)")
            return {k: v[idx] for k, v in self.cols.items()}

    cols = _columns(600)
    info = fl.ray.convert(
        FlakyOnce(cols, str(marker)), tmp_path / "out", Row, num_shards=3, max_retries=2
    )
    assert not marker.exists()  # the failure did happen
    assert sorted(os.listdir(tmp_path / "out")) == [
        "manifest.json",
        "out-00000.flr",
        "out-00001.flr",
        "out-00002.flr",
    ]
    with open_manifest(info.path) as m:
        m.verify()
        ids = np.concatenate([h.columns["i"] for h in m.handles])
    np.testing.assert_array_equal(ids, cols["i"])


def test_a_task_that_always_fails_leaves_no_manifest_and_no_partial_shard(local_ray, tmp_path):
    class Broken:
        def __len__(self):
            return 100

        def getitems(self, idx):
            if int(idx[0]) >= 50:
                raise RuntimeError("this shard cannot be read")
            return {"x": np.zeros((len(idx), 3), np.float32), "i": np.asarray(idx)}

    with pytest.raises(fl.WorkerError, match=r"shard out-00001\.flr: RuntimeError: this shard"):
        fl.ray.convert(Broken(), tmp_path / "out", Row, num_shards=2, max_retries=1)
    left = sorted(os.listdir(tmp_path / "out"))
    assert "manifest.json" not in left
    assert all(not n.startswith(".") for n in left)  # no temporaries
    assert set(left) <= {"out-00000.flr"}  # the shard that succeeded, complete or absent
    if left:  # complete: every checksum holds and it has the shard's 50 rows
        with fl.recfile.open(tmp_path / "out" / "out-00000.flr") as f:
            f.verify()
            assert f.columns["i"].tolist() == list(range(50))


def _corpus(path, docs: int) -> None:
    rnd = random.Random(3)
    words = ["alpha", "beta", "gamma", "déjà", "<|assistant|>", "<|end_of_assistant|>"]
    with open(path, "w", encoding="utf-8") as f:
        for k in range(docs):
            f.write(" ".join(rnd.choice(words) for _ in range(rnd.randint(0, 40))))
            f.write("\r\n" if k % 7 == 0 else "\n")
            if k % 11 == 0:
                f.write(" \t\n")


def test_the_sharded_text_build_has_the_single_process_tokens(local_ray, tmp_path):
    corpus = tmp_path / "corpus.txt"
    _corpus(corpus, 4000)
    tok = fl.text.ByteTokenizer()
    single = fl.text.build(
        corpus, tmp_path / "one.nndataset", tok, loss_scope="assistant", created=1
    )
    info = fl.ray.build_text(
        corpus, tmp_path / "shards", tok, num_shards=5, loss_scope="assistant", created=1
    )
    assert len(info.shards) == 5
    with fl.nndataset.open(tmp_path / "one.nndataset") as ds:
        whole = ds.load_text("train")
        flow, mask = whole.token_flow[:], whole.loss_mask[:]
    with open_manifest(info.path) as m:
        parts = [h.load_text("train") for h in m.handles]
        assert sum(s.docs for s in m.shards) == single.documents
        assert m.tokens == single.tokens == len(flow)
        np.testing.assert_array_equal(np.concatenate([p.token_flow[:] for p in parts]), flow)
        np.testing.assert_array_equal(np.concatenate([p.loss_mask[:] for p in parts]), mask)
        seq = m.windows(32)
        with fl.Loader(seq.shuffle(1), 16) as loader:
            trained = sum(int(b.loss_mask[: b.meta.size].sum()) for b in loader)
        # every target is trained once: each shard's flow but its first token
        assert trained == sum(int(p.loss_mask[1:].sum()) for p in parts)


def test_an_existing_manifest_is_kept_unless_overwrite_is_given(tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "manifest.json").write_text("{}")
    with pytest.raises(FileExistsError, match="overwrite=True"):
        fl.ray.convert(_columns(10), tmp_path / "out", Row)


@pytest.mark.parametrize(
    "bad", [{"test_split": "bogus"}, {"seed": -1}, {"test_docs": -2}, {"loss_scope": "bogus"}]
)
def test_a_bad_argument_to_build_text_leaves_the_old_manifest(tmp_path, bad):
    corpus = tmp_path / "c.txt"
    _corpus(corpus, 10)
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "manifest.json").write_text("{}")
    with pytest.raises(ValueError):  # refused before Ray is asked for anything
        fl.ray.build_text(corpus, tmp_path / "out", fl.text.ByteTokenizer(), overwrite=True, **bad)
    assert (tmp_path / "out" / "manifest.json").read_text() == "{}"


def test_without_ray_the_import_error_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)
    monkeypatch.delitem(sys.modules, "feedline.ray", raising=False)
    with pytest.raises(ImportError, match=r"pip install 'feedline\[ray\]'"):
        importlib.import_module("feedline.ray")


def test_each_shard_holds_out_its_test_documents(local_ray, tmp_path):
    corpus = tmp_path / "corpus.txt"
    _corpus(corpus, 1200)
    tok = fl.text.ByteTokenizer()
    info = fl.ray.build_text(
        corpus, tmp_path / "shards", tok, num_shards=3, test_docs=7, seed=5, created=1
    )
    again = fl.ray.build_text(
        corpus, tmp_path / "again", tok, num_shards=3, test_docs=7, seed=5, created=1
    )
    assert [s.test_docs for s in info.shards] == [7, 7, 7]
    single = fl.text.build(corpus, tmp_path / "one.nndataset", tok, created=1)
    with open_manifest(info.path) as m, open_manifest(again.path) as m2:
        docs = sum(s.docs + s.test_docs for s in m.shards)
        tokens = sum(s.tokens + s.test_tokens for s in m.shards)
        for h, h2 in zip(m.handles, m2.handles):  # the seeded choice is the same each run
            np.testing.assert_array_equal(
                h.load_text("test").token_flow[:], h2.load_text("test").token_flow[:]
            )
        test = [fl.text.Windows(h, 16, subset="test") for h in m.handles]
        assert all(len(w) > 0 for w in test)
        for w in test:
            w.close()
    assert docs == single.documents and tokens == single.tokens
