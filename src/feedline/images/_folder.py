"""Image folders to ``.flr``: the encoded bytes as they are, with width, height and label.

An ImageFolder layout (one subfolder per class, sorted by name: class ``i`` is the
``i``-th) becomes a ``.flr`` of ``image`` (``bytes``: the file's bytes, never
re-encoded), ``width``, ``height`` and ``label`` (``Index(C)``); the class names are
the record's ``label`` doc, in order. The files are read one at a time and streamed
into the file (memory stays bounded), and the write is atomic: a file that is not an
image is a ``FormatError`` naming it, and nothing is written.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from ..errors import FormatError
from ..formats import recfile
from ..records import record_from_schema
from ._decode import kind_of, size_of

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".webp")


@dataclass(frozen=True)
class FolderSummary:
    """What ``from_folder`` wrote."""

    path: str
    images: int
    classes: tuple[str, ...]
    bytes_in: int
    bytes_out: int

    def __str__(self) -> str:
        return (
            f"{self.images:,} images of {len(self.classes)} classes "
            f"({', '.join(self.classes[:5])}{', ...' if len(self.classes) > 5 else ''}): "
            f"{self.bytes_in:,} bytes of images, {self.path} {self.bytes_out:,} bytes"
        )


def folder_record(classes: list[str]) -> Any:
    """The record of an image folder with these classes."""
    schema = {
        "name": "ImageFolder",
        "doc": "Encoded images from a folder of class subfolders.",
        "dims": {"C": len(classes)},
        "fields": [
            {
                "name": "image",
                "dims": [],
                "dtype": "bytes",
                "domain": None,
                "doc": "the file's bytes (JPEG, PNG or WebP), as stored",
            },
            {"name": "width", "dims": [], "dtype": "<i4", "domain": None, "doc": "pixels"},
            {"name": "height", "dims": [], "dtype": "<i4", "domain": None, "doc": "pixels"},
            {
                "name": "label",
                "dims": [],
                "dtype": "<i8",
                "domain": {"index": "C"},
                "doc": "class names, in order: " + json.dumps(classes, ensure_ascii=False),
            },
        ],
    }
    return record_from_schema(schema, "<image folder>")


def class_names(record: Any) -> list[str]:
    """The class names an image folder's record keeps (``from_folder``'s)."""
    doc = record.fields["label"].doc or ""
    marker = "class names, in order: "
    if not doc.startswith(marker):
        raise ValueError(f"record {record.__name__} keeps no class names")
    return list(json.loads(doc[len(marker) :]))


def scan(directory: str) -> tuple[list[str], list[tuple[str, int]]]:
    """(class names, [(file, label)]) of an ImageFolder layout, sorted."""
    if not os.path.isdir(directory):
        raise FormatError("expected a folder of class subfolders", directory, None)
    classes = sorted(d for d in os.listdir(directory) if os.path.isdir(os.path.join(directory, d)))
    if not classes:
        raise FormatError(
            "expected class subfolders (an ImageFolder layout), found none", directory, None
        )
    files = []
    for label, name in enumerate(classes):
        folder = os.path.join(directory, name)
        for root, dirs, names in os.walk(folder):
            dirs.sort()
            for n in sorted(names):
                if n.lower().endswith(IMAGE_SUFFIXES):
                    files.append((os.path.join(root, n), label))
    if not files:
        raise FormatError(
            f"expected images ({', '.join(IMAGE_SUFFIXES)}) in the class subfolders, found none",
            directory,
            None,
        )
    return classes, files


def from_folder(directory: str, out: str, *, progress: bool | None = None) -> FolderSummary:
    """Write the images of an ImageFolder layout to the ``.flr`` ``out``."""
    classes, files = scan(os.fspath(directory))
    record = folder_record(classes)
    total = [0]

    def items() -> Iterator[dict[str, Any]]:
        bar = _bar(len(files), progress)
        try:
            for path, label in files:
                with open(path, "rb") as f:
                    data = f.read()
                if not kind_of(data):
                    raise FormatError("expected a JPEG, PNG or WebP image", path, 0)
                width, height = size_of(data, path)
                total[0] += len(data)
                yield {"image": data, "width": width, "height": height, "label": label}
                if bar is not None:
                    bar.update(1)
        finally:
            if bar is not None:
                bar.close()

    n = recfile.write(out, record, items())
    return FolderSummary(os.fspath(out), n, tuple(classes), total[0], os.path.getsize(out))


def _bar(total: int, progress: bool | None) -> Any:
    """A tqdm bar when asked (or, by default, when tqdm is installed and stderr is a
    terminal)."""
    import sys

    if progress is False or (progress is None and not sys.stderr.isatty()):
        return None
    try:
        from tqdm import tqdm
    except ImportError:
        if progress:
            raise ImportError("a progress bar needs tqdm: pip install tqdm") from None
        return None
    return tqdm(total=total, unit="img", desc="images")
