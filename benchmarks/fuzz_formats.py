"""Fuzz the .ndf, .flr and .nndataset readers: mutate valid files and count what opening them does.

Every case takes a valid file, damages it (random byte flips, bit flips, truncations,
appended bytes, random header field values including huge ones; for .flr also preamble
fields and header JSON values re-sealed with correct checksums, so the checks behind the
CRCs are reached), writes it, then opens it (and, for .flr, verifies it and reads its
first and last rows). A share of the cases (``--fs-share``, 5%) also mutates the file
system around the file: the path is a FIFO or a directory, a symlink to the file, or the
file is truncated or overwritten in place (same inode) while a reader has it open, then
read through that reader. Outcomes:

    ok           the file opened (the damage was harmless, e.g. in column padding)
    FormatError  the reader refused it, as it should
    other        any other exception (warnings count as errors, as in the test suite),
                 or a case that ran past --timeout: a bug

``other`` must be 0; each is printed with its case seed (``--replay SEED --formats F``
reruns one case and prints its traceback). The script also tracks the process's
resident memory (max growth of VmRSS and RssAnon over the run).

    python benchmarks/fuzz_formats.py                # 100000 cases per format
    python benchmarks/fuzz_formats.py --cases 2000 --seed 7
"""

from __future__ import annotations

import argparse
import collections
import copy
import json
import os
import random
import signal
import struct
import sys
import tempfile
import time
import traceback
import warnings
import zlib

import numpy as np

import feedline as fl

U64 = 2**64 - 1
NDF_HEADER = struct.Struct("<4sQQQ")
FLR_PRE = struct.Struct("<8sIIQQQQQI")
FLR_SIZES = [8, 4, 4, 8, 8, 8, 8, 8, 4]  # bytes of each preamble field
INTERESTING = [
    0,
    1,
    2,
    3,
    5,
    7,
    8,
    63,
    64,
    65,
    127,
    128,
    255,
    256,
    4096,
    2**31 - 1,
    2**31,
    2**32 - 1,
    2**32,
    2**32 + 1,
    2**53,
    2**60,
    2**61 + 1,
    2**62,
    2**63 - 1,
    2**63,
    2**64 - 8,
    U64 - 1,
    U64,
]


class CaseTimeout(Exception):
    """A case ran past --timeout (a hang)."""


def _alarm(signum, frame):
    raise CaseTimeout("the case ran past its time limit")


def rss() -> tuple[int, int]:
    """(VmRSS, RssAnon) of this process in bytes."""
    values = {}
    with open("/proc/self/status") as f:
        for line in f:
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "RssAnon"):
                values[key] = int(rest.split()[0]) * 1024
    return values.get("VmRSS", 0), values.get("RssAnon", 0)


# -- valid base files ------------------------------------------------------------------------


class Image(fl.Record, dims={"H": 4, "W": 3, "C": 10}):
    """A labelled image."""

    img = fl.field(("H", "W"), "float32", doc="pixels")
    label = fl.field((), "int64", domain=fl.Index("C"))
    mask = fl.field("W", "bool", domain=fl.Mask)
    z = fl.field(2, "complex64")


class Scalars(fl.Record):
    """Scalars."""

    a = fl.field((), "int8", domain=fl.Range(-5, 5))
    b = fl.field((), "float16")
    c = fl.field((), "uint32")


