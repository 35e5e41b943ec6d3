"""Shapes, indexing and constants.

What decides a shape (``Reshape``'s shape, ``Squeeze``'s axes, a
``Slice``'s bounds) is read from the input's contents when the import
knows them (a constant, or something computed from constants and static
shapes, which the importer folds): then the effir operator with static
attributes. Otherwise the data-dependent form: ``dyn.reshape``,
``dyn.full``, a ``Slice`` gathered through ``dyn.arange`` indices, an
``Expand`` as a broadcasting ``where``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ....ir.expr import If
from ...common.block import Block, TupleValue
from ...common.values import Value, constant
from ..graph import NodeContext
from ..registry import converter
from ..types import CODE_OF
from .elementwise import cast, scalar

LATER = (13, 21, 23, 24, 25)  # versions that only add element types effir does not have
INT64_MAX = np.iinfo(np.int64).max


@converter("Constant", versions=(9, 11, 12, 13, 19, 21, 23, 24, 25))
def _constant(ctx: NodeContext) -> list[Value]:
    from onnx import numpy_helper  # lazy: onnx loads when a model is read

    attrs = ctx.attrs
    if "value" in attrs and attrs["value"] is not None:
        array = numpy_helper.to_array(attrs["value"])
    elif "value_float" in attrs:
        array = np.asarray(attrs["value_float"], dtype=np.float32)
    elif "value_floats" in attrs:
        array = np.asarray(attrs["value_floats"], dtype=np.float32)
    elif "value_int" in attrs:
        array = np.asarray(attrs["value_int"], dtype=np.int64)
    elif "value_ints" in attrs:
        array = np.asarray(attrs["value_ints"], dtype=np.int64)
    else:
        given = ", ".join(a.name for a in ctx.node.attribute) or "none"
        raise ctx.error(f"a constant of this kind is not supported (attributes: {given})")
    if str(array.dtype) not in CODE_OF:
        raise ctx.error(f"a constant of type {array.dtype} has no effir dtype")
    return [constant(array)]


@converter("Shape", versions=(1, 13, 15, 19, 21, 23, 24, 25))
def _shape(ctx: NodeContext) -> list[Value]:
    x = ctx.tensor(0)
    rank = x.tensor.ndim
    start, end = ctx.attrs.get("start", 0), ctx.attrs.get("end")
    start = max(0, min(rank, start + rank if start < 0 else start))
    end = rank if end is None else max(0, min(rank, end + rank if end < 0 else end))
    return [shape_of(ctx.block, x, start, end)]


def shape_of(block: Block, x: Value, start: int = 0, end: int | None = None) -> Value:
    """``x``'s dimensions ``start:end`` as an int64 vector: a constant when
    they are static, ``shape_of`` otherwise (knowing the symbols it holds)."""
    dims = x.tensor.shape[start:end]
    if all(isinstance(d, int) for d in dims):
        return constant(np.asarray(dims, dtype=np.int64))
    full = block.op("shape_of", x, dtype="int64", name_hint="shape")
    if (start, end) in ((0, None), (0, x.tensor.ndim)):
        return full.holding(tuple(dims))
    stop = end if end is not None else INT64_MAX
    return block.op("strided_slice", full, begin=[start], end=[stop]).holding(tuple(dims))


def dim_of(block: Block, x: Value, axis: int) -> Value:
    """Dimension ``axis`` of ``x`` as an int64 scalar."""
    d = x.tensor.shape[axis]
    if isinstance(d, int):
        return scalar(d, "int64")
    shape = block.op("shape_of", x, dtype="int64", name_hint="shape")
    return block.op("take", shape, scalar(axis, "int64"), axis=0, name_hint="dim")


@converter("Size", versions=(1, 13, 19, 21, 23, 24, 25))
def _size(ctx: NodeContext) -> list[Value]:
    x = ctx.tensor(0)
    return [ctx.block.op("prod", shape_of(ctx.block, x), name_hint="size")]


@converter("Reshape", versions=(5, 13, 14, 19, 21, 23, 24, 25))
def _reshape(ctx: NodeContext) -> list[Value]:
    x, shape = ctx.tensor(0), ctx.tensor(1)
    allowzero = bool(ctx.attrs.get("allowzero", 0))
    if shape.const is None:
        asked = _static_newshape(x, shape.sizes()) if not allowzero else None
        if asked is not None:
            return [reshape(ctx, x, asked)]
        return [ctx.block.op("dyn.reshape", x, shape, allowzero=allowzero, name_hint=ctx.name)]
    asked = [int(v) for v in shape.const.reshape(-1)]
    if allowzero and 0 in asked:
        if -1 in asked:
            raise ctx.error("a shape with both 0 and -1 is ambiguous when allowzero is set")
        return [ctx.block.op("dyn.reshape", x, shape, allowzero=True, name_hint=ctx.name)]
    return [reshape(ctx, x, asked)]


def _static_newshape(x: Value, sizes: tuple | None) -> list[int] | None:
    """A shape computed at run time whose sizes are known as dimensions
    (``(batch, -1)``), as ``reshape``'s static newshape: a symbol at the
    input's own position copies it (0); one other symbol is the inferred
    size (-1) when nothing else is; None when no static form says it."""
    if sizes is None:
        return None
    asked: list[int] = []
    inferred = -1 in sizes
    for i, d in enumerate(sizes):
        if isinstance(d, int):
            asked.append(d)
        elif i < x.tensor.ndim and x.tensor.shape[i] == d:
            asked.append(0)
        elif not inferred:
            asked.append(-1)
            inferred = True
        else:
            return None
    return asked


def reshape(ctx: NodeContext, x: Value, asked: list[int]) -> Value:
    """``x`` reshaped as ONNX reads ``asked`` (0 copies the input's
    dimension, one -1 is inferred): static sizes where the input's are."""
    dims = x.tensor.shape
    if all(isinstance(d, int) for d in dims):
        sizes = [dims[i] if v == 0 else v for i, v in enumerate(asked)]
        if -1 in sizes:
            known = int(np.prod([s for s in sizes if s != -1]))
            total = int(np.prod(dims))
            if known == 0 or total % known:
                raise ctx.error(f"cannot reshape {tuple(dims)} into {tuple(asked)}")
            sizes[sizes.index(-1)] = total // known
        if int(np.prod(sizes)) != int(np.prod(dims)):
            raise ctx.error(f"cannot reshape {tuple(dims)} into {tuple(asked)}")
        asked = sizes
    if tuple(asked) == tuple(dims):
        return x
    return ctx.block.op("reshape", x, newshape=asked, name_hint=ctx.name)


