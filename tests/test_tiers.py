"""The suite's tiers (tests/support/tiers.py): the ``-m`` expression decides
which tier's modules are imported, and a run that selects no ``tvm`` test
refuses an import of TVM by a test that is not marked."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.support.isolated import ROOT
from tests.support.tiers import may_select


class _Config:
    """The one option ``may_select`` reads."""

    def __init__(self, markexpr: str) -> None:
        self.markexpr = markexpr

    def getoption(self, name: str, default: object = None) -> object:
        assert name == "markexpr"
        return self.markexpr


@pytest.mark.parametrize(
    "expression,selects_tvm,selects_notebook",
    [
        ("", True, True),
        ("not nightly", True, True),
        ("not tvm and not notebook and not nightly", False, False),
        ("nightly", True, True),
        ("not tvm", False, True),
        ("tvm and not nightly", True, True),  # a test may carry both marks
        ("not tvm and notebook", False, True),
    ],
)
def test_which_tiers_an_expression_may_select(
    expression: str, selects_tvm: bool, selects_notebook: bool
) -> None:
    config = _Config(expression)
    assert may_select(config, "tvm") is selects_tvm  # type: ignore[arg-type]
    assert may_select(config, "notebook") is selects_notebook  # type: ignore[arg-type]


def _run_pytest(tmp_path: Path, expression: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "tests.support.tiers", "-m", expression, "-rfE"],
        cwd=tmp_path,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_a_run_without_tvm_neither_imports_its_modules_nor_lets_a_test_import_it(
    tmp_path: Path,
) -> None:
    (tmp_path / "test_builds.py").write_text(
        textwrap.dedent(
            """
            import pytest

            pytestmark = pytest.mark.tvm
            raise SystemExit("a tvm module was imported")
            """
        )
    )
    (tmp_path / "test_plain.py").write_text(
        textwrap.dedent(
            """
            def test_plain():
                assert 1 + 1 == 2

            def test_unmarked_import():
                import tvm
            """
        )
    )
    done = _run_pytest(tmp_path, "not tvm and not notebook")
    assert "a tvm module was imported" not in done.stdout + done.stderr
    assert "1 failed, 1 passed" in done.stdout, done.stdout + done.stderr
    assert (
        "this run selects no TVM test, yet a test imports 'tvm': mark the test "
        "(or its module) with pytest.mark.tvm"
    ) in done.stdout


def test_a_run_that_may_select_tvm_imports_its_modules(tmp_path: Path) -> None:
    (tmp_path / "test_builds.py").write_text(
        "import pytest\n\npytestmark = pytest.mark.tvm\n\n\ndef test_one():\n    pass\n"
    )
    done = _run_pytest(tmp_path, "tvm")
    assert "1 passed" in done.stdout, done.stdout + done.stderr
