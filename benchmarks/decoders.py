"""Image decoders for issue 17, measured on the same files in the same run: Pillow,
simplejpeg, PyTurboJPEG and OpenCV, against a torch DataLoader over a PIL
ImageFolder-style dataset (the issue's baseline).

    python benchmarks/decoders.py [--images 200] [--rounds 5] [--threads 2]

The JPEGs (quality 90, 500x375) are crops of scikit-learn's two sample photos
(china.jpg, flower.jpg), held as bytes in memory; a tenth as many PNGs and WebPs.
Sections, in images/s of wall-clock time (the best of ``--rounds`` rounds, each in a new
order) and per second of the process's CPU time (which a shared machine disturbs less):

  (a) full decode to [H W 3] uint8, in one thread and in a pool of ``--threads`` (2t/1t
      is the speed-up; cpu/wall how many cores the pool really had);
  (b) JPEG decoded at a reduced DCT scale (1/2, 1/4);
  (c) decode + random-resized-crop 224 + flip (the crop drawn once per file, the same
      for every library), the resize by Pillow (antialiased, as torchvision's PIL path) or
      cv2 (INTER_LINEAR, or INTER_AREA); decoding at full scale, or at the largest
      power-of-two DCT scale that keeps the crop at >= 224 px (the line "crops decoded at
      a reduced scale" says how often that happens: never for 500x375 files);
  (d) PNG and WebP;
  (e) the DataLoader baseline: open + convert RGB + the same crop written with PIL +
      flip + uint8 CHW tensor, batches of 64, shuffled, 0 and 2 workers, and 0 workers
      with one torch thread (its collate's stack is slow with a pool on busy cores).

Each figure's ratio is to Pillow's in one thread for the same task (its full decode for
(b), its crop for (e)); the crop pipelines also show their ratio to the 0-worker
DataLoader. Then a GIL probe that does not need a free core (``gil_probe``) and the check
that every decoder's output equals Pillow's. PyTurboJPEG needs libturbojpeg from the
system (3.x for PyTurboJPEG 2); it is skipped when that is missing.
"""

from __future__ import annotations

import argparse
import io
import json
import math
import os
import random
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from PIL import Image, features

SIZE = (500, 375)  # width, height of the stored JPEGs
OUT = 224  # the crop's output side
SCALES = (8, 4, 2)  # DCT scales 1/s that every library offers

Crop = tuple[int, int, int, int, bool]  # x, y, width, height, flip
Array = np.ndarray


# --- the files -----------------------------------------------------------------------