@converter("Flatten", versions=(9, 11, 13, 21, 23, 24, 25))
def _flatten(ctx: NodeContext) -> list[Value]:
    x = ctx.tensor(0)
    rank = x.tensor.ndim
    axis = ctx.attrs.get("axis", 1)
    axis = axis + rank if axis < 0 else axis
    head, tail = x.tensor.shape[:axis], x.tensor.shape[axis:]
    static = lambda dims: all(isinstance(d, int) for d in dims)  # noqa: E731
    if static(tail):
        return [reshape(ctx, x, [-1 if head else 1, int(np.prod(tail))])]
    if static(head):
        return [reshape(ctx, x, [int(np.prod(head)), -1])]
    sizes = shape_of(ctx.block, x)
    lead = ctx.block.op(
        "prod", ctx.block.op("strided_slice", sizes, begin=[0], end=[axis]), keepdims=True
    )
    newshape = ctx.block.op("concatenate", pack([lead, constant(np.asarray([-1]))]), axis=0)
    return [ctx.block.op("dyn.reshape", x, newshape, name_hint=ctx.name)]


def pack(values: list[Value]) -> TupleValue:
    """A tuple literal of ``values``, as an argument (``concatenate``'s)."""
    return TupleValue(tuple(values))


def axes_input(ctx: NodeContext, index: int, attribute: str, since: int) -> list[int] | None:
    """Axes given as an attribute (before version ``since``) or as input
    ``index`` (from ``since``), which must be known at import."""
    if ctx.version < since:
        value = ctx.attrs.get(attribute)
        return None if value is None else [int(a) for a in value]
    known = ctx.known(index, "the axes")
    return None if known is None else [int(a) for a in known.reshape(-1)]


@converter("Squeeze", versions=(1, 11, *LATER))
def _squeeze(ctx: NodeContext) -> list[Value]:
    x = ctx.tensor(0)
    axes = axes_input(ctx, 1, "axes", 13)
    if axes is None:
        if any(not isinstance(d, int) for d in x.tensor.shape):
            raise ctx.error("Squeeze without axes needs a static shape (which dimensions are 1?)")
        axes = [i for i, d in enumerate(x.tensor.shape) if d == 1]
    if not axes:
        return [x]
    return [ctx.block.op("squeeze", x, axis=axes, name_hint=ctx.name).holding(x.dims)]


