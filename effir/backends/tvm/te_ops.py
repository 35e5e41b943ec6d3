"""``te`` rules: effir's pure operators as TVM tensor expressions.

One rule per operator family, registered on the operator registry through
``te_rule`` (see rules.py for the interface). The numpy rules in
``effir/ops`` are the reference; each rule here computes what its numpy rule
computes, bit for bit for integers and booleans and to 1e-5 relative for
floats. Where TVM's own lowering computes something else, the rule says so
and does it by hand:

[RULE NAN] TVM lowers ``max``/``min`` to an ordered compare and select, so
``max(nan, 1)`` is 1 but ``max(1, nan)`` is nan, and ``!=`` to an *ordered*
not-equal, false when either side is NaN. numpy propagates NaN through
``maximum``, ``minimum``, ``max``, ``min`` and ``nn.relu``, counts NaN as the
maximum in ``argmax`` and says ``nan != x``; the rules test ``isnan``
explicitly.

[RULE BOOL] TVM's LLVM code generator cannot compare booleans (``i1``);
booleans are compared, reduced and converted as ``int8``.

[RULE F16] float16 is computed in float32 and rounded once per operator,
as the numpy rules do (numpy's own float16 loops do the same).

[RULE DIV] Integer division truncates toward zero (C, TVM), not numpy's
floor, and the most negative integer divided by -1 wraps to itself. The
divisor is made safe before dividing: x86 traps on a zero divisor and on
``INT_MIN / -1``, and a vectorised select evaluates both sides. A division
by zero fails [RULE CHECK].

[RULE CHECK] Where the interpreter fails on a value (an integer division
by zero, ``power`` with a negative integer exponent, ``take`` with
``mode="fast"`` of an index out of range, an empty axis), the kernel fails
too, by calling the packed function ``effir.fail`` with the interpreter's
error, operator and source location included (errors.py
``site_message``); the call path turns the TVM error into that
``effir.EvalError``. ``checked_once`` checks a whole output before it is
used (a count, then one call; a call inside the element loop would stop
its vectorisation: a division ran 4x slower); ``fail_if`` checks one
element (``take``, whose message shows the index). CUDA kernels cannot call back
into the host and do not check (the value computed is as if unchecked).

[RULE MATH] TVM's ``tanh`` for LLVM is ``(1 - e^-2x) / (1 + e^-2x)``, off by
6e-5 relative near zero, and its ``exp`` calls libm once per element, which
does not vectorise. float32 ``exp`` and ``tanh`` (and ``sigmoid``,
``softmax`` through them) use the vectorisable approximations below, within
a few ulp of numpy's over the whole range, infinities, NaN, overflow to inf
and underflow to 0 included; float64 uses libm. The same code runs on every
target, so CPU and CUDA kernels agree.

[RULE LET] An element read more than once in an expression is bound once
with ``tirx.Let``: inlining a producer then copies its expression once per
*reading site*, not once per use, so a chain of such operators stays linear
in size as TIR. (TVM's LLVM code generator still substitutes the lets; the
schedule's inline budget, schedule.py [RULE BUDGET], bounds what that
costs; integer ``power`` is staged over several computes for the same
reason.)

[RULE WRAP] Integer ``+ - *`` wrap modulo 2^bits, as numpy's do. TVM's
LLVM code generator marks 32- and 64-bit integer ``+ - *`` no-signed-wrap
(unsigned: no-unsigned-wrap), so an overflow is undefined behaviour that
LLVM exploits: ``0u32 - x`` folds to 0 (it can only not wrap when x is 0),
``x + 4294967295u32`` to 4294967295, ``x - INT_MIN`` keeps INT_MIN, and a
comparison of an overflowing sum folds as if it had not overflowed. Every
integer ``+ - *`` of the rules (elementwise, reductions, ``power``,
``divide``, ``nn.dense``) goes through ``wrap_add``/``wrap_sub``/
``wrap_mul``, which never overflow in TVM's sense: 8- and 16-bit operations
carry no flags; 32-bit ones are computed exactly in 64 bits and truncated;
64-bit ones are computed on 32-bit halves held in uint64 (whose sums and
products fit) and reassembled with shifts and masks. LLVM narrows the
32-bit form back to one flag-free instruction.

Known imprecisions: floating-point sums are accumulated in a different
order than numpy's pairwise sums.
"""

from __future__ import annotations

import contextlib
import math
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import tvm_ffi
from tvm import te, tirx

from ...ir.diagnostics import Span
from ...ir.node import Attrs
from ...ir.types import TensorType, TupleType, Type
from ...ops.reduce import reduce_axes
from ...ops.shape import _show_newshape, _slices
from .errors import FAIL_FUNCTION, VALUE_MARK, BackendError, site_message
from .rules import dim_value, te_rule
from .schedule import KEEP, ORDERED
from .symbolic_shapes import sliced

PrimExpr = Any  # tvm.tirx.PrimExpr
Tensor = Any  # tvm.te.Tensor


# ====================================================================== helpers
def static_shape(t: Type) -> tuple[int, ...]:
    """The dimensions of a tensor type, which must all be known integers."""
    if not isinstance(t, TensorType):
        raise BackendError(f"expected a tensor type, got {t!r}")
    dims = tuple(dim_value(d) for d in t.shape)  # a TIR variable: symbolic (rules.py)
    if any(d is None for d in dims):
        raise BackendError(f"a kernel needs static shapes, got {t!r}")
    return dims


def _out(t: Type) -> tuple[tuple[int, ...], str]:
    return static_shape(t), t.dtype  # type: ignore[union-attr]


