"""Elementwise and broadcasting math, comparisons and logic."""

from collections.abc import Callable
from typing import Any

import numpy as np

from ..ir.expr import Expr
from ..ir.node import Attrs
from ..ir.op import AttrSpec, register_op
from ..ir.types import TensorType, Type
from ..ir.vjp import Args, Grads, VjpContext, defvjp, not_differentiable
from ..runtime.values import as_tensor
from .relations import (
    NumpyImpl,
    OpFailure,
    TypeRelation,
    broadcast_shapes,
    broadcast_values,
    compute_dtype,
    expect_dtype,
    expect_tensor,
    numpy_rule,
    same_dtype,
    to_result,
    type_rule,
    with_op_name,
)

UNARY = (
    "negative", "exp", "log", "sqrt", "tanh", "sigmoid", "nn.relu", "logical_not",
    "abs", "sin", "cos", "floor", "ceil",
)  # fmt: skip
BINARY = ("add", "subtract", "multiply", "divide", "power", "maximum", "minimum", "mod", "fmod")
COMMUTATIVE = {
    "add",
    "multiply",
    "maximum",
    "minimum",
    "equal",
    "not_equal",
    "logical_and",
    "logical_or",
}
COMPARISON = ("equal", "not_equal", "less", "less_equal", "greater", "greater_equal")
LOGICAL = ("logical_and", "logical_or")

for _name in UNARY:
    register_op(_name, 1, traits=("elementwise",), doc=f"elementwise {_name}")

for _name in BINARY + COMPARISON + LOGICAL:
    _traits = ("broadcast", "commutative") if _name in COMMUTATIVE else ("broadcast",)
    register_op(_name, 2, traits=_traits, doc=f"elementwise {_name} with numpy broadcasting")


register_op("where", 3, traits=("broadcast",), doc="where(cond, x, y) with broadcasting")
register_op(
    "cast", 1, attrs=(AttrSpec("dtype", "dtype"),), traits=("elementwise",), doc="dtype cast"
)


# ------------------------------------------------------------------ rules
# No implicit promotion: every tensor argument of a binary or ternary operator
# has the same dtype, and the result keeps it (float16 stays float16). Integer
# arithmetic wraps around modulo 2**bits, as in C and TVM; floats follow IEEE
# (x / 0 is inf or nan, never an error). maximum/minimum propagate NaN.

_NUMERIC = "iuf"
_UNARY_KINDS = {
    "negative": _NUMERIC,  # wraps for unsigned and for the most negative int
    "exp": "f",
    "log": "f",
    "sqrt": "f",
    "tanh": "f",
    "sigmoid": "f",
    "nn.relu": _NUMERIC,
    "logical_not": "b",
    "abs": _NUMERIC,  # wraps for the most negative int, as negative does
    "sin": "f",
    "cos": "f",
    "floor": "f",
    "ceil": "f",
}


def _sigmoid(x: np.ndarray) -> np.ndarray:
    # 1 / (1 + exp(-x)) reaches both limits (0 at -inf, 1 at +inf) without a
    # nan: exp overflowing to inf only makes the quotient 0.
    one = x.dtype.type(1)
    return one / (one + np.exp(-x))


_UNARY_FNS: dict[str, Callable[[np.ndarray], Any]] = {
    "negative": np.negative,
    "exp": np.exp,
    "log": np.log,
    "sqrt": np.sqrt,
    "tanh": np.tanh,
    "sigmoid": _sigmoid,
    "nn.relu": lambda x: np.maximum(x, x.dtype.type(0)),
    "logical_not": np.logical_not,
    "abs": np.abs,
    "sin": np.sin,
    "cos": np.cos,
    "floor": np.floor,
    "ceil": np.ceil,
}


def _unary_relation(name: str) -> TypeRelation:
    kinds = _UNARY_KINDS[name]

    @with_op_name(name)
    def rel(args: tuple[Type, ...], attrs: Attrs) -> Type:
        x = expect_tensor(args[0])
        expect_dtype(x, kinds)
        return x

    return rel


