"""How a command reports bad input: one line on stderr, exit status 2, no traceback.

``main`` reports feedline's own errors (``FeedlineError``) this way. The errors of the
file system and of dependencies (a missing file, a name whose format is unknown, text
that is not UTF-8) are caught by each command, which knows the file or argument to
name; other exceptions are bugs and keep their traceback.
"""

from __future__ import annotations

import os
import sys


def fail(message: str) -> int:
    """Print ``feedline: message`` on stderr; the exit status 2."""
    print(f"feedline: {message}", file=sys.stderr)
    return 2


def reason(e: BaseException, path: str | os.PathLike[str]) -> str:
    """``e``'s message, to follow a mention of ``path``: an ``OSError`` about ``path``
    itself is said without repeating it ("No such file or directory")."""
    if isinstance(e, UnicodeDecodeError):
        return f"expected UTF-8 text, found the byte 0x{e.object[e.start]:02x} at byte {e.start}"
    if isinstance(e, OSError) and e.strerror and isinstance(e.filename, (str, os.PathLike)):
        same = os.path.abspath(e.filename) == os.path.abspath(path)
        return e.strerror if same else f"{e.strerror}: {os.fspath(e.filename)}"
    return str(e)


def is_within(name: object, path: str | os.PathLike[str]) -> bool:
    """Whether the file ``name`` (an ``OSError.filename``) is ``path`` or inside it."""
    if not isinstance(name, (str, os.PathLike)):
        return False
    a, b = os.path.abspath(name), os.path.abspath(path)
    return a == b or a.startswith(b.rstrip(os.sep) + os.sep)
