"""Manifests: a small JSON file listing the shard files of one dataset, in order.

A dataset written in pieces (by ``fl.ray``, or by hand) is a directory of shard files
(``.flr`` or ``.nndataset``) and one manifest beside them::

    {"kind": "feedline.manifest", "version": 1, "format": "flr",
     "record": {...the Record's schema, as .flr headers store it...},
     "shards": [{"name": "web-00000.flr", "size": 1048640, "sha256": "9f86...",
                 "rows": 16384}, ...]}

=============  =====================================================================
key            value
=============  =====================================================================
``kind``       ``"feedline.manifest"``
``version``    1
``format``     ``"flr"`` or ``"nndataset"``: every shard is a file of this format
``record``     ``.flr`` only: the record every shard holds (``Record.schema()``)
``shards``     the shards, in order; each names its file (relative to the manifest,
               ``/``-separated, inside the manifest's directory), its ``size`` in
               bytes, its ``sha256`` and its length: ``rows`` for ``.flr``; ``docs``,
               ``tokens``, ``test_docs`` and ``test_tokens`` for ``.nndataset``
=============  =====================================================================

Unknown or missing keys, duplicate keys and values of the wrong type are refused.
Reading a manifest (:func:`read_manifest`) checks every field and that every shard
exists with its listed size; opening the shards checks their lengths (and, for
``.flr``, the record); :meth:`ManifestInfo.verify` reads every byte to check the
SHA-256s and the files' own checksums. Every refusal is a ``FormatError`` naming the
manifest and the shard. The manifest is written atomically; a writer that produces
shards writes it last, so a manifest never lists a shard that was not finished.

This module reads files only; ``feedline.manifest`` opens a manifest as one
dataset (a concat of its shards) for orders and loaders.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import stat
from collections.abc import Iterable, Sequence
from typing import Any, Literal

from .._base.files import atomic_write, file_kind
from ..errors import FeedlineError, FormatError, MissingFileError
from ..records import Record, record_from_schema
from . import recfile
from ._remote import is_url
from ._shard_files import _fs, _lengths, _open, _read_bytes, _sha256

__all__ = ["FORMATS", "ManifestInfo", "Shard", "describe", "read_manifest", "write_manifest"]

KIND = "feedline.manifest"
VERSION = 1
FORMATS = ("flr", "nndataset")
_LENGTHS = {"flr": ("rows",), "nndataset": ("docs", "tokens", "test_docs", "test_tokens")}
_ALL_LENGTHS = ("rows", "docs", "tokens", "test_docs", "test_tokens")
_TOP_KEYS = {
    "flr": {"kind", "version", "format", "record", "shards"},
    "nndataset": {"kind", "version", "format", "shards"},
}
_SHA256 = re.compile(r"[0-9a-f]{64}")

ShardFormat = Literal["flr", "nndataset"]


@dataclasses.dataclass(frozen=True)
class Shard:
    """One shard as a manifest lists it: ``name`` (its file, relative to the manifest),
    ``size`` (bytes), ``sha256`` (hex) and its length: ``rows`` for ``.flr``; ``docs``,
    ``tokens``, ``test_docs``, ``test_tokens`` for ``.nndataset`` (``None`` otherwise).
    """

    name: str
    size: int
    sha256: str
    rows: int | None = None
    docs: int | None = None
    tokens: int | None = None
    test_docs: int | None = None
    test_tokens: int | None = None

    @property
    def format(self) -> ShardFormat:
        """``"flr"`` or ``"nndataset"``, from the file name's extension."""
        return _format_of(self.name)

    def to_json(self) -> dict[str, Any]:
        """The manifest's entry for this shard."""
        entry: dict[str, Any] = {"name": self.name, "size": self.size, "sha256": self.sha256}
        for key in _LENGTHS[self.format]:
            entry[key] = getattr(self, key)
        return entry


def _format_of(name: str) -> ShardFormat:
    for fmt in FORMATS:
        if name.endswith(f".{fmt}"):
            return fmt  # type: ignore[return-value]
    raise ValueError(f"a shard is a .flr or .nndataset file, got {name!r}")


def describe(path: str | os.PathLike[str], *, name: str | None = None) -> Shard:
    """The manifest entry for the shard file ``path``: it is opened (and so checked) for
    its length, and read once for its SHA-256. ``name`` (default: the file's base name)
    is what the manifest will call it, relative to the manifest's directory."""
    path = os.fspath(path)
    name = os.path.basename(path) if name is None else name
    fmt = _format_of(name)
    with _open(path, fmt) as handle:
        lengths = _lengths(handle)
    return Shard(name, os.path.getsize(path), _sha256(path), **lengths)


