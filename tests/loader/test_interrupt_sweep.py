"""Ctrl-C at every point of a batch, in turn, loses and repeats nothing.

CPython raises a signal handler's ``KeyboardInterrupt`` where it checks for signals:
after a call of a C function returns (the value is then dropped), and at a Python
function's entry. ``interrupt_at(k)`` does the same at the ``k``-th such point inside
feedline's loader (through ``sys.setprofile``: a profile function that raises at a
``c_return`` drops the call's result, as the signal check does), and each test sweeps
``k`` over every point of one ``next()``: the rest of the pass and the next pass must
then deliver every ``(source, record)`` pair exactly once, as a training loop that
catches the interrupt, saves and goes on would see them.
"""

from __future__ import annotations

import contextlib
import inspect
import os
import sys
from collections import Counter

import numpy as np
import pytest

import feedline as fl

from ._rows import in_thread

_LOADER = os.sep + os.path.join("feedline", "loader") + os.sep
_CLOCK = os.path.join("feedline", "_base", "clock.py")
_GENERATOR = inspect.CO_GENERATOR


class R(fl.Record, dims={"D": 2}):
    x = fl.field("D", "float32")
    i = fl.field((), "int64")


N, B = 60, 8  # 8 batches, the last short


def dataset() -> fl.Dataset:
    idx = np.arange(N)
    return fl.Dataset(R, {"x": np.stack([idx, -idx], 1).astype(np.float32), "i": idx})


def _inside(frame) -> bool:
    """A frame of the loader's code, not a generator's: one closed by the garbage
    collector would swallow the interrupt (Python prints and drops an exception raised
    in a finalizer)."""
    code = frame.f_code
    name = code.co_filename
    return (_LOADER in name or name.endswith(_CLOCK)) and not code.co_flags & _GENERATOR


class interrupt_at:
    """Raise ``KeyboardInterrupt`` at the ``k``-th signal check (a C call's return, a
    Python function's entry) in the loader's code of this thread, from ``__enter__``;
    ``k=None`` counts them (``.points``) without raising."""

    def __init__(self, k: int | None) -> None:
        self.k, self.points, self.fired = k, 0, False

    def _profile(self, frame, event, arg):
        if event not in ("c_return", "call") or not _inside(frame):
            return
        self.points += 1
        if self.points == self.k:
            sys.setprofile(None)
            self.fired = True
            raise KeyboardInterrupt

    def __enter__(self):
        sys.setprofile(self._profile)
        return self

    def __exit__(self, *exc):
        sys.setprofile(None)
        return False


def pairs(records) -> Counter:
    return Counter((0, int(r)) for r in records)


def _next_records(loader, it, how: str) -> np.ndarray | None:
    """The next batch's record indices, by ``next`` or ``next_into``; None at the end."""
    if how == "next_into":
        out = {"x": np.empty((B, 2), np.float32), "i": np.empty(B, np.int64)}
        n = loader.next_into(out)
        return None if n == 0 else out["i"][:n].copy()
    try:
        i = next(it).i
        return i.numpy().copy() if hasattr(i, "numpy") else i.copy()
    except StopIteration:
        return None


def _pass(loader, it, how: str, got: list) -> None:
    while (r := _next_records(loader, it, how)) is not None:
        got.append(r)


def run_with_interrupt(make_loader, k: int | None, how: str, before: int, redo: int | None):
    """One loader's two passes: ``before`` batches, optionally one given back first
    (interrupted at point ``redo`` of its making, so the swept call takes a given-back
    number), then a ``next`` interrupted at point ``k``, the rest of the pass and one
    more pass. Returns (pairs of pass 0, pairs of pass 1, the points of the swept call,
    the probe)."""
    loader = make_loader()
    it = iter(loader)
    got: list = []
    for _ in range(before):
        got.append(_next_records(loader, it, how))
    if redo is not None:
        with pytest.raises(KeyboardInterrupt), interrupt_at(redo):
            _next_records(loader, it, how)
        assert loader._ledger.redo, f"point {redo} gave no batch back"
    with interrupt_at(k) as probe:
        try:
            r = _next_records(loader, it, how)
            if r is not None:
                got.append(r)
        except KeyboardInterrupt:
            assert probe.fired, "a KeyboardInterrupt the sweep did not raise"
    _pass(loader, it, how, got)
    first = pairs(np.concatenate(got))
    second: list = []
    _pass(loader, iter(loader), how, second)
    loader.close()
    return first, pairs(np.concatenate(second)) if second else Counter(), probe.points, probe


