"""Test modules import shared helpers from tests/support, never each other:
importing a test module runs its module-level set-up, and ties one file's
refactoring to another's."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent

REGISTRY_READERS = {
    "tests/frontend/test_hint_sites.py": (
        "reads the hint modules' HINTS_APPLIED, which name their tests, to check "
        "that together they apply every hint the frontend gives"
    ),
}
"""The modules whose job is to read other test modules' tables of their own
tests, each with why; no other module imports a test module."""


def imported_modules(source: str, package: tuple[str, ...]) -> set[str]:
    """The absolute names of the modules that ``source``, a module of
    ``package``, imports (``from p import x`` counts ``p`` and ``p.x``, which
    may be a module)."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            base = list(package[: len(package) - node.level + 1]) if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            found.update([module, *(f"{module}.{a.name}" for a in node.names)])
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
    return found


def test_no_module_of_the_suite_imports_a_test_module() -> None:
    offenders = []
    for path in sorted(TESTS.rglob("*.py")):
        if path.relative_to(TESTS.parent).as_posix() in REGISTRY_READERS:
            continue
        parts = path.relative_to(TESTS.parent).with_suffix("").parts
        for module in imported_modules(path.read_text(), parts[:-1]):
            if module != ".".join(parts) and module.rpartition(".")[2].startswith("test_"):
                offenders.append(f"{path.relative_to(TESTS.parent)} imports {module}")
    assert not offenders, "move what they share to tests/support:\n" + "\n".join(offenders)


def test_the_check_sees_absolute_and_relative_imports() -> None:
    source = "from .test_a import x\nfrom ..ir import test_b\nimport tests.cli.test_c\n"
    assert {"tests.passes.test_a", "tests.ir.test_b", "tests.cli.test_c"} <= imported_modules(
        source, ("tests", "passes")
    )


def test_every_registry_reader_exists() -> None:
    missing = [p for p in REGISTRY_READERS if not (TESTS.parent / p).exists()]
    assert not missing, f"stale entries: {missing}"
