"""The per-item path of a dataset: items (or a source's own columns) checked into a
batch's columns, and ``map`` functions applied example by example.

A fixed field's examples stack into one array; a varying, ``bytes`` or ``str`` field's
become a ``Ragged`` column (``records._ragged``). A batch that does not fit is checked
again item by item, so the error names the first item that does not fit.
"""

from __future__ import annotations

import inspect
import itertools
import os
import threading
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from .._base.hashing import MASK64, PHI, mix64, mix64_array
from ..errors import DomainError, FeedlineError, FormatError, ShapeError, add_note
from ..records import Record
from ..records._check import to_numpy
from ..records._ragged import Ragged, column_of, example_of


def example_states(seed: int, context: int, positions: np.ndarray) -> list[dict]:
    """A PCG64 state for each example at ``positions``: 128 bits hashed from (seed, pass,
    position), as arrays (in Python, the six mixes of one example cost 3 us, more than a
    map's own work)."""
    a = mix64((seed * PHI + mix64(context ^ 0x9E3779B97F4A7C15)) & MASK64)
    inc = (mix64(a) << 1) | 1
    pos = np.asarray(positions, dtype=np.int64).astype(np.uint64)
    hi = mix64_array(pos.copy())
    hi ^= np.uint64(a)
    mix64_array(hi)
    lo = pos * np.uint64(PHI)
    lo ^= hi
    lo ^= np.uint64(0xD1B54A32D192ED03)
    mix64_array(lo)
    return [_pcg64((h << 64) | w, inc) for h, w in zip(hi.tolist(), lo.tolist())]


def _pcg64(state: int, inc: int) -> dict:
    return {
        "bit_generator": "PCG64",
        "state": {"state": state, "inc": inc},
        "has_uint32": 0,
        "uinteger": 0,
    }


def read_items(
    rec: type[Record], src: Any, hf: Any, idx: np.ndarray, check_values: bool
) -> dict[str, Any]:
    """Items ``idx`` (in range) of a source that is neither arrays nor a feedline file:
    its own ``getitems`` (columns), an HF dataset's columns, ``__getitems__`` or item by
    item, checked into a batch."""
    if len(idx) == 0:  # the record alone fixes an empty batch (HF cannot index [])
        return {
            k: Ragged.empty(
                (None,) if f.kind != "array" else f.shape,
                np.uint8 if f.kind != "array" else f.dtype,
            )
            if f.ragged
            else np.zeros((0, *f.fixed_shape("")), dtype=f.dtype)
            for k, f in rec.fields.items()
        }
    if hasattr(src, "getitems"):
        return checked(rec, src, src.getitems(idx), idx, check_values)
    if hf is not None:
        return stack_items(rec, None, idx, check_values, hf[idx.tolist()])
    if hasattr(src, "__getitems__"):
        return stack_items(rec, src.__getitems__(idx.tolist()), idx, check_values)
    return stack_items(rec, [src[int(i)] for i in idx], idx, check_values)


def checked(
    rec: type[Record], src: Any, batch: Mapping[str, Any], idx: np.ndarray, check_values: bool
) -> dict[str, Any]:
    """``rec.check_columns`` of a source's batch of items ``idx``; an error names where
    its item lies in the source's files, for a source that says (``locate``: a Parquet
    file's row group and row)."""
    try:
        return rec.check_columns(batch, idx, check_values=check_values)
    except (ShapeError, DomainError) as e:
        located = _located(rec, src, batch, idx, check_values, e)
        if located is e:
            raise  # as it was: no location to add (not its own cause)
        raise located from e


