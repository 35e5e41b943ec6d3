"""Neural-network operators (pure; the effectful surface forms are in effects.py)."""

from typing import Any

import numpy as np

from ..ir.expr import Expr
from ..ir.node import Attrs
from ..ir.op import AttrSpec, op_def, register_op
from ..ir.types import DTYPES, Dim, TensorType, TupleType, Type
from ..ir.vjp import Args, Grads, VjpContext, defvjp
from ..runtime.values import as_tensor
from .relations import (
    OpFailure,
    RelationError,
    broadcast_shapes,
    compute_dtype,
    describe,
    expect_dtype,
    expect_tensor,
    is_static,
    mean_over,
    merge_dim,
    normalize_axis,
    numpy_rule,
    same_dtype,
    to_result,
    type_rule,
    with_op_name,
)

_EPS = AttrSpec("epsilon", "float", 1e-5)

register_op(
    "nn.dense",
    2,
    attrs=(AttrSpec("units", "int", None, optional=True), AttrSpec("out_dtype", "str", "")),
    traits=("out_fusable",),
    doc="dense(x, w) = x @ w.T",
)
register_op(
    "nn.matmul",
    2,
    attrs=(
        AttrSpec("units", "int", None, optional=True),
        AttrSpec("out_dtype", "str", ""),
        AttrSpec("transpose_a", "bool", False),
        AttrSpec("transpose_b", "bool", False),
    ),
    traits=("out_fusable",),
)
register_op("nn.softmax", 1, attrs=(AttrSpec("axis", "int", -1),), traits=("opaque",))
register_op("nn.log_softmax", 1, attrs=(AttrSpec("axis", "int", -1),), traits=("opaque",))
register_op(
    "nn.layer_norm",
    3,
    attrs=(
        AttrSpec("axis", "int", -1),
        _EPS,
        AttrSpec("center", "bool", True),
        AttrSpec("scale", "bool", True),
    ),
    traits=("opaque",),
    doc="layer_norm(x, gamma, beta)",
)
register_op(
    "nn.batch_norm_infer",
    5,
    attrs=(AttrSpec("axis", "int", 1), _EPS),
    traits=("opaque",),
    doc="batch_norm_infer(x, gamma, beta, running_mean, running_var)",
)
register_op(
    "nn.batch_norm_train",
    5,
    attrs=(AttrSpec("axis", "int", 1), _EPS, AttrSpec("momentum", "float", 0.1)),
    traits=("opaque",),
    doc="batch_norm_train(x, gamma, beta, mean, var) -> (y, new_mean, new_var); PyTorch's "
    "convention: momentum weights the batch statistic, running var is unbiased",
)
# The new running statistics are state: the linearity verifier checks that a
# state-passing program does not drop them.
op_def("nn.batch_norm_train").rules["state_outputs"] = (1, 2)


# ------------------------------------------------------------------ rules
# The numpy rules compute float32 and float64 in their own dtype and float16
# in float32, rounding the result back once; results always have the dtype
# the relation gives.


def _out_dtype(attrs: Attrs, dtype: str) -> str:
    """``out_dtype``: "" means the inputs' dtype; otherwise a numeric dtype."""
    out = attrs["out_dtype"]
    if out == "":
        return dtype
    if out not in DTYPES:
        raise RelationError(f'out_dtype "{out}" is not a dtype (known: {", ".join(DTYPES)})')
    if out == "bool":
        raise RelationError('out_dtype must be a numeric dtype, got "bool"')
    return out


def _product_operands(a: Type, b: Type, names: tuple[str, str]) -> tuple[TensorType, TensorType]:
    x = expect_tensor(a, names[0])
    w = expect_tensor(b, names[1])
    same_dtype((x, w), f"{names[0]} and {names[1]}")
    expect_dtype(x, "iuf", names[0])
    return x, w


def _units(attrs: Attrs, units: Dim, what: str) -> Dim:
    """The output dimension, refined by the ``units`` attribute when given."""
    if attrs["units"] is None:
        return units
    return merge_dim(attrs["units"], units, f"units and {what}")


