"""The ``random.*`` operators' TE rules (effir/backends/tvm/kernel/random_ops.py)
against their numpy rules (effir.runtime.prng), bit for bit (float64 normal:
within 3 ulp, see random_ops' limits): keys, splits,
fold-ins, uniform, normal, bernoulli and dropout over keys with high bits
set, fold-in data of every integer width, shapes from scalars to ones that
are not a multiple of the vector width, float16/32/64, edge ranges, rates
and probabilities; a hypothesis property over random keys and shapes; the
recorded JAX vectors of tests/runtime/test_prng.py; the kernel builder
(build_kernel) on a parsed dropout function; CUDA source that nvcc compiles.

The kernels here are built by a test-only builder (TE placeholders, the
rule, ``te.create_prim_func``, ``tvm.compile``), scheduled by the backend's
CPU schedule (which inlines stages, where LLVM's FMA contraction would
change bits) or not scheduled at all (every stage in memory).
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from functools import cache
from typing import Any

import numpy as np
import pytest
import tvm
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tvm import te

import effir
from effir.backends.interpreter import interpret
from effir.backends.tvm.kernel import random_ops  # noqa: F401  (registers the te rules)
from effir.backends.tvm.kernel.primitive import build_kernel, compile_cuda_to_ptx
from effir.backends.tvm.runtime.errors import BackendError
from effir.backends.tvm.schedule import schedule_prim_func
from effir.backends.tvm.target import make_target
from effir.ir.node import Attrs
from effir.ir.op import op_def
from effir.ir.types import KeyType, TensorType, Type
from effir.runtime import prng
from effir.runtime.values import PRNGKey
from tests.support import jax_prng_vectors as jax_vectors

LLVM = make_target("llvm")

KEYS = [
    PRNGKey([0, 0]),
    PRNGKey([0, 42]),
    PRNGKey([0xFFFFFFFF, 0xFFFFFFFF]),
    PRNGKey([0x80000001, 0x7FFFFFFF]),
    PRNGKey(prng.split(prng.key(7), 3)[2]),
]
SHAPES = [(), (1,), (7,), (3, 5), (64, 33)]


# ====================================================== test-only builder
Spec = tuple[tuple[int, ...], str] | None  # a tensor's shape and dtype; None for a Key


def spec(value: Any) -> Spec:
    return None if isinstance(value, PRNGKey) else (value.shape, str(value.dtype))


def _type(s: Spec) -> Type:
    return KeyType() if s is None else TensorType(s[0], s[1])


def _placeholder(s: Spec, name: str) -> te.Tensor:
    return te.placeholder((2,), "uint32", name) if s is None else te.placeholder(*s, name)


@cache
def compiled(
    name: str, specs: tuple[Spec, ...], attrs: Attrs, scheduled: bool
) -> Callable[..., list[np.ndarray]]:
    """The kernel of one call of ``name`` (built once per argument shapes
    and attributes): its inputs are the arguments (keys as uint32[2]), its
    outputs the result's tensors, in order."""
    out_type = op_def(name).rule("type")(tuple(_type(s) for s in specs), attrs)
    inputs = [_placeholder(s, f"arg{i}") for i, s in enumerate(specs)]
    result = op_def(name).rule("te")(tuple(inputs), attrs, out_type)
    outputs = list(result) if isinstance(result, tuple) else [result]
    func = te.create_prim_func(inputs + outputs)
    if scheduled and outputs:
        func = schedule_prim_func(func, LLVM)
    main = tvm.compile(func, target=LLVM)["main"]

    def run(*args: Any) -> list[np.ndarray]:
        arrays = [a.data if isinstance(a, PRNGKey) else a for a in args]
        outs = [np.empty([int(d) for d in o.shape], str(o.dtype)) for o in outputs]
        handles = [tvm.runtime.tensor(np.array(a, order="C")) for a in arrays]
        results = [tvm.runtime.tensor(o) for o in outs]
        main(*handles, *results)
        return [r.numpy() for r in results]

    return run


