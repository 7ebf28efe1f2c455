"""Batches of varying-length examples made by worker processes (issue 16), against the
calling process, beside the same maps' fixed-length variants, in the same run:

    python benchmarks/varlen_workers.py [--workers N] [--transport]

Two Python-heavy maps: a tokenizer in Python (text -> int32 tokens, lognormal lengths,
median 256, at most 4,096; the fixed variant cuts or pads to 256) and an image decoder
(zlib-inflated ~100 KB blobs; the fixed variant pads into a 160 KB capacity, the
workaround issue 16 began with). Batches of 64, padded to the longest. Each line:
rows/s in the calling process, through N workers, and their ratio.

``--transport`` also measures the ways a worker's ragged values can reach the loader
(the reason ``feedline.loader._slots`` writes them into shared memory): the loader's CPU
time per batch through a shared-memory slot, as raw bytes over the pipe, and pickled.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import zlib
from multiprocessing import Pipe, Process
from multiprocessing.shared_memory import SharedMemory

import numpy as np

import feedline as fl
from feedline.records._ragged import Ragged

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import varlen_fns as fns


def rate(loader: fl.Loader, passes: int = 2) -> float:
    list(loader)  # warm-up: the workers start (and the slots grow)
    n, t = 0, time.perf_counter()
    for _ in range(passes):
        n += sum(b.meta.size for b in loader)
    return n / (time.perf_counter() - t)


def texts(n: int, rng: np.random.Generator) -> list[dict]:
    words = [
        "".join(chr(97 + c) for c in rng.integers(0, 26, rng.integers(2, 9))) for _ in range(5000)
    ]
    lengths = np.clip(rng.lognormal(np.log(256), 0.6, n).astype(int), 1, 4096)
    return [{"text": " ".join(words[i] for i in rng.integers(0, 5000, m))} for m in lengths]


def blobs(n: int, rng: np.random.Generator) -> list[dict]:
    out = []
    for m in rng.integers(60_000, 140_000, n):
        rows = -(-int(m) // 500)
        img = (rng.integers(0, 4, (rows, 500)) + np.arange(500) // 50).astype(np.uint8)
        delta = np.diff(img, axis=1, prepend=0).astype(np.uint8)  # PNG's 'Sub' filter
        out.append({"data": zlib.compress(delta.tobytes(), 1)})
    return out


def loaders(w: int) -> None:
    rng = np.random.default_rng(0)
    text = fl.Dataset(fns.Text, texts(4096, rng))
    pics = fl.Dataset(fns.Blob, blobs(1024, rng))
    cases = [
        ("tokenizer, varying length (median 256)", text.map(fns.tokenize, record=fns.Tokens)),
        ("tokenizer, fixed 256", text.map(fns.tokenize_fixed, record=fns.FixedTokens)),
        ("image decoder, varying (~100 KB)", pics.map(fns.decode, record=fns.Pixels)),
        ("image decoder, fixed 160 KB", pics.map(fns.decode_fixed, record=fns.FixedPixels)),
    ]
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"{os.cpu_count()} CPUs, load average {load:.2f} at the start; batches of 64")
    print(f"{'map':42s} {'here rows/s':>12s} {f'{w} workers':>11s} {'ratio':>6s}")
    for name, ds in cases:
        here = rate(fl.Loader(ds, 64, seed=1, workers=0))
        with fl.Loader(ds, 64, seed=1, workers=w) as loader:
            there = rate(loader)
        print(f"{name:42s} {here:12.0f} {there:11.0f} {there / here:5.2f}x")


# -- --transport: how a worker's ragged values reach the loader ---------------------------


def _batch(kind: str, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    if kind == "tokens":
        lens = np.clip(rng.lognormal(np.log(256), 0.6, 64).astype(int), 1, 4096)
    else:
        lens = rng.integers(90_000, 110_000, 64)
    offsets = np.zeros(65, np.int64)
    np.cumsum(lens, out=offsets[1:])
    dtype = np.int32 if kind == "tokens" else np.uint8
    values = (np.arange(offsets[-1]) % 251).astype(dtype)
    return values, offsets, lens[:, None].astype(np.int64)


def _producer(conn, how: str, kind: str, names: list[str]) -> None:
    rng = np.random.default_rng(0)
    batches = [_batch(kind, rng) for _ in range(8)]
    shms = [SharedMemory(name=n) for n in names]
    i = 0
    while (slot := conn.recv()) is not None:
        v, o, s = batches[i % 8]
        i += 1
        if how == "slot":
            np.ndarray(len(v), v.dtype, shms[slot].buf)[:] = v
            conn.send((slot, len(v), o, s))
        elif how == "raw bytes":
            conn.send((slot, len(v), o, s))
            conn.send_bytes(v)
        else:
            conn.send((slot, len(v), o, s, v))
    for shm in shms:
        shm.close()


def _transport(how: str, kind: str, n: int = 300, slots: int = 4) -> float:
    """The loader's CPU seconds per batch (received, then collated as the loader does)."""
    shms = [SharedMemory(create=True, size=16 << 20) for _ in range(slots)] if how == "slot" else []
    here, there = Pipe()
    p = Process(target=_producer, args=(there, how, kind, [s.name for s in shms]))
    p.start()
    dtype = np.int32 if kind == "tokens" else np.uint8
    for k in range(slots):
        here.send(k)
    cpu = time.process_time()
    for _ in range(n):
        msg = here.recv()
        slot, count, offsets, shapes = msg[:4]
        if how == "slot":
            values = np.ndarray(count, dtype, shms[slot].buf)
        elif how == "raw bytes":
            values = np.frombuffer(here.recv_bytes(), dtype)
        else:
            values = msg[4]
        col = Ragged(values, offsets, shapes, (None,))
        col.padded(64, {0: int(shapes.max())}) if kind == "tokens" else col.blobs()
        del values, col
        here.send(slot)
    cpu = (time.process_time() - cpu) / n
    for _ in range(slots):
        here.recv()
        if how == "raw bytes":
            here.recv_bytes()
    here.send(None)
    p.join()
    for shm in shms:
        shm.close()
        shm.unlink()
    return cpu


def transport() -> None:
    print("\nthe loader's CPU time per batch, by the way ragged values travel (best of 3)")
    print(f"{'batch':34s} {'slot':>9s} {'raw bytes':>10s} {'pickled':>9s}")
    for kind, name in (("tokens", "64 x ~256 int32 tokens"), ("blobs", "64 blobs of ~100 KB")):
        best = {
            how: min(_transport(how, kind) for _ in range(3))
            for how in ("slot", "raw bytes", "pickled")
        }
        cells = " ".join(f"{best[h] * 1e6:7.0f}us" for h in ("slot", "raw bytes", "pickled"))
        print(f"{name:34s} {cells}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--transport", action="store_true")
    args = p.parse_args()
    loaders(max(1, args.workers))
    if args.transport:
        transport()


if __name__ == "__main__":
    main()