@converter("Unsqueeze", versions=(1, 11, *LATER))
def _unsqueeze(ctx: NodeContext) -> list[Value]:
    x = ctx.tensor(0)
    axes = axes_input(ctx, 1, "axes", 13)
    if axes is None:
        raise ctx.error("Unsqueeze needs its axes")
    rank = x.tensor.ndim + len(axes)
    dims = x.dims
    for axis in sorted(a + rank if a < 0 else a for a in axes):
        x = ctx.block.op("expand_dims", x, axis=axis, name_hint=ctx.name)
    return [x.holding(dims)]


@converter("Transpose", versions=(1, *LATER))
def _transpose(ctx: NodeContext) -> list[Value]:
    x = ctx.tensor(0)
    perm = ctx.attrs.get("perm")
    if perm is not None and list(perm) == list(range(x.tensor.ndim)):
        return [x]
    return [
        ctx.block.op("transpose", x, axes=None if perm is None else list(perm), name_hint=ctx.name)
    ]


@converter("Concat", versions=(4, 11, 13))
def _concat(ctx: NodeContext) -> list[Value]:
    values = [ctx.tensor(i) for i in range(len(ctx.inputs))]
    if len(values) == 1:
        return values
    axis = int(ctx.attrs["axis"])
    joined = ctx.block.op("concatenate", pack(values), axis=axis, name_hint=ctx.name)
    parts = [v.sizes() if v.tensor.ndim == 1 else None for v in values]
    if all(p is not None for p in parts):  # shapes put together
        return [joined.holding(tuple(d for p in parts for d in p))]  # type: ignore[union-attr]
    return [joined]


