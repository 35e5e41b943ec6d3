"""The options of a pass: the fields of its dataclass.

A pass is a frozen dataclass (``effir.passes.infra.transform``); each field is an
option, written ``max-fused-ops=32`` in pipeline text. ``option(default,
doc, minimum=...)`` declares one with its documentation, as xDSL's
``ModulePass`` fields declare theirs; a plain default works too.
``options_of(cls)`` reads them back (name, type, default, doc), once per
class: nothing is found by inspecting a function's signature.
"""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass, replace
from typing import Any, cast

OPTION_TYPES: tuple[type, ...] = (bool, int, float, str)
"""The types a pass option may have (pipeline text writes each as a word)."""

OPTION_KEY = "effir.option"
"""The key of a field's metadata that holds its ``Option`` (doc, minimum)."""


@dataclass(frozen=True)
class Option:
    """One option of a pass: a field of its dataclass
    (``max_fused_ops: int = option(256, "most calls in one kernel")``),
    written ``max-fused-ops=32`` in pipeline text. ``name``, ``type`` and
    ``default`` come from the field; ``doc`` and ``minimum`` from
    ``option(...)`` (or the decorators' ``options=`` mapping)."""

    doc: str = ""
    minimum: int | float | None = None
    name: str = ""
    type: type = object
    default: Any = None

    @property
    def text_name(self) -> str:
        """The name pipeline text uses: kebab-case."""
        return self.name.replace("_", "-")

    def parse(self, text: str) -> Any:
        """The value the word ``text`` denotes; ValueError says what was expected."""
        return self.validate(self._convert(text))

    def _convert(self, text: str) -> Any:
        if self.type is bool:
            if text.lower() in ("true", "1", "on"):
                return True
            if text.lower() in ("false", "0", "off"):
                return False
            raise ValueError(f"expected true or false, got {text!r}")
        try:
            return self.type(text) if self.type is not int else int(text, 10)
        except ValueError:
            expected = {int: "an integer", float: "a number"}.get(self.type, "a value")
            raise ValueError(f"expected {expected}, got {text!r}") from None

    def validate(self, value: Any) -> Any:
        """``value`` if it is one this option takes; ValueError otherwise."""
        if self.type is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if not isinstance(value, self.type) or (self.type is int and isinstance(value, bool)):
            raise ValueError(f"expected {self.type.__name__}, got {value!r}")
        if self.minimum is not None and cast(float, value) < self.minimum:  # a number here
            raise ValueError(f"must be at least {self.minimum}, got {value!r}")
        return value

    def describe(self) -> str:
        text = f"{self.text_name}={word(self.default)} ({self.type.__name__})"
        return f"{text}: {self.doc}" if self.doc else text


def option(default: Any, doc: str = "", *, minimum: int | float | None = None) -> Any:
    """A pass's option field with its documentation:
    ``fuel: int = option(0, "nodes inlining may add", minimum=0)``."""
    return dataclasses.field(default=default, metadata={OPTION_KEY: Option(doc, minimum)})


def word(value: Any) -> str:
    """``value`` as pipeline text writes it (``true``, ``32``)."""
    return str(value).lower() if isinstance(value, bool) else str(value)


_CACHE: dict[type, tuple[Option, ...]] = {}


def options_of(cls: type) -> tuple[Option, ...]:
    """The options of the pass class ``cls``: its dataclass fields that
    ``__init__`` takes, in order. A field of another type than
    ``OPTION_TYPES``, or without a default, is a TypeError naming it (the
    registry reports it at registration)."""
    known = _CACHE.get(cls)
    if known is not None:
        return known
    try:
        hints = typing.get_type_hints(cls)
    except Exception:  # an annotation that does not resolve: the defaults' types
        hints = {}
    found = []
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        if f.default is dataclasses.MISSING:
            raise TypeError(f"option {f.name} has no default (pipeline text may omit it)")
        kind = hints.get(f.name, f.type)
        if kind not in OPTION_TYPES:
            kind = type(f.default)
        if kind not in OPTION_TYPES:
            raise TypeError(
                f"option {f.name} is a {getattr(kind, '__name__', kind)}; an option is one "
                "of bool, int, float or str"
            )
        spec = f.metadata.get(OPTION_KEY, Option())
        found.append(replace(spec, name=f.name, type=kind, default=f.default))
    _CACHE[cls] = result = tuple(found)
    return result


__all__ = ["OPTION_TYPES", "Option", "option", "options_of", "word"]