@dataclasses.dataclass(frozen=True, eq=False)
class ManifestInfo:
    """A checked manifest: ``path``, ``format``, ``shards`` (in order), ``record`` (the
    ``.flr`` record class, rebuilt from the manifest; ``None`` for ``.nndataset``)."""

    path: str
    format: ShardFormat
    shards: tuple[Shard, ...]
    record: type[Record] | None

    @property
    def directory(self) -> str:
        if is_url(self.path):  # shards lie beside the manifest, at the same URL prefix
            return self.path.rsplit("/", 1)[0]
        return os.path.dirname(os.path.abspath(self.path))

    def shard_path(self, shard: Shard | int) -> str:
        """The file (or URL) of ``shard`` (an entry or its index)."""
        entry = self.shards[shard] if isinstance(shard, int) else shard
        if is_url(self.path):
            return f"{self.directory}/{entry.name}"
        return os.path.join(self.directory, *entry.name.split("/"))

    @property
    def paths(self) -> list[str]:
        """Every shard's file, in manifest order."""
        return [self.shard_path(s) for s in self.shards]

    def _fail(self, shard: Shard | None, message: str) -> FormatError:
        where = "" if shard is None else f"shard {shard.name!r}: "
        return FormatError(f"{where}{message}", self.path)

    def open_shards(self) -> list[Any]:
        """Open every shard (``fl.recfile.RecFile`` or ``fl.nndataset.Nndataset``), in
        order, checking that each has the listed length (and, for ``.flr``, the
        manifest's record). On a refusal, the shards opened so far are closed again."""
        handles: list[Any] = []
        try:
            for shard in self.shards:
                path = self.shard_path(shard)
                try:
                    handle = _open(path, self.format)
                except FileNotFoundError as e:
                    raise self._fail(shard, f"expected the file {path}, found none") from e
                except FormatError as e:  # the shard's own checks: name the manifest too
                    raise self._fail(shard, str(e)) from e
                handles.append(handle)
                try:
                    found = _lengths(handle)
                except FormatError as e:
                    raise self._fail(shard, str(e)) from e
                for key, value in found.items():
                    if getattr(shard, key) != value:
                        raise self._fail(
                            shard,
                            f"the manifest lists {key} = "
                            f"{getattr(shard, key)}, the file {path} has {value}",
                        )
                if self.record is not None and not self.record.same_schema(handle.record):
                    raise self._fail(
                        shard,
                        f"the file {path} holds a different record "
                        f"than the manifest's:\n{handle.record.describe()}\n"
                        f"expected\n{self.record.describe()}",
                    )
        except BaseException:
            for h in handles:
                h.close()
            raise
        return handles

    def verify(self) -> None:
        """Read every shard: its SHA-256 must be the listed one, and its own checksums
        (``.flr`` column CRCs) must hold. Cost: one pass over all the data."""
        for shard in self.shards:
            path = self.shard_path(shard)
            try:
                found = _sha256(path)
            except FileNotFoundError as e:
                raise self._fail(shard, f"expected the file {path}, found none") from e
            if found != shard.sha256:
                raise self._fail(
                    shard, f"the manifest lists sha256 {shard.sha256}, the file {path} has {found}"
                )
            if self.format == "flr":
                try:
                    with recfile.open(path) as f:
                        f.verify()
                except FileNotFoundError as e:
                    raise self._fail(shard, f"expected the file {path}, found none") from e
                except FormatError as e:
                    raise self._fail(shard, str(e)) from e

    def __len__(self) -> int:
        """Rows (``.flr``) or train documents (``.nndataset``) over every shard."""
        key = "rows" if self.format == "flr" else "docs"
        return sum(getattr(s, key) for s in self.shards)

    def __repr__(self) -> str:
        return f"ManifestInfo({self.path!r}, {self.format}, {len(self.shards)} shards)"


