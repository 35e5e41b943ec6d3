"""The ``random.*`` operators as TVM tensor expressions, bit for bit what the
interpreter's numpy rules (``effir.runtime.prng``, and so JAX) compute.

Threefry2x32 is integer arithmetic: 20 rounds of ``uint32`` add (wrapping
modulo 2**32: ``wrap_add``, te_ops [RULE TE-WRAP], since TVM marks LLVM's
unsigned additions no-unsigned-wrap, and LLVM folded a ``fold_in`` of the
constant -1 as if ``0xFFFFFFFF + k`` could not wrap), rotate (``(x << r) |
(x >> (32 - r))``) and xor, the key injected every four rounds. The counters
are JAX's partitionable layout: element ``i`` (the row-major flat index of
the output) hashes the pair ``(i >> 32, i & 0xFFFFFFFF)``, so a sample is an
elementwise loop of independent hashes, and a Key (``uint32[2]``) is the two
words of one hash (``split``: counter ``(0, i)``; ``fold_in``: ``(0, data
mod 2**32)``; ``key``: no hash, the seed's words).

Three things need care.

*Sharing.* A TIR expression is a tree: a value used twice is computed, and
compiled, twice, and each round of threefry uses both words of the last
twice, so written out whole the hash doubles per round. TVM offers two ways
to compute a value once, and each covers half: a ``tirx.Let`` is emitted
once, but TVM's analyses (the arithmetic analyzer that some passes and the
LLVM code generator bind let variables in) substitute let values, which is
as exponential as the tree for a chain as deep as 20 rounds (measured: the
``InjectPermutedLayout`` pass never finishes); a TE stage (a tensor) is
read back from memory, at the price of a buffer. So each block of four
rounds is one stage, holding both words packed in a ``uint64`` (one tensor,
one consumer: the CPU schedule computes it in the consumer's vector tile,
in registers), with the rounds inside bound by ``Let``s; the float part has
a stage for each value read many times (``x = -v * v`` by log1p's series,
the log's reduced mantissa, ``w`` by the erfinv polynomials) and ``Let``s
within. The stages before the output are flat (1-d) whatever the output's
shape, so that they tile like the output's fused loop.

*Rounding.* The float part must round exactly where prng.py rounds, and TVM
compiles for LLVM with ``AllowFPOpFusion = Fast`` fixed (no target option
turns it off; measured: ``a * b + c`` in TE comes out as one ``vfmadd``),
so a multiply that feeds an add may become one FMA, once the schedule has
inlined the two into one expression (nvcc contracts too). The rules

- write every FMA of prng.py as an explicit ``tirx.fma`` (LLVM's
  ``fmuladd``: one FMA instruction on an FMA-capable target, as the host
  CPU target of ``make_target`` is; ``fmaf``/``fma`` on CUDA, lowered by
  ``_lower_fma_cuda``: TVM 0.27 has no CUDA lowering of ``tirx.fma``);
- never let a product that prng.py rounds on its own reach an addition: the
  ``-v * v`` of erfinv (added to 1, and in log1p's series) is computed as
  ``fma(v, -v, +0.0)`` (the same value, in a node no compiler fuses into a
  later add; only the sign of a zero product can differ, and it never
  reaches the result; measured: a plain product changes about 5% of the
  scheduled float32 and float64 normals), and float16 ``uniform``'s
  ``floats * (high - low) + low`` is a float32 product (exact: 10 and 11
  significant bits) cast to float16, then a float32 sum cast to float16,
  which is how numpy computes float16 arithmetic, and leaves nothing to
  contract;
- fold every constant expression (``high - low``, ``1 / keep``, float32 of
  ``p``, ``nextafter(-1, 0)``, each polynomial coefficient) in numpy, in the
  dtype prng.py uses, and embed the result;
- take ``max(low, .)`` as numpy's ``maximum`` does it: NaN propagates (an
  infinite ``high - low`` times 0), and on a tie of +0 and -0 float16 keeps
  ``low`` while float32/float64 keep the other.

Chains of products stay as written: LLVM does not reassociate without the
``reassoc`` flag, which TVM sets only for ``fast-math``.

*CUDA.* TVM compiles CUDA with ``--use_fast_math`` (approximate division
and square root, subnormals flushed), which changes float normals and
one-element dropouts. Bit-exact random values on a GPU need the kernels
compiled with ``--ftz=false --prec-div=true --prec-sqrt=true`` (the rules
themselves call no approximate intrinsic; the tests check the PTX).

The samplers, element by element, as prng.py:

- ``uniform``: the top mantissa bits of the random bits (``x0 ^ x1``, its
  low 16 bits for float16; ``(x0 << 32) | x1``, the packed state, for
  float64) under the exponent of 1.0 (``tirx.reinterpret``), minus 1, then
  ``max(low, fma(floats, high - low, low))``;
- ``normal``: ``sqrt(2) * erfinv(uniform(nextafter(-1, 0), 1))``, erfinv as
  XLA's ``chlo.erf_inv``: ``w = -log1p(-v * v)`` with XLA's log1p (Cephes'
  rational series below ``sqrt(2) - 1``, beyond it XLA's CPU float32 log,
  Cephes' ``logf``, or for float64 ``log``), Giles' single-precision
  polynomials in float32 (also for float16), the double-precision ones for
  float64;
- ``bernoulli``: ``uniform(float32) < float32(p)``;
- ``dropout``: flax's ``where(bernoulli(key, keep), x * (1 / keep), 0)``
  (``x / keep`` when ``x`` has one element), ``x`` for rate 0, zeros for 1.

Limits. float64 ``normal`` calls TVM's ``log``, which is libm's (the one
XLA calls), where prng.py calls numpy's SIMD float64 log; they differ on
about 1 in 1,500 arguments, so about 30 in a million float64 normals differ
from the numpy rule, by at most 3 ulp (prng.py documents a few ulp against
JAX there; the recorded JAX float64 vectors match both exactly). The
float32 log is prng.py's for the positive, finite arguments ``normal``
gives it (``1 - v**2`` lies in ``[2**-23, 1]``), without prng.py's branch
for zero, negative and non-finite ones, which ``normal`` never reaches.
Bit-exact FMAs need a target with FMA instructions (without them, LLVM
splits ``fmuladd`` into a rounded multiply and add).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import numpy as np
import tvm
from tvm import te

from ....ir.node import Attrs
from ....ir.types import TensorType, Type
from ....runtime import prng
from ..runtime.errors import BackendError
from .rules import dim_value, te_rule
from .te_ops.common import let_expr
from .te_ops.wrapping import wrap_add

PrimExpr = Any  # a tvm.tirx expression
Index = tuple[PrimExpr, ...]
Dim = Any  # an int, or an int64 expression of symbolic sizes

_U32, _U64 = "uint32", "uint64"
_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))  # as prng.threefry2x32
_PARITY = 0x1BD11BDA
_FLOATS = ("float16", "float32", "float64")


# ------------------------------------------------------------------ helpers
def _dtype(expr: PrimExpr) -> str:
    """An expression's dtype (TVM 0.27 expressions carry a ``PrimType``)."""
    return str(expr.ty)


