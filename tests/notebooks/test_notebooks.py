"""Every tutorial in notebooks/ runs top to bottom in the suite, and is
committed executed (its outputs read on a repository page)."""

from pathlib import Path

import nbformat
import pytest
from nbclient.exceptions import CellExecutionError

from .runner import execute, notebooks

NOTEBOOKS = notebooks()


def test_the_tutorials_are_there():
    names = [p.name[:2] for p in NOTEBOOKS]
    assert names[:5] == ["01", "02", "03", "04", "05"], names


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs_top_to_bottom(path: Path):
    nb = nbformat.read(path, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code and all(c.get("outputs") is not None for c in code)
    assert any(c.outputs for c in code), f"{path.name} is committed without outputs"
    execute(nb)


def test_a_raising_cell_fails(tmp_path):
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell("x = 1"),
        nbformat.v4.new_code_cell("raise ValueError('boom')"),
    ]
    with pytest.raises(CellExecutionError, match="boom"):
        execute(nb, tmp_path)
