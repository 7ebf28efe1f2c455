"""The files a manifest lists: opened where they are (a local path or a URL), hashed,
and measured for the lengths the manifest records."""

from __future__ import annotations

import hashlib
import os
from typing import Any

from .._base.files import open_regular
from ..errors import FormatError
from . import nndataset, recfile
from ._remote import is_url

# Bytes read at a time while hashing a shard.
_HASH_SLICE = 8 << 20


def _fs(path: str) -> Any:
    """fsspec's file system for a URL (the manifest and its shards share it)."""
    try:
        import fsspec
    except ImportError as e:
        raise ImportError(f"reading {path} needs fsspec: pip install 'feedline[remote]'") from e
    return fsspec.core.url_to_fs(path)


def _open_binary(path: str) -> Any:
    """A local path or a URL, opened for reading (the caller's ``with`` closes it). A
    local path must be a regular file (a FIFO or a directory is a ``FormatError``)."""
    if is_url(path):
        fs, p = _fs(path)
        return fs.open(p, "rb")
    return os.fdopen(open_regular(path), "rb")


def _read_bytes(path: str) -> bytes:
    with _open_binary(path) as f:
        return f.read()


def _sha256(path: str) -> str:
    h = hashlib.sha256()
    with _open_binary(path) as f:
        while block := f.read(_HASH_SLICE):
            h.update(block)
    return h.hexdigest()


def _lengths(handle: Any) -> dict[str, int]:
    """The lengths a manifest records for an open shard."""
    if isinstance(handle, recfile.RecFile):
        return {"rows": len(handle)}
    info = handle.info
    out = {"docs": info.num_docs, "tokens": 0, "test_docs": info.test_docs, "test_tokens": 0}
    if info.kind != "text":
        raise FormatError(
            f"a manifest lists text datasets; this one is of kind {info.kind}", handle.path
        )
    out["tokens"] = len(handle.load_text("train").token_flow)
    if info.has_test:
        out["test_tokens"] = len(handle.load_text("test").token_flow)
    return out


def _open(path: str, fmt: str) -> Any:
    return recfile.open(path) if fmt == "flr" else nndataset.open(path)
