"""Files that Arrow reads, wherever they are: a local path (memory-mapped) or an fsspec
URL (``s3://bucket/data/*.parquet``), globs expanded in order on either.

A URL's ``storage_options`` are fsspec's (credentials, ``client_kwargs``' endpoint);
without them fsspec's defaults apply (for s3fs, the ``AWS_*`` environment).
"""

from __future__ import annotations

import glob as globbing
import io
import os
from collections.abc import Mapping
from typing import Any

from ..errors import MissingFileError
from ._remote import RemoteFile, RemoteOptions, is_url, local_path


def has_magic(path: str) -> bool:
    """Whether ``path`` is a glob pattern (``*``, ``?`` or ``[``)."""
    return any(c in path for c in "*?[")


def filesystem(url: str, storage_options: Mapping[str, Any] | None = None) -> tuple[Any, str]:
    """fsspec's file system for ``url`` and the path within it; an ``ImportError``
    naming the extra when fsspec is missing."""
    try:
        import fsspec
    except ImportError as e:
        raise ImportError(
            f"reading {url} needs fsspec (and the protocol's own package, such as "
            f"s3fs): pip install 'feedline[remote]'"
        ) from e
    return fsspec.core.url_to_fs(url, **dict(storage_options or {}))


def expand(path: Any, what: str, storage_options: Mapping[str, Any] | None = None) -> list[str]:
    """The files of ``path``: one path or URL, a glob pattern (sorted), or a list of
    them (in order). ``what`` names the files for the errors (``"Parquet file"``)."""
    items = list(path) if isinstance(path, (list, tuple)) else [path]
    out: list[str] = []
    for p in items:
        p = local_path(os.fspath(p))
        if not has_magic(p):
            out.append(p)
            continue
        if is_url(p):
            fs, inner = filesystem(p, storage_options)
            protocol = p.split("://", 1)[0]
            found = [f"{protocol}://{f}" for f in sorted(fs.glob(inner))]
        else:
            found = [p] if os.path.exists(p) else sorted(globbing.glob(p))
        if not found:
            raise MissingFileError(f"no {what} matches {p!r}")
        out.extend(found)
    if not out:
        raise ValueError(f"no {what} given: a path, a glob pattern or a list of them")
    return out


def exists(path: str, storage_options: Mapping[str, Any] | None = None) -> bool:
    if is_url(path):
        fs, inner = filesystem(path, storage_options)
        return bool(fs.exists(inner))
    return os.path.exists(path)


class RemoteReader(io.RawIOBase):
    """A ``RemoteFile`` (feedline's block cache, retries and version pinning) as the
    seekable binary file pyarrow reads: a random reader's blocks are fetched once and
    kept, and an object replaced while open is a ``FormatError`` naming the URL."""

    def __init__(self, handle: RemoteFile) -> None:
        super().__init__()
        self.handle, self.pos = handle, 0

    @property
    def size(self) -> int:
        return self.handle.size

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self.pos, io.SEEK_END: self.size}[whence]
        self.pos = max(0, base + offset)
        return self.pos

    def readinto(self, buffer: Any) -> int:
        n = max(0, min(len(buffer), self.size - self.pos))
        if n:
            memoryview(buffer).cast("B")[:n] = self.handle.pread(n, self.pos)
            self.pos += n
        return n

    def close(self) -> None:
        if not self.closed:
            self.handle.close()
        super().close()


def open_cached(url: str, storage_options: Mapping[str, Any] | None = None) -> Any:
    """``url`` for pyarrow through feedline's remote layer (``RemoteReader``): for a
    file read at random, again and again (a source), rather than once in order."""
    options = RemoteOptions(storage_options=dict(storage_options or {}))
    return RemoteReader(RemoteFile(url, options))


def open_input(
    path: str, storage_options: Mapping[str, Any] | None = None, *, mapped: bool = True
) -> Any:
    """``path`` opened for Arrow: for a local file a ``pyarrow.MemoryMappedFile`` (its
    columns read zero copy) or, not ``mapped``, a plain ``pyarrow.OSFile`` (a file read
    once in order: its pages not held in the process's memory); an fsspec file (read by
    ranges, seekable, read once in order: no cache kept) for a URL. A missing file is a
    ``FileNotFoundError`` naming it."""
    import pyarrow as pa

    if is_url(path):
        fs, inner = filesystem(path, storage_options)
        if not fs.exists(inner):
            raise MissingFileError(f"{path}: no such object")
        return fs.open(inner, "rb")
    if not os.path.exists(path):
        raise MissingFileError(f"{path}: no such file")
    if os.path.isdir(path):
        raise IsADirectoryError(f"{path} is a directory, not a file")
    return pa.memory_map(path, "r") if mapped else pa.OSFile(path, "r")


def read_bytes(path: str, storage_options: Mapping[str, Any] | None = None) -> bytes:
    """A small file's bytes (a local path or a URL)."""
    if is_url(path):
        fs, inner = filesystem(path, storage_options)
        with fs.open(inner, "rb") as f:
            return f.read()
    with open(path, "rb") as f:
        return f.read()


def join(base: str, name: str) -> str:
    """``name`` inside the directory ``base`` (a path or a URL)."""
    return f"{base.rstrip('/')}/{name}" if is_url(base) else os.path.join(base, name)
