"""Named dimensions: what a call binds them to, and their replacement in
types and in a program's annotations.

A global function's symbolic dimensions are its own, like implicit type
parameters. A backend binding an entry's symbolic sizes (``n`` -> 32), a
specialised copy written in its caller's dimensions (``n`` -> ``m``) and a
body inlined into its caller all need the same two things: what a call
gives each dimension [RULE DIMS-BIND] (``bind_dims``), and every
``TensorType`` reachable from a node rewritten, the annotations of binders
included (``substitute_dims``)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TypeVar

from . import type_tree
from .functor import Mutator, on, pre_order
from .node import Node
from .types import ANY, Dim, TensorType, Type

N = TypeVar("N", bound=Node)


def static_shapes(t: Type) -> bool:
    """Whether every tensor in ``t`` (through tuples, functions and type
    arguments) has a static shape: what a kernel's types must be."""
    return all(
        not isinstance(n, TensorType) or n.is_static for n in pre_order(t) if isinstance(n, Type)
    )


def substitute_dims(node: N, dims: Mapping[str, Dim]) -> N:
    """``node`` (a type, an expression, a function) with each named
    dimension of ``dims`` replaced by its value (a size or another name),
    in every type it holds; ``node`` itself when none occurs."""
    if not dims:
        return node
    return _Substitution(dims).mutate(node)  # type: ignore[return-value]


def own_dims(node: Node) -> frozenset[str]:
    """The symbolic dimensions ``node`` (a global function: they are its
    own) names in any type it holds."""
    return frozenset(
        d
        for n in pre_order(node)
        if isinstance(n, TensorType)
        for d in n.shape
        if isinstance(d, str) and d != ANY
    )


def bind_dims(dims: Iterable[str], pairs: Iterable[tuple[Type, Type]]) -> dict[str, Dim]:
    """[RULE DIMS-BIND] What a call gives each of ``dims`` (a function's own):
    ``pairs`` are (a part of the function's signature, the type the call
    has there), e.g. each parameter's type with its argument's, the result's
    with the call's. A dimension gets the size or caller's dimension found
    where the signature names it, a size before a name before ``?``; ``?``
    where nothing gives one (a dimension of the body alone)."""
    found: dict[str, Dim] = dict.fromkeys(dims, ANY)
    for pattern, concrete in type_tree.corresponding(pairs):
        if not (isinstance(pattern, TensorType) and isinstance(concrete, TensorType)):
            continue
        if len(pattern.shape) != len(concrete.shape):
            continue
        for d, c in zip(pattern.shape, concrete.shape, strict=True):
            if isinstance(d, str) and d in found and _rank(c) > _rank(found[d]):
                found[d] = c
    return found


def _rank(d: Dim) -> int:
    """A size beats a name beats ``?``."""
    return 2 if isinstance(d, int) else 0 if d == ANY else 1


class _Substitution(Mutator):
    """Every type, the annotations of binders included."""

    binders = True
    types = True

    def __init__(self, dims: Mapping[str, Dim]) -> None:
        super().__init__()
        self.dims = dims

    @on(TensorType)
    def _tensor(self, new: Node, old: Node) -> Node:
        assert isinstance(new, TensorType)
        if all(isinstance(d, int) or d not in self.dims for d in new.shape):
            return new
        shape = tuple(self.dims.get(d, d) if isinstance(d, str) else d for d in new.shape)
        return TensorType(shape, new.dtype)


__all__ = ["bind_dims", "own_dims", "substitute_dims"]
