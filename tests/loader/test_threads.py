"""One loader shared by several threads: each batch goes to exactly one of them."""

from __future__ import annotations

import threading
from collections import Counter

import numpy as np
import pytest

import feedline as fl

N, BATCH, THREADS = 10_000, 7, 4


class R(fl.Record, dims={"D": 3}):
    """A test example: three features and a label."""

    x = fl.field("D", "float32")
    y = fl.field((), "int64", domain=fl.Index(5))


def arrays(n: int, base: int = 0) -> dict[str, np.ndarray]:
    i = np.arange(base, base + n)
    return {"x": (i[:, None] * 10 + np.arange(3)).astype(np.float32), "y": (i % 5).astype(np.int64)}


def run_threads(work, count: int = THREADS) -> list:
    """Run ``work(barrier)`` in ``count`` threads; their results, re-raising any error."""
    barrier = threading.Barrier(count)
    results: list = [None] * count
    errors: list = []

    def main(i: int) -> None:
        try:
            results[i] = work(barrier)
        except BaseException as e:  # re-raised in the test's thread
            errors.append(e)
            barrier.abort()

    threads = [threading.Thread(target=main, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
        assert not t.is_alive(), "a thread hangs"
    if errors:
        raise errors[0]
    return results


def check_batch(batch, base: int = 0) -> None:
    i = batch.meta.record_indices[: batch.meta.size] + base
    np.testing.assert_array_equal(
        batch.x[: batch.meta.size], (i[:, None] * 10 + np.arange(3)).astype(np.float32)
    )
    np.testing.assert_array_equal(batch.y[: batch.meta.size], i % 5)


@pytest.mark.parametrize("seed", [None, 3])
def test_threads_sharing_a_loader_each_get_whole_batches_and_every_item_once(seed):
    loader = fl.Loader(fl.Dataset(R, arrays(N)), BATCH, seed=seed)
    iter(loader)

    def work(barrier):
        barrier.wait()
        got = []
        while True:
            try:
                batch = next(loader)
            except StopIteration:
                return got
            check_batch(batch)
            got.append(
                (int(batch.meta.positions[0]), batch.meta.size, batch.meta.record_indices.tolist())
            )

    results = run_threads(work)
    batches = sorted(b for r in results for b in r)
    # Each batch went to exactly one thread: the positions tile the pass once.
    assert len(batches) == len(loader) == -(-N // BATCH)
    assert [b[0] for b in batches] == list(range(0, N, BATCH))
    assert all(b[1] == BATCH for b in batches[:-1]) and batches[-1][1] == N % BATCH
    recs = [r for b in batches for r in b[2]]
    assert sorted(recs) == list(range(N))
    # ...in the order a single thread sees.
    alone = fl.Loader(fl.Dataset(R, arrays(N)), BATCH, seed=seed)
    assert recs == np.concatenate([b.meta.record_indices for b in alone]).tolist()
    # More than one thread took part (each ran ~360 batches).
    assert sum(1 for r in results if r) > 1


def test_threads_with_their_own_next_into_buffers_each_get_every_item_once():
    loader = fl.Loader(fl.Dataset(R, arrays(N)), BATCH, seed=5)
    # Tickets keep the threads inside the pass: together they make exactly len(loader)
    # calls, so none of them sees the end of the pass (which the next call would leave).
    tickets = iter(range(len(loader)))
    ticket_lock = threading.Lock()

    def work(barrier):
        out = {"x": np.zeros((BATCH, 3), np.float32), "y": np.zeros(BATCH, np.int64)}
        barrier.wait()
        got = []
        while True:
            with ticket_lock:
                if next(tickets, None) is None:
                    return got
            k = loader.next_into(out)
            assert k > 0
            first = out["x"][:k, 0].astype(np.int64) // 10
            # The buffer holds one whole, consistent batch.
            np.testing.assert_array_equal(out["x"][:k, 1], first * 10 + 1)
            np.testing.assert_array_equal(out["y"][:k], first % 5)
            got.append(first.tolist())

    results = run_threads(work)
    assert sum(len(r) for r in results) == len(loader)
    assert sorted(i for r in results for b in r for i in b) == list(range(N))
    sizes = sorted((len(b) for r in results for b in r), reverse=True)
    assert sizes == [BATCH] * (N // BATCH) + [N % BATCH]
    # The pass is over for everyone.
    out = {"x": np.zeros((BATCH, 3), np.float32), "y": np.zeros(BATCH, np.int64)}
    assert loader.next_into(out) == 0
    assert loader.epoch == 0


def test_threads_looping_on_next_into_until_zero_read_one_pass():
    loader = fl.Loader(fl.Dataset(R, arrays(20)), BATCH)  # batches of 7, 7, 6
    first_done = threading.Event()
    second_done = threading.Event()
    rows: dict[str, list[int]] = {"a": [], "b": []}

    def buffers():
        return {"x": np.zeros((BATCH, 3), np.float32), "y": np.zeros(BATCH, np.int64)}

    def a():
        out = buffers()
        rows["a"].append(loader.next_into(out))
        first_done.set()
        second_done.wait(30)
        while k := loader.next_into(out):
            rows["a"].append(k)

    def b():
        out = buffers()
        first_done.wait(30)
        while k := loader.next_into(out):
            rows["b"].append(k)
        second_done.set()

    threads = [threading.Thread(target=a), threading.Thread(target=b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert rows == {"a": [7], "b": [7, 6]}


def test_threads_over_a_mix_each_get_every_position_once():
    a = fl.Dataset(R, arrays(6_000))
    b = fl.Dataset(R, arrays(4_000, base=100_000))
    seq = fl.Seq.mix([a.shuffle(1), b.shuffle(2)])
    loader = fl.Loader(seq, BATCH, pad=True)
    iter(loader)

    def work(barrier):
        barrier.wait()
        got = []
        while (batch := next(loader, None)) is not None:
            for o, base in ((0, 0), (1, 100_000)):
                sel = batch.meta.source_ordinals[: batch.meta.size] == o
                i = batch.meta.record_indices[: batch.meta.size][sel] + base
                np.testing.assert_array_equal(batch.y[: batch.meta.size][sel], i % 5)
            assert (batch.x[batch.meta.size :] == 0).all()
            got.extend(
                zip(
                    batch.meta.source_ordinals[batch.meta.mask].tolist(),
                    batch.meta.record_indices[batch.meta.mask].tolist(),
                )
            )
        return got

    results = run_threads(work)
    seen = Counter(p for r in results for p in r)
    assert seen == Counter([(0, i) for i in range(6_000)] + [(1, i) for i in range(4_000)])


def test_threads_can_save_state_while_others_read():
    # Each thread calls next() on the loader (entered once by iter() here): a thread that
    # began a `for` loop after another had finished the pass would start the next pass.
    loader = fl.Loader(fl.Dataset(R, arrays(2_000)), BATCH, seed=2)
    iter(loader)
    states: list = []

    def work(barrier):
        barrier.wait()
        n = 0
        while (batch := next(loader, None)) is not None:
            n += batch.meta.size
            states.append(loader.state_dict())
        return n

    assert sum(run_threads(work)) == 2_000
    assert all(s["batches"] <= len(loader) for s in states)
    assert max(s["batches"] for s in states) == len(loader)
    # every state, saved while other threads were mid-batch, resumes exactly: the batches
    # it names as delivered, plus those a restored loader makes, are the pass, once each
    want = [
        b.meta.record_indices.tolist()
        for b in fl.Loader(fl.Dataset(R, arrays(2_000)), BATCH, seed=2)
    ]
    for state in states[::7]:
        resumed = fl.Loader(fl.Dataset(R, arrays(2_000)), BATCH, seed=2)
        resumed.load_state_dict(state)
        made = [b.meta.record_indices.tolist() for b in resumed]
        delivered = list(range(state["batches"])) + state["ahead"]
        assert sorted(map(tuple, made + [want[i] for i in delivered])) == sorted(map(tuple, want))


def test_a_batch_finished_out_of_order_is_not_lost_by_a_state_saved_meanwhile():
    ds = fl.Dataset(R, arrays(100))
    want = [b.meta.record_indices.tolist() for b in fl.Loader(ds, 10, seed=4)]
    loader = fl.Loader(ds, 10, seed=4)
    first = loader.claim()  # a thread claims batch 0 and is still gathering it...
    second = next(loader)  # ...while another thread delivers batch 1
    assert second.meta.record_indices.tolist() == want[1]
    state = loader.state_dict()
    assert state["batches"] == 0 and state["ahead"] == [1]  # batch 0 is not delivered
    resumed = fl.Loader(ds, 10, seed=4)
    resumed.load_state_dict(state)
    assert [b.meta.record_indices.tolist() for b in resumed] == [want[0], *want[2:]]
    loader._ledger.deliver(first, first.size)  # the first thread delivers batch 0 at last
    assert loader.state_dict()["batches"] == 2 and loader.state_dict()["ahead"] == []
