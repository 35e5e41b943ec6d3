"""Transformations preserve the meaning of random well-typed programs
(``typed_programs.py``: closures, recursion, ADTs, references, loops,
shared graph-form sub-expressions): to-anf and explicate give exactly the
interpreter's results and final state; state-passing does too, or rejects
the program with a located EffectError (a reference that escapes, for
instance), never anything else."""

from __future__ import annotations

from hypothesis import given, settings

import effir
from effir.ir.expr import Function, Let
from effir.ir.visitor import pre_order
from effir.passes.transforms.anf import to_anf
from effir.passes.transforms.explicate import explicate
from effir.passes.transforms.state_passing import state_passing
from tests.support.typed_program_checks import SETTINGS, assert_same

from .typed_programs import TypedProgram, typed_programs


def is_anf(fn: Function) -> bool:
    for node in pre_order(fn):
        if isinstance(node, Let) and isinstance(node.value, Let):
            return False
    return True


@settings(**SETTINGS)
@given(typed_programs())
def test_to_anf_preserves_meaning(program: TypedProgram) -> None:
    after = to_anf(program.module)
    assert all(is_anf(fn) for fn in after.functions.values())
    effir.check(after)
    assert_same(program, after)


@settings(**SETTINGS)
@given(typed_programs())
def test_explicate_preserves_meaning(program: TypedProgram) -> None:
    after = explicate(program.module)
    effir.check(after)
    assert_same(program, after)


@settings(**SETTINGS)
@given(typed_programs())
def test_state_passing_preserves_meaning_or_rejects(program: TypedProgram) -> None:
    # From the printed text, so that a rejection can point at its source.
    parsed = effir.parse(effir.astext(program.module))
    try:
        after = state_passing(parsed)
    except effir.EffectError as err:
        assert err.span is not None, str(err)
        return
    assert_same(program, after, a2=True)