def _shape(x: Tensor) -> tuple[int, ...]:
    return tuple(int(d) if isinstance(d, tirx.IntImm) else d for d in x.shape)


def _dtype(x: Tensor | PrimExpr) -> str:
    """The dtype of a tensor or an expression (TVM 0.27 expressions carry a
    ``ty``, tensors and tensor elements a ``dtype``)."""
    dtype = getattr(x, "dtype", None)
    return str(dtype if dtype is not None else x.ty)


def _kind(dtype: str) -> str:
    """'b' (bool), 'i' (signed), 'u' (unsigned) or 'f' (float)."""
    if dtype == "bool":
        return "b"
    return {"float": "f", "uint": "u", "int": "i"}[dtype.rstrip("0123456789")]


def _const(value: Any, dtype: str) -> PrimExpr:
    return tirx.const(value, dtype)


def _let(value: PrimExpr, body: Callable[[PrimExpr], PrimExpr]) -> PrimExpr:
    """``body(value)`` with ``value`` bound once [RULE LET]."""
    if isinstance(value, tirx.Var | tirx.IntImm | tirx.FloatImm):
        return body(value)
    var = tirx.Var("v", _dtype(value))
    return tirx.Let(var, value, body(var))


def _lets(values: Sequence[PrimExpr], body: Callable[..., PrimExpr]) -> PrimExpr:
    if not values:
        return body()
    return _let(values[0], lambda v: _lets(values[1:], lambda *rest: body(v, *rest)))


def _load_broadcast(
    x: Tensor, index: Sequence[PrimExpr], out: Sequence[Any] | None = None
) -> PrimExpr:
    """``x`` at ``index`` of the broadcast result (numpy's rule: trailing
    dimensions align, a dimension of size 1 stretches). A size known only
    at run time that is not the result's (``out``) may be the 1 that
    stretches: read at 0 where it is (symbolic_shapes.py [RULE SIZECHECK])."""
    shape = _shape(x)
    offset = len(index) - len(shape)
    return x(*(_stretched(d, index[offset + k], out, offset + k) for k, d in enumerate(shape)))


def _stretched(d: Any, i: PrimExpr, out: Sequence[Any] | None, position: int) -> PrimExpr:
    if isinstance(d, int):
        return 0 if d == 1 else i
    if out is None or tvm_ffi.structural_equal(d, out[position], map_free_vars=False):
        return i
    return _select(d == 1, tirx.const(0, _dtype(i)), i)


def _name(op: str) -> str:
    return op.replace(".", "_")


def _map(
    name: str, out_type: Type, inputs: Sequence[Tensor], fn: Callable[..., PrimExpr]
) -> Tensor:
    """An elementwise (broadcasting) compute of ``fn`` over ``inputs``."""
    shape, _ = _out(out_type)
    return te.compute(
        shape,
        lambda *i: _lets([_load_broadcast(x, i, shape) for x in inputs], fn),
        name=_name(name),
    )


def _widened(dtype: str, fn: Callable[..., PrimExpr]) -> Callable[..., PrimExpr]:
    """``fn`` computed in float32 for float16 arguments [RULE F16]."""
    if dtype != "float16":
        return fn
    return lambda *xs: fn(*(x.astype("float32") for x in xs)).astype("float16")


def _is_nan(x: PrimExpr) -> PrimExpr:
    return tirx.isnan(x)


def _select(cond: PrimExpr, a: PrimExpr, b: PrimExpr) -> PrimExpr:
    return tirx.Select(cond, a, b)


# ============================================================== float math
# [RULE MATH] Cephes' expf: n = round(x / ln 2), r = x - n ln 2 in two parts
# (Cody and Waite), exp(r) by a degree-7 polynomial, times 2^n built from its
# exponent bits in two halves so that results between 2^-149 and 2^128 (and
# overflow to inf, underflow to 0) come out right.
_LOG2E = 1.44269504088896341
_LN2_HI, _LN2_LO = 0.693359375, -2.12194440e-4
_EXP_POLY = (
    1.9875691500e-4,
    1.3981999507e-3,
    8.3334519073e-3,
    4.1665795894e-2,
    1.6666665459e-1,
    5.0000001201e-1,
)


def _pow2_f32(n: PrimExpr) -> PrimExpr:
    """2^n for an int32 n in [-126, 127], from the exponent bits."""
    return tirx.reinterpret("float32", (n + 127) << 23)


def exp_f32(x: PrimExpr) -> PrimExpr:
    f32 = "float32"

    def body(x: PrimExpr) -> PrimExpr:
        clamped = te.max(te.min(x, _const(89.0, f32)), _const(-104.0, f32))
        n = tirx.floor(clamped * _const(_LOG2E, f32) + _const(0.5, f32))

        def reduced(n: PrimExpr) -> PrimExpr:
            r = clamped - n * _const(_LN2_HI, f32) - n * _const(_LN2_LO, f32)

            def poly(r: PrimExpr) -> PrimExpr:
                p = _const(_EXP_POLY[0], f32)
                for c in _EXP_POLY[1:]:
                    p = p * r + _const(c, f32)
                y = p * r * r + r + _const(1.0, f32)
                ni = n.astype("int32")
                return _let(ni >> 1, lambda half: y * _pow2_f32(half) * _pow2_f32(ni - half))

            return _let(r, poly)

        return _select(_is_nan(x), x, _let(n, reduced))

    return _let(x, body)


