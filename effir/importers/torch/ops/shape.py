"""Shapes, indexing and creation: ``view``/``reshape`` (the target shape
read from the type torch recorded, so a symbolic batch is kept: a
dimension equal to the input's at its position is copied, one other
inferred), ``permute``, ``transpose``, ``unsqueeze``, ``squeeze``,
``flatten``, ``cat``, ``stack``, ``slice``, ``select``, ``index``,
``expand``, ``split``, ``chunk``, ``unbind``, ``embedding``, ``cumsum``,
``zeros``/``ones``/``full`` (and ``_like``), ``arange``; ``sym_size`` and
integer arithmetic on sizes (``operator.mul``...), whose values keep the
symbolic sizes they hold."""

from __future__ import annotations

import operator
from typing import Any

import numpy as np

from ....ir.types import ANY
from ...common.block import TupleValue
from ...common.values import Value, constant
from ..graph import NodeContext
from ..registry import converter, target_name
from .elementwise import cast, scalar

INT64_MAX = 2**63 - 1


def _axis(ctx: NodeContext, axis: int, rank: int) -> int:
    found = axis + rank if axis < 0 else axis
    if not 0 <= found < max(rank, 1):
        raise ctx.error(f"the dimension {axis} is out of range for a tensor of rank {rank}")
    return found


@converter("aten.view", "aten.reshape", "aten._unsafe_view", "aten.flatten", "aten.view_as")
def _reshape(ctx: NodeContext) -> Value:
    x = ctx.tensor(0, "self")
    target = ctx.out_type().shape
    return reshaped(ctx, x, target)


def reshaped(ctx: NodeContext, x: Value, target: tuple) -> Value:
    """``x`` reshaped to ``target`` (dims), keeping its symbolic sizes."""
    if tuple(x.tensor.shape) == tuple(target):
        return x
    newshape: list[int] = []
    inferred = False
    for i, d in enumerate(target):
        if isinstance(d, int):
            newshape.append(d)
        elif i < x.tensor.ndim and x.tensor.shape[i] == d and d != ANY:
            newshape.append(0)  # copied from the input
        elif not inferred:
            newshape.append(-1)
            inferred = True
        else:
            raise ctx.error(f"the shape {tuple(target)} has two sizes known only at run time")
    return ctx.block.op("reshape", x, newshape=newshape, name_hint=ctx.name)


@converter("aten.permute")
def _permute(ctx: NodeContext) -> Value:
    x = ctx.tensor(0, "self")
    axes = [_axis(ctx, a, x.tensor.ndim) for a in ctx.ints(1, "dims") or []]
    return ctx.block.op("transpose", x, axes=axes, name_hint=ctx.name)


@converter("aten.transpose", "aten.t", "aten.swapaxes")
def _transpose(ctx: NodeContext) -> Value:
    x = ctx.tensor(0, "self")
    rank = x.tensor.ndim
    if rank < 2:
        return x
    a = _axis(ctx, int(ctx.arg(1, "dim0", 0)), rank)
    b = _axis(ctx, int(ctx.arg(2, "dim1", 1)), rank)
    axes = list(range(rank))
    axes[a], axes[b] = axes[b], axes[a]
    return ctx.block.op("transpose", x, axes=axes, name_hint=ctx.name)


@converter("aten.unsqueeze")
def _unsqueeze(ctx: NodeContext) -> Value:
    x = ctx.tensor(0, "self")
    axis = int(ctx.arg(1, "dim"))
    axis = axis + x.tensor.ndim + 1 if axis < 0 else axis
    return ctx.block.op("expand_dims", x, axis=axis, name_hint=ctx.name)


@converter("aten.squeeze")
def _squeeze(ctx: NodeContext) -> Value:
    x = ctx.tensor(0, "self")
    rank = x.tensor.ndim
    dims = ctx.ints(1, "dim")
    if dims is None:
        axes = [i for i, d in enumerate(x.tensor.shape) if d == 1]
    else:
        axes = [a for a in (_axis(ctx, d, rank) for d in dims) if x.tensor.shape[a] == 1]
    if not axes:
        return x
    return ctx.block.op("squeeze", x, axis=axes, name_hint=ctx.name)