# -- writing ----------------------------------------------------------------------------
def write_manifest(
    path: str | os.PathLike[str],
    shards: Iterable[Shard | str | os.PathLike[str]],
    *,
    format: ShardFormat | None = None,
    record: type[Record] | None = None,
) -> ManifestInfo:
    """Write the manifest ``path`` listing ``shards`` in order, atomically; returns it
    as read back (checked like :func:`read_manifest`).

    A shard is a :class:`Shard` entry (its ``name`` relative to the manifest) or the
    path of a shard file (described with :func:`describe`: opened and hashed). Every
    shard must be a file of ``format`` (default: the first shard's) inside the
    manifest's directory. For ``.flr`` the ``record`` defaults to the first shard's.

    >>> import os, tempfile, numpy as np, feedline as fl
    >>> from feedline.formats.manifest import write_manifest, read_manifest
    >>> d = tempfile.mkdtemp()
    >>> R = fl.Dataset.from_arrays(x=np.zeros((3, 2))).record
    >>> for i in range(2):
    ...     _ = fl.recfile.write(os.path.join(d, f"p-{i}.flr"), R, {"x": np.zeros((3, 2))})
    >>> info = write_manifest(os.path.join(d, "manifest.json"),
    ...                       [os.path.join(d, "p-0.flr"), os.path.join(d, "p-1.flr")])
    >>> len(read_manifest(os.path.join(d, "manifest.json"))), [s.name for s in info.shards]
    (6, ['p-0.flr', 'p-1.flr'])
    """
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    entries: list[Shard] = []
    for shard in shards:
        if isinstance(shard, Shard):
            entries.append(shard)
            continue
        file = os.path.abspath(os.fspath(shard))
        rel = os.path.relpath(file, directory)
        if rel.startswith(os.pardir) or os.path.isabs(rel):
            raise ValueError(f"shard {file} is not inside the manifest's directory {directory}")
        entries.append(describe(file, name=rel.replace(os.sep, "/")))
    if not entries:
        raise ValueError("a manifest lists at least one shard")
    fmt = format if format is not None else entries[0].format
    if fmt not in FORMATS:
        raise ValueError(f"format must be one of {FORMATS}, got {fmt!r}")
    doc: dict[str, Any] = {"kind": KIND, "version": VERSION, "format": fmt}
    if fmt == "flr":
        if record is None:
            first = os.path.join(directory, *entries[0].name.split("/"))
            with recfile.open(first) as f:
                record = f.record
        if not (isinstance(record, type) and issubclass(record, Record)):
            raise TypeError(f"record must be a fl.Record subclass, got {record!r}")
        doc["record"] = record.schema()
    elif record is not None:
        raise ValueError("a manifest of .nndataset shards has no record")
    doc["shards"] = [s.to_json() for s in entries]
    # Compact, one shard a line (readable, and diffs show which shards changed).
    head = ",\n ".join(
        f"{json.dumps(k)}: {json.dumps(v, sort_keys=True)}" for k, v in doc.items() if k != "shards"
    )
    lines = ",\n  ".join(json.dumps(s, sort_keys=True) for s in doc["shards"])
    text = f'{{{head},\n "shards": [\n  {lines}\n ]}}\n'.encode()
    # Check what is about to be written exactly as a reader will, before it exists.
    info = _parse(doc, path)
    _check_files(info)
    with atomic_write(path) as f:
        f.write(text)
    return info


# -- reading ----------------------------------------------------------------------------
def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise ValueError(f"the key {k!r} appears twice")
        out[k] = v
    return out


