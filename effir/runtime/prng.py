"""JAX's default PRNG, threefry2x32, in numpy: bit-exact with JAX 0.10 in its
default configuration, so that an effir program and its JAX twin draw the same
random numbers from the same seed.

Threefry2x32 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3",
SC 2011) is a counter-based generator: a keyed hash of two uint32 words (20
rounds of add / rotate / xor, with the key injected every four rounds). There
is no hidden state; every random number is ``hash(key, counter)``, so a key
is just the two uint32 words of the hash key and all the work is in choosing
counters.

Counter layout (``jax_threefry_partitionable=True``, the default since JAX
0.5 and the mode this module implements): an output of shape ``S`` hashes,
for each flat (row-major) index ``i`` of ``S``, the counter pair
``(i >> 32, i & 0xFFFFFFFF)`` (``iota_2x32_shape``). The hash gives two words
``(b1, b2)`` per element:

- ``split(key, n)``: new key ``i`` is ``(b1[i], b2[i])`` over the counters of
  shape ``(n,)``;
- ``random_bits(key, 32, S)``: ``b1 ^ b2``; 8 and 16 bits truncate that;
  64 bits is ``(b1 << 32) | b2``;
- ``fold_in(key, d)``: one hash of the counter pair ``(0, uint32(d))``, whose
  two output words are the new key;
- ``key(seed)``: no hashing; ``(seed >> 32, seed & 0xFFFFFFFF)`` for a
  64-bit seed, ``(0, seed mod 2**32)`` otherwise.

The samplers follow ``jax.random``: ``uniform`` puts the top mantissa bits
of ``random_bits`` under the exponent of 1.0, subtracts 1 and scales;
``normal`` is ``sqrt(2) * erfinv(uniform(nextafter(-1, 0), 1))``;
``bernoulli`` is ``uniform(float32) < p``; ``dropout`` is
``flax.linen.Dropout``. The integer part is exact on every platform. The
float part reproduces what XLA compiles on CPU (x86-64 with FMA, where the
reference vectors were made): one rounding for ``a * b + c`` (XLA contracts
it to an FMA), XLA's own log/log1p and Giles' erfinv polynomials, and
division by a scalar done as multiplication by its reciprocal. With that,
uniform, bernoulli, dropout and float16/float32 normal are bit-identical to
JAX; float64 normal is within a few ulp (numpy's float64 log is not the libm
log XLA calls). JAX returns float64 only with ``jax_enable_x64``; the float64
results match JAX run that way.

Reference (JAX 0.10.2 sources): ``jax/_src/random/threefry2x32.py``
(``threefry_seed``, ``_threefry2x32_lowering``, ``_threefry_split_foldlike``,
``threefry_fold_in``, ``_threefry_random_bits_partitionable``),
``jax/_src/random/prng.py`` (``random_seed``, ``iota_2x32_shape``),
``jax/_src/random/core.py`` (``_uniform``, ``_normal_real``, ``_bernoulli``),
the HLO XLA compiles for ``lax.erf_inv`` (``chlo.erf_inv``), XLA's
``log1p`` intrinsic (``xla/codegen``) and CPU float32 log (Cephes' logf),
and ``flax/linen/stochastic.py`` (``Dropout``, flax 0.12).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = [
    "bernoulli",
    "dropout",
    "erfinv",
    "fold_in",
    "key",
    "normal",
    "random_bits",
    "split",
    "threefry2x32",
    "uniform",
]

_U32 = np.uint32
_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))
_PARITY = _U32(0x1BD11BDA)
_FLOATS = ("float16", "float32", "float64")


def _key_words(key: Any) -> tuple[np.uint32, np.uint32]:
    data = np.asarray(getattr(key, "data", key))
    if data.shape != (2,) or data.dtype != np.uint32:
        raise ValueError(f"a threefry key is a uint32 array of shape (2,), got {data!r}")
    return data[0], data[1]


def _rotl(x: np.ndarray, r: int) -> np.ndarray:
    return (x << _U32(r)) | (x >> _U32(32 - r))


def threefry2x32(key: Any, x0: Any, x1: Any) -> tuple[np.ndarray, np.ndarray]:
    """The 20-round threefry2x32 hash of the counter words ``(x0, x1)``
    (broadcast together) under ``key``, as ``threefry2x32_p`` computes it.

    Works on 1-d copies so that uint32 wrap-around never meets numpy's scalar
    overflow warnings."""
    k0, k1 = _key_words(key)
    a, b = np.broadcast_arrays(np.asarray(x0, dtype=_U32), np.asarray(x1, dtype=_U32))
    shape = a.shape
    ks = (k0, k1, k0 ^ k1 ^ _PARITY)
    v0 = a.reshape(-1) + ks[0]
    v1 = b.reshape(-1) + ks[1]
    for block in range(5):
        for r in _ROTATIONS[block % 2]:
            v0 += v1
            v1 = _rotl(v1, r)
            v1 ^= v0
        v0 += ks[(block + 1) % 3]
        v1 += ks[(block + 2) % 3]
        v1 += _U32(block + 1)
    return v0.reshape(shape), v1.reshape(shape)


def _iota_2x32(shape: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """JAX's ``iota_2x32_shape``: the row-major flat index as (hi, lo) words."""
    flat = np.arange(int(np.prod(shape, dtype=np.int64)), dtype=np.uint64).reshape(shape)
    return (flat >> np.uint64(32)).astype(_U32), flat.astype(_U32)


