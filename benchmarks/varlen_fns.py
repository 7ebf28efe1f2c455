"""Importable pieces of benchmarks/varlen_workers.py (workers import them, never
``__main__``): Python-heavy maps returning examples of varying length, each beside its
fixed-length variant (the same work, cut or padded to a fixed capacity)."""

from __future__ import annotations

import zlib

import numpy as np

import feedline as fl

CAP = 256  # the fixed-length variant's tokens per example
PIXELS_CAP = 160_000  # the fixed-length variant's bytes per image (the workaround)
VOCAB = 50_257


class Text(fl.Record):
    text = fl.field((), "str")


class Tokens(fl.Record, dims={"T": None, "V": VOCAB}):
    tokens = fl.field("T", "int32", domain=fl.Index("V"))


class FixedTokens(fl.Record, dims={"T": CAP, "V": VOCAB}):
    tokens = fl.field("T", "int32", domain=fl.Index("V"))
    length = fl.field((), "int64")


class Blob(fl.Record):
    data = fl.field((), "bytes")


class Pixels(fl.Record, dims={"N": None}):
    pixels = fl.field("N", "uint8")


class FixedPixels(fl.Record, dims={"N": PIXELS_CAP}):
    pixels = fl.field("N", "uint8")
    length = fl.field((), "int64")


def _ids(text: str) -> list[int]:
    """A tokenizer in Python: a rolling hash of each word's characters."""
    out = []
    for word in text.split():
        h = 0
        for ch in word:
            h = (h * 31 + ord(ch)) & 0xFFFFFFFF
        out.append(h % VOCAB)
    return out


def tokenize(example, rng):
    return {"tokens": np.array(_ids(example["text"]), np.int32)}


def tokenize_fixed(example, rng):
    ids = _ids(example["text"])[:CAP]
    tokens = np.zeros(CAP, np.int32)
    tokens[: len(ids)] = ids
    return {"tokens": tokens, "length": len(ids)}


def _decode(data: bytes) -> np.ndarray:
    """A decoder: inflate, then undo a row-wise delta filter (PNG's 'Sub'), in numpy."""
    raw = np.frombuffer(zlib.decompress(data), np.uint8)
    rows = raw[: len(raw) // 500 * 500].reshape(-1, 500)
    return np.cumsum(rows, axis=1, dtype=np.uint8).ravel()


def decode(example, rng):
    return {"pixels": _decode(example["data"])}


def decode_fixed(example, rng):
    px = _decode(example["data"])[:PIXELS_CAP]
    out = np.zeros(PIXELS_CAP, np.uint8)
    out[: len(px)] = px
    return {"pixels": out, "length": len(px)}
