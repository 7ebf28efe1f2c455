"""Files at URLs (``s3://``, ``gs://``, ``https://``, ...) read through fsspec.

A :class:`RemoteFile` has the interface of a local :class:`~._io.SharedFile` (``size``,
``pread``, ``array``, ``share``, ``close``, pickling), so every reader opens a URL as
it opens a path. Reads go through a block cache: a sparse local file the size of the
object, filled block by block with byte-range requests, plus one presence entry per
block. An ``array`` is a :class:`RemoteArray`: a gather (``np.take``, indexing) first
fetches the blocks its rows touch that are missing (grouped into runs of adjacent
blocks, all requested at once: ``cat_ranges``, concurrent for s3fs), then copies the
rows from the cache file's memory map, so a warm cache reads at local speed.

The version opened
    A handle is pinned to the object as it was when opened: its size and what the
    backend reports of its version (ETag, version id, modification or creation time).
    After every fetch, before the blocks enter the cache, the object is looked up
    again; if it changed, the read is a ``FormatError`` naming the URL, so a batch never
    mixes blocks of two versions. A backend that reports none of these (an HTTP server
    without ETag or Last-Modified) can only be pinned by size: its cache is never
    persisted (``cache_dir`` is not used, the blocks go to a private cache), so a
    replaced object is not served stale to later handles.

The cache
    Without ``cache_dir`` it is a private temporary file, deleted when the last handle
    closes. With ``cache_dir`` it persists, named by the URL, the object's size and its
    version (above), so a changed object never reuses stale blocks, and
    several processes share it safely: blocks are written with ``pwrite`` before their
    presence entry, readers hold a shared ``flock`` while they copy (one lock per read,
    whatever their own ``cache_bytes``: another handle's may be smaller), and eviction
    takes the lock exclusively. ``cache_bytes`` bounds the blocks kept: past it, the
    oldest fetched blocks are dropped (their holes punched) until the cache is at 3/4 of
    it. A process holds one lock per cache, shared by its handles, so a handle evicts
    only when none of the process's handles on that cache is reading. The directory must
    belong to this user; its files are created 0600 with ``O_EXCL`` and reopened with
    ``O_NOFOLLOW``, and must be regular files of this user, so a symlink or a file
    planted by another user is refused (``FormatError``), never written through.

Errors
    A missing object is a ``FileNotFoundError`` and a refused one a ``PermissionError``,
    both naming the URL; other ``OSError`` s and connection errors are retried
    ``retries`` times with exponential backoff (``backoff`` seconds, doubled each time),
    then raised with the URL and the byte range.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import mmap
import os
import tempfile
import threading
import time
from collections.abc import Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

from ..errors import FormatError, MissingFileError
from ._io import Handle, SharedFlock, open_private, private_directory
from ._remote_array import RemoteArray

_NOT_TRANSIENT = (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError)
_TRANSIENT_LIBS = (
    "aiohttp",
    "botocore",
    "aiobotocore",
    "urllib3",
    "requests",
    "http",
    "fsspec",
    "s3fs",
    "gcsfs",
)
# What fsspec backends report of an object's version, in their own spellings: the
# version is pinned by every one of them present.
_VERSION_KEYS = (
    "ETag",
    "etag",
    "VersionId",
    "version_id",
    "generation",
    "mtime",
    "LastModified",
    "last_modified",
    "updated",
    "created",
)


def version_of(info: Mapping[str, Any]) -> str:
    """The object's version as the backend reports it ("" if it reports none)."""
    return "\0".join(f"{k}={info[k]}" for k in _VERSION_KEYS if info.get(k) not in (None, ""))


def is_url(path: Any) -> bool:
    """Whether ``path`` names a remote object (``file://`` URLs are local paths)."""
    return isinstance(path, str) and "://" in path and not path.startswith("file://")


def local_path(path: Any) -> Any:
    return path[len("file://") :] if isinstance(path, str) and path.startswith("file://") else path


@dataclasses.dataclass(frozen=True, kw_only=True)
class RemoteOptions:
    """How a URL is read: fsspec's ``storage_options``, the cache and the retries."""

    storage_options: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    # 1 MiB: large enough that a run of blocks is one request of useful size, small
    # enough that a random row of a cold cache does not fetch much it does not need.
    block_size: int = 1 << 20
    cache_dir: str | None = None
    cache_bytes: int = 16 << 30
    retries: int = 5
    backoff: float = 0.05

    def __post_init__(self) -> None:
        if not isinstance(self.storage_options, Mapping):
            raise TypeError(
                f"storage_options must be a dict, got {type(self.storage_options).__name__}"
            )
        for name, low in (("block_size", mmap.PAGESIZE), ("cache_bytes", 1), ("retries", 0)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"{name} must be an int >= {low}, got {value!r}")
        if self.block_size % mmap.PAGESIZE:
            raise ValueError(
                f"block_size must be a multiple of the page size "
                f"{mmap.PAGESIZE}, got {self.block_size}"
            )
        if not isinstance(self.backoff, (int, float)) or self.backoff < 0:
            raise ValueError(f"backoff must be a number of seconds >= 0, got {self.backoff!r}")


