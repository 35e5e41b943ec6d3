"""The check that a pass keeps every type of a program whose values take
their type from their context (a ``Nil``, a ``Nothing``: nothing in the
value fixes its ADT's type argument; its uses do)."""

from __future__ import annotations

import effir
from effir.ir.module import IRModule
from effir.ir.structural import structural_equal


def assert_types_kept(before: IRModule, after: IRModule) -> None:
    """``after`` type-checks, and so does its text read back alone (the
    annotations a pass adds are in the program, not in cached types), and
    each function keeps the type it had in ``before``."""
    effir.check(before)
    effir.check(after)
    for name, fn in before.functions.items():
        kept = after.functions[name].checked_type
        assert structural_equal(fn.checked_type, kept), (
            f"@{name} was {effir.astext(fn.checked_type)}, is {effir.astext(kept)}"
        )
    effir.check(effir.parse(effir.astext(after)))