# Eigen's float32 tanh: a rational approximation, odd numerator of degree 13
# over an even denominator of degree 6, on [-9, 9] (beyond, tanh rounds to
# +-1); below 4e-4, tanh(x) rounds to x.
_TANH_NUM = (
    -2.76076847742355e-16,
    2.00018790482477e-13,
    -8.60467152213735e-11,
    5.12229709037114e-08,
    1.48572235717979e-05,
    6.37261928875436e-04,
    4.89352455891786e-03,
)
_TANH_DEN = (1.19825839466702e-06, 1.18534705686654e-04, 2.26843463243900e-03, 4.89352518554385e-03)


def tanh_f32(x: PrimExpr) -> PrimExpr:
    f32 = "float32"

    def body(x: PrimExpr) -> PrimExpr:
        clamped = te.max(te.min(x, _const(9.0, f32)), _const(-9.0, f32))

        def rational(c: PrimExpr) -> PrimExpr:
            def with_square(c2: PrimExpr) -> PrimExpr:
                num = _const(_TANH_NUM[0], f32)
                for k in _TANH_NUM[1:]:
                    num = num * c2 + _const(k, f32)
                den = _const(_TANH_DEN[0], f32)
                for k in _TANH_DEN[1:]:
                    den = den * c2 + _const(k, f32)
                return c * num / den

            return _let(c * c, with_square)

        tiny = te.abs(x) < _const(4e-4, f32)
        return _select(tirx.Or(_is_nan(x), tiny), x, _let(clamped, rational))

    return _let(x, body)


def tanh_f64(x: PrimExpr) -> PrimExpr:
    """``sign(x) (1 - 2 / (e^2|x| + 1))``, and a Taylor polynomial below 0.05
    where that formula cancels."""
    f64 = "float64"

    def body(x: PrimExpr) -> PrimExpr:
        a = te.abs(x)
        big = _const(1.0, f64) - _const(2.0, f64) / (te.exp(a + a) + _const(1.0, f64))
        signed = _select(x < _const(0.0, f64), -big, big)

        def taylor(x2: PrimExpr) -> PrimExpr:
            # x - x^3/3 + 2x^5/15 - 17x^7/315: below 0.05 the next term is 4e-12 relative.
            p = _const(-17.0 / 315.0, f64)
            for c in (2.0 / 15.0, -1.0 / 3.0, 1.0):
                p = p * x2 + _const(c, f64)
            return x * p

        small = _let(x * x, taylor)
        return _select(a < _const(0.05, f64), small, signed)

    return _let(x, body)


def exp_of(x: PrimExpr) -> PrimExpr:
    """``exp`` in x's (float32 or float64) dtype [RULE MATH]."""
    return exp_f32(x) if _dtype(x) == "float32" else te.exp(x)


def tanh_of(x: PrimExpr) -> PrimExpr:
    return tanh_f32(x) if _dtype(x) == "float32" else tanh_f64(x)


def sigmoid_of(x: PrimExpr) -> PrimExpr:
    """``1 / (1 + exp(-x))``, the numpy rule's formula: exact limits, no NaN."""
    one = _const(1.0, _dtype(x))
    return one / (one + exp_of(-x))


def nan_max(a: PrimExpr, b: PrimExpr) -> PrimExpr:
    """numpy's ``maximum`` [RULE NAN]: NaN if either is NaN."""
    if _kind(_dtype(a)) != "f":
        return te.max(a, b)
    return _lets([a, b], lambda a, b: _select(tirx.Or(_is_nan(a), a > b), a, b))


def nan_min(a: PrimExpr, b: PrimExpr) -> PrimExpr:
    if _kind(_dtype(a)) != "f":
        return te.min(a, b)
    return _lets([a, b], lambda a, b: _select(tirx.Or(_is_nan(a), a < b), a, b))


# ============================================================== checks
_sites = threading.local()


@contextlib.contextmanager
def check_site(op: str, span: Span | None, checked: bool) -> Iterator[None]:
    """The operator call whose rule runs now: the site of its checks
    (none when ``checked`` is false: a CUDA kernel)."""
    previous = getattr(_sites, "current", None)
    _sites.current = (op, span) if checked else None
    try:
        yield
    finally:
        _sites.current = previous


def fail_if(bad: PrimExpr, value: PrimExpr, message: str, *shown: PrimExpr) -> PrimExpr:
    """``value``, failing with the interpreter's ``message`` where ``bad``
    holds [RULE CHECK]; each ``{}`` of the message shows one of ``shown``
    (int64 values) at run time."""
    site = getattr(_sites, "current", None)
    if site is None:
        # An unsigned value's check does not build yet (TVM's simplifier
        # makes "uint from negative value -1" of it): unchecked for now.
        return value
    text = site_message(site[0], message.replace("{}", VALUE_MARK), site[1])
    text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    call = tirx.call_packed(FAIL_FUNCTION, text, *shown)
    dtype = _dtype(value)  # (no cast of the call: TVM folds it as a constant)
    failure = _select(call == 0, _const(0, dtype), _const(1, dtype))
    return tirx.if_then_else(bad, failure, value)


