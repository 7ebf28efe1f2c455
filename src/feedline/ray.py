"""Ray integration: write a large dataset as shards across a Ray cluster (Ray Data).

::

    import feedline as fl
    from feedline.manifest import open_manifest

    fl.ray.convert(["train.ndf"], "train-flr", Row)          # .flr shards + manifest.json
    fl.ray.build_text("corpus.txt", "corpus-nn", fl.text.ByteTokenizer())
    with open_manifest("train-flr/manifest.json") as m:     # one dataset: a concat
        for batch in fl.Loader(m.seq().shuffle(1), 512): ...

=====================  ===============================================================
step                   where
=====================  ===============================================================
split the input        the driver: rows into ``num_shards`` contiguous ranges
                       (``convert``), text files into byte ranges cut after a newline
                       (``build_text``); each range is one shard
write one shard        a Ray Data task per shard (``from_items(...).map``): it writes
                       its file atomically (``fl.recfile.write`` / ``fl.text.build``),
                       hashes it and returns its manifest entry
retry                  a task whose function raises is retried up to ``max_retries``
                       times (Ray Data's ``max_map_retries`` / ``retried_map_errors``,
                       or Ray's ``max_retries`` / ``retry_exceptions`` on Ray releases
                       without them); a task whose worker dies is rerun by Ray
the manifest           the driver, last, once every shard is written; a failed run
                       leaves no manifest (and, writes being atomic, no partial shard)
=====================  ===============================================================

Shard ``k`` is ``{name}-{k:05d}.flr`` (or ``.nndataset``), named after the output
directory unless ``name`` is given; an order's shuffle salts come from these names.
Ray runs wherever ``ray.init()`` connected it (without it, Ray Data starts a local
instance). On a cluster, the inputs and ``out_dir`` must be paths every node sees
(a shared file system).

Needs Ray: ``pip install 'feedline[ray]'``.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import tempfile
import time
from collections.abc import Mapping, Sequence
from typing import Any, Literal

try:
    import ray
    import ray.data
except ImportError as e:  # pragma: no cover - exercised where Ray is missing
    raise ImportError("fl.ray needs Ray: pip install 'feedline[ray]'") from e

import numpy as np

from .errors import MissingFileError, WorkerError
from .formats import ndf, nndataset, recfile
from .formats.manifest import ManifestInfo, Shard, describe, shard_names, write_manifest
from .order import salt
from .records import Record
from .sources import Dataset

__all__ = ["build_text", "convert"]

# Default shard sizes: big enough that a task's start-up (tens of ms) vanishes beside
# its work, small enough that a cluster's CPUs all get several shards.
_SHARD_BYTES = 256 << 20
_TEXT_SHARD_BYTES = 64 << 20
# Rows gathered and written per step inside a convert task (bounds its memory).
_CHUNK_BYTES = 16 << 20


# -- shared plumbing ----------------------------------------------------------------------
def _check_count(name: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}")
    return int(value)


def _prepare_out_dir(out_dir: Any, manifest: str, overwrite: bool) -> tuple[str, str]:
    out_dir = os.path.abspath(os.fspath(out_dir))
    if os.path.basename(manifest) != manifest or not manifest:
        raise ValueError(f"manifest is a file name inside out_dir, got {manifest!r}")
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, manifest)
    if os.path.exists(path):
        if not overwrite:
            raise FileExistsError(f"{path} exists (pass overwrite=True to replace the dataset)")
        # Shards are about to be replaced: the old manifest must not outlive them.
        os.unlink(path)
    return out_dir, path


def _run(
    specs: list[dict[str, Any]],
    fn: Any,
    fn_kwargs: dict[str, Any],
    *,
    max_retries: int,
    num_cpus: float,
) -> list[Shard]:
    """One Ray Data task per spec (``fn(spec, **fn_kwargs)`` returns ``{"index", "entry"}``);
    the entries, in spec order, once every task has succeeded."""
    ds = ray.data.from_items(specs, override_num_blocks=len(specs))
    remote_args: dict[str, Any] = {}
    ctx = ds.context  # this dataset's own copy of the DataContext
    if hasattr(ctx, "max_map_retries"):  # recent Ray Data: retries inside the map task
        ctx.max_map_retries = max_retries
        ctx.retried_map_errors = True
    else:  # earlier Ray: the task is resubmitted
        remote_args = {"max_retries": max_retries, "retry_exceptions": True}
    if hasattr(ctx, "op_resource_reservation_enabled"):
        # One operator whose outputs are a few hundred bytes: reserving CPUs for its
        # output buffer only idles them (measured on 2 CPUs: 8 one-second tasks took
        # 5.5 s with the reservation, 4.1 s without).
        ctx.op_resource_reservation_enabled = False
    try:
        rows = ds.map(_named(fn), fn_kwargs=fn_kwargs, num_cpus=num_cpus, **remote_args).take_all()
    except ray.exceptions.RayError as e:
        raise WorkerError(
            f"a shard's task failed for good (after its {max_retries} "
            f"retries), so no manifest was written; the task's error:\n{e}"
        ) from e
    entries: dict[int, Shard] = {}
    for row in rows:
        entries[int(row["index"])] = Shard(**json.loads(row["entry"]))
    if sorted(entries) != list(range(len(specs))):  # defensive: Ray returned every task's
        raise RuntimeError(f"expected {len(specs)} shards from Ray, got {sorted(entries)}")
    return [entries[i] for i in range(len(specs))]


class _named:
    """``fn`` as a Ray Data function whose errors name the shard the task was writing."""

    def __init__(self, fn: Any) -> None:
        self.fn = fn
        self.__name__ = fn.__name__  # Ray names the operator after it

    def __call__(self, spec: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        try:
            return self.fn(spec, **kwargs)
        except Exception as e:
            raise WorkerError(f"shard {spec['name']}: {type(e).__name__}: {e}") from e


def _entry(index: int, path: str, name: str) -> dict[str, Any]:
    return {"index": index, "entry": json.dumps(describe(path, name=name).to_json())}


# -- convert: any map-style data to .flr shards -------------------------------------------
def _open_input(src: Any) -> Any:
    """A path names a feedline file (opened by its extension); anything else is a source."""
    if isinstance(src, (str, os.PathLike)):
        path = os.fspath(src)
        if path.endswith(".flr"):
            return recfile.open(path)
        if path.endswith(".ndf"):
            return ndf.open(path)
        raise ValueError(
            f"{path}: convert reads .flr and .ndf files by path (other data: "
            "pass the source itself)"
        )
    return src


def _length(src: Any, record: type[Record]) -> int:
    if isinstance(src, Mapping):
        missing = [f for f in record.fields if f not in src]
        if missing:
            raise ValueError(f"a dict of columns lacks the record's fields {missing}")
        return len(src[next(iter(record.fields))])
    return len(src)


def _row_bytes(record: type[Record]) -> int:
    # a varying axis counts as one element, a blob as 64 bytes: an estimate for sizing
    return max(
        1,
        sum(
            64 if f.kind != "array" else f.dtype.itemsize * math.prod(d or 1 for d in f.shape)
            for f in record.fields.values()
        ),
    )


def _convert_task(
    spec: dict[str, Any], *, sources: Any, record: type[Record], out_dir: str, check_values: bool
) -> dict[str, Any]:
    """Write shard ``spec["index"]``: the rows ``spec["parts"]`` of the sources."""
    if isinstance(sources, ray.ObjectRef):
        sources = ray.get(sources)
    parts = json.loads(spec["parts"])
    step = max(1, _CHUNK_BYTES // _row_bytes(record))
    opened: list[Any] = []

    def chunks():
        for s, a, b in parts:
            src = sources[s]
            if isinstance(src, Mapping):  # slice first: a Dataset checks its columns whole
                src = {k: src[k][a:b] for k in record.fields}
                a, b = 0, b - a
            else:
                src = _open_input(src)
                if src is not sources[s]:
                    opened.append(src)
            ds = Dataset(record, src)
            try:
                for lo in range(a, b, step):
                    yield ds.getitems(np.arange(lo, min(b, lo + step), dtype=np.int64))
            finally:
                ds.close()

    path = os.path.join(out_dir, spec["name"])
    try:
        recfile.write_chunks(path, record, chunks(), check_values=check_values)
    finally:
        for src in opened:
            src.close()
    return _entry(int(spec["index"]), path, spec["name"])


def convert(
    inputs: Any,
    out_dir: str | os.PathLike[str],
    record: type[Record],
    *,
    num_shards: int | None = None,
    shard_bytes: int = _SHARD_BYTES,
    name: str | None = None,
    manifest: str = "manifest.json",
    check_values: bool = True,
    max_retries: int = 3,
    num_cpus: float = 1,
    overwrite: bool = False,
) -> ManifestInfo:
    """Write ``inputs`` as ``.flr`` shards of ``record`` under ``out_dir``, one Ray Data
    task per shard, and the manifest listing them last; returns the manifest.

    ================  ==================================================================
    ``inputs``        one source or a list of them, read one after another: paths of
                      ``.flr``/``.ndf`` files, open feedline files, ``fl.Dataset``, dicts
                      of column arrays (put in Ray's object store once), or anything
                      ``fl.Dataset(record, source)`` reads that pickles
    ``num_shards``    how many shards (default: ``shard_bytes`` of rows each); shard
                      ``k`` holds the rows ``[k*n//num_shards, (k+1)*n//num_shards)``
    ``name``          the shards' name prefix (default: ``out_dir``'s base name)
    ``check_values``  check every value against the fields' domains as it is written
    ``max_retries``   attempts after the first for a task that raises
    ``num_cpus``      CPUs Ray reserves per task
    ``overwrite``     replace an existing manifest (removed first, before any shard)
    ================  ==================================================================

    The concatenated shards hold the inputs' rows in order. A task that fails for good
    fails the call (the error names the shard's task); no manifest is written.
    """
    if not (isinstance(record, type) and issubclass(record, Record)) or not record.fields:
        raise TypeError(f"record must be a fl.Record subclass with fields, got {record!r}")
    max_retries = _check_count("max_retries", max_retries, 0)
    shard_bytes = _check_count("shard_bytes", shard_bytes, 1)
    items = list(inputs) if isinstance(inputs, (list, tuple)) else [inputs]
    if not items:
        raise ValueError("convert needs at least one input")
    lengths = []
    shipped = []
    for src in items:
        opened = _open_input(src)
        try:
            lengths.append(_length(opened, record))
        finally:
            if opened is not src:
                opened.close()
        # Files travel by path; other sources as they are (pickled once, below).
        shipped.append(os.fspath(src) if isinstance(src, (str, os.PathLike)) else src)
    total = sum(lengths)
    if num_shards is None:
        num_shards = max(1, -(-total * _row_bytes(record) // shard_bytes))
    num_shards = min(_check_count("num_shards", num_shards, 1), max(total, 1))
    out_dir, manifest_path = _prepare_out_dir(out_dir, manifest, overwrite)
    prefix = name if name is not None else os.path.basename(out_dir)
    names = shard_names(prefix, num_shards, "flr")
    starts = np.concatenate(([0], np.cumsum(lengths))).tolist()
    specs = []
    for k in range(num_shards):
        lo, hi = k * total // num_shards, (k + 1) * total // num_shards
        parts = [
            [s, max(lo, a) - a, min(hi, b) - a]
            for s, (a, b) in enumerate(itertools.pairwise(starts))
            if max(lo, a) < min(hi, b)
        ]
        specs.append({"index": k, "name": names[k], "parts": json.dumps(parts)})
    sources = ray.put(shipped)
    shards = _run(
        specs,
        _convert_task,
        {"sources": sources, "record": record, "out_dir": out_dir, "check_values": check_values},
        max_retries=max_retries,
        num_cpus=num_cpus,
    )
    return write_manifest(manifest_path, shards, format="flr", record=record)


# -- build_text: text files to .nndataset shards ------------------------------------------
def _next_line_start(f: Any, at: int, size: int) -> int:
    """The first line start at or after byte ``at`` (``size`` if none)."""
    if at <= 0:
        return 0
    pos = at - 1
    while pos < size:
        f.seek(pos)
        block = f.read(1 << 20)
        cut = block.find(b"\n")
        if cut >= 0:
            return pos + cut + 1
        pos += len(block)
    return size


def _text_ranges(path: str, target: int) -> list[tuple[int, int]]:
    """Byte ranges of ``path`` of about ``target`` bytes, each cut after a newline."""
    size = os.path.getsize(path)
    pieces = max(1, -(-size // target))
    cuts = [0]
    with open(path, "rb") as f:
        for k in range(1, pieces):
            cut = _next_line_start(f, k * size // pieces, size)
            if cut > cuts[-1] and cut < size:
                cuts.append(cut)
    cuts.append(size)
    return [(a, b) for a, b in itertools.pairwise(cuts) if b > a] or [(0, size)]


def _build_task(
    spec: dict[str, Any], *, tokenizer: Any, out_dir: str, options: dict[str, Any]
) -> dict[str, Any]:
    """Build shard ``spec["index"]`` from the bytes ``[start, stop)`` of ``spec["path"]``."""
    from .text import build

    if isinstance(tokenizer, ray.ObjectRef):
        tokenizer = ray.get(tokenizer)

    src, start, stop = spec["path"], int(spec["start"]), int(spec["stop"])
    path = os.path.join(out_dir, spec["name"])
    options = {**options, "seed": int(spec.get("seed", 0))}
    if start == 0 and stop == os.path.getsize(src):
        build(src, path, tokenizer, **options)
        return _entry(int(spec["index"]), path, spec["name"])
    # Part of a file: copy its bytes to a node-local file (named after the range it
    # holds, which the shard records as its source) and build from that.
    with tempfile.TemporaryDirectory(prefix="feedline-ray-") as tmp:
        part = os.path.join(tmp, f"{os.path.basename(src)}.bytes-{start}-{stop}")
        with open(src, "rb") as fin, open(part, "wb") as fout:
            fin.seek(start)
            left = stop - start
            while left:
                block = fin.read(min(left, 8 << 20))
                if not block:
                    raise RuntimeError(
                        f"{src} shrank while it was read (expected byte "
                        f"{stop - left} of [{start}, {stop}))"
                    )
                fout.write(block)
                left -= len(block)
        build(part, path, tokenizer, **options)
    return _entry(int(spec["index"]), path, spec["name"])


def build_text(
    corpus: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    out_dir: str | os.PathLike[str],
    tokenizer: Any,
    *,
    num_shards: int | None = None,
    shard_bytes: int = _TEXT_SHARD_BYTES,
    name: str | None = None,
    manifest: str = "manifest.json",
    loss_scope: Literal["all", "assistant"] = "all",
    workers: int = 0,
    test_docs: int = 0,
    test_split: Literal["random", "last"] = "random",
    seed: int = 0,
    created: int | None = None,
    license: str | None = None,
    max_retries: int = 3,
    num_cpus: float = 1,
    overwrite: bool = False,
) -> ManifestInfo:
    """Tokenize the text file(s) ``corpus`` (a document a line) into ``.nndataset``
    shards under ``out_dir``, one Ray Data task per shard running ``fl.text.build``,
    and the manifest listing them last; returns the manifest.

    ================  ==================================================================
    ``corpus``        a text file or a list of them, in order; each is cut into pieces
                      of about ``shard_bytes`` (with ``num_shards``: total size /
                      ``num_shards``), each cut after a newline, so no document is
                      split and no piece spans two files
    ``tokenizer``     as ``fl.text.build`` takes it; it is pickled to the tasks
    ``loss_scope``    as ``fl.text.build``
    ``workers``       ``fl.text.build``'s tokenizing threads inside each task (0: the
                      task's own thread; Ray already runs one task per CPU)
    ``test_docs``     documents each shard holds out as its test subset, chosen as
                      ``fl.text.build`` chooses them (``test_split`` "random": seeded by
                      ``seed`` and the shard's index; "last": the shard's last ones)
    ``created``       the timestamp every shard stores (None: now, once for all)
    ``max_retries``, ``num_cpus``, ``name``, ``overwrite``: as :func:`convert`
    ================  ==================================================================

    Without ``test_docs``, the shards' train token flows, concatenated in manifest
    order, are the flow ``fl.text.build`` writes for the whole corpus. Each shard's document
    ids restart at 1. A shard built from part of a file records a node-local copy of
    that part as its ``source_path`` (``<file>.bytes-<start>-<stop>``) and that part's
    SHA-256.
    """
    given = [corpus] if isinstance(corpus, (str, os.PathLike)) else list(corpus)
    if not given:
        raise ValueError("build_text needs at least one corpus file")
    files = [os.path.abspath(os.fspath(f)) for f in given]
    for f in files:
        if not os.path.isfile(f):
            raise MissingFileError(
                f"{f}: no such corpus file (expected a text file with one document a line)"
            )
    for name_, v in (("workers", workers), ("max_retries", max_retries)):
        _check_count(name_, v, 0)
    shard_bytes = _check_count("shard_bytes", shard_bytes, 1)
    if num_shards is not None:
        total = sum(os.path.getsize(f) for f in files)
        shard_bytes = max(1, -(-total // _check_count("num_shards", num_shards, 1)))
    # every argument is checked before anything in out_dir is touched
    _check_count("test_docs", test_docs, 0)
    _check_count("seed", seed, 0)
    if test_split not in ("random", "last"):
        raise ValueError(f"test_split must be 'random' or 'last', got {test_split!r}")
    if loss_scope not in nndataset.LOSS_SCOPES:
        raise ValueError(f"loss_scope must be 'all' or 'assistant', got {loss_scope!r}")
    out_dir, manifest_path = _prepare_out_dir(out_dir, manifest, overwrite)
    ranges = [(f, a, b) for f in files for a, b in _text_ranges(f, shard_bytes)]
    prefix = name if name is not None else os.path.basename(out_dir)
    names = shard_names(prefix, len(ranges), "nndataset")
    specs = [
        {"index": k, "name": names[k], "path": f, "start": a, "stop": b}
        for k, (f, a, b) in enumerate(ranges)
    ]
    options = {
        "loss_scope": loss_scope,
        "workers": workers,
        "license": license,
        "created": int(time.time()) if created is None else int(created),
        "test_docs": test_docs,
        "test_split": test_split,
    }
    for spec in specs:  # each shard's own test choice: the seed hashed with its index
        spec["seed"] = int(salt(f"{seed}/{spec['index']}")) & ((1 << 63) - 1)
    shards = _run(
        specs,
        _build_task,
        {"tokenizer": ray.put(tokenizer), "out_dir": out_dir, "options": options},
        max_retries=_check_count("max_retries", max_retries, 0),
        num_cpus=num_cpus,
    )
    return write_manifest(manifest_path, shards, format="nndataset")
