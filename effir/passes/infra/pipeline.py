"""Pipelines written as text, and the standard pipelines.

``pipeline("explicate,state-passing,fuse{max-fused-ops=32}")`` gives a
``Sequential``; ``effir opt -p``, ``effir.compile(pipeline=...)`` and the
transform tests use the same text. Each item is a registered pass's name
(passes register themselves where they are defined: transform.py) with, as
MLIR writes them, options in braces (``name=value``, separated by spaces or
commas), or a standard pipeline's name (``O2``). Every mistake (an unknown
pass, an unknown option, a value of the wrong type) is a ``PassError``
located in the text.
"""

from __future__ import annotations

import difflib

from effir.ir.diagnostics import Source, Span
from effir.ir.module import IRModule
from effir.passes.infra.transform import (
    Pass,
    PassContext,
    PassError,
    Sequential,
    lookup_pass,
    register_pipeline_reader,
    registered_passes,
)

STANDARD_PIPELINES = {
    "O0": "",
    "O1": "explicate,state-passing",
    "O2": "explicate,state-passing,partial-eval,simplify,cse,dce",
}
"""What ``opt_level`` 0, 1 and 2 select (``effir opt -O2``,
``PassContext(opt_level=2)``, ``effir.compile(opt_level=2)``): nothing, the
effect passes, then (2) partial evaluation and the basic-block
optimisations."""

_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.")


def standard_pipeline(opt_level: int | None = None) -> Sequential:
    """The standard pipeline of ``opt_level`` (default: the current
    context's)."""
    level = PassContext.current().opt_level if opt_level is None else opt_level
    if f"O{level}" not in STANDARD_PIPELINES or isinstance(level, bool):
        raise PassError(f"opt_level must be 0, 1 or 2, not {level!r}")
    return pipeline(f"O{level}")


def pipeline(text: str | None = None, name: str = "pipeline") -> Sequential:
    """The passes a pipeline text names, in order (see the module's
    docstring); without text, the current context's standard pipeline."""
    if text is None:
        return standard_pipeline()
    return Sequential(_Reader(text).items(), name=name, doc=text.strip())


class _Reader:
    """A hand-written scanner: one pass over the text, located errors."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.source = Source("<pipeline>", text)
        self.pos = 0

    def error(self, message: str, start: int, end: int | None = None, note: str = "") -> PassError:
        span = Span(self.source, start, max(end if end is not None else start + 1, start + 1))
        return PassError(message, span, (note,) if note else ())

    def skip_spaces(self) -> None:
        while self.pos < len(self.text) and self.text[self.pos].isspace():
            self.pos += 1

    def word(self, stop: str) -> tuple[str, int]:
        start = self.pos
        while self.pos < len(self.text) and self.text[self.pos] not in stop:
            if self.text[self.pos].isspace():
                break
            self.pos += 1
        return self.text[start : self.pos], start

    def items(self) -> list[Pass]:
        items: list[Pass] = []
        text = self.text
        if not text.strip():
            raise self.error("empty pass name in the pipeline ''", 0)
        while True:
            self.skip_spaces()
            start = self.pos
            while self.pos < len(text) and text[self.pos] in _NAME_CHARS:
                self.pos += 1
            name = text[start : self.pos]
            if not name:
                if self.pos < len(text) and text[self.pos] in ",{}" or self.pos == len(text):
                    raise self.error(f"empty pass name in the pipeline {text.strip()!r}", start)
                raise self.error(f"unexpected {text[self.pos]!r} in the pipeline", self.pos)
            standard = name.lstrip("-")
            if standard in STANDARD_PIPELINES:
                body = STANDARD_PIPELINES[standard]
                items += list(pipeline(body)) if body else []
                self.skip_spaces()
                if self.pos < len(text) and text[self.pos] == "{":
                    raise self.error(
                        f"{standard} is a standard pipeline: it takes no options", start
                    )
            else:
                try:
                    p = lookup_pass(name)
                except PassError as err:
                    raise self.error(
                        err.message, start, self.pos, note=_did_you_mean(name)
                    ) from None
                self.skip_spaces()
                if self.pos < len(text) and text[self.pos] == "{":
                    p = self.options(p)
                items.append(p)
            self.skip_spaces()
            if self.pos == len(text):
                return items
            if text[self.pos] != ",":
                raise self.error(f"expected ',' between passes, found {text[self.pos]!r}", self.pos)
            self.pos += 1

    def options(self, p: Pass) -> Pass:
        """``{name=value ...}`` after a pass's name: the pass with them set."""
        text = self.text
        brace = self.pos
        self.pos += 1
        values: dict[str, object] = {}
        while True:
            self.skip_spaces()
            if self.pos < len(text) and text[self.pos] == ",":
                self.pos += 1
                continue
            if self.pos == len(text):
                raise self.error(f"unclosed '{{' of the options of pass {p.name}", brace)
            if text[self.pos] == "}":
                self.pos += 1
                return p.with_options(**values) if values else p
            key, key_start = self.word("=,{}")
            if not key:
                raise self.error(f"expected an option name, found {text[self.pos]!r}", self.pos)
            try:
                option = p.option(key)
            except PassError as err:
                raise self.error(err.message, key_start, self.pos) from None
            if self.pos >= len(text) or text[self.pos] != "=":
                raise self.error(
                    f"expected '=' and a value after option {key} of pass {p.name}", self.pos
                )
            self.pos += 1
            value, value_start = self.word(",{}")
            try:
                values[option.name] = option.parse(value)
            except ValueError as err:
                raise self.error(
                    f"option {option.text_name} of pass {p.name}: {err}", value_start, self.pos
                ) from None


def _did_you_mean(name: str) -> str:

    close = difflib.get_close_matches(name, list(registered_passes()), n=1)
    return f"did you mean {close[0]}?" if close else ""


def run_pipeline(module: IRModule, text: str, context: PassContext | None = None) -> IRModule:
    """``module`` after each pass of the pipeline ``text``, in order."""
    return pipeline(text)(module, context)


register_pipeline_reader(pipeline)
