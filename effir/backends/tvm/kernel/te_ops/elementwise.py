"""Elementwise rules: unary and binary arithmetic, integer division and power
[RULE TE-DIV] [RULE RUNTIME-CHECK], comparisons [RULE TE-BOOL], ``where``, ``cast``. The
rules' reasons are the package's docstring."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from tvm import te, tirx

from .....ir.node import Attrs
from .....ir.types import Type
from ...schedule.common import ORDERED
from ..checks import require
from ..rules import te_rule
from .common import (
    _const,
    _dtype,
    _is_nan,
    _kind,
    _let,
    _lets,
    _load_broadcast,
    _map,
    _out,
    _select,
    _shape,
    _widened,
    float_quotient,
)
from .float_math import exp_of, nan_max, nan_min, sigmoid_of, tanh_of
from .wrapping import wrap_add, wrap_mul, wrap_sub

PrimExpr = Any  # tvm.tirx.PrimExpr
Tensor = Any  # tvm.te.Tensor


def _negative(x: PrimExpr) -> PrimExpr:
    dtype = _dtype(x)
    return -x if _kind(dtype) == "f" else wrap_sub(_const(0, dtype), x)


def _relu(x: PrimExpr) -> PrimExpr:
    # An unsigned value is never negative: the identity (TVM's simplifier
    # rejects `x < 0u` with "negative uint" while rewriting it).
    if _kind(_dtype(x)) == "u":
        return x
    # `x < 0` is false for NaN, which passes through as numpy's maximum(x, 0).
    zero = _const(0, _dtype(x))
    return _select(x < zero, zero, x)


def _abs(x: PrimExpr) -> PrimExpr:
    # integers wrap as numpy's (|INT_MIN| is INT_MIN) [RULE TE-WRAP]; unsigned
    # values are their own absolute value
    dtype = _dtype(x)
    if _kind(dtype) == "u":
        return x
    if _kind(dtype) == "f":
        return te.abs(x)
    return _let(x, lambda v: _select(v < _const(0, dtype), wrap_sub(_const(0, dtype), v), v))


_UNARY: dict[str, Callable[[PrimExpr], PrimExpr]] = {
    "negative": _negative,
    "exp": exp_of,
    "log": te.log,
    "sqrt": te.sqrt,
    "tanh": tanh_of,
    "sigmoid": sigmoid_of,
    "nn.relu": _relu,
    "logical_not": tirx.Not,
    "abs": _abs,
    "sin": te.sin,
    "cos": te.cos,
    "floor": te.floor,
    "ceil": te.ceil,
}
# no rounding to do: exact in float16
_EXACT_IN_F16 = ("negative", "nn.relu", "logical_not", "abs", "floor", "ceil")


def _unary_rule(name: str) -> Callable[..., Tensor]:
    fn = _UNARY[name]

    def rule(args: tuple[Any, ...], attrs: Attrs, out_type: Type) -> Tensor:
        (x,) = args
        body = fn if name in _EXACT_IN_F16 else _widened(_dtype(x), fn)
        return _map(name, out_type, (x,), body)

    return rule


for _op in _UNARY:
    te_rule(_op)(_unary_rule(_op))


def int_divide(a: PrimExpr, b: PrimExpr) -> PrimExpr:
    """[RULE TE-DIV] Truncating division that never traps. The divisor is made
    safe (1 in place of 0 and -1; x / -1 is computed as -x / 1) and a zero
    divisor's quotient is masked to 0 by a multiplication: TVM's simplifier
    assumes the guard of a select when simplifying its branches, which are
    then evaluated unguarded, so a select around the division would be
    simplified back to the trapping division."""
    dtype = _dtype(a)
    zero, one = _const(0, dtype), _const(1, dtype)

    def body(a: PrimExpr, b: PrimExpr) -> PrimExpr:
        nonzero = _select(b == zero, zero, one)
        if _kind(dtype) == "i":
            minus_one = _const(-1, dtype)
            safe = _select(tirx.Or(b == zero, b == minus_one), one, b)
            numerator = _select(b == minus_one, wrap_sub(zero, a), a)
        else:
            safe, numerator = _select(b == zero, one, b), a
        # zero divisors: checked [RULE RUNTIME-CHECK]
        return tirx.truncdiv(numerator, safe) * nonzero

    return _lets([a, b], body)


def int_power(a: Tensor, b: Tensor, out_type: Type) -> Tensor:
    """``a ** b`` for integers by repeated squaring over every bit of ``b``,
    wrapping as numpy's integer power does; a negative exponent fails
    [RULE RUNTIME-CHECK]. One reduction over the exponent's bits, in order, whose
    accumulator is (result, square, started): as one expression the
    squarings would nest 64 lets deep, each used twice [RULE TE-LET], and as
    one compute per bit a 64-bit power is 128 blocks (a minute to build).
    Products wrap by ``wrap_mul`` [RULE TE-WRAP]."""
    shape, dtype = _out(out_type)
    exp_dtype = _dtype(b)
    bits = np.dtype(exp_dtype).itemsize * 8
    zero, one = _const(0, dtype), _const(1, dtype)

    def combine(acc: tuple[PrimExpr, ...], step: tuple[PrimExpr, ...]) -> tuple[PrimExpr, ...]:
        result, square, started = acc
        on, first, _ = step

        base = _select(started != zero, square, first)
        taken = _select(on != zero, base, one)
        return wrap_mul(result, taken), _let(base, lambda v: wrap_mul(v, v)), one

    reducer = te.comm_reducer(
        combine,
        lambda t0, t1, t2: (_const(1, t0), _const(0, t1), _const(0, t2)),
        name="power",
    )
    k = te.reduce_axis((0, bits), name="bit")

    def bit_of(index: Sequence[PrimExpr]) -> PrimExpr:
        e = _load_broadcast(b, index, shape)
        shifted = tirx.bitwise_and(e >> k.var.astype(exp_dtype), _const(1, exp_dtype))
        return _select(shifted != _const(0, exp_dtype), one, zero)

    result, _, _ = te.compute(
        shape,
        lambda *i: reducer((bit_of(i), _load_broadcast(a, i, shape), zero), axis=k),
        name="power_bits",
        attrs={ORDERED: 1},
    )

    power = te.compute(shape, lambda *i: result(*i), name="power")
    if _kind(exp_dtype) == "i":  # a negative exponent fails [RULE RUNTIME-CHECK]
        require(
            shape,
            lambda *i: _load_broadcast(b, i, shape) < _const(0, exp_dtype),
            "integer power with a negative exponent",
        )
    return power


def int_remainder(a: PrimExpr, b: PrimExpr, floor: bool) -> PrimExpr:
    """[RULE TE-DIV] The integer remainder with the divisor's sign (``floor``:
    Python's ``%``) or the dividend's (C's), never trapping: a zero divisor
    (checked [RULE RUNTIME-CHECK]) and -1 (x86 traps on ``INT_MIN % -1``, whose
    remainder is 0) are replaced by 1, whose remainder is 0."""
    dtype = _dtype(a)
    zero, one = _const(0, dtype), _const(1, dtype)

    def body(a: PrimExpr, b: PrimExpr) -> PrimExpr:
        unsafe = b == zero
        if _kind(dtype) == "i":
            unsafe = tirx.Or(unsafe, b == _const(-1, dtype))
        safe = _select(unsafe, one, b)
        return tirx.floormod(a, safe) if floor else tirx.truncmod(a, safe)

    return _lets([a, b], body)


def float_mod(a: PrimExpr, b: PrimExpr) -> PrimExpr:
    """numpy's float ``mod`` (``npy_divmod``): C's ``fmod`` (LLVM's exact
    ``frem``, which ``truncmod`` of floats is), moved by the
    divisor where the signs differ, and a zero result takes the divisor's
    sign."""
    dtype = _dtype(a)
    zero = _const(0, dtype)

    def body(r: PrimExpr) -> PrimExpr:
        # the signs differ (booleans are not compared [RULE TE-BOOL]; NaN moves nothing)
        differ = tirx.Or(tirx.And(b < zero, r > zero), tirx.And(b > zero, r < zero))
        moved = _select(differ, r + b, r)
        nonzero = tirx.Or(r != zero, _is_nan(r))  # an ordered != is false for NaN [RULE TE-NAN]
        return _select(nonzero, moved, tirx.copysign(zero, b))

    return _let(tirx.truncmod(a, b), body)


def _remainder_rule(name: str) -> Callable[..., Tensor]:
    floor = name == "mod"

    def rule(args: tuple[Any, ...], attrs: Attrs, out_type: Type) -> Tensor:
        dtype = _dtype(args[0])
        if _kind(dtype) == "f":
            fn = (lambda a, b: _lets([b], lambda v: float_mod(a, v))) if floor else tirx.truncmod
            return _map(name, out_type, args, _widened(dtype, fn))
        out = _map(name, out_type, args, lambda a, b: int_remainder(a, b, floor))
        divisor = args[1]

        def zero(*i: PrimExpr) -> PrimExpr:  # as int64: see the divide rule
            at = _load_broadcast(divisor, i, _shape(out))
            return at.astype("int64") == _const(0, "int64")

        require(_shape(out), zero, "integer modulo by zero")
        return out

    return rule


def _divide(a: PrimExpr, b: PrimExpr) -> PrimExpr:
    return float_quotient(a, b) if _kind(_dtype(a)) == "f" else int_divide(a, b)


def _as_comparable(x: PrimExpr) -> PrimExpr:
    """[RULE TE-BOOL] Booleans compare as int8; float16 widens (exactly)."""
    dtype = _dtype(x)
    if dtype == "bool":
        return _select(x, _const(1, "int8"), _const(0, "int8"))
    return x.astype("float32") if dtype == "float16" else x


def _not_equal(a: PrimExpr, b: PrimExpr) -> PrimExpr:
    if _kind(_dtype(a)) != "f":
        return a != b
    return tirx.Or(a != b, tirx.Or(_is_nan(a), _is_nan(b)))  # [RULE TE-NAN]


_ARITH: dict[str, Callable[[PrimExpr, PrimExpr], PrimExpr]] = {
    "add": wrap_add,
    "subtract": wrap_sub,
    "multiply": wrap_mul,
    "divide": _divide,
    "power": te.power,  # floats; integers: int_power
}
_COMPARE: dict[str, Callable[[PrimExpr, PrimExpr], PrimExpr]] = {
    "equal": lambda a, b: a == b,
    "not_equal": _not_equal,
    "less": lambda a, b: a < b,
    "less_equal": lambda a, b: a <= b,
    "greater": lambda a, b: a > b,
    "greater_equal": lambda a, b: a >= b,
}


def _arith_rule(name: str) -> Callable[..., Tensor]:
    fn = _ARITH[name]

    def rule(args: tuple[Any, ...], attrs: Attrs, out_type: Type) -> Tensor:
        if name == "power" and _kind(_dtype(args[0])) != "f":
            return int_power(args[0], args[1], out_type)
        out = _map(name, out_type, args, _widened(_dtype(args[0]), fn))
        if name == "divide" and _kind(_dtype(args[0])) != "f":
            divisor = args[1]

            def zero(*i: PrimExpr) -> PrimExpr:
                # as int64: TVM's analyzer turns the branch condition of an
                # unsigned `b == 0` into `b <= -1` and cannot make a negative uint
                at = _load_broadcast(divisor, i, _shape(out))
                return at.astype("int64") == _const(0, "int64")

            require(_shape(out), zero, "integer division by zero")
        return out

    return rule


def _compare_rule(name: str) -> Callable[..., Tensor]:
    fn = _COMPARE[name]

    def rule(args: tuple[Any, ...], attrs: Attrs, out_type: Type) -> Tensor:
        return _map(name, out_type, args, lambda a, b: fn(_as_comparable(a), _as_comparable(b)))

    return rule


def _extremum_rule(name: str) -> Callable[..., Tensor]:
    fn = nan_max if name == "maximum" else nan_min

    def rule(args: tuple[Any, ...], attrs: Attrs, out_type: Type) -> Tensor:
        dtype = _dtype(args[0])
        if dtype == "bool":  # max is or, min is and
            combine = tirx.Or if name == "maximum" else tirx.And
            return _map(name, out_type, args, combine)
        return _map(name, out_type, args, _widened(dtype, fn))

    return rule


for _op in _ARITH:
    te_rule(_op)(_arith_rule(_op))
for _op in ("mod", "fmod"):
    te_rule(_op)(_remainder_rule(_op))
for _op in _COMPARE:
    te_rule(_op)(_compare_rule(_op))
for _op in ("maximum", "minimum"):
    te_rule(_op)(_extremum_rule(_op))


def _logical_rule(name: str, combine: Callable[..., PrimExpr]) -> Callable[..., Tensor]:
    def rule(args: tuple[Any, ...], attrs: Attrs, out_type: Type) -> Tensor:
        return _map(name, out_type, args, combine)

    return rule


te_rule("logical_and")(_logical_rule("logical_and", tirx.And))
te_rule("logical_or")(_logical_rule("logical_or", tirx.Or))


@te_rule("where")
def _where(args: tuple[Any, ...], attrs: Attrs, out_type: Type) -> Tensor:
    return _map("where", out_type, args, lambda c, x, y: _select(c, x, y))


def cast_value(x: PrimExpr, dtype: str) -> PrimExpr:
    """numpy's ``astype``: nonzero (NaN included) is True; a boolean is 0 or 1."""
    src = _dtype(x)
    if src == dtype:
        return x
    if dtype == "bool":
        zero = _const(0, src)
        if _kind(src) == "f":
            return _let(x, lambda v: tirx.Or(v != zero, _is_nan(v)))
        return x != zero
    if src == "bool":
        return _select(x, _const(1, dtype), _const(0, dtype))
    return x.astype(dtype)


@te_rule("cast")
def _cast(args: tuple[Any, ...], attrs: Attrs, out_type: Type) -> Tensor:
    return _map("cast", out_type, args, lambda x: cast_value(x, attrs["dtype"]))
