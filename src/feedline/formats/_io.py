"""Local read handles shared by the formats, and the private files of a cache.

(Atomic writes are ``feedline._base.files``: every layer that writes uses them.)

Readers share one descriptor per open file among all copies of a handle; reads are
positional (``os.pread``), so threads never move a shared file position; the
descriptor closes when the last share is given up.
"""

from __future__ import annotations

import abc
import contextlib
import errno
import mmap
import os
import stat
import threading
from typing import Any

import numpy as np
import numpy.typing as npt

from .._base.files import file_kind, open_regular
from ..errors import FormatError, MissingFileError


class _Descriptor:
    """One open descriptor and its memory map, counted by the handles sharing it."""

    def __init__(self, path: str) -> None:
        self.path = path
        try:
            self.fd = open_regular(path)
        except FileNotFoundError as e:
            raise MissingFileError(f"{path}: no such file") from e
        self.size = os.fstat(self.fd).st_size
        self.shares = 1
        self.lock = threading.Lock()
        self._map: mmap.mmap | None = None

    def map(self) -> mmap.mmap | None:
        """The whole file memory-mapped read-only (None for an empty file)."""
        if self._map is None and self.size:
            with self.lock:
                if self._map is None:
                    self._map = mmap.mmap(self.fd, 0, access=mmap.ACCESS_READ)
        return self._map

    def release(self) -> None:
        with self.lock:
            self.shares -= 1
            last = self.shares == 0
        if last:
            if self._map is not None:
                with contextlib.suppress(BufferError):  # arrays still view it: GC closes it
                    self._map.close()
            os.close(self.fd)


class Handle(abc.ABC):
    """What every read handle does: share, close (idempotent), ``with``, bounds checks.

    ``_shared`` is the counted object behind the handles of one open file (its
    ``lock``, ``shares``, ``size`` and ``release()``); ``share()`` adds a handle on it,
    ``close()`` gives this one up, and the object is released with the last. Subclasses
    read (``pread``, ``array``) and make their twin (``_twin``).
    """

    _what = "file"  # named in bounds errors

    def __init__(self, path: str, shared: Any) -> None:
        self.path = path
        self._shared = shared
        self._closed = False

    @property
    def size(self) -> int:
        return self._shared.size

    @abc.abstractmethod
    def _twin(self) -> Handle:
        """A new handle on the same shared object (the share is already counted)."""

    def share(self) -> Handle:
        """Another handle on the same open file."""
        self._check()
        with self._shared.lock:
            self._shared.shares += 1
        return self._twin()

    def _check(self) -> None:
        if self._closed:
            raise ValueError(f"{self.path}: this handle is closed")

    def _check_range(self, offset: int, nbytes: int, what: str) -> None:
        self._check()
        if offset < 0 or nbytes < 0 or offset + nbytes > self._shared.size:
            raise FormatError(
                f"{what} needs bytes [{offset}, {offset + nbytes}) but the "
                f"{self._what} has {self._shared.size}",
                self.path,
                offset,
            )

    @abc.abstractmethod
    def pread(self, size: int, offset: int, what: str = "data") -> bytes:
        """Exactly ``size`` bytes at ``offset``; a ``FormatError`` if the file is shorter."""

    @abc.abstractmethod
    def array(
        self, dtype: npt.DTypeLike, offset: int, count: int, shape: tuple[int, ...] | None = None
    ) -> Any:
        """``count`` items of ``dtype`` at ``offset``: a numpy view, or an array read on
        demand (a remote file's ``RemoteArray``)."""

    @abc.abstractmethod
    def check_intact(self) -> None:
        """Before reading through the memory map: a ``FormatError`` if the file is shorter
        than when it was opened (truncated in place), where touching the pages past its
        end would kill the process (SIGBUS). Cost: one system call (``lseek``)."""

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._shared.release()

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self):
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()