def _leaves(value: Any) -> list[np.ndarray]:
    if isinstance(value, PRNGKey):
        return [value.data]
    if isinstance(value, tuple):
        return [leaf for v in value for leaf in _leaves(v)]
    return [np.asarray(value)]


def raw(array: np.ndarray) -> np.ndarray:
    """The bits of a float array (NaNs and signed zeros compare exactly)."""
    if array.dtype.kind == "f":
        return array.view(f"uint{8 * array.itemsize}")
    return array


def assert_bits_equal(actual: list[np.ndarray], expected: list[np.ndarray]) -> None:
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected, strict=True):
        assert a.dtype == e.dtype and a.shape == e.shape
        np.testing.assert_array_equal(raw(a), raw(e))


def check(
    name: str, args: tuple[Any, ...], scheduled: bool = True, max_ulp: int = 0, **attrs: Any
) -> None:
    """The TVM kernel and the numpy rule agree to the bit on ``args`` (or
    to ``max_ulp`` units in the last place)."""
    normalized = op_def(name).normalize_attrs(attrs)
    actual = compiled(name, tuple(spec(a) for a in args), normalized, scheduled)(*args)
    with np.errstate(all="ignore"):
        expected = _leaves(op_def(name).rule("numpy")(args, normalized))
    if max_ulp:
        for a, e in zip(actual, expected, strict=True):
            assert a.dtype == e.dtype and a.shape == e.shape
            assert jax_vectors.ulp_distance(a, e) <= max_ulp
    else:
        assert_bits_equal(actual, expected)


def check_keys(name: str, extra: tuple[Any, ...] = (), max_ulp: int = 0, **attrs: Any) -> None:
    for key in KEYS:
        args = (*extra, key) if name == "random.dropout" else (key, *extra)
        check(name, args, max_ulp=max_ulp, **attrs)


# ================================================================== keys
SEEDS = {
    "int32": [0, 1, 42, -1, -42, 2**31 - 1, -(2**31)],
    "int8": [-1, 127, -128],
    "int16": [-300, 32767],
    "int64": [-1, 4294967301, 1099511627783, -1099511627776, 2**63 - 1, -(2**63)],
    "uint8": [200],
    "uint16": [65535],
    "uint32": [4294967295, 2**31],
    "uint64": [2**64 - 1, 2**32 + 5],
}


@pytest.mark.parametrize("dtype", sorted(SEEDS))
def test_key(dtype):
    for seed in SEEDS[dtype]:
        check("random.key", (np.array(seed).astype(dtype),))


@pytest.mark.parametrize("num", [1, 2, 5])
def test_split(num):
    check_keys("random.split", num=num)


def test_split_into_no_keys():
    check("random.split", (KEYS[2],), scheduled=False, num=0)


FOLD_IN_DATA = {
    "int32": [0, 1, -1, 2**31 - 1, -(2**31)],
    "uint32": [2**31, 2**32 - 1],
    "int8": [-5],
    "uint8": [250],
    "int16": [-300],
    "uint16": [7],
    "int64": [2**40 + 3, -(2**40), 2**32 - 1],
    "uint64": [2**64 - 1],
}


@pytest.mark.parametrize("dtype", sorted(FOLD_IN_DATA))
def test_fold_in(dtype):
    for data in FOLD_IN_DATA[dtype]:
        for key in KEYS:
            check("random.fold_in", (key, np.array(data).astype(dtype)))


