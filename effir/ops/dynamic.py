"""Operators whose output shape depends on input values."""

from typing import Any

import numpy as np

from ..ir.expr import Expr
from ..ir.node import Attrs
from ..ir.op import register_op
from ..ir.types import ANY, TensorType, Type
from ..ir.vjp import Args, Grads, VjpContext, defvjp, not_differentiable
from ..runtime.values import as_tensor
from .relations import (
    OpFailure,
    RelationError,
    describe,
    expect_dtype,
    expect_tensor,
    merge_dim,
    numpy_rule,
    type_rule,
    with_op_name,
)

register_op("boolean_mask", 2, traits=("dynamic_shape",), doc="x[mask]: a leading dimension of `?`")
register_op(
    "argwhere", 1, traits=("dynamic_shape",), doc="indices of nonzero elements, (?, ndim) int32"
)


# ====================================================================== rules
@type_rule("boolean_mask")
@with_op_name("boolean_mask")
def _boolean_mask_rel(args: tuple[Type, ...], attrs: Attrs) -> Type:
    """The selected rows are counted only at run time: a leading ``?``."""
    x = expect_tensor(args[0], "the data")
    mask = expect_tensor(args[1], "the mask")
    expect_dtype(mask, "b", "the mask")
    if mask.ndim > x.ndim:
        raise RelationError(
            f"the mask {describe(mask)} has a higher rank than the data {describe(x)}"
        )
    for i, (m, d) in enumerate(zip(mask.shape, x.shape, strict=False)):
        merge_dim(m, d, f"the mask's and the data's dimensions {i}")
    return TensorType((ANY,) + x.shape[mask.ndim :], x.dtype)


@numpy_rule("boolean_mask")
def _boolean_mask_np(args: tuple[Any, ...], attrs: Attrs) -> np.ndarray:
    x, mask = as_tensor(args[0]), as_tensor(args[1])
    if mask.shape != x.shape[: mask.ndim]:
        raise OpFailure(f"the mask's shape {mask.shape} does not match the data's shape {x.shape}")
    return np.asarray(x[mask])


@type_rule("argwhere")
@with_op_name("argwhere")
def _argwhere_rel(args: tuple[Type, ...], attrs: Attrs) -> Type:
    """One row of indices per nonzero element; how many is known at run time."""
    x = expect_tensor(args[0])
    return TensorType((ANY, x.ndim), "int32")


@numpy_rule("argwhere")
def _argwhere_np(args: tuple[Any, ...], attrs: Attrs) -> np.ndarray:
    return np.argwhere(as_tensor(args[0])).astype(np.int32)


# ------------------------------------------------------------------- vjp
@defvjp("boolean_mask")
def _boolean_mask_vjp(ctx: VjpContext, args: Args, attrs: Attrs, out: Expr, ct: Expr) -> Grads:
    """The selected rows' cotangents scattered back to where they were taken
    (in row-major order of the mask, as ``x[mask]`` takes them), zeros
    elsewhere; the mask has no cotangent. With the mask's axes as one:
    ``scatter_add(zeros(M, rest...), argwhere(mask.flat), ct)``."""
    x, mask = args
    if not ctx.is_float(x):
        return (None, None)
    x_type = ctx.tensor_type(x)
    k = ctx.tensor_type(mask).ndim
    rest = list(x_type.shape[k:])
    flat_mask = ctx.op("reshape", mask, newshape=[-1])
    rows = ctx.op("reshape", ctx.op("argwhere", flat_mask), newshape=[-1])
    zeros = ctx.zeros_like(x)
    if all(isinstance(d, int) for d in rest):
        table = ctx.op("reshape", zeros, newshape=[-1, *rest])
    else:
        sizes = ctx.op("shape_of", x, dtype="int64")
        tail = ctx.op("strided_slice", sizes, begin=[k], end=[x_type.ndim])
        newshape = ctx.op("concatenate", ctx.tuple([ctx.const([-1], "int64"), tail]), axis=0)
        table = ctx.op("dyn.reshape", zeros, newshape)
    grad = ctx.op("scatter_add", table, rows, ct, axis=0)  # (rows are in range)
    return (ctx.reshape_like(grad, x), None)


not_differentiable("argwhere")  # indices
