"""Indexing: slices, gathers and their adjoints (strided_slice, take,
scatter_add, strided_set), with their type, numpy and vjp rules. The
adjoints are what the vjp rules of the gathers need and no combination
of the other operators gives (a scatter)."""

from typing import Any

import numpy as np

from ..ir.expr import Expr
from ..ir.node import Attrs
from ..ir.op import AttrSpec, register_op
from ..ir.types import ANY, Dim, TensorType, Type
from ..ir.vjp import Args, Grads, VjpContext, defvjp
from ..runtime.values import as_tensor
from .relations import (
    OpFailure,
    RelationError,
    expect_dtype,
    expect_tensor,
    is_static,
    merge_dim,
    normalize_axis,
    numpy_rule,
    raise_at_run_time,
    same_dtype,
    show_shape,
    type_rule,
    with_op_name,
)

# The slice both strided_slice and its adjoint strided_set address.
SLICE_ATTRS = (
    AttrSpec("begin", "ints"),
    AttrSpec("end", "ints"),
    AttrSpec("strides", "ints", None, optional=True),
    AttrSpec("axes", "ints", None, optional=True),
    AttrSpec("slice_mode", "str", "end"),
)
register_op(
    "strided_slice",
    1,
    attrs=SLICE_ATTRS,
    traits=("injective",),
)
register_op(
    "take",
    2,
    attrs=(AttrSpec("axis", "int", None, optional=True), AttrSpec("mode", "str", "clip")),
    traits=("injective",),
)
# The adjoints of take and strided_slice, which the vjp rules need and no
# combination of the other operators gives (a scatter).
register_op(
    "scatter_add",
    3,
    attrs=(AttrSpec("axis", "int", 0), AttrSpec("mode", "str", "clip")),
    traits=("opaque",),
    doc="scatter_add(data, indices, updates): data with updates added at the positions "
    "take(data, indices, axis, mode) reads (repeated indices accumulate): take's adjoint",
)
register_op(
    "strided_set",
    2,
    attrs=SLICE_ATTRS,
    traits=("injective",),
    doc="strided_set(data, v): data with the slice strided_slice(data, ...) replaced by v "
    "(Relay's strided_set): strided_slice's adjoint",
)


# -------------------------------------------------------------- strided_slice
# An ``end`` at least this large means "to the end" for any dimension.
_TO_THE_END = 2**31 - 1


def _slices(attrs: Attrs, rank: int) -> dict[int, tuple[int | None, int | None, int]]:
    """Per sliced axis: (begin, end, stride) with Python slicing semantics,
    which are TVM's (negative indices count from the end, then clip).
    ``None`` is an omitted bound. In "size" mode the strides are ignored, as
    in TVM, and ``end`` is a size (negative: to the end)."""
    begin, end, strides, axes = attrs["begin"], attrs["end"], attrs["strides"], attrs["axes"]
    mode = attrs["slice_mode"]
    if mode not in ("end", "size"):
        raise RelationError(f'slice_mode must be "end" or "size", got "{mode}"')
    if axes is not None:
        targets = [normalize_axis(a, rank) for a in axes]
        if len(set(targets)) != len(targets):
            raise RelationError(f"repeated axis in axes {list(axes)}")
        if strides is None:
            strides = (1,) * len(axes)
        if not len(begin) == len(end) == len(strides) == len(axes):
            raise RelationError(
                f"begin, end and strides must have one entry per axis in axes {list(axes)}, "
                f"got {len(begin)}, {len(end)} and {len(strides)}"
            )
    else:
        strides = strides if strides is not None else ()
        longest = max(len(begin), len(end), len(strides))
        if longest > rank:
            raise RelationError(
                f"begin, end and strides have at most one entry per axis ({rank}), "
                f"got {len(begin)}, {len(end)} and {len(strides)}"
            )
        targets = list(range(longest))
    plan: dict[int, tuple[int | None, int | None, int]] = {}
    for i, axis in enumerate(targets):
        stride = strides[i] if i < len(strides) and mode == "end" else 1
        if stride == 0:
            raise RelationError(f"stride 0 on axis {axis}")
        b = begin[i] if i < len(begin) else None
        e = end[i] if i < len(end) else None
        if mode == "size" and e is not None:
            # `end` is a size counted from the begin; a negative begin counts
            # from the end, so begin + size at or past 0 means "to the end".
            start = b or 0
            if e < 0:
                e = None
            elif start < 0:
                e = start + e if start + e < 0 else None
            else:
                e = start + e
        plan[axis] = (b, e, stride)
    return plan


def _sliced_dim(d: Dim, b: int | None, e: int | None, s: int) -> Dim:
    if is_static(d):
        return len(range(d)[b:e:s])
    keeps = (b is None or b == 0) and s == 1 and (e is None or e >= _TO_THE_END)
    return d if keeps else ANY