@type_rule("nn.dense")
@with_op_name("nn.dense")
def _dense_relation(args: tuple[Type, ...], attrs: Attrs) -> Type:
    """(..., k) by (units, k) gives (..., units)."""
    x, w = _product_operands(args[0], args[1], ("the data", "the weight"))
    if x.ndim < 1:
        raise RelationError("the data must have at least one dimension, got a scalar")
    if w.ndim != 2:
        raise RelationError(f"the weight must be 2-d (units, k), got {describe(w)}")
    merge_dim(x.shape[-1], w.shape[1], "the reduction dimensions")
    units = _units(attrs, w.shape[0], "the weight's first dimension")
    return TensorType(x.shape[:-1] + (units,), _out_dtype(attrs, x.dtype))


@numpy_rule("nn.dense")
def _dense_impl(args: tuple[Any, ...], attrs: Attrs) -> np.ndarray:
    x, w = as_tensor(args[0]), as_tensor(args[1])
    if x.shape[-1] != w.shape[1]:
        raise OpFailure(f"the reduction dimensions do not match: {x.shape[-1]} vs {w.shape[1]}")
    _check_units(attrs, w.shape[0])
    out = attrs["out_dtype"] or x.dtype
    cd = compute_dtype(out)
    with np.errstate(all="ignore"):
        return to_result(np.matmul(x.astype(cd), w.astype(cd).T), out)


def _check_units(attrs: Attrs, units: int) -> None:
    if attrs["units"] is not None and attrs["units"] != units:
        raise OpFailure(f"units={attrs['units']} but the weight gives {units} output units")


@type_rule("nn.matmul")
@with_op_name("nn.matmul")
def _matmul_relation(args: tuple[Type, ...], attrs: Attrs) -> Type:
    """Batched (..., m, k) by (..., k, n) gives (..., m, n), the batch
    dimensions broadcasting as numpy's; the transposes swap the last two axes."""
    a, b = _product_operands(args[0], args[1], ("the first argument", "the second argument"))
    for t, which in ((a, "first"), (b, "second")):
        if t.ndim < 2:
            raise RelationError(f"the {which} argument must have rank >= 2, got {describe(t)}")
    m, ka = a.shape[-2:]
    if attrs["transpose_a"]:
        m, ka = ka, m
    kb, n = b.shape[-2:]
    if attrs["transpose_b"]:
        kb, n = n, kb
    merge_dim(ka, kb, "the reduction dimensions")
    n = _units(attrs, n, "the output's last dimension")
    batch = broadcast_shapes(a.shape[:-2], b.shape[:-2])
    return TensorType(batch + (m, n), _out_dtype(attrs, a.dtype))


@numpy_rule("nn.matmul")
def _matmul_impl(args: tuple[Any, ...], attrs: Attrs) -> np.ndarray:
    a, b = as_tensor(args[0]), as_tensor(args[1])
    if attrs["transpose_a"]:
        a = np.swapaxes(a, -1, -2)
    if attrs["transpose_b"]:
        b = np.swapaxes(b, -1, -2)
    if a.shape[-1] != b.shape[-2]:
        raise OpFailure(f"the reduction dimensions do not match: {a.shape[-1]} vs {b.shape[-2]}")
    _check_units(attrs, b.shape[-1])
    try:
        np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    except ValueError:
        raise OpFailure(
            f"batch shapes {a.shape[:-2]} and {b.shape[:-2]} do not broadcast"
        ) from None
    out = attrs["out_dtype"] or a.dtype
    cd = compute_dtype(out)
    with np.errstate(all="ignore"):
        return to_result(np.matmul(a.astype(cd), b.astype(cd)), out)


def _softmax_relation(args: tuple[Type, ...], attrs: Attrs) -> Type:
    """A float tensor of the same type; ``axis`` must be in range."""
    x = expect_tensor(args[0])
    expect_dtype(x, "f")
    normalize_axis(attrs["axis"], x.ndim)
    return x