def _hash_shape(key: Any, shape: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    shape = tuple(int(d) for d in shape)
    if any(d < 0 for d in shape):
        raise ValueError(f"negative dimension in shape {shape}")
    hi, lo = _iota_2x32(shape)
    return threefry2x32(key, hi, lo)


# ------------------------------------------------------------------ keys
_SEED_BITS = {"int8": 8, "int16": 16, "int32": 32, "int64": 64}
_SEED_BITS.update({"u" + k: v for k, v in _SEED_BITS.items()})


def key(seed: Any, dtype: str | None = None) -> np.ndarray:
    """The raw key of ``seed``, as ``jax.random.PRNGKey`` /
    ``jax.random.key_data(jax.random.key(seed))``.

    ``dtype`` is the seed's integer type (default: a numpy seed's own dtype;
    for a Python int, JAX's default configuration). JAX's rule
    (``threefry_seed``): a 64-bit seed (int64/uint64, as with
    ``jax_enable_x64``) becomes ``[seed >> 32, seed & 0xFFFFFFFF]`` of its
    two's-complement bits, so ``-1`` gives ``[2**32 - 1, 2**32 - 1]``; a
    narrower seed (int8...int32, uint8...uint32) becomes ``[0, seed mod
    2**32]``, so int32 ``-1`` gives ``[0, 2**32 - 1]``. A Python int with no
    ``dtype`` behaves as ``PRNGKey(int)`` with x64 disabled: JAX converts it
    to int64 and then to int32, keeping the low 32 bits (``2**32 + 5`` gives
    ``[0, 5]``); outside the int64 range it is an OverflowError, as in JAX.
    Pass ``dtype="int64"`` for what ``PRNGKey(int)`` gives with x64 enabled.
    """
    if isinstance(seed, np.ndarray | np.generic):
        if seed.shape != () or seed.dtype.kind not in "iu":
            raise TypeError(f"a PRNG seed is a scalar integer, got {seed!r}")
        dtype = dtype or str(seed.dtype)
        seed = int(seed)
    elif isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError(f"a PRNG seed is a scalar integer, got {seed!r}")
    elif dtype is None:
        if not -(2**63) <= seed < 2**63:
            raise OverflowError(f"seed {seed} does not fit in int64")
        dtype = "int32"
    if dtype not in _SEED_BITS:
        raise TypeError(f"a PRNG seed must have an integer dtype, got {dtype}")
    bits = _SEED_BITS[dtype]
    value = seed % (1 << bits)  # the seed's two's-complement bits
    if bits < 32 and dtype.startswith("int") and value >> (bits - 1):
        value |= (1 << 32) - (1 << bits)  # `seed & uint32(...)` sign-extends narrow ints
    high = value >> 32 if bits == 64 else 0
    return np.array([high, value & 0xFFFFFFFF], dtype=_U32)


def split(key: Any, num: int = 2) -> np.ndarray:
    """``num`` new keys, shape ``(num, 2)``, as ``jax.random.split``."""
    if num < 0:
        raise ValueError(f"split needs num >= 0, got {num}")
    b1, b2 = _hash_shape(key, (num,))
    return np.stack([b1, b2], axis=-1)


def fold_in(key: Any, data: Any) -> np.ndarray:
    """A new key from ``key`` and an integer, as ``jax.random.fold_in``.

    ``data`` is taken modulo 2**32, which is what JAX does for an integer
    array of any width (int32 -1 and int64 2**32 - 1 fold in the same key);
    JAX rejects a Python int outside [0, 2**32), this accepts and wraps it."""
    if isinstance(data, bool) or not isinstance(data, int | np.integer | np.ndarray):
        raise TypeError(f"fold_in folds in a scalar integer, got {data!r}")
    if isinstance(data, np.ndarray) and (data.shape != () or data.dtype.kind not in "iu"):
        raise TypeError(f"fold_in folds in a scalar integer, got {data!r}")
    word = int(data) % (1 << 32)
    b1, b2 = threefry2x32(key, _U32(0), _U32(word))
    return np.array([b1, b2], dtype=_U32)


def random_bits(key: Any, bit_width: int, shape: Sequence[int]) -> np.ndarray:
    """Uniform random bits, an array of uint``bit_width``, as JAX's
    ``_threefry_random_bits_partitionable``."""
    if bit_width not in (8, 16, 32, 64):
        raise ValueError(f"bit_width must be 8, 16, 32 or 64, got {bit_width}")
    b1, b2 = _hash_shape(key, shape)
    if bit_width == 64:
        return np.asarray((b1.astype(np.uint64) << np.uint64(32)) | b2.astype(np.uint64))
    return np.asarray(b1 ^ b2).astype(f"uint{bit_width}")


# -------------------------------------------------------------- samplers
def _float_dtype(dtype: Any) -> np.dtype:
    result = np.dtype(dtype)
    if result.name not in _FLOATS:
        raise TypeError(f"expected float16, float32 or float64, got {result}")
    return result


def uniform(
    key: Any,
    shape: Sequence[int],
    dtype: Any = "float32",
    minval: float = 0.0,
    maxval: float = 1.0,
) -> np.ndarray:
    """Uniform floats in ``[minval, maxval)``, as ``jax.random.uniform``.

    All arithmetic is in ``dtype``, as in JAX; XLA contracts the final
    ``floats * (maxval - minval) + minval`` into one fused multiply-add for
    float32 and float64, so that is what this computes (a float16 multiply and
    add round separately). For float64, JAX needs ``jax_enable_x64``
    (otherwise it silently returns float32)."""
    dt = _float_dtype(dtype)
    info = np.finfo(dt)
    nbits, nmant = info.bits, info.nmant
    uint = np.dtype(f"uint{nbits}")
    bits = np.atleast_1d(random_bits(key, nbits, shape))
    one = np.array(1.0, dt).view(uint)
    floats = ((bits >> uint.type(nbits - nmant)) | one).view(dt) - dt.type(1.0)
    lo, hi = np.array(minval, dt), np.array(maxval, dt)
    with np.errstate(over="ignore", invalid="ignore"):  # a range beyond the dtype: inf, as JAX
        if dt == np.float16:
            scaled = floats * (hi - lo) + lo
        else:
            scaled = _fma(floats, hi - lo, lo)
    return np.maximum(lo, scaled).reshape(tuple(shape))


# ------------------------------------------------- XLA's float arithmetic
# XLA on CPU fuses a multiply feeding an add into one FMA (a single rounding)
# and has its own log and log1p; matching JAX to the bit means doing the same.
def _two_sum(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``a + b == s + e`` exactly (Knuth)."""
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


def _round_to_odd(s: np.ndarray, error: np.ndarray) -> np.ndarray:
    """``s + error`` (``s`` its round-to-nearest) rounded to odd: inexact
    results move to the neighbour with an odd last bit. Rounding the odd
    result again, to a format at least 2 bits narrower or against a smaller
    addend, is then correct (Boldo & Melquiond, IEEE TC 2008)."""
    uint = np.uint32 if s.dtype == np.float32 else np.uint64
    even = (s.view(uint) & uint(1)) == 0
    toward = np.where(error > 0, np.inf, -np.inf).astype(s.dtype)
    return np.where((error != 0) & even, np.nextafter(s, toward), s)


def _split(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Veltkamp's split of a float64 into two 26-bit halves."""
    g = a * 134217729.0
    high = g - (g - a)
    return high, a - high


def _fma(a: Any, b: Any, c: Any) -> np.ndarray:
    """``a * b + c`` with a single rounding, for float32 or float64 arrays.

    float32: the product is exact in float64 and the sum is rounded to odd
    there, so the final rounding to float32 is correct. float64: Boldo &
    Melquiond's emulation (exact product by Dekker's algorithm, exact sum, the
    two error terms added with rounding to odd); where an intermediate
    overflows, the plain ``a * b + c``."""
    a, b, c = (np.asarray(v) for v in (a, b, c))
    dt = np.result_type(a, b, c)
    a, b, c = np.broadcast_arrays(*(np.atleast_1d(v.astype(dt)) for v in (a, b, c)))
    if dt == np.float32:
        s, e = _two_sum(a.astype(np.float64) * b, c.astype(np.float64))
        return _round_to_odd(s, e).astype(np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        high = a * b
        ah, al = _split(a)
        bh, bl = _split(b)
        low = ((ah * bh - high) + ah * bl + al * bh) + al * bl
        th, tl = _two_sum(c, high)
        result = th + _round_to_odd(*_two_sum(tl, low))
        return np.where(np.isfinite(result), result, a * b + c)


def _horner(coefficients: Sequence[float], w: np.ndarray) -> np.ndarray:
    """The polynomial (highest degree first) at ``w``, one FMA per step."""
    p = np.full_like(w, coefficients[0])
    for c in coefficients[1:]:
        p = _fma(p, w, w.dtype.type(c))
    return p


_LOGF = (
    7.0376836292e-2, -1.1514610310e-1, 1.1676998740e-1, -1.2420140846e-1, 1.4249322787e-1,
    -1.6668057665e-1, 2.0000714765e-1, -2.4999993993e-1, 3.3333331174e-1,
)  # fmt: skip


def _log_f32(x: np.ndarray) -> np.ndarray:
    """XLA's CPU float32 log: Cephes' logf as Eigen evaluates it (three
    interleaved Horner chains, FMAs where LLVM contracts them)."""
    f, p = np.float32, [np.float32(c) for c in _LOGF]
    clamped = np.maximum(x, np.finfo(f).tiny)
    bits = clamped.view(np.uint32)
    mantissa = ((bits & np.uint32(0x807FFFFF)) | np.array(0.5, f).view(np.uint32)).view(f)
    exponent = ((bits >> np.uint32(23)).astype(np.int32) - 126).astype(f)
    below = mantissa < f(0.707106781186547524)
    m = (mantissa - f(1.0)) + np.where(below, mantissa, f(0.0))
    e = exponent - below.astype(f)
    m2 = m * m
    m3 = m2 * m
    y = _fma(_fma(m, p[0], p[1]), m, p[2])
    y1 = _fma(_fma(m, p[3], p[4]), m, p[5])
    y2 = _fma(_fma(m, p[6], p[7]), m, p[8])
    y = _fma(_fma(y, m3, y1), m3, y2)
    y = _fma(y, m3, f(-2.12194440e-4) * e)
    result = _fma(e, f(0.693359375), _fma(f(-0.5), m2, m) + y)
    with np.errstate(divide="ignore", invalid="ignore"):
        special = np.log(x)  # 0, negative, inf, nan
    return np.where((x > 0) & np.isfinite(x), result, special)


_LOG1P_NUMERATOR = (
    4.5270000862445199635215e-5, 4.9854102823193375972212e-1, 6.5787325942061044846969e0,
    2.9911919328553073277375e1, 6.0949667980987787057556e1, 5.7112963590585538103336e1,
    2.0039553499201281259648e1,
)  # fmt: skip
_LOG1P_DENOMINATOR = (
    1.0, 1.5062909083469192043167e1, 8.3047565967967209469434e1, 2.2176239823732856465394e2,
    3.0909872225312059774938e2, 2.1642788614495947685003e2, 6.0118660497603843919306e1,
)  # fmt: skip


def _log1p(x: np.ndarray) -> np.ndarray:
    """XLA's log1p: Cephes' rational approximation for ``|x| < sqrt(2) - 1``,
    ``log(1 + x)`` beyond (XLA's float32 log; numpy's float64 log, which may
    differ from the libm log XLA calls by an ulp)."""
    t = x.dtype.type
    x2 = x * x
    ratio = _horner(_LOG1P_NUMERATOR, x) / _horner(_LOG1P_DENOMINATOR, x)
    small = x + _fma(t(-0.5), x2, (x * x2) * ratio)
    with np.errstate(divide="ignore", invalid="ignore"):
        large = _log_f32(x + t(1.0)) if t is np.float32 else np.log(x + t(1.0))
    return np.where(np.abs(x) < t(0.41421356237309504880), small, large)


# Giles, "Approximating the erfinv function" (GPU Computing Gems, 2011): the
# polynomials XLA's chlo.erf_inv expands to, highest degree first.
_ERFINV32_CENTRAL = (
    2.81022636e-08, 3.43273939e-07, -3.5233877e-06, -4.39150654e-06, 0.00021858087,
    -0.00125372503, -0.00417768164, 0.246640727, 1.50140941,
)  # fmt: skip
_ERFINV32_TAIL = (
    -0.000200214257, 0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773,
    -0.0076224613, 0.00943887047, 1.00167406, 2.83297682,
)  # fmt: skip
_ERFINV64_CENTRAL = (
    -3.6444120640178196996e-21, -1.685059138182016589e-19, 1.2858480715256400167e-18,
    1.115787767802518096e-17, -1.333171662854620906e-16, 2.0972767875968561637e-17,
    6.6376381343583238325e-15, -4.0545662729752068639e-14, -8.1519341976054721522e-14,
    2.6335093153082322977e-12, -1.2975133253453532498e-11, -5.4154120542946279317e-11,
    1.051212273321532285e-09, -4.1126339803469836976e-09, -2.9070369957882005086e-08,
    4.2347877827932403518e-07, -1.3654692000834678645e-06, -1.3882523362786468719e-05,
    0.0001867342080340571352, -0.00074070253416626697512, -0.0060336708714301490533,
    0.24015818242558961693, 1.6536545626831027356,
)  # fmt: skip
_ERFINV64_MIDDLE = (
    2.2137376921775787049e-09, 9.0756561938885390979e-08, -2.7517406297064545428e-07,
    1.8239629214389227755e-08, 1.5027403968909827627e-06, -4.013867526981545969e-06,
    2.9234449089955446044e-06, 1.2475304481671778723e-05, -4.7318229009055733981e-05,
    6.8284851459573175448e-05, 2.4031110387097893999e-05, -0.0003550375203628474796,
    0.00095328937973738049703, -0.0016882755560235047313, 0.0024914420961078508066,
    -0.0037512085075692412107, 0.005370914553590063617, 1.0052589676941592334,
    3.0838856104922207635,
)  # fmt: skip
_ERFINV64_TAIL = (
    -2.7109920616438573243e-11, -2.5556418169965252055e-10, 1.5076572693500548083e-09,
    -3.7894654401267369937e-09, 7.6157012080783393804e-09, -1.4960026627149240478e-08,
    2.9147953450901080826e-08, -6.7711997758452339498e-08, 2.2900482228026654717e-07,
    -9.9298272942317002539e-07, 4.5260625972231537039e-06, -1.9681778105531670567e-05,
    7.5995277030017761139e-05, -0.00021503011930044477347, -0.00013871931833623122026,
    1.0103004648645343977, 4.8499064014085844221,
)  # fmt: skip


def erfinv(x: Any) -> np.ndarray:
    """The inverse error function as XLA computes it (``chlo.erf_inv``):
    ``w = -log1p(-x * x)``, then Giles' single-precision polynomials in ``w``
    for float16 (computed in float32) and float32, the double-precision ones
    for float64, times ``x``; ``erfinv(+-1) = +-inf``. Same operations,
    order and FMAs as XLA, so float16/float32 results are bit-identical to
    JAX on CPU and float64 ones within a few ulp (the log differs)."""
    x = np.asarray(x)
    dt = _float_dtype(x.dtype)
    work = np.float64 if dt == np.float64 else np.float32
    v = np.atleast_1d(x.astype(work))
    with np.errstate(all="ignore"):  # erfinv(+-1): w is inf; |x| > 1: nan, as XLA
        w = -_log1p(v * -v)
        root = np.sqrt(w)
        if work is np.float32:
            p = np.where(
                w < work(5.0),
                _horner(_ERFINV32_CENTRAL, w - work(2.5)),
                _horner(_ERFINV32_TAIL, root - work(3.0)),
            )
        else:
            p = np.where(
                w < 6.25,
                _horner(_ERFINV64_CENTRAL, w - 3.125),
                np.where(
                    w < 16.0,
                    _horner(_ERFINV64_MIDDLE, root - 3.25),
                    _horner(_ERFINV64_TAIL, root - 5.0),
                ),
            )
        result = np.where(np.abs(v) == 1, v * work(np.inf), p * v)
    return result.astype(dt).reshape(x.shape)


def normal(key: Any, shape: Sequence[int], dtype: Any = "float32") -> np.ndarray:
    """Standard normal samples, as ``jax.random.normal`` (real dtypes)."""
    dt = _float_dtype(dtype)
    lo = np.nextafter(np.array(-1.0, dt), np.array(0.0, dt))
    u = uniform(key, shape, dt, lo, 1.0)
    return np.asarray(np.array(np.sqrt(2), dt) * erfinv(u))


def bernoulli(key: Any, p: float, shape: Sequence[int]) -> np.ndarray:
    """Booleans that are True with probability ``p``, as
    ``jax.random.bernoulli(key, p, shape)`` with a Python-float ``p`` (JAX
    draws float32 uniforms and compares them with ``float32(p)``)."""
    return np.asarray(uniform(key, shape, np.float32) < np.float32(p))


def dropout(key: Any, x: Any, rate: float) -> np.ndarray:
    """``flax.linen.Dropout(rate)(x, deterministic=False, rng=key)`` on a
    float ``x``.

    flax returns ``x`` itself for rate 0 and zeros for rate 1 (no draw at
    all); otherwise ``keep = 1.0 - rate`` in Python double precision, the mask
    is ``bernoulli(key, keep, x.shape)`` (a float32 compare) and the kept
    values are ``x / keep`` in x's dtype (a Python float is weakly typed).
    XLA on CPU turns that division into a multiplication by the reciprocal
    (``1 / keep`` rounded to x's dtype) except when x has a single element
    (observed with jaxlib 0.10.2; a true division everywhere would differ
    from JAX by an ulp in about a third of the kept elements)."""
    x = np.asarray(x)
    if not 0.0 <= rate <= 1.0:
        raise ValueError(f"dropout rate must be in [0, 1], got {rate}")
    if rate == 0.0:
        return x
    if rate == 1.0:
        return np.zeros_like(x)
    keep = 1.0 - rate
    mask = bernoulli(key, keep, x.shape)
    divisor = x.dtype.type(keep)
    kept = x / divisor if x.size == 1 else x * (x.dtype.type(1.0) / divisor)
    return np.where(mask, kept, x.dtype.type(0.0))