def checked_once(out: Tensor, bad: Callable[..., PrimExpr], message: str) -> Tensor:
    """``out``, failing with the interpreter's ``message`` when ``bad(i)``
    holds at some index i of it [RULE CHECK], checked once per call, not
    per element: a count of the bad indices (a reduction that vectorises),
    a 0-d block (never inlined) that calls ``effir.fail`` when the count is
    not zero, and ``out`` plus that block's zero, read once per element."""
    site = getattr(_sites, "current", None)
    shape = _shape(out)
    if site is None or any(isinstance(d, int) and d == 0 for d in shape):
        return out
    dtype = _dtype(out)

    def flag(*i: PrimExpr) -> PrimExpr:
        return _select(bad(*i), _const(1, "int32"), _const(0, "int32"))

    if shape:
        axes = [te.reduce_axis((0, n), name=f"c{d}") for d, n in enumerate(shape)]
        count = te.compute(
            (), lambda: te.sum(flag(*(a.var for a in axes)), axis=axes), name="check_count"
        )
    else:
        count = te.compute((), lambda: flag(), name="check_count")
    guard = te.compute(
        (),
        lambda: fail_if(count() > _const(0, "int32"), _const(0, dtype), message),
        name="check",
        attrs={KEEP: 1},
    )
    return te.compute(shape, lambda *i: out(*i) + guard(), name=f"{out.op.name}_checked")


# ============================================================ wrapping
_LOW = 0xFFFFFFFF


def _bits_of(x: PrimExpr, shift: int, width: int) -> PrimExpr:
    """Bits ``shift .. shift + width`` of a 64-bit integer, as a
    non-negative value of its own dtype."""
    dtype = _dtype(x)
    shifted = x >> _const(shift, dtype) if shift else x
    return tirx.bitwise_and(shifted, _const((1 << width) - 1, dtype))


def _joined(low: PrimExpr, high: PrimExpr) -> PrimExpr:
    """``high * 2^32 + low`` modulo 2^64, of the low 32 bits of each: a
    shift and an or, which carry no overflow flags."""
    dtype = _dtype(low)
    return tirx.bitwise_or(_bits_of(high, 0, 32) << _const(32, dtype), _bits_of(low, 0, 32))


def _add64(a: PrimExpr, b: PrimExpr, carry: int) -> PrimExpr:
    """``a + b + carry`` modulo 2^64 by 32-bit halves in a's own dtype (the
    high halves signed for int64): no sum leaves the dtype's range."""
    dtype = _dtype(a)
    thirty_two = _const(32, dtype)

    def body(a: PrimExpr, b: PrimExpr) -> PrimExpr:
        low = _bits_of(a, 0, 32) + _bits_of(b, 0, 32)
        if carry:
            low = low + _const(carry, dtype)
        return _let(
            low, lambda lo: _joined(lo, (a >> thirty_two) + (b >> thirty_two) + (lo >> thirty_two))
        )

    return _lets([a, b], body)


def _mul64(a: PrimExpr, b: PrimExpr) -> PrimExpr:
    """``a * b`` modulo 2^64 in a's own dtype: a = ah 2^32 + al (al in
    [0, 2^32), ah a signed or unsigned 32-bit value), al split again into
    16-bit pieces, so that every product and sum stays in range. (Only the
    operands are let-bound: TVM's bound analysis fails on nested lets here.)"""
    dtype = _dtype(a)
    c16, c32 = _const(16, dtype), _const(32, dtype)

    def body(a: PrimExpr, b: PrimExpr) -> PrimExpr:
        a1, a0, b1, b0 = (
            _bits_of(a, 16, 16),
            _bits_of(a, 0, 16),
            _bits_of(b, 16, 16),
            _bits_of(b, 0, 16),
        )
        mid = a1 * b0 + a0 * b1
        low = a0 * b0 + (_bits_of(mid, 0, 16) << c16)
        cross = _bits_of(_bits_of(a, 0, 32) * (b >> c32), 0, 32) + _bits_of(
            (a >> c32) * _bits_of(b, 0, 32), 0, 32
        )
        return _joined(low, a1 * b1 + (mid >> c16) + (low >> c32) + cross)

    return _lets([a, b], body)


def _wrap32(op: str, a: PrimExpr, b: PrimExpr) -> PrimExpr:
    """A 32-bit ``op`` computed exactly in 64 bits (never negative for
    unsigned), reduced modulo 2^32 into the dtype's range by masks, then
    narrowed: a cast of an in-range value, which TVM's simplifier cannot
    turn back into the overflowing 32-bit operation."""
    dtype = _dtype(a)
    wide = "uint64" if _kind(dtype) == "u" else "int64"
    aw, bw = a.astype(wide), b.astype(wide)
    if op == "-" and wide == "uint64":
        exact = aw + _const(1 << 32, wide) - bw
    else:
        exact = {"+": aw + bw, "-": aw - bw, "*": aw * bw}[op]
    low = tirx.bitwise_and(exact, _const(_LOW, wide))
    if wide == "int64":  # sign-extend bit 31
        sign = _const(1 << 31, wide)
        low = tirx.bitwise_xor(low, sign) - sign
    return low.astype(dtype)


def _wrapping(op: str, a: PrimExpr, b: PrimExpr) -> PrimExpr:
    dtype = _dtype(a)
    kind = _kind(dtype)
    bits = 0 if kind in "bf" else np.dtype(dtype).itemsize * 8
    plain = {"+": lambda: a + b, "-": lambda: a - b, "*": lambda: a * b}[op]
    if bits < 32:  # floats, booleans and narrow integers: no overflow flags
        return plain()
    if bits == 32:
        return _wrap32(op, a, b)
    if op == "+":
        return _add64(a, b, 0)
    if op == "-":  # a + ~b + 1
        return _add64(a, tirx.bitwise_not(b), 1)
    return _mul64(a, b)


def wrap_add(a: PrimExpr, b: PrimExpr) -> PrimExpr:
    """``a + b``, wrapping for integers [RULE WRAP]."""
    return _wrapping("+", a, b)


def wrap_sub(a: PrimExpr, b: PrimExpr) -> PrimExpr:
    return _wrapping("-", a, b)


