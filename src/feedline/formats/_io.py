"""File plumbing shared by the formats: atomic writes and shared read handles.

Writers are atomic: they write a temporary file in the target directory, flush and
fsync it, and rename it into place (then fsync the directory), so a crash or an
exception never leaves a partial file, nor a temporary, under the target path.

Readers share one descriptor per open file among all copies of a handle; reads are
positional (``os.pread``), so threads never move a shared file position; the
descriptor closes when the last share is given up.
"""

from __future__ import annotations

import abc
import contextlib
import errno
import fcntl
import hashlib
import mmap
import os
import stat
import tempfile
import threading
import time
from collections.abc import Iterator
from typing import Any, BinaryIO

import numpy as np
import numpy.typing as npt

from ..errors import FormatError

# A scratch file older than this, that no live process holds locked, was left by a
# writer that was killed (SIGKILL skips every clean-up); the next writer removes it.
_STALE_AFTER = 60.0
# A scratch name is ``.PREFIX.RANDOM SUFFIX``: the two dots, mkstemp's 8 random characters
# and a suffix of at most this many bytes (".tmp", ".FIELD.spool" with FIELD cut to 16
# bytes) take the room left after the prefix.
_SUFFIX_ROOM = 32
_NAME_MAX = 255  # where the file system does not say (os.pathconf)
# Errors of a write that ran out of room: they name the target, not a hidden temporary.
_NO_ROOM = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


def _name_max(directory: str) -> int:
    try:
        return int(os.pathconf(directory, "PC_NAME_MAX"))
    except (OSError, ValueError):
        return _NAME_MAX


def _shorten(name: str, limit: int) -> str:
    """``name`` if its bytes fit ``limit``, else its start and a hash of all of it (so
    two long names with the same start keep distinct scratch files)."""
    raw = os.fsencode(name)
    if len(raw) <= limit:
        return name
    digest = hashlib.sha256(raw).hexdigest()[:8]
    keep = name
    while len(os.fsencode(keep)) > limit - 9:
        keep = keep[:-1]
    return f"{keep}~{digest}"


def _scratch_prefix(path: str) -> tuple[str, str]:
    """(directory, ``.NAME.``) of ``path``'s scratch files; NAME is shortened so that a
    scratch name fits the file system's NAME_MAX for any name it accepts."""
    directory = os.path.dirname(os.path.abspath(path))
    limit = _name_max(directory) - 2 - 8 - _SUFFIX_ROOM
    return directory, f".{_shorten(os.path.basename(path), limit)}."


def scratch_suffix(label: str, kind: str) -> str:
    """``.LABEL.KIND`` with LABEL cut to 16 bytes (a spool's field name)."""
    while len(os.fsencode(label)) > 16:
        label = label[:-1]
    return f".{label}.{kind}"


def scratch_file(path: str | os.PathLike[str], suffix: str) -> tuple[int, str]:
    """A new hidden scratch file beside ``path`` (``.NAME.RANDOM SUFFIX``), locked.

    The descriptor holds an exclusive ``flock`` until it is closed, which marks the file
    as in use; scratch files of ``path`` that are unlocked and stale (a killed writer's)
    are removed first. A long NAME is shortened (its start and a hash), so every name
    the file system accepts can be written.
    """
    path = os.fspath(path)
    directory, prefix = _scratch_prefix(path)
    remove_stale_scratch(path)
    fd, name = tempfile.mkstemp(prefix=prefix, suffix=suffix, dir=directory)
    fcntl.flock(fd, fcntl.LOCK_EX)
    return fd, name


def remove_stale_scratch(path: str | os.PathLike[str]) -> list[str]:
    """Remove the scratch files that killed writers of ``path`` left; returns them."""
    path = os.fspath(path)
    directory, prefix = _scratch_prefix(path)
    removed: list[str] = []
    try:
        names = [
            n
            for n in os.listdir(directory)
            if n.startswith(prefix) and n.endswith((".tmp", ".spool"))
        ]
    except OSError:
        return removed
    now = time.time()
    for n in names:
        full = os.path.join(directory, n)
        try:
            fd = os.open(full, os.O_RDONLY)
        except OSError:
            continue
        try:
            if now - os.fstat(fd).st_mtime < _STALE_AFTER:
                continue
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # held: its writer is alive
            os.unlink(full)
            removed.append(full)
        except OSError:
            pass
        finally:
            os.close(fd)
    return removed


