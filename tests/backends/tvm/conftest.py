"""Fixtures shared by the TVM backend's tests."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).parents[3] / "examples"


@pytest.fixture(scope="session")
def runner(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The C++ runner (examples/cpp/run_model.cc) built once for the session:
    a g++ build of it costs about 25 s of CPU, and three test modules run it."""
    build = tmp_path_factory.mktemp("cpp")
    shutil.copy(EXAMPLES / "cpp" / "run_model.cc", build)
    shutil.copy(EXAMPLES / "cpp" / "Makefile", build)
    done = subprocess.run(
        ["make", "-s", f"PYTHON={sys.executable}"], cwd=build, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    return build / "run_model"