def wrap_mul(a: PrimExpr, b: PrimExpr) -> PrimExpr:
    return _wrapping("*", a, b)


def _sum_reducer(dtype: str) -> Any:
    """``te.sum``, wrapping for integers of 32 bits and more [RULE WRAP]."""
    if _kind(dtype) in "bf" or np.dtype(dtype).itemsize < 4:
        return te.sum
    return te.comm_reducer(wrap_add, lambda dtype: _const(0, dtype), name="wrap_sum")


# ============================================================ elementwise
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


_UNARY: dict[str, Callable[[PrimExpr], PrimExpr]] = {
    "negative": _negative,
    "exp": exp_of,
    "log": te.log,
    "sqrt": te.sqrt,
    "tanh": tanh_of,
    "sigmoid": sigmoid_of,
    "nn.relu": _relu,
    "logical_not": tirx.Not,
}
_EXACT_IN_F16 = ("negative", "nn.relu", "logical_not")  # no rounding to do


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
    """[RULE DIV] Truncating division that never traps. The divisor is made
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
        return tirx.truncdiv(numerator, safe) * nonzero  # zero divisors: checked_once

    return _lets([a, b], body)


def int_power(a: Tensor, b: Tensor, out_type: Type) -> Tensor:
    """``a ** b`` for integers by repeated squaring over every bit of ``b``,
    wrapping as numpy's integer power does; a negative exponent fails
    [RULE CHECK]. One reduction over the exponent's bits, in order, whose
    accumulator is (result, square, started): as one expression the
    squarings would nest 64 lets deep, each used twice [RULE LET], and as
    one compute per bit a 64-bit power is 128 blocks (a minute to build).
    Products wrap by ``wrap_mul`` [RULE WRAP]."""
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
        combine, lambda t0, t1, t2: (_const(1, t0), _const(0, t1), _const(0, t2)), name="power"
    )
    k = te.reduce_axis((0, bits), name="bit")

    def bit_of(index: Sequence[PrimExpr]) -> PrimExpr:
        e = _load_broadcast(b, index)
        shifted = tirx.bitwise_and(e >> k.var.astype(exp_dtype), _const(1, exp_dtype))
        return _select(shifted != _const(0, exp_dtype), one, zero)

    result, _, _ = te.compute(
        shape,
        lambda *i: reducer((bit_of(i), _load_broadcast(a, i), zero), axis=k),
        name="power_bits",
        attrs={ORDERED: 1},
    )

    power = te.compute(shape, lambda *i: result(*i), name="power")
    if _kind(exp_dtype) != "i":
        return power
    return checked_once(  # a negative exponent fails [RULE CHECK]
        power,
        lambda *i: _load_broadcast(b, i) < _const(0, exp_dtype),
        "integer power with a negative exponent",
    )


def _divide(a: PrimExpr, b: PrimExpr) -> PrimExpr:
    return a / b if _kind(_dtype(a)) == "f" else int_divide(a, b)


def _as_comparable(x: PrimExpr) -> PrimExpr:
    """[RULE BOOL] Booleans compare as int8; float16 widens (exactly)."""
    dtype = _dtype(x)
    if dtype == "bool":
        return _select(x, _const(1, "int8"), _const(0, "int8"))
    return x.astype("float32") if dtype == "float16" else x


def _not_equal(a: PrimExpr, b: PrimExpr) -> PrimExpr:
    if _kind(_dtype(a)) != "f":
        return a != b
    return tirx.Or(a != b, tirx.Or(_is_nan(a), _is_nan(b)))  # [RULE NAN]


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
                return _load_broadcast(divisor, i).astype("int64") == _const(0, "int64")

            return checked_once(out, zero, "integer division by zero")
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


# ============================================================= reductions
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
    """max/min that propagate NaN [RULE NAN]; the identity is -inf/+inf."""
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
        # [RULE BOOL] booleans reduce as int8 (max is any, min is all).
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
    [RULE CHECK] (a static empty axis is ``_empty_reduction``'s)."""
    symbolic = [a for a in axes if not isinstance(in_shape[a], int)]
    if not symbolic:
        return out
    empty = in_shape[symbolic[0]] == 0
    for a in symbolic[1:]:
        empty = tirx.Or(empty, in_shape[a] == 0)
    message = f"{name} of an empty axis (axis {symbolic[0]} has length 0)"
    return te.compute(
        _shape(out), lambda *i: fail_if(empty, out(*i), message), name=f"{name}_checked"
    )


for _op in ("sum", "mean", "max", "min", "prod"):
    te_rule(_op)(_reduce_rule(_op))


def _empty_reduction(name: str, shape: Sequence[int], dtype: str, axis: int = 0) -> Tensor:
    """A reduction over an empty axis: TVM's loop over it never runs, and
    the initial value is written inside it, so the result is given directly:
    0 for a sum, 1 for a product, NaN for a mean (0 / 0). max, min and
    argmax of an empty axis fail, as in the interpreter [RULE CHECK]."""
    value = {"prod": 1, "mean": math.nan}.get(name, 0)
    if dtype == "bool":
        value = bool(value)
    message = f"{name} of an empty axis (axis {axis} has length 0)"
    fails = name in ("max", "min", "argmax")

    def body(*i: PrimExpr) -> PrimExpr:
        constant = _const(value, dtype)
        return fail_if(tirx.const(True, "bool"), constant, message) if fails else constant

    return te.compute(shape, body, name=f"{name}_empty")


