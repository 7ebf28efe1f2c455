"""``loader.stats()`` and ``progress=True`` (issue 20, part 4): every batch is counted
once, in rows, whatever path makes it, and each stage's time lands where it was spent
(a map's in the map, in the workers when they make the batches). The figures are never
compared with a speed: a map that sleeps gives a lower bound on the time it took."""

from __future__ import annotations

import sys
import threading
import time

import numpy as np
import pytest

import feedline as fl

SLEEP = 0.002


def slow(example):
    """A map that takes at least SLEEP seconds an example (importable: runs in workers)."""
    time.sleep(SLEEP)
    return example


def arrays(n: int = 100) -> fl.Dataset:
    return fl.Dataset.from_arrays(x=np.arange(n * 3, dtype=np.float32).reshape(n, 3))


def test_a_pass_counts_every_batch_and_row_with_the_order_and_the_read():
    loader = fl.Loader(arrays(), 8, seed=1, workers=0)
    assert loader.stats().batches == 0 and loader.stats().first_batch_s is None
    for _ in loader:
        pass
    s = loader.stats()
    assert (s.batches, s.rows) == (len(loader), 100)
    assert s.seconds > 0 and s.rows_per_s > 0 and s.first_batch_s is not None
    assert s.stages["order"] > 0 and s.stages["read"] > 0
    assert s.stages["map"] == 0 and s.workers == 0 and s.worker_utilisation == 0
    assert 0 < s.wait_s <= s.seconds * 1.001 + 1e-3  # one thread: it waited inside next
    text = str(s)
    assert "13 batches, 100 rows" in text and "rows/s" in text and "order" in text


def test_the_caller_s_own_time_is_not_its_wait():
    loader = fl.Loader(arrays(40), 8, seed=1, workers=0)
    for _ in loader:
        time.sleep(0.01)  # the training step
    s = loader.stats()
    assert s.seconds >= 4 * 0.01  # the steps between the five batches
    assert s.wait_s < s.seconds - 3 * 0.01
    assert 0 < s.wait_fraction < 1


def test_a_map_s_time_is_the_map_s_and_the_read_excludes_it():
    ds = arrays(40).map(slow)
    loader = fl.Loader(ds, 8, seed=2, workers=0, pad_to_multiple=None)
    rows = sum(b.meta.size for b in loader)
    s = loader.stats()
    assert rows == s.rows == 40
    assert s.stages["map"] >= 40 * SLEEP
    assert s.stages["read"] < s.stages["map"]
    assert s.stages["collate"] > 0


def test_workers_report_their_own_stages_and_busy_time():
    ds = arrays(48).map(slow)
    with fl.Loader(ds, 8, seed=3, workers=2) as loader:
        rows = sum(b.meta.size for b in loader)
        s = loader.stats()
    assert rows == s.rows == 48 and s.batches == 6 and s.workers == 2
    assert s.worker_stages["map"] >= 48 * SLEEP
    assert s.worker_busy_s >= s.worker_stages["map"]
    assert s.stages["map"] == 0  # none of it here
    assert 0 < s.worker_utilisation <= 1.05
    assert "in workers" in str(s) and "utilisation" in str(s)


def test_threads_sharing_a_loader_count_each_batch_once():
    loader = fl.Loader(arrays(400), 4, seed=4, workers=0)
    it = iter(loader)

    def run() -> None:
        for _ in it:
            pass

    threads = [threading.Thread(target=run) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    s = loader.stats()
    assert (s.batches, s.rows) == (100, 400)


def test_stats_reset_starts_the_count_again():
    loader = fl.Loader(arrays(), 10, seed=1, workers=0)
    list(loader)
    assert loader.stats(reset=True).rows == 100
    assert loader.stats().rows == 0
    next(iter(loader))
    assert loader.stats().rows == 10


def test_next_into_and_the_general_path_are_counted_too():
    loader = fl.Loader(arrays(20), 8, seed=1, workers=0, check_values=True)  # not plain
    out = {"x": np.empty((8, 3), np.float32)}
    while loader.next_into(out):
        pass
    assert loader.stats().rows == 20 and loader.stats().batches == 3


@pytest.mark.parametrize("threads", [1, 2])
def test_progress_shows_a_bar_over_each_pass(monkeypatch, threads):
    tqdm_auto = pytest.importorskip("tqdm.auto")
    bars = []

    class Bar(tqdm_auto.tqdm):  # tqdm itself, its updates and its close recorded
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.updates, self.closed = 0, False
            bars.append(self)

        def update(self, n=1):
            self.updates += n
            return super().update(n)

        def close(self):
            self.closed = True
            return super().close()

    monkeypatch.setattr(tqdm_auto, "tqdm", Bar)
    loader = fl.Loader(arrays(), 10, seed=1, workers=0, threads=threads, progress=True)
    assert loader.progress is True
    # the bar keeps the plain path (and its gather threads): a bar must cost nothing more
    assert type(loader._plan).__name__ == "PlainPlan"
    for _ in range(2):
        assert sum(b.meta.size for b in loader) == 100
    assert [(b.total, b.desc, b.updates, b.closed) for b in bars] == [
        (10, "pass 0", 10, True),
        (10, "pass 1", 10, True),
    ]
    assert "rows/s" in bars[0].postfix and "waited" in bars[0].postfix


def test_progress_without_tqdm_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "tqdm", None)
    monkeypatch.setitem(sys.modules, "tqdm.auto", None)
    with pytest.raises(ImportError, match=r"feedline\[progress\]"):
        fl.Loader(arrays(), 10, seed=1, workers=0, progress=True)


def test_a_progress_option_that_is_not_a_bool_is_named():
    with pytest.raises((TypeError, ValueError), match="progress"):
        fl.Loader(arrays(), 10, progress="yes")
