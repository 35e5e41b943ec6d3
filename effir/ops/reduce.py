"""Reductions over axes."""

from typing import Any

import numpy as np

from ..ir.expr import Expr
from ..ir.node import Attrs
from ..ir.op import AttrSpec, register_op
from ..ir.types import Dim, TensorType, Type
from ..ir.vjp import Args, Grads, VjpContext, defvjp, not_differentiable
from ..runtime.values import as_tensor
from .relations import (
    NumpyImpl,
    OpFailure,
    RelationError,
    TypeRelation,
    compute_dtype,
    expect_dtype,
    expect_tensor,
    mean_over,
    normalize_axes,
    numpy_rule,
    to_result,
    type_rule,
    with_op_name,
)

_REDUCE_ATTRS = (
    AttrSpec("axis", "ints", None, optional=True),
    AttrSpec("keepdims", "bool", False),
    AttrSpec("exclude", "bool", False),
)

for _name in ("sum", "mean", "max", "min", "prod"):
    register_op(_name, 1, attrs=_REDUCE_ATTRS, traits=("reduction",), doc=f"{_name} over axes")

register_op(
    "argmax",
    1,
    attrs=(
        AttrSpec("axis", "ints", None, optional=True),
        AttrSpec("keepdims", "bool", False),
        AttrSpec("exclude", "bool", False),
        AttrSpec("select_last_index", "bool", False),
    ),
    traits=("reduction",),
    doc="index of the maximum (int32)",
)

register_op(
    "cumsum",
    1,
    attrs=(
        AttrSpec("axis", "int"),
        AttrSpec("exclusive", "bool", False),
        AttrSpec("reverse", "bool", False),
    ),
    traits=("opaque",),
    doc="running sums along axis (exclusive: without the element itself; reverse: from the end)",
)


# ------------------------------------------------------------------ rules
# Relay's semantics. The reduced axes: every axis when ``axis`` is None or
# empty; the listed axes; with ``exclude``, every axis not listed (so
# ``exclude`` with every axis listed reduces nothing: the identity). The
# reduced axes are dropped, or kept with size 1 when ``keepdims``.
# sum/prod keep the input dtype (integers wrap around); float16 accumulates in
# float32. The sum of an empty axis is 0, its product 1, its mean NaN; max,
# min and argmax of an empty axis fail.


def reduce_axes(attrs: Attrs, rank: int) -> tuple[int, ...]:
    """The sorted axes a reduction runs over (Relay's ``GetReduceAxes``)."""
    axis = attrs["axis"]
    if not axis:
        return tuple(range(rank))
    listed = normalize_axes(axis, rank)
    if attrs["exclude"]:
        return tuple(i for i in range(rank) if i not in listed)
    return listed


def reduced_shape(shape: tuple[Dim, ...], axes: tuple[int, ...], keepdims: bool) -> tuple[Dim, ...]:
    if keepdims:
        return tuple(1 if i in axes else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in axes)


_KINDS = {"sum": "iuf", "prod": "iuf", "mean": "f", "max": "biuf", "min": "biuf"}


def _reduce_relation(name: str) -> TypeRelation:
    kinds = _KINDS[name]

    @with_op_name(name)
    def rel(args: tuple[Type, ...], attrs: Attrs) -> Type:
        x = expect_tensor(args[0])
        expect_dtype(x, kinds)
        axes = reduce_axes(attrs, x.ndim)
        return TensorType(reduced_shape(x.shape, axes, attrs["keepdims"]), x.dtype)

    return rel


def _check_not_empty(name: str, x: np.ndarray, axes: tuple[int, ...]) -> None:
    for a in axes:
        if x.shape[a] == 0:
            raise OpFailure(f"{name} of an empty axis (axis {a} has length 0)")


