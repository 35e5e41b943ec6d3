"""The TVM backend's layout by stage (docs/architecture.md): the rest of
effir reaches it through ``driver/`` and ``runtime/`` only, and nothing in
it imports the frontend; the importers make IR without a backend or the
frontend. Imports written inside functions count too."""

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
    from effir.passes.infra.registry import BUILTIN_PASSES

    for definition in BUILTIN_PASSES.values():
        module = definition.partition(":")[0]
        if module.startswith(BACKEND + "."):
            assert module[len(BACKEND) + 1 :].split(".")[0] in ENTRY_STAGES, module


IMPORTERS = "effir.importers"
BELOW_IMPORTERS = ("effir.ir", "effir.ops", "effir.passes", "effir.std", "effir.runtime")


def test_importers_import_only_the_layers_that_make_ir() -> None:
    """Importers produce IR, as the frontend does: from effir they import
    ir, ops, passes, std and runtime (and each other), never a backend or
    the frontend, and onnx only inside functions (``import effir`` needs
    no onnx)."""
    bad = []
    for path in _sources():
        if not _module_name(path).startswith(IMPORTERS):
            continue
        tree = ast.parse(path.read_text())
        top_level = {id(n) for n in tree.body}
        for line, module in _imports(path):
            if module.startswith("effir.") and not module.startswith((IMPORTERS, *BELOW_IMPORTERS)):
                bad.append(f"{path.relative_to(PACKAGE.parent)}:{line} imports {module}")
        for node in tree.body:
            if isinstance(node, ast.Import | ast.ImportFrom) and id(node) in top_level:
                names = (
                    [a.name for a in node.names]
                    if isinstance(node, ast.Import)
                    else [node.module or ""]
                )
                if any(n.split(".")[0] in ("onnx", "onnxruntime", "torch") for n in names):
                    bad.append(
                        f"{path.relative_to(PACKAGE.parent)}:{node.lineno} imports {names} at load"
                    )
    assert not bad, "\n".join(bad)
