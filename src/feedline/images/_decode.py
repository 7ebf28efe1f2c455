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
        return pixels_rgb(im)

    return _with_pil(data, kind, where, pixels)


def pixels_rgb(im: Any) -> np.ndarray:
    """A Pillow image as ``H x W x 3`` uint8. Pillow's convert clips a gray deeper than 8
    bits at 255 instead of scaling it (a 16-bit PNG came out nearly white), so those
    modes are taken to 8 bits here: ``I;16`` and ``I`` (what older Pillows open a
    16-bit PNG as) hold 16-bit samples, each value's high byte (``I`` clipped to
    0 - 65535 first); ``F`` is on Pillow's 0 - 255 scale, rounded and clipped."""
    if im.mode == "F":
        gray = np.clip(np.rint(np.asarray(im)), 0, 255).astype(np.uint8)
    elif im.mode == "I" or im.mode.startswith("I;16"):
        a = np.asarray(im)
        if a.dtype.kind != "u":  # ``I`` (int32): below 0 or past 16 bits, clipped
            a = np.clip(a, 0, 65_535)
        gray = (a >> 8).astype(np.uint8)
    else:
        return np.asarray(im.convert("RGB"))
    return np.repeat(gray[:, :, None], 3, axis=2)
