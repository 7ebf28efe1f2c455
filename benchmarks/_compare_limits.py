"""The machine's own limits for ``compare.py``: ``shared/tools/gather_limit.c``, a C
program gathering rows at random into batch buffers with one and with two threads.

It is compiled (``cc -O3 -pthread``) into the run's temporary directory, outside the
repository, and run on the workload's row count, row size and batch size. Where no C
compiler or no source is found, the rows say why instead of a figure.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess

HERE = os.path.dirname(os.path.abspath(__file__))
# The tool lives beside the repository (../shared/tools) in this project's layout.
SOURCES = [
    os.environ.get("FEEDLINE_GATHER_LIMIT_C", ""),
    os.path.join(HERE, "..", "..", "shared", "tools", "gather_limit.c"),
    "/work/shared/tools/gather_limit.c",
]
_LINE = re.compile(
    r"1 thread (?P<one>[\d.]+) M rows/s .*?(?P<t>\d+) threads (?P<two>[\d.]+) M rows/s"
    r".*?memcpy (?P<copy>[\d.]+) GB/s"
)


def build(workdir: str) -> tuple[str | None, str]:
    """The compiled program's path, or None and the reason."""
    src = next((p for p in SOURCES if p and os.path.isfile(p)), None)
    if src is None:
        return None, "gather_limit.c not found (set FEEDLINE_GATHER_LIMIT_C)"
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        return None, "no C compiler (cc) on this machine"
    exe = os.path.join(workdir, "gather_limit")
    done = subprocess.run(
        [cc, "-O3", "-pthread", src, "-o", exe], capture_output=True, text=True, check=False
    )
    if done.returncode:
        return None, f"cc failed: {done.stderr.strip()[:200]}"
    return exe, os.path.relpath(os.path.realpath(src), os.path.join(HERE, ".."))


def measure(exe: str, n: int, row_bytes: int, batch: int, threads: int = 2) -> dict | None:
    """``{"one": rows/s, "two": rows/s, "threads": t, "copy_gbs": ..., "line": ...}``."""
    done = subprocess.run(
        [exe, str(n), str(row_bytes), str(batch), str(threads)],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    m = _LINE.search(done.stdout)
    if done.returncode or m is None:
        return None
    return {
        "one": float(m["one"]) * 1e6,
        "two": float(m["two"]) * 1e6,
        "threads": int(m["t"]),
        "copy_gbs": float(m["copy"]),
        "line": done.stdout.strip(),
    }
