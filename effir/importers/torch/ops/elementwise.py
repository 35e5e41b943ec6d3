"""Elementwise ATen operators: arithmetic (a Python number beside a tensor
takes the result's dtype, as torch promotes it), comparisons, activations,
casts, and the operators that only copy or alias (``clone``, ``detach``,
``contiguous``, ``lift_fresh_copy``)."""

from __future__ import annotations

import numpy as np

from ...common.values import Value, constant
from ..graph import NodeContext
from ..registry import converter, target_name

UNARY = {
    "aten.neg": "negative",
    "aten.exp": "exp",
    "aten.log": "log",
    "aten.sqrt": "sqrt",
    "aten.tanh": "tanh",
    "aten.sigmoid": "sigmoid",
    "aten.relu": "nn.relu",
    "aten.abs": "abs",
    "aten.sin": "sin",
    "aten.cos": "cos",
    "aten.floor": "floor",
    "aten.ceil": "ceil",
    "aten.logical_not": "logical_not",
}
ARITHMETIC = {
    "aten.add": "add",
    "aten.sub": "subtract",
    "aten.mul": "multiply",
    "aten.div": "divide",
    "aten.pow": "power",
    "aten.maximum": "maximum",
    "aten.minimum": "minimum",
    "aten.remainder": "mod",
    "aten.fmod": "fmod",
}
COMPARISON = {
    "aten.eq": "equal",
    "aten.ne": "not_equal",
    "aten.lt": "less",
    "aten.le": "less_equal",
    "aten.gt": "greater",
    "aten.ge": "greater_equal",
    "aten.logical_and": "logical_and",
    "aten.logical_or": "logical_or",
}
IN_PLACE = {
    "aten.add_": "add",
    "aten.sub_": "subtract",
    "aten.mul_": "multiply",
    "aten.div_": "divide",
}


def scalar(value: float | int | bool, dtype: str) -> Value:
    return constant(np.asarray(value, dtype=dtype))


def cast(ctx: NodeContext, x: Value, dtype: str) -> Value:
    if x.tensor.dtype == dtype:
        return x
    return ctx.block.op("cast", x, dtype=dtype)


@converter(*UNARY)
def _unary(ctx: NodeContext) -> Value:
    x = ctx.tensor(0, "self")
    dtype = ctx.out_dtype()
    return ctx.block.op(
        UNARY[target_name(ctx.node.target)], cast(ctx, x, dtype), name_hint=ctx.name
    )


def binary(ctx: NodeContext, op: str) -> Value:
    """``op(self, other)`` in the result's dtype; ``alpha`` scales ``other``."""
    dtype = ctx.out_dtype()
    a = cast(ctx, ctx.tensor(0, "self", dtype), dtype)
    b = cast(ctx, ctx.tensor(1, "other", dtype), dtype)
    alpha = ctx.arg(2, "alpha", 1) if op in ("add", "subtract") else 1
    if alpha != 1:
        b = ctx.block.op("multiply", b, scalar(alpha, dtype))
    if op == "divide":
        mode = ctx.node.kwargs.get("rounding_mode")
        if mode not in (None, "floor", "trunc"):
            raise ctx.error(f"the rounding mode {mode!r} is not supported")
        if mode is not None and dtype.startswith("int"):
            raise ctx.error("integer division with a rounding mode is not supported")
        q = ctx.block.op("divide", a, b)
        if mode == "floor":
            return ctx.block.op("floor", q, name_hint=ctx.name)
        if mode == "trunc":  # toward zero: floor of |q| with q's sign
            sign = ctx.block.op("greater_equal", q, scalar(0, dtype))
            return ctx.block.op(
                "where", sign, ctx.block.op("floor", q), ctx.block.op("ceil", q), name_hint=ctx.name
            )
        return q
    return ctx.block.op(op, a, b, name_hint=ctx.name)


@converter(*ARITHMETIC)
def _arithmetic(ctx: NodeContext) -> Value:
    return binary(ctx, ARITHMETIC[target_name(ctx.node.target)])


@converter("aten.rsub")
def _rsub(ctx: NodeContext) -> Value:
    dtype = ctx.out_dtype()
    a = cast(ctx, ctx.tensor(0, "self", dtype), dtype)
    b = cast(ctx, ctx.tensor(1, "other", dtype), dtype)
    alpha = ctx.arg(2, "alpha", 1)
    if alpha != 1:
        a = ctx.block.op("multiply", a, scalar(alpha, dtype))
    return ctx.block.op("subtract", b, a, name_hint=ctx.name)


@converter(*IN_PLACE)
def _in_place(ctx: NodeContext) -> Value:
    """``x.add_(y)``: the sum, and ``x`` holds it from here on (a buffer
    held in a cell is written at the call's end)."""
    target = ctx.raw(0, "self")
    a = ctx.tensor(0, "self")
    dtype = a.tensor.dtype
    b = cast(ctx, ctx.tensor(1, "other", dtype), dtype)
    alpha = ctx.arg(2, "alpha", 1)
    if alpha != 1:
        b = ctx.block.op("multiply", b, scalar(alpha, dtype))
    result = ctx.block.op(IN_PLACE[target_name(ctx.node.target)], a, b, name_hint=ctx.name)
    _assign(ctx, target, result)
    return result


@converter("aten.copy_")
def _copy_(ctx: NodeContext) -> Value:
    target = ctx.raw(0, "self")
    a = ctx.tensor(0, "self")
    src = cast(ctx, ctx.tensor(1, "src", a.tensor.dtype), a.tensor.dtype)
    if src.tensor.shape != a.tensor.shape:
        src = ctx.block.op("broadcast_to", src, shape=list(a.tensor.shape))
    _assign(ctx, target, src)
    return src


