"""What a loader sends to its workers: its datasets (and batch transform) pickled.

By reference where it can (the standard pickle: a worker imports the functions and
classes it names), by value through cloudpickle (the ``workers`` extra) for what a
worker cannot import: what a script or a notebook defines in ``__main__``, a lambda.
The digest of what would be sent keys the pools (``_pools``).
"""

from __future__ import annotations

import hashlib
import io
import pickle
import pickletools
import types
from typing import Any


def examine(obj: Any) -> tuple[str | None, str | None, bool]:
    """``(digest, reason, by_value)``: a digest of ``obj`` pickled (what workers would
    receive), or why ``obj`` cannot go to a worker; ``by_value`` when it goes by
    cloudpickle.

    By reference (the standard pickle) where it can: a worker imports the functions and
    classes it names. What that cannot send (something defined in ``__main__``, which a
    worker never imports: a script's or a notebook's map, record or source; a lambda)
    goes by value through cloudpickle (the ``workers`` extra) when it is installed; the
    reason is then why neither can. Arrays are hashed in place (out-of-band buffers),
    not copied."""
    buffers: list[pickle.PickleBuffer] = []
    data, reason = _by_reference(obj, buffers)
    by_value = False
    if data is None:
        buffers.clear()
        try:
            data = dumps_by_value(obj, buffers.append)
        except ImportError:
            return None, f"{reason} (install feedline[workers] to send it by value)", False
        except Exception as e:
            why = f"{type(e).__name__}: {e}"
            return None, f"{reason}, and cloudpickle cannot send it ({why})", False
        by_value = True
    h = hashlib.blake2b(data, digest_size=20)
    for buf in buffers:
        raw = buf.raw()
        h.update(len(raw).to_bytes(8, "little"))
        h.update(raw)
    return h.hexdigest(), None, by_value


def dumps_by_value(obj: Any, buffer_callback: Any = None) -> bytes:
    """``obj`` pickled with what ``__main__`` defines (functions, lambdas, classes) by
    value, through cloudpickle (``ImportError`` without it); everything else by
    reference. A function or class of another module that a worker could not import (a
    closure of a test, a lambda in a library) is refused (``PicklingError``), as the
    standard pickle refuses it: it stays in the calling process, where its side effects
    (a list it appends to) are seen."""
    import cloudpickle

    class Pickler(cloudpickle.Pickler):
        def reducer_override(self, o: Any) -> Any:
            if isinstance(o, (types.FunctionType, type)) and not _main_or_importable(o):
                raise pickle.PicklingError(
                    f"{o.__module__}.{o.__qualname__} is neither importable nor of __main__"
                )
            return super().reducer_override(o)

    out = io.BytesIO()
    Pickler(out, protocol=5, buffer_callback=buffer_callback).dump(obj)
    return out.getvalue()


def _main_or_importable(o: Any) -> bool:
    """False for a function or class defined inside a function, or a lambda, of a module
    other than ``__main__``: a worker cannot import it."""
    if getattr(o, "__module__", None) == "__main__":
        return True
    qualname = getattr(o, "__qualname__", "")
    return "<locals>" not in qualname and "<lambda>" not in qualname


def _by_reference(obj: Any, buffers: list) -> tuple[bytes | None, str | None]:
    """``obj`` pickled by the standard pickle, or why a worker could not load that."""
    try:
        data = pickle.dumps(obj, protocol=5, buffer_callback=buffers.append)
    except Exception as e:
        return None, f"it cannot be pickled ({type(e).__name__}: {e})"
    strings: list[Any] = []  # the string opcodes' arguments
    # A reference to __main__ names it in the bytes: scan the opcodes only then (the
    # scan is Python per opcode, the search is not).
    for op, arg, _ in pickletools.genops(io.BytesIO(data)) if b"__main__" in data else ():
        if op.name in ("GLOBAL", "INST") and isinstance(arg, str) and arg.startswith("__main__"):
            return None, f"it refers to {arg.replace(' ', '.')}, defined in __main__"
        if op.name in ("SHORT_BINUNICODE", "BINUNICODE", "UNICODE"):
            strings.append(arg)
        if op.name == "STACK_GLOBAL" and len(strings) >= 2 and strings[-2] == "__main__":
            return None, f"it refers to __main__.{strings[-1]}, defined in __main__"
    return data, None
