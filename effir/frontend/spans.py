"""Spans that point at Python source: the line of user code that built a
node (the builder, ``effir.trace``) or the AST node it came from
(``@effir.script``), so that effir's errors name the Python line."""

from __future__ import annotations

import linecache
import os
import sys
import threading

from ..ir.diagnostics import Source, Span

_SOURCES: dict[str, Source] = {}
_LOCAL = threading.local()
PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def python_source(filename: str) -> Source:
    """The whole Python file as an effir ``Source`` (cached per file name;
    ``linecache`` also knows sources registered for generated code)."""
    source = _SOURCES.get(filename)
    if source is None:
        source = Source(filename, "".join(linecache.getlines(filename)))
        _SOURCES[filename] = source
    return source


def python_span(filename: str, line: int, col: int = 0, end_col: int | None = None) -> Span:
    """A span at 1-based ``line`` and 0-based ``col`` of a Python file."""
    source = python_source(filename)
    starts = source._starts()
    if not 1 <= line <= len(starts):
        return Span(source, 0, 0)
    start = starts[line - 1] + col
    end = starts[line - 1] + end_col if end_col is not None and end_col > col else start + 1
    return Span(source, start, end)


def line_span(filename: str, line: int) -> Span:
    """A span over the code of one Python line (its indentation left out)."""
    text = python_source(filename).line_text(line)
    indent = len(text) - len(text.lstrip())
    return python_span(filename, line, indent, len(text.rstrip()))


class span_scope:  # used as a function: ``with span_scope(span):``
    """Nodes built inside carry ``span`` (the script converter's AST node)
    instead of the calling Python line. A class, not a generator: the
    converter enters one per AST node."""

    __slots__ = ("span",)

    def __init__(self, span: Span | None) -> None:
        self.span = span

    def __enter__(self) -> None:
        _stack().append(self.span)

    def __exit__(self, *exc: object) -> None:
        _stack().pop()


def _stack() -> list[Span | None]:
    stack = getattr(_LOCAL, "spans", None)
    if stack is None:
        stack = _LOCAL.spans = []
    return stack


def current_span() -> Span | None:
    """The span a node built now should carry: the innermost ``span_scope``,
    else the first Python frame outside effir's own package."""
    stack = _stack()
    if stack and stack[-1] is not None:
        return stack[-1]
    return caller_span()


def caller_span() -> Span | None:
    """The line of the first Python frame outside effir's own package (where
    user code is running now, whatever node is being converted)."""
    frame = sys._getframe(1)
    while frame is not None:
        filename = frame.f_code.co_filename
        if not os.path.abspath(filename).startswith(PACKAGE + os.sep):
            return line_span(filename, frame.f_lineno)
        frame = frame.f_back
    return None
