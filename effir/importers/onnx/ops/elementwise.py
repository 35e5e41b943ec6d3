"""Elementwise operators: ONNX's broadcasting is numpy's, and so effir's.

Each maps onto the effir operator of the same meaning; activations with
parameters are written with effir's elementwise operators. Where ONNX
lets two inputs have different types (``Pow``'s exponent), the exponent
is cast to the base's dtype, as ONNX's reference computes it.
"""

from __future__ import annotations

import numpy as np

from ...common.block import Block
from ...common.values import Value, constant
from ..graph import NodeContext
from ..registry import converter
from ..types import UnsupportedType, dtype_of

T13 = (6, 13)  # the versions of most elementwise operators: 6, then 13 (bfloat16)

UNARY = {
    "Abs": ("abs", T13),
    "Neg": ("negative", T13),
    "Exp": ("exp", T13),
    "Log": ("log", T13),
    "Sqrt": ("sqrt", T13),
    "Tanh": ("tanh", T13),
    "Sigmoid": ("sigmoid", T13),
    "Relu": ("nn.relu", (6, 13, 14)),
    "Not": ("logical_not", (1,)),
    "Sin": ("sin", (7, 22)),
    "Cos": ("cos", (7, 22)),
    "Floor": ("floor", T13),
    "Ceil": ("ceil", T13),
}
BINARY = {
    "Add": ("add", (7, 13, 14)),
    "Sub": ("subtract", (7, 13, 14)),
    "Mul": ("multiply", (7, 13, 14)),
    "Div": ("divide", (7, 13, 14)),
    "Equal": ("equal", (7, 11, 13, 19)),
    "Less": ("less", (7, 9, 13)),
    "Greater": ("greater", (7, 9, 13)),
    "LessOrEqual": ("less_equal", (12, 16)),
    "GreaterOrEqual": ("greater_equal", (12, 16)),
    "And": ("logical_and", (7,)),
    "Or": ("logical_or", (7,)),
    "Xor": ("not_equal", (7,)),
}
VARIADIC = {"Max": "maximum", "Min": "minimum", "Sum": "add", "Mean": "add"}


def scalar(value: float | int | bool, dtype: str) -> Value:
    """A 0-d constant of ``dtype`` (it broadcasts against anything)."""
    return constant(np.asarray(value, dtype=dtype))


def _unary(op: str):
    def convert(ctx: NodeContext) -> list[Value]:
        return [ctx.block.op(op, ctx.tensor(0), name_hint=ctx.name)]

    return convert


def _binary(op: str):
    def convert(ctx: NodeContext) -> list[Value]:
        return [ctx.block.op(op, ctx.tensor(0), ctx.tensor(1), name_hint=ctx.name)]

    return convert


for _onnx, (_op, _versions) in UNARY.items():
    converter(_onnx, versions=_versions)(_unary(_op))
for _onnx, (_op, _versions) in BINARY.items():
    converter(_onnx, versions=_versions)(_binary(_op))


@converter("Max", "Min", versions=(8, 12, 13))
@converter("Sum", "Mean", versions=(8, 13))
def _variadic(ctx: NodeContext) -> list[Value]:
    op = VARIADIC[ctx.node.op_type]
    values = [ctx.tensor(i) for i in range(len(ctx.inputs))]
    result = values[0]
    for value in values[1:]:
        result = ctx.block.op(op, result, value)
    if ctx.node.op_type == "Mean":
        result = ctx.block.op("divide", result, scalar(len(values), result.tensor.dtype))
    return [result]


@converter("Identity", versions=(1, 13, 14, 16, 19, 21, 23, 24, 25))
def _identity(ctx: NodeContext) -> list[Value]:
    return [ctx.input(0)]


@converter("Reciprocal", versions=T13)
def _reciprocal(ctx: NodeContext) -> list[Value]:
    x = ctx.tensor(0)
    return [ctx.block.op("divide", scalar(1, x.tensor.dtype), x, name_hint=ctx.name)]


@converter("Pow", versions=(7, 12, 13, 15))
def _pow(ctx: NodeContext) -> list[Value]:
    x, y = ctx.tensor(0), ctx.tensor(1)
    dtype = x.tensor.dtype
    if y.tensor.dtype != dtype:
        y = ctx.block.op("cast", y, dtype=dtype)
    return [ctx.block.op("power", x, y, name_hint=ctx.name)]


@converter("Mod", versions=(10, 13, 28))
def _mod(ctx: NodeContext) -> list[Value]:
    x, y = ctx.tensor(0), ctx.tensor(1)
    floor = not ctx.attrs.get("fmod", 0)
    if floor and x.tensor.dtype.startswith("float") and ctx.version < 28:
        raise ctx.error("fmod=0 on floats is defined from Mod-28 on")
    return [ctx.block.op("mod" if floor else "fmod", x, y, name_hint=ctx.name)]


@converter("Where", versions=(9, 16))
def _where(ctx: NodeContext) -> list[Value]:
    return [ctx.block.op("where", ctx.tensor(0), ctx.tensor(1), ctx.tensor(2), name_hint=ctx.name)]