def _const(value: Any, dtype: str) -> PrimExpr:
    """``value`` (already rounded to ``dtype`` by numpy) as a TIR constant."""
    if dtype.startswith("float"):
        return tvm.tirx.const(float(value), dtype)
    return tvm.tirx.const(int(value), dtype)


def _u32(value: int) -> PrimExpr:
    return tvm.tirx.const(value, _U32)


def _u64(value: int) -> PrimExpr:
    return tvm.tirx.const(value, _U64)


def _cast(dtype: str, value: PrimExpr) -> PrimExpr:
    return value if _dtype(value) == dtype else value.astype(dtype)


def _fma(a: PrimExpr, b: PrimExpr, c: PrimExpr) -> PrimExpr:
    """``a * b + c`` rounded once (prng._fma)."""
    return tvm.tirx.op.fma(a, b, c)


_CUDA_FMA = {"float16": "__hfma", "float32": "fmaf", "float64": "fma"}


def _lower_fma_cuda(call: PrimExpr) -> PrimExpr:
    """``tirx.fma`` for CUDA, where TVM 0.27 has no lowering (its C code
    generator rejects the call): a scalar one is CUDA's fused multiply-add.

    Registering it also makes TVM's ``LowerIntrin`` offer every float
    ``a * b + c`` of a CUDA kernel here, as it does for LLVM (where the
    lowering is ``llvm.fmuladd``): that contracts at the TIR level what nvcc
    contracts anyway under TVM's ``--use_fast_math``. Vector ones (after a
    vectorized schedule) are left a multiply and an add, through a ``Let``
    so that they are not offered again; nvcc may still contract them."""
    dtype = tvm.DataType(_dtype(call))
    a, b, c = call.args
    if dtype.lanes == 1 and _dtype(call) in _CUDA_FMA:
        return tvm.tirx.call_pure_extern(_dtype(call), _CUDA_FMA[_dtype(call)], a, b, c)
    product = tvm.tirx.Var("product", _dtype(call))
    return tvm.tirx.Let(product, a * b, product + c)


