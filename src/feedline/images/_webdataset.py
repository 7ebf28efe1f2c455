"""WebDataset tar shards to ``.flr``: each sample's image bytes as they are, its class and
caption.

A WebDataset shard is a tar whose members are grouped into samples by their key (the
name up to the first dot): ``000123.jpg`` (or ``.jpeg``, ``.png``, ``.webp``),
``000123.cls`` (the class, an integer in text) and ``000123.txt`` (a caption). Samples
are read in the shards' order, streamed (one sample in memory at a time) into an atomic
write. A sample without an image, or whose image does not decode, is a ``FormatError``
naming the shard and the member.

Python's ``tarfile`` reads a cut or broken header as the archive's end, so a shard cut
short would convert with its last samples (or a last ``.cls``) silently lost: the
header block it stopped at must be the first of the end-of-archive's two zero blocks,
and the second must follow, or the shard is a ``FormatError`` naming it and the member
before the damage. A gzip, bzip2 or xz shard is decompressed by Python's own module,
which checks the stream's checksum at its end.
"""

from __future__ import annotations

import bz2
import contextlib
import gzip
import lzma
import os
import tarfile
import zlib
from collections.abc import Iterator, Sequence
from typing import Any

from ..errors import DomainError, FormatError
from ..formats import recfile
from ..records import record_from_schema
from ._decode import kind_of, size_of
from ._folder import FolderSummary

_IMAGE_EXTS = ("jpg", "jpeg", "png", "webp")
# The compressions a shard may have, by their first bytes: each module checks its
# stream's checksum (and a gzip member's length) when it reads to the end.
_COMPRESSED: tuple[tuple[bytes, Any], ...] = (
    (b"\x1f\x8b", lambda f: gzip.GzipFile(fileobj=f, mode="rb")),
    (b"BZh", bz2.BZ2File),
    (b"\xfd7zXZ\x00", lzma.LZMAFile),
)
_BROKEN = (tarfile.TarError, OSError, EOFError, zlib.error, lzma.LZMAError)
_ZERO_BLOCK = bytes(tarfile.BLOCKSIZE)


def _samples(shard: str) -> Iterator[tuple[str, dict[str, bytes], str]]:
    """(key, {extension: bytes}, where) of each sample of a shard, in order."""
    last_block = [b""]  # the last header block read: at the end, where the reading stopped

    class Header(tarfile.TarInfo):
        @classmethod
        def frombuf(cls, buf: bytes | bytearray, encoding: str, errors: str) -> Header:
            last_block[0] = bytes(buf)
            return super().frombuf(buf, encoding, errors)

    with contextlib.ExitStack() as stack:
        try:  # a stream: members in order, nothing seeked
            raw = stack.enter_context(open(shard, "rb"))
            head = raw.read(6)
            raw.seek(0)
            unpack = next((f for magic, f in _COMPRESSED if head.startswith(magic)), None)
            data = raw if unpack is None else stack.enter_context(unpack(raw))
            # "*": another compression (zstd) as tarfile finds it, without the checks above
            tar = stack.enter_context(tarfile.open(fileobj=data, mode="r|*", tarinfo=Header))
        except _BROKEN as e:
            raise FormatError(
                f"expected a tar shard, found one that does not open ({e})", shard, 0
            ) from e
        key: str | None = None
        parts: dict[str, bytes] = {}
        first, last = "", ""
        try:
            for member in tar:
                last = member.name
                if not member.isfile():
                    continue
                base = os.path.basename(member.name)
                stem, _, ext = base.partition(".")
                name_key = os.path.join(os.path.dirname(member.name), stem)
                if name_key != key:
                    if key is not None:
                        yield key, parts, first
                    key, parts, first = name_key, {}, f"{shard}: {member.name}"
                f = tar.extractfile(member)
                if f is not None:
                    parts[ext.lower()] = f.read()
            _check_end(shard, tar, last_block[0], last)
            while data.read(1 << 20):  # to the end: the decompressor checks its checksum
                pass
        except _BROKEN as e:
            raise FormatError(f"expected a tar shard, found a broken one ({e})", shard, None) from e
    if key is not None:
        yield key, parts, first