def gives_back(make_loader, how: str, k: int) -> bool:
    """Whether an interrupt at point ``k`` of the third batch gives it back."""
    loader = make_loader()
    it = iter(loader)
    for _ in range(2):
        _next_records(loader, it, how)
    with interrupt_at(k) as probe, contextlib.suppress(KeyboardInterrupt):
        _next_records(loader, it, how)
    back = probe.fired and bool(loader._ledger.redo)
    loader.close()
    return back


def plain():
    return fl.Loader(dataset(), B, seed=3)


def plain_threads():  # the plain path's chunks gathered ahead by two threads
    return fl.Loader(dataset(), B, seed=3, threads=2)


def mixed():  # a mix of two plain datasets: PlainPlan, one take per field per source
    ds = dataset()
    cols = ds.columns
    halves = [
        fl.Dataset(R, {n: a[s] for n, a in cols.items()}) for s in (slice(0, 25), slice(25, N))
    ]
    return fl.Loader(fl.Seq.mix([halves[0].shuffle(1), halves[1].shuffle(2)]), B, seed=3)


def general():  # a mapped dataset: LocalPlan (read, map, collate, deliver here)
    return fl.Loader(dataset().map(lambda ex, rng: ex, seed=0), B, seed=3, workers=0)


def device():  # torch output, the columns on the device (the CPU here): DevicePlan
    pytest.importorskip("torch")
    # (check_values: on the CPU, one plain dataset's tensors take the plain path)
    return fl.Loader(dataset(), B, seed=3, output="torch", check_values=True)


class V(fl.Record, dims={"T": None}):
    tok = fl.field("T", "int32")
    i = fl.field((), "int64")


def bucketed():  # ragged, padded in length buckets: LocalPlan over the buckets' claims
    tok = [np.full(1 + i % 5, i, np.int32) for i in range(N)]
    ds = fl.Dataset(V, {"tok": tok, "i": np.arange(N)})
    return fl.Loader(ds, B, seed=3, bucket="T", bucket_batches=2, workers=0)


def checked():  # check_values: the general path over the plain dataset
    return fl.Loader(dataset(), B, seed=3, check_values=True)


@pytest.mark.parametrize("given_back", [False, True], ids=["fresh", "given-back"])
@pytest.mark.parametrize(
    "make_loader, how",
    [
        (plain, "next"),
        (plain_threads, "next"),
        (mixed, "next"),
        (general, "next"),
        (checked, "next"),
        (device, "next"),
        (bucketed, "next"),
        (plain, "next_into"),
        (mixed, "next_into"),
        (general, "next_into"),
    ],
    ids=[
        "plain",
        "plain-threads",
        "mixed",
        "general",
        "checked",
        "device",
        "bucketed",
        "plain-next_into",
        "mixed-next_into",
        "general-next_into",
    ],
)
def test_an_interrupt_at_any_point_of_a_batch_loses_and_repeats_nothing(
    make_loader, how, given_back
):
    want = pairs(range(N))
    plans = {plain: "PlainPlan", plain_threads: "PlainPlan", mixed: "PlainPlan"}
    plans[device] = "DevicePlan"
    assert type(make_loader()._plan).__name__ == plans.get(make_loader, "LocalPlan")

    def sweep():
        _, _, points, _ = run_with_interrupt(make_loader, None, how, 2, None)
        assert points > 10  # the probe saw the batch's calls
        redo = None
        if given_back:  # the last point of the making that gives the batch back
            redo = next(k for k in range(points, 0, -1) if gives_back(make_loader, how, k))
            _, _, points, _ = run_with_interrupt(make_loader, None, how, 2, redo)
        bad = []
        for k in range(1, points + 1):
            first, second, _, probe = run_with_interrupt(make_loader, k, how, 2, redo)
            if not probe.fired or first != want or second != want:
                lost = sorted((want - first).elements())[:4]
                extra = sorted((first - want).elements())[:4]
                bad.append(f"k={k}: lost {lost} repeated {extra}, next pass {sum(second.values())}")
        return points, bad

    points, bad = in_thread(sweep, timeout=120)
    assert not bad, f"{len(bad)} of {points} interrupt points lose or repeat: {bad[:5]}"


def _records_of_passes(loader, passes: int) -> list[list[int]]:
    """The record indices of the rest of this pass and of ``passes - 1`` more, in order."""
    out = []
    for _ in range(passes):
        out.append([int(r) for b in loader for r in np.asarray(b.i)])
    return out