if tvm.ir.Op.get("tirx.fma").get_attr("cuda.FLowerIntrinsic") is None:
    tvm.tirx.register_intrin_lowering("tirx.fma", target="cuda", f=_lower_fma_cuda, level=10)


def _select(condition: PrimExpr, a: PrimExpr, b: PrimExpr) -> PrimExpr:
    return tvm.tirx.Select(condition, a, b)


class _Lets:
    """Let bindings around one element's expression. A TIR expression is a
    tree: a value written into it twice is computed (and compiled) twice,
    and the rounds of threefry reuse both words, so written out the tree
    doubles per round. A let-bound value is emitted once however often it
    is used."""

    def __init__(self) -> None:
        self._bindings: list[tuple[Any, PrimExpr]] = []

    def bind(self, value: PrimExpr, name: str = "t") -> PrimExpr:
        if isinstance(value, tvm.tirx.Var | tvm.tirx.IntImm | tvm.tirx.FloatImm):
            return value
        var = tvm.tirx.Var(name, _dtype(value))
        self._bindings.append((var, value))
        return var

    def wrap(self, body: PrimExpr) -> PrimExpr:
        for var, value in reversed(self._bindings):
            body = let_expr(var, value, body)
        return body


def _stage(shape: Sequence[Dim], element: Callable[[Index], PrimExpr], name: str) -> te.Tensor:
    """One TE stage: ``element(index)`` at every index of ``shape``."""
    return te.compute(tuple(shape), lambda *index: element(index), name=name)


def _size(shape: Sequence[Dim]) -> Dim:
    """The number of elements: an int, or (a symbolic shape,
    [RULE LOWER-SHAPEPOLY] in relax/symbolic.py) an ``int64`` expression of the sizes."""
    if all(isinstance(d, int) for d in shape):
        return int(np.prod(shape, dtype=np.int64))
    size: PrimExpr = tvm.tirx.const(1, "int64")
    for d in shape:
        size = size * _cast("int64", d) if not isinstance(d, int) else size * d
    return size


def _index_dtype(size: Dim) -> str:
    if not isinstance(size, int):
        return "int64"  # a symbolic size may be large
    return "int64" if size > 2**31 - 1 else "int32"


def _dim(d: Dim, dtype: str) -> PrimExpr:
    return tvm.tirx.const(d, dtype) if isinstance(d, int) else _cast(dtype, d)


def _reshaped(shape: Sequence[Dim], element: Callable[[Index], PrimExpr], name: str) -> te.Tensor:
    """The output stage of shape ``shape``: ``element`` of the row-major
    flat index. The stages before it are flat (1-d), so that a schedule can
    compute them in the output's vector tiles whatever its shape."""
    dtype = _index_dtype(_size(shape))

    def at(index: Index) -> PrimExpr:
        flat = tvm.tirx.const(0, dtype)
        for i, dim in zip(index, shape, strict=True):
            flat = flat * _dim(dim, dtype) + _cast(dtype, i)
        return element((flat,))

    return _stage(shape, at, name)


