"""Output keeps its order through state passing, whatever a pass does that
respects data flow.

In A2 each io.print takes the world token the previous one returned, so the
order of outputs is a data dependence. Here an adversarial "optimiser"
reorders the bindings of every block in any order that respects data
dependences and drops every binding whose value is unused, treating every
operator as pure: in A2 that cannot change what is printed, nor in which
order; in A1, where nothing ties the prints together, it does (the test
can fail)."""

from __future__ import annotations

import random

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import effir
from effir.ir.expr import Expr, Function, Let, Var
from effir.ir.module import IRModule
from effir.ir.visitor import pre_order
from effir.passes.transforms.state_passing import state_passing

from .equivalence import assert_same_run, run_observed

PROGRAM = """#[version = "0.0.5"]
global @rng: Ref[Key] = ref(random.key(0));
def @show(%x: Tensor[(4), float32], %k: float32) -> Tensor[(4), float32] {
  let %y = multiply(%x, %k);
  debug.print(%y, label="show");
  %y
}
def @main(%x: Tensor[(4), float32]) {
  let %a = add(%x, 1f);
  debug.print(%a, label="a");
  let %b = nn.dropout(%x, @rng);
  debug.print(%b, label="b");
  let %c = @show(%a, 2f);
  let %d = tanh(%x);
  debug.print(%d, label="d");
  let %e = @show(%d, 3f);
  debug.print(add(%c, %e), label="sum");
  %e
}
"""


def _uses(expr: Expr) -> set[Var]:
    return {node for node in pre_order(expr) if isinstance(node, Var)}


def shuffle_and_drop(fn: Function, rnd: random.Random, drop: bool = True) -> Function:
    """The top-level block of ``fn`` in a random order that respects data
    dependences, without the bindings nobody uses (all taken as pure) when
    ``drop``."""
    bindings: list[tuple[Var, Expr]] = []
    expr = fn.body
    while isinstance(expr, Let):
        bindings.append((expr.var, expr.value))
        expr = expr.body
    tail = expr
    # Dead bindings, as a pure dead-code elimination would see them.
    live = _uses(tail)
    kept = []
    for var, value in reversed(bindings):
        if var in live or not drop:
            kept.append((var, value))
            live |= _uses(value)
    kept.reverse()
    # A random topological order of what is left.
    needs = {var: _uses(value) & {v for v, _ in kept} for var, value in kept}
    order, placed = [], set()
    pending = list(kept)
    while pending:
        ready = [b for b in pending if needs[b[0]] <= placed]
        choice = rnd.choice(ready)
        pending.remove(choice)
        order.append(choice)
        placed.add(choice[0])
    body = tail
    for var, value in reversed(order):
        body = Let(var, value, body)
    return Function(fn.params, body, fn.ret_type, fn.type_params, fn.attrs, span=fn.span)


def scheduled(module: IRModule, seed: int, drop: bool = True) -> IRModule:
    rnd = random.Random(seed)
    functions = {name: shuffle_and_drop(fn, rnd, drop) for name, fn in module.functions.items()}
    return IRModule(functions, module.type_defs, module.cells)


X = (np.arange(4, dtype=np.float32) - 1.5,)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(st.integers(0, 2**32 - 1), st.booleans())
def test_a2_output_survives_any_schedule(seed, drop):
    a1 = effir.parse(PROGRAM)
    a2 = state_passing(a1)
    _, _, expected = run_observed(a1, X)
    _, _, printed = run_observed(scheduled(a2, seed, drop), X, a2=True)
    assert [label for label, _ in printed] == [label for label, _ in expected]
    for (_, want), (_, got) in zip(expected, printed, strict=True):
        assert np.array_equal(want, got)


def labels_after(module: IRModule, seed: int, drop: bool) -> list[str]:
    _, _, printed = run_observed(scheduled(module, seed, drop), X)
    return [label for label, _ in printed]


def test_a1_output_does_not_survive_such_schedules():
    """The same schedules break the A1 program: its prints are dropped or
    moved, so the test above is not vacuous."""
    a1 = effir.parse(PROGRAM)
    _, _, expected = run_observed(a1, X)
    labels = [label for label, _ in expected]
    # The unused prints are always dropped, and most orders move them.
    assert all(labels_after(a1, seed, drop=True) != labels for seed in range(20))
    assert sum(labels_after(a1, seed, drop=False) != labels for seed in range(20)) > 10


def test_a_dropped_result_keeps_the_annotation_that_types_the_printed_value():
    """Only the annotation of ``%f`` says which ``Option`` the printed
    ``None`` is: state passing, which no longer needs ``%f``'s binding,
    keeps it, so the result still type-checks, and prints as the input."""
    module = effir.parse(
        """#[version = "0.0.5"]
def @main(%x: Tensor[(2), float32]) -> Tensor[(2), float32] {
  let %f: Option[Key] = debug.print(None, label="none");
  %x
}
"""
    )
    passed = effir.check(state_passing(effir.check(module)))
    assert_same_run(module, passed, [np.ones(2, "float32")])
