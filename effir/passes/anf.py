"""A-normal form: every intermediate value bound by a ``let``, in the order
the interpreter evaluates it.

State passing and explicate rewrite programs binding by binding, so they
need each effect at a position of its own. ``to_anf`` gives that: call
arguments, tuple fields, ``if`` conditions, ``match`` scrutinees and
reference operands become atoms; a ``let`` whose value is itself a ``let``
is flattened; bodies of functions, branches and clauses become blocks (a
chain of lets ending in a value).

A shared sub-expression (graph form, ``%0 = ...;``) is evaluated once per
activation by the interpreter, at its first use. Here it is bound at its
first use and reused by every later use in the same block or a block nested
in it (a branch, a clause, a closure); a use in a sibling branch binds it
again, which is what evaluation does there too.

Nothing recurses in Python: blocks are generators driven by
``effir.ir.trampoline.run``.
"""

from __future__ import annotations

import dataclasses

from ..ir.expr import (
    Call,
    Expr,
    Function,
    If,
    Let,
    Match,
    PatternVar,
    RefCreate,
    RefRead,
    RefWrite,
    Tuple,
    TupleGetItem,
    Var,
    is_atom,
)
from ..ir.module import IRModule
from ..ir.node import Node
from ..ir.trampoline import Computation, run
from ..ir.visitor import ExprMutator, pre_order

_Bindings = list[tuple[Var, Expr]]


def to_anf(module: IRModule) -> IRModule:
    """Every global function in A-normal form (cell initialisers are left alone)."""
    functions = {name: to_anf_expr(fn) for name, fn in module.functions.items()}
    return IRModule(functions, module.type_defs, module.cells)


def to_anf_expr(expr: Expr) -> Expr:
    """``expr`` in A-normal form; a Function stays a Function."""
    return run(_Normalizer(expr).value(expr, [], {}))


def _shared(root: Expr) -> set[int]:
    """Non-atomic nodes reachable along more than one edge."""
    seen: set[int] = set()
    shared: set[int] = set()
    for node in pre_order(root):
        for child in node.children():
            if not isinstance(child, Expr) or is_atom(child):
                continue
            if id(child) in seen:
                shared.add(id(child))
            seen.add(id(child))
    return shared


class _Normalizer:
    def __init__(self, root: Expr) -> None:
        self.shared = _shared(root)
        self.expanded: set[int] = set()

    def block(self, expr: Expr, memo: dict[int, Var]) -> Computation[Expr]:
        """``expr`` as a let chain ending in a value, in a scope of its own."""
        bindings: _Bindings = []
        result = yield self.value(expr, bindings, dict(memo))
        for var, value in reversed(bindings):
            result = Let(var, value, result, span=value.span)
        return result

    def atom(self, expr: Expr, bindings: _Bindings, memo: dict[int, Var]) -> Computation[Expr]:
        """An atom for ``expr``, binding it first if it is compound."""
        if is_atom(expr):
            return expr
        value = yield self.value(expr, bindings, memo)
        if is_atom(value):
            return value
        var = Var(_hint(expr), span=expr.span)
        bindings.append((var, value))
        return var

    def value(self, expr: Expr, bindings: _Bindings, memo: dict[int, Var]) -> Computation[Expr]:
        """A let-free value for ``expr``, emitting what it needs into ``bindings``."""
        if is_atom(expr):
            return expr
        shared = id(expr) in self.shared
        if shared and id(expr) in memo:
            return memo[id(expr)]
        source = expr
        if shared:
            if id(expr) in self.expanded:  # again, in a sibling scope: fresh binders
                source = fresh_binders(expr)
                self.shared |= _shared(source)  # the copy's own shared nodes
            self.expanded.add(id(expr))
        result = yield self._value(source, bindings, memo)
        if shared:
            if not is_atom(result):
                var = Var(_hint(expr), span=expr.span)
                bindings.append((var, result))
                result = var
            memo[id(expr)] = result
        return result

    def _value(self, expr: Expr, bindings: _Bindings, memo: dict[int, Var]) -> Computation[Expr]:
        if isinstance(expr, Let):
            head = expr
            # A shared let inside the chain is a value of its own (memoized).
            while isinstance(expr, Let) and (expr is head or id(expr) not in self.shared):
                bound = yield self.value(expr.value, bindings, memo)
                bindings.append((expr.var, bound))
                expr = expr.body
            return (yield self.value(expr, bindings, memo))
        if isinstance(expr, Call):
            callee = yield self.atom(expr.callee, bindings, memo)
            args = []
            for arg in expr.args:
                args.append((yield self.atom(arg, bindings, memo)))
            return _replace(expr, callee=callee, args=tuple(args))
        if isinstance(expr, Tuple):
            fields = []
            for f in expr.fields:
                fields.append((yield self.atom(f, bindings, memo)))
            return _replace(expr, fields=tuple(fields))
        if isinstance(expr, TupleGetItem):
            value = yield self.atom(expr.tuple_value, bindings, memo)
            return _replace(expr, tuple_value=value)
        if isinstance(expr, RefCreate):
            return _replace(expr, value=(yield self.atom(expr.value, bindings, memo)))
        if isinstance(expr, RefRead):
            return _replace(expr, ref=(yield self.atom(expr.ref, bindings, memo)))
        if isinstance(expr, RefWrite):
            ref = yield self.atom(expr.ref, bindings, memo)
            value = yield self.atom(expr.value, bindings, memo)
            return _replace(expr, ref=ref, value=value)
        if isinstance(expr, If):
            cond = yield self.atom(expr.cond, bindings, memo)
            then_branch = yield self.block(expr.then_branch, memo)
            else_branch = yield self.block(expr.else_branch, memo)
            return _replace(expr, cond=cond, then_branch=then_branch, else_branch=else_branch)
        if isinstance(expr, Match):
            data = yield self.atom(expr.data, bindings, memo)
            clauses = []
            for clause in expr.clauses:
                body = yield self.block(clause.body, memo)
                clauses.append(_replace(clause, body=body) if body is not clause.body else clause)
            return _replace(expr, data=data, clauses=tuple(clauses))
        if isinstance(expr, Function):
            body = yield self.block(expr.body, memo)
            return _replace(expr, body=body)
        raise TypeError(f"to_anf: unexpected {type(expr).__name__}")


