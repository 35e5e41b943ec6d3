"""Free variables of every branch, clause and closure, in one walk.

The pullback of an ``if``, a ``match`` or a closure returns the cotangents
of the node's free variables; asking ``analysis.free_vars`` per node would
walk each nested node again for every node around it (quadratic in the
nesting depth). Here one post-order walk per function gives every node's
free variables from its children's (a dict per node, in order of first
use, so the generated code is deterministic).
"""

from __future__ import annotations

from ..ir.analysis import operands
from ..ir.expr import Clause, Function, If, Let, Match, PatternVar, Var
from ..ir.functor import post_order, pre_order
from ..ir.module import IRModule
from ..ir.node import Node

Free = dict[Var, None]


def free_variable_table(module: IRModule) -> dict[int, list[Var]]:
    """``id(node)`` -> the free variables of each If, Match and Function."""
    table: dict[int, list[Var]] = {}
    for fn in module.functions.values():
        free: dict[int, Free] = {}
        for node in post_order(fn):
            found = _free(node, free)
            free[id(node)] = found
            if isinstance(node, If | Match | Function):
                table[id(node)] = list(found)
    return table


def _free(node: Node, free: dict[int, Free]) -> Free:
    if isinstance(node, Var):
        return {node: None}
    if isinstance(node, Let):
        out = dict(free.get(id(node.value), {}))
        out.update(free.get(id(node.body), {}))
        out.pop(node.var, None)
        return out
    if isinstance(node, Function):
        out = dict(free.get(id(node.body), {}))
        for p in node.params:
            out.pop(p, None)
        return out
    if isinstance(node, Clause):
        out = dict(free.get(id(node.body), {}))
        for p in pre_order(node.pattern):
            if isinstance(p, PatternVar):
                out.pop(p.var, None)
        return out
    out: Free = {}
    for child in operands(node):
        out.update(free.get(id(child), {}))
    return out
