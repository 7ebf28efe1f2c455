"""Atomic writes and regular files: the file plumbing of every layer that writes.

A writer writes a hidden temporary file beside its target, flushes and fsyncs it, and
renames it into place (then fsyncs the directory), so a crash or an exception never
leaves a partial file, nor a temporary, under the target path. A temporary holds an
exclusive ``flock`` while its writer lives; one that a killed writer left is removed by
the next writer of the same path.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import os
import stat
import tempfile
import time
from collections.abc import Iterator
from typing import BinaryIO

from ..errors import FormatError, MissingFileError

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
    if not os.path.isdir(directory or "."):  # named for ``path``, not the scratch file
        raise MissingFileError(f"{path}: no such directory {directory!r} to write into")
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