# ============================================================== samplers
UNIFORM_CASES = [
    *[("float32", shape, 0.0, 1.0) for shape in SHAPES],
    ("float32", (64, 33), -2.0, 3.0),
    ("float32", (7,), 5.0, -1.0),  # high < low
    ("float32", (7,), -0.0, 0.0),  # every element a tie of +0 and low = -0 in max(low, .)
    ("float32", (64, 33), 1e-3, 1e-3 + 1e-9),  # a range below float32's resolution
    ("float32", (64, 33), -3e38, 3e38),  # high - low overflows: inf, and nan for 0 * inf
    ("float16", (7,), -0.0, 0.0),  # numpy's float16 max keeps low on that tie, float32's not
    ("float16", (64, 33), 0.0, 1.0),
    ("float16", (64, 33), -2.0, 3.0),
    ("float16", (64, 33), -6e4, 6e4),
    ("float64", (), 0.0, 1.0),
    ("float64", (64, 33), -1.5, 0.25),
    ("float64", (3, 5), -1e308, 1e308),
]


@pytest.mark.parametrize(("dtype", "shape", "low", "high"), UNIFORM_CASES)
def test_uniform(dtype, shape, low, high):
    check_keys("random.uniform", shape=shape, dtype=dtype, low=low, high=high)


NORMAL_CASES = [
    ("float32", ()),
    ("float32", (3, 5)),
    ("float32", (64, 33)),
    ("float16", (7,)),
    ("float16", (64, 33)),
    ("float64", (1,)),
    ("float64", (64, 33)),
]


@pytest.mark.parametrize(("dtype", "shape"), NORMAL_CASES)
def test_normal(dtype, shape):
    # float64: libm's log against numpy's differs on ~1 in 1,500 arguments,
    # and then the normal by up to 3 ulp (random_ops' docstring)
    max_ulp = 3 if dtype == "float64" else 0
    check_keys("random.normal", shape=shape, dtype=dtype, max_ulp=max_ulp)


@pytest.mark.parametrize("p", [0.0, 1e-8, 0.1, 1 / 3, 0.5, 0.9, 1.0])
def test_bernoulli(p):
    check_keys("random.bernoulli", p=p, shape=(64, 33))


@pytest.mark.parametrize("shape", SHAPES)
def test_bernoulli_shapes(shape):
    check_keys("random.bernoulli", p=0.5, shape=shape)


DROPOUT_CASES = [
    *[("float32", (64, 33), rate) for rate in (0.0, 0.1, 0.3, 0.5, 0.9, 1.0)],
    *[("float32", shape, 0.3) for shape in [(), (1,), (3, 5)]],  # one element: x / keep
    ("float16", (64, 33), 0.1),
    ("float16", (1,), 0.5),
    ("float64", (64, 33), 0.3),
    ("float64", (), 0.3),
]


@pytest.mark.parametrize(("dtype", "shape", "rate"), DROPOUT_CASES)
def test_dropout(dtype, shape, rate):
    rng = np.random.default_rng(0)
    # one element: several values, as x / keep and x * (1 / keep) differ on about a third
    for _ in range(24 if int(np.prod(shape)) == 1 else 1):
        x = (rng.standard_normal(shape) * 3).astype(dtype)
        check_keys("random.dropout", (x,), rate=rate)


