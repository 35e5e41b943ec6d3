"""Tensor creation: constants of a given shape (zeros, ones, full) and their
shape-tensor variants (``dyn.``), whose shape comes from a tensor's values."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..ir.expr import Expr
from ..ir.node import Attrs
from ..ir.op import AttrSpec, register_op
from ..ir.types import ANY, TensorType, Type
from ..ir.vjp import Args, Grads, VjpContext, defvjp, not_differentiable
from ..runtime.values import as_tensor
from .relations import (
    NumpyImpl,
    TypeRelation,
    allocation,
    check_dims,
    expect_scalar,
    numpy_rule,
    shape_tensor_rank,
    shape_value,
    type_rule,
    with_op_name,
)

_DTYPE = AttrSpec("dtype", "dtype", "float32")

register_op("zeros", 0, attrs=(AttrSpec("shape", "ints"), _DTYPE), traits=("elementwise",))
register_op("ones", 0, attrs=(AttrSpec("shape", "ints"), _DTYPE), traits=("elementwise",))
register_op(
    "full",
    1,
    attrs=(AttrSpec("shape", "ints"), _DTYPE),
    traits=("broadcast",),
    doc="full(fill_value, shape=..., dtype=...)",
)
# Shape-tensor variants: the shape is a 1-d integer tensor argument.
register_op("dyn.zeros", 1, attrs=(_DTYPE,), traits=("dynamic_shape",))
register_op("dyn.ones", 1, attrs=(_DTYPE,), traits=("dynamic_shape",))
register_op("dyn.full", 2, attrs=(_DTYPE,), traits=("dynamic_shape",), doc="full(value, shape)")


# ----------------------------------------------------------- zeros/ones/full
def _constant_rel(name: str) -> TypeRelation:
    @with_op_name(name)
    def relation(args: tuple[Type, ...], attrs: Attrs) -> Type:
        return TensorType(check_dims(attrs["shape"]), attrs["dtype"])

    return relation


def _constant_np(fill: int) -> NumpyImpl:
    def impl(args: tuple[Any, ...], attrs: Attrs) -> np.ndarray:
        shape = allocation(attrs["shape"], attrs["dtype"])
        return np.full(shape, fill, dtype=attrs["dtype"])

    return impl


for _name, _fill in (("zeros", 0), ("ones", 1)):
    type_rule(_name)(_constant_rel(_name))
    numpy_rule(_name)(_constant_np(_fill))


@type_rule("full")
@with_op_name("full")
def _full_rel(args: tuple[Type, ...], attrs: Attrs) -> Type:
    expect_scalar(args[0], "the fill value")
    return TensorType(check_dims(attrs["shape"]), attrs["dtype"])


def _filled(value: Any, shape: Sequence[int], dtype: str) -> np.ndarray:
    """``value`` cast to ``dtype`` (as ``cast`` does: NaN to int is not an error)."""
    shape = allocation(shape, dtype)
    with np.errstate(invalid="ignore", over="ignore"):
        fill = as_tensor(value).astype(dtype)
    return np.full(shape, fill, dtype=dtype)


@numpy_rule("full")
def _full_np(args: tuple[Any, ...], attrs: Attrs) -> np.ndarray:
    return _filled(args[0], attrs["shape"], attrs["dtype"])


# ---------------------------------------------------------- dyn.zeros/ones/full
def _dyn_constant_rel(name: str) -> TypeRelation:
    @with_op_name(name)
    def relation(args: tuple[Type, ...], attrs: Attrs) -> Type:
        return TensorType((ANY,) * shape_tensor_rank(args[0]), attrs["dtype"])

    return relation


def _dyn_constant_np(fill: int) -> NumpyImpl:
    def impl(args: tuple[Any, ...], attrs: Attrs) -> np.ndarray:
        shape = allocation(shape_value(args[0]), attrs["dtype"])
        return np.full(shape, fill, dtype=attrs["dtype"])

    return impl


for _name, _fill in (("dyn.zeros", 0), ("dyn.ones", 1)):
    type_rule(_name)(_dyn_constant_rel(_name))
    numpy_rule(_name)(_dyn_constant_np(_fill))


@type_rule("dyn.full")
@with_op_name("dyn.full")
def _dyn_full_rel(args: tuple[Type, ...], attrs: Attrs) -> Type:
    expect_scalar(args[0], "the fill value")
    return TensorType((ANY,) * shape_tensor_rank(args[1]), attrs["dtype"])


@numpy_rule("dyn.full")
def _dyn_full_np(args: tuple[Any, ...], attrs: Attrs) -> np.ndarray:
    return _filled(args[0], shape_value(args[1]), attrs["dtype"])


# ------------------------------------------------------------------- vjp
# Constants and shapes have no derivative; a fill value does: every element
# is it, so its cotangent is the sum of the result's (float to float).
not_differentiable("zeros", "ones", "dyn.zeros", "dyn.ones")


@defvjp("full", "dyn.full")
def _full_vjp(ctx: VjpContext, args: Args, attrs: Attrs, out: Expr, ct: Expr) -> Grads:
    value = args[0]
    grads: list[Expr | None] = [None] * len(args)
    if ctx.is_float(value) and ctx.is_float(out):
        total = ctx.op("sum", ct, axis=None, keepdims=False)
        dtype = ctx.tensor_type(value).dtype
        if ctx.tensor_type(out).dtype != dtype:
            total = ctx.op("cast", total, dtype=dtype)
        grads[0] = total
    return grads
