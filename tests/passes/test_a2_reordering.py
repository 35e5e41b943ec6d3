"""An A2 program is pure: any order of its bindings that respects data
dependences computes the same thing.

For random effectful programs (``a1_programs.py``) turned into state passing,
every block (function bodies, branches, clause bodies, closure bodies) is
rescheduled in a random dependency-respecting order, as an optimiser may;
results, final state and printed values must not change, bit for bit. Output
order survives because io.print threads the world token."""

from __future__ import annotations

import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import effir
from effir.backends.interpreter import interpret_a2
from effir.ir.expr import Expr, Let, Var
from effir.ir.functor import Mutator, on
from effir.ir.module import IRModule
from effir.ir.node import Node
from effir.ir.visitor import block_heads, pre_order
from effir.passes.transforms.state_passing import state_passing
from tests.support.state_passing_observation import observe, parse_a1

from .a1_programs import A1Program, a1_programs


def _free_uses(expr: Expr) -> set[Var]:
    return {node for node in pre_order(expr) if isinstance(node, Var)}


class _Reschedule(Mutator):
    """Each block's bindings in a random order that respects data flow."""

    binders = True
    types = True

    def __init__(self, rnd: random.Random) -> None:
        super().__init__()
        self.rnd = rnd
        self.heads: set[int] = set()

    def mutate(self, root: Node) -> Node:
        self.heads = block_heads(root)
        return super().mutate(root)

    @on(Let)
    def let(self, new: Node, old: Node) -> Node:
        if id(old) not in self.heads:
            return new
        assert isinstance(new, Let)
        bindings: list[tuple[Var, Expr]] = []
        expr: Expr = new
        while isinstance(expr, Let):
            bindings.append((expr.var, expr.value))
            expr = expr.body
        bound = {var for var, _ in bindings}
        # A let's variable is in scope in its own value (recursive closures).
        needs = {var: (_free_uses(value) & bound) - {var} for var, value in bindings}
        placed: set[Var] = set()
        order = []
        pending = list(bindings)
        while pending:
            ready = [b for b in pending if needs[b[0]] <= placed]
            choice = self.rnd.choice(ready)
            pending.remove(choice)
            order.append(choice)
            placed.add(choice[0])
        for var, value in reversed(order):
            expr = Let(var, value, expr, span=value.span)
        return expr


def rescheduled(module: IRModule, seed: int) -> IRModule:
    rnd = random.Random(seed)
    functions = {n: _Reschedule(rnd).mutate(fn) for n, fn in module.functions.items()}
    return IRModule(functions, module.type_defs, module.cells)


@settings(
    max_examples=100,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(a1_programs(), st.integers(0, 2**32 - 1))
def test_any_data_flow_schedule_of_an_a2_program_computes_the_same(
    program: A1Program, seed: int
) -> None:
    a1 = parse_a1(program)
    a2 = state_passing(a1)
    shuffled = effir.check(rescheduled(a2, seed))  # a loop run zero times needs types
    expected = observe(interpret_a2, a2, program, a1)
    got = observe(interpret_a2, shuffled, program, a1)
    assert (problem := expected.difference(got)) is None, problem