def _unary_impl(name: str) -> NumpyImpl:
    fn = _UNARY_FNS[name]

    def impl(args: tuple[Any, ...], attrs: Attrs) -> np.ndarray:
        # float16 is computed in float32 and rounded once (sigmoid's exp(-x)
        # would overflow float16 long before the result underflows).
        x = as_tensor(args[0])
        with np.errstate(all="ignore"):
            return to_result(fn(x.astype(compute_dtype(x.dtype), copy=False)), x.dtype)

    return impl


for _name in UNARY:
    type_rule(_name)(_unary_relation(_name))
    numpy_rule(_name)(_unary_impl(_name))


def _mod(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The remainder with the divisor's sign (Python's ``%``, numpy's
    ``mod``); an integer modulo by zero fails as an integer division does."""
    if a.dtype.kind in "iu" and np.any(np.broadcast_to(b, broadcast_values(a, b)) == 0):
        raise OpFailure("integer modulo by zero")
    return np.mod(a, b)


def _fmod(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The remainder with the dividend's sign (C's ``fmod``, truncating)."""
    if a.dtype.kind in "iu" and np.any(np.broadcast_to(b, broadcast_values(a, b)) == 0):
        raise OpFailure("integer modulo by zero")
    return np.fmod(a, b)


def _binary_relation(name: str, kinds: str, result_dtype: str | None) -> TypeRelation:
    """Equal dtypes of ``kinds``, broadcast shapes; the result has the
    arguments' dtype, or ``result_dtype`` (comparisons: bool)."""

    @with_op_name(name)
    def rel(args: tuple[Type, ...], attrs: Attrs) -> Type:
        a = expect_tensor(args[0], "the first argument")
        b = expect_tensor(args[1], "the second argument")
        dtype = same_dtype((a, b))
        expect_dtype(a, kinds, "the arguments")
        return TensorType(broadcast_shapes(a.shape, b.shape), result_dtype or dtype)

    return rel


