"""The API reference (`make docs`: pdoc over effir's public API,
``effir.__all__``): every public name says what it is for, and the
reference builds without a warning where pdoc is installed (the ``docs``
extra, which `make test` installs)."""

from __future__ import annotations

import importlib.util
import inspect
import subprocess
import sys
from pathlib import Path

import pytest

import effir

ROOT = Path(__file__).parents[1]


def own_doc(obj: object) -> str:
    """The docstring ``obj`` has itself (a class's, not its base's; a
    value's, its type's)."""
    if inspect.ismodule(obj) or inspect.isclass(obj) or inspect.isroutine(obj):
        doc = obj.__doc__
    elif callable(obj) and getattr(obj, "__doc__", None):
        doc = obj.__doc__  # a decorated function object (ScriptFunction...)
    else:
        doc = type(obj).__doc__
    return (doc or "").strip()


@pytest.mark.parametrize("name", effir.__all__)
def test_every_public_name_has_a_docstring(name: str) -> None:
    assert own_doc(getattr(effir, name)), f"effir.{name} has no docstring"


@pytest.mark.skipif(importlib.util.find_spec("pdoc") is None, reason="pdoc: pip install -e .[docs]")
def test_the_api_reference_builds_without_warnings(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-W", "default", "-m", "pdoc", "-d", "restructuredtext"]
        + ["-o", str(tmp_path), "effir"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    assert "Warning" not in done.stderr, done.stderr
    page = (tmp_path / "effir.html").read_text(encoding="utf-8")
    for name in effir.__all__:
        if inspect.ismodule(getattr(effir, name)):  # a page of its own
            assert (tmp_path / "effir" / f"{name}.html").is_file(), name
        else:
            assert f'id="{name}"' in page, f"effir.{name} is not in the reference"
