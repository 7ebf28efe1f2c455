"""``fl.nndataset.write`` streams documents from a generator: memory O(one document)."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

import feedline as fl


def _docs(n, length=500):
    for i in range(n):
        yield np.arange(i, i + length, dtype=np.uint64) % 300


def _peak(path, n, length):
    build = fl.nndataset.Build({"size": 300}, "c.txt", "", n, train_docs=_docs(n, length))
    tracemalloc.start()
    try:
        fl.nndataset.write(path, build)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_generator_of_documents_is_written_in_the_memory_of_one_document(tmp_path):
    length = 500
    small = _peak(tmp_path / "s.nndataset", 2_000, length)  # 8 MB of u64 ids if held
    large = _peak(tmp_path / "l.nndataset", 16_000, length)  # 64 MB
    # the write buffers (a few MiB) and 8 bytes a document, whatever the corpus's size
    assert large < 16 << 20 and large - small < 1 << 20, (small, large)
    with fl.nndataset.open(tmp_path / "l.nndataset") as ds:
        assert ds.info.num_docs == 16_000
        assert ds.text_doc("train", 7).tokens.tolist() == [t % 300 for t in range(7, 7 + length)]


def test_a_generator_writes_the_bytes_a_list_writes(tmp_path):
    docs = [[1, 2, 3], [], [4, 5]]
    masks = [[True, False, True], [], [0, 1]]
    common = dict(loss_scope="assistant", created=5, test_docs=[[7]], test_masks=[[1]])
    listed = fl.nndataset.Build(
        {"size": 9}, "c.txt", "", 4, train_docs=docs, train_masks=masks, **common
    )
    streamed = fl.nndataset.Build(
        {"size": 9}, "c.txt", "", 4, train_docs=iter(docs), train_masks=iter(masks), **common
    )
    fl.nndataset.write(tmp_path / "a.nndataset", listed)
    fl.nndataset.write(tmp_path / "b.nndataset", streamed)
    assert (tmp_path / "a.nndataset").read_bytes() == (tmp_path / "b.nndataset").read_bytes()
    with pytest.raises(ValueError, match="read already"):
        fl.nndataset.write(tmp_path / "c.nndataset", streamed)


def test_a_streamed_mask_count_that_does_not_match_is_refused_and_nothing_written(tmp_path):
    build = fl.nndataset.Build(
        {"size": 9},
        "c.txt",
        "",
        2,
        loss_scope="assistant",
        train_docs=iter([[1, 2], [3]]),
        train_masks=iter([[1, 1]]),
    )
    with pytest.raises(ValueError, match="train_masks ended at 1"):
        fl.nndataset.write(tmp_path / "x.nndataset", build)
    assert list(tmp_path.iterdir()) == []
