"""Importing feedline has no side effects: no threads, no heavy imports."""

import json
import subprocess
import sys

CODE = """
import json, sys, threading
before = threading.active_count()
import feedline
print(json.dumps({
    "threads": threading.active_count() - before,
    "heavy": sorted(m for m in ("numba", "torch", "jax", "ray") if m in sys.modules),
}))
"""


def test_importing_feedline_starts_no_thread_and_imports_nothing_heavy():
    out = subprocess.run([sys.executable, "-c", CODE], check=True, capture_output=True, text=True)
    result = json.loads(out.stdout)
    assert result == {"threads": 0, "heavy": []}
