"""Products, reductions and normalisation: ``linear``, ``addmm``,
``matmul``/``mm``/``bmm``, ``softmax``, ``log_softmax``, ``sum``,
``mean``, ``amax``/``amin``/``max``/``min``, ``argmax``, ``prod``,
``layer_norm`` (over the last axis), ``batch_norm``: in training mode
``nn.batch_norm_train``, PyTorch's convention (``momentum`` weighs the
batch, the running variance moves with the unbiased batch variance),
its running statistics written back to the buffers it read (state cells
when they are the module's)."""

from __future__ import annotations

import numpy as np

from ...common.values import Value, constant
from ..graph import NodeContext
from ..registry import converter, target_name
from .elementwise import _assign, cast, scalar


@converter("aten.linear")
def _linear(ctx: NodeContext) -> Value:
    x, w = ctx.tensor(0, "input"), ctx.tensor(1, "weight")
    bias = ctx.arg(2, "bias")
    y = ctx.block.op("nn.dense", x, w, name_hint=ctx.name)
    return y if bias is None else ctx.block.op("add", y, bias, name_hint=ctx.name)


@converter("aten.addmm")
def _addmm(ctx: NodeContext) -> Value:
    bias, a, b = ctx.tensor(0, "self"), ctx.tensor(1, "mat1"), ctx.tensor(2, "mat2")
    beta, alpha = ctx.arg(3, "beta", 1), ctx.arg(4, "alpha", 1)
    dtype = ctx.out_dtype()
    product = ctx.block.op("nn.matmul", a, b)
    if alpha != 1:
        product = ctx.block.op("multiply", product, scalar(alpha, dtype))
    if beta != 1:
        bias = ctx.block.op("multiply", bias, scalar(beta, dtype))
    return ctx.block.op("add", product, bias, name_hint=ctx.name)


@converter("aten.matmul", "aten.mm", "aten.bmm")
def _matmul(ctx: NodeContext) -> Value:
    a, b = ctx.tensor(0, "self"), ctx.tensor(1, "other")
    return ctx.block.op("nn.matmul", a, b, name_hint=ctx.name)


@converter("aten.softmax", "aten._softmax", "aten.log_softmax", "aten._log_softmax")
def _softmax(ctx: NodeContext) -> Value:
    x = cast(ctx, ctx.tensor(0, "self"), ctx.out_dtype())
    axis = int(ctx.arg(1, "dim"))
    op = "nn.log_softmax" if "log" in target_name(ctx.node.target) else "nn.softmax"
    return ctx.block.op(op, x, axis=axis, name_hint=ctx.name)


REDUCTIONS = {
    "aten.sum": "sum",
    "aten.mean": "mean",
    "aten.amax": "max",
    "aten.amin": "min",
    "aten.prod": "prod",
}


@converter(*REDUCTIONS)
def _reduce(ctx: NodeContext) -> Value:
    op = REDUCTIONS[target_name(ctx.node.target)]
    x = ctx.tensor(0, "self")
    dims = ctx.ints(1, "dim") if len(ctx.node.args) > 1 or "dim" in ctx.node.kwargs else None
    keep = bool(ctx.arg(2, "keepdim", False))
    if op == "prod" and dims is not None and len(ctx.node.args) > 1:
        dims = [int(ctx.arg(1, "dim"))]
    x = cast(ctx, x, ctx.out_dtype())
    attrs = {"keepdims": keep}
    if dims:
        attrs["axis"] = dims  # type: ignore[assignment]
    return ctx.block.op(op, x, name_hint=ctx.name, **attrs)


@converter("aten.max", "aten.min")
def _max(ctx: NodeContext) -> Value | list[Value]:
    """``max(x)`` (all elements), ``max(x, dim)`` (values and indices), or
    ``max(x, y)`` (elementwise)."""
    x = ctx.tensor(0, "self")
    which = "max" if target_name(ctx.node.target) == "aten.max" else "min"
    other = ctx.arg(1, "dim")
    if isinstance(other, Value):
        return ctx.block.op("maximum" if which == "max" else "minimum", x, other)
    if other is None:
        return ctx.block.op(which, x, name_hint=ctx.name)
    keep = bool(ctx.arg(2, "keepdim", False))
    values = ctx.block.op(which, x, axis=[int(other)], keepdims=keep)
    picked = x if which == "max" else ctx.block.op("negative", x)
    indices = ctx.block.op("argmax", picked, axis=[int(other)], keepdims=keep)
    return [values, cast(ctx, indices, "int64")]


@converter("aten.argmax")
def _argmax(ctx: NodeContext) -> Value:
    x = ctx.tensor(0, "self")
    dim = ctx.arg(1, "dim")
    keep = bool(ctx.arg(2, "keepdim", False))
    attrs = {"keepdims": keep}
    if dim is not None:
        attrs["axis"] = [int(dim)]  # type: ignore[assignment]
    return cast(ctx, ctx.block.op("argmax", x, **attrs), "int64")