for _name in ("nn.softmax", "nn.log_softmax"):
    type_rule(_name)(with_op_name(_name)(_softmax_relation))


def _shifted(x: np.ndarray, axis: int) -> np.ndarray:
    """``x - max(x)`` along ``axis`` (stable exponentials); an empty axis
    stays empty and a row of -inf gives NaN, as the formula does."""
    cd = compute_dtype(x.dtype)
    xc = x.astype(cd)
    return xc - np.max(xc, axis=axis, keepdims=True, initial=-np.inf)


@numpy_rule("nn.softmax")
def _softmax_impl(args: tuple[Any, ...], attrs: Attrs) -> np.ndarray:
    x = as_tensor(args[0])
    axis = attrs["axis"]
    with np.errstate(all="ignore"):
        e = np.exp(_shifted(x, axis))
        return to_result(e / np.sum(e, axis=axis, keepdims=True), x.dtype)


@numpy_rule("nn.log_softmax")
def _log_softmax_impl(args: tuple[Any, ...], attrs: Attrs) -> np.ndarray:
    x = as_tensor(args[0])
    axis = attrs["axis"]
    with np.errstate(all="ignore"):
        s = _shifted(x, axis)
        return to_result(s - np.log(np.sum(np.exp(s), axis=axis, keepdims=True)), x.dtype)


def _channel_relation(
    args: tuple[Type, ...], attrs: Attrs, vectors: tuple[str, ...]
) -> tuple[TensorType, Dim]:
    """Check the data and its per-channel vectors (each of shape (C,), C the
    data's ``axis`` dimension, all of one float dtype); the data's type with
    C refined by the vectors' lengths, and C."""
    x = expect_tensor(args[0], "the data")
    vecs = [expect_tensor(t, name) for t, name in zip(args[1:], vectors, strict=True)]
    expect_dtype(x, "f", "the data")
    for v, name in zip(vecs, vectors, strict=True):
        same_dtype((x, v), f"the data and {name}")
    axis = normalize_axis(attrs["axis"], x.ndim)
    channels = x.shape[axis]
    for v, name in zip(vecs, vectors, strict=True):
        if v.ndim != 1:
            raise RelationError(f"{name} must be 1-d, of shape (C,), got {describe(v)}")
        channels = merge_dim(
            v.shape[0], channels, f"the length of {name} and axis {axis} of the data"
        )
    shape = x.shape[:axis] + (channels,) + x.shape[axis + 1 :]
    return TensorType(shape, x.dtype), channels


def _channel_values(
    args: tuple[Any, ...], axis: int, vectors: tuple[str, ...]
) -> tuple[np.ndarray, int, list[np.ndarray]]:
    """The data in its compute dtype, the channel axis, and the vectors
    reshaped to broadcast along it; OpFailure when a length differs at run time."""
    x = as_tensor(args[0])
    axis = axis + x.ndim if axis < 0 else axis
    cd = compute_dtype(x.dtype)
    shape = [1] * x.ndim
    shape[axis] = x.shape[axis]
    vecs = []
    for value, name in zip(args[1:], vectors, strict=True):
        v = as_tensor(value)
        if v.shape != (x.shape[axis],):
            raise OpFailure(
                f"{name} has shape {v.shape}, expected ({x.shape[axis]},): axis {axis} of the data"
            )
        vecs.append(v.astype(cd).reshape(shape))
    return x.astype(cd), axis, vecs


_LN = ("gamma", "beta")
_BN = ("gamma", "beta", "running_mean", "running_var")


@type_rule("nn.layer_norm")
@with_op_name("nn.layer_norm")
def _layer_norm_relation(args: tuple[Type, ...], attrs: Attrs) -> Type:
    """The data's type; gamma and beta have shape (x.shape[axis],) (checked
    even when ``scale``/``center`` leave them unused)."""
    return _channel_relation(args, attrs, _LN)[0]


