"""The traversal framework (effir.ir.functor), its analyses
(effir.ir.analysis) and the pattern rewriter (effir.ir.rewrite)."""

from __future__ import annotations

import sys

import pytest

import effir
from effir.ir import analysis
from effir.ir.diagnostics import PassError
from effir.ir.expr import Call, Constructor, Expr, Function, Let, Op, Tuple, TypeData, Var, const
from effir.ir.functor import Mutator, Visitor, after, on, pre_order
from effir.ir.node import Node, child_slots
from effir.ir.op import call_op
from effir.ir.rewrite import PatternRewriter, RewritePattern
from effir.ir.types import TensorType, TypeVar
from tests import deep_programs


class _Count(Visitor):
    def __init__(self) -> None:
        super().__init__()
        self.calls = 0
        self.closed: list[str] = []

    @on(Call)
    def _call(self, node: Call) -> None:
        self.calls += 1

    @after(Function)
    def _fn(self, node: Function) -> None:
        self.closed.append(node.params[0].name_hint)


def test_visitor_dispatches_by_class_and_visits_a_shared_node_once() -> None:
    x = Var("x")
    shared = call_op("add", x, x)
    inner = Function((Var("y"),), Tuple((shared, shared)))
    outer = Function((x,), Let(Var("f"), inner, shared))
    walk = _Count()
    walk.visit(outer)
    assert walk.calls == 1  # three edges to one node
    assert walk.closed == ["y", "x"]  # after-hooks run children first


class _Rename(Mutator):
    binders = True

    @on(Var)
    def _var(self, new: Var, old: Var) -> Var:
        return Var(old.name_hint + "2")


def test_mutator_keeps_sharing_and_identity() -> None:
    x = Var("x")
    shared = call_op("add", x, x)
    fn = Function((x,), Tuple((shared, shared)))
    out = _Rename().mutate(fn)
    assert isinstance(out, Function) and isinstance(out.body, Tuple)
    a, b = out.body.fields
    assert a is b  # one rewritten node for the two edges
    assert out.params[0] is a.args[0]  # binder and uses renamed alike
    unchanged = Function((x,), Tuple((shared, shared)))
    assert Mutator().mutate(unchanged) is unchanged


def test_subclass_hook_overrides_and_inherits() -> None:
    class Base(Mutator):
        @on(Op)
        def _op(self, new: Node, old: Node) -> Node:
            return Op("base")

    class Child(Base):
        def _op(self, new: Node, old: Node) -> Node:  # overrides by name, same table entry
            return Op("child")

    call = call_op("add", Var("a"), Var("b"))
    assert Base().mutate(call).callee.name == "base"  # type: ignore[attr-defined]
    assert Child().mutate(call).callee.name == "child"  # type: ignore[attr-defined]


def test_let_value_is_bound_before_the_body_and_body_first_asks_keep() -> None:
    order: list[str] = []

    class Forward(Mutator):
        def bind(self, let: Let) -> None:
            order.append(let.var.name_hint)

        @on(Call)
        def _call(self, new: Node, old: Node) -> Node:
            order.append("call")
            return new

    a, b = Var("a"), Var("b")
    program = Let(a, call_op("add", const(1), const(2)), Let(b, call_op("negative", a), b))
    Forward().mutate(program)
    assert order == ["call", "a", "call", "b"]

    class DropUnused(Mutator):
        body_first = True

        def __init__(self) -> None:
            super().__init__()
            self.used: set[Var] = set()

        def keep(self, let: Let) -> bool:
            return let.var in self.used

        def child(self, node: Node) -> Node:
            if isinstance(node, Var):
                self.used.add(node)
            return super().child(node)

    c = Var("c")
    dead = Let(c, call_op("add", const(1), const(2)), Let(a, call_op("negative", b), a))
    out = DropUnused().mutate(dead)
    assert isinstance(out, Let) and out.var is a


