"""effir's standard library: Relay's prelude (lists, options, trees and
their functions: ``map``, ``foldl``, ``foldr``, ``zip``, ...), as a module
that programs are parsed into: ``effir.parse(text, module=effir.prelude())``."""

from __future__ import annotations

from functools import cache
from importlib.resources import files

from ..ir.module import IRModule
from ..ir.parser import parse, register_prelude

PRELUDE = "prelude.rly"


@cache
def prelude() -> IRModule:
    """Relay's standard prelude (effir/std/prelude.rly), parsed once (a
    module is immutable, so every caller may share it)."""
    text = files(__package__).joinpath(PRELUDE).read_text()
    return parse(text, source_name=f"effir/std/{PRELUDE}")


register_prelude(prelude)