def _int_divide(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Integer division truncating toward zero (C, TVM), not numpy's floor;
    the most negative int divided by -1 wraps to itself."""
    if np.any(np.broadcast_to(b, broadcast_values(a, b)) == 0):
        raise OpFailure("integer division by zero")
    with np.errstate(all="ignore"):
        q = np.floor_divide(a, b)
        if a.dtype.kind == "i":
            r = np.remainder(a, b)
            q = np.where((r != 0) & ((a < 0) != (b < 0)), q + a.dtype.type(1), q)
    return q


def _divide(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if a.dtype.kind in "iu":
        return _int_divide(a, b)
    return np.divide(a, b)


def _power(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if b.dtype.kind == "i" and np.any(np.broadcast_to(b, broadcast_values(a, b)) < 0):
        raise OpFailure("integer power with a negative exponent")
    return np.power(a, b)


_BINARY_FNS: dict[str, Callable[[np.ndarray, np.ndarray], Any]] = {
    "add": np.add,
    "subtract": np.subtract,
    "multiply": np.multiply,
    "divide": _divide,
    "power": _power,
    "maximum": np.maximum,
    "minimum": np.minimum,
    "mod": _mod,
    "fmod": _fmod,
    "equal": np.equal,
    "not_equal": np.not_equal,
    "less": np.less,
    "less_equal": np.less_equal,
    "greater": np.greater,
    "greater_equal": np.greater_equal,
    "logical_and": np.logical_and,
    "logical_or": np.logical_or,
}


def _binary_impl(name: str, result_dtype: str | None) -> NumpyImpl:
    fn = _BINARY_FNS[name]

    def impl(args: tuple[Any, ...], attrs: Attrs) -> np.ndarray:
        a, b = as_tensor(args[0]), as_tensor(args[1])
        broadcast_values(a, b)
        with np.errstate(all="ignore"):
            return to_result(fn(a, b), result_dtype or a.dtype)

    return impl


for _name in BINARY:
    type_rule(_name)(_binary_relation(_name, _NUMERIC, None))
    numpy_rule(_name)(_binary_impl(_name, None))
for _name in COMPARISON:
    type_rule(_name)(_binary_relation(_name, "biuf", "bool"))
    numpy_rule(_name)(_binary_impl(_name, "bool"))
for _name in LOGICAL:
    type_rule(_name)(_binary_relation(_name, "b", None))
    numpy_rule(_name)(_binary_impl(_name, None))


@type_rule("where")
@with_op_name("where")
def _where_relation(args: tuple[Type, ...], attrs: Attrs) -> Type:
    """The condition is bool; x and y share a dtype; all three broadcast."""
    cond = expect_tensor(args[0], "the condition")
    x = expect_tensor(args[1], "x")
    y = expect_tensor(args[2], "y")
    expect_dtype(cond, "b", "the condition")
    dtype = same_dtype((x, y), "x and y")
    return TensorType(broadcast_shapes(cond.shape, x.shape, y.shape), dtype)


@numpy_rule("where")
def _where_impl(args: tuple[Any, ...], attrs: Attrs) -> np.ndarray:
    cond, x, y = (as_tensor(a) for a in args)
    broadcast_values(cond, x, y)
    return to_result(np.where(cond, x, y), x.dtype)


@type_rule("cast")
@with_op_name("cast")
def _cast_relation(args: tuple[Type, ...], attrs: Attrs) -> Type:
    """Any dtype to any dtype, same shape."""
    x = expect_tensor(args[0])
    return TensorType(x.shape, attrs["dtype"])


@numpy_rule("cast")
def _cast_impl(args: tuple[Any, ...], attrs: Attrs) -> np.ndarray:
    """numpy's ``astype``: float to int truncates toward zero; a float out of
    the int's range (or NaN) gives an undefined value, as in C; nonzero is True."""
    return to_result(as_tensor(args[0]), attrs["dtype"])


# ------------------------------------------------------------------- vjp
# The backward of each operator, in effir's own operators (effir.ir.vjp).
# A broadcasting operator's cotangent is summed back to each argument's
# shape (``ctx.unbroadcast``).


@defvjp("add")
def _add_vjp(ctx: VjpContext, args: Args, attrs: Attrs, out: Expr, ct: Expr) -> Grads:
    out_type = ctx.tensor_type(out)
    return tuple(ctx.unbroadcast(ct, out_type, a) for a in args)


@defvjp("subtract")
def _subtract_vjp(ctx: VjpContext, args: Args, attrs: Attrs, out: Expr, ct: Expr) -> Grads:
    out_type = ctx.tensor_type(out)
    return (
        ctx.unbroadcast(ct, out_type, args[0]),
        ctx.unbroadcast(ctx.op("negative", ct), out_type, args[1]),
    )


@defvjp("multiply")
def _multiply_vjp(ctx: VjpContext, args: Args, attrs: Attrs, out: Expr, ct: Expr) -> Grads:
    x, y = args
    out_type = ctx.tensor_type(out)
    return (
        ctx.unbroadcast(ctx.op("multiply", ct, y), out_type, x),
        ctx.unbroadcast(ctx.op("multiply", ct, x), out_type, y),
    )


@defvjp("negative")
def _negative_vjp(ctx: VjpContext, args: Args, attrs: Attrs, out: Expr, ct: Expr) -> Grads:
    return (ctx.op("negative", ct),)


@defvjp("exp")
def _exp_vjp(ctx: VjpContext, args: Args, attrs: Attrs, out: Expr, ct: Expr) -> Grads:
    return (ctx.op("multiply", ct, out),)


@defvjp("tanh")
def _tanh_vjp(ctx: VjpContext, args: Args, attrs: Attrs, out: Expr, ct: Expr) -> Grads:
    # d tanh = 1 - tanh^2
    dtype = ctx.tensor_type(out).dtype
    one = ctx.const(1, dtype)
    slope = ctx.op("subtract", one, ctx.op("multiply", out, out))
    return (ctx.op("multiply", ct, slope),)


@defvjp("divide")
def _divide_vjp(ctx: VjpContext, args: Args, attrs: Attrs, out: Expr, ct: Expr) -> Grads:
    # d(x / y) = dx / y - (x / y) dy / y; integer division has no derivative
    x, y = args
    if not ctx.is_float(out):
        return (None, None)
    out_type = ctx.tensor_type(out)
    gx = ctx.op("divide", ct, y)
    gy = ctx.op("negative", ctx.op("multiply", gx, out))
    return (ctx.unbroadcast(gx, out_type, x), ctx.unbroadcast(gy, out_type, y))


@defvjp("power")
def _power_vjp(ctx: VjpContext, args: Args, attrs: Attrs, out: Expr, ct: Expr) -> Grads:
    # d(x^y) = y x^(y-1) dx + x^y log(x) dy, with JAX's convention at x = 0:
    # the log is taken of 1 there, so that 0^y (y > 0) has dy-slope 0, not nan.
    x, y = args
    if not ctx.is_float(out):
        return (None, None)
    out_type = ctx.tensor_type(out)
    dtype = out_type.dtype
    one, zero = ctx.const(1, dtype), ctx.const(0, dtype)
    slope = ctx.op("multiply", y, ctx.op("power", x, ctx.op("subtract", y, one)))
    gx = ctx.op("multiply", ct, slope)
    safe = ctx.op("where", ctx.op("equal", x, zero), one, x)
    gy = ctx.op("multiply", ctx.op("multiply", ct, out), ctx.op("log", safe))
    return (ctx.unbroadcast(gx, out_type, x), ctx.unbroadcast(gy, out_type, y))


@defvjp("log")
def _log_vjp(ctx: VjpContext, args: Args, attrs: Attrs, out: Expr, ct: Expr) -> Grads:
    return (ctx.op("divide", ct, args[0]),)


@defvjp("sqrt")
def _sqrt_vjp(ctx: VjpContext, args: Args, attrs: Attrs, out: Expr, ct: Expr) -> Grads:
    # d sqrt(x) = 1 / (2 sqrt(x))
    half = ctx.const(0.5, ctx.tensor_type(out).dtype)
    return (ctx.op("divide", ctx.op("multiply", ct, half), out),)


@defvjp("sigmoid")
def _sigmoid_vjp(ctx: VjpContext, args: Args, attrs: Attrs, out: Expr, ct: Expr) -> Grads:
    # d sigmoid = sigmoid (1 - sigmoid)
    one = ctx.const(1, ctx.tensor_type(out).dtype)
    slope = ctx.op("multiply", out, ctx.op("subtract", one, out))
    return (ctx.op("multiply", ct, slope),)


@defvjp("nn.relu")
def _relu_vjp(ctx: VjpContext, args: Args, attrs: Attrs, out: Expr, ct: Expr) -> Grads:
    # the slope at 0 is 0, as JAX's
    (x,) = args
    if not ctx.is_float(out):
        return (None,)
    zero = ctx.const(0, ctx.tensor_type(out).dtype)
    return (ctx.op("where", ctx.op("greater", x, zero), ct, zero),)


@defvjp("abs")
def _abs_vjp(ctx: VjpContext, args: Args, attrs: Attrs, out: Expr, ct: Expr) -> Grads:
    # sign(x) ct: the slope at 0 is 0, as JAX's
    (x,) = args
    if not ctx.is_float(out):
        return (None,)
    zero = ctx.const(0, ctx.tensor_type(out).dtype)
    negated = ctx.op("negative", ct)
    below = ctx.op("where", ctx.op("less", x, zero), negated, zero)
    return (ctx.op("where", ctx.op("greater", x, zero), ct, below),)


@defvjp("sin")
def _sin_vjp(ctx: VjpContext, args: Args, attrs: Attrs, out: Expr, ct: Expr) -> Grads:
    return (ctx.op("multiply", ct, ctx.op("cos", args[0])),)


@defvjp("cos")
def _cos_vjp(ctx: VjpContext, args: Args, attrs: Attrs, out: Expr, ct: Expr) -> Grads:
    return (ctx.op("negative", ctx.op("multiply", ct, ctx.op("sin", args[0]))),)


@defvjp("floor", "ceil")
def _step_vjp(ctx: VjpContext, args: Args, attrs: Attrs, out: Expr, ct: Expr) -> Grads:
    # piecewise constant: the slope is 0 wherever it exists (JAX's convention)
    return (ctx.zeros_like(args[0]),)


def _remainder_vjp(ctx: VjpContext, args: Args, out: Expr, ct: Expr, truncate: bool) -> Grads:
    """x mod y = x - q y with q = floor(x / y) (``mod``) or trunc(x / y)
    (``fmod``), piecewise constant: dx = ct, dy = -q ct; integers have no
    derivative."""
    x, y = args
    if not ctx.is_float(out):
        return (None, None)
    out_type = ctx.tensor_type(out)
    ratio = ctx.op("divide", x, y)
    quotient = ctx.op("floor", ratio)
    if truncate:
        below = ctx.op("less", ratio, ctx.const(0, out_type.dtype))
        quotient = ctx.op("where", below, ctx.op("ceil", ratio), quotient)
    gy = ctx.op("negative", ctx.op("multiply", ct, quotient))
    return (ctx.unbroadcast(ct, out_type, x), ctx.unbroadcast(gy, out_type, y))


@defvjp("mod")
def _mod_vjp(ctx: VjpContext, args: Args, attrs: Attrs, out: Expr, ct: Expr) -> Grads:
    return _remainder_vjp(ctx, args, out, ct, truncate=False)


@defvjp("fmod")
def _fmod_vjp(ctx: VjpContext, args: Args, attrs: Attrs, out: Expr, ct: Expr) -> Grads:
    return _remainder_vjp(ctx, args, out, ct, truncate=True)


def _extremum_vjp(ctx: VjpContext, args: Args, out: Expr, ct: Expr) -> Grads:
    """maximum/minimum: the cotangent goes to the argument that is the
    result; on a tie each gets half (JAX's ``_balanced_eq``)."""
    x, y = args
    if not ctx.is_float(out):
        return (None, None)
    out_type = ctx.tensor_type(out)
    dtype = out_type.dtype
    one, half, zero = (ctx.const(v, dtype) for v in (1, 0.5, 0))
    x_is, y_is = ctx.op("equal", x, out), ctx.op("equal", y, out)
    x_share = ctx.op("where", x_is, ctx.op("where", y_is, half, one), zero)
    y_share = ctx.op("where", y_is, ctx.op("where", x_is, half, one), zero)
    return (
        ctx.unbroadcast(ctx.op("multiply", ct, x_share), out_type, x),
        ctx.unbroadcast(ctx.op("multiply", ct, y_share), out_type, y),
    )


@defvjp("maximum", "minimum")
def _maximum_vjp(ctx: VjpContext, args: Args, attrs: Attrs, out: Expr, ct: Expr) -> Grads:
    return _extremum_vjp(ctx, args, out, ct)


@defvjp("where")
def _where_vjp(ctx: VjpContext, args: Args, attrs: Attrs, out: Expr, ct: Expr) -> Grads:
    # the condition is a choice, not a value: it has no cotangent
    cond, x, y = args
    if not ctx.is_float(out):
        return (None, None, None)
    out_type = ctx.tensor_type(out)
    zero = ctx.const(0, out_type.dtype)
    return (
        None,
        ctx.unbroadcast(ctx.op("where", cond, ct, zero), out_type, x),
        ctx.unbroadcast(ctx.op("where", cond, zero, ct), out_type, y),
    )


@defvjp("cast")
def _cast_vjp(ctx: VjpContext, args: Args, attrs: Attrs, out: Expr, ct: Expr) -> Grads:
    # float to float is the identity, rounded: the cotangent goes back cast;
    # from or to integers and bool nothing is differentiable
    (x,) = args
    if not (ctx.is_float(x) and ctx.is_float(out)):
        return (None,)
    return (ctx.op("cast", ct, dtype=ctx.tensor_type(x).dtype),)


not_differentiable(
    "equal", "not_equal", "less", "less_equal", "greater", "greater_equal",
    "logical_and", "logical_or", "logical_not",
)  # fmt: skip
