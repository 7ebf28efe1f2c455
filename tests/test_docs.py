"""Every Python example in the README and in docs/ runs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def _examples() -> list[tuple[str, int, str]]:
    out = []
    for path in DOCS:
        text = path.read_text(encoding="utf-8")
        for i, m in enumerate(re.finditer(r"```python\n(.*?)```", text, re.S)):
            out.append((path.name, i, m.group(1)))
    return out


EXAMPLES = _examples()


def test_the_readme_has_an_example():
    assert any(name == "README.md" for name, _, _ in EXAMPLES)


@pytest.mark.parametrize("code", [e[2] for e in EXAMPLES], ids=[f"{e[0]}-{e[1]}" for e in EXAMPLES])
def test_the_example_runs(code: str, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    if "import jax" in code:
        # JAX's runtime starts threads; the test process must not have them when other
        # tests fork (torch's DataLoader workers), so JAX examples run in their own.
        import os
        import subprocess
        import sys

        env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
        out = subprocess.run(
            [sys.executable, "-c", code],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        assert out.returncode == 0, out.stderr[-2000:]
        return
    exec(compile(code, "<example>", "exec"), {"__name__": "__example__"})


def test_the_modules_docstring_examples_pass():
    import doctest

    import feedline._base.hashing
    import feedline._base.rowcopy
    import feedline.formats._label
    import feedline.formats.nndataset
    import feedline.loader._loader
    import feedline.order._order
    import feedline.order._schedule
    import feedline.order._seq
    import feedline.sources._dataset
    import feedline.text._windows

    for mod in (
        feedline._base.hashing,
        feedline._base.rowcopy,
        feedline.order._order,
        feedline.order._schedule,
        feedline.order._seq,
        feedline.sources._dataset,
        feedline.loader._loader,
        feedline.formats.nndataset,
        feedline.formats._label,
        feedline.text._windows,
    ):
        result = doctest.testmod(mod)
        assert result.failed == 0, mod.__name__


def test_the_flr_worked_example_is_byte_exact(tmp_path, monkeypatch):
    text = (ROOT / "docs" / "formats.md").read_text(encoding="utf-8")
    code = re.search(r"### A worked example\n\n```python\n(.*?)```", text, re.S).group(1)
    dump = re.search(r"```text flr-worked-example\n(.*?)```", text, re.S).group(1)
    expected = bytes.fromhex("".join(line[6:] for line in dump.strip().splitlines()))
    monkeypatch.chdir(tmp_path)
    exec(compile(code, "<formats.md>", "exec"), {"__name__": "__example__"})
    assert (tmp_path / "point.flr").read_bytes() == expected