def _argmax_reducer(last: bool, is_float: bool) -> Any:
    """(index, value) pairs: the larger value wins, NaN above all [RULE NAN];
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
    flat = sum((k.var * s for k, s in zip(raxes[:-1], strides[:-1], strict=True)), raxes[-1].var)
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


# ================================================================== shape
def _ravel(index: Sequence[PrimExpr], shape: Sequence[int]) -> PrimExpr:
    flat: PrimExpr = _const(0, "int32")
    for i, d in zip(index, shape, strict=True):
        flat = flat * d + i
    return flat


def _unravel(flat: PrimExpr, shape: Sequence[int]) -> list[PrimExpr]:
    index = []
    for d in reversed(shape):
        index.append(tirx.indexmod(flat, d) if d != 1 else _const(0, "int32"))
        flat = tirx.indexdiv(flat, d)
    return index[::-1]


@te_rule("reshape")
def _reshape(args: tuple[Any, ...], attrs: Attrs, out_type: Type) -> Tensor:
    (x,) = args
    shape, _ = _out(out_type)
    in_shape = _shape(x)
    if all(isinstance(d, int) for d in in_shape) or not all(isinstance(d, int) for d in shape):
        # (a result of sizes known at run time: its element count is checked
        # before the kernel runs, symbolic_shapes.py [RULE SIZECHECK])
        return te.compute(
            shape, lambda *i: x(*_unravel(_ravel(i, shape), in_shape)), name="reshape"
        )
    # A symbolic input (after boolean_mask) may hold another number of
    # elements than the static result: checked at run time, as the
    # interpreter does [RULE CHECK].
    size: PrimExpr = _const(1, "int64")
    for d in in_shape:
        size = size * tirx.Cast("int64", d) if not isinstance(d, int) else size * d
    wanted = int(np.prod(shape, dtype=np.int64))
    message = "cannot reshape {} elements into shape " + _show_newshape(attrs["newshape"])
    return te.compute(
        shape,
        lambda *i: fail_if(size != wanted, x(*_unravel(_ravel(i, shape), in_shape)), message, size),
        name="reshape",
    )


@te_rule("transpose")
def _transpose(args: tuple[Any, ...], attrs: Attrs, out_type: Type) -> Tensor:
    (x,) = args
    rank = len(x.shape)
    axes = attrs["axes"]
    perm = [a % rank for a in axes] if axes is not None else list(reversed(range(rank)))
    shape, _ = _out(out_type)

    def body(*i: PrimExpr) -> PrimExpr:
        index: list[PrimExpr] = [0] * rank
        for out_axis, in_axis in enumerate(perm):
            index[in_axis] = i[out_axis]
        return x(*index)

    return te.compute(shape, body, name="transpose")


@te_rule("expand_dims")
def _expand_dims(args: tuple[Any, ...], attrs: Attrs, out_type: Type) -> Tensor:
    """New axes of size 1 at ``axis``; the other axes keep their order."""
    (x,) = args
    shape, _ = _out(out_type)
    rank = len(x.shape)
    axis = attrs["axis"] + rank + 1 if attrs["axis"] < 0 else attrs["axis"]
    kept = [d for d in range(len(shape)) if not axis <= d < axis + attrs["num_newaxis"]]
    return te.compute(shape, lambda *i: x(*(i[d] for d in kept)), name="expand_dims")


@te_rule("squeeze")
def _squeeze(args: tuple[Any, ...], attrs: Attrs, out_type: Type) -> Tensor:
    """The listed axes (every axis of size 1 when none is) removed."""
    (x,) = args
    shape, _ = _out(out_type)
    in_shape = _shape(x)
    if attrs["axis"] is None:
        squeezed = {d for d, n in enumerate(in_shape) if n == 1}
    else:
        squeezed = {a % len(in_shape) for a in attrs["axis"]}

    def body(*i: PrimExpr) -> PrimExpr:
        outs = iter(i)
        return x(*(0 if d in squeezed else next(outs) for d in range(len(in_shape))))

    return te.compute(shape, body, name="squeeze")


def _pick(
    position: PrimExpr, starts: Sequence[int], loads: Sequence[Callable[[PrimExpr], PrimExpr]]
) -> PrimExpr:
    """``loads[k](position - starts[k])`` for the last k with ``starts[k] <=
    position``: the lazy ``if_then_else`` reads only the chosen input."""
    value = loads[-1](position - starts[-1])
    for k in range(len(loads) - 2, -1, -1):
        value = tirx.if_then_else(position < starts[k + 1], loads[k](position - starts[k]), value)
    return value


def _at(x: Tensor, index: Sequence[PrimExpr], axis: int, position: PrimExpr) -> PrimExpr:
    full = list(index)
    full[axis] = position
    return x(*full)


@te_rule("concatenate")
def _concatenate(args: tuple[Any, ...], attrs: Attrs, out_type: Type) -> Tensor:
    # (an input empty at run time has a start equal to the next one's: never picked)
    fields = [f for f in args[0] if _shape(f)[attrs["axis"] % len(f.shape)] != 0]
    shape, _ = _out(out_type)
    axis = attrs["axis"] % len(shape)
    if not fields:  # every input is empty along the axis: so is the output
        return te.compute(shape, lambda *i: args[0][0](*i), name="concatenate")
    starts: list[Any] = [0]
    for f in fields[:-1]:
        starts.append(starts[-1] + _shape(f)[axis])

    def body(*i: PrimExpr) -> PrimExpr:
        loads = [lambda p, f=f: _at(f, i, axis, p) for f in fields]
        return _pick(i[axis], starts, loads)

    return te.compute(shape, body, name="concatenate")


@te_rule("stack")
def _stack(args: tuple[Any, ...], attrs: Attrs, out_type: Type) -> Tensor:
    fields = list(args[0])
    shape, _ = _out(out_type)
    axis = attrs["axis"] % len(shape)

    def body(*i: PrimExpr) -> PrimExpr:
        rest = i[:axis] + i[axis + 1 :]
        loads = [lambda p, f=f: f(*rest) for f in fields]
        return _pick(i[axis], list(range(len(fields))), loads)

    return te.compute(shape, body, name="stack")


def _sliced(
    x: Tensor, shape: Sequence[int], starts: dict[int, tuple[int, int]], name: str
) -> Tensor:
    """``x[start + i * step]`` along each axis of ``starts`` (axis -> (start, step))."""

    def body(*i: PrimExpr) -> PrimExpr:
        index = []
        for d, v in enumerate(i):
            if d in starts:
                start, step = starts[d]
                index.append(v * step + start if step != 1 else v + start)
            else:
                index.append(v)
        return x(*index)

    return te.compute(shape, body, name=name)


@te_rule("split")
def _split(args: tuple[Any, ...], attrs: Attrs, out_type: Type) -> tuple[Tensor, ...]:
    """numpy.split: piece k is ``x[bounds[k]:bounds[k + 1]]`` along the axis,
    with Python's clipping of the bounds."""
    (x,) = args
    in_shape = _shape(x)
    axis = attrs["axis"] % len(in_shape)
    spec = attrs["indices_or_sections"]
    size = in_shape[axis]
    if isinstance(spec, int):
        step = size // spec
        bounds: list[Any] = [k * step for k in range(spec)] + [None]
    else:
        bounds = [0, *spec, None]
    assert isinstance(out_type, TupleType)
    pieces = []
    for k, field in enumerate(out_type.fields):
        if isinstance(size, int):
            start = range(size)[bounds[k] : bounds[k + 1]].start
        elif isinstance(spec, int):  # a size known at run time, checked divisible
            start = bounds[k]
        else:
            start = sliced(size, bounds[k], bounds[k + 1], 1)[0]
        pieces.append(_sliced(x, static_shape(field), {axis: (start, 1)}, "split"))
    return tuple(pieces)


