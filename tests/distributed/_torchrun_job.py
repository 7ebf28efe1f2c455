"""One rank of the torchrun test job (run by ``torchrun``, not collected by pytest).

    torchrun --standalone --nproc_per_node=N _torchrun_job.py OUT MODE

MODE "full" reads one pass; "stop:K" checkpoints after K steps (rank 0 writes the
loader state, every rank what it saw so far), says so, and waits to be killed;
"resume" loads the checkpoint and reads the rest of the pass. Each step all-reduces
the batch's real row count, as a training step's collectives would: with even=True
no rank waits forever for a rank that has run out.
"""

import json
import os
import sys
import time

import numpy as np
import torch
import torch.distributed as dist

import feedline as fl


class Row(fl.Record):
    """One index per example."""

    i = fl.field((), "int64")


def write_json(path: str, value) -> None:
    with open(path + ".tmp", "w") as f:
        json.dump(value, f)
    os.replace(path + ".tmp", path)


def main() -> None:
    out, mode = sys.argv[1], sys.argv[2]
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    # torchrun starts each rank in its own session: the test kills ranks by pid
    write_json(os.path.join(out, f"pid-{rank}.json"), os.getpid())
    loader = fl.Loader(fl.Dataset(Row, {"i": np.arange(203)}), 8, seed=11, shard="auto", even=True)
    assert loader.shard == (rank, dist.get_world_size())
    if mode == "resume":
        with open(os.path.join(out, "state.json")) as f:
            loader.load_state_dict(json.load(f))
    seen, total = [], 0
    for step, batch in enumerate(loader):
        seen += batch.i[: batch.meta.size].tolist()
        rows = torch.tensor([batch.meta.size])
        dist.all_reduce(rows)
        total += int(rows)
        if mode.startswith("stop:") and step + 1 == int(mode[5:]):
            if rank == 0:
                write_json(os.path.join(out, "state.json"), loader.state_dict())
            write_json(os.path.join(out, f"before-{rank}.json"), seen)
            dist.barrier()
            write_json(os.path.join(out, f"ready-{rank}.json"), step)
            time.sleep(600)  # the test kills the job here, as a preemption would
    write_json(
        os.path.join(out, f"{mode}-{rank}.json"),
        {"seen": seen, "steps": len(loader), "total": total},
    )
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