def _located(
    rec: type[Record],
    src: Any,
    batch: Mapping[str, Any],
    idx: np.ndarray,
    check_values: bool,
    err: FeedlineError,
) -> FeedlineError:
    """``err`` (a batch's check) with where its item lies, of the same type; ``err``
    itself for a source without ``locate``. The item is the batch's first row whose
    prefix fails with the same message, found by bisection: a check reports the first
    failing field's first failing row, so the prefixes past that row fail as the batch
    did and the shorter ones do not (about log2(rows) checks, on the error path only)."""
    locate = getattr(src, "locate", None)
    if locate is None or not len(idx):
        return err
    text = str(err)

    def fails_alike(k: int) -> bool:
        rows = np.arange(k)
        part = {n: v.take(rows) if isinstance(v, Ragged) else v[:k] for n, v in batch.items()}
        try:
            rec.check_columns(part, idx[:k], check_values=check_values)
        except FeedlineError as e:
            return str(e) == text
        return False

    lo, hi = 0, len(idx)  # fails_alike(hi) holds (the batch's error), fails_alike(0) not
    if not fails_alike(hi):
        return err
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if fails_alike(mid):
            hi = mid
        else:
            lo = mid
    try:
        return type(err)(f"{err}; the item is {locate(int(idx[hi - 1]))}")
    except TypeError:  # an error type made otherwise than from its message
        return err


def stack_items(
    rec: type[Record],
    items: list | None,
    idx: np.ndarray,
    check_values: bool,
    columns: Mapping | None = None,
) -> dict[str, Any]:
    """The batch of ``items`` (the source's items ``idx``), or of a source's ``columns``
    (an HF dataset's), checked against ``rec``."""
    if columns is None:
        assert items is not None  # the items, or else their columns, are given
        names = list(rec.fields)
        per_field: dict[str, list] = {name: [] for name in names}
        for item, i in zip(items, idx):
            for name, v in zip(names, rec._split(item, int(i))):
                per_field[name].append(v)
        columns = per_field
    try:
        arrays: dict[str, Any] = {}
        for name, f in rec.fields.items():
            col = columns[name]
            if f.ragged:  # checked example by example into a Ragged by check_columns
                arrays[name] = col
            else:
                arrays[name] = (
                    [to_numpy(v) for v in col] if isinstance(col, list) else to_numpy(col)
                )
        mixed = items is not None and any(
            isinstance(v, list) and not rec.fields[k].ragged and len({a.dtype for a in v}) > 1
            for k, v in arrays.items()
        )
        if mixed:
            # np.stack would promote mixed dtypes (uint64 with int64 to float64): check
            # and convert item by item to the fields' dtypes first.
            assert items is not None
            checked = [rec.check(item, int(i), check_values=False) for item, i in zip(items, idx)]
            return rec.check_columns(
                {f: column_of(rec.fields[f], [c[f] for c in checked]) for f in rec.fields},
                idx,
                check_values=check_values,
            )
        cols = {
            f: np.stack(v) if isinstance(v, list) and not rec.fields[f].ragged else v
            for f, v in arrays.items()
        }
        return rec.check_columns(cols, idx, check_values=check_values)
    except (ValueError, TypeError, FeedlineError) as batch_error:
        # Find the first item that does not fit, for a message naming it.
        if items is not None:
            for item, i in zip(items, idx):
                rec.check(item, int(i), check_values=check_values)
        raise batch_error


