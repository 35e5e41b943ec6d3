"""Writing the programs the command-line tests run."""

from pathlib import Path


def write(tmp_path: Path, name: str, text: str) -> str:
    """``text`` written to ``tmp_path/name``; the path, as the CLI takes it."""
    path = tmp_path / name
    path.write_text(text)
    return str(path)
