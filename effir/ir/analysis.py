"""Analyses every pass asks for, written once: operands, shared nodes, uses,
free variables, block heads.

An *operand* of a node is an expression or match clause it holds in a use
field (``node``/``nodes``: not a binder, a type or a pattern); the operand
edges are the evaluation structure of a program. A node reached along more
than one operand edge is *shared* (the text's graph form ``%0 = ...;``): it
is evaluated once, where it is first needed, so a pass must not move,
duplicate or bind it twice. Atoms (variables, globals, constants,
operators, constructors) are never counted as shared: they are names, not
computations.

All of these are iterative and linear in the program's size.
"""

from __future__ import annotations

from collections import Counter

from .expr import ATOM_TYPES, Function, Let, PatternVar, Var
from .functor import post_order, pre_order
from .node import EXPR, TYPE, Node, child_nodes, child_slots, nodes_in


def operand_fields(node: Node) -> tuple[tuple[str, bool], ...]:
    """The use fields of ``node``'s class that may hold expressions:
    ``(name, holds a tuple)``, in field order."""
    fields = _OPERAND_FIELDS.get(type(node))
    if fields is None:
        fields = _OPERAND_FIELDS[type(node)] = tuple(
            (s.name, s.many) for s in child_slots(type(node)) if not s.binder and s.role == EXPR
        )
    return fields


_OPERAND_FIELDS: dict[type, tuple[tuple[str, bool], ...]] = {}


def operands(node: Node) -> list[Node]:
    """The expressions and clauses ``node`` holds in use fields, atoms
    included, in field order."""
    found: list[Node] = []  # nodes_in's loop, inline: dce and cse call this per node
    for name, many in _OPERAND_FIELDS.get(type(node)) or operand_fields(node):
        value = getattr(node, name)
        if many:
            found.extend(value)
        elif value is not None:
            found.append(value)
    return found


def scan(*roots: Node) -> tuple[list[Node], set[int]]:
    """The non-atomic expressions and clauses under ``roots``, children
    before parents, each once; and the identities of the shared ones."""
    reached: set[int] = set()
    shared: set[int] = set()

    def compound(node: Node) -> list[Node]:  # called once per node: counts its edges
        fields = _OPERAND_FIELDS.get(type(node)) or operand_fields(node)
        found = [c for c in nodes_in(node, fields) if not isinstance(c, ATOM_TYPES)]
        for child in found:
            key = id(child)
            if key in reached:
                shared.add(key)
            else:
                reached.add(key)
        return found

    return post_order(*roots, children=compound), shared


def shared_nodes(*roots: Node) -> set[int]:
    """Identities of the non-atomic expressions and clauses reached along
    more than one operand edge from ``roots`` (the text's graph form);
    ``scan`` without the order."""
    seen: set[int] = set()
    shared: set[int] = set()
    stack = list(roots)
    while stack:
        for child in operands(stack.pop()):
            if isinstance(child, ATOM_TYPES):
                continue
            if id(child) in seen:
                shared.add(id(child))
            else:
                seen.add(id(child))
                stack.append(child)
    return shared


def use_counts(root: Node) -> Counter[Var]:
    """How many operand edges name each variable (a shared node's edges
    count once); binders are not uses."""
    uses: Counter[Var] = Counter()
    seen: set[int] = set()
    stack = [root]
    while stack:
        for child in operands(stack.pop()):
            if isinstance(child, Var):
                uses[child] += 1
            elif not isinstance(child, ATOM_TYPES) and id(child) not in seen:
                seen.add(id(child))
                stack.append(child)
    return uses


def bound_vars(root: Node) -> set[Var]:
    """The variables ``root`` binds: let variables, parameters of the
    functions in it, pattern variables (what a copy must rename)."""
    bound: set[Var] = set()
    for node in pre_order(root):
        if isinstance(node, Let | PatternVar):
            bound.add(node.var)
        elif isinstance(node, Function):
            bound.update(node.params)
    return bound


def free_vars(fn: Function) -> list[Var]:
    """The variables ``fn`` uses but does not bind, in order of first occurrence."""
    bound: set[int] = set()
    used: list[Var] = []
    seen: set[int] = set()
    for node in pre_order(fn):
        if isinstance(node, Function):
            bound.update(id(p) for p in node.params)
        elif isinstance(node, Let | PatternVar):
            bound.add(id(node.var))
        elif isinstance(node, Var) and id(node) not in seen:
            seen.add(id(node))
            used.append(node)
    return [v for v in used if id(v) not in bound]


def free_vars_by_function(*roots: Node) -> dict[Function, list[Var]]:
    """``free_vars`` of every function under ``roots`` (roots included), in
    one walk: inner functions first, each body walked without entering the
    functions inside it, whose free variables it takes from theirs. (A walk
    of each function's whole body is quadratic in the nesting depth.)"""
    free: dict[Function, list[Var]] = {}
    for root in roots:
        for node in post_order(root):
            if isinstance(node, Function) and node not in free:
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
            stack.extend(_value_children(node))
    return [v for v in used if v not in bound]


def _value_children(node: Node) -> list[Node]:
    """Children that may hold variables (not types), reversed (for a stack)."""
    fields = _VALUE_FIELDS.get(type(node))
    if fields is None:
        fields = _VALUE_FIELDS[type(node)] = tuple(
            (s.name, s.many) for s in child_slots(type(node)) if s.role != TYPE
        )
    found = nodes_in(node, fields)
    found.reverse()
    return found


_VALUE_FIELDS: dict[type, tuple[tuple[str, bool], ...]] = {}


def body_nodes(body: Node) -> list[Node]:
    """Each node of ``body`` once (every field kind), parents first, not
    entering function literals: a literal is listed, its body is not (what
    one activation of the enclosing function evaluates or binds)."""
    return list(pre_order(body, children=_outside_functions))


def _outside_functions(node: Node) -> list[Node]:
    return [] if isinstance(node, Function) else child_nodes(node)


def block_heads(root: Node) -> set[int]:
    """Identities of the lets that start a block (a let chain): every let
    that is not the body of another let."""
    lets = [node for node in pre_order(root) if isinstance(node, Let)]
    bodies = {id(node.body) for node in lets}
    return {id(node) for node in lets} - bodies


__all__ = [
    "block_heads",
    "bound_vars",
    "body_nodes",
    "free_vars",
    "free_vars_by_function",
    "operand_fields",
    "operands",
    "scan",
    "shared_nodes",
    "use_counts",
]
