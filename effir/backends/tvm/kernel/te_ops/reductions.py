"""Reductions: ``sum``, ``mean``, ``max``, ``min``, ``prod`` and ``argmax``,
empty axes included [RULE RUNTIME-CHECK]. The rules' reasons are the package's
docstring."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from tvm import te, tirx

from .....ir.node import Attrs
from .....ir.types import Type
from .....ops.reduce import reduce_axes
from ..checks import require
from ..rules import te_rule
from .common import _const, _count, _dtype, _is_nan, _kind, _out, _select, _shape
from .elementwise import _as_comparable, cast_value
from .float_math import nan_max, nan_min
from .wrapping import _sum_reducer, wrap_mul

PrimExpr = Any  # tvm.tirx.PrimExpr
Tensor = Any  # tvm.te.Tensor


def compute_dtype(dtype: str) -> str:
    """The accumulation dtype of the numpy rules: float16 sums in float32."""
    return "float32" if dtype == "float16" else dtype


def reduction_layout(
    in_shape: Sequence[int], axes: Sequence[int], keepdims: bool
) -> tuple[list[Any], Callable[[Sequence[PrimExpr]], list[PrimExpr]]]:
    """The reduce axes over ``axes`` of ``in_shape``, and the input index of
    an output index (the output keeps the other axes, and ``axes`` with size
    1 when ``keepdims``)."""
    raxes = [te.reduce_axis((0, in_shape[a]), name=f"k{a}") for a in axes]

    def in_index(out_index: Sequence[PrimExpr]) -> list[PrimExpr]:
        outs, reds = iter(out_index), iter(raxes)
        index = []
        for d in range(len(in_shape)):
            if d in axes:
                index.append(next(reds))
                if keepdims:
                    next(outs)
            else:
                index.append(next(outs))
        return index

    return raxes, in_index


def _product_reducer() -> Any:
    return te.comm_reducer(wrap_mul, lambda dtype: _const(1, dtype), name="prod")


def _nan_reducer(name: str) -> Any:
    """max/min that propagate NaN [RULE TE-NAN]; the identity is -inf/+inf."""
    if name == "max":
        return te.comm_reducer(nan_max, lambda dtype: _const(-math.inf, dtype), name="nan_max")
    return te.comm_reducer(nan_min, lambda dtype: _const(math.inf, dtype), name="nan_min")


def _reducer(name: str, dtype: str) -> Any:
    if name in ("sum", "mean"):
        return _sum_reducer(dtype)
    if name == "prod":
        return _product_reducer()
    if _kind(dtype) == "f":
        return _nan_reducer(name)
    return te.max if name == "max" else te.min


def _reduce_rule(name: str) -> Callable[..., Tensor]:
    def rule(args: tuple[Any, ...], attrs: Attrs, out_type: Type) -> Tensor:
        (x,) = args
        shape, dtype = _out(out_type)
        in_shape = _shape(x)
        axes = reduce_axes(attrs, len(in_shape))
        if not axes:  # over no axis at all: the identity (a mean over 1 element)
            return te.compute(shape, lambda *i: x(*i), name=name)
        if any(in_shape[a] == 0 for a in axes):
            empty = next(a for a in axes if in_shape[a] == 0)
            return _empty_reduction(name, shape, dtype, empty)
        raxes, in_index = reduction_layout(in_shape, axes, attrs["keepdims"])
        # [RULE TE-BOOL] booleans reduce as int8 (max is any, min is all).
        acc = "int8" if dtype == "bool" else compute_dtype(dtype)
        reducer = _reducer(name, acc)
        total = te.compute(
            shape,
            lambda *i: reducer(cast_value(x(*in_index(i)), acc), axis=raxes),
            name=name,
        )
        if name == "mean":
            count = _count([in_shape[a] for a in axes], acc)
            return te.compute(shape, lambda *i: (total(*i) / count).astype(dtype), name="mean_div")
        if acc != dtype:
            total = te.compute(shape, lambda *i: cast_value(total(*i), dtype), name=f"{name}_cast")
        if name in ("max", "min"):
            return _unless_empty_at_run_time(total, name, in_shape, axes)
        return total

    return rule


def _unless_empty_at_run_time(
    out: Tensor, name: str, in_shape: Sequence[Any], axes: Sequence[int]
) -> Tensor:
    """``out``, failing as the interpreter does when an axis it reduces,
    of a size known only at run time (after boolean_mask), is empty then
    [RULE RUNTIME-CHECK] (a static empty axis is ``_empty_reduction``'s)."""
    symbolic = [a for a in axes if not isinstance(in_shape[a], int)]
    if not symbolic:
        return out
    empty = in_shape[symbolic[0]] == 0
    for a in symbolic[1:]:
        empty = tirx.Or(empty, in_shape[a] == 0)
    message = f"{name} of an empty axis (axis {symbolic[0]} has length 0)"
    require(_shape(out), lambda *i: empty, message)
    return out


for _op in ("sum", "mean", "max", "min", "prod"):
    te_rule(_op)(_reduce_rule(_op))


def _empty_reduction(name: str, shape: Sequence[int], dtype: str, axis: int = 0) -> Tensor:
    """A reduction over an empty axis: TVM's loop over it never runs, and
    the initial value is written inside it, so the result is given directly:
    0 for a sum, 1 for a product, NaN for a mean (0 / 0). max, min and
    argmax of an empty axis fail, as in the interpreter [RULE RUNTIME-CHECK]."""
    value = {"prod": 1, "mean": math.nan}.get(name, 0)
    if dtype == "bool":
        value = bool(value)
    message = f"{name} of an empty axis (axis {axis} has length 0)"
    if name in ("max", "min", "argmax"):
        require(shape, lambda *i: tirx.const(True, "bool"), message)
    return te.compute(shape, lambda *i: _const(value, dtype), name=f"{name}_empty")


def _argmax_reducer(last: bool, is_float: bool) -> Any:
    """(index, value) pairs: the larger value wins, NaN above all [RULE TE-NAN];
    between equal values (or two NaN) the first index, or the last one. The
    identity's index loses every tie: the largest int32, or -1."""

    def combine(x: tuple[PrimExpr, PrimExpr], y: tuple[PrimExpr, PrimExpr]) -> tuple:
        (xi, xv), (yi, yv) = x, y
        tie = xi > yi if last else xi < yi
        if is_float:
            x_nan, y_nan = _is_nan(xv), _is_nan(yv)
            same = tirx.Or(xv == yv, tirx.And(x_nan, y_nan))
            wins = tirx.Or(xv > yv, tirx.And(x_nan, tirx.Not(y_nan)))
        else:
            same, wins = xv == yv, xv > yv
        take_x = tirx.Or(wins, tirx.And(same, tie))
        return _select(take_x, xi, yi), _select(take_x, xv, yv)

    def identity(index_dtype: str, value_dtype: str) -> tuple[PrimExpr, PrimExpr]:
        index = _const(-1 if last else 2**31 - 1, index_dtype)
        low = _const(-math.inf, value_dtype) if is_float else te.min_value(value_dtype)
        return index, low

    return te.comm_reducer(combine, identity, name="argmax")


@te_rule("argmax")
def _argmax(args: tuple[Any, ...], attrs: Attrs, out_type: Type) -> Tensor:
    """The first (or last) index of the maximum; over all axes an index into
    the flattened tensor; over no axis at all, zeros."""
    (x,) = args
    shape, _ = _out(out_type)
    in_shape = _shape(x)
    axes = reduce_axes(attrs, len(in_shape))
    if not axes:
        return te.compute(shape, lambda *i: _const(0, "int32"), name="argmax")
    if any(in_shape[a] == 0 for a in axes):
        empty = next(a for a in axes if in_shape[a] == 0)
        return _empty_reduction("argmax", shape, "int32", empty)
    raxes, in_index = reduction_layout(in_shape, axes, attrs["keepdims"])
    strides = [math.prod([in_shape[b] for b in axes[k + 1 :]]) for k in range(len(axes))]
    flat = sum(
        (k.var * s for k, s in zip(raxes[:-1], strides[:-1], strict=True)),
        raxes[-1].var,
    )
    if _dtype(flat) != "int32":  # loops over sizes known at run time count in int64
        flat = flat.astype("int32")
    value_of = _as_comparable
    is_float = _kind(_dtype(x)) == "f"
    reducer = _argmax_reducer(attrs["select_last_index"], is_float)
    index, _ = te.compute(
        shape,
        lambda *i: reducer((flat, value_of(x(*in_index(i)))), axis=raxes),
        name="argmax",
    )
    return _unless_empty_at_run_time(index, "argmax", in_shape, axes)


@te_rule("cumsum")
def _cumsum(args: tuple[Any, ...], attrs: Attrs, out_type: Type) -> Tensor:
    """Each element sums the elements before it (or after, ``reverse``),
    itself included unless ``exclusive``: a reduction over the whole axis
    with a condition, in order, so O(n^2) per axis of length n (the
    sequences it serves are short; a scan would be linear)."""
    (x,) = args
    shape, dtype = _out(out_type)
    rank = len(shape)
    axis = attrs["axis"] + rank if attrs["axis"] < 0 else attrs["axis"]
    if shape[axis] == 0:
        return te.compute(shape, lambda *i: _const(0, dtype), name="cumsum")
    acc = compute_dtype(dtype)
    k = te.reduce_axis((0, shape[axis]), name="k")

    def taken(i: PrimExpr) -> PrimExpr:
        if attrs["reverse"]:
            return k > i if attrs["exclusive"] else k >= i
        return k < i if attrs["exclusive"] else k <= i

    def element(*i: PrimExpr) -> PrimExpr:
        index = [*i[:axis], k, *i[axis + 1 :]]
        # a select, not the reduction's ``where``, which effir's schedules drop
        term = _select(taken(i[axis]), x(*index).astype(acc), _const(0, acc))
        return _sum_reducer(acc)(term, axis=k)

    sums = te.compute(shape, element, name="cumsum_acc")
    return te.compute(shape, lambda *i: sums(*i).astype(dtype), name="cumsum")