def _result_shape(out_type: Type, name: str) -> tuple[Dim, ...]:
    """The result's shape: ints, or the variables of its symbolic sizes
    (kernel/rules.py ``dim_value``), for which the counters below are the same
    expressions of the flat index."""
    dims = tuple(dim_value(d) for d in out_type.shape) if isinstance(out_type, TensorType) else ()
    if not isinstance(out_type, TensorType) or any(d is None for d in dims):
        raise BackendError(f"{name}: a kernel needs a known result shape, got {out_type}")
    return dims


def _float_dtype(dtype: str, name: str) -> str:
    if dtype not in _FLOATS:
        raise BackendError(f"{name} draws float16, float32 or float64 values, not {dtype}")
    return dtype


def _check_key(key: te.Tensor, name: str) -> None:
    if tuple(int(d) for d in key.shape) != (2,) or key.dtype != _U32:
        raise BackendError(f"{name}: a key is a uint32 tensor of shape (2,), got {key}")


def _integer_scalar(value: te.Tensor, what: str) -> str:
    dtype = str(value.dtype)
    if tuple(value.shape) != () or not dtype.startswith(("int", "uint")):
        raise BackendError(f"{what} is an integer scalar, got {value}")
    return dtype


# --------------------------------------------------------------- threefry
def _rotl(x: PrimExpr, r: int) -> PrimExpr:
    return (x << _u32(r)) | (x >> _u32(32 - r))


def _pack(a: PrimExpr, b: PrimExpr) -> PrimExpr:
    return (_cast(_U64, a) << _u64(32)) | _cast(_U64, b)


def _words(state: te.Tensor, index: Index) -> tuple[PrimExpr, PrimExpr]:
    """The two uint32 words of a hash state element (``_pack``'s inverse)."""
    packed = state(*index)
    return _cast(_U32, packed >> _u64(32)), _cast(_U32, packed)


def _key_schedule(key: te.Tensor, j: int) -> PrimExpr:
    """Threefry's three key words: ``k0``, ``k1``, ``k0 ^ k1 ^ parity``."""
    if j < 2:
        return key(j)
    return key(0) ^ key(1) ^ _u32(_PARITY)


Counters = Callable[[Index], tuple[PrimExpr, PrimExpr]]


def _threefry(key: te.Tensor, shape: Sequence[Dim], counters: Counters, name: str) -> te.Tensor:
    """threefry2x32 of ``counters(index)`` under ``key`` at every index of
    ``shape``, as a uint64 tensor holding ``(x0 << 32) | x1``.

    One stage per block of four rounds and the key injection that ends it,
    in prng.threefry2x32's order (uint32 addition wraps, so the order of an
    injection's two additions does not matter). Written out as a tree, a
    block reads its input words about 500 times (each round uses both words
    twice); a stage per block keeps that tree in the thousands of nodes,
    and LLVM's CSE folds it back to the ~20 operations it is."""
    state: te.Tensor | None = None
    for block in range(5):

        def rounds(index: Index, state: te.Tensor | None = state, block: int = block) -> PrimExpr:
            if state is None:
                high, low = counters(index)
                v0 = wrap_add(high, _key_schedule(key, 0))
                v1 = wrap_add(low, _key_schedule(key, 1))
            else:
                v0, v1 = _words(state, index)
            lets = _Lets()
            v0, v1 = lets.bind(v0, "v0"), lets.bind(v1, "v1")
            for r in _ROTATIONS[block % 2]:
                v0 = lets.bind(wrap_add(v0, v1), "v0")
                v1 = lets.bind(_rotl(v1, r) ^ v0, "v1")
            v0 = wrap_add(v0, _key_schedule(key, (block + 1) % 3))
            v1 = wrap_add(wrap_add(v1, _key_schedule(key, (block + 2) % 3)), _u32(block + 1))
            return lets.wrap(_pack(v0, v1))

        state = _stage(shape, rounds, f"{name}_hash{block}")
    assert state is not None
    return state


