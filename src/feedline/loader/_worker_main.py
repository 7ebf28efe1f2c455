"""The worker process: gathers batches into shared memory for the loader it serves.

Started as ``python -m feedline.loader._worker_main FD`` (a fresh interpreter, never the
program's ``__main__``). It receives its datasets (pickled: files reopen by path), then
the names of its pool's shared-memory slots and tasks (from whichever loader holds the
pool), and writes each batch's fields into a slot.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import signal
import sys
import traceback
from multiprocessing.connection import Connection
from multiprocessing.shared_memory import SharedMemory

import numpy as np

from feedline.loader._collate import fill_padding
from feedline.loader._gather import gather


def _views(
    shm: SharedMemory, layout: list[tuple[str, str, tuple[int, ...], int]], rows: int
) -> dict[str, np.ndarray]:
    return {
        name: np.ndarray((rows, *shape), dtype=np.dtype(dtype), buffer=shm.buf, offset=off)
        for name, dtype, shape, off in layout
    }


def serve(conn: Connection) -> None:
    init = pickle.loads(conn.recv_bytes())
    datasets = init["datasets"]
    layout = init["layout"]
    batch_size = init["batch_size"]
    check_values = init["check_values"]
    transform = init.get("transform")
    output, device = init.get("output", "numpy"), init.get("device")
    fields = datasets[0].record.fields
    slots: list[SharedMemory] = []
    try:
        conn.send(("ready", os.getpid()))
        while True:
            msg = conn.recv()
            if msg[0] == "stop":
                return
            if msg[0] == "slots":  # the pool's ring of shared memory
                _open_slots(slots, msg[1])
                continue
            _, batch_no, slot, ords, recs, rows, start, seeds, context = msg
            try:
                out = _views(slots[slot], layout, batch_size)
                size = len(recs)
                gather(
                    datasets,
                    fields,
                    ords,
                    recs,
                    size,
                    seeds,
                    context,
                    check_values,
                    out={name: a for name, a in out.items()},
                )
                fill_padding(out, fields, size, rows)
                if transform is None:
                    conn.send(("done", batch_no, slot))
                else:
                    result = _transform(
                        transform, out, size, rows, start, ords, recs, output, device
                    )
                    conn.send(
                        ("result", batch_no, pickle.dumps(result, protocol=pickle.HIGHEST_PROTOCOL))
                    )
            except (Exception, KeyboardInterrupt) as e:  # reaches the caller, with the
                # traceback's text; a KeyboardInterrupt a map raised too (the batch is then
                # made again, as in process), never the end of this worker
                text = traceback.format_exc()
                try:
                    payload = pickle.dumps(e)
                except Exception:
                    payload = None
                conn.send(("error", batch_no, payload, text))
    finally:
        for s in slots:
            s.close()


def _open_slots(slots: list[SharedMemory], names: list[str]) -> None:
    for s in slots:
        s.close()
    slots.clear()
    try:
        slots.extend(SharedMemory(name=n) for n in names)
    except FileNotFoundError:
        # the pool closed before this worker got here: no task will use this ring
        for s in slots:
            s.close()
        slots.clear()


def _transform(transform, out, size, rows, start, ords, recs, output, device):
    from feedline.loader._batch import Batch
    from feedline.loader._util import to_torch

    fields = {name: a[:rows].copy() for name, a in out.items()}
    if output == "torch":
        fields = to_torch(fields, device)
    return transform(Batch(fields, size, rows, start, ords, recs))


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
