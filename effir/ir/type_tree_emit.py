"""Tuple-typed values walked while emitting bindings: ``type_tree``'s walks
for code that builds a program.

A transformation often rewrites a value of a (nested) tuple type leaf by
leaf: each tensor sliced, reversed, concatenated with another value's,
and the tuple built again. ``map_value`` does that through a
``LetBuilder``: each field is projected (``emit_get``) just before it is
walked, a leaf's rewrite is emitted by ``leaf``, and each tuple is built
once its fields are, so the bindings come in the order a recursive walk
would emit them. The walk is iterative (an explicit stack of the tuples
being built), as every walk over the IR is. ``map_values`` walks several
values of the same type side by side (a concatenation of two trees).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from .builder import LetBuilder
from .expr import Expr
from .types import TupleType, Type

Leaf = Callable[[LetBuilder, Expr, Type], Expr]
"""``leaf(b, value, type)``: a leaf's value rewritten, emitted into ``b``."""

Leaves = Callable[[LetBuilder, list[Expr], Type], Expr]
"""``leaves(b, values, type)``: one leaf of several trees, combined."""

__all__ = ["Leaf", "Leaves", "map_value", "map_values"]


def map_value(
    b: LetBuilder, value: Expr, t: Type, leaf: Leaf, hint: str = "tree", part: str = "part"
) -> Expr:
    """``value`` (of type ``t``) with ``leaf`` applied to each leaf, its
    tuples built again (named ``hint``; projections named ``part``)."""
    return map_values(b, [value], t, lambda bb, vs, ty: leaf(bb, vs[0], ty), hint, part)


def map_values(
    b: LetBuilder,
    values: Sequence[Expr],
    t: Type,
    leaves: Leaves,
    hint: str = "tree",
    part: str = "part",
) -> Expr:
    """The tree of type ``t`` whose leaves are ``leaves(b, [the values'
    leaves at that place], leaf type)``; each field of every value is
    projected just before that field is walked."""
    if not isinstance(t, TupleType):
        return leaves(b, list(values), t)
    # frames: (tuple type, the values at this tuple, fields built so far)
    stack: list[tuple[TupleType, list[Expr], list[Expr]]] = [(t, list(values), [])]
    while True:
        ty, here, built = stack[-1]
        i = len(built)
        if i == len(ty.fields):
            stack.pop()
            tree = b.emit(b.tuple(built), hint)
            if not stack:
                return tree
            stack[-1][2].append(tree)
            continue
        field = ty.fields[i]
        sub: list[Expr] = [b.emit_get(v, i, part) for v in here]
        if isinstance(field, TupleType):
            stack.append((field, sub, []))
        else:
            built.append(leaves(b, sub, field))
