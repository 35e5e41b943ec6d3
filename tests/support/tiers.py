"""The suite's tiers, as pytest markers (registered in pyproject.toml):

- ``tvm``: the test builds with TVM. Every test under tests/backends/tvm is one;
  elsewhere a module says ``pytestmark = pytest.mark.tvm`` (or a test carries
  the mark).
- ``notebook``: runs a tutorial (every test under tests/notebooks).
- ``slow``: takes more than a few seconds without TVM.
- ``nightly``: a long run (the fuzzers at full count); deselected by default
  (``addopts``), run by ``make nightly``.

When the ``-m`` expression can select no ``tvm`` test (``make test-fast``),
the modules that are TVM's are not even imported, and an import of TVM by any
other test fails that test with the mark it lacks: the fast tier stays fast
because nothing loads TVM by accident. The same holds for notebooks.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import itertools
import re
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest
from _pytest.mark.expression import Expression

TIERS = ("tvm", "slow", "nightly", "notebook")
TESTS = Path(__file__).resolve().parents[1]
# Whole directories of one tier: their tests get the mark without saying so.
DIRECTORY_TIERS = {TESTS / "backends" / "tvm": "tvm", TESTS / "notebooks": "notebook"}
BLOCKED_MODULES = ("tvm", "tvm_ffi")
_MODULE_MARK = re.compile(r"^pytestmark\s*=.*\bpytest\.mark\.(\w+)", re.MULTILINE)


def may_select(config: pytest.Config, tier: str) -> bool:
    """Whether the ``-m`` expression selects some test marked ``tier``, whatever
    other tier marks it has: when it selects none, the tier's modules need not
    be imported."""
    text = config.getoption("markexpr", "") or ""
    if not text:
        return True
    expression = Expression.compile(text)
    others = [t for t in TIERS if t != tier]
    for chosen in itertools.product((False, True), repeat=len(others)):
        marks = {tier, *(t for t, on in zip(others, chosen, strict=True) if on)}
        if expression.evaluate(lambda name, /, marks=marks, **_: name in marks):
            return True
    return False


def module_tiers(path: Path) -> set[str]:
    """The tiers of a test module, read without importing it: its directory's
    and those of its ``pytestmark`` line."""
    tiers = {tier for root, tier in DIRECTORY_TIERS.items() if path.is_relative_to(root)}
    if path.suffix == ".py" and path.name.startswith("test_"):
        tiers.update(m for m in _MODULE_MARK.findall(path.read_text()) if m in TIERS)
    return tiers


class TierError(RuntimeError):
    """A test does what its tier marks say it does not (it uses TVM unmarked)."""


def check_tvm_allowed(what: str) -> None:
    """Raise when this run selects no ``tvm`` test: ``what`` needs TVM."""
    if _GUARD in sys.meta_path:
        raise TierError(
            f"this run selects no TVM test, yet a test {what}: "
            "mark the test (or its module) with pytest.mark.tvm"
        )


class _TierImportGuard(importlib.abc.MetaPathFinder):
    """Fails an import of TVM in a run that selects no ``tvm`` test. (Not an
    ImportError, which code that makes TVM optional would catch.)"""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: object = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname.split(".")[0] in BLOCKED_MODULES:
            check_tvm_allowed(f"imports {fullname!r}")
        return None


_GUARD = _TierImportGuard()


def pytest_configure(config: pytest.Config) -> None:
    if not may_select(config, "tvm") and _GUARD not in sys.meta_path:
        sys.meta_path.insert(0, _GUARD)


def pytest_unconfigure(config: pytest.Config) -> None:
    if _GUARD in sys.meta_path:
        sys.meta_path.remove(_GUARD)


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """Skip, unimported, a directory or module of a tier the run cannot select."""
    path = collection_path.resolve()
    for root, tier in DIRECTORY_TIERS.items():
        if path == root and not may_select(config, tier):
            return True
    if path.is_file() and any(not may_select(config, t) for t in module_tiers(path)):
        return True
    return None


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark the tests of a tier's directory before ``-m`` deselects (tryfirst)."""
    for item in items:
        path = Path(str(item.path)).resolve()
        for root, tier in DIRECTORY_TIERS.items():
            if path.is_relative_to(root):
                item.add_marker(tier)


def suite_and_nightly(suite: object, nightly: object) -> list[object]:
    """Parameters of a test that runs at ``suite``'s size in the suite and at
    ``nightly``'s in the nightly tier (``@pytest.mark.parametrize``)."""
    return [
        pytest.param(suite, id="suite"),
        pytest.param(nightly, id="nightly", marks=pytest.mark.nightly),
    ]