@pytest.mark.parametrize("make_loader", [plain, general], ids=["plain", "general"])
def test_an_interrupt_at_any_point_of_a_pass_s_first_batch_skips_and_repeats_no_pass(
    make_loader,
):
    # The first next() after a finished pass starts the next one (under the claim's
    # lock): interrupted anywhere, the pass that follows is that same pass, whole.
    ref = make_loader()
    list(ref)
    want = _records_of_passes(ref, 2)  # passes 1 and 2, in order
    ref.close()

    def sweep():
        bad, k, points = [], 0, None
        while points is None or k < points:
            k += 1
            loader = make_loader()
            list(loader)  # pass 0, to its end
            first = None
            with interrupt_at(k) as probe, contextlib.suppress(KeyboardInterrupt):
                first = next(iter(loader))
            if not probe.fired:
                points = k - 1  # every point of the call was swept
                loader.close()
                break
            got = _records_of_passes(loader, 2)
            if first is not None:  # the interrupt came after the batch was made
                got[0] = [int(r) for r in np.asarray(first.i)] + got[0]
            if got != want or loader.epoch != 2:
                bad.append(f"k={k}: epoch {loader.epoch}, {[len(p) for p in got]} records")
            loader.close()
        return points, bad

    points, bad = in_thread(sweep, timeout=120)
    assert points > 10 and not bad, f"{len(bad)} of {points} points: {bad[:5]}"


@pytest.mark.parametrize("action", ["reset", "load_state_dict"])
@pytest.mark.parametrize("make_loader", [plain, general], ids=["plain", "general"])
def test_an_interrupted_reset_or_restore_leaves_the_old_state_or_the_new_whole(make_loader, action):
    # Interrupted anywhere, the loader is where it was or where the call puts it, never
    # a mix (another pass at the old position, say), and it goes on as its state says.
    src = make_loader()
    src.reset(seed=11, epoch=1)
    it = iter(src)
    for _ in range(3):
        next(it)
    target = src.state_dict()
    src.close()

    def at_five():
        loader = make_loader()
        it = iter(loader)
        for _ in range(5):
            next(it)
        return loader

    def act(loader):
        if action == "reset":
            loader.reset(seed=11, epoch=1)
        else:
            loader.load_state_dict(target)

    ref = at_five()
    old = ref.state_dict()
    act(ref)
    new = ref.state_dict()
    ref.close()
    assert old != new

    def sweep():
        bad, k = [], 0
        while True:
            k += 1
            loader = at_five()
            with interrupt_at(k) as probe, contextlib.suppress(KeyboardInterrupt):
                act(loader)
            if not probe.fired:
                loader.close()
                return k - 1, bad
            state = loader.state_dict()
            if state not in (old, new):
                bad.append(f"k={k}: a mixed state {state}")
            again = make_loader()
            again.load_state_dict(state)
            if _records_of_passes(loader, 2) != _records_of_passes(again, 2):
                bad.append(f"k={k}: the loader goes on otherwise than its state says")
            loader.close()
            again.close()

    points, bad = in_thread(sweep, timeout=120)
    assert points > 3 and not bad, f"{len(bad)} of {points} points: {bad[:5]}"


def test_an_interrupt_at_any_point_of_a_torch_dataloader_batch_loses_and_repeats_nothing():
    # torch's DataLoader (no workers) over fl.torch.IterableDataset: an interrupt in the
    # loader's code ends the DataLoader's iterator (it ran through the dataset's
    # generator); the next epoch's iterator continues the pass, with the batch made
    # again, and the epoch after it is the next pass, whole. (A point in torch's own
    # frames, after the batch left feedline, is the DataLoader's to lose.)
    torch = pytest.importorskip("torch")
    import feedline.torch as flt

    want = pairs(range(N))

    def make():
        it = flt.IterableDataset(dataset(), B, shard=None, seed=3)
        return it, torch.utils.data.DataLoader(it, batch_size=None, num_workers=0)

    def run(k):
        ds, dl = make()
        got, it = [], iter(dl)
        for _ in range(2):
            got.append(next(it).i.numpy().copy())
        with interrupt_at(k) as probe, contextlib.suppress(KeyboardInterrupt):
            got.append(next(it).i.numpy().copy())
        got += [b.i.numpy().copy() for b in it]  # what the broken iterator still gives
        got += [b.i.numpy().copy() for b in dl]  # the next epoch: the rest of the pass
        second = [b.i.numpy().copy() for b in dl]
        ds._loader.close()
        return pairs(np.concatenate(got)), pairs(np.concatenate(second)), probe

    def sweep():
        _, _, probe = run(None)
        points, bad = probe.points, []
        assert points > 10
        for k in range(1, points + 1):
            first, second, probe = run(k)
            if not probe.fired or first != want or second != want:
                bad.append(f"k={k}: {sum(first.values())} then {sum(second.values())} pairs")
        return points, bad

    points, bad = in_thread(sweep, timeout=120)
    assert not bad, f"{len(bad)} of {points} points: {bad[:5]}"