def _or_filled(ctx: NodeContext, value: Value | None, size: int, fill: float, dtype: str) -> Value:
    if value is not None:
        return cast(ctx, value, dtype)
    return constant(np.full((size,), fill, dtype=dtype))


@converter("aten.layer_norm")
def _layer_norm(ctx: NodeContext) -> Value:
    x = ctx.tensor(0, "input")
    shape = ctx.ints(1, "normalized_shape") or []
    if len(shape) != 1:
        raise ctx.error(f"layer norm over {len(shape)} axes is not supported (over the last only)")
    dtype = x.tensor.dtype
    weight = _or_filled(ctx, ctx.arg(2, "weight"), shape[0], 1.0, dtype)
    bias = _or_filled(ctx, ctx.arg(3, "bias"), shape[0], 0.0, dtype)
    eps = float(ctx.arg(4, "eps", 1e-5))
    return ctx.block.op("nn.layer_norm", x, weight, bias, axis=-1, epsilon=eps, name_hint=ctx.name)


@converter("aten.batch_norm")
def _batch_norm(ctx: NodeContext) -> Value:
    x = ctx.tensor(0, "input")
    dtype = x.tensor.dtype
    channels = x.tensor.shape[1] if x.tensor.ndim > 1 else None
    if not isinstance(channels, int):
        raise ctx.error("batch norm needs a static number of channels (dimension 1)")
    weight = _or_filled(ctx, ctx.arg(1, "weight"), channels, 1.0, dtype)
    bias = _or_filled(ctx, ctx.arg(2, "bias"), channels, 0.0, dtype)
    mean, var = ctx.arg(3, "running_mean"), ctx.arg(4, "running_var")
    training = bool(ctx.arg(5, "training", False))
    momentum = ctx.arg(6, "momentum", 0.1)
    eps = float(ctx.arg(7, "eps", 1e-5))
    if not training:
        if mean is None or var is None:
            raise ctx.error("batch norm in evaluation mode needs running statistics")
        return ctx.block.op(
            "nn.batch_norm_infer", x, weight, bias, mean, var, axis=1, epsilon=eps,
            name_hint=ctx.name,
        )  # fmt: skip
    if momentum is None:
        raise ctx.error("batch norm with momentum=None (a cumulative average) is not supported")
    tracked = mean is not None and var is not None
    if not tracked:  # batch statistics only: running ones that nothing reads
        mean = constant(np.zeros((channels,), dtype=dtype))
        var = constant(np.ones((channels,), dtype=dtype))
    result = ctx.block.op(
        "nn.batch_norm_train", x, weight, bias, mean, var, axis=1, epsilon=eps,
        momentum=float(momentum), name_hint=ctx.name,
    )  # fmt: skip
    y, new_mean, new_var = ctx.block.fields(result, 3, ["y", "running_mean", "running_var"])
    if tracked:
        _assign(ctx, ctx.raw(3, "running_mean"), new_mean)
        _assign(ctx, ctx.raw(4, "running_var"), new_var)
    return y


@converter("aten._native_batch_norm_legit_functional", "aten._native_batch_norm_legit_no_training")
def _native_batch_norm(ctx: NodeContext) -> list[Value]:
    """The functional forms ``run_decompositions()`` leaves: ``(y, mean,
    rstd[, new_running_mean, new_running_var])``, the running statistics
    returned (the signature lists them as buffer mutations). The saved
    mean and reciprocal deviation are for torch's backward: not given."""
    name = target_name(ctx.node.target)
    x = ctx.tensor(0, "input")
    dtype = x.tensor.dtype
    channels = x.tensor.shape[1]
    if not isinstance(channels, int):
        raise ctx.error("batch norm needs a static number of channels (dimension 1)")
    weight = _or_filled(ctx, ctx.arg(1, "weight"), channels, 1.0, dtype)
    bias = _or_filled(ctx, ctx.arg(2, "bias"), channels, 0.0, dtype)
    mean, var = ctx.tensor(3, "running_mean"), ctx.tensor(4, "running_var")
    if name.endswith("no_training"):
        momentum, eps = ctx.arg(5, "momentum"), float(ctx.arg(6, "eps"))
        y = ctx.block.op("nn.batch_norm_infer", x, weight, bias, mean, var, axis=1, epsilon=eps)
        return [y, None, None]  # type: ignore[list-item]
    if not bool(ctx.arg(5, "training")):
        raise ctx.error("the functional batch norm is read in training mode only")
    momentum, eps = float(ctx.arg(6, "momentum")), float(ctx.arg(7, "eps"))
    result = ctx.block.op(
        "nn.batch_norm_train", x, weight, bias, mean, var, axis=1, epsilon=eps,
        momentum=momentum, name_hint=ctx.name,
    )  # fmt: skip
    y, new_mean, new_var = ctx.block.fields(result, 3, ["y", "running_mean", "running_var"])
    return [y, None, None, new_mean, new_var]  # type: ignore[list-item]
