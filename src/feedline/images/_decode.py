"""Decoding encoded images (JPEG, PNG, WebP) into ``H x W x 3`` uint8 arrays.

JPEG goes through simplejpeg (libjpeg-turbo; it releases the GIL, so decoding runs in
threads) when it is installed, else Pillow; either decodes at a reduced DCT scale
(1/2, 1/4, 1/8) when the caller needs fewer pixels (``min_width`` / ``min_height``):
FFCV's and DALI's trick, several times faster on a crop that is resized down anyway.
PNG and WebP go through Pillow. What the bytes are is read from their signature, not
from a file name. An image that does not decode is a ``FormatError`` naming ``where``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..formats._imagehead import _fail, _simplejpeg, _with_pil, kind_of, size_of

__all__ = ["decode", "kind_of", "size_of"]


def decode(
    data: bytes, *, min_width: int = 0, min_height: int = 0, where: str = "<image>"
) -> np.ndarray:
    """The image as ``H x W x 3`` uint8 (RGB). A JPEG is decoded at the smallest DCT
    scale whose result is at least ``min_width`` x ``min_height`` (0: full size)."""
    kind = kind_of(data)
    if kind == "jpeg":
        sj = _simplejpeg()
        if sj is not None:
            try:
                return sj.decode_jpeg(
                    data, colorspace="RGB", min_width=min_width, min_height=min_height
                )
            except ValueError as e:
                raise _fail(data, where, e) from e

    def pixels(im: Any) -> np.ndarray:
        if kind == "jpeg" and (min_width or min_height):
            im.draft("RGB", (max(1, min_width), max(1, min_height)))
        return np.asarray(im.convert("RGB"))

    return _with_pil(data, kind, where, pixels)