def _flat_counters(size: Dim) -> Counters:
    """JAX's ``iota_2x32_shape``: the flat index as (high, low) uint32 words
    (a symbolic size: an ``int64`` index, whose high word is computed)."""
    wide = not isinstance(size, int) or size > 2**32

    def counters(index: Index) -> tuple[PrimExpr, PrimExpr]:
        (flat,) = index
        high = _cast(_U32, flat >> tvm.tirx.const(32, _dtype(flat))) if wide else _u32(0)
        return high, _cast(_U32, flat)

    return counters


def _key_output(words: Callable[[], tuple[PrimExpr, PrimExpr]], name: str) -> te.Tensor:
    """A Key, ``uint32[2]``."""
    return te.compute((2,), lambda j: _select(j == 0, *words()), name=name)


# ---------------------------------------------------------------- samplers
def _unit_floats(state: te.Tensor, index: Index, dtype: str) -> PrimExpr:
    """``uniform``'s floats in [0, 1): random bits under the exponent of 1.0,
    minus 1 (exact). The float16 ones are computed as the same float32
    values (see ``_uniform_value``)."""
    if dtype == "float64":  # 64 random bits: (x0 << 32) | x1, the packed state itself
        one = int(np.array(1.0).view(np.uint64))
        bits = (state(*index) >> _u64(64 - 52)) | _u64(one)
        return tvm.tirx.reinterpret("float64", bits) - _const(1.0, "float64")
    v0, v1 = _words(state, index)
    bits = v0 ^ v1
    if dtype == "float16":  # the top 10 of the low 16 bits, at the top of a float32 mantissa
        bits = ((bits & _u32(0xFFFF)) >> _u32(16 - 10)) << _u32(23 - 10)
    else:
        bits = bits >> _u32(32 - 23)
    one = int(np.array(1.0, np.float32).view(np.uint32))
    return tvm.tirx.reinterpret("float32", bits | _u32(one)) - _const(1.0, "float32")


def _uniform_value(state: te.Tensor, index: Index, dtype: str, low: float, high: float) -> PrimExpr:
    """prng.uniform at ``index``: ``max(low, floats * (high - low) + low)``
    with prng.py's roundings."""
    dt = np.dtype(dtype)
    with np.errstate(over="ignore", invalid="ignore"):  # inf beyond the dtype's range, as prng.py
        lo, hi = np.array(low, dt), np.array(high, dt)
        span = hi - lo  # rounded to dtype
    lo_c = _const(lo, dtype)
    if np.isnan(lo):
        return lo_c
    lets = _Lets()
    floats = _unit_floats(state, index, dtype)
    if dtype == "float16":
        # numpy's float16 multiply and add, each rounded to float16: the
        # float32 product is exact, the float32 sum rounds innocuously
        product = _cast("float16", floats * _const(span, "float32"))
        scaled = lets.bind(_cast("float16", _cast("float32", product) + _const(lo, "float32")))
        # np.maximum(lo, scaled): float16 keeps lo on a tie (+0 and -0)
        return lets.wrap(_select(scaled <= lo_c, lo_c, scaled))
    scaled = lets.bind(_fma(floats, _const(span, dtype), lo_c), "scaled")
    # np.maximum(lo, scaled): float32/64 keep scaled on a tie; NaN propagates
    return lets.wrap(_select(scaled < lo_c, lo_c, scaled))


def _uniform(
    key: te.Tensor, shape: Sequence[Dim], dtype: str, low: float, high: float, name: str
) -> te.Tensor:
    size = _size(shape)
    state = _threefry(key, (size,), _flat_counters(size), name)
    return _reshaped(shape, lambda i: _uniform_value(state, i, dtype, low, high), name)


def _bernoulli_value(state: te.Tensor, index: Index, p: float) -> PrimExpr:
    """prng.bernoulli: ``uniform(float32) < float32(p)``."""
    return _uniform_value(state, index, "float32", 0.0, 1.0) < _const(np.float32(p), "float32")