@numpy_rule("nn.layer_norm")
def _layer_norm_impl(args: tuple[Any, ...], attrs: Attrs) -> np.ndarray:
    """Normalise over ``axis`` only, with the biased variance."""
    dtype = as_tensor(args[0]).dtype
    x, axis, (gamma, beta) = _channel_values(args, attrs["axis"], _LN)
    eps = x.dtype.type(attrs["epsilon"])
    with np.errstate(all="ignore"):
        centred = x - mean_over(x, axis, keepdims=True)
        var = mean_over(centred * centred, axis, keepdims=True)
        y = centred / np.sqrt(var + eps)
        if attrs["scale"]:
            y = y * gamma
        if attrs["center"]:
            y = y + beta
    return to_result(y, dtype)


@type_rule("nn.batch_norm_infer")
@with_op_name("nn.batch_norm_infer")
def _batch_norm_infer_relation(args: tuple[Type, ...], attrs: Attrs) -> Type:
    """The data's type; the four vectors have shape (C,), C = x.shape[axis]."""
    return _channel_relation(args, attrs, _BN)[0]


@numpy_rule("nn.batch_norm_infer")
def _batch_norm_infer_impl(args: tuple[Any, ...], attrs: Attrs) -> np.ndarray:
    """``(x - running_mean) / sqrt(running_var + eps) * gamma + beta`` per channel."""
    dtype = as_tensor(args[0]).dtype
    x, _, (gamma, beta, mean, var) = _channel_values(args, attrs["axis"], _BN)
    eps = x.dtype.type(attrs["epsilon"])
    with np.errstate(all="ignore"):
        return to_result((x - mean) / np.sqrt(var + eps) * gamma + beta, dtype)


@type_rule("nn.batch_norm_train")
@with_op_name("nn.batch_norm_train")
def _batch_norm_train_relation(args: tuple[Type, ...], attrs: Attrs) -> Type:
    """(y, new_mean, new_var): y of the data's type, the statistics of shape (C,)."""
    y, channels = _channel_relation(args, attrs, _BN)
    stat = TensorType((channels,), y.dtype)
    return TupleType((y, stat, stat))


