"""Liveness of Python variables, for ``@effir.script``'s loops and branches.

A loop becomes ``cf.foreach``/``cf.while_loop`` whose state is the tuple of
its *carried* variables: those the body assigns and whose value is needed
later, by the next iteration (read before being written in the body, or in a
``while`` test) or after the loop. ``outs.append(y)`` in the body makes
``outs`` a per-step *output* (stacked after the loop). What the body assigns
and nobody reads later is *dead*. An ``if`` returns the names its branches
assign that are live after it, a ``match`` those its cases bind or assign.

Standard backward dataflow over the AST (docs/frontend.md, "Liveness"):
``live_in(stmts, live_out)``; a loop's head is the least fixpoint of
``H = out ∪ live_in(body, H)`` (minus the ``for`` target).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass


def expr_uses(node: ast.AST | None) -> set[str]:
    """Names an expression reads (a lambda's own parameters excluded)."""
    if node is None:
        return set()
    used: set[str] = set()
    stack: list[tuple[ast.AST, frozenset[str]]] = [(node, frozenset())]
    while stack:
        current, bound = stack.pop()
        if isinstance(current, ast.Name) and isinstance(current.ctx, ast.Load):
            if current.id not in bound:
                used.add(current.id)
            continue
        if isinstance(current, ast.Lambda):
            params = frozenset(a.arg for a in current.args.args)
            stack.append((current.body, bound | params))
            continue
        stack.extend((child, bound) for child in ast.iter_child_nodes(current))
    return used


def target_names(target: ast.AST) -> list[str]:
    """Names a binding target assigns (``a``, ``a, (b, c)``)."""
    if isinstance(target, ast.Name):
        return [target.id]
    if isinstance(target, ast.Tuple | ast.List):
        return [n for t in target.elts for n in target_names(t)]
    if isinstance(target, ast.Starred):
        return target_names(target.value)
    return []


def assigned(stmts: list[ast.stmt]) -> list[str]:
    """Names the statements assign, in order of first assignment (nested
    blocks included, nested function bodies not; a case's captures before
    its body)."""
    seen: dict[str, None] = {}
    stack: list[ast.stmt | list[str]] = list(reversed(stmts))
    while stack:
        stmt = stack.pop()
        names: list[str] = []
        if isinstance(stmt, list):  # a case's captures
            names = stmt
        elif isinstance(stmt, ast.Assign):
            names = [n for t in stmt.targets for n in target_names(t)]
        elif isinstance(stmt, ast.AugAssign | ast.AnnAssign):
            names = target_names(stmt.target)
        elif isinstance(stmt, ast.For):
            names = target_names(stmt.target)
            stack.extend(reversed(stmt.body))
        elif isinstance(stmt, ast.While):
            stack.extend(reversed(stmt.body))
        elif isinstance(stmt, ast.If):
            stack.extend(reversed(stmt.orelse))
            stack.extend(reversed(stmt.body))
        elif isinstance(stmt, ast.Match):
            for case in reversed(stmt.cases):
                stack.extend(reversed(case.body))
                stack.append(pattern_names(case.pattern))
        elif isinstance(stmt, ast.FunctionDef):
            names = [stmt.name]
        for name in names:
            seen.setdefault(name, None)
    return list(seen)


def pattern_names(pattern: ast.pattern) -> list[str]:
    """Names a ``case`` pattern binds (``Node(left, right=r) as n``), in order."""
    names: list[str] = []
    for node in ast.walk(pattern):
        if isinstance(node, ast.MatchAs | ast.MatchStar) and node.name:
            names.append(node.name)
        elif isinstance(node, ast.MatchMapping) and node.rest:
            names.append(node.rest)
    return names


def pattern_uses(pattern: ast.pattern) -> set[str]:
    """Names a pattern reads (its classes, ``Tree.Leaf``; value patterns)."""
    used: set[str] = set()
    for node in ast.walk(pattern):
        if isinstance(node, ast.MatchClass):
            used |= expr_uses(node.cls)
        elif isinstance(node, ast.MatchValue):
            used |= expr_uses(node.value)
    return used


def appended_lists(stmts: list[ast.stmt]) -> list[str]:
    """Names ``x`` with a statement ``x.append(...)`` at this level."""
    names: dict[str, None] = {}
    for stmt in stmts:
        name = append_target(stmt)
        if name is not None:
            names.setdefault(name, None)
    return list(names)


def append_target(stmt: ast.stmt) -> str | None:
    if (
        isinstance(stmt, ast.Expr)
        and isinstance(stmt.value, ast.Call)
        and isinstance(stmt.value.func, ast.Attribute)
        and stmt.value.func.attr == "append"
        and isinstance(stmt.value.func.value, ast.Name)
    ):
        return stmt.value.func.value.id
    return None


def live_in(stmts: list[ast.stmt], live_out: set[str]) -> set[str]:
    """Names live before ``stmts`` when ``live_out`` are live after them."""
    live = set(live_out)
    for stmt in reversed(stmts):
        live = _transfer(stmt, live)
    return live


def _transfer(stmt: ast.stmt, out: set[str]) -> set[str]:
    if isinstance(stmt, ast.Assign):
        defs = {n for t in stmt.targets for n in target_names(t)}
        extra = {n for t in stmt.targets for n in expr_uses(t)}  # x[i] = ... reads x, i
        return (out - defs) | expr_uses(stmt.value) | extra
    if isinstance(stmt, ast.AugAssign):
        return out | expr_uses(stmt.target) | set(target_names(stmt.target)) | expr_uses(stmt.value)
    if isinstance(stmt, ast.AnnAssign):
        return (out - set(target_names(stmt.target))) | expr_uses(stmt.value)
    if isinstance(stmt, ast.Return):
        return expr_uses(stmt.value)
    if isinstance(stmt, ast.If):
        return expr_uses(stmt.test) | live_in(stmt.body, out) | live_in(stmt.orelse, out)
    if isinstance(stmt, ast.Match):
        live = expr_uses(stmt.subject)
        for case in stmt.cases:
            inside = live_in(case.body, out) | expr_uses(case.guard)
            live |= (inside - set(pattern_names(case.pattern))) | pattern_uses(case.pattern)
        return live
    if isinstance(stmt, ast.For):
        return expr_uses(stmt.iter) | loop_head(stmt, out)
    if isinstance(stmt, ast.While):
        return loop_head(stmt, out)
    if isinstance(stmt, ast.FunctionDef):
        return (out - {stmt.name}) | function_free(stmt)
    uses: set[str] = set()
    for child in ast.iter_child_nodes(stmt):
        if isinstance(child, ast.expr):
            uses |= expr_uses(child)
    return out | uses


def function_free(fn: ast.FunctionDef) -> set[str]:
    """Names a nested function reads from its enclosing scope."""
    params = {a.arg for a in fn.args.args}
    return live_in(fn.body, set()) - params - {fn.name}


def loop_head(loop: ast.For | ast.While, out: set[str]) -> set[str]:
    """Names live at the loop's head (before each test or step), the least
    fixpoint of ``H = out ∪ test uses ∪ live_in(body, H) - targets``."""
    targets = set(target_names(loop.target)) if isinstance(loop, ast.For) else set()
    test = expr_uses(loop.test) if isinstance(loop, ast.While) else set()
    head = set(out) | test
    while True:
        new = set(out) | test | (live_in(loop.body, head) - targets)
        if new == head:
            return head
        head = new


@dataclass(frozen=True)
class LoopVars:
    """How a loop's variables flow (see the module docstring)."""

    carried: tuple[str, ...]
    outputs: tuple[str, ...]
    dead: tuple[str, ...]
    targets: tuple[str, ...]


def analyze_loop(loop: ast.For | ast.While, live_after: set[str]) -> LoopVars:
    """The carried, output and dead variables of ``loop`` when
    ``live_after`` are live after it."""
    targets = tuple(target_names(loop.target)) if isinstance(loop, ast.For) else ()
    head = loop_head(loop, live_after)
    body_assigned = [n for n in assigned(loop.body) if n not in targets]
    carried = tuple(n for n in body_assigned if n in head)
    dead = tuple(n for n in body_assigned if n not in head)
    return LoopVars(carried, tuple(appended_lists(loop.body)), dead, targets)


def match_outputs(node: ast.Match, live_after: set[str]) -> tuple[str, ...]:
    """The names a ``match`` returns: bound or assigned in a case and live after it."""
    names: dict[str, None] = {}
    for case in node.cases:
        for name in [*pattern_names(case.pattern), *assigned(case.body)]:
            names.setdefault(name, None)
    return tuple(n for n in names if n in live_after)


def branch_outputs(node: ast.If, live_after: set[str]) -> tuple[str, ...]:
    """The names an ``if`` returns: assigned in a branch and live after it."""
    names = assigned(node.body) + [n for n in assigned(node.orelse) if n not in assigned(node.body)]
    return tuple(n for n in names if n in live_after)
