"""``nn`` rules: dense and matmul, softmax, layer and batch normalisation. The
rules' reasons are the package's docstring; a product's operands are
rounded to the compile's precision (precision.py [RULE COMPILE-PRECISION])."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from tvm import te, tirx

from .....ir.node import Attrs
from .....ir.types import Type
from ...precision import operand
from ..checks import require
from ..rules import te_rule
from .common import _const, _count, _dtype, _let, _out, _select, _shape
from .elementwise import cast_value
from .float_math import exp_of
from .reductions import _empty_reduction, compute_dtype, reduction_layout
from .wrapping import _sum_reducer, wrap_mul

PrimExpr = Any  # tvm.tirx.PrimExpr
Tensor = Any  # tvm.te.Tensor


def _as_compute(x: Tensor, dtype: str, name: str) -> Tensor:
    """``x`` with ``dtype`` (a compute of its own when the dtype changes)."""
    if _dtype(x) == dtype:
        return x
    return te.compute(_shape(x), lambda *i: cast_value(x(*i), dtype), name=name)


@te_rule("nn.dense")
def _dense(args: tuple[Any, ...], attrs: Attrs, out_type: Type) -> Tensor:
    """``x @ w.T`` over the last axis of x, in the output's compute dtype."""
    x, w = args
    shape, dtype = _out(out_type)
    acc = compute_dtype(dtype)
    if _shape(x)[-1] == 0:
        return _empty_reduction("sum", shape, dtype)
    k = te.reduce_axis((0, _shape(x)[-1]), name="k")
    x, w = operand(x, acc), operand(w, acc)
    product = te.compute(
        shape,
        lambda *i: _sum_reducer(acc)(
            wrap_mul(cast_value(x(*i[:-1], k), acc), cast_value(w(i[-1], k), acc)),
            axis=k,
        ),
        name="dense",
    )
    return _as_compute(product, dtype, "dense_cast")


def _batch_index(shape: Sequence[int], batch: Sequence[PrimExpr]) -> list[PrimExpr]:
    """The leading (batch) index of an operand of shape ``shape + (r, c)``
    for the broadcast batch index ``batch``."""
    offset = len(batch) - len(shape)
    return [0 if d == 1 else batch[offset + k] for k, d in enumerate(shape)]


@te_rule("nn.matmul")
def _matmul(args: tuple[Any, ...], attrs: Attrs, out_type: Type) -> Tensor:
    """Batched ``a @ b`` with numpy's broadcasting of the batch axes."""
    a, b = args
    shape, dtype = _out(out_type)
    acc = compute_dtype(dtype)
    ta, tb = attrs["transpose_a"], attrs["transpose_b"]
    a_shape, b_shape = _shape(a), _shape(b)
    depth = a_shape[-2] if ta else a_shape[-1]
    if depth == 0:
        return _empty_reduction("sum", shape, dtype)
    k = te.reduce_axis((0, depth), name="k")
    a, b = operand(a, acc), operand(b, acc)

    def body(*i: PrimExpr) -> PrimExpr:
        batch, m, n = i[:-2], i[-2], i[-1]
        ab = _batch_index(a_shape[:-2], batch)
        bb = _batch_index(b_shape[:-2], batch)
        lhs = a(*ab, k, m) if ta else a(*ab, m, k)
        rhs = b(*bb, n, k) if tb else b(*bb, k, n)
        return _sum_reducer(acc)(wrap_mul(cast_value(lhs, acc), cast_value(rhs, acc)), axis=k)

    return _as_compute(te.compute(shape, body, name="matmul"), dtype, "matmul_cast")


def _along(index: Sequence[PrimExpr], axis: int, position: PrimExpr) -> list[PrimExpr]:
    full = list(index)
    full[axis] = position
    return full


def _kept(shape: Sequence[int], axes: Sequence[int]) -> tuple[int, ...]:
    return tuple(1 if d in axes else n for d, n in enumerate(shape))


def _reduce_kept(
    x: Tensor,
    axes: Sequence[int],
    reducer: Any,
    fn: Callable[[PrimExpr], PrimExpr],
    name: str,
) -> Tensor:
    """``reducer(fn(x))`` over ``axes``, keeping them with size 1."""
    shape = _shape(x)
    raxes, in_index = reduction_layout(shape, axes, keepdims=True)
    return te.compute(
        _kept(shape, axes),
        lambda *i: reducer(fn(x(*in_index(i))), axis=raxes),
        name=name,
    )


def _at_kept(t: Tensor, index: Sequence[PrimExpr], axes: Sequence[int]) -> PrimExpr:
    return t(*(0 if d in axes else v for d, v in enumerate(index)))


def _plain_max() -> Any:
    # An identity of -inf, as the numpy rule's `initial=-inf` (NaN needs no
    # care here: a NaN in a row makes the whole row NaN either way).
    return te.comm_reducer(
        lambda a, b: te.max(a, b), lambda dtype: _const(-math.inf, dtype), name="max"
    )