def make_bases(directory: str) -> dict[str, list[bytes]]:
    rng = np.random.default_rng(0)
    ndf, flr = [], []
    for n, d, l in [(6, 3, 2), (1, 1, 0), (0, 4, 1), (9, 1, 5)]:  # noqa: E741
        path = os.path.join(directory, "base.ndf")
        fl.ndf.save(path, rng.standard_normal((n, d)), rng.standard_normal((n, l)) if l else None)
        with open(path, "rb") as f:
            ndf.append(f.read())
    for record, n in [(Image, 5), (Image, 1), (Scalars, 40), (Scalars, 0)]:
        cols = {}
        for name, field in record.fields.items():
            shape = (n, *field.shape)
            if field.dtype.kind == "b":
                cols[name] = rng.random(shape) < 0.5
            elif field.dtype.kind in "iu":
                cols[name] = rng.integers(0, 5, shape)
            elif field.dtype.kind == "c":
                cols[name] = rng.standard_normal(shape) + 1j
            else:
                cols[name] = rng.standard_normal(shape)
        path = os.path.join(directory, "base.flr")
        if n:
            fl.recfile.write(path, record, cols)
        else:  # 0-row files are written from a stream (see the tests for why)
            fl.recfile.write(path, record, iter(()))
        with open(path, "rb") as f:
            flr.append(f.read())
    nnd = []
    docs = [[int(t) for t in rng.integers(0, 300, k)] for k in (5, 0, 17, 1, 40)]
    for scope, test in [("all", []), ("assistant", [[7, 8]]), ("all", [[1], []])]:
        masks = (
            [[i % 2 == 0 for i in range(len(d))] for d in docs] if scope == "assistant" else None
        )
        tmasks = [[True] * len(d) for d in test] if scope == "assistant" else None
        build = fl.nndataset.Build(
            {"tokens": 300, "name": "bytes", "ids": [1, 2, 3]},
            "corpus.txt",
            "ab" * 32,
            len(docs) + len(test),
            loss_scope=scope,
            train_docs=docs,
            train_masks=masks,
            test_docs=test,
            test_masks=tmasks,
            created=1,
        )
        path = os.path.join(directory, "base.nndataset")
        fl.nndataset.write(path, build)
        with open(path, "rb") as f:
            nnd.append(f.read())
    return {"ndf": ndf, "flr": flr, "nndataset": nnd}


# -- mutations ------------------------------------------------------------------------------


def big_value(rng: random.Random, top: int = U64) -> int:
    r = rng.random()
    if r < 0.6:
        return min(rng.choice(INTERESTING), top)
    if r < 0.8:
        return rng.randrange(top + 1)
    return rng.randrange(1 << rng.randrange(1, 12))


def flip_bytes(rng: random.Random, buf: bytearray, head: int) -> None:
    for _ in range(rng.randint(1, 8)):
        if not buf:
            return
        pos = rng.randrange(min(head, len(buf))) if rng.random() < 0.5 else rng.randrange(len(buf))
        if rng.random() < 0.5:
            buf[pos] ^= 1 << rng.randrange(8)
        else:
            buf[pos] = rng.randrange(256)


def seal_flr(header: bytes, body: bytes, fields: list, data_offset: int) -> bytes:
    """A file with the header at 64, ``body`` at ``data_offset``, CRCs recomputed."""
    rest = header + b"\0" * max(0, data_offset - 64 - len(header)) + body
    fields = list(fields)
    fields[4], fields[6], fields[7], fields[8] = (
        len(header),
        data_offset,
        64 + len(rest),
        zlib.crc32(header),
    )
    pre = FLR_PRE.pack(*fields)
    return pre + struct.pack("<I", zlib.crc32(pre)) + rest