def _reduce_impl(name: str) -> NumpyImpl:
    def impl(args: tuple[Any, ...], attrs: Attrs) -> np.ndarray:
        x = as_tensor(args[0])
        axes = reduce_axes(attrs, x.ndim)
        keepdims = attrs["keepdims"]
        with np.errstate(all="ignore"):
            if name in ("sum", "prod"):
                fn = np.sum if name == "sum" else np.prod
                out = fn(x, axis=axes, keepdims=keepdims, dtype=compute_dtype(x.dtype))
            elif name == "mean":
                out = mean_over(x.astype(compute_dtype(x.dtype)), axes, keepdims)
            else:
                _check_not_empty(name, x, axes)
                fn = np.max if name == "max" else np.min
                out = fn(x, axis=axes, keepdims=keepdims)
        return to_result(out, x.dtype)

    return impl


for _name in _KINDS:
    type_rule(_name)(_reduce_relation(_name))
    numpy_rule(_name)(_reduce_impl(_name))


# cumsum: ONNX's CumSum (and numpy's cumsum with its two variants). The
# result keeps the input's dtype (integers wrap); float16 accumulates in
# float32, rounded once per element. ``exclusive`` leaves the element itself
# out (the first sum is 0); ``reverse`` sums from the end of the axis.
@type_rule("cumsum")
@with_op_name("cumsum")
def _cumsum_relation(args: tuple[Type, ...], attrs: Attrs) -> Type:
    x = expect_tensor(args[0])
    expect_dtype(x, "iuf")
    if x.ndim == 0:
        raise RelationError("the argument must have an axis to sum along, got a scalar")
    normalize_axes((attrs["axis"],), x.ndim)
    return x


@numpy_rule("cumsum")
def _cumsum_impl(args: tuple[Any, ...], attrs: Attrs) -> np.ndarray:
    x = as_tensor(args[0])
    (axis,) = normalize_axes((attrs["axis"],), x.ndim)
    data = np.flip(x, axis) if attrs["reverse"] else x
    with np.errstate(all="ignore"):
        sums = np.cumsum(data, axis=axis, dtype=compute_dtype(x.dtype))
    if attrs["exclusive"] and x.shape[axis]:
        head = np.zeros_like(np.take(sums, [0], axis=axis))
        sums = np.concatenate([head, np.take(sums, range(x.shape[axis] - 1), axis=axis)], axis)
    if attrs["reverse"]:
        sums = np.flip(sums, axis)
    return to_result(sums, x.dtype)


@type_rule("argmax")
@with_op_name("argmax")
def _argmax_relation(args: tuple[Type, ...], attrs: Attrs) -> Type:
    """int32 indices over one axis, or over all axes (an index into the
    flattened tensor, as TVM ravels the reduced axes)."""
    x = expect_tensor(args[0])
    axes = reduce_axes(attrs, x.ndim)
    if 1 < len(axes) < x.ndim:
        raise RelationError(
            f"the reduction must be over one axis or over all axes, not over axes {list(axes)} "
            f"of a tensor of rank {x.ndim}"
        )
    return TensorType(reduced_shape(x.shape, axes, attrs["keepdims"]), "int32")


@numpy_rule("argmax")
def _argmax_impl(args: tuple[Any, ...], attrs: Attrs) -> np.ndarray:
    """The first maximum, or the last with ``select_last_index``; NaN counts as
    the maximum (numpy's rule). Over no axis at all every index is 0."""
    x = as_tensor(args[0])
    axes = reduce_axes(attrs, x.ndim)
    keepdims = attrs["keepdims"]
    out_shape = reduced_shape(x.shape, axes, keepdims)
    _check_not_empty("argmax", x, axes)
    if not axes:
        return np.zeros(out_shape, dtype=np.int32)
    if len(axes) == 1:
        data, axis = x, axes[0]
    else:  # all axes: an index into the flattened tensor
        data, axis = x.reshape(-1), 0
    if attrs["select_last_index"]:
        last = data.shape[axis] - 1
        index = last - np.argmax(np.flip(data, axis=axis), axis=axis)
    else:
        index = np.argmax(data, axis=axis)
    return to_result(np.reshape(index, out_shape), "int32")


# ------------------------------------------------------------------- vjp
# A reduction's cotangent gets its reduced axes back (size 1) and is
# broadcast over them; integer reductions have no derivative.


