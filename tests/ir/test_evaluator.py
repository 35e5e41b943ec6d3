"""The evaluation-order walker (effir.ir.evaluator): typed rules, the
explicit stack, let chains, branches joined, scopes, errors."""

from __future__ import annotations

import sys
import tracemalloc
from typing import Any

import numpy as np
import pytest

import effir
from effir.ir.evaluator import Evaluator
from effir.ir.expr import (
    Call,
    Constant,
    Expr,
    Function,
    GlobalVar,
    If,
    Let,
    Match,
    Op,
    RefCreate,
    RefRead,
    RefWrite,
    Tuple,
    Var,
    const,
)
from effir.ir.functor import after, on
from effir.ir.op import call_op

UNKNOWN = None


class Consts(Evaluator):
    """A small abstract interpreter: a value is a Python number when known,
    else None; a store maps each ``ref(...)`` node to its known contents;
    branches start from the same store and keep what all of them agree
    on; a call of a global function is evaluated in place (its body in a
    scope of its own)."""

    def __init__(self, module: effir.IRModule) -> None:
        self.module = module
        self.env: dict[Var, Any] = {}
        self.store: dict[int, Any] = {}
        self.order: list[str] = []  # the effects, in evaluation order
        self.scopes = 0

    def bind(self, let: Let, value: Any) -> None:
        self.env[let.var] = value

    @on(Var)
    def _var(self, var: Var) -> Any:
        return self.env.get(var, UNKNOWN)

    @on(Constant)
    def _const(self, c: Constant) -> Any:
        return c.data.item() if c.data.shape == () else UNKNOWN

    @on(GlobalVar, Op)
    def _name(self, node: Expr) -> Any:
        return node

    @after(Tuple)
    def _tuple(self, node: Tuple, values: list[Any]) -> Any:
        return tuple(values)

    @after(Call)
    def _call_values(self, node: Call, values: list[Any]) -> Any:
        callee, *args = values
        if isinstance(callee, Op) and callee.name == "add" and UNKNOWN not in args:
            return args[0] + args[1]
        return UNKNOWN

    @on(Call)
    def _call(self, node: Call) -> Any:
        if isinstance(node.callee, GlobalVar):
            fn = self.module.functions[node.callee.name]
            args = []
            for a in node.args:
                args.append((yield self.eval(a)))
            for p, a in zip(fn.params, args, strict=True):
                self.env[p] = a
            return (yield self.scoped(fn, fn.body))
        return (yield self.children_first(node))

    @after(RefCreate)
    def _ref(self, node: RefCreate, values: list[Any]) -> Any:
        self.store[id(node)] = values[0]
        return ("ref", id(node))

    @after(RefRead)
    def _read(self, node: RefRead, values: list[Any]) -> Any:
        self.order.append("read")
        ref = values[0]
        return self.store.get(ref[1], UNKNOWN) if ref else UNKNOWN

    @after(RefWrite)
    def _write(self, node: RefWrite, values: list[Any]) -> Any:
        self.order.append("write")
        ref, value = values
        if ref:
            self.store[ref[1]] = value
        return ()

    def fork(self, node):
        return dict(self.store)

    def enter_branch(self, node, index, start, *args):
        self.store = dict(start)

    def leave_branch(self, node, index, mark, value):
        return value, self.store

    def join(self, node, start, ends):
        values = {v for v, _ in ends}
        self.store = {k: v for k, v in start.items() if all(k in s and s[k] == v for _, s in ends)}
        return values.pop() if len(values) == 1 else UNKNOWN

    def enter_scope(self, node):
        self.scopes += 1
        return self.scopes

    def leave_scope(self, node, mark):
        assert mark == self.scopes
        self.scopes -= 1


def consts(text: str, *args: Any) -> tuple[Any, Consts]:
    module = effir.parse(text)
    walk = Consts(module)
    fn = module["main"]
    for p, a in zip(fn.params, args, strict=True):
        walk.env[p] = a
    return walk.evaluate(fn.body), walk


H = '#[version = "0.0.5"]\n'


def test_rules_by_class_children_in_order_and_the_store() -> None:
    text = H + (
        "def @main(%x: int32) {\n"
        "  let %r = ref(1);\n"
        "  ref_write(%r, add(ref_read(%r), 2));\n"
        "  (ref_read(%r), add(%x, 1))\n"
        "}"
    )
    value, walk = consts(text, UNKNOWN)
    assert value == (3, UNKNOWN)
    assert walk.order == ["read", "write", "read"]  # evaluation order
    assert consts(text, 4)[0] == (3, 5)


def test_branches_start_from_the_same_state_and_join() -> None:
    text = H + (
        "def @main(%c: bool) {\n"
        "  let %r = ref(1);\n"
        "  let %s = ref(1);\n"
        "  let %a = if (%c) { ref_write(%r, 2); 5 } else { ref_read(%r) };\n"
        "  let %b = if (%c) { ref_write(%s, 1); 7 } else { 7 };\n"
        "  (%a, %b, ref_read(%r), ref_read(%s))\n"
        "}"
    )
    value, _ = consts(text, UNKNOWN)
    # the else branch read 1, not the 2 the then branch wrote; the branches
    # disagree on %a and on %r's contents, and agree on %b and on %s's
    assert value == (UNKNOWN, 7, UNKNOWN, 1)


