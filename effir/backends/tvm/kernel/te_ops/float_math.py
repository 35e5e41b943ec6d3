"""Vectorisable ``exp`` and ``tanh`` for float32 [RULE TE-MATH], and NaN-
propagating ``max``/``min`` [RULE TE-NAN]. The rules' reasons are the
package's docstring."""

from __future__ import annotations

from typing import Any

from tvm import te, tirx

from .common import _const, _dtype, _is_nan, _kind, _let, _lets, _select

PrimExpr = Any  # tvm.tirx.PrimExpr


# [RULE TE-MATH] Cephes' expf: n = round(x / ln 2), r = x - n ln 2 in two parts
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
_TANH_DEN = (
    1.19825839466702e-06,
    1.18534705686654e-04,
    2.26843463243900e-03,
    4.89352518554385e-03,
)


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
    """``exp`` in x's (float32 or float64) dtype [RULE TE-MATH]."""
    return exp_f32(x) if _dtype(x) == "float32" else te.exp(x)


def tanh_of(x: PrimExpr) -> PrimExpr:
    return tanh_f32(x) if _dtype(x) == "float32" else tanh_f64(x)


def sigmoid_of(x: PrimExpr) -> PrimExpr:
    """``1 / (1 + exp(-x))``, the numpy rule's formula: exact limits, no NaN."""
    one = _const(1.0, _dtype(x))
    return one / (one + exp_of(-x))


def nan_max(a: PrimExpr, b: PrimExpr) -> PrimExpr:
    """numpy's ``maximum`` [RULE TE-NAN]: NaN if either is NaN."""
    if _kind(_dtype(a)) != "f":
        return te.max(a, b)
    return _lets([a, b], lambda a, b: _select(tirx.Or(_is_nan(a), a > b), a, b))


def nan_min(a: PrimExpr, b: PrimExpr) -> PrimExpr:
    if _kind(_dtype(a)) != "f":
        return te.min(a, b)
    return _lets([a, b], lambda a, b: _select(tirx.Or(_is_nan(a), a < b), a, b))
