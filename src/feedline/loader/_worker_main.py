"""The worker process: gathers batches into shared memory for the loader it serves.

Started as ``python -m feedline.loader._worker_main FD`` (a fresh interpreter, never the
program's ``__main__``). It receives its datasets (pickled: files reopen by path), then
the names of its pool's shared-memory slots and tasks (from whichever loader holds the
pool, in ``_wire``'s frames), and writes each batch's fields into a slot (``_slots``:
ragged columns' values in the slot's room for them, or in the message when they do not
fit)."""

from __future__ import annotations

import contextlib
import os
import pickle
import signal
import sys
import traceback
from multiprocessing.connection import Connection
from multiprocessing.shared_memory import SharedMemory
from time import perf_counter_ns

from feedline._base import clock
from feedline.loader._collate import collate, fill_padding
from feedline.loader._gather import gather
from feedline.loader._many import ManyCache
from feedline.loader._slots import Layout
from feedline.loader._wire import received
from feedline.records._ragged import Ragged


def serve(conn: Connection) -> None:
    init = pickle.loads(conn.recv_bytes())
    datasets = init["datasets"]
    layout: Layout = init["layout"]
    batch_size = init["batch_size"]
    check_values = init["check_values"]
    transform = init.get("transform")
    output, device = init.get("output", "numpy"), init.get("device")
    padding = init.get("padding", (None, None, False))  # (pad_to_multiple, bounds, nested)
    fields = datasets[0].record.fields
    many = ManyCache()  # many sources' columns read as one, prepared once
    slots: list[SharedMemory | None] = []
    capacities: list[int] = []  # each slot's room for ragged values
    try:
        conn.send(("ready", os.getpid()))
        for token, msg in received(conn):  # each answer names the task's token
            if msg[0] == "stop":
                return
            if msg[0] == "slots":  # the pool's ring of shared memory
                _open_slots(slots, msg[1])
                capacities[:] = msg[2]
                continue
            if msg[0] == "slot":  # one slot grown (replaced) for larger ragged values
                _replace_slot(slots, msg[1], msg[2])
                capacities[msg[1]] = msg[3]
                continue
            _, batch_no, slot, ords, recs, rows, start, seeds, context = msg
            t0 = perf_counter_ns()
            times = clock.tally()  # where the batch's time goes (``_stats``)
            try:
                shm = slots[slot]
                if shm is None:
                    raise RuntimeError(f"batch {batch_no}: the loader's slot {slot} is gone")
                buf = shm.buf
                out = layout.fixed_views(buf, batch_size)
                size = len(recs)
                got = gather(
                    datasets,
                    fields,
                    ords,
                    recs,
                    size,
                    seeds,
                    context,
                    check_values,
                    out=dict(out),
                    many=many.get(datasets, fields, check_values),
                )
                fill_padding(out, fields, size, rows)
                times["read"] = perf_counter_ns() - t0  # the map's time inside it
                if transform is not None:
                    result = _transform(
                        transform,
                        got,
                        fields,
                        size,
                        rows,
                        start,
                        ords,
                        recs,
                        output,
                        device,
                        padding,
                    )
                    data = pickle.dumps(result, protocol=pickle.HIGHEST_PROTOCOL)
                    times["busy"] = perf_counter_ns() - t0
                    conn.send(("result", batch_no, token, data, times))
                else:
                    info, need = (
                        layout.write_ragged(buf, capacities[slot], got)
                        if layout.has_ragged
                        else (None, 0)
                    )
                    times["busy"] = perf_counter_ns() - t0
                    conn.send(("done", batch_no, token, slot, info, need, times))
            except (Exception, KeyboardInterrupt) as e:  # reaches the caller, with the
                # traceback's text; a KeyboardInterrupt a map raised too (the batch is then
                # made again, as in process), never the end of this worker
                text = traceback.format_exc()
                try:
                    payload = pickle.dumps(e)
                except Exception:
                    payload = None
                conn.send(("error", batch_no, token, payload, text))
            finally:
                clock.untally()
    finally:
        for s in slots:
            if s is not None:
                s.close()


def _open_slots(slots: list[SharedMemory | None], names: list[str]) -> None:
    for s in slots:
        if s is not None:
            s.close()
    slots[:] = [_open(n) for n in names]


def _replace_slot(slots: list[SharedMemory | None], index: int, name: str) -> None:
    old = slots[index]
    if old is not None:
        old.close()
    slots[index] = _open(name)


def _open(name: str) -> SharedMemory | None:
    """The slot named ``name``, or ``None`` where it is gone: the loader replaced it by a
    larger one (its ``slot`` message follows in the pipe, before any batch for it) or
    closed the pool (no batch follows)."""
    try:
        return SharedMemory(name=name)
    except FileNotFoundError:
        return None


def _transform(transform, got, fields, size, rows, start, ords, recs, output, device, padding):
    """The batch as the loader would deliver it (collated: ragged fields padded, their
    lengths in its metadata), through the loader's batch transform."""
    from feedline.loader._batch import Batch
    from feedline.loader._util import to_torch

    t = perf_counter_ns()
    batch = {name: a if isinstance(a, Ragged) else a[:rows].copy() for name, a in got.items()}
    collated, lengths = collate(fields, batch, size, rows, *padding)
    if output == "torch":
        collated = to_torch(collated, device)
    t1 = perf_counter_ns()
    clock.add("collate", t1 - t)
    out = transform(Batch.with_meta(collated, size, rows, start, ords, recs, lengths=lengths))
    clock.add("transform", perf_counter_ns() - t1)
    return out


def main() -> None:
    # The loader owns the shared memory and unlinks it; a tracker here would unlink the
    # segments when this worker exits, under the loader's feet.
    from multiprocessing import resource_tracker

    resource_tracker.register = lambda *args, **kwargs: None
    # A Ctrl-C in a terminal signals the whole process group: it is the loader's to
    # handle (its batch stays in flight and is waited for again), not the workers'.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    fd = int(sys.argv[1])
    conn = Connection(fd)
    # EOF or a broken pipe: the loader went away, and there is nothing left to do.
    with contextlib.suppress(EOFError, BrokenPipeError, KeyboardInterrupt):
        serve(conn)


if __name__ == "__main__":
    main()
