"""The import graph of effir, read with ast from every import statement at
any depth (inside functions and ``if TYPE_CHECKING:`` blocks included):
it keeps the layers of pyproject.toml's import contract, it has no cycle,
and an import inside a function is only of a package that is lazy by
design (TVM, the optional model formats, Pygments) with a one-line reason.

A cycle hidden by an import written inside a function still ties the
modules together: neither can be understood, tested or moved without the
other. import-linter checks the same contract in `make test`; this test
needs nothing but the standard library."""

from __future__ import annotations

import ast
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "effir"

# What may be imported inside a function: packages that are slow or
# optional (TVM and its FFI, the model formats, Pygments), and effir's own
# modules that import them at their top (the TVM backend, the importers).
LAZY_PACKAGES = (
    "tvm",
    "tvm_ffi",
    "torch",
    "onnx",
    "onnxruntime",
    "google.protobuf",
    "pygments",
    "effir.backends.tvm",
    "effir.importers",
)


@dataclass(frozen=True)
class Import:
    """One imported name: who imports it, where, and whether inside a function."""

    importer: str
    target: str  # the module, resolved to one of effir's where it is effir's
    line: int
    in_function: bool
    reason: bool  # a comment on the line (or the line above) says why


def module_files() -> dict[str, Path]:
    """Every module of effir by its dotted name (a package by its __init__)."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _scopes(tree: ast.AST) -> Iterator[tuple[ast.stmt, bool]]:
    """Every import statement of ``tree``, and whether it is inside a function
    (an explicit stack: no recursion)."""
    stack: list[tuple[ast.AST, bool]] = [(tree, False)]
    while stack:
        node, in_function = stack.pop()
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node, in_function
        inner = in_function or isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
        stack.extend((child, inner) for child in ast.iter_child_nodes(node))


def imports(modules: dict[str, Path]) -> list[Import]:
    """Every import of every module, ``from a import b`` read as a.b where
    that is a module of effir."""
    found = []
    for name, path in modules.items():
        text = path.read_text()
        lines = text.splitlines()
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node, in_function in _scopes(ast.parse(text)):
            line = lines[node.lineno - 1] + lines[node.end_lineno - 1]
            reason = "#" in line or lines[node.lineno - 2].strip().startswith("#")
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*up, base] if base else up)
                targets = [
                    f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                    for alias in node.names
                ]
            for target in targets:
                found.append(
                    Import(name, _resolve(target, modules), node.lineno, in_function, reason)
                )
    return found


def _resolve(target: str, modules: dict[str, Path]) -> str:
    """The effir module that ``target`` names (a name in it resolves to it)."""
    probe = target
    while probe and probe not in modules:
        probe = probe.rpartition(".")[0]
    return probe or target


def graph() -> dict[str, set[str]]:
    """effir's module import graph: an edge for every import, at any depth."""
    modules = module_files()
    edges: dict[str, set[str]] = {name: set() for name in modules}
    for imp in imports(modules):
        if imp.target in modules and imp.target != imp.importer:
            edges[imp.importer].add(imp.target)
    return edges


def strongly_connected(edges: dict[str, set[str]]) -> list[list[str]]:
    """The components of more than one module (Tarjan's algorithm on an
    explicit stack)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components = []
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            for succ in successors:
                if succ not in index:
                    index[succ] = low[succ] = len(index)
                    stack.append(succ)
                    on_stack.add(succ)
                    work.append((succ, iter(sorted(edges[succ]))))
                    break
                if succ in on_stack:
                    low[node] = min(low[node], index[succ])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        components.append(sorted(component))
    return components


def a_cycle(edges: dict[str, set[str]], component: list[str]) -> list[str]:
    """One cycle through the first module of ``component`` (breadth first,
    so the shortest), for the message."""
    members = set(component)
    start = component[0]
    came_from: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for succ in sorted(edges[node] & members):
                if succ == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(came_from[path[-1]])
                    return [*reversed(path), start]
                if succ not in came_from:
                    came_from[succ] = node
                    following.append(succ)
        frontier = following
    return component


def test_the_import_graph_has_no_cycle() -> None:
    edges = graph()
    cycles = [" -> ".join(a_cycle(edges, c)) for c in strongly_connected(edges)]
    assert not cycles, "import cycles (counting imports inside functions):\n" + "\n".join(cycles)


def _lazily_imported(target: str) -> bool:
    return any(target == p or target.startswith(p + ".") for p in LAZY_PACKAGES)


def test_imports_inside_functions_are_lazy_by_design_and_say_why() -> None:
    modules = module_files()
    late = [i for i in imports(modules) if i.in_function]
    bad = [
        f"{i.importer}:{i.line} imports {i.target} inside a function"
        for i in late
        if not _lazily_imported(i.target)
    ]
    silent = [
        f"{i.importer}:{i.line} imports {i.target} late without a reason comment"
        for i in late
        if _lazily_imported(i.target) and not i.reason
    ]
    assert not bad + silent, "\n".join(bad + silent)


def _contracts() -> list[dict]:
    with open(ROOT / "pyproject.toml", "rb") as f:
        return tomllib.load(f)["tool"]["importlinter"]["contracts"]


def _layer_of(module: str, container: str, layers: list[list[str]]) -> tuple[int, str] | None:
    """(the index of the layer, highest first; the sibling) that holds ``module``."""
    for depth, siblings in enumerate(layers):
        for sibling in siblings:
            full = f"{container}.{sibling}"
            if module == full or module.startswith(full + "."):
                return depth, full
    return None


@pytest.mark.parametrize(
    "contract", [c for c in _contracts() if c["type"] == "layers"], ids=lambda c: c["name"]
)
def test_every_import_keeps_the_layers_of_the_contract(contract: dict) -> None:
    (container,) = contract["containers"]
    layers = [[s.strip() for s in layer.split("|")] for layer in contract["layers"]]
    edges = graph()
    inside = {m for m in edges if m.startswith(container + ".")}
    listed = {m for m in inside if _layer_of(m, container, layers)}
    assert listed == inside, "modules outside every layer"
    broken = []
    for importer, targets in edges.items():
        here = _layer_of(importer, container, layers)
        for target in targets:
            there = _layer_of(target, container, layers)
            if here is None or there is None or here[1] == there[1]:
                continue
            if there[0] <= here[0]:  # the same layer's sibling, or a higher layer
                broken.append(f"{importer} -> {target}")
    assert not broken, "imports against the layers:\n" + "\n".join(sorted(broken))


def test_the_forbidden_imports_of_the_contract_are_absent() -> None:
    edges = graph()
    broken = []
    for contract in (c for c in _contracts() if c["type"] == "forbidden"):
        for importer, targets in edges.items():
            if not any(importer.startswith(s) for s in contract["source_modules"]):
                continue
            for target in targets:
                if any(target.startswith(f) for f in contract["forbidden_modules"]):
                    broken.append(f"{contract['name']}: {importer} -> {target}")
    assert not broken, "\n".join(broken)


def test_the_checker_reads_late_imports_and_finds_a_cycle(tmp_path: Path) -> None:
    """The tools above would pass on anything if they read no import: a late
    import closing a cycle is found, and a lazy reason comment is read."""
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    (component,) = strongly_connected(edges)
    assert component == ["a", "b", "c"]
    assert a_cycle(edges, component) == ["a", "b", "c", "a"]
    tree = ast.parse("import x\ndef f():\n    import y  # why\n")
    assert sorted((n.lineno, inside) for n, inside in _scopes(tree)) == [(1, False), (3, True)]
