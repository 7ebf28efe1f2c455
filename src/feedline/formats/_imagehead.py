"""Encoded images' headers: what the bytes are (JPEG, PNG, WebP, from their signature),
their width and height without decoding them, and the one error for bytes that are not
an image. Below ``images`` (which decodes) so that a conversion can store each image's
size beside its bytes.

JPEG headers go through simplejpeg when it is installed, else Pillow (the ``vision``
extra); PNG and WebP through Pillow.
"""

from __future__ import annotations

import importlib
from typing import Any

from ..errors import FormatError

_JPEG = b"\xff\xd8\xff"
_PNG = b"\x89PNG\r\n\x1a\n"


def kind_of(data: bytes) -> str:
    """``"jpeg"``, ``"png"``, ``"webp"`` or ``""`` from the bytes' signature."""
    head = bytes(data[:16])
    if head.startswith(_JPEG):
        return "jpeg"
    if head.startswith(_PNG):
        return "png"
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "webp"
    return ""


def _simplejpeg() -> Any:
    try:  # by name: an optional extra, typed as Any
        return importlib.import_module("simplejpeg")
    except ImportError:
        return None


def _pil() -> Any:
    try:
        from PIL import Image
    except ImportError as e:
        raise ImportError(
            "decoding images needs Pillow (and simplejpeg for fast JPEG): "
            "pip install 'feedline[vision]'"
        ) from e
    return Image


def _fail(data: bytes, where: str, e: BaseException | None = None) -> FormatError:
    kind = kind_of(data)
    found = (
        f"a {kind.upper()} that does not decode ({e})"
        if kind
        else (f"{len(data)} bytes starting {bytes(data[:8]).hex(' ')}" if data else "no bytes")
    )
    return FormatError(f"expected a JPEG, PNG or WebP image, found {found}", where, 0)


def size_of(data: bytes, where: str = "<image>") -> tuple[int, int]:
    """``(width, height)`` from the image's header, without decoding it."""
    kind = kind_of(data)
    if kind == "jpeg":
        sj = _simplejpeg()
        if sj is not None:
            try:
                h, w, _, _ = sj.decode_jpeg_header(data)
                return int(w), int(h)
            except ValueError as e:
                raise _fail(data, where, e) from e
    return _with_pil(data, kind, where, lambda im: (int(im.width), int(im.height)))


def _with_pil(data: bytes, kind: str, where: str, read: Any) -> Any:
    """``read(image)`` of the bytes opened by Pillow; a ``FormatError`` if they are not
    an image (an unknown signature, or one Pillow cannot open or decode)."""
    if not kind:
        raise _fail(data, where)
    import io

    Image = _pil()
    try:
        with Image.open(io.BytesIO(data)) as im:
            return read(im)
    except Exception as e:  # Pillow raises several kinds: all mean "not an image"
        raise _fail(data, where, e) from e