class _FreshBinders(ExprMutator):
    def __init__(self, binders: set[Var], replace: dict[Var, Expr]) -> None:
        super().__init__()
        self.fresh: dict[Var, Expr] = {}
        for v in binders:
            copy = Var(v.name_hint, v.type_annotation, span=v.span)
            if v.has_type:  # a copy has the type its original was inferred to have
                copy.set_checked_type(v.checked_type)
            self.fresh[v] = copy
        self.fresh.update(replace)

    def visit_Var(self, new: Node, old: Node) -> Node:
        assert isinstance(old, Var)
        return self.fresh.get(old, new)

    def _rebuild(self, node: Node) -> Node:
        # Every compound node is copied, so that the copy shares nothing with
        # the original (a shared `ref(...)` would be one reference, not two).
        rebuilt = super()._rebuild(node)
        if rebuilt is node and isinstance(node, Expr) and not is_atom(node):
            rebuilt = dataclasses.replace(node)
        return rebuilt


def fresh_binders(expr: Expr, replace: dict[Var, Expr] | None = None) -> Expr:
    """A copy of ``expr`` that shares no compound node with it and whose own
    binders are new variables (its free variables stay), so that it can be
    bound a second time; ``replace`` substitutes expressions for variables
    (a binder so replaced must be dropped from the copy by the caller)."""
    binders: set[Var] = set()
    for node in pre_order(expr):
        if isinstance(node, Let):
            binders.add(node.var)
        elif isinstance(node, Function):
            binders.update(node.params)
        elif isinstance(node, PatternVar):
            binders.add(node.var)
    copy = _FreshBinders(binders, replace or {}).mutate(expr)
    assert isinstance(copy, Expr)
    return copy


def _replace(node, **changes):
    """``node`` with ``changes``, or ``node`` itself when nothing changed."""
    if all(getattr(node, k) is v for k, v in changes.items()):
        return node
    return dataclasses.replace(node, **changes)


def _hint(expr: Expr) -> str:
    if isinstance(expr, Call):
        callee = expr.callee
        name = getattr(callee, "name", None) or getattr(callee, "name_hint", None)
        if isinstance(name, str):
            return name.rsplit(".", 1)[-1]
    if isinstance(expr, Function):
        return "f"
    return "t"