@converter("Split", versions=(2, 11, 13, 18))
def _split(ctx: NodeContext) -> list[Value]:
    x = ctx.tensor(0)
    axis = int(ctx.attrs.get("axis", 0))
    axis = axis + x.tensor.ndim if axis < 0 else axis
    if ctx.version < 13:
        sizes = ctx.attrs.get("split")
    else:
        known = ctx.known(1, "the split sizes")
        sizes = None if known is None else [int(s) for s in known.reshape(-1)]
    count = ctx.output_count()
    if sizes is None:
        parts = ctx.attrs.get("num_outputs") or count
        length = x.tensor.shape[axis]
        if not isinstance(length, int):
            raise ctx.error("Split without sizes needs a static length along the axis")
        chunk = -(-length // parts)  # ONNX: the last part may be smaller
        sizes = [min(chunk, length - k * chunk) for k in range(parts)]
    indices = list(np.cumsum(sizes)[:-1])
    out = ctx.block.op("split", x, indices_or_sections=[int(i) for i in indices], axis=axis)
    return [ctx.block.get(out, k, f"{ctx.name}_{k}") for k in range(len(sizes))]


@converter("Gather", versions=(11, 13))
def _gather(ctx: NodeContext) -> list[Value]:
    x, indices = ctx.tensor(0), ctx.tensor(1)
    axis = int(ctx.attrs.get("axis", 0))
    axis = axis + x.tensor.ndim if axis < 0 else axis
    taken = gather(ctx.block, x, indices, axis, ctx.name)
    sizes = x.sizes() if x.tensor.ndim == 1 else None
    if sizes is not None and indices.const is not None and indices.const.ndim <= 1:
        picked = [sizes[int(i)] for i in indices.const.reshape(-1) if -len(sizes) <= i < len(sizes)]
        if len(picked) == indices.const.size:  # dimensions taken out of a shape
            return [taken.holding(tuple(picked))]
    return [taken]


def gather(block: Block, x: Value, indices: Value, axis: int, name: str) -> Value:
    """``take`` with ONNX's indices: a negative one counts from the end, one
    out of ``[-n, n)`` is a run-time error."""
    size = dim_of(block, x, axis)
    if indices.tensor.dtype != "int64":
        indices = block.op("cast", indices, dtype="int64")
    shifted = block.op("add", indices, size)
    wrapped = block.op("where", block.op("less", indices, scalar(0, "int64")), shifted, indices)
    return block.op("take", x, wrapped, axis=axis, mode="fast", name_hint=name)


@converter("Slice", versions=(10, 11, 13))
def _slice(ctx: NodeContext) -> list[Value]:
    x = ctx.tensor(0)
    rank = x.tensor.ndim
    bounds = [ctx.optional(i) for i in (1, 2, 3, 4)]
    known = [b.const if b is not None else None for b in bounds]
    starts, ends, axes, steps = known
    if all(k is not None or b is None for k, b in zip(known, bounds, strict=True)):
        axes_list = list(range(len(starts))) if axes is None else [int(a) for a in axes]
        steps_list = [1] * len(axes_list) if steps is None else [int(s) for s in steps]
        if 0 in steps_list:
            raise ctx.error("a step of 0")
        sliced = ctx.block.op(
            "strided_slice",
            x,
            begin=[int(s) for s in starts],
            end=[int(e) for e in ends],
            strides=steps_list,
            axes=[a + rank if a < 0 else a for a in axes_list],
            name_hint=ctx.name,
        )
        sizes = x.sizes() if rank == 1 else None
        if sizes is not None and len(axes_list) == 1:  # part of a shape
            part = sizes[slice(int(starts[0]), _clamped(int(ends[0])), steps_list[0])]
            return [sliced.holding(tuple(part))]
        return [sliced]
    count = bounds[0].tensor.shape[0] if bounds[0] is not None else None
    if not isinstance(count, int):
        raise ctx.error("the number of sliced axes must be static")
    return [dynamic_slice(ctx.block, x, bounds, count, ctx.name)]


def _clamped(end: int) -> int | None:
    """A Slice's end as Python's slice takes it (INT64_MAX: to the end)."""
    return None if end >= INT64_MAX // 2 else end


def dynamic_slice(
    block: Block, x: Value, bounds: list[Value | None], count: int, name: str
) -> Value:
    """A ``Slice`` whose bounds are computed at run time: for each axis of
    ``x``, its start, end and step are picked from the bounds (the axis
    not listed: all of it), clamped as ONNX (and Python) clamp them, and
    the axis is gathered at ``start + i * step`` (``dyn.arange``)."""
    starts, ends, axes, steps = bounds
    i64 = lambda v: v if v.tensor.dtype == "int64" else block.op("cast", v, dtype="int64")  # noqa: E731
    starts_v, ends_v = i64(starts), i64(ends)  # type: ignore[arg-type]
    rank = x.tensor.ndim
    if axes is None:
        axes_v = constant(np.arange(count, dtype=np.int64))
    else:
        axes_v = i64(axes)
        axes_v = block.op(
            "where",
            block.op("less", axes_v, scalar(0, "int64")),
            block.op("add", axes_v, scalar(rank, "int64")),
            axes_v,
        )
    steps_v = constant(np.ones(count, dtype=np.int64)) if steps is None else i64(steps)
    for axis in range(rank):
        listed = block.op("equal", axes_v, scalar(axis, "int64"))
        step = _picked(block, listed, steps_v, 1)
        start = _picked(block, listed, starts_v, 0)
        end = _picked(block, listed, ends_v, INT64_MAX)
        indices = _slice_indices(block, start, end, step, dim_of(block, x, axis))
        x = block.op("take", x, indices, axis=axis, mode="fast", name_hint=name)
    return x


def _picked(block: Block, listed: Value, values: Value, default: int) -> Value:
    """The entry of ``values`` where ``listed`` is true, or ``default``."""
    zero = scalar(0, "int64")
    chosen = block.op("sum", block.op("where", listed, values, zero))
    return block.op("where", block.op("max", listed), chosen, scalar(default, "int64"))


def _slice_indices(block: Block, start: Value, end: Value, step: Value, size: Value) -> Value:
    """The indices Python's ``range(*slice(start, end, step).indices(size))``
    gives (ONNX's Slice clamps the same way)."""
    op = block.op
    zero, one = scalar(0, "int64"), scalar(1, "int64")
    negative = op("less", step, zero)
    lowest = op("where", negative, scalar(-1, "int64"), zero)
    highest = op("where", negative, op("subtract", size, one), size)

    def clamp(v: Value) -> Value:
        shifted = op("where", op("less", v, zero), op("add", v, size), v)
        return op("minimum", op("maximum", shifted, lowest), highest)

    return op("dyn.arange", clamp(start), clamp(end), step, name_hint="indices")


@converter("Expand", versions=(8, 13))
def _expand(ctx: NodeContext) -> list[Value]:
    x, shape = ctx.tensor(0), ctx.tensor(1)
    if shape.const is not None:
        target = [int(v) for v in shape.const.reshape(-1)]
        dims = x.tensor.shape
        if all(isinstance(d, int) for d in dims):
            result = list(np.broadcast_shapes(tuple(dims), tuple(target)))
            if result == list(dims):
                return [x]
            return [ctx.block.op("broadcast_to", x, shape=result, name_hint=ctx.name)]
        ones = ctx.block.op("full", scalar(True, "bool"), shape=target, dtype="bool")
    else:
        ones = ctx.block.op("dyn.full", scalar(True, "bool"), shape, dtype="bool")
    # where(true, x, x) broadcasts x against the shape both ways, as Expand does
    return [ctx.block.op("where", ones, x, x, name_hint=ctx.name)]


@converter("ConstantOfShape", versions=(9, 20, 21, 23, 24, 25))
def _constant_of_shape(ctx: NodeContext) -> list[Value]:
    from onnx import numpy_helper  # lazy: onnx loads when a model is read

    shape = ctx.tensor(0)
    fill = ctx.attrs.get("value")
    value = numpy_helper.to_array(fill).reshape(-1) if fill is not None else np.zeros(1, "float32")
    if str(value.dtype) not in CODE_OF:
        raise ctx.error(f"a value of type {value.dtype} has no effir dtype")
    dtype = str(value.dtype)
    fill_value = constant(value.reshape(()))
    if shape.const is not None:
        sizes = [int(v) for v in shape.const.reshape(-1)]
        return [ctx.block.op("full", fill_value, shape=sizes, dtype=dtype, name_hint=ctx.name)]
    return [ctx.block.op("dyn.full", fill_value, shape, dtype=dtype, name_hint=ctx.name)]


@converter("Range", versions=(11, 27))
def _range(ctx: NodeContext) -> list[Value]:
    start, limit, delta = (scalar_input(ctx, i) for i in range(3))
    return [ctx.block.op("dyn.arange", start, limit, delta, name_hint=ctx.name)]


def scalar_input(ctx: NodeContext, i: int) -> Value:
    """Input ``i``, a scalar (a 1-element vector is reshaped to one)."""
    value = ctx.tensor(i)
    if value.tensor.ndim == 0:
        return value
    return ctx.block.op("reshape", value, newshape=[])


@converter("NonZero", versions=(9, 13))
def _nonzero(ctx: NodeContext) -> list[Value]:
    x = ctx.tensor(0)
    if x.tensor.ndim == 0:  # a vector of one element, as onnxruntime reads it
        x = ctx.block.op("reshape", x, newshape=[1])
    rows = ctx.block.op("argwhere", x)
    return [cast(ctx, ctx.block.op("transpose", rows, name_hint=ctx.name), "int64")]


@converter("Unique", versions=(11, 28))
def _unique(ctx: NodeContext) -> list[Value]:
    x = ctx.tensor(0)
    axis = ctx.attrs.get("axis")
    out = ctx.block.op(
        "unique",
        x,
        axis=None if axis is None else int(axis),
        sorted=bool(ctx.attrs.get("sorted", 1)),
    )
    return ctx.block.fields(out, 4, ["unique", "indices", "inverse", "counts"])


@converter("CumSum", versions=(11, 14))
def _cumsum(ctx: NodeContext) -> list[Value]:
    x, axis = ctx.tensor(0), scalar_input(ctx, 1)
    flags = {
        "exclusive": bool(ctx.attrs.get("exclusive", 0)),
        "reverse": bool(ctx.attrs.get("reverse", 0)),
    }
    rank = x.tensor.ndim
    if axis.const is not None:
        return [ctx.block.op("cumsum", x, axis=int(axis.const), name_hint=ctx.name, **flags)]
    return [
        by_axis(ctx, axis, rank, lambda block, a: block.op("cumsum", x, axis=a, **flags), x.type)
    ]


def by_axis(ctx: NodeContext, axis: Value, rank: int, build: Any, result_type: Any) -> Value:
    """An axis known only at run time: an ``if`` per possible axis (only
    the one taken runs), after a check that it is in ``[-rank, rank)``."""
    block = ctx.block
    axis = block.op("cast", axis, dtype="int64") if axis.tensor.dtype != "int64" else axis
    shifted = block.op("add", axis, scalar(rank, "int64"))
    normal = block.op("where", block.op("less", axis, scalar(0, "int64")), shifted, axis)
    valid = constant(np.arange(rank, dtype=np.int64))
    checked = block.op("take", valid, normal, axis=0, mode="fast", name_hint="axis")
    result = None
    for a in reversed(range(rank)):
        branch = block.child()
        value = build(branch, a)
        body = branch.finish(value.expr)
        if result is None:
            result = body
            continue
        test = block.child()
        cond = test.op("equal", checked, scalar(a, "int64"))
        result = test.finish(If(cond.expr, body, result, span=block.span))
    return block.emit(result, result_type, ctx.name)