@type_rule("strided_slice")
@with_op_name("strided_slice")
def _strided_slice_rel(args: tuple[Type, ...], attrs: Attrs) -> Type:
    x = expect_tensor(args[0])
    plan = _slices(attrs, x.ndim)
    shape = tuple(_sliced_dim(d, *plan[a]) if a in plan else d for a, d in enumerate(x.shape))
    return TensorType(shape, x.dtype)


@numpy_rule("strided_slice")
def _strided_slice_np(args: tuple[Any, ...], attrs: Attrs) -> np.ndarray:
    x = as_tensor(args[0])
    try:
        plan = _slices(attrs, x.ndim)
    except RelationError as err:
        raise_at_run_time(err)
    index = tuple(slice(*plan[a]) if a in plan else slice(None) for a in range(x.ndim))
    return x[index]


# ----------------------------------------------------------------------- take
_TAKE_MODES = ("clip", "wrap", "fast")


@type_rule("take")
@with_op_name("take")
def _take_rel(args: tuple[Type, ...], attrs: Attrs) -> Type:
    x = expect_tensor(args[0], "the data")
    indices = expect_tensor(args[1], "the indices")
    expect_dtype(indices, "iu", "the indices")
    if attrs["mode"] not in _TAKE_MODES:
        raise RelationError(f'mode must be "clip", "wrap" or "fast", got "{attrs["mode"]}"')
    if attrs["axis"] is None:
        return TensorType(indices.shape, x.dtype)
    axis = normalize_axis(attrs["axis"], x.ndim)
    return TensorType(x.shape[:axis] + indices.shape + x.shape[axis + 1 :], x.dtype)


@numpy_rule("take")
def _take_np(args: tuple[Any, ...], attrs: Attrs) -> np.ndarray:
    x, indices = as_tensor(args[0]), as_tensor(args[1])
    mode = attrs["mode"]
    if attrs["axis"] is None:
        x, axis = x.reshape(-1), 0
    else:
        try:
            axis = normalize_axis(attrs["axis"], x.ndim)
        except RelationError as err:
            raise_at_run_time(err)
    if indices.dtype == np.uint64:  # keep huge indices huge (for clip) in int64
        indices = np.minimum(indices, np.uint64(np.iinfo(np.int64).max))
    indices = indices.astype(np.int64)
    size = x.shape[axis]
    if mode == "fast":
        bad = (indices < 0) | (indices >= size)
        if bad.any():
            raise OpFailure(
                f"index {int(indices[bad].flat[0])} is out of range for axis {axis} of size {size}"
            )
        return np.asarray(np.take(x, indices, axis=axis))
    if mode not in _TAKE_MODES:
        raise OpFailure(f'mode must be "clip", "wrap" or "fast", got "{mode}"')
    if size == 0 and indices.size:
        raise OpFailure(f"cannot take from axis {axis} of size 0")
    return np.asarray(np.take(x, indices, axis=axis, mode=mode))


# ---------------------------------------------------------------- scatter_add
@type_rule("scatter_add")
@with_op_name("scatter_add")
def _scatter_add_rel(args: tuple[Type, ...], attrs: Attrs) -> Type:
    """``updates`` has the shape ``take(data, indices, axis)`` has; the
    result is the data's type."""
    x = expect_tensor(args[0], "the data")
    indices = expect_tensor(args[1], "the indices")
    updates = expect_tensor(args[2], "the updates")
    expect_dtype(indices, "iu", "the indices")
    expect_dtype(x, "iuf", "the data")
    same_dtype((x, updates), "the data and the updates")
    if attrs["mode"] not in _TAKE_MODES:
        raise RelationError(f'mode must be "clip", "wrap" or "fast", got "{attrs["mode"]}"')
    if x.ndim == 0:
        raise RelationError("cannot scatter into a scalar (rank 0)")
    axis = normalize_axis(attrs["axis"], x.ndim)
    taken = x.shape[:axis] + indices.shape + x.shape[axis + 1 :]
    if updates.ndim != len(taken):
        raise RelationError(
            f"the updates {show_shape(updates.shape)} must have the shape take gives, "
            f"{show_shape(taken)}"
        )
    for i, (u, t) in enumerate(zip(updates.shape, taken, strict=True)):
        merge_dim(u, t, f"dimension {i} of the updates and of take's result")
    return x