def make_images(n: int, seed: int) -> dict[str, list[bytes]]:
    """``n`` JPEGs and n/10 PNGs and WebPs: random 4:3 crops (40-100% of the width) of the
    two sample photos, resized to 500x375, half of them mirrored."""
    from sklearn.datasets import load_sample_images

    photos = [Image.fromarray(a) for a in load_sample_images().images]
    rng = np.random.default_rng(seed)
    out: dict[str, list[bytes]] = {"jpeg": [], "png": [], "webp": []}
    n_other = max(4, n // 10)
    for i in range(n + 2 * n_other):
        src = photos[i % len(photos)]
        w = rng.uniform(0.4, 1.0) * src.width
        h = min(w * SIZE[1] / SIZE[0], src.height)
        w = h * SIZE[0] / SIZE[1]
        x, y = rng.uniform(0, src.width - w), rng.uniform(0, src.height - h)
        im = src.resize(SIZE, Image.Resampling.BICUBIC, box=(x, y, x + w, y + h))
        if rng.random() < 0.5:
            im = im.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
        fmt = "jpeg" if i < n else ("png" if i < n + n_other else "webp")
        buf = io.BytesIO()
        im.save(buf, fmt.upper(), quality=90)
        out[fmt].append(buf.getvalue())
    return out


def rrc_params(rand: Callable[[], float], w: int, h: int) -> tuple[int, int, int, int]:
    """torchvision's RandomResizedCrop.get_params (scale 0.08-1, ratio 3/4-4/3, ten tries,
    then a centre crop), drawing from ``rand()`` in [0, 1)."""
    area, lo, hi = w * h, math.log(3 / 4), math.log(4 / 3)
    for _ in range(10):
        target = area * (0.08 + 0.92 * rand())
        ratio = math.exp(lo + (hi - lo) * rand())
        cw, ch = round(math.sqrt(target * ratio)), round(math.sqrt(target / ratio))
        if 0 < cw <= w and 0 < ch <= h:
            return int(rand() * (w - cw + 1)), int(rand() * (h - ch + 1)), cw, ch
    cw, ch = (w, min(h, round(w * 4 / 3))) if w / h < 3 / 4 else (min(w, round(h * 4 / 3)), h)
    return (w - cw) // 2, (h - ch) // 2, cw, ch


def dct_scale(cw: int, ch: int) -> int:
    """The largest reduction 1/s whose decoded crop is still >= OUT px on both sides."""
    return next((s for s in SCALES if min(cw, ch) // s >= OUT), 1)


# --- the decoders: bytes -> [H W 3] uint8, and at 1/s ----------------------------------


def pil_full(buf: bytes) -> Array:
    with Image.open(io.BytesIO(buf)) as im:
        return np.asarray(im if im.mode == "RGB" else im.convert("RGB"))


def pil_scaled(buf: bytes, s: int) -> Array:
    with Image.open(io.BytesIO(buf)) as im:
        im.draft("RGB", (im.width // s, im.height // s))
        return np.asarray(im)


def load_decoders() -> tuple[dict[str, Callable[[bytes], Array]], dict, dict[str, str]]:
    """name -> full decode, name -> scaled decode, name -> version (or why it is absent)."""
    full: dict[str, Callable[[bytes], Array]] = {"pillow": pil_full}
    scaled: dict[str, Callable[[bytes, int], Array]] = {"pillow": pil_scaled}
    info = {"pillow": f"{Image.__version__} (libjpeg-turbo {features.version('libjpeg_turbo')})"}
    try:
        import simplejpeg

        def sj_scaled(buf: bytes, s: int) -> Array:
            w, h = simplejpeg.decode_jpeg_header(buf)[:2][::-1]
            return simplejpeg.decode_jpeg(buf, min_width=-(-w // s), min_height=-(-h // s))

        full["simplejpeg"] = lambda buf: simplejpeg.decode_jpeg(buf, "RGB")
        scaled["simplejpeg"] = sj_scaled
        info["simplejpeg"] = simplejpeg.__version__ + " (bundles libjpeg-turbo)"
    except ImportError as e:
        info["simplejpeg"] = f"absent: {e}"
    try:
        import turbojpeg

        tj = turbojpeg.TurboJPEG()  # loads libturbojpeg.so from the system
        rgb = turbojpeg.TJPF_RGB
        full["turbojpeg"] = lambda buf: tj.decode(buf, pixel_format=rgb)
        scaled["turbojpeg"] = lambda buf, s: tj.decode(buf, pixel_format=rgb, scaling_factor=(1, s))
        info["turbojpeg"] = getattr(turbojpeg, "__version__", "?") + " (system libturbojpeg)"
    except (ImportError, RuntimeError, OSError) as e:
        info["turbojpeg"] = f"absent: {str(e).splitlines()[0]}"
    try:
        import cv2

        cv2.setNumThreads(1)  # one thread means one: no pool inside cv2.resize
        flags = {s: getattr(cv2, f"IMREAD_REDUCED_COLOR_{s}") & ~cv2.IMREAD_COLOR for s in SCALES}

        def cv_full(buf: bytes) -> Array:
            return cv2.imdecode(np.frombuffer(buf, np.uint8), cv2.IMREAD_COLOR_RGB)

        def cv_scaled(buf: bytes, s: int) -> Array:
            flag = flags[s] | cv2.IMREAD_COLOR_RGB
            return cv2.imdecode(np.frombuffer(buf, np.uint8), flag)

        full["opencv"], scaled["opencv"] = cv_full, cv_scaled
        info["opencv"] = cv2.__version__
    except ImportError as e:
        info["opencv"] = f"absent: {e}"
    return full, scaled, info


# --- decode + random-resized-crop 224 + flip -------------------------------------------


def pil_rrc(buf: bytes, crop: Crop, reduced: bool) -> Array:
    x, y, cw, ch, flip = crop
    with Image.open(io.BytesIO(buf)) as im:
        s = dct_scale(cw, ch) if reduced else 1
        if s > 1:
            im.draft("RGB", (im.width // s, im.height // s))
        box = (x / s, y / s, (x + cw) / s, (y + ch) / s)
        out = im.resize((OUT, OUT), Image.Resampling.BILINEAR, box=box)
    if flip:
        out = out.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
    return np.asarray(out)


def array_rrc(full: Callable, scaled: Callable, resize: str) -> Callable:
    """A crop pipeline for a decoder that returns arrays, resizing with Pillow (bilinear,
    antialiased like torchvision's), cv2 INTER_LINEAR (not antialiased) or INTER_AREA."""
    if resize != "pil":
        import cv2

        how = cv2.INTER_AREA if resize == "cv2-area" else cv2.INTER_LINEAR

    def run(buf: bytes, crop: Crop, reduced: bool) -> Array:
        x, y, cw, ch, flip = crop
        s = dct_scale(cw, ch) if reduced else 1
        a = scaled(buf, s) if s > 1 else full(buf)
        if resize != "pil":
            a = a[y // s : (y + ch) // s, x // s : (x + cw) // s]
            out = cv2.resize(a, (OUT, OUT), interpolation=how)
            return cv2.flip(out, 1) if flip else out
        box = (x / s, y / s, (x + cw) / s, (y + ch) / s)
        im = Image.fromarray(a).resize((OUT, OUT), Image.Resampling.BILINEAR, box=box)
        if flip:
            im = im.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
        return np.asarray(im)

    return run


# --- the DataLoader baseline -----------------------------------------------------------


class PilFolder:
    """An ImageFolder-style map dataset as a torchvision user writes it, without
    torchvision: open, convert("RGB"), RandomResizedCrop(224), flip, PILToTensor."""

    def __init__(self, root: str) -> None:
        self.samples = [
            (os.path.join(root, c, f), i)
            for i, c in enumerate(sorted(os.listdir(root)))
            for f in sorted(os.listdir(os.path.join(root, c)))
        ]

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, i: int):
        import torch

        path, label = self.samples[i]
        with open(path, "rb") as f:
            img = Image.open(f).convert("RGB")
        x, y, cw, ch = rrc_params(random.random, *img.size)  # workers reseed `random`
        img = img.crop((x, y, x + cw, y + ch)).resize((OUT, OUT), Image.Resampling.BILINEAR)
        if random.random() < 0.5:
            img = img.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
        return torch.from_numpy(np.array(img, copy=True)).permute(2, 0, 1), label


def dataloader_rate(jpegs: list[bytes], workers: int, epochs: int) -> tuple[float, float]:
    """Images/s of wall-clock time and per CPU-second of the calling process (the workers'
    CPU time is not counted, so the second is NaN when there are workers)."""
    import torch

    with tempfile.TemporaryDirectory() as root:
        for i, buf in enumerate(jpegs):
            os.makedirs(os.path.join(root, f"class{i % 2}"), exist_ok=True)
            with open(os.path.join(root, f"class{i % 2}", f"{i:05d}.jpg"), "wb") as f:
                f.write(buf)
        loader = torch.utils.data.DataLoader(
            PilFolder(root),
            batch_size=64,
            shuffle=True,
            num_workers=workers,
            persistent_workers=workers > 0,
        )
        for _ in loader:  # warm-up epoch: the workers start
            pass
        n, t, c = 0, time.perf_counter(), time.process_time()
        for _ in range(epochs):
            n += sum(len(labels) for _, labels in loader)
        wall, cpu = n / (time.perf_counter() - t), n / (time.process_time() - c)
        return wall, cpu if workers == 0 else math.nan


# --- measuring -------------------------------------------------------------------------


def rate(fn: Callable, items: list[tuple], pool: ThreadPoolExecutor | None) -> tuple[float, float]:
    """Images per second of wall-clock time and per second of this process's CPU time (the
    second barely moves when other programs share the cores)."""
    t, c = time.perf_counter(), time.process_time()
    if pool is None:
        for item in items:
            fn(*item)
    else:
        for _ in pool.map(lambda item: fn(*item), items):
            pass
    return len(items) / (time.perf_counter() - t), len(items) / (time.process_time() - c)


def gil_probe(work: Callable[[int], object], calls: int = 30) -> tuple[int, float]:
    """Whether ``work(i)`` lets other Python threads run while it works, whatever the load
    on the machine: a second thread notes the time in a loop (sleeping 0.1 ms a turn, so it
    never keeps the GIL from us), and with forced GIL switches put off for a second, a note
    can fall inside a call only if the call released the GIL. Returns in how many of
    ``calls`` calls that happened, and the notes per second inside calls over the rate
    inside ``time.sleep`` calls (about the share of the call spent without the GIL, an
    underestimate when the cores are busy)."""
    notes: list[float] = []
    stop = threading.Event()

    def note() -> None:
        while not stop.is_set():
            notes.append(time.perf_counter())
            time.sleep(1e-4)

    def spans(fn: Callable[[int], object]) -> list[tuple[float, float]]:
        out = []
        for i in range(calls):
            t = time.perf_counter()
            fn(i)
            out.append((t, time.perf_counter()))
        return out

    switch = sys.getswitchinterval()
    sys.setswitchinterval(1.0)
    thread = threading.Thread(target=note, daemon=True)
    thread.start()
    try:
        asleep, busy = spans(lambda i: time.sleep(0.002)), spans(work)
    finally:
        stop.set()
        thread.join()
        sys.setswitchinterval(switch)
    t = np.asarray(notes)

    def inside(ss: list[tuple[float, float]]) -> tuple[int, float]:
        hits = [int(((t > a) & (t < b)).sum()) for a, b in ss]
        return sum(h > 0 for h in hits), sum(hits) / sum(b - a for a, b in ss)

    ran, rate = inside(busy)
    return ran, rate / max(inside(asleep)[1], 1e-9)


def diff(a: Array, b: Array) -> tuple[int, float]:
    """Max and mean absolute difference (shapes must agree)."""
    if a.shape != b.shape:
        raise ValueError(f"shapes differ: {a.shape} vs {b.shape}")
    d = np.abs(a.astype(np.int16) - b.astype(np.int16))
    return int(d.max()), float(d.mean())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=3, help="timed DataLoader epochs")
    args = parser.parse_args()
    t_start = time.perf_counter()
    files = make_images(args.images, seed=17)
    jpegs = files["jpeg"]
    rng = np.random.default_rng(1)
    crops: list[Crop] = [(*rrc_params(rng.random, *SIZE), bool(rng.random() < 0.5)) for _ in jpegs]
    full, scaled, info = load_decoders()
    print(
        f"{len(jpegs)} JPEGs {SIZE[0]}x{SIZE[1]} q90, mean {np.mean([len(b) for b in jpegs]):,.0f}"
        f" B; {len(files['png'])} PNG, {len(files['webp'])} WebP; load {os.getloadavg()[0]:.1f}"
    )
    for name, version in info.items():
        print(f"  {name:10s} {version}")
    fired = np.bincount([dct_scale(c[2], c[3]) for c in crops], minlength=9)
    print("crops decoded at a reduced scale: " + ", ".join(f"1/{s}: {fired[s]}" for s in SCALES))

    # (section, task, library) -> (fn, items, threads)
    cases: dict[tuple[str, str, str], tuple[Callable, list[tuple], int]] = {}
    threads = (1, args.threads)
    for name, fn in full.items():
        for n in threads:
            cases["a", "full decode", f"{name} {n}t"] = (fn, [(b,) for b in jpegs], n)
    for s in (2, 4):
        for name, fn in scaled.items():
            cases["b", f"decode at 1/{s}", f"{name} 1t"] = (fn, [(b, s) for b in jpegs], 1)
    pipelines: dict[str, Callable] = {"pillow": pil_rrc}
    for name in ("simplejpeg", "turbojpeg", "opencv"):
        if name in full and "opencv" in full:
            pipelines[f"{name}+cv2"] = array_rrc(full[name], scaled[name], "cv2")
    if "simplejpeg" in full:
        if "opencv" in full:
            pipelines["simplejpeg+cv2 area"] = array_rrc(
                full["simplejpeg"], scaled["simplejpeg"], "cv2-area"
            )
        pipelines["simplejpeg+PIL"] = array_rrc(full["simplejpeg"], scaled["simplejpeg"], "pil")
    for reduced in (False, True):
        task = "rrc224+flip" + (", reduced DCT" if reduced else "")
        for name, fn in pipelines.items():
            for n in threads:
                items = [(b, c, reduced) for b, c in zip(jpegs, crops)]
                cases["c", task, f"{name} {n}t"] = (fn, items, n)
    for fmt in ("png", "webp"):
        for name in ("pillow", "opencv"):
            for n in threads:
                if name in full:
                    cases["d", f"{fmt} decode", f"{name} {n}t"] = (
                        full[name],
                        [(b,) for b in files[fmt]],
                        n,
                    )

    rates: dict[tuple[str, str, str], list[tuple[float, float]]] = {k: [] for k in cases}
    with ThreadPoolExecutor(args.threads) as pool:
        list(pool.map(pil_full, jpegs[: args.threads]))
        for r in range(args.rounds):  # in a new order each round: a busy spell hits few twice
            for key in random.Random(r).sample(list(cases), len(cases)):
                fn, items, n = cases[key]
                fn(*items[0])  # warm
                rates[key].append(rate(fn, items, pool if n > 1 else None))
    # the best round's wall-clock rate with that round's CPU rate, and the best CPU rate
    best = {k: (*max(v), max(c for _, c in v)) for k, v in rates.items()}
    dl = "DataLoader PIL rrc224+flip"
    import torch

    threads_before = torch.get_num_threads()
    for w, nt, lib in (
        (0, 0, "torch 0 workers"),
        (2, 0, "torch 2 workers"),
        (0, 1, "torch 0w, 1 torch thread"),
    ):
        torch.set_num_threads(nt or threads_before)  # 1: the collate's stack without a pool
        wall, cpu = dataloader_rate(jpegs, w, args.epochs)
        best["e", dl, lib] = (wall, cpu, cpu)
    torch.set_num_threads(threads_before)

    ref_of = {"b": ("a", "full decode"), "e": ("c", "rrc224+flip")}
    dl0 = best["e", dl, "torch 0 workers"][0]
    print(
        f"\n{'':2s} {'task':27s} {'library':25s} {'img/s':>6s} {'xPIL1t':>6s} {'2t/1t':>5s} "
        f"{'xDL0w':>5s} | {'img/cpu-s':>9s} {'xPIL1t':>6s} {'cpu/wall':>8s}"
    )
    for (sec, task, lib), (wall, cpu_of_best, cpu) in best.items():
        base = best[(*ref_of.get(sec, (sec, task)), "pillow 1t")]
        two = lib.endswith(f" {args.threads}t")
        one = best.get((sec, task, lib.replace(f" {args.threads}t", " 1t")))
        gil = f"{wall / one[0]:5.2f}" if two and one else ""
        vs_dl = f"{wall / dl0:5.2f}" if sec in "ce" else ""
        par = f"{wall / cpu_of_best:8.2f}" if two else ""
        print(
            f"{sec:2s} {task:27s} {lib:25s} {wall:6.0f} {wall / base[0]:6.2f} {gil:>5s} "
            f"{vs_dl:>5s} | {cpu:9.0f} {cpu / base[2]:6.2f} {par:>8s}"
        )

    print("\nGIL probe: calls during which another Python thread ran; share of the call")
    blob = json.dumps(list(range(100_000)))
    probes: dict[str, Callable[[int], object]] = {
        "json.loads (holds the GIL)": lambda i: json.loads(blob),
        "time.sleep (releases it)": lambda i: time.sleep(0.002),
    }
    for name, fn in full.items():
        probes[f"{name} full decode"] = lambda i, fn=fn: fn(jpegs[i % len(jpegs)])
    for name, fn in pipelines.items():
        probes[f"{name} rrc224"] = lambda i, fn=fn: fn(
            jpegs[i % len(jpegs)], crops[i % len(crops)], False
        )
    for name, work in probes.items():
        ran, share = gil_probe(work)
        print(f"  {name:30s} {ran:3d}/30  {share:5.2f}")

    print("\ncorrectness against Pillow (max abs difference over all files, mean; identical files)")

    def decode(name: str, buf: bytes, s: int) -> Array:
        return full[name](buf) if s == 1 else scaled[name](buf, s)

    checks = [("jpeg", s, jpegs) for s in (1, 2, 4)] + [(f, 1, files[f]) for f in ("png", "webp")]
    for fmt, s, bufs in checks:
        for name in full:
            if name == "pillow" or (fmt != "jpeg" and name != "opencv"):
                continue
            ds = [diff(decode(name, b, s), decode("pillow", b, s)) for b in bufs]
            same = sum(m == 0 for m, _ in ds)
            print(
                f"  {fmt:4s} 1/{s} {name:10s} max {max(m for m, _ in ds):3d}  mean "
                f"{np.mean([d for _, d in ds]):.4f}  identical {same}/{len(bufs)}"
            )
    for name, fn in pipelines.items():
        if name != "pillow":
            ds = [diff(fn(b, c, False), pil_rrc(b, c, False)) for b, c in zip(jpegs, crops)]
            print(
                f"  rrc224 {name:16s} max {max(m for m, _ in ds):3d}  mean "
                f"{np.mean([d for _, d in ds]):.3f} (resize differs, not the decode)"
            )
    print(f"\n{time.perf_counter() - t_start:.0f} s; load {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