def _shifted(x: Tensor, axis: int, name: str) -> Tensor:
    """``x - max(x)`` along ``axis``, in the compute dtype."""
    xc = _as_compute(x, compute_dtype(_dtype(x)), f"{name}_widen")
    top = _reduce_kept(xc, [axis], _plain_max(), lambda v: v, f"{name}_max")
    return te.compute(
        _shape(xc), lambda *i: xc(*i) - _at_kept(top, i, [axis]), name=f"{name}_shift"
    )


@te_rule("nn.softmax")
def _softmax(args: tuple[Any, ...], attrs: Attrs, out_type: Type) -> Tensor:
    (x,) = args
    dtype = _dtype(x)
    axis = attrs["axis"] % len(x.shape)
    shifted = _shifted(x, axis, "softmax")
    e = te.compute(_shape(x), lambda *i: exp_of(shifted(*i)), name="softmax_exp")
    total = _reduce_kept(e, [axis], te.sum, lambda v: v, "softmax_sum")
    return te.compute(
        _shape(x),
        lambda *i: cast_value(e(*i) / _at_kept(total, i, [axis]), dtype),
        name="softmax",
    )


@te_rule("nn.log_softmax")
def _log_softmax(args: tuple[Any, ...], attrs: Attrs, out_type: Type) -> Tensor:
    (x,) = args
    dtype = _dtype(x)
    axis = attrs["axis"] % len(x.shape)
    shifted = _shifted(x, axis, "log_softmax")
    total = _reduce_kept(shifted, [axis], te.sum, exp_of, "log_softmax_sum")
    return te.compute(
        _shape(x),
        lambda *i: cast_value(shifted(*i) - te.log(_at_kept(total, i, [axis])), dtype),
        name="log_softmax",
    )


def _scalar(value: float, dtype: str) -> PrimExpr:
    """A float attribute rounded to ``dtype`` first, as the numpy rules'
    ``x.dtype.type(value)`` does."""
    return _const(float(np.dtype(dtype).type(value)), dtype)


def _mean_kept(
    x: Tensor, axes: Sequence[int], fn: Callable[[PrimExpr], PrimExpr], name: str
) -> Tensor:
    """``sum(fn(x)) / count`` over ``axes`` (kept), in x's dtype (the
    numpy rules' ``mean_over``)."""
    shape = _shape(x)
    if any(shape[a] == 0 for a in axes):
        return _empty_reduction("mean", _kept(shape, axes), _dtype(x))
    total = _reduce_kept(x, axes, te.sum, fn, f"{name}_sum")
    count = _count([shape[a] for a in axes], _dtype(x))
    return te.compute(_shape(total), lambda *i: total(*i) / count, name=name)


def _channel(v: Tensor, dtype: str, index: Sequence[PrimExpr], axis: int) -> PrimExpr:
    return cast_value(v(index[axis]), dtype)


@te_rule("nn.layer_norm")
def _layer_norm(args: tuple[Any, ...], attrs: Attrs, out_type: Type) -> Tensor:
    """Normalise over ``axis`` with the biased variance."""
    x, gamma, beta = args
    dtype = _dtype(x)
    cd = compute_dtype(dtype)
    axis = attrs["axis"] % len(x.shape)
    xc = _as_compute(x, cd, "layer_norm_widen")
    mean = _mean_kept(xc, [axis], lambda v: v, "layer_norm_mean")
    centred = te.compute(
        _shape(x),
        lambda *i: xc(*i) - _at_kept(mean, i, [axis]),
        name="layer_norm_centre",
    )
    var = _mean_kept(centred, [axis], lambda v: _let(v, lambda c: c * c), "layer_norm_var")
    eps = _scalar(attrs["epsilon"], cd)

    def body(*i: PrimExpr) -> PrimExpr:
        y = centred(*i) / te.sqrt(_at_kept(var, i, [axis]) + eps)
        if attrs["scale"]:
            y = y * _channel(gamma, cd, i, axis)
        if attrs["center"]:
            y = y + _channel(beta, cd, i, axis)
        return cast_value(y, dtype)

    return te.compute(_shape(x), body, name="layer_norm")


@te_rule("nn.batch_norm_infer")
def _batch_norm_infer(args: tuple[Any, ...], attrs: Attrs, out_type: Type) -> Tensor:
    """``(x - mean) / sqrt(var + eps) * gamma + beta`` per channel."""
    x, gamma, beta, mean, var = args
    dtype = _dtype(x)
    cd = compute_dtype(dtype)
    axis = attrs["axis"] % len(x.shape)
    eps = _scalar(attrs["epsilon"], cd)

    def body(*i: PrimExpr) -> PrimExpr:
        def ch(v: Tensor) -> PrimExpr:
            return _channel(v, cd, i, axis)

        y = (cast_value(x(*i), cd) - ch(mean)) / te.sqrt(ch(var) + eps) * ch(gamma) + ch(beta)
        return cast_value(y, dtype)

    return te.compute(_shape(x), body, name="batch_norm_infer")


