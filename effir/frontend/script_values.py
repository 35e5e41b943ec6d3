"""What the script converter keeps in its environment besides effir
values: a block's return, the lists loops append to, nested functions
(staged: inlined where called with values, a closure where used as one)
and the let-chain places kept for those closures."""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING, Any

from ..ir.expr import Expr, Function, Var
from . import builder as B
from .spans import span_scope
from .values import to_expr

if TYPE_CHECKING:
    from .script_convert import Converter


class Return:
    """A block that ended in ``return value`` (at ``node``)."""

    def __init__(self, value: Any, node: ast.AST | None = None) -> None:
        self.value = value
        self.node = node


class Collector:
    """A list being appended to inside a loop body (one value per step)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.value: Any = None


class EmptyList:
    """``outs = []`` before a loop appends to it."""


class Staged:
    """A nested ``def`` or ``lambda``: a Python callable that converts its
    body where it is called with values (inlined: for effir.cond/foreach
    bodies), and an effir closure, built at its definition, where it is used
    as a value or called from converted code."""

    def __init__(
        self, conv: Converter, node: ast.FunctionDef | ast.Lambda, env: dict, slot: Slot | None
    ) -> None:
        self.conv, self.node, self.env, self.slot = conv, node, env, slot
        self.var: Var | None = None
        self.hinting = False  # being converted aside for a type hint

    def params(self) -> list[str]:
        args = self.node.args
        return [a.arg for a in args.args]

    def __call__(self, *values: Any) -> Any:
        names = self.params()
        if len(values) != len(names):
            raise self.conv.error(
                self.node, f"this function takes {len(names)} argument(s), got {len(values)}"
            )
        env = dict(self.env)
        env.update(zip(names, values, strict=True))
        if isinstance(self.node, ast.Lambda):
            return self.conv.expr(self.node.body, env)
        result = self.conv.block(self.node.body, env, set())
        if not isinstance(result, Return):
            raise self.conv.error(
                self.node, "a nested function must return a value", "end it with `return value`"
            )
        return result.value

    def closure(self) -> Var:
        """The effir closure (bound where the def was), built on first use."""
        if self.var is not None:
            return self.var
        node, conv = self.node, self.conv
        name = node.name if isinstance(node, ast.FunctionDef) else "lambda"
        with span_scope(conv.span(node)):
            self.var = var = B.new_var(name)
            params = []
            for a in node.args.args:
                t = conv.annotation(a.annotation) if a.annotation is not None else None
                params.append(Var(a.arg, t, span=conv.span(a)))
        if self.slot is None:
            raise conv.error(
                node,
                "this lambda cannot be used as a value here",
                "define it with def before this statement",
            )
        self.slot.var = var
        env = dict(self.env)
        if isinstance(node, ast.FunctionDef):
            env[node.name] = self
        env.update(zip(self.params(), params, strict=True))

        def body(*_: Any) -> Any:
            if isinstance(node, ast.Lambda):
                return conv.expr(node.body, env)
            result = conv.block(node.body, env, set())
            if not isinstance(result, Return):
                raise conv.error(
                    node, "a nested function must return a value", "end it with `return value`"
                )
            return result.value

        with B._block() as block:
            result = body()
            fn_body = B._close(block, to_expr(result))
        self.slot.value = Function(tuple(params), fn_body, span=conv.span(node))
        return var


class Slot:
    """A place in a let-chain kept for a closure built later (or never)."""

    __slots__ = ("var", "value", "span")

    def __init__(self) -> None:
        self.var: Var | None = None
        self.value: Function | None = None
        self.span = None


def fill_slots(expr: Expr) -> Expr:
    """``expr`` with slots filled or dropped, rebuilt bottom-up without
    recursion proportional to the chain's length."""
    from ..ir.expr import Let

    memo: dict[int, Expr] = {}
    stack: list[tuple[Expr, bool]] = [(expr, False)]
    while stack:
        node, done = stack.pop()
        if id(node) in memo:
            continue
        kids = _kids(node)
        if not done:
            stack.append((node, True))
            stack.extend((k, False) for k in kids if id(k) not in memo)
            continue
        if isinstance(node, Let):
            if isinstance(node.value, Slot):
                slot = node.value
                body = memo[id(node.body)]
                if slot.var is None or slot.value is None:
                    memo[id(node)] = body
                else:
                    memo[id(node)] = Let(slot.var, memo[id(slot.value)], body, span=slot.value.span)
                continue
            memo[id(node)] = _replace(node, memo)
        else:
            memo[id(node)] = _replace(node, memo)
    return memo[id(expr)]


def _kids(node: Expr) -> list[Expr]:
    from ..ir.expr import Let

    if isinstance(node, Let) and isinstance(node.value, Slot):
        kids = [node.body]
        if node.value.value is not None:
            kids.append(node.value.value)
        return kids
    return [c for c in node.children() if isinstance(c, Expr) and not isinstance(c, Slot)]


def _replace(node: Expr, memo: dict[int, Expr]) -> Expr:
    """``node`` with its child expressions replaced from ``memo`` (the same
    node when none changed)."""
    import dataclasses

    changes: dict[str, Any] = {}
    for name, kind in node.FIELDS:
        value = getattr(node, name)
        if kind == "node" and isinstance(value, Expr) and id(value) in memo:
            if memo[id(value)] is not value:
                changes[name] = memo[id(value)]
        elif kind == "nodes":
            new = tuple(memo.get(id(v), v) if isinstance(v, Expr) else v for v in value)
            if any(a is not b for a, b in zip(new, value, strict=True)):
                changes[name] = new
    if not changes:
        return node
    return dataclasses.replace(node, **changes)
