"""What an importer knows about each value of the model as it builds IR:
the expression naming it, its effir type, its contents when the import
can compute them (constants, shapes of static tensors, what is computed
from those), and, for an integer tensor holding sizes, those sizes as
dimensions (``batch``, 3): what decides an operator's attributes, as a
shape decides ``reshape``'s. A model exported from a framework computes
its reshapes from the shapes of its tensors (``Shape``, ``Gather``,
``Concat``); with the symbols the reshape stays static where the sizes
allow it, instead of ``dyn.reshape`` forgetting every dimension."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ...ir.expr import Constant, Expr
from ...ir.types import ANY, Dim, TensorType, Type


@dataclass(frozen=True, slots=True)
class Value:
    """``expr`` (a variable, a constant, or another atom), of type ``type``;
    ``const`` is its contents when known at import time."""

    expr: Expr
    type: Type
    const: np.ndarray | None = None
    dims: tuple[Dim, ...] | None = None  # an integer tensor's elements, as sizes

    @property
    def tensor(self) -> TensorType:
        assert isinstance(self.type, TensorType), self.type
        return self.type

    @property
    def is_tensor(self) -> bool:
        return isinstance(self.type, TensorType)

    def sizes(self) -> tuple[Dim, ...] | None:
        """The elements as sizes: the contents of a known integer tensor,
        or the dimensions it is known to hold; None when unknown."""
        if self.const is not None:
            if self.const.dtype.kind not in "iu" or self.const.ndim > 1:
                return None
            return tuple(int(v) for v in self.const.reshape(-1))
        return self.dims

    def holding(self, dims: tuple[Dim, ...] | None) -> Value:
        """This value, known to hold the sizes ``dims`` (None: unknown;
        a ``?`` among them is not a size one can name: unknown too)."""
        if dims is None or any(d == ANY for d in dims) or self.const is not None:
            return self
        return replace(self, dims=tuple(dims))


def constant(array: np.ndarray) -> Value:
    """The value of a constant array (its type is its dtype and shape)."""
    node = Constant(np.asarray(array))
    return Value(node, TensorType(tuple(node.data.shape), node.dtype), node.data)
