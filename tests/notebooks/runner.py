"""Executing the tutorials in notebooks/ headless, top to bottom.

nbclient runs each notebook in a fresh ipykernel of this very interpreter
(``sys.executable``, whatever kernels a user has installed: so the effir
under test) with notebooks/ as the working directory; a cell that raises stops the run
with a ``CellExecutionError`` that shows the cell and its traceback.
``python -m tests.notebooks.runner`` (``make notebooks``) executes them all
and saves their outputs in place.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import nbformat
from jupyter_client.kernelspec import KernelSpec
from jupyter_client.manager import KernelManager
from nbclient import NotebookClient

NOTEBOOKS_DIR = Path(__file__).parents[2] / "notebooks"
CELL_TIMEOUT_S = 300


def notebooks() -> list[Path]:
    return sorted(NOTEBOOKS_DIR.glob("*.ipynb"))


class ThisPythonKernel(KernelManager):
    """A kernel manager whose kernel is ipykernel on ``sys.executable``."""

    @property
    def kernel_spec(self) -> KernelSpec:
        return KernelSpec(
            argv=[sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
            display_name="Python 3 (effir)",
            language="python",
        )


def execute(nb: nbformat.NotebookNode, cwd: Path = NOTEBOOKS_DIR) -> nbformat.NotebookNode:
    """Run every cell of ``nb`` in a fresh kernel; raise on the first error."""
    client = NotebookClient(
        nb,
        km=ThisPythonKernel(kernel_name="python3"),
        timeout=CELL_TIMEOUT_S,
        resources={"metadata": {"path": str(cwd)}},
    )
    client.execute()
    return nb


def main(paths: list[str]) -> int:
    for path in [Path(p) for p in paths] or notebooks():
        start = time.perf_counter()
        nb = nbformat.read(path, as_version=4)
        execute(nb, path.resolve().parent)
        nbformat.write(nb, path)
        print(f"{path}: executed in {time.perf_counter() - start:.1f} s, outputs saved")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
