"""Named dimensions replaced in types and in a program's annotations.

Both a backend binding an entry's symbolic sizes (``n`` -> 32) and a
specialised copy written in its caller's dimensions (``n`` -> ``m``)
rewrite every ``TensorType`` reachable from a node, the annotations of
binders included: one mutator does it for both."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeVar

from .functor import Mutator, on
from .node import Node
from .types import Dim, TensorType

N = TypeVar("N", bound=Node)


def substitute_dims(node: N, dims: Mapping[str, Dim]) -> N:
    """``node`` (a type, an expression, a function) with each named
    dimension of ``dims`` replaced by its value (a size or another name),
    in every type it holds; ``node`` itself when none occurs."""
    if not dims:
        return node
    return _Substitution(dims).mutate(node)  # type: ignore[return-value]


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


__all__ = ["substitute_dims"]
