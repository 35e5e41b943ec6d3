"""Source text, spans, and the errors users see.

Every user-facing error in effir is an `Error` that can point at a place in a
source file; its string shows ``file:line:col``, the message, the source line
and a caret, as compilers do, so a user never has to read a traceback.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field


class Source:
    """A named source text; converts character offsets to lines and columns."""

    __slots__ = ("name", "text", "_line_starts")

    def __init__(self, name: str, text: str) -> None:
        self.name = name
        self.text = text
        self._line_starts: list[int] | None = None

    def _starts(self) -> list[int]:
        if self._line_starts is None:
            starts = [0]
            find = self.text.find
            pos = find("\n")
            while pos >= 0:
                starts.append(pos + 1)
                pos = find("\n", pos + 1)
            self._line_starts = starts
        return self._line_starts

    def line_col(self, offset: int) -> tuple[int, int]:
        """1-based line and column of a character offset."""
        starts = self._starts()
        index = bisect.bisect_right(starts, offset) - 1
        return index + 1, offset - starts[index] + 1

    def line_text(self, line: int) -> str:
        starts = self._starts()
        if not 1 <= line <= len(starts):
            return ""
        begin = starts[line - 1]
        end = starts[line] - 1 if line < len(starts) else len(self.text)
        return self.text[begin:end].removesuffix("\r")


@dataclass(frozen=True, slots=True)
class Span:
    """A half-open character range [start, end) in a source."""

    source: Source = field(compare=False, repr=False)
    start: int
    end: int

    @property
    def line(self) -> int:
        return self.source.line_col(self.start)[0]

    @property
    def column(self) -> int:
        return self.source.line_col(self.start)[1]

    def __str__(self) -> str:
        line, col = self.source.line_col(self.start)
        return f"{self.source.name}:{line}:{col}"


class Error(Exception):
    """Base class of every error effir reports to its users."""

    kind = "error"

    def __init__(self, message: str, span: Span | None = None, notes: tuple[str, ...] = ()):
        self.message = message
        self.span = span
        self.notes = tuple(notes)
        super().__init__(self._render())

    @property
    def location(self) -> str:
        return str(self.span) if self.span is not None else "<unknown>"

    @property
    def line(self) -> int | None:
        return self.span.line if self.span is not None else None

    @property
    def column(self) -> int | None:
        return self.span.column if self.span is not None else None

    @property
    def source_name(self) -> str | None:
        return self.span.source.name if self.span is not None else None

    def _render(self) -> str:
        if self.span is None:
            text = f"{self.kind}: {self.message}"
        else:
            text = f"{self.span}: {self.kind}: {self.message}\n{caret_excerpt(self.span)}"
        for note in self.notes:
            text += f"\nnote: {note}"
        return text

    def __str__(self) -> str:
        return self._render()


class ParseError(Error):
    """Malformed program text: the only exception the parser raises."""

    kind = "parse error"
    unknown: tuple[str, str] | None = None
    """For a name the text uses without defining it: its kind ("type",
    "global", ...) and the name (the parser then tries the prelude)."""


class WellFormedError(Error):
    """A program that parses (or was built in Python) but breaks an IR invariant."""

    kind = "well-formedness error"


class AttrError(Error):
    """An operator attribute that is unknown, missing or of the wrong kind."""

    kind = "attribute error"


class TypeCheckError(Error):
    """An ill-typed program (exported as ``effir.TypeError``). When the checker
    found several errors, ``errors`` holds each one (this error is the first)."""

    kind = "type error"

    def __init__(self, message: str, span: Span | None = None, notes: tuple[str, ...] = ()):
        super().__init__(message, span, notes)
        self.errors: tuple[TypeCheckError, ...] = (self,)

    @staticmethod
    def combine(errors: list[TypeCheckError]) -> TypeCheckError:
        """One exception carrying every error; its text lists them all."""
        first = errors[0]
        if len(errors) == 1:
            return first
        combined = TypeCheckError(first.message, first.span, first.notes)
        combined.errors = tuple(errors)
        combined.args = ("\n".join(e._render() for e in errors),)
        return combined

    def __str__(self) -> str:
        return "\n".join(e._render() for e in self.errors)


class EffectError(Error):
    """A function whose inferred effects exceed its type's effect annotation."""

    kind = "effect error"


class EvalError(Error):
    """A run-time error of the reference interpreter, naming the operator or
    construct and the source location where it happened."""

    kind = "runtime error"


class ArgumentError(EvalError):
    """An argument that does not fit its parameter, or a call that binds
    its arguments wrongly: the same error from the interpreter, a compiled
    module and a loaded artifact (effir/runtime/arguments.py)."""


def caret_excerpt(span: Span) -> str:
    """The source line of a span with a caret (and tildes) under it."""
    line, col = span.source.line_col(span.start)
    end_line, end_col = span.source.line_col(max(span.start, span.end - 1))
    width = max(1, end_col - col + 1) if end_line == line else 1
    shown = span.source.line_text(line).expandtabs(1)
    if len(shown) > 200:  # keep a long (or minified) line readable around the error
        lo = max(0, col - 100)
        shown = ("..." if lo else "") + shown[lo : lo + 200]
        col = col - lo + (3 if lo else 0)
    width = min(width, max(1, len(shown) - col + 1))
    printable = "".join(ch if ch.isprintable() else "?" for ch in shown)
    return f"  {printable}\n  {' ' * (col - 1)}^{'~' * (width - 1)}"


class PassError(Error):
    """A pipeline problem: an unknown pass, an unmet requirement, or a pass
    whose output broke an invariant (a bug of that pass)."""

    kind = "pass error"


class MissingRuleError(PassError, NotImplementedError):
    """A functor (``ExprFunctor``, ``Evaluator``) reached a node class it has
    no rule for: a bug of that pass, named with the node class."""


class LinearityError(Error):
    """A state-passing (A2) program that reuses a PRNG key or the world token,
    or drops new state (``effir.passes.analyses.verify_linear``)."""

    kind = "linearity error"
    rule = "use"
    """Which rule: "use" (a key or the world token used twice, or the world
    token dropped), "drop" (new state dropped), "shape" (a state-passing
    signature or return)."""


class FrontendError(Error):
    """Python code that the frontend (``effir.script``, ``effir.trace``, the
    builder) cannot turn into effir: located at the Python file, line and
    column, with a one-line ``hint`` of what to write instead."""

    kind = "frontend error"

    def __init__(
        self,
        message: str,
        span: Span | None = None,
        notes: tuple[str, ...] = (),
        hint: str | None = None,
    ):
        self.hint = hint
        super().__init__(message, span, notes)

    def _render(self) -> str:
        text = super()._render()
        return f"{text}\nhint: {self.hint}" if self.hint else text
