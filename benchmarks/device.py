"""The GPU benchmark (issue 20, part 6): one command, under five minutes, for a session
that has the device tool's GPU.

    python benchmarks/device.py                 # on cuda:0
    python benchmarks/device.py --device cpu --quick   # a smoke run anywhere

Each feedline figure is printed beside a baseline run in the same process on the same
data and the same shuffled order:

1. **The device-kept dataset** (``Loader(..., output="torch", device=dev)`` over arrays
   in memory: the columns copied to the device once, each batch one ``index_select``
   per field there) against ``torch.index_select`` on the same device tensors with the
   order's record indices, precomputed, as a hand-written loop would do it.
2. **Host-to-device batches** from a memory-mapped ``.flr`` file (gathered on the host,
   copied through pinned memory, non-blocking) against a hand-written loop: ``np.take``
   from the memory map into a pinned tensor, then ``.to(dev, non_blocking=True)``.
3. **Images** (uint8 ``B x 3 x 224 x 224``), host-to-device and normalised on the device
   by ``fl.images.Normalize`` against the same copy and normalisation by hand.

Rows per second include a ``torch.cuda.synchronize()`` at the end of each pass, so the
copies are counted when they have landed. The first pass of the fresh process is
reported apart from the steady state (median of ``--repeat`` passes).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

import feedline as fl


def sync(torch: Any, dev: Any) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def passes(run: Callable[[], int], repeat: int, torch: Any, dev: Any) -> tuple[float, float]:
    """(first pass, median of ``repeat`` more) in rows/s; ``run`` returns the rows."""
    rates = []
    for _ in range(repeat + 1):
        t = time.perf_counter()
        rows = run()
        sync(torch, dev)
        rates.append(rows / (time.perf_counter() - t))
    return rates[0], statistics.median(rates[1:])


def order_records(n: int, batch: int, seed: int) -> list[np.ndarray]:
    """The loader's shuffled order as record indices per batch (its first pass)."""
    ds = fl.Dataset.from_arrays(i=np.arange(n))
    return [b.i.copy() for b in fl.Loader(ds, batch, seed=seed, workers=0)]


_TIMED: set[int] = set()  # the loaders whose first batch was timed


def first_batch(loader: Any, torch: Any, dev: Any) -> Iterator[Any]:
    """``loader``'s batches; the time to its first one (synced) printed once: in the
    first pass it holds the columns' copy to the device, or the first gather."""
    t = time.perf_counter()
    for i, b in enumerate(loader):
        if i == 0 and id(loader) not in _TIMED:
            sync(torch, dev)
            _TIMED.add(id(loader))
            print(f"  first batch of the first pass: {(time.perf_counter() - t) * 1e3:.1f} ms")
        yield b


def report(name: str, ours: tuple[float, float], base: tuple[float, float], unit: str) -> None:
    scale, prefix = (1e6, "M") if base[1] >= 1e6 else (1e3, "k")
    print(
        f"{name:<40} first pass {ours[0] / scale:8.2f} {prefix} {unit}/s "
        f"({ours[0] / base[0]:4.2f}x), steady {ours[1] / scale:8.2f} {prefix} {unit}/s "
        f"({ours[1] / base[1]:4.2f}x); baseline {base[0] / scale:.2f} / "
        f"{base[1] / scale:.2f} {prefix}",
        flush=True,
    )


def device_kept(torch: Any, dev: Any, n: int, batch: int, repeat: int) -> None:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, 64), dtype=np.float32)
    y = rng.integers(0, 1000, n)
    ds = fl.Dataset.from_arrays(x=x, y=y)
    loader = fl.Loader(ds, batch, seed=1, output="torch", device=dev, workers=0)

    def ours() -> int:
        rows = 0
        for b in first_batch(loader, torch, dev):
            rows += b.meta.size
        return rows

    order = [torch.from_numpy(r).to(dev) for r in order_records(n, batch, 1)]
    tx, ty = torch.from_numpy(x).to(dev), torch.from_numpy(y).to(dev)

    def base() -> int:
        rows = 0
        for idx in order:
            bx, _ = torch.index_select(tx, 0, idx), torch.index_select(ty, 0, idx)
            rows += bx.shape[0]
        return rows

    report(
        "device-kept dataset (264-byte rows)",
        passes(ours, repeat, torch, dev),
        passes(base, repeat, torch, dev),
        "rows",
    )