def _assign(ctx: NodeContext, target: object, value: Value) -> None:
    """``target`` (an FX node) holds ``value`` from here on. Writing a user
    input is refused: its caller's array is not effir's to change."""
    if getattr(target, "op", None) == "placeholder" and target not in ctx.state.mutable:
        if ctx.scope.parent is None:
            raise ctx.error(
                f"it writes the input '{target.name}' in place: effir does not change its "  # type: ignore[attr-defined]
                "caller's arrays (return the new value instead)"
            )
    ctx.scope.rebind(target, value)


@converter(*COMPARISON)
def _comparison(ctx: NodeContext) -> Value:
    a, b = ctx.arg(0, "self"), ctx.arg(1, "other")
    dtype = _common(ctx, a, b)
    x = cast(ctx, ctx.as_tensor(a, dtype, "self"), dtype)
    y = cast(ctx, ctx.as_tensor(b, dtype, "other"), dtype)
    return ctx.block.op(COMPARISON[target_name(ctx.node.target)], x, y, name_hint=ctx.name)


def _common(ctx: NodeContext, a: object, b: object) -> str:
    """The dtype two operands are compared in (torch's promotion: a tensor's
    dtype over a number's kind, unless the number is a float beside ints)."""
    tensors = [v.tensor.dtype for v in (a, b) if isinstance(v, Value)]
    if not tensors:
        raise ctx.error("it compares two numbers, not a tensor")
    if len(tensors) == 2:
        return str(np.promote_types(tensors[0], tensors[1]))
    other = b if isinstance(a, Value) else a
    if isinstance(other, float) and not tensors[0].startswith("float"):
        return "float32"
    return tensors[0]


@converter("aten.where")
def _where(ctx: NodeContext) -> Value:
    dtype = ctx.out_dtype()
    cond = ctx.tensor(0, "condition", "bool")
    a = cast(ctx, ctx.tensor(1, "self", dtype), dtype)
    b = cast(ctx, ctx.tensor(2, "other", dtype), dtype)
    return ctx.block.op("where", cast(ctx, cond, "bool"), a, b, name_hint=ctx.name)


@converter("aten.clamp", "aten.clip")
def _clamp(ctx: NodeContext) -> Value:
    dtype = ctx.out_dtype()
    x = cast(ctx, ctx.tensor(0, "self"), dtype)
    low, high = ctx.arg(1, "min"), ctx.arg(2, "max")
    if low is not None:
        x = ctx.block.op("maximum", x, cast(ctx, ctx.as_tensor(low, dtype, "min"), dtype))
    if high is not None:
        x = ctx.block.op("minimum", x, cast(ctx, ctx.as_tensor(high, dtype, "max"), dtype))
    return x


@converter("aten.rsqrt", "aten.reciprocal")
def _reciprocal(ctx: NodeContext) -> Value:
    dtype = ctx.out_dtype()
    x = cast(ctx, ctx.tensor(0, "self"), dtype)
    if target_name(ctx.node.target) == "aten.rsqrt":
        x = ctx.block.op("sqrt", x)
    return ctx.block.op("divide", scalar(1, dtype), x, name_hint=ctx.name)


@converter("aten.square")
def _square(ctx: NodeContext) -> Value:
    x = ctx.tensor(0, "self")
    return ctx.block.op("multiply", x, x, name_hint=ctx.name)


@converter("aten.silu")
def _silu(ctx: NodeContext) -> Value:
    x = ctx.tensor(0, "self")
    return ctx.block.op("multiply", x, ctx.block.op("sigmoid", x), name_hint=ctx.name)


@converter("aten.leaky_relu")
def _leaky_relu(ctx: NodeContext) -> Value:
    x = ctx.tensor(0, "self")
    slope = float(ctx.arg(1, "negative_slope", 0.01))
    dtype = x.tensor.dtype
    scaled = ctx.block.op("multiply", x, scalar(slope, dtype))
    positive = ctx.block.op("greater", x, scalar(0, dtype))
    return ctx.block.op("where", positive, x, scaled, name_hint=ctx.name)


@converter("aten.softplus")
def _softplus(ctx: NodeContext) -> Value:
    """``log(1 + exp(beta x)) / beta``, ``x`` itself past ``threshold``."""
    x = ctx.tensor(0, "self")
    beta, threshold = float(ctx.arg(1, "beta", 1.0)), float(ctx.arg(2, "threshold", 20.0))
    dtype, op = x.tensor.dtype, ctx.block.op
    bx = op("multiply", x, scalar(beta, dtype))
    soft = op("divide", op("log", op("add", scalar(1, dtype), op("exp", bx))), scalar(beta, dtype))
    return op("where", op("greater", bx, scalar(threshold, dtype)), x, soft, name_hint=ctx.name)


@converter(
    "aten.clone",
    "aten.detach",
    "aten.detach_",
    "aten.contiguous",
    "aten.lift_fresh_copy",
    "aten.alias",
    "aten.dropout_",
)
def _identity(ctx: NodeContext) -> Value:
    if target_name(ctx.node.target) == "aten.dropout_" and ctx.arg(2, "train", False):
        raise ctx.error("in-place dropout in training mode is not supported")
    return ctx.tensor(0, "self")


@converter("aten._to_copy", "aten.to", "aten.type_as")
def _to(ctx: NodeContext) -> Value:
    x = ctx.tensor(0, "self")
    return cast(ctx, x, ctx.out_dtype())
