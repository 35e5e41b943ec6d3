"""The result-returning functor (effir.ir.expr_functor): typed dispatch by
subclass, generator hooks on the trampoline, the plain-return fast path,
memoised sharing, and the error for a missing hook."""

from __future__ import annotations

import sys
from types import GeneratorType

import pytest

import effir
from effir.ir.diagnostics import MissingRuleError
from effir.ir.expr import (
    Call,
    Constant,
    Expr,
    Function,
    If,
    Let,
    Tuple,
    TupleGetItem,
    Var,
    const,
)
from effir.ir.expr_functor import Computation, ExprFunctor
from effir.ir.functor import on
from effir.ir.op import call_op


class Size(ExprFunctor):
    """The number of nodes of an expression tree (a shared node counted at
    each use): atoms return at once, compounds yield their children."""

    def __init__(self) -> None:
        super().__init__()
        self.generators = 0

    @on(Var, Constant, effir.ir.Op)
    def atom(self, node: Expr) -> int:
        return 1

    @on(Expr)
    def compound(self, node: Expr) -> Computation:
        self.generators += 1
        total = 1
        for child in self.children(node):
            total += yield self.eval(child)
        return total


class LetsOnly(Size):
    """A subclass hook for ``Let`` replaces the base's ``Expr`` hook there."""

    @on(Let)
    def let(self, node: Let) -> Computation:
        body = yield self.eval(node.body)
        return 100 + body


class Depth(ExprFunctor):
    """The let nesting of an expression, with the context as an argument."""

    @on(Var, Constant)
    def atom(self, node: Expr, depth: int) -> int:
        return depth

    @on(Let)
    def let(self, node: Let, depth: int) -> Computation:
        value = yield self.eval(node.value, depth + 1)
        body = yield self.eval(node.body, depth + 1)
        return max(value, body)

    @on(Call)
    def call(self, node: Call, depth: int) -> Computation:
        deepest = depth
        for arg in node.args:
            deepest = max(deepest, (yield self.eval(arg, depth)))
        return deepest


class Visits(Size):
    memoise = True

    def __init__(self) -> None:
        super().__init__()
        self.visits: list[str] = []

    @on(Call)
    def call(self, node: Call) -> Computation:
        self.visits.append(node.callee.name)  # type: ignore[union-attr]
        total = 1
        for arg in node.args:
            total += yield self.eval(arg)
        return total


def test_dispatch_by_subclass_and_fast_path() -> None:
    x = Var("x")
    expr = Let(Var("y"), call_op("add", x, const(1.0)), Tuple((x, x)))
    size = Size()
    assert size.evaluate(expr) == 1 + (1 + 1 + 1 + 1) + (1 + 2)  # let, call, tuple
    assert size.generators == 3  # atoms returned without a generator
    assert size.eval(x) == 1 and type(size.eval(expr)) is GeneratorType
    assert LetsOnly().evaluate(expr) == 100 + 3  # Let's own hook, Tuple's inherited


def test_hook_arguments_are_the_context() -> None:
    x = Var("x")
    expr = Let(Var("a"), Let(Var("b"), x, x), call_op("add", x, x))
    assert Depth().evaluate(expr, 0) == 2


def test_deep_programs_run_without_python_recursion() -> None:
    depth = 100_000
    assert depth > 10 * sys.getrecursionlimit()
    expr: Expr = Var("x")
    for i in range(depth):
        expr = Let(Var(f"v{i}"), const(1.0), expr) if i % 2 else TupleGetItem(Tuple((expr,)), 0)
    assert Size().evaluate(expr) == 1 + 2 * depth


def test_memoised_sharing_computes_a_shared_node_once() -> None:
    x = Var("x")
    shared = call_op("multiply", x, x)
    expr = call_op("add", shared, call_op("subtract", shared, shared))
    walk = Visits()
    assert walk.evaluate(expr) == 1 + 3 + (1 + 3 + 3)
    assert walk.visits == ["add", "multiply", "subtract"]
    assert id(shared) in walk.memo
    unmemoised = Size()
    assert unmemoised.evaluate(expr) == 16  # callees counted, the shared call 3 times
    assert unmemoised.generators == 5


def test_a_missing_hook_names_the_node_class() -> None:
    fn = Function((Var("x"),), Var("x"))
    with pytest.raises(MissingRuleError, match="Depth has no rule for Function") as info:
        Depth().evaluate(fn, 0)
    assert isinstance(info.value, effir.PassError)
    deep: Expr = fn
    for _ in range(5000):
        deep = call_op("add", deep, deep)
    with pytest.raises(MissingRuleError, match="no rule for Function"):
        Depth().evaluate(deep, 0)  # raised below, thrown up through every level


def test_exceptions_are_thrown_into_the_hook_that_asked() -> None:
    class Guarded(Depth):
        @on(If)
        def branch(self, node: If, depth: int) -> Computation:
            try:
                return (yield self.eval(node.cond, depth))
            except MissingRuleError:
                return -1

    fn = Function((Var("x"),), Var("x"))
    assert Guarded().evaluate(If(fn, const(1.0), const(2.0)), 0) == -1
