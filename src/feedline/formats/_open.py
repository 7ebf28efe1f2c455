"""Opening a file to read, wherever it is: the base every reader's handle builds on.

``open_shared`` gives a local path (or ``file://`` URL) a ``SharedFile`` and any other
URL a ``RemoteFile``; ``OpenFile`` is what every reader (``recfile``, ``ndf``,
``nndataset``) does with the handle. Above both ``_io`` (local files) and ``_remote``
(files at URLs), so neither imports the other's user.
"""

from __future__ import annotations

import os
from typing import Any

from ._io import Handle, SharedFile
from ._remote import RemoteFile, is_url, local_path


def open_shared(path: Any) -> Any:
    """A read handle for ``path``: a local path or ``file://`` URL (a ``SharedFile``),
    another URL (a ``RemoteFile`` read through fsspec), or an open handle (shared)."""
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
