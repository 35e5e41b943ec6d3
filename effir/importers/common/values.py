"""What an importer knows about each value of the model as it builds IR:
the expression naming it, its effir type, and its contents when the
import can compute them (constants, shapes of static tensors, what is
computed from those): what decides an operator's attributes, as a shape
decides ``reshape``'s."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...ir.expr import Constant, Expr
from ...ir.types import TensorType, Type


@dataclass(frozen=True, slots=True)
class Value:
    """``expr`` (a variable, a constant, or another atom), of type ``type``;
    ``const`` is its contents when known at import time."""

    expr: Expr
    type: Type
    const: np.ndarray | None = None

    @property
    def tensor(self) -> TensorType:
        assert isinstance(self.type, TensorType), self.type
        return self.type

    @property
    def is_tensor(self) -> bool:
        return isinstance(self.type, TensorType)


def constant(array: np.ndarray) -> Value:
    """The value of a constant array (its type is its dtype and shape)."""
    node = Constant(np.asarray(array))
    return Value(node, TensorType(tuple(node.data.shape), node.dtype), node.data)