def test_a_subclass_rule_replaces_its_base_rule_and_a_missing_rule_is_named() -> None:
    class Doubling(Consts):
        @after(Call)
        def _call_values(self, node: Call, values: list[Any]) -> Any:
            return 2 * Consts._call_values(self, node, values)

    text = H + "def @main(%x: int32) { add(%x, 1) }"
    module = effir.parse(text)
    walk = Doubling(module)
    walk.env[module["main"].params[0]] = 1
    assert walk.evaluate(module["main"].body) == 4

    class Bare(Evaluator):
        pass

    with pytest.raises(NotImplementedError, match="Bare has no rule for Constant"):
        Bare().evaluate(Constant(np.float32(1)))


def test_scopes_are_left_when_a_body_raises_and_errors_reach_the_rule() -> None:
    class Failing(Consts):
        caught: list[str] = []

        @on(Match)
        def _match(self, node: Match) -> Any:
            raise ValueError("no matches here")

        @on(If)
        def _if(self, node: If) -> Any:
            try:
                return (yield self.branching(node))
            except ValueError as err:
                self.caught.append(str(err))
                return "recovered"

    text = H + (
        "type T { A }\n"
        "def @g(%y: int32) { match (A) { A => 1 } }\n"
        "def @main(%c: bool) { if (%c) { @g(1) } else { 2 } }"
    )
    module = effir.parse(text)
    walk = Failing(module)
    assert walk.evaluate(module["main"].body) == "recovered"
    assert walk.caught == ["no matches here"] and walk.scopes == 0


def test_deep_programs_do_not_recurse(default_recursion_limit) -> None:
    """Built directly (parsing 100,000 bindings would take longer than the walk)."""
    module = effir.parse(H + "def @main() { 0 }")
    n = 100_000
    lets = [Var(f"v{i}") for i in range(n)]
    body: Expr = lets[-1]
    for i in range(n - 1, 0, -1):
        body = Let(lets[i], call_op("add", lets[i - 1], const(1, "int32")), body)
    walk = Consts(module)
    walk.env[lets[0]] = 0
    assert walk.evaluate(body) == n - 1
    depth = 5_000
    x, c = Var("x"), Var("c")
    ifs: Expr = x
    nested: Expr = x
    for i in range(depth):
        ifs = If(c, ifs, x)
        v = Var(f"n{i}")
        nested = Let(v, nested, v)
    walk = Consts(module)
    walk.env[x] = 3
    assert walk.evaluate(ifs) == 3  # every branch agrees
    assert walk.evaluate(nested) == 3
    # calls evaluated in place, 2,000 deep: one scope inside another
    depth = 2_000
    defs = "".join(f"def @f{i}(%x: int32) {{ @f{i + 1}(add(%x, 1)) }}\n" for i in range(depth))
    defs += f"def @f{depth}(%x: int32) {{ %x }}\n"
    value, walk = consts(H + defs + "def @main(%x: int32) { @f0(%x) }", 0)
    assert value == depth and walk.scopes == 0
    assert sys.getrecursionlimit() == 1000


def test_a_closure_is_a_value_and_its_body_is_not_evaluated() -> None:
    class Closures(Consts):
        @after(Function)
        def _fn(self, node: Function, values: list[Any]) -> Any:
            return node

    text = H + "def @main() { let %r = ref(1); let %f = fn () { ref_read(%r) }; %f }"
    module = effir.parse(text)
    walk = Closures(module)
    assert isinstance(walk.evaluate(module["main"].body), Function)
    assert walk.order == []
    with pytest.raises(NotImplementedError, match="Consts has no rule for Function"):
        consts(text)


def test_a_returned_computation_is_a_tail_call(default_recursion_limit) -> None:
    """A rule that returns a computation instead of yielding it is replaced
    by it on the stack: 20,000 calls in tail position, one stack entry."""

    class Tails(Consts):
        @on(Call)
        def _call(self, node: Call) -> Any:
            if not isinstance(node.callee, GlobalVar):
                return (yield self.children_first(node))
            fn = self.module.functions[node.callee.name]
            args = []
            for a in node.args:
                args.append((yield self.eval(a)))
            for p, a in zip(fn.params, args, strict=True):
                self.env[p] = a
            return self.eval(fn.body)  # returned, not yielded

        @on(If)
        def _if(self, node: If) -> Any:
            cond = yield self.eval(node.cond)
            return self.eval(node.then_branch if cond else node.else_branch)

    text = H + (
        "def @count(%n: int32, %acc: int32) -> int32 {\n"
        "  if (equal(%n, 0)) { %acc } else { @count(add(%n, -1), add(%acc, 1)) }\n"
        "}\n"
        "def @main(%n: int32) { @count(%n, 0) }"
    )

    class Known(Tails):
        @after(Call)
        def _call_values(self, node: Call, values: list[Any]) -> Any:
            callee, *args = values
            if callee.name == "equal":
                return args[0] == args[1]
            return Consts._call_values(self, node, values)

    module = effir.parse(text)

    def peak(n: int) -> int:
        walk = Known(module)
        walk.env[module["main"].params[0]] = n
        tracemalloc.start()
        try:
            assert walk.evaluate(module["main"].body) == n
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    # 20,000 stacked generators would take megabytes; tail calls take none
    assert peak(20_000) < 100_000