@te_rule("strided_slice")
def _strided_slice(args: tuple[Any, ...], attrs: Attrs, out_type: Type) -> Tensor:
    """Python slicing per axis (the numpy rule's plan): element i of an axis
    is ``range(n)[begin:end:stride][i]``."""
    (x,) = args
    in_shape = _shape(x)
    plan = _slices(attrs, len(in_shape))
    starts = {}
    for axis, (b, e, s) in plan.items():
        if isinstance(in_shape[axis], int):
            r = range(in_shape[axis])[b:e:s]
            starts[axis] = (r.start, r.step)
        else:  # a size known only at run time
            starts[axis] = (sliced(in_shape[axis], b, e, s)[0], s)
    shape, _ = _out(out_type)
    return _sliced(x, shape, starts, "strided_slice")


def _sized(size: Any, dtype: str) -> PrimExpr:
    """A size (an int, or an expression of sizes known at run time) as ``dtype``."""
    return _const(size, dtype) if isinstance(size, int) else tirx.Cast(dtype, size)


def _take_index(index: PrimExpr, size: Any, mode: str) -> PrimExpr:
    """An index in [0, size): wrapped (Python's modulo) or clipped ("clip"
    and "fast", which the interpreter checks and a kernel cannot [RULE DIV])."""
    dtype = _dtype(index)
    signed = _kind(dtype) == "i"
    if mode == "wrap":
        n = _sized(size, dtype)
        if not isinstance(size, int):  # 0 at run time fails before (``_take``)
            n = tirx.max(n, _const(1, dtype))
        wrapped = tirx.floormod(index, n) if signed else tirx.truncmod(index, n)
        return wrapped.astype("int32")
    clipped = te.min(index, _sized(size, dtype) - _const(1, dtype))
    if signed:
        clipped = te.max(clipped, _const(0, dtype))
    return clipped.astype("int32")


@te_rule("take")
def _take(args: tuple[Any, ...], attrs: Attrs, out_type: Type) -> Tensor:
    x, indices = args
    shape, _ = _out(out_type)
    mode = attrs["mode"]
    if attrs["axis"] is None:
        flat_shape = (math.prod(_shape(x)),)
        flat = te.compute(flat_shape, lambda i: x(*_unravel(i, _shape(x))), name="take_flat")
        x, axis = flat, 0
    else:
        axis = attrs["axis"] % len(x.shape)
    size = _shape(x)[axis]
    rank = len(indices.shape)
    if size == 0:  # nothing to take from: fails unless nothing is taken [RULE CHECK]
        message = f"cannot take from axis {axis} of size 0"
        return te.compute(
            shape,
            lambda *i: fail_if(tirx.const(True, "bool"), _const(0, out_type.dtype), message),
            name="take",
        )

    def body(*i: PrimExpr) -> PrimExpr:
        before, picked, after = i[:axis], i[axis : axis + rank], i[axis + rank :]
        if mode != "fast":
            value = x(*before, _take_index(indices(*picked), size, mode), *after)
            if isinstance(size, int):
                return value
            # a size known at run time may be 0: nothing to take from
            message = f"cannot take from axis {axis} of size 0"
            return fail_if(size == 0, value, message)

        index = indices(*picked)  # (a load: a let cannot index a buffer)
        dtype = _dtype(index)
        bad = index >= _sized(size, dtype)
        if _kind(dtype) == "i":
            bad = tirx.Or(index < _const(0, dtype), bad)
        value = x(*before, _take_index(index, size, mode), *after)
        if isinstance(size, int):
            message = f"index {{}} is out of range for axis {axis} of size {size}"
            return fail_if(bad, value, message, index.astype("int64"))
        message = f"index {{}} is out of range for axis {axis} of size {{}}"
        return fail_if(bad, value, message, index.astype("int64"), _sized(size, "int64"))

    return te.compute(shape, body, name="take")


