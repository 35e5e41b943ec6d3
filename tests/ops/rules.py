"""Calling an operator's rules directly, as the operator tests do."""

from __future__ import annotations

from typing import Any

import numpy as np

from effir.ir.op import op_def
from effir.ir.types import TensorType, Type

T = TensorType  # T((2, 3)) is Tensor[(2, 3), float32]


def rel(name: str, *types: Type, **attrs: Any) -> Type:
    """The type relation's result for argument types ``types``."""
    definition = op_def(name)
    return definition.rule("type")(tuple(types), definition.normalize_attrs(attrs))


def run(name: str, *values: Any, **attrs: Any) -> Any:
    """The numpy rule's result for argument values ``values``."""
    definition = op_def(name)
    return definition.rule("numpy")(tuple(values), definition.normalize_attrs(attrs))


def run_tensor(name: str, *values: Any, **attrs: Any) -> np.ndarray:
    """``run`` for an operator that returns one tensor (never a numpy scalar)."""
    out = run(name, *values, **attrs)
    assert isinstance(out, np.ndarray)
    return out


def assert_type(t: Type, shape: tuple, dtype: str) -> None:
    assert isinstance(t, TensorType)
    assert (t.shape, t.dtype) == (tuple(shape), dtype)