def flr_file(path: str, n: int, shape: tuple[int, ...], dtype: str) -> None:
    rng = np.random.default_rng(2)

    class Row(fl.Record):
        x = fl.field(shape, dtype)
        y = fl.field((), "int64")

    def items() -> Iterator[dict[str, np.ndarray]]:
        step = 8192
        for lo in range(0, n, step):
            k = min(step, n - lo)
            if dtype == "uint8":
                xs = rng.integers(0, 256, (k, *shape), dtype=np.uint8)
            else:
                xs = rng.standard_normal((k, *shape), dtype=np.float32)
            yield {"x": xs, "y": np.arange(lo, lo + k)}

    fl.recfile.write_chunks(path, Row, items(), check_values=False)


def host_to_device(
    torch: Any,
    dev: Any,
    path: str,
    n: int,
    batch: int,
    repeat: int,
    label: str,
    normalize: bool = False,
) -> None:
    f = fl.recfile.open(path)
    ds = fl.Dataset(f.record, f)
    norm = fl.images.Normalize(field="x") if normalize else None
    loader = fl.Loader(
        ds, batch, seed=3, output="torch", device=dev, workers=0, batch_transform=norm
    )

    def ours() -> int:
        rows = 0
        for b in first_batch(loader, torch, dev):
            rows += int(b["y"].shape[0])
        return rows

    cols = f.columns
    mx, my = cols["x"], cols["y"]
    order = order_records(n, batch, 3)
    pin = dev.type == "cuda"
    dtype = torch.uint8 if mx.dtype == np.uint8 else torch.float32
    hx = torch.empty((batch, *mx.shape[1:]), dtype=dtype, pin_memory=pin)
    hy = torch.empty((batch,), dtype=torch.int64, pin_memory=pin)
    mean = torch.tensor(fl.images.IMAGENET_MEAN, device=dev).view(1, 3, 1, 1)
    std = torch.tensor(fl.images.IMAGENET_STD, device=dev).view(1, 3, 1, 1)

    def base() -> int:
        rows = 0
        for idx in order:
            k = len(idx)
            np.take(mx, idx, axis=0, out=hx.numpy()[:k])
            np.take(my, idx, axis=0, out=hy.numpy()[:k])
            gx = hx[:k].to(dev, non_blocking=True)
            gy = hy[:k].to(dev, non_blocking=True)
            if normalize:
                gx = (gx.float() / 255 - mean) / std
            sync(torch, dev)  # the pinned buffer is reused: the copy must land first
            rows += int(gy.shape[0])
        return rows

    report(label, passes(ours, repeat, torch, dev), passes(base, repeat, torch, dev), "rows")
    f.close()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", default="cuda")
    p.add_argument("--quick", action="store_true", help="small sizes: a smoke run")
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args()
    import torch

    dev = torch.device(args.device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        sys.exit("no CUDA device here: run with --device cpu for a smoke run")
    n = 20_000 if args.quick else 4_000_000
    n_img = 256 if args.quick else 20_000
    repeat = 1 if args.quick else args.repeat
    name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu"
    print(f"device {name}; torch {torch.__version__}; feedline {fl.__version__}", flush=True)

    def section(title: str, run: Callable[[], None]) -> None:
        """One measurement; an error in it is printed and the next one still runs."""
        t = time.perf_counter()
        try:
            run()
        except Exception:
            print(f"{title} failed:", flush=True)
            traceback.print_exc()
        print(f"  ({title}: {time.perf_counter() - t:.1f} s)", flush=True)

    section("device-kept", lambda: device_kept(torch, dev, n, 512, repeat))
    with tempfile.TemporaryDirectory() as tmp:
        rows = os.path.join(tmp, "rows.flr")

        def flr_rows() -> None:
            flr_file(rows, n, (64,), "float32")
            label = "host-to-device, .flr (264-byte rows)"
            host_to_device(torch, dev, rows, n, 512, repeat, label)
            os.remove(rows)

        section("host-to-device rows", flr_rows)
        images = os.path.join(tmp, "images.flr")

        def flr_images() -> None:
            flr_file(images, n_img, (3, 224, 224), "uint8")
            label = "host-to-device images + Normalize"
            host_to_device(torch, dev, images, n_img, 64, repeat, label, normalize=True)

        section("images", flr_images)


if __name__ == "__main__":
    main()
