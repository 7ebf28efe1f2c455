"""WebDataset tar shards to ``.flr``: each sample's image bytes as they are, its class and
caption.

A WebDataset shard is a tar whose members are grouped into samples by their key (the
name up to the first dot): ``000123.jpg`` (or ``.jpeg``, ``.png``, ``.webp``),
``000123.cls`` (the class, an integer in text) and ``000123.txt`` (a caption). Samples
are read in the shards' order, streamed (one sample in memory at a time) into an atomic
write. A sample without an image, or whose image does not decode, is a ``FormatError``
naming the shard and the member.
"""

from __future__ import annotations

import os
import tarfile
from collections.abc import Iterator, Sequence
from typing import Any

from ..errors import FormatError
from ..formats import recfile
from ..records import record_from_schema
from ._decode import kind_of, size_of
from ._folder import FolderSummary

_IMAGE_EXTS = ("jpg", "jpeg", "png", "webp")


def _samples(shard: str) -> Iterator[tuple[str, dict[str, bytes], str]]:
    """(key, {extension: bytes}, where) of each sample of a shard, in order."""
    try:  # a stream: members in order, nothing seeked (closed by the with below)
        tar = tarfile.open(shard, "r|*")  # noqa: SIM115
    except (tarfile.TarError, OSError) as e:
        raise FormatError(
            f"expected a tar shard, found one that does not open ({e})", shard, 0
        ) from e
    key: str | None = None
    parts: dict[str, bytes] = {}
    first = ""
    with tar:
        try:
            for member in tar:
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
        except tarfile.TarError as e:
            raise FormatError(f"expected a tar shard, found a broken one ({e})", shard, None) from e
    if key is not None:
        yield key, parts, first


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


def _sample(key: str, parts: dict[str, bytes], where: str, captions: bool) -> dict[str, Any]:
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
    try:
        label = int(parts["cls"].decode("ascii").strip()) if "cls" in parts else -1
    except (UnicodeDecodeError, ValueError) as e:
        raise FormatError(
            f"expected an integer class in {key}.cls, found {parts['cls'][:20]!r}", where, None
        ) from e
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
                sample = _sample(key, parts, where, bool(captions))
                total[0] += len(sample["image"])
                yield sample

    n = recfile.write(out, record, items())
    labels = () if classes is None else tuple(str(i) for i in range(classes))
    return FolderSummary(os.fspath(out), n, labels, total[0], os.path.getsize(out))