@te_rule("nn.batch_norm_train")
def _batch_norm_train(args: tuple[Any, ...], attrs: Attrs, out_type: Type) -> tuple:
    """PyTorch's convention, as the numpy rule: batch statistics over every
    axis but ``axis``; y with the biased variance; the running variance
    updated with the unbiased one. ``n``, the number of values per channel,
    known at build time decides the numpy rule's cases here; after a mask it
    is known at run time only and they are decided there: n == 1 fails
    when the kernel runs [RULE RUNTIME-CHECK] (known or not: a program that never
    reaches the call runs), n == 0 leaves the running statistics unchanged
    (y is then empty)."""
    x, gamma, beta, running_mean, running_var = args
    dtype = _dtype(x)
    cd = compute_dtype(dtype)
    shape = _shape(x)
    axis = attrs["axis"] % len(shape)
    channels = shape[axis]
    n = math.prod([shape[d] for d in range(len(shape)) if d != axis])
    if not isinstance(n, int):
        wide = tirx.Cast("float64", n)
        unbias = (wide / tirx.max(wide - _const(1.0, "float64"), _const(1.0, "float64"))).astype(cd)
        # the interpreter's message shows the input's shape, its run-time sizes too
        dims = ", ".join(str(d) if isinstance(d, int) else "{}" for d in shape)
        message = "expected more than 1 value per channel when training, got input of shape " + (
            f"({dims}{',' if len(shape) == 1 else ''})"
        )
        shown = tuple(tirx.Cast("int64", d) for d in shape if not isinstance(d, int))
        require((), lambda: n == 1, message, lambda: shown)
        return _batch_norm_statistics(args, attrs, unbias, n == 0)
    # fails when it runs, as the interpreter does [RULE RUNTIME-CHECK]: not if not reached
    if n == 1:
        message = "expected more than 1 value per channel when training, got input of shape "
        require((), lambda: tirx.const(True, "bool"), message + str(tuple(shape)))
        return _batch_norm_statistics(args, attrs, _scalar(1.0, cd), None)
    if n == 0:  # an empty batch leaves the running statistics unchanged

        def vector(v: Tensor, name: str) -> Tensor:
            return te.compute((channels,), lambda c: cast_value(v(c), dtype), name=name)

        y = te.compute(
            shape,
            lambda *i: cast_value(
                cast_value(x(*i), cd) * _channel(gamma, cd, i, axis) + _channel(beta, cd, i, axis),
                dtype,
            ),
            name="batch_norm_train",
        )
        return (
            y,
            vector(running_mean, "batch_norm_mean"),
            vector(running_var, "batch_norm_var"),
        )
    return _batch_norm_statistics(args, attrs, _scalar(n / (n - 1), cd), None)


def _batch_norm_statistics(
    args: tuple[Any, ...], attrs: Attrs, unbias: PrimExpr, empty: PrimExpr | None
) -> tuple:
    """``nn.batch_norm_train``'s y and updated running statistics, the
    batch statistics as ``sum / count`` over every axis but ``axis`` (the
    numpy rules' ``mean_over``; a count known only at run time included);
    where ``empty`` holds at run time, the running statistics stay."""
    x, gamma, beta, running_mean, running_var = args
    dtype = _dtype(x)
    cd = compute_dtype(dtype)
    shape = _shape(x)
    axis = attrs["axis"] % len(shape)
    channels = shape[axis]
    others = [d for d in range(len(shape)) if d != axis]
    xc = _as_compute(x, cd, "batch_norm_widen")
    total = _reduce_kept(xc, others, te.sum, lambda v: v, "batch_norm_mean_sum")
    count = _count([shape[a] for a in others], cd)
    mean = te.compute(_shape(total), lambda *i: total(*i) / count, name="batch_norm_mean")
    centred = te.compute(
        shape, lambda *i: xc(*i) - _at_kept(mean, i, others), name="batch_norm_centre"
    )
    squares = _reduce_kept(
        centred, others, te.sum, lambda v: _let(v, lambda c: c * c), "batch_norm_var_sum"
    )
    var = te.compute(_shape(squares), lambda *i: squares(*i) / count, name="batch_norm_var")
    eps = _scalar(attrs["epsilon"], cd)
    y = te.compute(
        shape,
        lambda *i: cast_value(
            centred(*i) / te.sqrt(_at_kept(var, i, others) + eps) * _channel(gamma, cd, i, axis)
            + _channel(beta, cd, i, axis),
            dtype,
        ),
        name="batch_norm_train",
    )
    np_cd = np.dtype(cd).type
    momentum = np_cd(attrs["momentum"])
    keep = _const(float(np_cd(1) - momentum), cd)
    moment = _const(float(momentum), cd)

    def stat_index(c: PrimExpr) -> list[PrimExpr]:
        return [c if d == axis else 0 for d in range(len(shape))]

    def updated(running: Tensor, batch: PrimExpr) -> PrimExpr:
        value = keep * cast_value(running, cd) + moment * batch
        if empty is not None:
            value = _select(empty, cast_value(running, cd), value)
        return cast_value(value, dtype)

    new_mean = te.compute(
        (channels,),
        lambda c: updated(running_mean(c), mean(*stat_index(c))),
        name="batch_norm_new_mean",
    )
    new_var = te.compute(
        (channels,),
        lambda c: updated(running_var(c), var(*stat_index(c)) * unbias),
        name="batch_norm_new_var",
    )
    return y, new_mean, new_var