# ------------------------------------------------ erfinv as XLA computes it
def _horner(coefficients: Sequence[float], w: PrimExpr) -> PrimExpr:
    """The polynomial (highest degree first) at ``w``, one FMA per step, the
    coefficients rounded to ``w``'s dtype (prng._horner)."""
    dtype = _dtype(w)
    t = np.dtype(dtype).type
    p = _const(t(coefficients[0]), dtype)
    for c in coefficients[1:]:
        p = _fma(p, w, _const(t(c), dtype))
    return p


def _log_f32(x: te.Tensor, shape: Sequence[Dim], name: str) -> Callable[[Index], PrimExpr]:
    """prng._log_f32 of ``x + 1`` (float32), for the positive, finite values
    ``normal`` gives it: Cephes' logf as Eigen evaluates it. The reduced
    mantissa ``m`` (read 14 times) is a stage; the rest an expression for
    the caller's stage."""
    f32 = "float32"
    coefficient = [_const(np.float32(c), f32) for c in prng._LOGF]
    tiny = _const(np.finfo(np.float32).tiny, f32)
    zero, one = _const(0.0, f32), _const(1.0, f32)
    half = int(np.array(0.5, np.float32).view(np.uint32))
    sqrt_half = _const(np.float32(0.707106781186547524), f32)

    def bits(index: Index) -> PrimExpr:
        plus_one = x(*index) + one
        return tvm.tirx.reinterpret(_U32, _select(plus_one < tiny, tiny, plus_one))

    def mantissa(index: Index) -> PrimExpr:
        masked = (bits(index) & _u32(0x807FFFFF)) | _u32(half)
        return tvm.tirx.reinterpret(f32, masked)

    def m_of(index: Index) -> PrimExpr:
        lets = _Lets()
        f = lets.bind(mantissa(index), "mantissa")
        return lets.wrap((f - one) + _select(f < sqrt_half, f, zero))

    def e_of(index: Index) -> PrimExpr:
        exponent = _cast(
            f32, _cast("int32", bits(index) >> _u32(23)) - tvm.tirx.const(126, "int32")
        )
        return exponent - _select(mantissa(index) < sqrt_half, one, zero)

    m_t = _stage(shape, m_of, f"{name}_m")

    def log_of(index: Index) -> PrimExpr:
        lets = _Lets()
        m, e = lets.bind(m_t(*index), "m"), lets.bind(e_of(index), "e")
        m2 = lets.bind(m * m, "m2")
        m3 = lets.bind(m2 * m, "m3")
        y = _fma(_fma(m, coefficient[0], coefficient[1]), m, coefficient[2])
        y1 = _fma(_fma(m, coefficient[3], coefficient[4]), m, coefficient[5])
        y2 = _fma(_fma(m, coefficient[6], coefficient[7]), m, coefficient[8])
        y = _fma(_fma(y, m3, y1), m3, y2)
        y = _fma(y, m3, _const(np.float32(-2.12194440e-4), f32) * e)
        inner = _fma(_const(-0.5, f32), m2, m) + y
        return lets.wrap(_fma(e, _const(np.float32(0.693359375), f32), inner))

    return log_of