def _kept(ctx: VjpContext, value: Expr, attrs: Attrs, axes: tuple[int, ...]) -> Expr:
    """A value of the reduction's result shape, in its ``keepdims`` form."""
    return value if attrs["keepdims"] else ctx.restore_axes(value, axes)


@defvjp("sum")
def _sum_vjp(ctx: VjpContext, args: Args, attrs: Attrs, out: Expr, ct: Expr) -> Grads:
    (x,) = args
    if not ctx.is_float(x):
        return (None,)
    axes = reduce_axes(attrs, ctx.tensor_type(x).ndim)
    return (ctx.broadcast_like(_kept(ctx, ct, attrs, axes), x),)


@defvjp("cumsum")
def _cumsum_vjp(ctx: VjpContext, args: Args, attrs: Attrs, out: Expr, ct: Expr) -> Grads:
    # linear: its transpose sums the cotangents from the other end
    if not ctx.is_float(out):
        return (None,)
    flipped = not attrs["reverse"]
    return (
        ctx.op("cumsum", ct, axis=attrs["axis"], exclusive=attrs["exclusive"], reverse=flipped),
    )


@defvjp("mean")
def _mean_vjp(ctx: VjpContext, args: Args, attrs: Attrs, out: Expr, ct: Expr) -> Grads:
    (x,) = args
    ty = ctx.tensor_type(x)
    axes = reduce_axes(attrs, ty.ndim)
    share = ctx.op("divide", _kept(ctx, ct, attrs, axes), ctx.count(x, axes, ty.dtype))
    return (ctx.broadcast_like(share, x),)


@defvjp("max", "min")
def _extremum_vjp(ctx: VjpContext, args: Args, attrs: Attrs, out: Expr, ct: Expr) -> Grads:
    """The cotangent goes to the elements equal to the result, split evenly
    between ties (JAX's rule for ``reduce_max``)."""
    (x,) = args
    if not ctx.is_float(x):
        return (None,)
    ty = ctx.tensor_type(x)
    axes = reduce_axes(attrs, ty.ndim)
    if not axes:  # exclude listing every axis: the identity
        return (ct,)
    hit = ctx.op("equal", x, _kept(ctx, out, attrs, axes))
    ties = ctx.op("sum", ctx.op("cast", hit, dtype=ty.dtype), axis=list(axes), keepdims=True)
    share = ctx.op("divide", _kept(ctx, ct, attrs, axes), ties)
    return (ctx.op("where", hit, share, ctx.const(0, ty.dtype)),)


@defvjp("prod")
def _prod_vjp(ctx: VjpContext, args: Args, attrs: Attrs, out: Expr, ct: Expr) -> Grads:
    """The product of the other elements, exact with zeros: out / x when no
    element is 0; where exactly one is, the product of the others at it and
    0 elsewhere; 0 everywhere with two zeros or more."""
    (x,) = args
    if not ctx.is_float(x):
        return (None,)
    ty = ctx.tensor_type(x)
    dtype = ty.dtype
    axes = list(reduce_axes(attrs, ty.ndim))
    if not axes:  # exclude listing every axis: the identity
        return (ct,)
    zero, one = ctx.const(0, dtype), ctx.const(1, dtype)
    is_zero = ctx.op("equal", x, zero)
    zeros = ctx.op("sum", ctx.op("cast", is_zero, dtype=dtype), axis=axes, keepdims=True)
    safe = ctx.op("where", is_zero, one, x)
    others = ctx.op("prod", safe, axis=axes, keepdims=True)  # of the nonzero elements
    general = ctx.op("divide", others, safe)
    single = ctx.op("where", is_zero, others, zero)
    slope = ctx.op(
        "where",
        ctx.op("equal", zeros, zero),
        general,
        ctx.op("where", ctx.op("equal", zeros, one), single, zero),
    )
    return (ctx.op("multiply", slope, _kept(ctx, ct, attrs, tuple(axes))),)


not_differentiable("argmax")  # an index