@numpy_rule("scatter_add")
def _scatter_add_np(args: tuple[Any, ...], attrs: Attrs) -> np.ndarray:
    """Sequential accumulation (``np.add.at``) into a copy of the data;
    indices are clipped or wrapped as ``take`` does them."""
    x, indices, updates = (as_tensor(a) for a in args)
    try:
        axis = normalize_axis(attrs["axis"], x.ndim)
    except RelationError as err:
        raise_at_run_time(err)
    size = x.shape[axis]
    if indices.dtype == np.uint64:
        indices = np.minimum(indices, np.uint64(np.iinfo(np.int64).max))
    indices = indices.astype(np.int64)
    if size == 0 and indices.size:
        raise OpFailure(f"cannot scatter into axis {axis} of size 0")
    mode = attrs["mode"]
    if mode == "fast":
        bad = (indices < 0) | (indices >= size)
        if bad.any():
            raise OpFailure(
                f"index {int(indices[bad].flat[0])} is out of range for axis {axis} of size {size}"
            )
    elif mode == "wrap":
        indices = np.mod(indices, max(size, 1))
    else:
        indices = np.clip(indices, 0, max(size - 1, 0))
    taken = x.shape[:axis] + indices.shape + x.shape[axis + 1 :]
    if updates.shape != taken:
        raise OpFailure(f"the updates have shape {updates.shape}, take gives {taken}")
    out = x.copy()
    with np.errstate(all="ignore"):
        np.add.at(out, (slice(None),) * axis + (indices,), updates)
    return out


# ---------------------------------------------------------------- strided_set
@type_rule("strided_set")
@with_op_name("strided_set")
def _strided_set_rel(args: tuple[Type, ...], attrs: Attrs) -> Type:
    """``v`` has the shape of ``strided_slice(data, ...)``; the result is the
    data's type."""
    x = expect_tensor(args[0], "the data")
    v = expect_tensor(args[1], "the value")
    same_dtype((x, v), "the data and the value")
    sliced = _strided_slice_rel((x,), attrs)
    assert isinstance(sliced, TensorType)
    if v.ndim != sliced.ndim:
        raise RelationError(
            f"the value {show_shape(v.shape)} must have the slice's shape {show_shape(sliced.shape)}"
        )
    for i, (a, b) in enumerate(zip(v.shape, sliced.shape, strict=True)):
        merge_dim(a, b, f"dimension {i} of the value and of the slice")
    return x


@numpy_rule("strided_set")
def _strided_set_np(args: tuple[Any, ...], attrs: Attrs) -> np.ndarray:
    x, v = as_tensor(args[0]), as_tensor(args[1])
    try:
        plan = _slices(attrs, x.ndim)
    except RelationError as err:
        raise_at_run_time(err)
    index = tuple(slice(*plan[a]) if a in plan else slice(None) for a in range(x.ndim))
    out = x.copy()
    if out[index].shape != v.shape:
        raise OpFailure(f"the value has shape {v.shape}, the slice {out[index].shape}")
    out[index] = v
    return out


def _slice_attrs(attrs: Attrs) -> dict[str, Any]:
    return {k: attrs[k] for k in ("begin", "end", "strides", "axes", "slice_mode")}


@defvjp("strided_slice")
def _strided_slice_vjp(ctx: VjpContext, args: Args, attrs: Attrs, out: Expr, ct: Expr) -> Grads:
    (x,) = args
    if not ctx.is_float(x):
        return (None,)
    return (ctx.op("strided_set", ctx.zeros_like(x), ct, **_slice_attrs(attrs)),)


@defvjp("strided_set")
def _strided_set_vjp(ctx: VjpContext, args: Args, attrs: Attrs, out: Expr, ct: Expr) -> Grads:
    x, v = args
    if not ctx.is_float(x):
        return (None, None)
    slice_attrs = _slice_attrs(attrs)
    return (
        ctx.op("strided_set", ct, ctx.zeros_like(v), **slice_attrs),
        ctx.op("strided_slice", ct, **slice_attrs),
    )


@defvjp("take")
def _take_vjp(ctx: VjpContext, args: Args, attrs: Attrs, out: Expr, ct: Expr) -> Grads:
    """A scatter-add of the cotangent into zeros at the positions taken
    (an embedding lookup's backward); the indices have no cotangent."""
    x, indices = args
    if not ctx.is_float(x):
        return (None, None)
    mode = attrs["mode"]
    zeros = ctx.zeros_like(x)
    if attrs["axis"] is not None:
        axis = normalize_axis(attrs["axis"], ctx.tensor_type(x).ndim)
        return (ctx.op("scatter_add", zeros, indices, ct, axis=axis, mode=mode), None)
    flat = ctx.op("reshape", zeros, newshape=[-1])
    grad = ctx.op("scatter_add", flat, indices, ct, axis=0, mode=mode)
    return (ctx.reshape_like(grad, x), None)


@defvjp("scatter_add")
def _scatter_add_vjp(ctx: VjpContext, args: Args, attrs: Attrs, out: Expr, ct: Expr) -> Grads:
    x, indices, _ = args
    if not ctx.is_float(x):
        return (None, None, None)
    taken = ctx.op("take", ct, indices, axis=attrs["axis"], mode=attrs["mode"])
    return (ct, None, taken)