def _mode_for(path: str) -> int:
    """The permission bits for a file written to ``path``: those of the file there, else
    0666 less the process's umask (what ``open(path, "w")`` gives a new file)."""
    try:
        return stat.S_IMODE(os.stat(path).st_mode)
    except OSError:
        pass
    try:  # Linux 4.7+: read the umask without changing it (os.umask would, for a moment)
        with open("/proc/self/status", "rb") as f:
            for line in f:
                if line.startswith(b"Umask:"):
                    return 0o666 & ~int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return 0o666 & ~mask


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike[str]) -> Iterator[BinaryIO]:
    """Open a temporary file beside ``path``; on success it replaces ``path`` atomically.

    On any exception the temporary is removed and ``path`` is left as it was. A writer
    killed outright leaves its (locked, hidden) temporary behind; the next write of
    ``path`` removes it. A full disk (or quota, or file size limit) is an ``OSError``
    naming ``path``, not the hidden temporary.
    """
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = scratch_file(path, ".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
            f.flush()
            # mkstemp made it 0600: give it the mode the file it replaces had, or the one
            # a plain open() would give a new file
            os.fchmod(f.fileno(), _mode_for(path))
            os.fsync(f.fileno())
            os.replace(tmp, path)  # while the lock is held: the file is never seen stale
    except OSError as e:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        if e.errno in _NO_ROOM and e.filename in (None, tmp):
            raise OSError(
                e.errno,
                f"writing {path}: {e.strerror} (nothing was written: the file is as it was)",
                path,
            ) from e
        raise
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    with contextlib.suppress(OSError):  # not every file system lets a directory be fsynced
        dfd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)


_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


def file_kind(mode: int) -> str:
    """What a ``st_mode`` is, in words ("a directory", "a FIFO (named pipe)", ...)."""
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def open_regular(path: str, flags: int = os.O_RDONLY) -> int:
    """A descriptor on the regular file ``path``, or a ``FormatError`` naming what is
    there instead (a directory, a FIFO, a device). Never blocks: the file is opened
    ``O_NONBLOCK`` (which would otherwise wait for a FIFO's writer), checked with
    ``fstat``, then made blocking again."""
    try:
        fd = os.open(path, flags | os.O_NONBLOCK | os.O_CLOEXEC)
    except IsADirectoryError as e:  # O_WRONLY/O_RDWR on a directory
        raise FormatError("expected a regular file, found a directory", path, 0) from e
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise FormatError(f"expected a regular file, found {file_kind(mode)}", path, 0)
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


class _Descriptor:
    """One open descriptor and its memory map, counted by the handles sharing it."""

    def __init__(self, path: str) -> None:
        self.path = path
        try:
            self.fd = open_regular(path)
        except FileNotFoundError as e:
            raise FileNotFoundError(f"{path}: no such file") from e
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


def open_shared(path: Any) -> Any:
    """A read handle for ``path``: a local path or ``file://`` URL (a ``SharedFile``),
    another URL (a ``RemoteFile`` read through fsspec), or an open handle (shared)."""
    from ._remote import RemoteFile, is_url, local_path

    if isinstance(path, Handle):
        return path.share()
    path = local_path(os.fspath(path))
    return RemoteFile(path) if is_url(path) else SharedFile(path)


class OpenFile:
    """What every reader's handle does: share, close, ``with``, and pickle by path.

    Subclasses check the file in ``_parse`` (called by the constructor, which closes
    the file again if that fails) and drop their views of the file in ``_release``.
    """

    path: str
    _file: Handle

    def __init__(self, path: Any, _file: Handle | None = None) -> None:
        self._file = _file if _file is not None else open_shared(path)
        self.path = self._file.path
        try:
            self._parse()
        except BaseException:
            if _file is None:  # a handle this constructor opened
                self._file.close()
            raise

    def _parse(self) -> None:
        """Read and check the file's header (subclasses)."""

    def share(self):
        """Another handle on the same open file."""
        return type(self)(self.path, self._file.share())

    def _release(self) -> None:
        """Drop this handle's views of the file (before its share is given up)."""

    def close(self) -> None:
        """Give up this handle's share; the file closes with the last one."""
        self._release()
        self._file.close()

    @property
    def closed(self) -> bool:
        return self._file.closed

    def __enter__(self):
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __reduce__(self):
        # the handle pickles itself (a path, or a URL with its options) and reopens
        return (type(self), (self.path, self._file))


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
