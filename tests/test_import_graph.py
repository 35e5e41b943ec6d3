"""The import graph of effir, read with ast from every import statement at
any depth (inside functions and ``if TYPE_CHECKING:`` blocks included):
it keeps the layers of pyproject.toml's import contract, it has no cycle,
and an import inside a function delays a package that is lazy by design
(TVM, the optional model formats, Pygments), with a one-line reason.

A cycle hidden by an import written inside a function still ties the
modules together: neither can be understood, tested or moved without the
other. import-linter checks the same contract in `make test`; this test
needs nothing but the standard library."""

from __future__ import annotations

import ast
import re
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "effir"

# The packages that are lazy by design: slow or optional ones (TVM and its
# FFI, the model formats, Pygments), and the importers' converters, which
# load at the first model read rather than at `import effir`. An import
# inside a function must delay one of them: import it, or one of effir's
# modules that loads it at its top, where the importing module does not.
LAZY_PACKAGES = (
    "tvm",
    "tvm_ffi",
    "torch",
    "onnx",
    "onnxruntime",
    "google.protobuf",
    "pygments",
    "effir.importers.onnx",
    "effir.importers.torch",
)


@dataclass(frozen=True)
class Import:
    """One imported name: who imports it, where, and whether inside a function."""

    importer: str
    target: str  # the module, resolved to one of effir's where it is effir's
    line: int
    in_function: bool
    reason: bool  # a comment on the line (or the line above) says why
    runs: bool  # False: only under ``if TYPE_CHECKING:``, never at run time


