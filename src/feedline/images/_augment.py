"""Crops, flips and resizes of one image, each drawn from the example's generator.

A crop is a box ``(x, y, width, height)`` in the image's own pixels, drawn before the
image is decoded (its width and height are stored beside the bytes), so a JPEG can be
decoded at the smallest DCT scale that still covers the box at the output size. The
draws are those of torchvision's ``RandomResizedCrop`` (ten tries of an area and an
aspect ratio, then the center crop), from ``rng``: the same box for an example on
every run, with any number of threads or workers.
"""

from __future__ import annotations

import importlib
import math
from typing import Any

import numpy as np


def random_resized_box(
    width: int,
    height: int,
    rng: np.random.Generator,
    scale: tuple[float, float] = (0.08, 1.0),
    ratio: tuple[float, float] = (3 / 4, 4 / 3),
) -> tuple[int, int, int, int]:
    """A box covering a random fraction ``scale`` of the area, of aspect ``ratio``."""
    area = width * height
    log_lo, log_hi = math.log(ratio[0]), math.log(ratio[1])
    for _ in range(10):
        target = area * rng.uniform(scale[0], scale[1])
        aspect = math.exp(rng.uniform(log_lo, log_hi))
        w = round(math.sqrt(target * aspect))
        h = round(math.sqrt(target / aspect))
        if 0 < w <= width and 0 < h <= height:
            x = int(rng.integers(0, width - w + 1))
            y = int(rng.integers(0, height - h + 1))
            return x, y, w, h
    # fall back to the center crop of the nearest allowed aspect
    in_ratio = width / height
    if in_ratio < ratio[0]:
        w, h = width, round(width / ratio[0])
    elif in_ratio > ratio[1]:
        w, h = round(height * ratio[1]), height
    else:
        w, h = width, height
    return (width - w) // 2, (height - h) // 2, w, h


def center_box(width: int, height: int, fraction: float = 0.875) -> tuple[int, int, int, int]:
    """The central square covering ``fraction`` of the shorter side (ImageNet's 224/256)."""
    side = max(1, round(min(width, height) * fraction))
    return (width - side) // 2, (height - side) // 2, side, side


def scaled_box(
    box: tuple[int, int, int, int], width: int, height: int, got: np.ndarray
) -> tuple[int, int, int, int]:
    """``box`` (in the image's own pixels) in an image decoded at a reduced scale."""
    sx, sy = got.shape[1] / width, got.shape[0] / height
    x, y, w, h = box
    x0, y0 = math.floor(x * sx), math.floor(y * sy)
    x1 = min(got.shape[1], max(x0 + 1, math.ceil((x + w) * sx)))
    y1 = min(got.shape[0], max(y0 + 1, math.ceil((y + h) * sy)))
    return x0, y0, x1 - x0, y1 - y0


def _cv2() -> Any:
    try:  # by name: an optional extra, typed as Any
        return importlib.import_module("cv2")
    except ImportError:
        return None


def resize(img: np.ndarray, width: int, height: int) -> np.ndarray:
    """``img`` (``H x W x 3`` uint8) resized to ``height x width``: OpenCV when installed,
    else Pillow."""
    if img.shape[1] == width and img.shape[0] == height:
        return img
    cv2 = _cv2()
    # area averaging where it shrinks by 2 or more (bilinear would alias), else bilinear
    shrink = img.shape[1] >= 2 * width and img.shape[0] >= 2 * height
    if cv2 is not None:
        method = cv2.INTER_AREA if shrink else cv2.INTER_LINEAR
        return cv2.resize(np.ascontiguousarray(img), (width, height), interpolation=method)
    from PIL import Image

    method = Image.Resampling.BOX if shrink else Image.Resampling.BILINEAR
    return np.asarray(Image.fromarray(img).resize((width, height), method))