def _check_end(shard: str, tar: Any, block: bytes, last: str) -> None:
    """The header block ``tar`` stopped at (``block``, at ``tar.offset``) is the first of
    the end-of-archive's two zero blocks, and the second follows: ``tarfile`` reads a
    cut or invalid header as the end, which would drop the samples after it."""
    at = tar.offset
    after = f", after member {last}," if last else ""
    if len(block) < tarfile.BLOCKSIZE:
        found = f"{len(block)} bytes of a header" if block else "the data's end"
        raise FormatError(
            f"expected a tar header or the end-of-archive (two zero blocks) at byte {at:,} "
            f"of the tar{after} found {found}: the shard was cut short",
            shard,
        )
    if block != _ZERO_BLOCK:
        raise FormatError(
            f"expected a tar header or the end-of-archive at byte {at:,} of the tar{after} "
            f"found an invalid tar header (a corrupt shard)",
            shard,
        )
    second = tar.fileobj.read(tarfile.BLOCKSIZE)
    if second != _ZERO_BLOCK:
        found = "the data's end" if not second else f"{len(second)} bytes, not all zero"
        raise FormatError(
            f"expected the end-of-archive's second zero block at byte "
            f"{at + tarfile.BLOCKSIZE:,} of the tar{after} found {found}: the shard was "
            f"cut short{' or is corrupt' if second else ''}",
            shard,
        )


def _record(captions: bool, classes: int | None) -> Any:
    fields = [
        {
            "name": "image",
            "dims": [],
            "dtype": "bytes",
            "domain": None,
            "doc": "the sample's image bytes, as stored",
        },
        {"name": "width", "dims": [], "dtype": "<i4", "domain": None, "doc": "pixels"},
        {"name": "height", "dims": [], "dtype": "<i4", "domain": None, "doc": "pixels"},
        {
            "name": "label",
            "dims": [],
            "dtype": "<i8",
            "domain": None if classes is None else {"index": "C"},
            "doc": "the sample's .cls",
        },
    ]
    if captions:
        fields.append(
            {
                "name": "caption",
                "dims": [],
                "dtype": "str",
                "domain": None,
                "doc": "the sample's .txt",
            }
        )
    schema = {
        "name": "WebDatasetImages",
        "doc": "Samples of WebDataset tar shards.",
        "dims": {} if classes is None else {"C": classes},
        "fields": fields,
    }
    return record_from_schema(schema, "<webdataset>")


def _sample(
    key: str, parts: dict[str, bytes], where: str, captions: bool, classes: int | None
) -> dict[str, Any]:
    ext = next((e for e in _IMAGE_EXTS if e in parts), None)
    if ext is None:
        raise FormatError(
            f"expected an image member ({', '.join('.' + e for e in _IMAGE_EXTS)}) in sample "
            f"{key!r}, found {sorted('.' + e for e in parts) or 'none'}",
            where,
            None,
        )
    data = parts[ext]
    if not kind_of(data):
        raise FormatError(f"expected a JPEG, PNG or WebP image as {key}.{ext}", where, 0)
    width, height = size_of(data, where)
    if classes is not None and "cls" not in parts:
        raise FormatError(
            f"expected a member {key}.cls (classes={classes} gives every sample a class), "
            f"found {sorted('.' + e for e in parts)}",
            where,
            None,
        )
    try:
        label = int(parts["cls"].decode("ascii").strip()) if "cls" in parts else -1
    except (UnicodeDecodeError, ValueError) as e:
        raise FormatError(
            f"expected an integer class in {key}.cls, found {parts['cls'][:20]!r}", where, None
        ) from e
    if classes is not None and not 0 <= label < classes:
        raise DomainError(
            f"{where}: {key}.cls is {label}, outside the {classes} classes (0 to {classes - 1})"
        )
    out: dict[str, Any] = {"image": data, "width": width, "height": height, "label": label}
    if captions:
        try:
            out["caption"] = parts.get("txt", b"").decode("utf-8")
        except UnicodeDecodeError as e:
            raise FormatError(f"expected UTF-8 text in {key}.txt ({e})", where, None) from e
    return out


def from_webdataset(
    shards: str | Sequence[str],
    out: str,
    *,
    captions: bool | None = None,
    classes: int | None = None,
) -> FolderSummary:
    """Write the samples of WebDataset tar ``shards`` (a path or a list) to ``out``.

    ``captions``: keep each sample's ``.txt`` (default: when the first sample has one).
    ``classes``: the number of classes, which makes ``label`` an ``Index(C)`` (checked
    on write); a sample without ``.cls`` has label -1 (refused when ``classes`` is
    given)."""
    paths = [shards] if isinstance(shards, (str, os.PathLike)) else list(shards)
    paths = [os.fspath(p) for p in paths]
    if not paths:
        raise ValueError("from_webdataset needs at least one shard")
    if captions is None:
        first = next(_samples(paths[0]), None)
        captions = first is not None and "txt" in first[1]
    record = _record(bool(captions), classes)
    total = [0]

    def items() -> Iterator[dict[str, Any]]:
        for shard in paths:
            for key, parts, where in _samples(shard):
                sample = _sample(key, parts, where, bool(captions), classes)
                total[0] += len(sample["image"])
                yield sample

    n = recfile.write(out, record, items())
    labels = () if classes is None else tuple(str(i) for i in range(classes))
    return FolderSummary(os.fspath(out), n, labels, total[0], os.path.getsize(out))
