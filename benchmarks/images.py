"""Images from a folder to training batches (issue 17), beside torch's DataLoader.

The same files in the same run: ``--n`` JPEGs of 500x375 at quality 90 (crops of
scikit-learn's sample photos), in an ImageFolder layout of 2 classes and in a ``.flr``
(``fl.images.from_folder``: the bytes as they are). Each system reads one shuffled
epoch, random-resized-crop 224 + flip, batches of 64 uint8 ``3 x 224 x 224``:

- torch ``DataLoader`` over a map-style dataset that opens each file with Pillow,
  crops (the same RandomResizedCrop rule), resizes (bilinear), flips and makes a uint8
  CHW tensor (torchvision's ImageFolder pipeline, written without torchvision), with 0
  and 2 worker processes;
- feedline: ``fl.images.decoded(fl.Dataset(f.record, f), 224, threads=t)`` in a
  ``fl.Loader`` in the calling process.

Each figure is the median of ``--repeat`` epochs after an untimed one; the first batch
and the first epoch of each system are timed too, and feedline's resident memory is
read after each of ``--epochs`` epochs (flat memory: the last minus the second).

    python benchmarks/images.py [--n 512] [--repeat 3] [--epochs 20]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

import numpy as np

import feedline as fl
from feedline.cli._demo_images import write_folder

SIZE, BATCH = 224, 64


class PilFolder:
    """torchvision's ImageFolder + RandomResizedCrop + flip + PILToTensor, by hand."""

    def __init__(self, root: str) -> None:
        self.files = []
        for label, c in enumerate(sorted(os.listdir(root))):
            for name in sorted(os.listdir(os.path.join(root, c))):
                self.files.append((os.path.join(root, c, name), label))

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, i: int):
        import torch
        from PIL import Image

        path, label = self.files[i]
        rng = np.random.default_rng()
        with Image.open(path) as im:
            im = im.convert("RGB")
            x, y, w, h = fl.images.random_resized_box(im.width, im.height, rng)
            im = im.resize((SIZE, SIZE), Image.Resampling.BILINEAR, box=(x, y, x + w, y + h))
            if rng.random() < 0.5:
                im = im.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
            pixels = torch.from_numpy(np.asarray(im).transpose(2, 0, 1).copy())
        return pixels, label


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def epochs(make_iter, repeat: int) -> dict[str, float]:
    """First batch, first epoch and the median of ``repeat`` more, in images/s."""
    t = time.perf_counter()
    it = make_iter()
    n = len(next(it))
    first_batch = time.perf_counter() - t
    for b in it:
        n += len(b)
    first = n / (time.perf_counter() - t)
    rates = []
    for _ in range(repeat):
        t = time.perf_counter()
        n = sum(len(b) for b in make_iter())
        rates.append(n / (time.perf_counter() - t))
    return {"first_batch_s": first_batch, "first": first, "rate": statistics.median(rates)}


def torch_batches(ds, workers: int):
    import torch

    loader = torch.utils.data.DataLoader(ds, batch_size=BATCH, shuffle=True, num_workers=workers)

    def make():
        return (b[0] for b in loader)

    return make


def feedline_batches(loader):
    def make():
        return (b.image for b in loader)

    return make


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--n", type=int, default=512)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--epochs", type=int, default=20)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = os.path.join(tmp, "photos")
        write_folder(folder, args.n)  # the demo's photos: the same files
        summary = fl.images.from_folder(folder, os.path.join(tmp, "photos.flr"), progress=False)
        print(
            f"{summary}; JPEG 500x375 q90; shuffled epochs, random-resized-crop {SIZE} + "
            f"flip, batches of {BATCH}; median of {args.repeat} epochs after one"
        )
        results = {}
        for workers in (0, 2):
            results[f"torch DataLoader + PIL, {workers} workers"] = epochs(
                torch_batches(PilFolder(folder), workers), args.repeat
            )
        with fl.recfile.open(summary.path) as f:
            base = fl.Dataset(f.record, f)
            for threads in (1, 2):
                ds = fl.images.decoded(base, SIZE, seed=1, threads=threads)
                loader = fl.Loader(ds, BATCH, seed=1, workers=0)
                results[f"feedline, {threads} decode thread{'s' * (threads > 1)}"] = epochs(
                    feedline_batches(loader), args.repeat
                )
            memory = []
            for _ in range(args.epochs):
                for _b in loader:
                    pass
                memory.append(rss_mb())
        pil0 = results["torch DataLoader + PIL, 0 workers"]["rate"]
        pil2 = results["torch DataLoader + PIL, 2 workers"]["rate"]
        for name, r in results.items():
            print(
                f"  {name:<36} {r['rate']:7.0f} img/s  {r['rate'] / pil0:5.2f}x PIL-0  "
                f"{r['rate'] / pil2:5.2f}x PIL-2   first batch {r['first_batch_s'] * 1e3:6.0f} ms,"
                f" first epoch {r['first']:5.0f} img/s"
            )
        print(
            f"  feedline's RSS after each of {args.epochs} more epochs (MB): "
            + ", ".join(f"{m:.0f}" for m in memory)
            + f" (last - second: {memory[-1] - memory[1]:+.1f} MB)"
        )


if __name__ == "__main__":
    main()