def _tensors(ctx: NodeContext) -> list[Value]:
    values = ctx.arg(0, "tensors")
    dtype = ctx.out_dtype()
    return [cast(ctx, v, dtype) for v in values]


@converter("aten.cat", "aten.concat")
def _cat(ctx: NodeContext) -> Value:
    parts = [v for v in _tensors(ctx) if v.tensor.shape != (0,)]  # torch skips empty vectors
    axis = _axis(ctx, int(ctx.arg(1, "dim", 0)), parts[0].tensor.ndim)
    if len(parts) == 1:
        return parts[0]
    both = TupleValue(tuple(parts)) if all(p.const is not None for p in parts) else None
    tup = both if both is not None else ctx.block.tuple(parts)
    return ctx.block.op("concatenate", tup, axis=axis, name_hint=ctx.name)


@converter("aten.stack")
def _stack(ctx: NodeContext) -> Value:
    parts = _tensors(ctx)
    axis = int(ctx.arg(1, "dim", 0))
    axis = axis + parts[0].tensor.ndim + 1 if axis < 0 else axis
    return ctx.block.op("stack", ctx.block.tuple(parts), axis=axis, name_hint=ctx.name)


def _bound(ctx: NodeContext, value: Any, size: Any, default: int) -> int:
    """A slice bound: an int, or a symbolic size (its input's whole length)."""
    if value is None:
        return default
    if isinstance(value, Value):
        sizes = value.sizes()
        if sizes is not None and len(sizes) == 1:
            if isinstance(sizes[0], int):
                return sizes[0]
            if sizes[0] == size:
                return INT64_MAX
        raise ctx.error("a slice bound known only at run time is not supported")
    return int(value)


@converter("aten.slice")
def _slice(ctx: NodeContext) -> Value:
    x = ctx.tensor(0, "self")
    axis = _axis(ctx, int(ctx.arg(1, "dim", 0)), x.tensor.ndim)
    size = x.tensor.shape[axis]
    begin = _bound(ctx, ctx.arg(2, "start"), size, 0)
    end = min(_bound(ctx, ctx.arg(3, "end"), size, INT64_MAX), INT64_MAX)
    step = int(ctx.arg(4, "step", 1))
    if begin == 0 and end >= INT64_MAX and step == 1:
        return x
    return ctx.block.op(
        "strided_slice",
        x,
        begin=[begin],
        end=[end],
        strides=[step],
        axes=[axis],
        name_hint=ctx.name,
    )


@converter("aten.select")
def _select(ctx: NodeContext) -> Value:
    x = ctx.tensor(0, "self")
    axis = _axis(ctx, int(ctx.arg(1, "dim")), x.tensor.ndim)
    index = int(ctx.arg(2, "index"))
    end = index + 1 if index != -1 else INT64_MAX
    part = ctx.block.op("strided_slice", x, begin=[index], end=[end], strides=[1], axes=[axis])
    return ctx.block.op("squeeze", part, axis=[axis], name_hint=ctx.name)


@converter("aten.index")
def _index(ctx: NodeContext) -> Value:
    """``x[..., i, ...]`` with one integer index tensor: ``take`` along its axis."""
    x = ctx.tensor(0, "self")
    indices = ctx.arg(1, "indices")
    given = [(k, v) for k, v in enumerate(indices) if v is not None]
    if len(given) != 1:
        raise ctx.error("indexing with more than one index tensor is not supported")
    axis, index = given[0]
    if not index.tensor.dtype.startswith(("int", "uint")):
        raise ctx.error(f"indexing with a {index.tensor.dtype} tensor is not supported")
    return ctx.block.op("take", x, index, axis=axis, mode="fast", name_hint=ctx.name)


@converter("aten.embedding")
def _embedding(ctx: NodeContext) -> Value:
    weight, index = ctx.tensor(0, "weight"), ctx.tensor(1, "indices")
    return ctx.block.op("take", weight, index, axis=0, mode="fast", name_hint=ctx.name)


