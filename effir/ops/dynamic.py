"""Operators whose output shape depends on input values."""

from typing import Any

import numpy as np

from ..ir.expr import Expr
from ..ir.node import Attrs
from ..ir.op import AttrSpec, register_op
from ..ir.types import ANY, TensorType, TupleType, Type
from ..ir.vjp import Args, Grads, VjpContext, defvjp, not_differentiable
from ..runtime.values import as_tensor
from .relations import (
    OpFailure,
    RelationError,
    allocation,
    compute_dtype,
    describe,
    expect_dtype,
    expect_scalar,
    expect_tensor,
    merge_dim,
    normalize_axes,
    numpy_rule,
    same_dtype,
    to_result,
    type_rule,
    with_op_name,
)

register_op("boolean_mask", 2, traits=("dynamic_shape",), doc="x[mask]: a leading dimension of `?`")
register_op(
    "argwhere", 1, traits=("dynamic_shape",), doc="indices of nonzero elements, (?, ndim) int32"
)
register_op(
    "unique",
    1,
    attrs=(AttrSpec("axis", "int", None, optional=True), AttrSpec("sorted", "bool", True)),
    traits=("dynamic_shape",),
    doc="(values, first indices, inverse indices, counts) of the distinct elements "
    "(or slices along axis)",
)
register_op(
    "dyn.arange",
    3,
    traits=("dynamic_shape",),
    doc="dyn.arange(start, limit, delta): start + i * delta for i < max(ceil((limit - start) "
    "/ delta), 0)",
)
register_op(
    "forget_dims",
    1,
    attrs=(AttrSpec("axes", "ints", None, optional=True),),
    traits=("dynamic_shape",),
    doc="its argument, with the dimensions `axes` (all when None) typed `?`",
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


# unique: ONNX's Unique (numpy's ``unique`` with every output). Without an
# axis the flattened elements, with one the slices along it; ``sorted``
# orders the distinct values ascending (slices lexicographically), else
# in the order they first occur. NaNs are one value.
@type_rule("unique")
@with_op_name("unique")
def _unique_rel(args: tuple[Type, ...], attrs: Attrs) -> Type:
    """How many are distinct is known at run time: ``?``."""
    x = expect_tensor(args[0])
    index = TensorType((ANY,), "int64")
    if attrs["axis"] is None:
        size = 1
        for d in x.shape:
            size = size * d if isinstance(size, int) and isinstance(d, int) else ANY
        values = TensorType((ANY,), x.dtype)
        inverse = TensorType((size,), "int64")
    else:
        if x.ndim == 0:
            raise RelationError("a scalar has no axis to take slices along")
        (axis,) = normalize_axes((attrs["axis"],), x.ndim)
        values = TensorType(x.shape[:axis] + (ANY,) + x.shape[axis + 1 :], x.dtype)
        inverse = TensorType((x.shape[axis],), "int64")
    return TupleType((values, index, inverse, index))


@numpy_rule("unique")
def _unique_np(args: tuple[Any, ...], attrs: Attrs) -> tuple[np.ndarray, ...]:
    x = as_tensor(args[0])
    axis = attrs["axis"]
    if axis is not None:
        (axis,) = normalize_axes((axis,), x.ndim)
        if x.shape[axis] == 0:
            raise OpFailure(f"unique of an empty axis (axis {axis} has length 0)")
    values, first, inverse, counts = np.unique(
        x, return_index=True, return_inverse=True, return_counts=True, axis=axis
    )
    inverse = inverse.reshape(-1)
    if not attrs["sorted"]:  # in the order of first occurrence
        order = np.argsort(first, kind="stable")
        rank = np.empty_like(order)
        rank[order] = np.arange(len(order))
        values = np.take(values, order, axis=0 if axis is None else axis)
        first, counts, inverse = first[order], counts[order], rank[inverse]
    as_index = lambda a: np.asarray(a, dtype=np.int64)  # noqa: E731
    return (to_result(values, x.dtype), as_index(first), as_index(inverse), as_index(counts))


# dyn.arange: ONNX's Range. The number of elements is
# max(ceil((limit - start) / delta), 0), exact for integers, in the dtype
# (float16: float32) for floats; element i is start + i * delta (integers
# wrap). A step of 0, or a float bound or step that is not finite, fails.
@type_rule("dyn.arange")
@with_op_name("dyn.arange")
def _arange_rel(args: tuple[Type, ...], attrs: Attrs) -> Type:
    bounds = [
        expect_scalar(t, what) for t, what in zip(args, ("start", "limit", "delta"), strict=True)
    ]
    dtype = same_dtype(bounds, "start, limit and delta")
    expect_dtype(bounds[0], "iuf", "start, limit and delta")
    return TensorType((ANY,), dtype)


def arange_length(start: np.ndarray, limit: np.ndarray, delta: np.ndarray) -> int:
    """How many elements ``dyn.arange`` gives (an OpFailure for a bad step)."""
    if delta.dtype.kind in "iu":
        step = int(delta)
        if step == 0:
            raise OpFailure("the step (delta) is 0")
        return max(-((int(start) - int(limit)) // step), 0)
    cd = compute_dtype(delta.dtype)
    values = [np.asarray(v, dtype=cd) for v in (start, limit, delta)]
    if not all(np.isfinite(values)):
        raise OpFailure("start, limit and delta must be finite")
    if values[2] == 0:
        raise OpFailure("the step (delta) is 0")
    with np.errstate(all="ignore"):
        return max(int(np.ceil((values[1] - values[0]) / values[2])), 0)


@numpy_rule("dyn.arange")
def _arange_np(args: tuple[Any, ...], attrs: Attrs) -> np.ndarray:
    start, limit, delta = (as_tensor(a) for a in args)
    n = arange_length(start, limit, delta)
    cd = compute_dtype(start.dtype)
    allocation((n,), start.dtype)  # the size limit (docs/semantics.md)
    with np.errstate(all="ignore"):
        values = np.arange(n).astype(cd) * delta.astype(cd) + start.astype(cd)
    return to_result(values, start.dtype)


# forget_dims: the value itself, with a less precise type. What makes two
# types one where a program joins values whose shapes differ: the branches
# of an `if`, the state of a loop whose shape changes from step to step,
# the elements of a list (Relax's ``match_cast`` to a looser shape; type
# inference keeps the more precise of two dimensions it unifies, so an
# annotation cannot forget one).
@type_rule("forget_dims")
@with_op_name("forget_dims")
def _forget_dims_rel(args: tuple[Type, ...], attrs: Attrs) -> Type:
    x = expect_tensor(args[0])
    axes = range(x.ndim) if attrs["axes"] is None else normalize_axes(attrs["axes"], x.ndim)
    shape = tuple(ANY if i in axes else d for i, d in enumerate(x.shape))
    return TensorType(shape, x.dtype)


@numpy_rule("forget_dims")
def _forget_dims_np(args: tuple[Any, ...], attrs: Attrs) -> np.ndarray:
    return as_tensor(args[0])


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


@defvjp("forget_dims")
def _forget_dims_vjp(ctx: VjpContext, args: Args, attrs: Attrs, out: Expr, ct: Expr) -> Grads:
    """The identity: the cotangent, with the argument's own type back."""
    (x,) = args
    if not ctx.is_float(x):
        return (None,)
    return (ctx.reshape_like(ct, x),)


@defvjp("dyn.arange")
def _arange_vjp(ctx: VjpContext, args: Args, attrs: Attrs, out: Expr, ct: Expr) -> Grads:
    """start + i delta: d start = sum(ct), d delta = sum(i ct); the length
    is piecewise constant in the bounds, so limit gets none."""
    if not ctx.is_float(out):
        return (None, None, None)
    start, _, delta = args
    dtype = ctx.tensor_type(out).dtype
    zero, one = ctx.const(0, dtype), ctx.const(1, dtype)
    length = ctx.op("take", ctx.op("shape_of", out, dtype="int64"), ctx.const(0, "int32"))
    steps = ctx.op("dyn.arange", zero, ctx.op("cast", length, dtype=dtype), one)
    d_start = ctx.op("sum", ct)
    d_delta = ctx.op("sum", ctx.op("multiply", ct, steps))
    return (d_start, None, d_delta)


not_differentiable("argwhere", "unique")  # indices; a selection of distinct values
