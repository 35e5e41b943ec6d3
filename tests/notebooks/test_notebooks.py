"""Every tutorial in notebooks/ runs top to bottom in the suite, and is
committed executed (its outputs read on a repository page). A notebook
whose metadata says ``"effir": {"reproducible_outputs": true}`` (the
Getting-started one) must show, on standard output and as results, what a
fresh run shows: its committed outputs are not stale."""

from pathlib import Path

import nbformat
import pytest
from nbclient.exceptions import CellExecutionError

from .runner import NOTEBOOKS_DIR, execute, notebooks

NOTEBOOKS = notebooks()


def test_the_tutorials_are_there():
    names = [p.name[:2] for p in NOTEBOOKS]
    assert names[:6] == ["00", "01", "02", "03", "04", "05"], names


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs_top_to_bottom(path: Path):
    nb = nbformat.read(path, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code and all(c.get("outputs") is not None for c in code)
    assert any(c.outputs for c in code), f"{path.name} is committed without outputs"
    problem = run_and_compare(nb)
    assert problem is None, f"{path.name}: {problem}"


def run_and_compare(nb: nbformat.NotebookNode, cwd: Path | None = None) -> str | None:
    """Execute ``nb``; for a notebook that declares reproducible outputs,
    the first code cell whose committed output a fresh run does not repeat."""
    committed = [shown(c) for c in nb.cells if c.cell_type == "code"]
    execute(nb, cwd or NOTEBOOKS_DIR)
    if not nb.metadata.get("effir", {}).get("reproducible_outputs"):
        return None
    fresh = [shown(c) for c in nb.cells if c.cell_type == "code"]
    for i, (old, new) in enumerate(zip(committed, fresh, strict=True)):
        if old != new:
            return f"code cell {i}: committed {old!r}, a fresh run shows {new!r}"
    return None


def shown(cell: nbformat.NotebookNode) -> list[str]:
    """What a code cell shows that a fresh run must repeat: its standard
    output and results as text (standard error carries progress lines and
    timings, which differ from run to run)."""
    texts = []
    for output in cell.outputs:
        if output.output_type == "stream" and output.name == "stdout":
            texts.append(output.text)
        elif output.output_type in ("execute_result", "display_data"):
            texts.append(output.get("data", {}).get("text/plain", ""))
        elif output.output_type == "error":
            texts.append(f"{output.ename}: {output.evalue}")
    return ["".join(texts)]


def test_a_stale_committed_output_is_caught(tmp_path):
    def notebook(committed: str) -> nbformat.NotebookNode:
        nb = nbformat.v4.new_notebook(metadata={"effir": {"reproducible_outputs": True}})
        cell = nbformat.v4.new_code_cell("print(1 + 1)")
        cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=committed)]
        nb.cells = [cell]
        return nb

    assert run_and_compare(notebook("2\n"), tmp_path) is None
    problem = run_and_compare(notebook("3\n"), tmp_path)
    assert problem == "code cell 0: committed ['3\\n'], a fresh run shows ['2\\n']"


def test_a_raising_cell_fails(tmp_path):
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell("x = 1"),
        nbformat.v4.new_code_cell("raise ValueError('boom')"),
    ]
    with pytest.raises(CellExecutionError, match="boom"):
        execute(nb, tmp_path)
