"""Values whose type comes from their context (``effir/ir/context_types.py``):
a ``Nil`` or a ``None`` typed only by a use that a pass may remove or
replace. Every pass alone keeps every type of random such programs and
their meaning [RULE PIN-CONTEXT]; the pinning itself adds only what it must."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import effir
from effir.ir.context_types import context_typed_constructor, pin_context_types
from effir.ir.module import IRModule
from effir.passes.infra.pipeline import run_pipeline
from effir.passes.infra.transform import PassContext
from tests.support.kept_types import assert_types_kept
from tests.support.typed_program_checks import SETTINGS

from .equivalence import assert_same_run

HEADER = '#[version = "0.0.5"]\n'
X = np.arange(3, dtype=np.float32) - 1
PASSES = (
    "fold-constant",
    "simplify",
    "partial-eval",
    "dce",
    "cse",
    "to-gnf",
    "to-anf",
    "to-bbnf",
    "to-anf,fuse",
    "fold-constant,simplify,cse,dce",
)
CONDITIONS = ("greater(0, 1)", "less(0, 1)", "%c")


def parse(text: str) -> IRModule:
    return effir.check(effir.parse(HEADER + text))


@st.composite
def context_typed_programs(draw: st.DrawFn) -> str:
    """``@main(%x, %c)``: lists and options whose element type one use
    gives (maybe a dead one, maybe an ``if``'s other branch), used by
    operations that do not fix it (prints, ``@length``, ``@rev``)."""
    lines: list[str] = []
    results: list[str] = ["%x"]
    for i in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["list", "option", "inline"]))
        cond = draw(st.sampled_from(CONDITIONS))
        if kind == "list":
            lines.append(f"let %l{i} = Nil;")
            typing = draw(
                st.sampled_from(
                    [
                        f"Cons(%x, %l{i})",
                        f"match (%l{i}) {{ Cons(%h, _) => %h, Nil => %x }}",
                        f"match (@rev(%l{i})) {{ Cons(%h, _) => %h, Nil => %x }}",
                    ]
                )
            )
            uses = [f"debug.print(%l{i})", f"@length(%l{i})", f"@rev(%l{i})"]
        elif kind == "option":
            first, second = draw(st.permutations(["Some(%x)", "None"]))
            lines.append(f"let %o{i} = if ({cond}) {{ {first} }} else {{ {second} }};")
            typing = f"match (%o{i}) {{ Some(%y) => %y, None => %x }}"
            uses = [f"debug.print(%o{i})", f"(%o{i}, %x)"]
        else:
            first, second = draw(st.permutations(["Some(%x)", "None"]))
            typing = f"debug.print(if ({cond}) {{ {first} }} else {{ {second} }})"
            uses = []
        lines.append(f"let %t{i} = {typing};")
        if draw(st.booleans()):
            results.append(f"%t{i}")
        for j, use in enumerate(draw(st.lists(st.sampled_from(uses), max_size=2)) if uses else []):
            lines.append(f"let %u{i}_{j} = {use};")
            if draw(st.booleans()):
                results.append(f"%u{i}_{j}")
    body = "\n  ".join(lines)
    return (
        f"def @main(%x: Tensor[(3), float32], %c: bool) {{\n  {body}\n  ({', '.join(results)},)\n}}"
    )


@settings(**{**SETTINGS, "max_examples": 40})
@given(context_typed_programs(), st.sampled_from(PASSES), st.booleans())
def test_every_pass_keeps_the_types_its_context_gave(text: str, passes: str, flag: bool) -> None:
    module = parse(text)
    after = run_pipeline(module, passes, PassContext(verify=True))
    assert_types_kept(module, after)
    assert_same_run(module, after, (X, np.array(flag)))


def test_a_value_typed_by_its_fields_is_not_pinned() -> None:
    module = parse(
        """def @main(%x: Tensor[(3), float32]) {
          let %a = Cons(%x, Nil);
          let %b = Some(%a);
          let %n = Nil;
          (%b, Cons(%x, %n))
        }"""
    )
    fn = module["main"]
    pinned = pin_context_types(fn, module)
    text = effir.astext(pinned)
    assert "let %a = Cons" in text and "let %b = Some" in text
    assert "let %n: List[Tensor[(3), float32]] = Nil;" in text


def test_the_result_of_a_function_is_pinned_when_its_body_is_context_typed() -> None:
    module = parse(
        """def @main(%x: Tensor[(3), float32]) {
          if (greater(0, 1)) { Some(%x) } else { None }
        }"""
    )
    after = run_pipeline(module, "fold-constant", PassContext(verify=True))
    assert effir.astext(after["main"]).startswith(
        "fn (%x: Tensor[(3), float32]) -> Option[Tensor[(3), float32]] {"
    )
    assert_types_kept(module, after)


@pytest.mark.parametrize(
    ("ctor", "context_typed"), [("Nil", True), ("None", True), ("Cons", False), ("Some", False)]
)
def test_which_constructors_leave_their_type_to_the_context(ctor: str, context_typed: bool) -> None:
    prelude = effir.prelude()
    adt = "List" if ctor in ("Nil", "Cons") else "Option"
    found = next(c for c in prelude.type_defs[adt].constructors if c.name == ctor)
    assert context_typed_constructor(found, prelude) is context_typed