# ============================================================ properties
PROPERTY_SETTINGS: dict[str, Any] = dict(
    max_examples=30,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
words = st.integers(0, 2**32 - 1)
keys = st.builds(lambda a, b: PRNGKey([a, b]), words, words)
# a few shapes, so that the cached kernels are reused across examples
shapes = st.sampled_from([(5,), (2, 3, 4), (17,)])


@settings(**PROPERTY_SETTINGS)
@given(
    key=keys,
    shape=shapes,
    op=st.sampled_from(["uniform", "normal", "bernoulli", "dropout"]),
    data=st.integers(-(2**31), 2**31 - 1),
)
def test_unscheduled_kernels_match_numpy_on_random_keys(key, shape, op, data):
    """Every stage in memory (no schedule, nothing inlined): the same bits."""
    if op == "uniform":
        check("random.uniform", (key,), scheduled=False, shape=shape, low=-1.0, high=2.0)
    elif op == "normal":
        check("random.normal", (key,), scheduled=False, shape=shape)
    elif op == "bernoulli":
        check("random.bernoulli", (key,), scheduled=False, shape=shape, p=0.25)
    else:
        x = np.linspace(-2.0, 2.0, int(np.prod(shape)), dtype=np.float32).reshape(shape)
        check("random.dropout", (x, key), scheduled=False, rate=0.5)
    check("random.fold_in", (key, np.array(data, np.int32)), scheduled=False)
    check("random.split", (key,), scheduled=False, num=3)


# ============================================================== JAX vectors
def run_op(name: str, *args: Any, **attrs: Any) -> list[np.ndarray]:
    normalized = op_def(name).normalize_attrs(attrs)
    return compiled(name, tuple(spec(a) for a in args), normalized, True)(*args)


def test_jax_keys_splits_and_fold_ins():
    named = {name: PRNGKey(k) for name, k in jax_vectors.NAMED_KEYS.items()}
    for (name, num), expected in jax_vectors.SPLIT.items():
        got = run_op("random.split", named[name], num=num)
        assert [int(w) for k in got for w in k] == expected
    for (name, data), expected in jax_vectors.FOLD_IN.items():
        got = run_op("random.fold_in", named[name], np.array(data, np.uint32))
        assert [int(w) for w in got[0]] == expected
    got = run_op("random.fold_in", named["0"], np.array(-1, np.int32))
    assert [int(w) for w in got[0]] == jax_vectors.FOLD_IN_INT32_MINUS_1
    for seed, expected in jax_vectors.KEY_INT64.items():
        assert [int(w) for w in run_op("random.key", np.array(seed, np.int64))[0]] == expected


def test_jax_samples():
    k0, k42 = PRNGKey(jax_vectors.K0), PRNGKey(jax_vectors.K42)
    for (dtype, low, high), hexes in jax_vectors.UNIFORM.items():
        key, shape = (k0, (8,)) if (low, high) == (0.0, 1.0) else (k42, (2, 3))
        (got,) = run_op("random.uniform", key, shape=shape, dtype=dtype, low=low, high=high)
        expected = jax_vectors.from_hex(hexes, dtype).reshape(shape)
        np.testing.assert_array_equal(raw(got), raw(expected))
    for (low, high), hexes in jax_vectors.UNIFORM64.items():
        key = k0 if (low, high) == (0.0, 1.0) else k42
        (got,) = run_op("random.uniform", key, shape=(6,), dtype="float64", low=low, high=high)
        np.testing.assert_array_equal(raw(got), raw(jax_vectors.from_hex(hexes, "float64")))
    for p, mask in jax_vectors.BERNOULLI.items():
        (got,) = run_op("random.bernoulli", k0, p=p, shape=(4, 8))
        assert "".join("1" if v else "0" for v in got.reshape(-1)) == mask
    for (dtype, shape, rate), hexes in jax_vectors.DROPOUT_KEY42.items():
        x = jax_vectors.dropout_input(shape, dtype)
        (got,) = run_op("random.dropout", x, k42, rate=rate)
        expected = jax_vectors.from_hex(hexes, dtype).reshape(shape)
        np.testing.assert_array_equal(raw(got), raw(expected))


@pytest.mark.parametrize(
    ("name", "key", "shape", "dtype", "max_ulp"),
    [  # the guarantees of test_prng.py (the TVM kernels give numpy's bits)
        ("float32", jax_vectors.K0, (16,), "float32", 2),
        ("float32 (3, 5) key 42", jax_vectors.K42, (3, 5), "float32", 2),
        ("float16", jax_vectors.K0, (8,), "float16", 2),
    ],
)
def test_jax_normal(name, key, shape, dtype, max_ulp):
    (got,) = run_op("random.normal", PRNGKey(key), shape=shape, dtype=dtype)
    expected = jax_vectors.from_hex(jax_vectors.NORMAL[name], dtype).reshape(shape)
    assert jax_vectors.ulp_distance(got, expected) <= max_ulp


def test_jax_normal_float64():
    (got,) = run_op("random.normal", PRNGKey(jax_vectors.K0), shape=(6,), dtype="float64")
    assert jax_vectors.ulp_distance(got, jax_vectors.from_hex(jax_vectors.NORMAL64, "float64")) <= 4


# ========================================================= kernel builder
HEADER = '#[version = "0.0.5"]\n'


def parsed(text: str) -> effir.IRModule:
    return effir.check(effir.parse(HEADER + text, source_name="random_ops.effir"))


def test_build_kernel_dropout_is_bit_exact():
    mod = parsed(
        "def @main(%k: Key, %x: Tensor[(64, 32), float32]) { random.dropout(%x, %k, rate=0.3f) }"
    )
    kernel = build_kernel(mod.functions["main"], "llvm")
    x = np.random.default_rng(1).standard_normal((64, 32)).astype(np.float32)
    for key in KEYS:
        assert_bits_equal([kernel(key, x)], [interpret(mod, key, x)])


def test_build_kernel_key_results():
    mod = parsed(
        """def @main(%seed: int64, %d: int32) {
  let %k = random.key(%seed);
  let %f = random.fold_in(%k, %d);
  let %keys = random.split(%f, num=3);
  (%keys, random.uniform(%keys.1, shape=[4, 3], low=-1f, high=1f))
}"""
    )
    kernel = build_kernel(mod.functions["main"], "llvm")
    for seed, data in [(-1, 0), (2**40 + 7, -1), (3, 2**31 - 1)]:
        args = (np.array(seed, np.int64), np.array(data, np.int32))
        assert_bits_equal(_leaves(kernel(*args)), _leaves(interpret(mod, *args)))


IEEE_NVCC_OPTIONS = ["--ftz=false", "--prec-div=true", "--prec-sqrt=true"]
"""What undoes the ``--use_fast_math`` TVM passes nvcc (approximate division
and square root, subnormals flushed): random values need IEEE arithmetic."""


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_cuda_kernel_compiles_to_ieee_arithmetic():
    """TVM 0.27 has no CUDA lowering of tirx.fma (random_ops registers one),
    and the kernels call no approximate intrinsic of their own: compiled
    without fast math, every float operation is IEEE-rounded."""
    from tvm.support import nvcc

    mod = parsed(
        """def @main(%k: Key, %x: Tensor[(1), float32]) {
  (random.normal(%k, shape=[256], dtype="float32"), random.dropout(%x, %k, rate=0.3f))
}"""
    )
    kernel = build_kernel(mod.functions["main"], "cuda")
    assert "fmaf(" in kernel.source("cuda")
    assert "fma.rn" in compile_cuda_to_ptx(kernel)  # with TVM's flags: fma.rn.ftz.f32
    with kernel.target:
        ptx = nvcc.compile_cuda(
            kernel.source("cuda"), target_format="ptx", compiler="nvcc", options=IEEE_NVCC_OPTIONS
        )
    ptx = bytes(ptx).decode()
    for instruction in ("fma.rn.f32", "div.rn.f32", "sqrt.rn.f32"):
        assert instruction in ptx
    assert ".approx" not in ptx and ".ftz" not in ptx


# ================================================================ errors
def test_rules_reject_what_prng_does_not_draw():
    key = te.placeholder((2,), "uint32", "key")
    attrs = op_def("random.uniform").normalize_attrs({"shape": (3,), "dtype": "int32"})
    with pytest.raises(BackendError, match="float16, float32 or float64"):
        op_def("random.uniform").rule("te")((key,), attrs, TensorType((3,), "int32"))
    seed = te.placeholder((), "float32", "seed")
    with pytest.raises(BackendError, match="integer scalar"):
        op_def("random.key").rule("te")((seed,), Attrs(), KeyType())
    wide = te.placeholder((3,), "uint32", "not_a_key")
    attrs = op_def("random.split").normalize_attrs({})
    with pytest.raises(BackendError, match="shape \\(2,\\)"):
        op_def("random.split").rule("te")((wide,), attrs, KeyType())
