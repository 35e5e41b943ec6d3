"""Generic traversal and rewriting of IR, without recursion.

``pre_order``/``post_order`` visit each node once (shared nodes included
once), children in field order. ``ExprMutator`` rebuilds a tree bottom-up:
a subclass defines ``visit_<NodeClass>(new, old)`` hooks that receive the
node with its children already rewritten and return its replacement; shared
nodes stay shared and unchanged subtrees keep their identity.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator

from .expr import Function, Let, PatternVar, Var
from .node import Node
from .types import Type


def pre_order(root: Node) -> Iterator[Node]:
    """Each node reachable from ``root`` once, parents before children."""
    seen: set[int] = set()
    stack = [root]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        yield node
        children = list(node.children())
        for name, kind in type(node).FIELDS:
            if kind == "ctordefs":
                for ctor in getattr(node, name):
                    children.extend(ctor.inputs)
        stack.extend(reversed(children))


def free_vars(fn: Function) -> list[Var]:
    """The variables ``fn`` uses but does not bind, in order of first occurrence."""
    bound: set[int] = set()
    used: list[Var] = []
    seen: set[int] = set()
    for node in pre_order(fn):
        if isinstance(node, Function):
            bound.update(id(p) for p in node.params)
        elif isinstance(node, Let):
            bound.add(id(node.var))
        elif isinstance(node, PatternVar):
            bound.add(id(node.var))
        elif isinstance(node, Var) and id(node) not in seen:
            seen.add(id(node))
            used.append(node)
    return [v for v in used if id(v) not in bound]


def free_vars_by_function(root: Node) -> dict[Function, list[Var]]:
    """``free_vars`` of every function in ``root`` (``root`` included), in
    one walk: inner functions first, each body walked without entering the
    functions inside it, whose free variables it takes from theirs. (A walk
    of each function's whole body is quadratic in the nesting depth.)"""
    free: dict[Function, list[Var]] = {}
    for node in post_order(root):
        if isinstance(node, Function):
            free[node] = _free_in(node, free)
    return free


def _free_in(fn: Function, free: dict[Function, list[Var]]) -> list[Var]:
    used: dict[Var, None] = {}  # in order of first occurrence
    bound: set[Var] = set(fn.params)
    stack: list[Node] = [fn.body]
    seen: set[int] = set()
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, Var):
            used.setdefault(node)
        elif isinstance(node, Function):
            for var in free[node]:
                used.setdefault(var)
        else:
            if isinstance(node, Let | PatternVar):
                bound.add(node.var)
            stack.extend(
                child for child in reversed(list(node.children())) if not isinstance(child, Type)
            )
    return [v for v in used if v not in bound]


def post_order(root: Node) -> list[Node]:
    """Each node reachable from ``root`` once, children before parents."""
    order: list[Node] = []
    seen: set[int] = set()
    stack: list[tuple[Node, bool]] = [(root, False)]
    while stack:
        node, expanded = stack.pop()
        if expanded:
            order.append(node)
            continue
        if id(node) in seen:
            continue
        seen.add(id(node))
        stack.append((node, True))
        children = list(node.children())
        stack.extend((child, False) for child in reversed(children) if id(child) not in seen)
    return order


class ExprMutator:
    """Bottom-up rewriting with ``visit_<NodeClass>(new, old) -> Node`` hooks."""

    def __init__(self) -> None:
        self.memo: dict[int, Node] = {}
        self._hooks: dict[type, Callable[[Node, Node], Node] | None] = {}

    def _hook(self, cls: type) -> Callable[[Node, Node], Node] | None:
        if cls not in self._hooks:
            self._hooks[cls] = getattr(self, "visit_" + cls.__name__, None)
        return self._hooks[cls]

    def mutate(self, root: Node) -> Node:
        memo = self.memo
        for node in post_order(root):
            rebuilt = self._rebuild(node)
            hook = self._hook(type(rebuilt))
            memo[id(node)] = hook(rebuilt, node) if hook is not None else rebuilt
        return memo[id(root)]

    def _rebuild(self, node: Node) -> Node:
        memo = self.memo
        changes = {}
        for name, kind in type(node).FIELDS:
            value = getattr(node, name)
            if kind in ("node", "def"):
                if value is not None:
                    new = memo.get(id(value), value)
                    if new is not value:
                        changes[name] = new
            elif kind in ("nodes", "defs"):
                new_items = tuple(memo.get(id(v), v) for v in value)
                if any(a is not b for a, b in zip(new_items, value, strict=True)):
                    changes[name] = new_items
        return dataclasses.replace(node, **changes) if changes else node


def block_heads(root: Node) -> set[int]:
    """Identities of the lets that start a block (a let chain): every let
    that is not the body of another let."""
    lets = [node for node in pre_order(root) if isinstance(node, Let)]
    bodies = {id(node.body) for node in lets}
    return {id(node) for node in lets} - bodies