def module_files() -> dict[str, Path]:
    """Every module of effir by its dotted name (a package by its __init__)."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _scopes(tree: ast.AST) -> Iterator[tuple[ast.stmt, bool, bool]]:
    """Every import statement of ``tree``, whether it is inside a function,
    and whether it runs (not only under ``if TYPE_CHECKING:``); an explicit
    stack: no recursion."""
    stack: list[tuple[ast.AST, bool, bool]] = [(tree, False, True)]
    while stack:
        node, in_function, runs = stack.pop()
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node, in_function, runs
        inner = in_function or isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
        checking = isinstance(node, ast.If) and _type_checking(node.test)
        stack.extend(
            (child, inner, runs and not (checking and child in node.body))
            for child in ast.iter_child_nodes(node)
        )


def _type_checking(test: ast.expr) -> bool:
    """``TYPE_CHECKING`` or ``typing.TYPE_CHECKING``."""
    name = test.attr if isinstance(test, ast.Attribute) else getattr(test, "id", None)
    return name == "TYPE_CHECKING"


def _says_why(line: str) -> bool:
    """Whether ``line`` has a comment that gives a reason: more than a
    ``noqa`` or a ``type: ignore`` for a tool."""
    _, hash_, comment = line.partition("#")
    return bool(hash_) and any(c.isalnum() for c in TOOL_COMMENT.sub("", comment))


TOOL_COMMENT = re.compile(r"noqa(:\s*[A-Z]+[0-9]+(,\s*[A-Z]+[0-9]+)*)?|type:\s*ignore(\[[^]]*\])?")


def imports(modules: dict[str, Path]) -> list[Import]:
    """Every import of every module, ``from a import b`` read as a.b where
    that is a module of effir."""
    found = []
    for name, path in modules.items():
        text = path.read_text()
        lines = text.splitlines()
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node, in_function, runs in _scopes(ast.parse(text)):
            first, last = lines[node.lineno - 1], lines[node.end_lineno - 1]
            above = lines[node.lineno - 2].strip()
            reason = (
                _says_why(first) or _says_why(last) or (above.startswith("#") and _says_why(above))
            )
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
                    Import(name, _resolve(target, modules), node.lineno, in_function, reason, runs)
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


def loaded_at_top(modules: dict[str, Path], found: list[Import]) -> dict[str, set[str]]:
    """What importing each module loads before any of its functions runs:
    its packages (importing ``a.b`` imports ``a`` first), itself, and what
    the imports at their tops load in turn (effir's modules, and other
    packages' modules by name); an explicit stack per module."""
    edges: dict[str, set[str]] = {name: set() for name in modules}
    for name in modules:
        package = name.rpartition(".")[0]
        if package in modules:
            edges[name].add(package)
    for imp in found:
        if not imp.in_function and imp.runs and imp.target != imp.importer:
            edges[imp.importer].add(imp.target)
    loads = {}
    for name in modules:
        seen, stack = {name}, [name]
        while stack:
            for target in edges.get(stack.pop(), ()):
                if target not in seen:
                    seen.add(target)
                    stack.append(target)
        loads[name] = seen
    return loads


def _lazy_packages_in(names: set[str]) -> set[str]:
    return {p for p in LAZY_PACKAGES for n in names if n == p or n.startswith(p + ".")}


def delayed(late: Import, loads: dict[str, set[str]]) -> set[str]:
    """The lazy packages that ``late`` loads and its importer has not loaded
    at its top: what writing it inside a function delays (nothing: it
    belongs at the top, and a cycle it closes is untied, not hidden)."""
    brings = loads.get(late.target, {late.target})
    return _lazy_packages_in(brings) - _lazy_packages_in(loads[late.importer])


def late_import_errors(modules: dict[str, Path]) -> list[str]:
    """Every import inside a function that delays no lazy package, or that
    has no comment saying why."""
    found = imports(modules)
    loads = loaded_at_top(modules, found)
    errors = []
    for imp in sorted((i for i in found if i.in_function), key=lambda i: (i.importer, i.line)):
        where = f"{imp.importer}:{imp.line} imports {imp.target} inside a function"
        if not delayed(imp, loads):
            errors.append(f"{where}, which delays no lazy package: import it at the top")
        elif not imp.reason:
            errors.append(f"{where} without a one-line comment saying why")
    return errors


def test_imports_inside_functions_delay_a_lazy_package_and_say_why() -> None:
    errors = late_import_errors(module_files())
    assert not errors, "\n".join(errors)


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
    tree = ast.parse("import x\ndef f():\n    import y  # why\nif TYPE_CHECKING:\n    import z\n")
    assert sorted((n.lineno, inside, runs) for n, inside, runs in _scopes(tree)) == [
        (1, False, True),
        (3, True, True),
        (5, False, False),
    ]


def test_a_late_import_must_delay_a_lazy_package_and_say_why(tmp_path: Path) -> None:
    """What a module loads at its top (itself, its package, the modules it
    imports) a late import does not delay; an import under ``if
    TYPE_CHECKING:`` loads nothing; a late import of an effir module that
    loads TVM, with a reason, is what the rule allows; a ``noqa`` is no reason."""
    files = {
        "pkg/__init__.py": "",
        "pkg/heavy.py": "import tvm\n\ndef f():\n    from tvm import relax  # lazy: TVM\n",
        "pkg/light.py": "from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n    import torch\n",
        "pkg/sub/__init__.py": "import onnx\n",
        "pkg/sub/tool.py": "def f():\n    import onnx.helper  # lazy: onnx\n",
        "pkg/user.py": (
            "from . import light\n\n\n"
            "def f():\n    import torch  # lazy: torch\n    from . import heavy  # lazy: TVM\n\n\n"
            "def g():\n    from . import light  # to dodge a cycle\n\n\n"
            "def h():\n    import onnx  # noqa: F401\n"
        ),
    }
    modules = {}
    for relative, text in files.items():
        path = tmp_path / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        modules[relative.removesuffix(".py").removesuffix("/__init__").replace("/", ".")] = path
    delays_nothing = "inside a function, which delays no lazy package: import it at the top"
    assert late_import_errors(modules) == [
        f"pkg.heavy:4 imports tvm {delays_nothing}",
        f"pkg.sub.tool:2 imports onnx.helper {delays_nothing}",
        f"pkg.user:10 imports pkg.light {delays_nothing}",
        "pkg.user:14 imports onnx inside a function without a one-line comment saying why",
    ]