@converter("aten.expand", "aten.expand_as")
def _expand(ctx: NodeContext) -> Value:
    x = ctx.tensor(0, "self")
    target = ctx.out_type()
    if target.shape == x.tensor.shape:
        return x
    if not all(isinstance(d, int) for d in target.shape):
        # where(x < x, x, x) broadcast against a tensor of the target's shape
        raise ctx.error(f"expanding to the symbolic shape {target.shape} is not supported")
    return ctx.block.op("broadcast_to", x, shape=list(target.shape), name_hint=ctx.name)


def _pieces(ctx: NodeContext, x: Value, axis: int, sizes: list[int]) -> list[Value]:
    out, start = [], 0
    for size in sizes:
        out.append(ctx.block.op("strided_slice", x, begin=[start], end=[start + size], axes=[axis]))
        start += size
    return out


def _static_length(ctx: NodeContext, x: Value, axis: int) -> int:
    length = x.tensor.shape[axis]
    if not isinstance(length, int):
        raise ctx.error("splitting along a dimension known only at run time is not supported")
    return length


@converter("aten.split", "aten.split_with_sizes", "aten.chunk")
def _split(ctx: NodeContext) -> list[Value]:
    x = ctx.tensor(0, "self")
    axis = _axis(ctx, int(ctx.arg(2, "dim", 0)), x.tensor.ndim)
    length = _static_length(ctx, x, axis)
    given = ctx.ints(1, "split_size")
    name = target_name(ctx.node.target)
    if name == "aten.chunk":
        each = -(-length // given[0])  # type: ignore[index]
        sizes = [min(each, length - s) for s in range(0, length, each)]
    elif name == "aten.split_with_sizes" or len(given) > 1:  # type: ignore[arg-type]
        sizes = list(given)  # type: ignore[arg-type]
    else:
        each = given[0]  # type: ignore[index]
        sizes = [min(each, length - s) for s in range(0, length, each)]
    return _pieces(ctx, x, axis, sizes)


@converter("aten.unbind")
def _unbind(ctx: NodeContext) -> list[Value]:
    x = ctx.tensor(0, "self")
    axis = _axis(ctx, int(ctx.arg(1, "dim", 0)), x.tensor.ndim)
    parts = _pieces(ctx, x, axis, [1] * _static_length(ctx, x, axis))
    return [ctx.block.op("squeeze", p, axis=[axis]) for p in parts]


@converter("aten.cumsum")
def _cumsum(ctx: NodeContext) -> Value:
    x = cast(ctx, ctx.tensor(0, "self"), ctx.out_dtype())
    axis = _axis(ctx, int(ctx.arg(1, "dim")), x.tensor.ndim)
    return ctx.block.op("cumsum", x, axis=axis, name_hint=ctx.name)


# ------------------------------------------------------------- creation
FILL = {"aten.zeros": 0, "aten.ones": 1, "aten.zeros_like": 0, "aten.ones_like": 1}


@converter("aten.zeros", "aten.ones", "aten.full", "aten.new_zeros", "aten.new_ones")
def _full(ctx: NodeContext) -> Value:
    name = target_name(ctx.node.target)
    first = 1 if name.startswith("aten.new_") else 0
    dtype = ctx.out_dtype()
    if name == "aten.full":
        fill = ctx.arg(1, "fill_value")
    else:
        fill = 1 if name.endswith("ones") else 0
    if isinstance(fill, Value):
        raise ctx.error("a fill value known only at run time is not supported")
    value = scalar(fill, dtype)
    sizes = ctx.sizes(first, "size")
    if sizes is not None and all(isinstance(s, int) for s in sizes):
        return ctx.block.op("full", value, shape=[int(s) for s in sizes], dtype=dtype)
    return ctx.block.op("dyn.full", value, _shape_tensor(ctx, first), dtype=dtype)


def _shape_tensor(ctx: NodeContext, i: int) -> Value:
    """A size list holding run-time sizes as an int64 vector."""
    parts = []
    for v in ctx.arg(i, "size"):
        if isinstance(v, Value):
            v = cast(ctx, v, "int64")
            parts.append(v if v.tensor.ndim == 1 else ctx.block.op("reshape", v, newshape=[1]))
        else:
            parts.append(constant(np.asarray([int(v)], dtype=np.int64)))
    return ctx.block.op("concatenate", ctx.block.tuple(parts), axis=0)


@converter("aten.zeros_like", "aten.ones_like", "aten.full_like")
def _full_like(ctx: NodeContext) -> Value:
    x = ctx.tensor(0, "self")
    name = target_name(ctx.node.target)
    dtype = ctx.out_dtype()
    fill = ctx.arg(1, "fill_value") if name == "aten.full_like" else FILL[name]
    return filled_like(ctx, x, fill, dtype)


def filled_like(ctx: NodeContext, x: Value, fill: Any, dtype: str) -> Value:
    """``fill`` in ``x``'s shape: a constant when it is static; else
    ``where(x < x, c, c)`` (``x < x`` is false, NaN included), which keeps
    ``x``'s symbolic sizes in the type."""
    shape = x.tensor.shape
    if all(isinstance(d, int) for d in shape):
        return constant(np.full(shape, fill, dtype=dtype))
    never = ctx.block.op("less", x, x)
    value = scalar(fill, dtype)
    return ctx.block.op("where", never, value, value, name_hint=ctx.name)


@converter("aten.arange")
def _arange(ctx: NodeContext) -> Value:
    args = [ctx.arg(i, n) for i, n in enumerate(("start", "end", "step")) if ctx.has(i, n)]
    if len(args) == 1:
        args = [0, args[0], 1]
    elif len(args) == 2:
        args = [args[0], args[1], 1]
    dtype = ctx.out_dtype()
    if all(not isinstance(a, Value) for a in args):
        return constant(np.arange(*args, dtype=dtype))
    start, end, step = (cast(ctx, ctx.as_tensor(a, dtype, "bound"), dtype) for a in args)
    return ctx.block.op("dyn.arange", start, end, step, name_hint=ctx.name)


# ------------------------------------------------------------- sizes
@converter("aten.sym_size")
def _sym_size(ctx: NodeContext) -> Value:
    x = ctx.tensor(0, "self")
    axis = _axis(ctx, int(ctx.arg(1, "dim")), x.tensor.ndim)
    size = x.tensor.shape[axis]
    if isinstance(size, int):
        return constant(np.asarray(size, dtype=np.int64))
    shape = ctx.block.op("shape_of", x, dtype="int64")
    picked = ctx.block.op("take", shape, constant(np.asarray(axis, dtype=np.int64)), axis=0)
    return picked.holding((size,) if size != ANY else None)


SIZE_ARITHMETIC = {
    "operator.add": ("add", operator.add),
    "operator.sub": ("subtract", operator.sub),
    "operator.mul": ("multiply", operator.mul),
    "operator.floordiv": ("floor_divide", operator.floordiv),
}


@converter(*SIZE_ARITHMETIC)
def _size_arithmetic(ctx: NodeContext) -> Value:
    """Integer arithmetic on sizes (``x.size(0) * 2``), as int64 scalars."""
    op, fn = SIZE_ARITHMETIC[target_name(ctx.node.target)]
    a, b = ctx.arg(0, "a"), ctx.arg(1, "b")
    if not isinstance(a, Value) and not isinstance(b, Value):
        return constant(np.asarray(fn(a, b), dtype=np.int64))
    x = cast(ctx, ctx.as_tensor(a, "int64", "a"), "int64")
    y = cast(ctx, ctx.as_tensor(b, "int64", "b"), "int64")
    if op == "floor_divide":
        return ctx.block.op("divide", x, y, name_hint=ctx.name)  # non-negative sizes
    return ctx.block.op(op, x, y, name_hint=ctx.name)


@converter("operator.getitem")
def _getitem(ctx: NodeContext) -> Any:
    items = ctx.arg(0, "a")
    index = ctx.arg(1, "b")
    if not isinstance(items, list | tuple):
        raise ctx.error("getitem of something other than an operator's results")
    return items[index]