class SharedFile(Handle):
    """A read handle on a file: positional reads and a memory map, shared by copies.

    ``share()`` returns another handle on the same descriptor; ``close()`` gives up
    this handle's share (idempotent). The descriptor closes with the last share.
    Pickling a handle (for a worker process) records the path; unpickling reopens it.
    """

    def __init__(self, path: str | os.PathLike[str], _desc: _Descriptor | None = None) -> None:
        path = os.fspath(path)
        super().__init__(path, _desc if _desc is not None else _Descriptor(path))

    def _twin(self) -> SharedFile:
        return SharedFile(self.path, self._shared)

    def check_intact(self) -> None:
        self._check()
        # the file's current size: lseek to the end costs a fifth of an fstat here, and
        # moves only the descriptor's position, which no read uses (they are positional)
        size = os.lseek(self._shared.fd, 0, os.SEEK_END)
        if size < self._shared.size:
            raise FormatError(
                f"the file was {self._shared.size} bytes when opened and is now "
                f"{size}: it was truncated in place while open (rewrite files "
                f"by replacing them, as feedline's writers do)",
                self.path,
                size,
            )

    def pread(self, size: int, offset: int, what: str = "data") -> bytes:
        """Exactly ``size`` bytes at ``offset``; a ``FormatError`` if the file is shorter."""
        self._check_range(offset, size, what)
        data = os.pread(self._shared.fd, size, offset)
        if len(data) != size:
            raise FormatError(
                f"{what}: read {len(data)} of {size} bytes (the file shrank?)", self.path, offset
            )
        return data

    def array(
        self, dtype: npt.DTypeLike, offset: int, count: int, shape: tuple[int, ...] | None = None
    ) -> np.ndarray:
        """A read-only numpy view of ``count`` items of ``dtype`` at ``offset`` (no copy)."""
        dtype = np.dtype(dtype)
        self._check_range(offset, count * dtype.itemsize, f"an array of {count} x {dtype}")
        if count == 0:
            arr = np.zeros(0, dtype=dtype)
        else:
            arr = np.frombuffer(self._shared.map(), dtype=dtype, count=count, offset=offset)
        return arr.reshape(shape) if shape is not None else arr

    def __reduce__(self):
        return (SharedFile, (self.path,))


def open_private(path: str) -> int:
    """``path`` opened read-write for this user alone: created 0600 with ``O_EXCL`` if
    absent, else opened ``O_NOFOLLOW``; it must be a regular file owned by this user (a
    symlink or a file planted in a shared directory is refused, never followed)."""
    flags = os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
    try:
        fd = os.open(path, flags | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        try:
            fd = os.open(path, flags)
        except OSError as e:
            if e.errno == errno.ELOOP:
                raise FormatError(
                    "expected a cache file, found a symbolic link (refused: "
                    "it could point at any file)",
                    path,
                    0,
                ) from e
            raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise FormatError(f"expected a cache file, found {file_kind(st.st_mode)}", path, 0)
        if st.st_uid != os.geteuid():
            raise FormatError(
                f"expected a cache file of this user (uid {os.geteuid()}), found "
                f"one owned by uid {st.st_uid}",
                path,
                0,
            )
        if st.st_mode & 0o077:
            os.fchmod(fd, 0o600)
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def private_directory(path: str) -> str:
    """Make (0700) or check the directory ``path`` for a cache: it must be a directory
    owned by this user, so no other user can have planted or read its files."""
    os.makedirs(path, mode=0o700, exist_ok=True)
    st = os.stat(path)
    if not stat.S_ISDIR(st.st_mode):
        raise FormatError(f"expected a cache directory, found {file_kind(st.st_mode)}", path, 0)
    if st.st_uid != os.geteuid():
        raise FormatError(
            f"expected a cache directory of this user (uid {os.geteuid()}), "
            f"found one owned by uid {st.st_uid}: another user could plant or "
            f"read its files",
            path,
            0,
        )
    return path


_HELD: dict[tuple[int, str], SharedFlock] = {}  # (pid, lock file) -> this process's hold
_HELD_LOCK = threading.Lock()


class SharedFlock:
    """A process's hold on one lock file (a shared cache's): shared by all its handles.

    An ``flock`` belongs to an open file description, so two handles of one process that
    opened the lock file each would lock each other out like two processes: an eviction
    in one would wait forever for a read that the same thread holds open in the other.
    Here the process's handles on a cache share one descriptor and one count of readers,
    and the shared lock is held while that count is above zero.
    """

    def __init__(self, key: tuple[int, str]) -> None:
        self.key = key
        self.fd = open_private(key[1])
        self.refs = 0
        self.readers = threading.Condition()  # its lock keeps new readers out
        self.reading = 0

    @classmethod
    def acquire(cls, path: str) -> SharedFlock:
        """The process's lock on ``path`` (keyed by process id: a forked child opens its own)."""
        # the directory's real path, not the file's: a symlink planted in place of the
        # lock file is refused by open_private, never resolved to its target
        key = (
            os.getpid(),
            os.path.join(os.path.realpath(os.path.dirname(path)), os.path.basename(path)),
        )
        with _HELD_LOCK:
            lock = _HELD.get(key)
            if lock is None:
                lock = _HELD[key] = cls(key)
            lock.refs += 1
            return lock

    def release(self) -> None:
        with _HELD_LOCK:
            self.refs -= 1
            if self.refs:
                return
            del _HELD[self.key]
        os.close(self.fd)