@te_rule("broadcast_to")
def _broadcast_to(args: tuple[Any, ...], attrs: Attrs, out_type: Type) -> Tensor:
    return _map("broadcast_to", out_type, args, lambda x: x)


def _fill_rule(value: int) -> Callable[..., Tensor]:
    def rule(args: tuple[Any, ...], attrs: Attrs, out_type: Type) -> Tensor:
        shape, dtype = _out(out_type)
        return te.compute(shape, lambda *i: _const(value, dtype), name="fill")

    return rule


te_rule("zeros")(_fill_rule(0))
te_rule("ones")(_fill_rule(1))


@te_rule("full")
def _full(args: tuple[Any, ...], attrs: Attrs, out_type: Type) -> Tensor:
    """The fill value cast to the dtype, as ``cast`` does."""
    (value,) = args
    shape, dtype = _out(out_type)
    return te.compute(shape, lambda *i: cast_value(value(), dtype), name="full")


# ===================================================================== nn
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
    product = te.compute(
        shape,
        lambda *i: _sum_reducer(acc)(
            wrap_mul(cast_value(x(*i[:-1], k), acc), cast_value(w(i[-1], k), acc)), axis=k
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


def _count(sizes: Sequence[Any], dtype: str) -> PrimExpr:
    """The number of elements of ``sizes`` as a ``dtype`` value (symbolic
    sizes, rules.py, give an expression: 0 / 0 is NaN at run time too)."""
    if all(isinstance(d, int) for d in sizes):
        return _const(float(np.prod(sizes)), dtype)
    return math.prod(sizes).astype(dtype)


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
        _shape(x), lambda *i: xc(*i) - _at_kept(mean, i, [axis]), name="layer_norm_centre"
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
    updated with the unbiased one."""
    x, gamma, beta, running_mean, running_var = args
    dtype = _dtype(x)
    cd = compute_dtype(dtype)
    shape = _shape(x)
    axis = attrs["axis"] % len(shape)
    channels = shape[axis]
    others = [d for d in range(len(shape)) if d != axis]
    n = math.prod([shape[d] for d in others])
    if not isinstance(n, int):
        return _batch_norm_train_symbolic(args, attrs, n)
    if n == 1:
        raise BackendError(
            "nn.batch_norm_train: expected more than 1 value per channel when training, "
            f"got input of shape {shape}"
        )

    def vector(v: Tensor, name: str) -> Tensor:
        return te.compute((channels,), lambda c: cast_value(v(c), dtype), name=name)

    if n == 0:  # an empty batch leaves the running statistics unchanged
        y = te.compute(
            shape,
            lambda *i: cast_value(
                cast_value(x(*i), cd) * _channel(gamma, cd, i, axis) + _channel(beta, cd, i, axis),
                dtype,
            ),
            name="batch_norm_train",
        )
        return y, vector(running_mean, "batch_norm_mean"), vector(running_var, "batch_norm_var")
    xc = _as_compute(x, cd, "batch_norm_widen")
    mean = _mean_kept(xc, others, lambda v: v, "batch_norm_mean")
    centred = te.compute(
        shape, lambda *i: xc(*i) - _at_kept(mean, i, others), name="batch_norm_centre"
    )
    var = _mean_kept(centred, others, lambda v: _let(v, lambda c: c * c), "batch_norm_var")
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
    unbias = _scalar(n / (n - 1), cd)

    def stat_index(c: PrimExpr) -> list[PrimExpr]:
        return [c if d == axis else 0 for d in range(len(shape))]

    new_mean = te.compute(
        (channels,),
        lambda c: cast_value(
            keep * cast_value(running_mean(c), cd) + moment * mean(*stat_index(c)), dtype
        ),
        name="batch_norm_new_mean",
    )
    new_var = te.compute(
        (channels,),
        lambda c: cast_value(
            keep * cast_value(running_var(c), cd) + moment * (var(*stat_index(c)) * unbias),
            dtype,
        ),
        name="batch_norm_new_var",
    )
    return y, new_mean, new_var


def _batch_norm_train_symbolic(args: tuple[Any, ...], attrs: Attrs, n: PrimExpr) -> tuple:
    """``nn.batch_norm_train`` where the number of values per channel, ``n``,
    is known at run time (after a mask): as above, with the numpy rule's
    cases decided at run time: n == 1 fails [RULE CHECK], n == 0 leaves
    the running statistics unchanged (y is then empty)."""
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
    wide = tirx.Cast("float64", n)
    unbias = (wide / tirx.max(wide - _const(1.0, "float64"), _const(1.0, "float64"))).astype(cd)
    message = "expected more than 1 value per channel when training, got input of shape " + (
        "(" + ", ".join(["{}"] * len(shape)) + ("," if len(shape) == 1 else "") + ")"
    )
    shown = [_sized(d, "int64") for d in shape]

    def stat_index(c: PrimExpr) -> list[PrimExpr]:
        return [c if d == axis else 0 for d in range(len(shape))]

    def updated(running: Tensor, batch: PrimExpr) -> PrimExpr:
        value = keep * cast_value(running, cd) + moment * batch
        kept = _select(n == 0, cast_value(running, cd), value)
        return cast_value(fail_if(n == 1, kept, message, *shown), dtype)

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