def random_json(rng: random.Random, depth: int = 0):
    r = rng.random()
    if r < 0.35:
        return big_value(rng) * rng.choice([1, 1, 1, -1])
    if r < 0.45:
        return rng.choice([None, True, False, 0.5, -1.0, 1e308, float(2**64)])
    if r < 0.6:
        return rng.choice(
            [
                "",
                "x",
                "fixed",
                "ragged",
                "<f4",
                "|O",
                "<U3",
                "float128",
                "H",
                "schema",
                "fields",
                "_x",
                "a b",
                "\u00e9",
                "0",
            ]
        )
    if r < 0.75 and depth < 3:
        return [random_json(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    if r < 0.85 and depth < 3:
        return {rng.choice(["index", "mask", "range", "x"]): random_json(rng, depth + 1)}
    if r < 0.88:
        return [[[[[]]]]] if rng.random() < 0.5 else [2**32, 2**32]
    return {}


def mutate_json(rng: random.Random, doc):
    """Replace, delete or insert one node of the JSON tree."""
    doc = copy.deepcopy(doc)
    parent, key, node = None, None, doc
    for _ in range(rng.randint(0, 6)):
        if isinstance(node, dict) and node:
            k = rng.choice(sorted(node))
        elif isinstance(node, list) and node:
            k = rng.randrange(len(node))
        else:
            break
        parent, key, node = node, k, node[k]
    if parent is None:
        return random_json(rng) if rng.random() < 0.2 else doc
    action = rng.random()
    if action < 0.15 and isinstance(parent, dict):
        del parent[key]
    elif action < 0.25 and isinstance(parent, list):
        parent.insert(key, copy.deepcopy(node) if rng.random() < 0.5 else random_json(rng))
    elif action < 0.45 and isinstance(node, int) and not isinstance(node, bool):
        parent[key] = node + rng.choice([-64, -8, -1, 1, 8, 64, 2**32, 2**63, 2**64])
    else:
        parent[key] = random_json(rng)
    return doc


def mutate_ndf(rng: random.Random, base: bytes) -> tuple[str, bytes]:
    buf = bytearray(base)
    kind = rng.choice(["flip", "flip", "truncate", "append", "fields", "fields", "fields+flip"])
    if kind in ("fields", "fields+flip"):
        magic, n, d, l = NDF_HEADER.unpack(base[:28])  # noqa: E741
        values = [n, d, l]
        for i in rng.sample(range(3), rng.randint(1, 3)):
            values[i] = big_value(rng)
        body = base[28:]
        r = rng.random()
        if r < 0.3:
            body = b""
        elif r < 0.5:
            body = body[: rng.randrange(len(body) + 1)]
        elif r < 0.6:
            body = body + bytes(rng.randrange(256) for _ in range(rng.choice([8, 16, 24, 40])))
        buf = bytearray(NDF_HEADER.pack(magic, *values) + body)
        if kind == "fields+flip":
            flip_bytes(rng, buf, 28)
    elif kind == "flip":
        flip_bytes(rng, buf, 28)
    elif kind == "truncate":
        buf = buf[: rng.randrange(len(buf))]
    else:
        buf += bytes(rng.randrange(256) for _ in range(rng.randint(1, 256)))
    return kind, bytes(buf)


def mutate_flr(rng: random.Random, base: bytes) -> tuple[str, bytes]:
    buf = bytearray(base)
    fields = list(FLR_PRE.unpack(base[:60]))
    kind = rng.choice(
        [
            "flip",
            "flip",
            "truncate",
            "append",
            "preamble",
            "preamble",
            "header",
            "header",
            "header",
            "ndims",
        ]
    )
    if kind == "flip":
        flip_bytes(rng, buf, 64 + fields[4])
    elif kind == "truncate":
        buf = buf[: rng.randrange(len(buf))]
    elif kind == "append":
        buf += bytes(rng.randrange(256) for _ in range(rng.randint(1, 256)))
    elif kind == "preamble":  # field values, with the preamble CRC recomputed
        for i in rng.sample(range(1, 9), rng.randint(1, 3)):
            fields[i] = big_value(rng, 2 ** (8 * FLR_SIZES[i]) - 1)
        pre = FLR_PRE.pack(*fields)
        buf = bytearray(pre + struct.pack("<I", zlib.crc32(pre)) + base[64:])
    elif kind == "ndims":  # a field of many dims (a column has one more: numpy allows 64)
        doc = json.loads(base[64 : 64 + fields[4]])
        spec = rng.choice(doc["record"]["fields"])
        spec["dims"] = spec["shape"] = [1] * rng.choice([31, 32, 62, 63, 64, 65, 100])
        header = json.dumps(doc, separators=(",", ":"), sort_keys=True).encode()
        start = max(8192, -(-(64 + len(header)) // 64) * 64)
        for c in doc["columns"]:
            c["offset"] += start - fields[6]
        header = json.dumps(doc, separators=(",", ":"), sort_keys=True).encode()
        buf = bytearray(seal_flr(header, base[fields[6] :], fields, start))
    else:  # a JSON value changed, every checksum recomputed, the columns kept in place
        doc = json.loads(base[64 : 64 + fields[4]])
        start = 8192
        for c in doc["columns"]:
            c["offset"] += start - fields[6]
        body = base[fields[6] :]
        for _ in range(rng.randint(1, 3)):
            doc = mutate_json(rng, doc)
        header = json.dumps(doc, separators=(",", ":"), sort_keys=True).encode()
        if rng.random() < 0.005:  # deeply nested JSON
            header = b"[" * 50_000 + b"]" * 50_000
        buf = bytearray(
            seal_flr(header, body, fields, max(start, -(-(64 + len(header)) // 64) * 64))
        )
    return kind, bytes(buf)


def mutate_nndataset(rng: random.Random, base: bytes) -> tuple[str, bytes]:
    buf = bytearray(base)
    kind = rng.choice(["flip", "flip", "flip", "truncate", "append", "u64", "u64"])
    if kind == "flip":
        flip_bytes(rng, buf, 8)
    elif kind == "truncate":
        buf = buf[: rng.randrange(len(buf))]
    elif kind == "append":
        buf += bytes(rng.randrange(256) for _ in range(rng.randint(1, 64)))
    else:  # an aligned 8-byte word (a length, an address, a count) set to a big value
        at = rng.randrange(0, max(len(buf) - 8, 1))
        buf[at : at + 8] = struct.pack("<Q", big_value(rng))
    return kind, bytes(buf)


# -- running --------------------------------------------------------------------------------


def try_ndf(path: str) -> None:
    with fl.ndf.open(path) as f:
        if len(f):
            f.read_row(len(f) - 1)
            f.rows([0, len(f) - 1])


def try_flr(path: str) -> None:
    with fl.recfile.open(path) as f:
        f.verify()
        if len(f):
            f.getitems([0, len(f) - 1])


def try_nndataset(path: str) -> None:
    with fl.nndataset.open(path) as f:
        for subset in ("train", "test"):
            if f.info.kind != "text" or (subset == "test" and not f.info.test_docs):
                continue
            c = f.load_text(subset)
            np.asarray(c.token_flow), np.asarray(c.loss_mask), np.asarray(c.doc_ids)
            if c.num_docs:
                f.text_doc(subset, c.num_docs - 1)


FORMATS = {
    "ndf": (mutate_ndf, try_ndf),
    "flr": (mutate_flr, try_flr),
    "nndataset": (mutate_nndataset, try_nndataset),
}
OPENERS = {"ndf": fl.ndf.open, "flr": fl.recfile.open, "nndataset": fl.nndataset.open}


def read_through(fmt: str, f) -> None:
    """Read every part of an open file (``try_*`` without the open)."""
    if fmt == "ndf":
        if len(f):
            f.rows([0, len(f) - 1])
    elif fmt == "flr":
        f.verify()
        if len(f):
            f.getitems([0, len(f) - 1])
    else:
        for subset in ("train", "test"):
            if f.info.kind != "text" or (subset == "test" and not f.info.test_docs):
                continue
            c = f.load_text(subset)
            np.asarray(c.token_flow), np.asarray(c.loss_mask)
            if len(c.token_flow) > 1 and subset == "train":
                with fl.text.Windows(f, 4) as w:
                    w.getitems(np.arange(len(w)))


FS_KINDS = ["fs:fifo", "fs:directory", "fs:symlink", "fs:truncate-open", "fs:replace-open"]


def clear(path: str) -> None:
    """Remove whatever a file-system case left at ``path`` (a FIFO, a directory, a link)."""
    for p in (path, path + ".target"):
        if os.path.islink(p) or os.path.exists(p):
            if os.path.isdir(p) and not os.path.islink(p):
                os.rmdir(p)
            else:
                os.unlink(p)


def fs_case(fmt: str, kind: str, rng: random.Random, data: bytes, other: bytes, path: str) -> None:
    """Set up the file system case ``kind`` at ``path`` and read it as a user would."""
    clear(path)
    if kind == "fs:fifo":
        os.mkfifo(path)  # a reader that opens it for reading would wait for ever
        FORMATS[fmt][1](path)
    elif kind == "fs:directory":
        os.mkdir(path)
        FORMATS[fmt][1](path)
    elif kind == "fs:symlink":
        with open(path + ".target", "wb") as f:
            f.write(data)
        os.symlink(path + ".target", path)
        FORMATS[fmt][1](path)
    else:
        with open(path, "wb") as f:
            f.write(data)
        with OPENERS[fmt](path) as handle:
            if kind == "fs:truncate-open":  # in place: the pages past the end are gone
                os.truncate(path, rng.randrange(len(data) + 1))
            else:  # another file's bytes written over this one (same inode)
                with open(path, "r+b") as f:
                    f.write(other[: len(data)])
            read_through(fmt, handle)


def run_case(
    fmt: str, bases: list[bytes], case_seed: int, path: str, timeout: float, fs_share: float = 0.05
) -> tuple[str, str, BaseException | None]:
    """(outcome, mutation kind, exception) of one case."""
    rng = random.Random(case_seed)
    mutate, attempt = FORMATS[fmt]
    kind, data = mutate(rng, rng.choice(bases))
    fs_kind = rng.choice(FS_KINDS) if rng.random() < fs_share else None
    if fs_kind is None:
        clear(path)
        with open(path, "wb") as f:
            f.write(data)
    else:  # most of these start from a valid file: the damage is the file system's
        data = data if rng.random() < 0.3 else rng.choice(bases)
        kind = fs_kind
    signal.setitimer(signal.ITIMER_REAL, timeout)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # as in the test suite: a warning is a failure
            if fs_kind is None:
                attempt(path)
            else:
                fs_case(fmt, fs_kind, rng, data, rng.choice(bases), path)
    except fl.FormatError as e:
        if e.path != path or e.offset is None:
            return "other", kind, AssertionError(f"FormatError without path/offset: {e}")
        return "FormatError", kind, None
    except BaseException as e:  # every other exception is what this script counts
        if isinstance(e, KeyboardInterrupt):
            raise
        return "other", kind, e
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    return "ok", kind, None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=100_000, help="cases per format")
    parser.add_argument("--seed", type=int, default=1, help="the run's seed")
    parser.add_argument(
        "--formats", default="ndf,flr,nndataset", help="comma-separated: ndf, flr, nndataset"
    )
    parser.add_argument("--timeout", type=float, default=5.0, help="seconds a case may take")
    parser.add_argument("--show", type=int, default=3, help="cases printed per kind of failure")
    parser.add_argument(
        "--fs-share",
        type=float,
        default=0.05,
        help="share of cases that also mutate the file system around the file",
    )
    parser.add_argument(
        "--replay",
        type=int,
        default=None,
        help="rerun one case seed (of --formats) and print its traceback",
    )
    args = parser.parse_args(argv)
    signal.signal(signal.SIGALRM, _alarm)
    formats = [f for f in args.formats.split(",") if f]
    for f in formats:
        if f not in FORMATS:
            parser.error(f"unknown format {f!r}")
    status = 0
    with tempfile.TemporaryDirectory(prefix="fuzz-formats-") as directory:
        bases = make_bases(directory)
        path = os.path.join(directory, "case")
        if args.replay is not None:
            for fmt in formats:
                outcome, kind, exc = run_case(
                    fmt, bases[fmt], args.replay, path + "." + fmt, args.timeout, args.fs_share
                )
                print(f"{fmt} case {args.replay}: {kind} -> {outcome}")
                if exc is not None:
                    traceback.print_exception(exc)
            return 0
        for fmt in formats:
            fpath = path + "." + fmt
            for i in range(200):  # warm up (imports, caches) before the memory baseline
                run_case(fmt, bases[fmt], -1 - i, fpath, args.timeout)
            rss0, anon0 = rss()
            max_rss, max_anon = rss0, anon0
            counts: collections.Counter[str] = collections.Counter()
            by_kind: dict[str, collections.Counter[str]] = collections.defaultdict(
                collections.Counter
            )
            failures: dict[str, list[int]] = collections.defaultdict(list)
            slowest = (0.0, None)
            t0 = time.perf_counter()
            for i in range(args.cases):
                case_seed = args.seed * 1_000_000_007 + i
                t = time.perf_counter()
                outcome, kind, exc = run_case(
                    fmt, bases[fmt], case_seed, fpath, args.timeout, args.fs_share
                )
                dt = time.perf_counter() - t
                if dt > slowest[0]:
                    slowest = (dt, case_seed)
                counts[outcome] += 1
                by_kind[kind][outcome] += 1
                if exc is not None:
                    line = str(exc).splitlines()[0] if str(exc) else ""
                    sig = f"{type(exc).__name__}: {line[:120]}"
                    failures[sig].append(case_seed)
                    if len(failures[sig]) <= args.show:
                        print(f"  OTHER [{fmt}] seed {case_seed} ({kind}): {sig}", flush=True)
                if i % 1000 == 999:
                    r, a = rss()
                    max_rss, max_anon = max(max_rss, r), max(max_anon, a)
            elapsed = time.perf_counter() - t0
            r, a = rss()
            max_rss, max_anon = max(max_rss, r), max(max_anon, a)
            print(
                f"{fmt}: {args.cases} cases in {elapsed:.1f} s "
                f"({args.cases / elapsed:,.0f}/s): ok {counts['ok']}, FormatError "
                f"{counts['FormatError']}, other {counts['other']}"
            )
            for kind in sorted(by_kind):
                c = by_kind[kind]
                print(
                    f"    {kind:<12} ok {c['ok']:>7}  FormatError {c['FormatError']:>7}  "
                    f"other {c['other']:>5}"
                )
            print(
                f"    slowest case {slowest[0] * 1e3:.1f} ms (seed {slowest[1]}); max growth "
                f"VmRSS {(max_rss - rss0) / 2**20:+.1f} MiB, RssAnon "
                f"{(max_anon - anon0) / 2**20:+.1f} MiB"
            )
            for sig, seeds in failures.items():
                print(
                    f"    other x{len(seeds)}: {sig}; seeds {seeds[: args.show]} "
                    f"(--replay SEED --formats {fmt})"
                )
            if counts["other"]:
                status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