def _erfinv(v: te.Tensor, shape: Sequence[Dim], name: str) -> Callable[[Index], PrimExpr]:
    """prng.erfinv of the float32 or float64 ``v``: ``w = -log1p(-v * v)``,
    then Giles' polynomials in ``w``, times ``v``. Stages for the values
    read many times (``x = -v * v``, ``w``); the polynomials and the
    product as an expression, for the caller's stage."""
    dtype = str(v.dtype)
    t = np.dtype(dtype).type

    def c(value: float) -> PrimExpr:
        return _const(t(value), dtype)

    # -v * v as fma(v, -v, +0): the product, in a node no compiler fuses
    # into the additions of log1p (the sign of a zero can differ; unused)
    x = _stage(shape, lambda i: _fma(v(*i), -v(*i), c(0.0)), f"{name}_x")
    if dtype == "float32":
        log_large = _log_f32(x, shape, name)
    else:

        def log_large(index: Index) -> PrimExpr:
            return tvm.tirx.log(x(*index) + c(1.0))

    def w_of(index: Index) -> PrimExpr:
        """prng._log1p, negated."""
        lets = _Lets()
        xi = lets.bind(x(*index), "x")
        x2 = lets.bind(xi * xi, "x2")
        ratio = _horner(prng._LOG1P_NUMERATOR, xi) / _horner(prng._LOG1P_DENOMINATOR, xi)
        small = xi + _fma(c(-0.5), x2, (xi * x2) * ratio)
        log1p = _select(tvm.tirx.abs(xi) < c(0.41421356237309504880), small, log_large(index))
        return lets.wrap(-log1p)

    w = _stage(shape, w_of, f"{name}_w")

    def p_of(index: Index, lets: _Lets) -> PrimExpr:
        wi = lets.bind(w(*index), "w")
        root = lets.bind(tvm.tirx.sqrt(wi), "root")
        if dtype == "float32":
            central = _horner(prng._ERFINV32_CENTRAL, lets.bind(wi - c(2.5), "w_central"))
            tail = _horner(prng._ERFINV32_TAIL, lets.bind(root - c(3.0), "w_tail"))
            return _select(wi < c(5.0), central, tail)
        central = _horner(prng._ERFINV64_CENTRAL, lets.bind(wi - c(3.125), "w_central"))
        middle = _horner(prng._ERFINV64_MIDDLE, lets.bind(root - c(3.25), "w_middle"))
        tail = _horner(prng._ERFINV64_TAIL, lets.bind(root - c(5.0), "w_tail"))
        return _select(wi < c(6.25), central, _select(wi < c(16.0), middle, tail))

    def result(index: Index) -> PrimExpr:
        lets = _Lets()
        vi = lets.bind(v(*index), "v")
        p = p_of(index, lets)
        return lets.wrap(_select(tvm.tirx.abs(vi) == c(1.0), vi * c(np.inf), p * vi))

    return result


def _normal(key: te.Tensor, shape: Sequence[Dim], dtype: str, name: str) -> te.Tensor:
    """prng.normal: ``sqrt(2) * erfinv(uniform(nextafter(-1, 0), 1))``;
    float16 goes through float32's erfinv, as XLA's."""
    dt = np.dtype(dtype)
    lo = np.nextafter(np.array(-1.0, dt), np.array(0.0, dt))
    flat = (_size(shape),)
    state = _threefry(key, flat, _flat_counters(flat[0]), name)
    work = "float64" if dtype == "float64" else "float32"
    u = _stage(
        flat, lambda i: _cast(work, _uniform_value(state, i, dtype, float(lo), 1.0)), f"{name}_u"
    )
    erfinv = _erfinv(u, flat, name)
    sqrt2 = _const(np.array(np.sqrt(2), dt), dtype)
    return _reshaped(shape, lambda i: sqrt2 * _cast(dtype, erfinv(i)), name)


# ------------------------------------------------------------------- rules
@te_rule("random.key")
def key_te(args: tuple[Any, ...], attrs: Attrs, out_type: Type) -> te.Tensor:
    """JAX's ``threefry_seed``: ``(seed >> 32, low 32 bits)`` for a 64-bit
    seed, ``(0, seed)`` (sign-extended to 32 bits) for a narrower one."""
    (seed,) = args
    dtype = _integer_scalar(seed, "the seed of random.key")

    def words() -> tuple[PrimExpr, PrimExpr]:
        value = seed()
        high = _cast(_U32, value >> tvm.tirx.const(32, dtype)) if dtype.endswith("64") else _u32(0)
        return high, _cast(_U32, value)  # an integer cast sign-extends signed seeds

    return _key_output(words, "random_key")


@te_rule("random.split")
def split_te(args: tuple[Any, ...], attrs: Attrs, out_type: Type) -> tuple[te.Tensor, ...]:
    """``num`` keys: key ``i`` is the hash of the counter pair ``(0, i)``."""
    (key,) = args
    _check_key(key, "random.split")
    num = int(attrs["num"])
    if num == 0:
        return ()
    state = _threefry(key, (num,), lambda index: (_u32(0), _cast(_U32, index[0])), "random_split")
    return tuple(_key_output(partial(_words, state, (i,)), f"random_split_{i}") for i in range(num))


