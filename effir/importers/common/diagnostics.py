"""Errors located at a node of the model being imported.

A model file is not text, so there is no line of it to point at. An
importer lists the model instead, one line per node (``Listing``), and
locates every error, and every IR node it builds, at its node's line: an
error prints as a compiler's does (``model.onnx:12:3: import error: ...``
with the node's line and a caret), and a type error effir finds later in
the imported program points at the node it came from.
"""

from __future__ import annotations

from ...ir.diagnostics import Error, Source, Span


class ModelImportError(Error):
    """A model that cannot be imported, and why; located at its node.
    ``node`` names the node (its index, name, operator and opset) once the
    message says it."""

    kind = "import error"

    def __init__(self, message: str, span=None, notes=(), node: str | None = None) -> None:
        super().__init__(message, span, notes)
        self.node = node


class Listing:
    """The lines of a model's listing, added in order, then one ``Source``
    (``finish``) whose lines the ``span`` of each added line points at."""

    __slots__ = ("_lines", "_starts", "_source")

    def __init__(self) -> None:
        self._lines: list[str] = []
        self._starts: list[int] = []
        self._source: Source | None = None

    def add(self, text: str) -> int:
        """Add a line (no newline in it); its number, for ``span``."""
        offset = self._starts[-1] + len(self._lines[-1]) + 1 if self._lines else 0
        self._lines.append(text.replace("\n", " "))
        self._starts.append(offset)
        return len(self._lines) - 1

    def finish(self, name: str) -> Source:
        self._source = Source(name, "\n".join(self._lines) + "\n")
        return self._source

    def span(self, line: int) -> Span:
        """The span of line ``line``'s text, past its indentation."""
        assert self._source is not None, "Listing.span before finish"
        text = self._lines[line]
        start = self._starts[line] + len(text) - len(text.lstrip())
        return Span(self._source, start, self._starts[line] + len(text))
