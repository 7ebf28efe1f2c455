"""The house: every import between feedline's packages points down the layers.

The layers, bottom first (a module imports only from its own layer and those below):

    errors, _base           errors; hashing, compiled kernels, atomic writes (private)
    records, order          what an example is; which record comes next (no files)
    formats                 bytes on disk (knows records, never loaders)
    sources                 anything indexable as typed records (builds orders: Seq)
    text, remote, manifest, images   corpora and windows, files at URLs, manifests of
                                     shards, images
    loader                  batches, workers, devices
    torch, jax, ray, cli    integrations and the command line

``order`` sits beside ``records``, below ``sources``: an order is computed from lengths
and salts alone, and a typed dataset builds one (``Dataset.shuffle -> Seq``, the
contract's API), so ``sources`` imports ``order`` and never the reverse. (STYLE.md's
picture ``records -> formats -> sources -> order -> loader`` draws the data's flow:
which stage feeds which; the imports follow what each module needs to know.) Every
import statement counts, also one inside a function. The one exception is named here:
the contract's convenience constructors ``Seq.batches`` and ``Dataset.batches`` import
the loader when they are called (no registry filled in from above).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "feedline"

LAYERS = [
    {"errors", "_base"},
    {"records", "order"},
    {"formats"},
    {"sources"},
    {"text", "remote", "manifest", "images"},
    {"loader"},
    {"torch", "jax", "ray", "cli"},
]
LEVEL = {name: i for i, layer in enumerate(LAYERS) for name in layer}
LEVEL["feedline"] = len(LAYERS) - 1  # the top package re-exports every layer
# (importing package, imported package, enclosing function): the named exceptions
UPWARD = {("order", "loader", "batches"), ("sources", "loader", "batches")}


def _package_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def imports() -> list[tuple[str, str, int, str, str]]:
    """(importing package, imported package, line, file, enclosing function) for every
    import inside feedline."""
    out = []
    for path in SRC.rglob("*.py"):
        rel = path.relative_to(SRC.parent).with_suffix("")
        if path.name == "__init__.py":
            module = package = ".".join(rel.parts[:-1])
        else:
            module = ".".join(rel.parts)
            package = module.rsplit(".", 1)[0]
        tree = ast.parse(path.read_text(encoding="utf-8"))
        inside = {}  # import node -> the name of the function around it
        for fn in ast.walk(tree):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for sub in ast.walk(fn):
                    inside.setdefault(id(sub), fn.name) if sub is not fn else None
        for node in ast.walk(tree):
            targets: list[str] = []
            if isinstance(node, ast.ImportFrom) and node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                if node.module:
                    targets.append(".".join([*base, node.module]))
                else:
                    targets.extend(".".join([*base, a.name]) for a in node.names)
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("feedline"):
                targets.append(node.module or "")
            elif isinstance(node, ast.Import):
                targets.extend(a.name for a in node.names if a.name.startswith("feedline."))
            for target in targets:
                dst = _package_of(target)
                if dst not in LEVEL:  # a name of the top package (``from .. import Loader``)
                    dst = "feedline"
                out.append(
                    (_package_of(module), dst, node.lineno, str(path), inside.get(id(node), ""))
                )
    return out


def test_every_package_has_a_layer():
    packages = {
        p.stem if p.is_file() else p.name
        for p in SRC.iterdir()
        if (p.suffix == ".py" or (p.is_dir() and (p / "__init__.py").exists()))
    }
    packages -= {"__init__", "__main__"}
    assert packages <= set(LEVEL) - {"feedline"}, sorted(packages - set(LEVEL))


@pytest.mark.parametrize("edge", imports(), ids=lambda e: f"{e[0]}->{e[1]}:{e[2]}")
def test_an_import_points_down_the_layers(edge):
    src, dst, line, path, function = edge
    if src in ("", dst) or dst == "":  # the package itself, or within one package
        return
    if (src, dst, function) in UPWARD:
        return
    assert LEVEL[dst] <= LEVEL[src], (
        f"{path}:{line}: {src} (layer {LEVEL[src]}) imports {dst} (layer {LEVEL[dst]})"
    )


def test_the_named_upward_imports_are_the_only_ones_and_no_registry_is_left():
    up = {(s, d, f) for s, d, _, _, f in imports() if s and d and s != d and LEVEL[d] > LEVEL[s]}
    assert up == UPWARD
    import feedline.order._seq as seq_module

    assert not hasattr(seq_module, "LOADER")


def modules() -> dict[str, set[str]]:
    """Every feedline module and the feedline modules it imports (at run time: an import
    under ``if TYPE_CHECKING:`` names a type for annotations only)."""
    paths = {}
    for path in SRC.rglob("*.py"):
        parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
        if path.name == "__init__.py":
            parts = parts[:-1]
        paths[".".join(parts)] = path
    graph: dict[str, set[str]] = {}
    for module, path in paths.items():
        package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
        tree = ast.parse(path.read_text(encoding="utf-8"))
        typing_only = {
            id(sub)
            for node in ast.walk(tree)
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
            for sub in ast.walk(node)
        }
        out = set()
        for node in ast.walk(tree):
            if id(node) in typing_only:
                continue
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    target = ".".join([*base, *([node.module] if node.module else [])])
                elif (node.module or "").startswith("feedline"):
                    target = node.module or ""
                else:
                    continue
                for alias in node.names:  # ``from . import _perm`` imports the module
                    name = f"{target}.{alias.name}"
                    out.add(name if name in paths else target)
            elif isinstance(node, ast.Import):
                out.update(a.name for a in node.names if a.name in paths)
        out.discard(module)
        graph[module] = out
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            part = []
            while True:
                w = stack.pop()
                part.append(w)
                if w == v:
                    break
            if len(part) > 1:
                found.append(sorted(part))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_two_modules_import_each_other():
    """No circle of imports, also inside one package (``formats._io`` and ``_remote``,
    ``_corpus`` and ``nndataset`` were one each): only the named upward imports close a
    circle (the loader imports orders and sources; they import it when called)."""
    graph = modules()
    for module in ("feedline.order._seq", "feedline.sources._dataset"):
        assert "feedline.loader" in graph[module]  # the named exceptions, ``batches``
        graph[module].discard("feedline.loader")
    assert _cycles(graph) == []


def test_the_cycle_finder_finds_a_circle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(graph) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_the_bottom_package_imports_only_errors():
    """``_base`` (hashing, kernels, atomic writes) is used by every layer above it."""
    graph = modules()
    base = {m for m in graph if m.startswith("feedline._base")}
    assert base >= {"feedline._base.hashing", "feedline._base.kernels", "feedline._base.files"}
    for module in base:
        outside = {d for d in graph[module] if not d.startswith("feedline._base")}
        assert outside <= {"feedline.errors"}, (module, outside)


def test_the_formats_file_layers_point_one_way():
    """``_io`` (local handles) is below ``_remote`` (URLs), which is below ``_open``
    (``open_shared`` and the readers' base): the old circle ``_io`` <-> ``_remote``."""
    graph = modules()
    assert "feedline.formats._remote" not in graph["feedline.formats._io"]
    assert "feedline.formats._io" in graph["feedline.formats._remote"]
    assert {"feedline.formats._io", "feedline.formats._remote"} <= graph["feedline.formats._open"]
    assert "feedline.formats.nndataset" not in graph["feedline.formats._corpus"]
