"""Integer ``+ - *`` that wrap modulo 2^bits as numpy's do [RULE TE-WRAP]. The
rules' reasons are the package's docstring."""

from __future__ import annotations

from typing import Any

import numpy as np
from tvm import te, tirx

from .common import _const, _dtype, _kind, _let, _lets

PrimExpr = Any  # tvm.tirx.PrimExpr


def low_bits(x: PrimExpr, width: int) -> PrimExpr:
    """``x mod 2^width`` (``x & (2^width - 1)``) of a 64-bit integer, with no
    unsigned mask of 32 bits or more [RULE TE-MASK]: ``x - ((x >> width) <<
    width)``, which LLVM folds back into the ``and``. (A signed mask stays:
    TVM folds an int64 mask of a constant, and its shifts of a negative
    value broke int64's wrapping.)"""
    dtype = _dtype(x)
    if width < 32 or _kind(dtype) != "u":
        return tirx.bitwise_and(x, _const((1 << width) - 1, dtype))
    shift = _const(width, dtype)
    return x - ((x >> shift) << shift)


def _bits_of(x: PrimExpr, shift: int, width: int) -> PrimExpr:
    """Bits ``shift .. shift + width`` of a 64-bit integer, as a
    non-negative value of its own dtype."""
    dtype = _dtype(x)
    shifted = x >> _const(shift, dtype) if shift else x
    return low_bits(shifted, width)


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
            low,
            lambda lo: _joined(lo, (a >> thirty_two) + (b >> thirty_two) + (lo >> thirty_two)),
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
    low = low_bits(exact, 32)
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
    """``a + b``, wrapping for integers [RULE TE-WRAP]."""
    return _wrapping("+", a, b)


def wrap_sub(a: PrimExpr, b: PrimExpr) -> PrimExpr:
    return _wrapping("-", a, b)


def wrap_mul(a: PrimExpr, b: PrimExpr) -> PrimExpr:
    return _wrapping("*", a, b)


def _sum_reducer(dtype: str) -> Any:
    """``te.sum``, wrapping for integers of 32 bits and more [RULE TE-WRAP]."""
    if _kind(dtype) in "bf" or np.dtype(dtype).itemsize < 4:
        return te.sum
    return te.comm_reducer(wrap_add, lambda dtype: _const(0, dtype), name="wrap_sum")