@converter("Cast", versions=(6, 9, 13, 19, 21, 23, 24, 25))
def _cast(ctx: NodeContext) -> list[Value]:
    return [cast(ctx, ctx.tensor(0), dtype_of_attr(ctx, "to"))]


@converter("CastLike", versions=(15, 19, 21, 23, 24, 25))
def _cast_like(ctx: NodeContext) -> list[Value]:
    return [cast(ctx, ctx.tensor(0), ctx.tensor(1).tensor.dtype)]


def cast(ctx: NodeContext, x: Value, dtype: str) -> Value:
    if x.tensor.dtype == dtype:
        return x
    out = ctx.block.op("cast", x, dtype=dtype, name_hint=ctx.name)
    both_integers = x.tensor.dtype[0] in "iu" and dtype[0] in "iu"
    return out.holding(x.dims) if both_integers else out


def dtype_of_attr(ctx: NodeContext, name: str) -> str:
    try:
        return dtype_of(int(ctx.attrs[name]))
    except UnsupportedType as err:
        raise ctx.error(str(err)) from None
    except KeyError:
        raise ctx.error(f"its attribute '{name}' is missing") from None


@converter("Clip", versions=(6, 11, 12, 13))
def _clip(ctx: NodeContext) -> list[Value]:
    x = ctx.tensor(0)
    dtype = x.tensor.dtype
    if ctx.version == 6:
        low = scalar(ctx.attrs.get("min", -3.4028234663852886e38), dtype)
        high = scalar(ctx.attrs.get("max", 3.4028234663852886e38), dtype)
    else:
        low, high = ctx.optional(1), ctx.optional(2)
    if low is not None:
        x = ctx.block.op("maximum", x, low)
    if high is not None:
        x = ctx.block.op("minimum", x, high)
    return [x]


# ------------------------------------------------------------ activations
def activation(block: Block, name: str, x: Value, alpha: float | None, beta: float | None) -> Value:
    """ONNX's activation ``name`` (as the recurrent layers list them, and as
    operators of its own) of ``x``, with its ``alpha`` and ``beta`` or
    their defaults; None when effir has no such activation."""
    dtype = x.tensor.dtype

    def c(v: float) -> Value:
        return scalar(v, dtype)

    op = block.op
    key = name.lower()
    if key == "relu":
        return op("nn.relu", x)
    if key == "tanh":
        return op("tanh", x)
    if key == "sigmoid":
        return op("sigmoid", x)
    if key == "affine":
        return op("add", op("multiply", x, c(_or(alpha, 1.0))), c(_or(beta, 0.0)))
    if key == "leakyrelu":
        return op("where", op("less", x, c(0)), op("multiply", x, c(_or(alpha, 0.01))), x)
    if key == "thresholdedrelu":
        return op("where", op("greater", x, c(_or(alpha, 1.0))), x, c(0))
    if key == "scaledtanh":
        scaled = op("tanh", op("multiply", x, c(_or(beta, 1.0))))
        return op("multiply", scaled, c(_or(alpha, 1.0)))
    if key == "hardsigmoid":
        line = op("add", op("multiply", x, c(_or(alpha, 0.2))), c(_or(beta, 0.5)))
        return op("maximum", op("minimum", line, c(1)), c(0))
    if key == "elu":
        negative = op("multiply", op("subtract", op("exp", x), c(1)), c(_or(alpha, 1.0)))
        return op("where", op("less", x, c(0)), negative, x)
    if key == "softsign":
        return op("divide", x, op("add", op("abs", x), c(1)))
    if key == "softplus":
        return op("log", op("add", op("exp", x), c(1)))
    raise KeyError(name)


def _or(value: float | None, default: float) -> float:
    return default if value is None else float(value)


ACTIVATIONS = {
    "LeakyRelu": ((6, 16), "alpha", None),
    "ThresholdedRelu": ((10, 22), "alpha", None),
    "HardSigmoid": ((6, 22), "alpha", "beta"),
    "Elu": ((6, 22), "alpha", None),
    "Softsign": ((1, 22), None, None),
    "Softplus": ((1, 22), None, None),
}


def _activation_op(onnx_name: str, alpha: str | None, beta: str | None):
    def convert(ctx: NodeContext) -> list[Value]:
        a = ctx.attrs.get(alpha) if alpha else None
        b = ctx.attrs.get(beta) if beta else None
        return [activation(ctx.block, onnx_name, ctx.tensor(0), a, b)]

    return convert


for _onnx, (_versions, _alpha, _beta) in ACTIVATIONS.items():
    converter(_onnx, versions=_versions)(_activation_op(_onnx, _alpha, _beta))


@converter("Selu", versions=(6, 22))
def _selu(ctx: NodeContext) -> list[Value]:
    x = ctx.tensor(0)
    alpha = float(ctx.attrs.get("alpha", 1.67326319217681884765625))
    gamma = float(ctx.attrs.get("gamma", 1.05070102214813232421875))
    elu = activation(ctx.block, "elu", x, alpha, None)
    return [ctx.block.op("multiply", elu, scalar(gamma, x.tensor.dtype))]
