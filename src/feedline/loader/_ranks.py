"""Which rank of how many this process is, for ``shard="auto"``."""

from __future__ import annotations

import os
import sys


def detect_rank() -> tuple[int, int]:
    """(rank, world size): torch.distributed when initialised, else torchrun's RANK and
    WORLD_SIZE, else JAX's process index and count in a multi-process JAX job, else
    (0, 1)."""
    torch = sys.modules.get("torch")
    if torch is not None:
        dist = getattr(torch, "distributed", None)
        if dist is not None and dist.is_available() and dist.is_initialized():
            return int(dist.get_rank()), int(dist.get_world_size())
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        try:
            rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        except ValueError as e:
            raise ValueError(
                f"RANK={os.environ['RANK']!r} and WORLD_SIZE="
                f"{os.environ['WORLD_SIZE']!r} are not integers"
            ) from e
        if not 0 <= rank < world:
            raise ValueError(f"RANK={rank} is not in [0, WORLD_SIZE={world})")
        return rank, world
    jax = sys.modules.get("jax")
    if jax is not None and jax_distributed():
        return int(jax.process_index()), int(jax.process_count())
    return 0, 1


def jax_distributed() -> bool:
    """Whether JAX runs as a multi-process job (``jax.distributed.initialize`` was called).

    Asked without starting JAX's runtime: ``jax.process_index()`` would start it (and
    its threads) in a program that merely imported JAX.
    """
    try:
        from jax._src import distributed
    except ImportError:  # another JAX layout: ask JAX itself
        import jax

        return jax.process_count() > 1
    return distributed.global_state.client is not None