def _is_count(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _check_name(name: Any, fmt: str, where: str, fail: Any) -> str:
    if not isinstance(name, str) or not name:
        raise fail(f"{where}: expected a file name, found {name!r}")
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:  # a file name's undecodable bytes (os.fsdecode's escapes)
        raise fail(
            f"{where}: expected a UTF-8 file name, found {name!r}: name shards in "
            f"UTF-8 (a shard's name is its shuffle salt)"
        ) from None
    parts = name.split("/")
    if (
        name.startswith("/")
        or "\\" in name
        or "\0" in name
        or ":" in parts[0]
        or any(p in ("", ".", "..") for p in parts)
    ):
        raise fail(
            f"{where}: expected a relative '/'-separated path inside the manifest's "
            f"directory, found {name!r}"
        )
    if not name.endswith(f".{fmt}"):
        raise fail(f"{where}: a {fmt} manifest lists .{fmt} files, found {name!r}")
    return name


def _parse(doc: Any, path: str) -> ManifestInfo:
    def fail(message: str) -> FormatError:
        return FormatError(message, path)

    if not isinstance(doc, dict):
        raise fail(f"expected a JSON object, found {type(doc).__name__}")
    if doc.get("kind") != KIND:
        raise fail(f"expected kind {KIND!r}, found {doc.get('kind')!r}")
    if doc.get("version") != VERSION:
        raise fail(f"this feedline reads manifest version {VERSION}, found {doc.get('version')!r}")
    fmt = doc.get("format")
    if fmt not in FORMATS:
        raise fail(f"expected format 'flr' or 'nndataset', found {fmt!r}")
    keys = set(doc)
    if keys != _TOP_KEYS[fmt]:
        extra, missing = sorted(keys - _TOP_KEYS[fmt]), sorted(_TOP_KEYS[fmt] - keys)
        raise fail(
            f"a {fmt} manifest has the keys {sorted(_TOP_KEYS[fmt])}; "
            f"unknown: {extra}, missing: {missing}"
        )
    record = None
    if fmt == "flr":
        try:
            record = record_from_schema(doc["record"], os.path.basename(path))
        except (FeedlineError, KeyError, TypeError, ValueError, AttributeError) as e:
            raise fail(f"`record` does not declare a valid record: {e}") from e
        if not record.fields:
            raise fail("`record` declares no fields")
    listed = doc["shards"]
    if not isinstance(listed, list) or not listed:
        raise fail(f"`shards` must be a non-empty list, found {listed!r:.80}")
    wanted = {"name", "size", "sha256", *_LENGTHS[fmt]}
    shards = []
    seen: set[str] = set()
    for i, entry in enumerate(listed):
        where = f"shards[{i}]"
        if not isinstance(entry, dict):
            raise fail(f"{where}: expected an object, found {entry!r:.80}")
        name = _check_name(entry.get("name"), fmt, where, fail)
        where = f"shard {name!r}"
        if set(entry) != wanted:
            extra, missing = sorted(set(entry) - wanted), sorted(wanted - set(entry))
            raise fail(
                f"{where}: a {fmt} shard has the keys {sorted(wanted)}; "
                f"unknown: {extra}, missing: {missing}"
            )
        if name in seen:
            raise fail(f"{where} is listed twice")
        seen.add(name)
        for key in ("size", *_LENGTHS[fmt]):
            if not _is_count(entry[key]):
                raise fail(f"{where}: `{key}` must be an integer >= 0, found {entry[key]!r}")
        if not isinstance(entry["sha256"], str) or not _SHA256.fullmatch(entry["sha256"]):
            raise fail(
                f"{where}: `sha256` must be 64 lowercase hex digits, found {entry['sha256']!r}"
            )
        shards.append(Shard(**{k: entry[k] for k in wanted}))
    return ManifestInfo(path, fmt, tuple(shards), record)


def _check_local(
    info: ManifestInfo, shard: Shard, file: str, real_dir: str, seen: dict[tuple[int, int], str]
) -> os.stat_result:
    """A local shard's ``stat``: a regular file whose real path (symlinks resolved) is
    inside the manifest's real directory, and not a file already listed under another
    name (the same device and inode)."""
    try:
        st = os.stat(file)
    except FileNotFoundError as e:
        raise info._fail(shard, f"expected the file {file}, found none") from e
    real = os.path.realpath(file)
    if os.path.commonpath([real, real_dir]) != real_dir:
        raise info._fail(
            shard,
            f"expected a file inside the manifest's directory {real_dir}, "
            f"found {file} leading to {real} (a symlink out of the directory)",
        )
    if not stat.S_ISREG(st.st_mode):
        raise info._fail(shard, f"expected a regular file at {file}, found {file_kind(st.st_mode)}")
    key = (st.st_dev, st.st_ino)
    if key in seen:
        raise info._fail(
            shard,
            f"{file} is the same file as shard {seen[key]!r} (device "
            f"{st.st_dev}, inode {st.st_ino}): a file is listed once",
        )
    seen[key] = shard.name
    return st


def _check_files(info: ManifestInfo) -> None:
    remote = _fs(info.path) if is_url(info.path) else None
    real_dir = os.path.realpath(info.directory) if remote is None else ""
    seen: dict[tuple[int, int], str] = {}
    for shard in info.shards:
        file = info.shard_path(shard)
        if remote is None:
            size = _check_local(info, shard, file, real_dir, seen).st_size
        else:
            try:
                listing = remote[0].info(remote[0]._strip_protocol(file))
            except FileNotFoundError as e:
                raise info._fail(shard, f"expected the file {file}, found none") from e
            size = int(listing["size"])
            if listing.get("type", "file") != "file":
                raise info._fail(shard, f"expected a file at {file}, found something else")
        if size != shard.size:
            raise info._fail(
                shard, f"the manifest lists {shard.size} bytes, the file {file} has {size}"
            )


def read_manifest(path: str | os.PathLike[str]) -> ManifestInfo:
    """Read and check the manifest ``path``: every field, and that every shard file
    exists with its listed size (the shards are not opened: see
    :meth:`ManifestInfo.open_shards`; nor hashed: see :meth:`ManifestInfo.verify`).
    Cost: the manifest plus one ``stat`` per shard. ``path`` may be a URL (``s3://...``,
    any fsspec protocol, default options): its shards are then the URLs beside it, which
    every reader opens (see ``fl.remote``)."""
    path = os.fspath(path)
    try:
        raw = _read_bytes(path)
    except FileNotFoundError as e:
        raise MissingFileError(f"{path}: no such manifest") from e
    try:
        doc = json.loads(raw.decode("utf-8"), object_pairs_hook=_no_duplicates)
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise FormatError(f"expected a UTF-8 JSON manifest: {e}", path) from e
    info = _parse(doc, path)
    _check_files(info)
    return info


def shard_names(prefix: str, count: int, format: ShardFormat) -> Sequence[str]:
    """``count`` shard file names ``{prefix}-00000.{format}``... (at least five digits,
    so names sort in manifest order)."""
    width = max(5, len(str(count - 1)))
    return [f"{prefix}-{i:0{width}d}.{format}" for i in range(count)]