def apply_maps(
    base: type[Record],
    rec: type[Record],
    maps: tuple,
    batch: dict[str, Any],
    idx: np.ndarray,
    positions: Any,
    context: int,
    check_values: bool,
    source: Any = None,
) -> dict[str, Any]:
    """``maps`` applied to each example of ``batch`` (of record ``base``); the results
    are checked against ``rec`` (the last map's record) and collated again. An error
    names the item, and where it lies in ``source``'s files for a source that says
    (``locate``: a Parquet file's row group and row)."""
    locate = getattr(source, "locate", None)
    pos = idx if positions is None else np.asarray(positions, dtype=np.int64)
    fields = base.fields
    threads = max(m[3] for m in maps)

    def run(lo: int, hi: int) -> list[dict[str, Any]]:
        # One generator for the rows, set to each example's own state: constructing a
        # generator per example cost 13-19 us, setting a state 2 us.
        bits = np.random.PCG64(0)
        rng = np.random.Generator(bits)
        states = {  # each map's seed: its rows' states, hashed at once
            seed: example_states(seed, int(context), pos[lo:hi])
            for _, seed, takes_rng, _ in maps
            if takes_rng
        }
        out = []
        for r in range(lo, hi):
            example = {k: example_of(f, batch[k], r) for k, f in fields.items()}
            try:
                for fn, seed, takes_rng, _ in maps:
                    if takes_rng:
                        # numpy types the state as its TypedDict; this is that dict
                        bits.state = states[seed][r - lo]  # type: ignore[assignment]
                        example = fn(example, rng)
                    else:
                        example = fn(example)
            except FormatError as e:  # bytes that do not decode: name the item they are
                at = "" if locate is None else f"; the item is {locate(int(idx[r]))}"
                raise FormatError(f"{base.__name__} item {int(idx[r])}: {e}{at}") from e
            except Exception as e:  # the map's own error, as it is, with the example named
                name = getattr(fn, "__qualname__", type(fn).__name__)
                at = "" if positions is None else f", position {int(pos[r])} of the pass"
                add_note(e, f"in the map {name} of {base.__name__} item {int(idx[r])}{at}")
                raise
            out.append(rec.check(example, int(idx[r]), check_values=check_values))
        return out

    n = len(idx)
    if threads > 1 and n > 1:
        # contiguous runs of rows, one per thread: each row's result depends on its
        # position alone, so the batch is the same for any number of threads
        cuts = np.linspace(0, n, min(threads, n) + 1).astype(int).tolist()
        parts = map_pool(threads).map(lambda lh: run(*lh), itertools.pairwise(cuts))
        rows = [row for part in parts for row in part]
    else:
        rows = run(0, n)
    if not rows:
        if rec is base:
            return batch
        return rec.check_columns(
            {
                k: column_of(f, []) if f.ragged else np.zeros((0, *f.shape), f.dtype)
                for k, f in rec.fields.items()
            },
            idx,
        )
    return {k: column_of(f, [row[k] for row in rows]) for k, f in rec.fields.items()}


_POOL: dict[str, Any] = {}
_POOL_LOCK = threading.Lock()


def map_pool(threads: int) -> ThreadPoolExecutor:
    """This process's pool of map threads (at least ``threads``; a forked child makes
    its own: a pool's threads do not survive a fork)."""
    pool = _POOL.get("pool")
    if pool is None or _POOL["pid"] != os.getpid() or _POOL["size"] < threads:
        with _POOL_LOCK:
            pool = _POOL.get("pool")
            if pool is None or _POOL["pid"] != os.getpid() or _POOL["size"] < threads:
                old = pool if _POOL.get("pid") == os.getpid() else None
                pool = ThreadPoolExecutor(threads, thread_name_prefix="feedline-map")
                _POOL.update(pool=pool, pid=os.getpid(), size=threads)
                if old is not None:
                    old.shutdown(wait=False)
    return pool


def map_entry(fn: Any, seed: Any, record: Any, threads: Any) -> tuple:
    """``Dataset.map``'s arguments, checked: ``(fn, seed, takes_rng, threads)``."""
    if not callable(fn):
        raise TypeError(f"map takes a function, got {type(fn).__name__}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise TypeError(f"seed must be an int, got {type(seed).__name__}")
    try:
        params = [
            p
            for p in inspect.signature(fn).parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        ]
        takes_rng = len(params) >= 2
    except (TypeError, ValueError):
        takes_rng = False
    if record is not None and not (isinstance(record, type) and issubclass(record, Record)):
        raise TypeError(f"map: record is a fl.Record subclass, got {record!r}")
    if record is not None and not record.fields:
        raise TypeError(f"map: record {record.__name__} has no fields")
    if isinstance(threads, bool) or not isinstance(threads, (int, np.integer)):
        raise TypeError(f"map: threads must be an int, got {type(threads).__name__}")
    if not 1 <= threads <= 256:
        raise ValueError(f"map: threads must be in [1, 256], got {threads}")
    return (fn, int(seed), takes_rng, int(threads))