@te_rule("random.fold_in")
def fold_in_te(args: tuple[Any, ...], attrs: Attrs, out_type: Type) -> te.Tensor:
    """The hash of the counter pair ``(0, data mod 2**32)``."""
    key, data = args
    _check_key(key, "random.fold_in")
    _integer_scalar(data, "the data of random.fold_in")
    state = _threefry(key, (1,), lambda index: (_u32(0), _cast(_U32, data())), "random_fold_in")
    return _key_output(lambda: _words(state, (0,)), "random_fold_in")


@te_rule("random.uniform")
def uniform_te(args: tuple[Any, ...], attrs: Attrs, out_type: Type) -> te.Tensor:
    (key,) = args
    _check_key(key, "random.uniform")
    shape = _result_shape(out_type, "random.uniform")
    dtype = _float_dtype(attrs["dtype"], "random.uniform")
    low, high = float(attrs["low"]), float(attrs["high"])
    return _uniform(key, shape, dtype, low, high, "random_uniform")


@te_rule("random.normal")
def normal_te(args: tuple[Any, ...], attrs: Attrs, out_type: Type) -> te.Tensor:
    (key,) = args
    _check_key(key, "random.normal")
    shape = _result_shape(out_type, "random.normal")
    return _normal(key, shape, _float_dtype(attrs["dtype"], "random.normal"), "random_normal")


@te_rule("random.bernoulli")
def bernoulli_te(args: tuple[Any, ...], attrs: Attrs, out_type: Type) -> te.Tensor:
    (key,) = args
    _check_key(key, "random.bernoulli")
    shape = _result_shape(out_type, "random.bernoulli")
    p = float(attrs["p"])
    size = _size(shape)
    state = _threefry(key, (size,), _flat_counters(size), "random_bernoulli")
    return _reshaped(shape, lambda i: _bernoulli_value(state, i, p), "random_bernoulli")


@te_rule("random.dropout")
def dropout_te(args: tuple[Any, ...], attrs: Attrs, out_type: Type) -> te.Tensor:
    """prng.dropout: flax's ``Dropout`` as XLA compiles it on CPU."""
    x, key = args
    _check_key(key, "random.dropout")
    dtype = _float_dtype(str(x.dtype), "random.dropout")
    shape = tuple(int(d) if isinstance(d, tvm.tirx.IntImm) else d for d in x.shape)
    rate = float(attrs["rate"])
    if not 0.0 <= rate <= 1.0:
        raise BackendError(f"random.dropout: rate must be in [0, 1], got {rate}")
    if rate == 0.0:  # flax returns x: no draw
        return _stage(shape, lambda i: x(*i), "random_dropout")
    zero = _const(0.0, dtype)
    if rate == 1.0:  # zeros: no draw
        return _stage(shape, lambda i: zero, "random_dropout")
    keep = 1.0 - rate  # in double precision, as flax
    t = np.dtype(dtype).type
    divisor = t(keep)
    size = _size(shape)
    state = _threefry(key, (size,), _flat_counters(size), "random_dropout")
    strides = [_size(shape[k + 1 :]) for k in range(len(shape))]
    index_dtype = _index_dtype(size)

    def element(index: Index) -> PrimExpr:
        flat = tvm.tirx.const(0, index_dtype)
        for i, stride in zip(index, strides, strict=True):
            flat = flat + _cast(index_dtype, i) * _dim(stride, index_dtype)
        divided = x(*index) / _const(divisor, dtype)
        multiplied = x(*index) * _const(t(1.0) / divisor, dtype)
        if isinstance(size, int):
            kept = divided if size == 1 else multiplied
        else:  # a symbolic size: which of flax's two, decided at run time
            kept = _select(size == 1, divided, multiplied)
        return _select(_bernoulli_value(state, (flat,), keep), kept, zero)

    return _stage(shape, element, "random_dropout")