def _transient(e: BaseException) -> bool:
    if isinstance(e, _NOT_TRANSIENT):
        return False
    if isinstance(e, (OSError, ConnectionError, TimeoutError)):
        return True
    return type(e).__module__.split(".")[0] in _TRANSIENT_LIBS


class _Object:
    """One remote object, its cache and its lock: shared by a process's handles."""

    def __init__(self, url: str, options: RemoteOptions) -> None:
        try:
            import fsspec
        except ImportError as e:
            raise ImportError(
                f"reading {url} needs fsspec (and the protocol's own package, "
                f"such as s3fs): pip install 'feedline[remote]'"
            ) from e
        self.url, self.options = url, options
        self.fs, self.fs_path = fsspec.core.url_to_fs(url, **dict(options.storage_options))
        info = self._info()
        if info.get("type", "file") != "file":
            raise IsADirectoryError(f"{url} is a {info.get('type')}, not a file")
        self.size = int(info["size"])
        self.version = version_of(info)
        self.block = options.block_size
        self.blocks = -(-self.size // self.block)
        self.shares = 1
        self.lock = threading.Lock()
        self._fetched_since_check = False
        self._fetching = threading.Lock()
        self.may_evict = self.blocks > max(1, options.cache_bytes // options.block_size)
        self._open_cache(info)

    # -- the cache files ---------------------------------------------------------------
    def _open_cache(self, info: Mapping[str, Any]) -> None:
        # only a version the backend vouches for keys a cache that outlives this handle
        if self.options.cache_dir is None or not self.version:
            self._dir = tempfile.mkdtemp(prefix="feedline-cache-")
            self._private = True
        else:
            self._dir = private_directory(self.options.cache_dir)
            self._private = False
        key = hashlib.sha256(f"{self.url}\0{self.size}\0{self.version}\0{self.block}".encode())
        base = os.path.join(self._dir, key.hexdigest()[:32])
        self.data_fd = open_private(base + ".data")
        try:
            self.index_fd = open_private(base + ".blocks")
        except BaseException:
            os.close(self.data_fd)
            raise
        self._lock = SharedFlock.acquire(base + ".lock")
        self.lock_fd = self._lock.fd
        index_bytes = 8 * max(1, self.blocks)

        def sized() -> bool:
            return (
                os.fstat(self.data_fd).st_size == self.size
                and os.fstat(self.index_fd).st_size == index_bytes
            )

        # size the files once, whoever comes first. Only the first opener waits for the
        # exclusive lock: once the files are sized, readers (of any process) may hold the
        # shared one for as long as they read, and this process's unlock would drop it.
        if not sized():
            with self._lock.readers, self._flock(fcntl.LOCK_EX):
                if not sized():
                    os.ftruncate(self.data_fd, self.size)
                    os.ftruncate(self.index_fd, index_bytes)
        self._index_map = mmap.mmap(self.index_fd, index_bytes)
        # per block: 0 = absent, else the fetch tick (a global counter) for eviction
        self.index = np.frombuffer(self._index_map, dtype=np.uint64)
        self._data_map = mmap.mmap(self.data_fd, self.size) if self.size else None
        self.data = (
            np.frombuffer(self._data_map, dtype=np.uint8)
            if self._data_map is not None
            else np.zeros(0, np.uint8)
        )
        self._base = base

    @contextlib.contextmanager
    def _flock(self, kind: int):
        fcntl.flock(self.lock_fd, kind)
        try:
            yield
        finally:
            fcntl.flock(self.lock_fd, fcntl.LOCK_UN)

    @contextlib.contextmanager
    def reading(self):
        """Blocks stay in the cache while the caller copies from it (all processes).

        Every read of a cache on disk holds the shared lock (one ``flock`` per read, not
        per block), whatever this handle's ``cache_bytes``: a handle whose budget fits
        the whole object never evicts, but another one on the same cache may. Eviction
        happens here, before a read, when no handle of this process is reading that
        cache (the condition's lock keeps new readers out) and under the exclusive lock
        (no other process is reading): a block is never dropped under a reader.
        """
        if self._private and not self.may_evict:  # nobody else can drop a block
            yield
            return
        lock = self._lock
        with lock.readers:
            if lock.reading == 0:
                if self.may_evict and self._fetched_since_check:
                    self._fetched_since_check = False
                    self._evict_if_needed()
                fcntl.flock(lock.fd, fcntl.LOCK_SH)
            lock.reading += 1
        try:
            yield
        finally:
            with lock.readers:
                lock.reading -= 1
                if lock.reading == 0:
                    fcntl.flock(lock.fd, fcntl.LOCK_UN)

    # -- fetching ----------------------------------------------------------------------
    def _info(self) -> Mapping[str, Any]:
        """The object's listing, asked of the backend (not of fsspec's listings cache)."""

        def ask() -> Mapping[str, Any]:
            with contextlib.suppress(Exception):
                self.fs.invalidate_cache(self.fs_path)
            return self.fs.info(self.fs_path)

        return self._retry(ask, "its size and version")

    def _check_pinned(self, offset: int) -> None:
        """A ``FormatError`` naming the URL if the object is not the version opened."""
        try:
            info = self._info()
        except FileNotFoundError as e:
            raise FormatError(
                f"the object was removed since it was opened (a read of the "
                f"{self.size}-byte object)",
                self.url,
                offset,
            ) from e
        size, version = int(info.get("size", -1)), version_of(info)
        if size != self.size or version != self.version:
            raise FormatError(
                f"the object changed since it was opened: it was {self.size} "
                f"bytes, version {self.version or '(none reported)'}; it is now "
                f"{size} bytes, version {version or '(none reported)'} (reopen it "
                f"to read the new one)",
                self.url,
                offset,
            )

    def _retry(self, fn, what: str):
        delay = self.options.backoff
        for attempt in range(self.options.retries + 1):
            try:
                return fn()
            except FileNotFoundError as e:
                raise MissingFileError(f"{self.url}: no such object") from e
            except PermissionError as e:
                raise PermissionError(f"{self.url}: access refused ({e})") from e
            except Exception as e:
                if not _transient(e) or attempt == self.options.retries:
                    raise OSError(
                        f"{self.url}: reading {what} failed after {attempt + 1} "
                        f"attempt(s): {type(e).__name__}: {e}"
                    ) from e
                time.sleep(delay)
                delay *= 2
        raise AssertionError("unreachable")

    def ensure(self, blocks: np.ndarray) -> None:
        """Fetch the blocks of ``blocks`` the cache lacks. Call inside ``reading()``."""
        present = self.index[blocks]
        if present.all():
            return
        missing = np.unique(blocks[present == 0])
        with self._fetching:  # one fetch at a time per process; others may have filled it
            missing = missing[self.index[missing] == 0]
            if not len(missing):
                return
            # runs of adjacent blocks, at most 16 MiB each: one request per run
            cut = (
                np.flatnonzero(
                    (np.diff(missing) != 1)
                    | (np.arange(1, len(missing)) % max(1, (16 << 20) // self.block) == 0)
                )
                + 1
            )
            runs = np.split(missing, cut)
            starts = [int(r[0]) * self.block for r in runs]
            ends = [min(self.size, (int(r[-1]) + 1) * self.block) for r in runs]
            parts = self._retry(
                lambda: self._cat(starts, ends), f"{len(runs)} range(s) from byte {starts[0]}"
            )
            # the bytes are of the version opened only if it is still the one there (a
            # change during the fetch shows too): checked before they enter the cache
            self._check_pinned(starts[0])
            tick = int(self.index.max()) + 1
            for run, start, part in zip(runs, starts, parts):
                view = memoryview(part)
                written = 0
                while written < len(view):
                    written += os.pwrite(self.data_fd, view[written:], start + written)
                self.index[run] = tick
            self._fetched_since_check = True

    def _cat(self, starts: list[int], ends: list[int]) -> list[bytes]:
        parts = self.fs.cat_ranges([self.fs_path] * len(starts), starts, ends, on_error="return")
        for part, a, b in zip(parts, starts, ends):
            if isinstance(part, BaseException):
                raise part
            if len(part) != b - a:
                raise ConnectionError(f"asked for bytes [{a}, {b}), received {len(part)}")
        return parts

    def _evict_if_needed(self) -> None:
        """Past ``cache_bytes``, drop the oldest fetched blocks down to 3/4 of it."""
        limit = max(1, self.options.cache_bytes // self.block)
        if int(np.count_nonzero(self.index)) <= limit:
            return
        with self._flock(fcntl.LOCK_EX):
            held = np.flatnonzero(self.index)
            order = held[np.argsort(self.index[held], kind="stable")]
            drop = order[: max(0, len(held) - max(1, limit * 3 // 4))]
            self.index[drop] = 0
            assert self._data_map is not None  # blocks were fetched: the object is not empty
            for b in drop.tolist():
                a = b * self.block
                with contextlib.suppress(OSError):  # a file system without holes
                    self._data_map.madvise(mmap.MADV_REMOVE, a, min(self.block, self.size - a))

    def blocks_of(self, starts: np.ndarray, nbytes: Any) -> np.ndarray:
        """The blocks that byte ranges ``[s, s + nbytes)`` touch, possibly repeated
        (``nbytes`` one length for all or one per range; empty ranges touch none)."""
        starts = np.asarray(starts, dtype=np.int64)
        if isinstance(nbytes, int) and 0 < nbytes <= self.block:  # rows of one array
            return np.concatenate((starts // self.block, (starts + nbytes - 1) // self.block))
        lengths = np.broadcast_to(np.asarray(nbytes, dtype=np.int64), starts.shape)
        keep = lengths > 0
        starts, lengths = starts[keep], lengths[keep]
        if not len(starts):
            return np.zeros(0, dtype=np.int64)
        first = starts // self.block
        last = (starts + lengths - 1) // self.block
        spans = last - first + 1
        if int(spans.max()) <= 2:  # the common case: a row touches one or two blocks
            return np.concatenate((first, last))
        within = np.arange(int(spans.sum())) - np.repeat(np.cumsum(spans) - spans, spans)
        return np.repeat(first, spans) + within

    def release(self) -> None:
        with self.lock:
            self.shares -= 1
            last = self.shares == 0
        if not last:
            return
        self.index = self.data = None  # type: ignore[assignment]  # closed: _local checks
        for m in (self._index_map, self._data_map):
            if m is not None:
                with contextlib.suppress(BufferError):
                    m.close()
        for fd in (self.data_fd, self.index_fd):
            os.close(fd)
        self._lock.release()
        if self._private:
            for suffix in (".data", ".blocks", ".lock"):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(self._base + suffix)
            with contextlib.suppress(OSError):
                os.rmdir(self._dir)


class RemoteFile(Handle):
    """A read handle on a remote object, with a ``SharedFile``'s interface.

    ``fl.remote.open(url, ...)`` makes one; every reader (``fl.recfile.open``,
    ``fl.ndf.open``, ``fl.nndataset.open``) also takes a URL (default options) or a
    ``RemoteFile``. Pickling records the URL and the options; the receiving process
    opens its own handle (and shares the cache directory, if any).
    """

    _what = "object"

    def __init__(
        self, url: str, options: RemoteOptions | None = None, _obj: _Object | None = None
    ) -> None:
        self.options = options if options is not None else RemoteOptions()
        super().__init__(url, _obj if _obj is not None else _Object(url, self.options))

    @property
    def _obj(self) -> _Object:
        return self._shared

    def _twin(self) -> RemoteFile:
        return RemoteFile(self.path, self.options, self._shared)

    def check_intact(self) -> None:
        """Nothing to check before a read: the cache file is this process's own, sized
        once, and the object's version is checked at every fetch (``_Object.ensure``)."""
        self._check()

    def pread(self, size: int, offset: int, what: str = "data") -> bytes:
        """Exactly ``size`` bytes at ``offset``; a ``FormatError`` past the object's end."""
        self._check_range(offset, size, what)
        obj = self._obj
        with obj.reading():
            obj.ensure(obj.blocks_of(np.array([offset], dtype=np.int64), size))
            return bytes(obj.data[offset : offset + size])

    def array(
        self, dtype: npt.DTypeLike, offset: int, count: int, shape: tuple[int, ...] | None = None
    ) -> RemoteArray:
        """``count`` items of ``dtype`` at ``offset``, read on demand (a ``RemoteArray``)."""
        dtype = np.dtype(dtype)
        self._check_range(offset, count * dtype.itemsize, f"an array of {count} x {dtype}")
        return RemoteArray(self._obj, dtype, offset, shape if shape is not None else (count,))

    def __reduce__(self):
        return (RemoteFile, (self.path, self.options))


def open(
    url: str,
    *,
    storage_options: Mapping[str, Any] | None = None,
    block_size: int = RemoteOptions.block_size,
    cache_dir: str | None = None,
    cache_bytes: int = RemoteOptions.cache_bytes,
    retries: int = RemoteOptions.retries,
    backoff: float = RemoteOptions.backoff,
) -> RemoteFile:
    """A handle on the object at ``url`` for any reader (``fl.recfile.open(handle)``)."""
    if not is_url(url):
        raise ValueError(f"expected a URL such as s3://bucket/key, got {url!r}")
    return RemoteFile(
        url,
        RemoteOptions(
            storage_options=dict(storage_options or {}),
            block_size=block_size,
            cache_dir=cache_dir,
            cache_bytes=cache_bytes,
            retries=retries,
            backoff=backoff,
        ),
    )
