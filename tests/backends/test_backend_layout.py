"""The TVM backend's layout by stage (docs/architecture.md): the rest of
effir reaches it through ``driver/`` and ``runtime/`` only, and nothing in
it imports the frontend. Imports written inside functions count too."""

from __future__ import annotations

import ast
from pathlib import Path

import effir

PACKAGE = Path(effir.__file__).parent
BACKEND = "effir.backends.tvm"
ENTRY_STAGES = ("driver", "runtime")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path) -> list[tuple[int, str]]:
    """Every module ``path`` imports (``from X import y`` gives X and X.y),
    with its line."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[: len(parts) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            found.append((node.lineno, base))
            found += [(node.lineno, f"{base}.{a.name}") for a in node.names]
    return found


def _sources() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def test_outside_the_backend_only_driver_and_runtime_are_imported() -> None:
    bad = []
    for path in _sources():
        if _module_name(path).startswith(BACKEND):
            continue
        for line, module in _imports(path):
            if not module.startswith(BACKEND + "."):
                continue
            stage = module[len(BACKEND) + 1 :].split(".")[0]
            if stage not in ENTRY_STAGES:
                bad.append(f"{path.relative_to(PACKAGE.parent)}:{line} imports {module}")
    assert not bad, "\n".join(bad)


def test_the_backend_does_not_import_the_frontend() -> None:
    bad = [
        f"{path.relative_to(PACKAGE.parent)}:{line} imports {module}"
        for path in _sources()
        if _module_name(path).startswith(BACKEND)
        for line, module in _imports(path)
        if module == "effir.frontend" or module.startswith("effir.frontend.")
    ]
    assert not bad, "\n".join(bad)


def test_the_pass_registry_names_a_driver_module() -> None:
    from effir.passes.registry import BUILTIN_PASS_MODULES

    for module in BUILTIN_PASS_MODULES:
        if module.startswith(BACKEND + "."):
            assert module[len(BACKEND) + 1 :].split(".")[0] in ENTRY_STAGES, module
