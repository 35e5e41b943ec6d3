"""Helpers first written for tests/passes/test_transforms_on_typed_programs.py, shared with other
test modules (which import tests/support, never each other)."""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import HealthCheck

import effir
from effir.backends.interpreter import Closure, ConstructorFunction, interpret_a2
from effir.runtime.values import ADTValue, PRNGKey, RefValue
from tests.passes.typed_programs import TypedProgram

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