def test_visitor_binds_lets_between_value_and_body_and_hooks_choose_children() -> None:
    """``binds``: ``bind(let)`` once the let's value is walked and before its
    body; a hook returning a list walks those children, in that order."""
    order: list[str] = []

    class Scopes(Visitor):
        binds = True

        def bind(self, let: Let) -> None:
            order.append(f"bind {let.var.name_hint}")

        @on(Call)
        def _call(self, node: Call) -> list[Node]:
            order.append(f"call {node.callee.name}")  # type: ignore[union-attr]
            return list(reversed(node.args))  # the arguments, last first; no callee

        @on(Var)
        def _var(self, node: Var) -> None:
            order.append(node.name_hint)

    a, b, x, y = Var("a"), Var("b"), Var("x"), Var("y")
    inner = Let(b, call_op("negative", x), b)
    program = Let(a, call_op("add", x, y), Let(Var("c"), inner, a))
    Scopes().visit(program)
    assert order == [
        "a",
        "call add",
        "y",
        "x",
        "bind a",
        "c",
        "b",
        "call negative",
        "bind b",
        "bind c",
    ]
    order.clear()

    class Plain(Scopes):
        binds = False

    Plain().visit(program)
    assert not any(step.startswith("bind") for step in order)


def test_ctordefs_are_binders_like_defs() -> None:
    a = TypeVar("A")
    cons = Constructor("Leaf", (a,), "Tree")
    data = TypeData("Tree", (a,), (cons,))
    slots = {s.name: s for s in child_slots(TypeData)}
    assert slots["constructors"].binder and slots["constructors"].many
    assert list(data.children()) == [a, cons]
    assert cons in list(pre_order(data))


def test_walks_are_iterative_on_deep_programs() -> None:
    depth = sys.getrecursionlimit() * 3
    for text in (deep_programs.let_chain(depth), deep_programs.nested_ifs(depth)):
        fn = effir.parse(text)["main"]
        walk = _Count()
        walk.visit(fn)
        assert Mutator().mutate(fn) is fn
        assert _Rename().mutate(fn) is not fn
        order, shared = analysis.scan(fn)
        assert len(order) > depth and not shared


def test_analyses() -> None:
    x, y, f = Var("x"), Var("y"), Var("f")
    shared = call_op("add", x, y)
    inner = Function((y,), Tuple((shared, shared, x)))
    root = Function((x,), Let(f, inner, f))
    assert analysis.shared_nodes(root) == {id(shared)}
    assert analysis.free_vars(inner) == [x]
    assert analysis.free_vars_by_function(root) == {inner: [x], root: []}
    assert analysis.use_counts(root) == {x: 2, y: 1, f: 1}
    assert analysis.operands(shared) == [shared.callee, x, y]
    assert analysis.body_nodes(root.body) == [root.body, f, inner]  # not inner.body


class _NegNeg(RewritePattern):
    roots = (Call,)
    ops = ("negative",)

    def match_and_rewrite(self, new, old, rewriter):  # type: ignore[no-untyped-def]
        inner = rewriter.resolve(new.args[0])
        if isinstance(inner, Call) and inner.callee.name == "negative":
            return inner.args[0]
        return None


def test_pattern_rewriter_dispatches_by_operator_and_substitutes() -> None:
    x, a, b = Var("x", TensorType((2,))), Var("a"), Var("b")
    program = Function((x,), Let(a, call_op("negative", x), Let(b, call_op("negative", a), b)))
    out = PatternRewriter([_NegNeg()]).rewrite(program)
    # %b = x is an atom of unknown type: kept (fold-constant's [RULE FOLD-TYPE]).
    assert isinstance(out, Function) and isinstance(out.body, Let)
    assert out.body.body.value is x  # type: ignore[attr-defined]
    table = PatternRewriter([_NegNeg()]).table
    assert table.lookup(call_op("add", x, x)) == ()


class _FunctionToItsBody(Mutator):
    """A broken rewrite: a function becomes its body."""

    @on(Function)
    def _function(self, new: Function, old: Function) -> Node:
        return new.body


def test_mutate_as_names_the_mutator_whose_rewrite_changed_the_class() -> None:
    x = Var("x")
    fn = Function((x,), x)
    message = "_FunctionToItsBody rewrote a Function into a Var, not a Function"
    with pytest.raises(PassError, match=message):
        _FunctionToItsBody().mutate_as(fn, Function)
    assert _FunctionToItsBody().mutate_as(fn, Expr) is x  # still an expression
