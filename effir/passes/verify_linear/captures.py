"""What each closure captures (free variables with the tuple paths it
uses of them), and the nodes that graph form shares (evaluated once)."""

from __future__ import annotations

from ...ir.expr import Clause, Expr, Function, Pattern, TupleGetItem, Var, is_atom
from ...ir.module import IRModule
from ...ir.node import Node
from ...ir.types import IncompleteType, Type
from ...ir.visitor import post_order, pre_order
from .locations import slots
from .places import Path


def incomplete(ty: Type) -> bool:
    return any(isinstance(n, IncompleteType) for n in pre_order(ty))


def free_vars_with_paths(module: IRModule) -> dict[Function, list[tuple[Var, Path]]]:
    """The free places of every function: each free variable with the
    projection path the body applies to it (``%ks.1`` captures only that
    field), in order of first use; inner functions first, so that each body
    is walked once."""
    free: dict[Function, list[tuple[Var, Path]]] = {}
    for root in module.functions.values():
        for node in post_order(root):
            if isinstance(node, Function):
                free[node] = _free_in(node, free)
    return free


def _free_in(fn: Function, free: dict[Function, list[tuple[Var, Path]]]) -> list[tuple[Var, Path]]:
    used: dict[tuple[Var, Path], None] = {}
    bound: set[Var] = set(fn.params)
    stack: list[Node] = [fn.body]
    seen: set[int] = set()
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, TupleGetItem):
            path: list[int] = []
            base: Expr = node
            while isinstance(base, TupleGetItem):
                path.append(base.index)
                base = base.tuple_value
            if isinstance(base, Var):
                used.setdefault((base, tuple(reversed(path))))
            else:
                stack.append(base)
            continue
        if isinstance(node, Var):
            used.setdefault((node, ()))
            continue
        if isinstance(node, Function):
            for item in free.get(node, ()):
                used.setdefault(item)
            continue
        for kind, child in reversed(slots(node)):
            if kind in ("def", "defs"):
                if isinstance(child, Var):
                    bound.add(child)
            elif isinstance(child, Expr | Pattern | Clause):
                stack.append(child)
    paths: dict[Var, set[Path]] = {}
    for var, path in used:
        paths.setdefault(var, set()).add(path)
    return [
        (var, path)
        for var, path in used
        if var not in bound and not any(path[:k] in paths[var] for k in range(len(path)))
    ]


def shared_nodes(module: IRModule) -> set[int]:
    """Expressions reached along more than one edge (graph form)."""
    seen: set[int] = set()
    shared: set[int] = set()
    stack: list[Node] = list(module.functions.values())
    while stack:
        node = stack.pop()
        for child in node.children():
            if not isinstance(child, Expr):
                if isinstance(child, Clause):  # a match's clause: walk its body
                    stack.append(child)
                continue
            if is_atom(child):
                continue
            if id(child) in seen:
                shared.add(id(child))
            else:
                seen.add(id(child))
                stack.append(child)
    return shared
