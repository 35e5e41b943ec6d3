"""Transformations preserve the meaning of random well-typed programs
(``typed_programs.py``: closures, recursion, ADTs, references, loops,
shared graph-form sub-expressions): to-anf and explicate give exactly the
interpreter's results and final state; state-passing does too, or rejects
the program with a located EffectError (a reference that escapes, for
instance), never anything else."""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import HealthCheck, given, settings

import effir
from effir.backends.interpreter import Closure, ConstructorFunction, interpret_a2
from effir.ir.expr import Function, Let
from effir.ir.visitor import pre_order
from effir.passes.anf import to_anf
from effir.passes.explicate import explicate
from effir.passes.state_passing import state_passing
from effir.runtime.values import ADTValue, PRNGKey, RefValue

from .typed_programs import TypedProgram, typed_programs

SETTINGS: dict[str, Any] = dict(
    max_examples=120,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def same(a: Any, b: Any) -> bool:
    """Bit-equal values; closures compare by being closures (their code was
    transformed), references by their contents."""
    if isinstance(a, tuple):
        return isinstance(b, tuple) and len(a) == len(b) and all(map(same, a, b))
    if isinstance(a, Closure | ConstructorFunction):
        return isinstance(b, Closure | ConstructorFunction)
    if isinstance(a, RefValue):
        return isinstance(b, RefValue) and same(a.value, b.value)
    if isinstance(a, PRNGKey):
        return isinstance(b, PRNGKey) and np.array_equal(a.data, b.data)
    if isinstance(a, ADTValue):
        return (
            isinstance(b, ADTValue)
            and a.constructor == b.constructor
            and same(tuple(a.fields), tuple(b.fields))
        )
    x, y = np.asarray(a), np.asarray(b)
    return x.dtype == y.dtype and x.shape == y.shape and np.array_equal(x, y, equal_nan=True)


def observe(module, args, a2: bool = False):
    state = effir.State(module)
    printed: list = []
    run = interpret_a2 if a2 else effir.interpret
    result = run(module, *args, state=state, sink=lambda label, v: printed.append((label, v)))
    return result, state.values(), printed


def assert_same(program: TypedProgram, after, a2: bool = False) -> None:
    effir.check(program.module)  # a loop that runs zero times needs its types
    r1, s1, p1 = observe(program.module, program.args)
    r2, s2, p2 = observe(after, program.args, a2)
    text = effir.astext(program.module) + "\n=== after ===\n" + effir.astext(after)
    assert same(r1, r2), text
    assert all(same(s1[c], s2[c]) for c in s1), text
    assert len(p1) == len(p2), text
    assert all(same(x[1], y[1]) for x, y in zip(p1, p2, strict=True)), text


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
