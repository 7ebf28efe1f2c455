"""JAX integration: batches as ``jax.Array``s, and per-process shards as global arrays.

::

    import feedline as fl
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

    sharding = NamedSharding(Mesh(jax.devices(), ("data",)), P("data"))
    for batch in fl.jax.batches(dataset_or_seq, 512, seed=1, sharding=sharding):
        batch["x"], batch["mask"]         # global jax.Arrays, sharded over the mesh

In a multi-process JAX job, ``shard="auto"`` (the default here) gives each process its
share of the order's positions (``jax.process_index()`` of ``jax.process_count()``),
with ``even=True`` so every process takes the same number of steps; each batch is that
process's rows, assembled into one global array with
``jax.make_array_from_process_local_data``. The global batch is ``batch_size`` rows per
process.

Needs JAX: ``pip install 'feedline[jax]'``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

try:
    import jax
    import jax.numpy as jnp
except ImportError as e:  # pragma: no cover - exercised where jax is missing
    raise ImportError("feedline.jax needs JAX: pip install 'feedline[jax]'") from e

import numpy as np

from .loader import Batch, Loader

__all__ = ["batches", "global_batch", "to_jax"]


def to_jax(batch: Batch, device: Any = None) -> dict[str, jax.Array]:
    """A batch's fields and its mask as ``jax.Array``s (on ``device``, or JAX's default)."""
    arrays = {name: np.asarray(a) for name, a in batch.fields.items()}
    arrays["mask"] = batch.mask
    return {name: jax.device_put(jnp.asarray(a), device) for name, a in arrays.items()}


def global_batch(batch: Batch, sharding: jax.sharding.Sharding) -> dict[str, jax.Array]:
    """This process's batch as the local share of global arrays laid out by ``sharding``
    (the batch axis is the first; every process passes its own rows)."""
    arrays = {name: np.asarray(a) for name, a in batch.fields.items()}
    arrays["mask"] = batch.mask
    return {name: jax.make_array_from_process_local_data(sharding, a)
            for name, a in arrays.items()}


def batches(source: Any, batch_size: int, *, sharding: jax.sharding.Sharding | None = None,
            device: Any = None, **loader_options: Any) -> Iterator[dict[str, jax.Array]]:
    """One pass of a loader's batches as dicts of ``jax.Array``s (fields and ``mask``).

    With ``sharding``, each batch is assembled into global arrays across the job's
    processes; otherwise it is put on ``device``. Options are ``fl.Loader``'s;
    ``shard="auto"`` and ``even=True`` are the defaults, so every process takes the same
    number of steps (padding rows have ``mask`` False).
    """
    loader_options.setdefault("shard", "auto")
    loader_options.setdefault("even", True)
    with Loader(source, batch_size, **loader_options) as loader:
        for batch in loader:
            yield global_batch(batch, sharding) if sharding is not None else to_jax(batch, device)
