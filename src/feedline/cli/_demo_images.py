"""The demo's image part: real photos (scikit-learn's sample images) cut into an image
folder, stored as a ``.flr`` of their JPEG bytes, decoded and augmented in threads."""

from __future__ import annotations

import io
import os
import time
from collections import Counter
from typing import Any

import numpy as np

from .. import images, recfile
from ..loader import Loader
from ..sources import Dataset


def write_folder(root: str, n: int = 240) -> None:
    """``n`` JPEGs (quality 90, 500x375) cut from the two sample photos, one class each."""
    from PIL import Image
    from sklearn.datasets import load_sample_images

    photos = load_sample_images().images
    names = ("china", "flower")
    rng = np.random.default_rng(0)
    for name in names:
        os.makedirs(os.path.join(root, name), exist_ok=True)
    for i in range(n):
        src = photos[i % 2]
        h, w = int(rng.integers(300, 427)), int(rng.integers(400, 640))
        y, x = int(rng.integers(0, 428 - h)), int(rng.integers(0, 641 - w))
        im = Image.fromarray(src[y : y + h, x : x + w]).resize(
            (500, 375), Image.Resampling.BILINEAR
        )
        out = io.BytesIO()
        im.save(out, "JPEG", quality=90)
        with open(os.path.join(root, names[i % 2], f"{i:04d}.jpg"), "wb") as f:
            f.write(out.getvalue())


def pil_rate(folder: str, size: int = 224) -> float:
    """The same pipeline by hand with Pillow, one image at a time: images/s."""
    from PIL import Image

    files = [
        os.path.join(folder, c, n)
        for c in sorted(os.listdir(folder))
        for n in sorted(os.listdir(os.path.join(folder, c)))
    ]
    rng = np.random.default_rng(1)
    t = time.perf_counter()
    for path in files:
        with Image.open(path) as im:
            im = im.convert("RGB")
            x, y, w, h = images.random_resized_box(im.width, im.height, rng)
            im = im.resize((size, size), Image.Resampling.BILINEAR, box=(x, y, x + w, y + h))
            np.asarray(im.transpose(Image.Transpose.FLIP_LEFT_RIGHT)).transpose(2, 0, 1).copy()
    return len(files) / (time.perf_counter() - t)


def images_pass(out_dir: str, size: int = 224, batch: int = 64) -> dict[str, Any]:
    """Folder -> .flr -> decoded batches; the stream with 1 and 2 threads, and its rate."""
    folder = os.path.join(out_dir, "photos")
    if not os.path.isdir(folder):
        write_folder(folder)
    path = os.path.join(out_dir, "photos.flr")
    summary = images.from_folder(folder, path, progress=False)
    f = recfile.open(path)
    try:
        base = Dataset(f.record, f)
        streams, rate, first_batch = [], 0.0, 0.0
        for threads in (1, 2):
            loader = Loader(
                images.decoded(base, size, seed=7, threads=threads), batch, seed=1, workers=0
            )
            t = time.perf_counter()
            got: list[bytes] = []
            seen: Counter = Counter()
            for b in loader:
                if not got:
                    first_batch = time.perf_counter() - t
                got.append(b.image.tobytes())
                seen.update(b.meta.record_indices.tolist())
            rate = summary.images / (time.perf_counter() - t)
            streams.append(got)
            loader.close()
    finally:
        f.close()
    return {
        "summary": str(summary),
        "images": summary.images,
        "once": seen == Counter(range(summary.images)),
        "same_stream": streams[0] == streams[1],
        "images_per_s": rate,
        "first_batch_s": first_batch,
        "pil_images_per_s": pil_rate(folder, size),
        "shape": [batch, 3, size, size],
    }