@numpy_rule("nn.batch_norm_train")
def _batch_norm_train_impl(
    args: tuple[Any, ...], attrs: Attrs
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """PyTorch's convention. Batch statistics over every axis but ``axis``
    (n values per channel); y uses the batch mean and the biased batch variance;
    new_mean = (1 - momentum) * running_mean + momentum * batch_mean and
    new_var = (1 - momentum) * running_var + momentum * batch_var * n / (n - 1).
    n == 1 fails, as in PyTorch; n == 0 (an empty batch) leaves the running
    statistics unchanged, as PyTorch does. Computed in the data's dtype
    (float16: in float32), not in float64."""
    dtype = as_tensor(args[0]).dtype
    x, axis, (gamma, beta, running_mean, running_var) = _channel_values(args, attrs["axis"], _BN)
    others = tuple(i for i in range(x.ndim) if i != axis)
    n = 1
    for i in others:
        n *= x.shape[i]
    if n == 1:
        raise OpFailure(
            f"expected more than 1 value per channel when training, got input of shape {x.shape}"
        )
    channels = x.shape[axis]
    if n == 0:
        return (
            to_result(x * gamma + beta, dtype),
            to_result(running_mean.reshape(channels), dtype),
            to_result(running_var.reshape(channels), dtype),
        )
    eps = x.dtype.type(attrs["epsilon"])
    momentum = x.dtype.type(attrs["momentum"])
    keep = x.dtype.type(1) - momentum
    with np.errstate(all="ignore"):
        mean = mean_over(x, others, keepdims=True)
        centred = x - mean
        var = mean_over(centred * centred, others, keepdims=True)
        y = centred / np.sqrt(var + eps) * gamma + beta
        unbiased = var * x.dtype.type(n / (n - 1))
        new_mean = keep * running_mean + momentum * mean
        new_var = keep * running_var + momentum * unbiased
    return (
        to_result(y, dtype),
        to_result(new_mean.reshape(channels), dtype),
        to_result(new_var.reshape(channels), dtype),
    )


# ------------------------------------------------------------------- vjp
# Products go back as products with the other factor; the normalisations
# differentiate through their statistics (the batch's in training mode).
# Integer products have no derivative.


def _cotangent_in(ctx: VjpContext, ct: Expr, x: Expr, out: Expr) -> Expr:
    """``ct`` in the inputs' dtype (``out_dtype`` may have widened it)."""
    x_dtype, out_dtype = ctx.tensor_type(x).dtype, ctx.tensor_type(out).dtype
    return ct if x_dtype == out_dtype else ctx.op("cast", ct, dtype=x_dtype)


@defvjp("nn.dense")
def _dense_vjp(ctx: VjpContext, args: Args, attrs: Attrs, out: Expr, ct: Expr) -> Grads:
    """out = x @ w.T: dx = ct @ w; dw = ct.T @ x over every leading axis."""
    x, w = args
    if not (ctx.is_float(x) and ctx.is_float(out)):
        return (None, None)
    ct = _cotangent_in(ctx, ct, x, out)
    x_type = ctx.tensor_type(x)
    gx = ctx.op("nn.matmul", ct, w) if x_type.ndim >= 2 else None
    if x_type.ndim == 1:  # (k,) by (units, k): an outer product
        row = ctx.op("expand_dims", ct, axis=0)
        gx = ctx.op("squeeze", ctx.op("nn.matmul", row, w), axis=[0])
        gw = ctx.op("nn.matmul", row, ctx.op("expand_dims", x, axis=0), transpose_a=True)
        return (gx, gw)
    if x_type.ndim == 2:
        return (gx, ctx.op("nn.matmul", ct, x, transpose_a=True))
    units, depth = ctx.tensor_type(w).shape
    if is_static(units) and is_static(depth):  # the leading axes as one
        ct2 = ctx.op("reshape", ct, newshape=[-1, units])
        x2 = ctx.op("reshape", x, newshape=[-1, depth])
        return (gx, ctx.op("nn.matmul", ct2, x2, transpose_a=True))
    batched = ctx.op("nn.matmul", ct, x, transpose_a=True)  # (..., units, k)
    leading = list(range(x_type.ndim - 2))
    return (gx, ctx.op("sum", batched, axis=leading, keepdims=False))


@defvjp("nn.matmul")
def _matmul_vjp(ctx: VjpContext, args: Args, attrs: Attrs, out: Expr, ct: Expr) -> Grads:
    """out = A @ B (A, B: a, b or their transposes): dA = ct @ B.T and
    dB = A.T @ ct, transposed back where a or b was, then summed over the
    batch axes an argument was broadcast along."""
    a, b = args
    if not (ctx.is_float(a) and ctx.is_float(out)):
        return (None, None)
    ct = _cotangent_in(ctx, ct, a, out)
    ta, tb = attrs["transpose_a"], attrs["transpose_b"]
    if ta:
        ga = ctx.op("nn.matmul", b, ct, transpose_a=tb, transpose_b=True)
    else:
        ga = ctx.op("nn.matmul", ct, b, transpose_b=not tb)
    if tb:
        gb = ctx.op("nn.matmul", ct, a, transpose_a=True, transpose_b=ta)
    else:
        gb = ctx.op("nn.matmul", a, ct, transpose_a=not ta)
    batch = ctx.tensor_type(out).shape[:-2]
    grads = []
    for g, arg in ((ga, a), (gb, b)):
        ty = ctx.tensor_type(arg)
        grads.append(ctx.unbroadcast(g, TensorType(batch + ty.shape[-2:], ty.dtype), arg))
    return tuple(grads)


@defvjp("nn.softmax")
def _softmax_vjp(ctx: VjpContext, args: Args, attrs: Attrs, out: Expr, ct: Expr) -> Grads:
    # dx = y (ct - sum(ct y))
    dot = ctx.op("sum", ctx.op("multiply", ct, out), axis=[attrs["axis"]], keepdims=True)
    return (ctx.op("multiply", out, ctx.op("subtract", ct, dot)),)


@defvjp("nn.log_softmax")
def _log_softmax_vjp(ctx: VjpContext, args: Args, attrs: Attrs, out: Expr, ct: Expr) -> Grads:
    # dx = ct - softmax(x) sum(ct)
    total = ctx.op("sum", ct, axis=[attrs["axis"]], keepdims=True)
    return (ctx.op("subtract", ct, ctx.op("multiply", ctx.op("exp", out), total)),)


def _normalised(
    ctx: VjpContext, x: Expr, axes: list[int], epsilon: float
) -> tuple[Expr, Expr, Expr]:
    """(centred x, 1 / sqrt(biased variance + eps), x normalised), with the
    statistics over ``axes`` kept as size-1 axes, recomputed as the forward
    computes them."""
    dtype = ctx.tensor_type(x).dtype
    centred = ctx.op("subtract", x, ctx.op("mean", x, axis=axes, keepdims=True))
    var = ctx.op("mean", ctx.op("multiply", centred, centred), axis=axes, keepdims=True)
    std = ctx.op("sqrt", ctx.op("add", var, ctx.const(epsilon, dtype)))
    inv = ctx.op("divide", ctx.const(1, dtype), std)
    return centred, inv, ctx.op("multiply", centred, inv)


def _through_statistics(
    ctx: VjpContext, dxhat: Expr, xhat: Expr, inv: Expr, axes: list[int]
) -> Expr:
    """The cotangent of x from that of x normalised over ``axes`` by its own
    mean and biased variance: inv (dxhat - mean(dxhat) - xhat mean(dxhat xhat))."""
    mean_d = ctx.op("mean", dxhat, axis=axes, keepdims=True)
    mean_dx = ctx.op("mean", ctx.op("multiply", dxhat, xhat), axis=axes, keepdims=True)
    inner = ctx.op("subtract", ctx.op("subtract", dxhat, mean_d), ctx.op("multiply", xhat, mean_dx))
    return ctx.op("multiply", inv, inner)


@defvjp("nn.layer_norm")
def _layer_norm_vjp(ctx: VjpContext, args: Args, attrs: Attrs, out: Expr, ct: Expr) -> Grads:
    """y = xhat * gamma + beta, xhat normalised over ``axis`` alone; gamma and
    beta get the sums over every other axis (none where unused)."""
    x, gamma, _ = args
    rank = ctx.tensor_type(x).ndim
    axis = normalize_axis(attrs["axis"], rank)
    others = [i for i in range(rank) if i != axis]
    _, inv, xhat = _normalised(ctx, x, [axis], attrs["epsilon"])
    dxhat = ct
    if attrs["scale"]:
        dxhat = ctx.op("multiply", ct, ctx.along(gamma, axis, rank))
    gx = _through_statistics(ctx, dxhat, xhat, inv, [axis])
    g_gamma = ctx.op("sum", ctx.op("multiply", ct, xhat), axis=others) if attrs["scale"] else None
    g_beta = ctx.op("sum", ct, axis=others) if attrs["center"] else None
    if not others:  # a 1-d input: the sums over no axes are the values
        g_gamma = ctx.op("multiply", ct, xhat) if attrs["scale"] else None
        g_beta = ct if attrs["center"] else None
    return (gx, g_gamma, g_beta)


@defvjp("nn.batch_norm_infer")
def _batch_norm_infer_vjp(ctx: VjpContext, args: Args, attrs: Attrs, out: Expr, ct: Expr) -> Grads:
    """y = (x - mean) / sqrt(var + eps) * gamma + beta with fixed statistics:
    an affine map of x. The statistics are differentiated too (they are
    plain inputs here; a state-passing program never asks for them)."""
    x, gamma, _, mean, var = args
    rank = ctx.tensor_type(x).ndim
    dtype = ctx.tensor_type(x).dtype
    axis = normalize_axis(attrs["axis"], rank)
    others = [i for i in range(rank) if i != axis]
    inv = ctx.op(
        "divide",
        ctx.const(1, dtype),
        ctx.op("sqrt", ctx.op("add", var, ctx.const(attrs["epsilon"], dtype))),
    )
    scale = ctx.op("multiply", gamma, inv)  # (C,)
    centred = ctx.op("subtract", x, ctx.along(mean, axis, rank))
    xhat = ctx.op("multiply", centred, ctx.along(inv, axis, rank))
    gx = ctx.op("multiply", ct, ctx.along(scale, axis, rank))

    def per_channel(value: Expr) -> Expr:
        return ctx.op("sum", value, axis=others) if others else value

    g_gamma = per_channel(ctx.op("multiply", ct, xhat))
    g_beta = per_channel(ct)
    g_mean = ctx.op("negative", per_channel(gx))
    # d/dvar of (var + eps)^(-1/2) is -(1/2) inv^3
    g_xhat_dot = per_channel(
        ctx.op("multiply", ctx.op("multiply", ct, xhat), ctx.along(gamma, axis, rank))
    )
    g_var = ctx.op(
        "multiply",
        ctx.op("multiply", g_xhat_dot, ctx.op("multiply", inv, inv)),
        ctx.const(-0.5, dtype),
    )
    return (gx, g_gamma, g_beta, g_mean, g_var)


@defvjp("nn.batch_norm_train")
def _batch_norm_train_vjp(ctx: VjpContext, args: Args, attrs: Attrs, out: Expr, ct: Any) -> Grads:
    """(y, new_mean, new_var) from the batch statistics over every axis but
    ``axis`` (n values per channel). y is differentiated through the batch
    mean and variance, as JAX and PyTorch do. The running statistics are
    state: a state-passing program gives the new ones no cotangent, and then
    the running inputs get none (None). Where a cotangent of new_mean or
    new_var is given, it is honoured: new_mean = (1 - m) rm + m mean(x) and
    new_var = (1 - m) rv + m n/(n-1) var(x)."""
    x, gamma, _, _, _ = args
    ct_y, ct_mean, ct_var = ct
    ty = ctx.tensor_type(x)
    rank, dtype = ty.ndim, ty.dtype
    axis = normalize_axis(attrs["axis"], rank)
    others = [i for i in range(rank) if i != axis]
    momentum = attrs["momentum"]
    centred, inv, xhat = _normalised(ctx, x, others, attrs["epsilon"])
    gx = g_gamma = g_beta = None
    if ct_y is not None:
        dxhat = ctx.op("multiply", ct_y, ctx.along(gamma, axis, rank))
        gx = _through_statistics(ctx, dxhat, xhat, inv, others)
        g_gamma = ctx.op("sum", ctx.op("multiply", ct_y, xhat), axis=others)
        g_beta = ctx.op("sum", ct_y, axis=others)
    n = ctx.count(x, others, dtype)
    extra = []
    if ct_mean is not None:  # m mean(x): each element m / n
        share = ctx.op("divide", ctx.const(momentum, dtype), n)
        extra.append(ctx.op("multiply", ctx.along(ct_mean, axis, rank), share))
    if ct_var is not None:  # m n/(n-1) mean(c^2): each element 2 m c / (n - 1)
        slope = ctx.op(
            "divide",
            ctx.const(2 * momentum, dtype),
            ctx.op("subtract", n, ctx.const(1, dtype)),
        )
        extra.append(
            ctx.op("multiply", ctx.op("multiply", ctx.along(ct_var, axis, rank), centred), slope)
        )
    for term in extra:
        gx = term if gx is None else ctx.op("add", gx, term)
    if gx is not None and ct_y is None:  # the terms above broadcast only over the channel
        gx = ctx.broadcast_like(gx, x)
    keep = ctx.const(1 - momentum, dtype)
    g_running_mean = None if ct_mean is None else ctx.op("multiply", ct_mean, keep)
    g_running_var = None if ct_var is None else ctx.op("multiply", ct_var, keep)
    return (gx, g_gamma, g_beta, g_running_mean, g_running_var)
