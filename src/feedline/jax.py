"""JAX integration: batches as ``jax.Array``s, and per-process shards as global arrays.

::

    import feedline as fl
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

    sharding = NamedSharding(Mesh(jax.devices(), ("data",)), P("data"))
    for batch in fl.jax.batches(dataset_or_seq, 512, seed=1, sharding=sharding):
        batch.x, batch.meta.mask          # global jax.Arrays, sharded over the mesh

In a multi-process JAX job, ``shard="auto"`` (the default here) gives each process its
share of the order's positions (``jax.process_index()`` of ``jax.process_count()``),
with ``even=True`` so every process takes the same number of steps; each batch is that
process's rows, assembled into one global array with
``jax.make_array_from_process_local_data``. The global batch is ``batch_size`` rows per
process.

Each batch is an ``fl.Batch`` whose fields (``batch.x``, or ``batch["x"]``) and metadata
(``batch.meta.mask``, ``.positions``, ...; ``meta.size`` is this process's real examples)
are ``jax.Array``s: fields and metadata never share a name, so a field named ``mask``
is ``batch.mask`` and the padding mask is ``batch.meta.mask``. Importing this module
registers ``fl.Batch`` as a pytree, so a batch goes through ``jax.jit`` and
``jax.tree_util`` whole (its leaves: the fields in order, then ``meta.size``, ``mask``,
``positions``, ``source_ordinals``, ``record_indices`` and ``lengths``). A batch was
a dict with the mask under ``"mask"`` before ``batch.meta``: ``batch["x"]`` still reads
a field, ``batch.meta.mask`` is the mask, ``dict(batch.fields)`` the fields' dict.

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

from .errors import DomainError
from .loader import Batch, Loader
from .loader._batch import BatchMeta

__all__ = ["batches", "global_batch", "to_jax"]


def _arrays(batch: Batch) -> dict[str, np.ndarray]:
    """The batch's fields as numpy arrays. Without ``jax_enable_x64`` JAX makes
    64-bit integers 32-bit: a field whose values would not fit is refused, naming it,
    rather than wrapped silently."""
    arrays = {name: np.asarray(a) for name, a in batch.fields.items() if not isinstance(a, list)}
    if not jax.config.jax_enable_x64:
        for name, a in arrays.items():
            if a.dtype.kind in "iu" and a.dtype.itemsize == 8 and a.size:
                narrow = np.iinfo(np.int32 if a.dtype.kind == "i" else np.uint32)
                lo, hi = int(a.min()), int(a.max())
                if lo < narrow.min or hi > narrow.max:
                    raise DomainError(
                        f"field `{name}` ({a.dtype}) holds {lo} .. {hi}, which JAX's 32-bit "
                        f"{narrow.dtype} cannot hold: enable 64-bit values with "
                        "jax.config.update('jax_enable_x64', True)"
                    )
    return arrays


def _host(a: Any) -> np.ndarray:
    return np.asarray(a.cpu() if hasattr(a, "cpu") else a)


def _rebuilt(batch: Batch, convert: Any) -> Batch:
    """``batch`` with ``convert`` applied to its fields now and to its metadata as read."""
    arrays = _arrays(batch)
    # a bytes or str field stays a list of them (JAX holds numbers only)
    fields = {
        name: convert(arrays[name]) if name in arrays else a for name, a in batch.fields.items()
    }
    meta = batch.meta.converted(lambda a: convert(_host(a)))
    return Batch.with_meta(fields, meta.size, len(batch), 0, None, None, meta=meta)


def to_jax(batch: Batch, device: Any = None) -> Batch:
    """A batch whose fields and metadata are ``jax.Array``s (on ``device``, or JAX's
    default); the metadata's arrays are put there as they are first read."""
    return _rebuilt(batch, lambda a: jax.device_put(jnp.asarray(a), device))


def _sharding_for(sharding: jax.sharding.Sharding, ndim: int) -> jax.sharding.Sharding:
    """``sharding`` for an array of ``ndim`` axes: a ``NamedSharding`` whose spec names
    more axes than the array has (the mask and scalar fields are 1-D) keeps its first
    ``ndim`` entries; the batch axis is always the first."""
    if isinstance(sharding, jax.sharding.NamedSharding) and len(sharding.spec) > ndim:
        return jax.sharding.NamedSharding(
            sharding.mesh, jax.sharding.PartitionSpec(*sharding.spec[:ndim])
        )
    return sharding


def global_batch(batch: Batch, sharding: jax.sharding.Sharding) -> Batch:
    """This process's batch as the local share of global arrays laid out by ``sharding``
    (the batch axis is the first; every process passes its own rows), the metadata's
    arrays included (``meta.size`` stays this process's count). A spec for the widest
    field applies to the others through their own axes."""
    return _rebuilt(
        batch, lambda a: jax.make_array_from_process_local_data(_sharding_for(sharding, a.ndim), a)
    )


def _flatten(batch: Batch) -> tuple[tuple, tuple]:
    m = batch.meta
    arrays = {n: a for n, a in batch.fields.items() if not isinstance(a, list)}
    # bytes and str fields are static data of the tree (its aux), not leaves
    static = tuple((n, tuple(a)) for n, a in batch.fields.items() if isinstance(a, list))
    return (
        (
            *arrays.values(),
            m.size,
            m.mask,
            m.positions,
            m.source_ordinals,
            m.record_indices,
            dict(m.lengths),
        ),
        (tuple(batch.fields), tuple(arrays), static, len(batch)),
    )


def _unflatten(aux: tuple, children: tuple) -> Batch:
    order, names, static, rows = aux
    k = len(names)
    size, mask, positions, ordinals, records, lengths = children[k:]
    meta = BatchMeta.of(
        size=size,
        mask=mask,
        positions=positions,
        source_ordinals=ordinals,
        record_indices=records,
        lengths=lengths,
    )
    fields = dict(zip(names, children[:k]))
    fields.update((n, list(values)) for n, values in static)
    fields = {n: fields[n] for n in order}
    return Batch.with_meta(fields, size, rows, 0, None, None, meta=meta)


jax.tree_util.register_pytree_node(Batch, _flatten, _unflatten)


def batches(
    source: Any,
    batch_size: int,
    *,
    sharding: jax.sharding.Sharding | None = None,
    device: Any = None,
    **loader_options: Any,
) -> Iterator[Batch]:
    """One pass of a loader's batches with ``jax.Array`` fields and metadata.

    With ``sharding``, each batch is assembled into global arrays across the job's
    processes; otherwise it is put on ``device``. Options are ``fl.Loader``'s;
    ``shard="auto"`` and ``even=True`` are the defaults, so every process takes the same
    number of steps (padding rows have ``meta.mask`` False).
    """
    if loader_options.get("split") is None:  # a split is the ranks' slice instead
        loader_options.setdefault("shard", "auto")
    loader_options.setdefault("even", True)
    with Loader(source, batch_size, **loader_options) as loader:
        for batch in loader:
            yield global_batch(batch, sharding) if sharding is not None else to_jax(batch, device)
