"""effir.runtime.prng against JAX: bit-exact keys, splits, bits, uniforms,
bernoulli masks and dropout; normal within 2 ulp (it is in fact exact for
float16/float32 on these vectors).

The constants were printed by ``tests/runtime/make_prng_vectors.py`` with
jax 0.10.2 / jaxlib 0.10.2 / flax 0.12.8 on CPU (x86-64 with FMA), in JAX's
default configuration (``jax_threefry_partitionable=True``, x64 off) except
the ``*64`` constants, computed with ``jax.config.update("jax_enable_x64",
True)``; the command was::

    python3.11 -m venv /tmp/jaxenv && /tmp/jaxenv/bin/pip install jax jaxlib flax
    /tmp/jaxenv/bin/python tests/runtime/make_prng_vectors.py

Floats are ``float.hex`` of the exact values. The suite needs no JAX.
"""

from __future__ import annotations

import numpy as np
import pytest

from effir.runtime import prng
from effir.runtime.values import PRNGKey

# fmt: off
VERSIONS = {"jax": "0.10.2", "flax": "0.12.8"}
KEY_INT = {
    0: [0, 0],
    1: [0, 1],
    42: [0, 42],
    -1: [0, 4294967295],
    -42: [0, 4294967254],
    2147483647: [0, 2147483647],
    2147483648: [0, 2147483648],
    4294967295: [0, 4294967295],
    4294967301: [0, 5],
    1099511627783: [0, 7],
    -1099511627776: [0, 0],
}
KEY_TYPED = {
    ("int32", -1): [0, 4294967295],
    ("int32", -42): [0, 4294967254],
    ("uint32", 4294967295): [0, 4294967295],
    ("int8", -1): [0, 4294967295],
}
SPLIT = {
    ("0", 2): [1797259609, 2579123966, 928981903, 3453687069],
    ("0", 3): [1797259609, 2579123966, 928981903, 3453687069, 4146024105, 2718843009],
    ("42", 2): [1832780943, 270669613, 64467757, 2916123636],
    ("42", 3): [1832780943, 270669613, 64467757, 2916123636, 2465931498, 255383827],
    ("split(0)[1]", 3): [346279018, 360566543, 3968330031, 3923691647, 3152301319, 792466127],
    ("split(42, 3)[2]", 2): [1605747716, 4117073388, 2853785955, 313133857],
}
FOLD_IN = {
    ("0", 0): [1797259609, 2579123966],
    ("0", 1): [928981903, 3453687069],
    ("0", 7): [2716826189, 292468403],
    ("0", 2147483648): [917456828, 636652529],
    ("0", 4294967295): [743310391, 3789761811],
    ("42", 5): [2765691542, 824333390],
}
FOLD_IN_INT32_MINUS_1 = [743310391, 3789761811]
BITS = {
    (32, (8,)): [
        4070199207,
        4202968722,
        1427181096,
        2012915765,
        2447653815,
        710830403,
        1332275837,
        2961296638,
    ],
    (32, (2, 3)): [2098992034, 2919706841, 2646866425, 2409546199, 1935504149, 2516274904],
    (16, (5,)): [20391, 13970, 3624, 43061, 15287],
    (8, (5,)): [167, 146, 40, 53, 183],
}
UNIFORM = {
    ("float32", 0.0, 1.0): [
        "0x1.e5349c0000000p-1",
        "0x1.f5086c0000000p-1",
        "0x1.5444380000000p-2",
        "0x1.dfeaa00000000p-2",
        "0x1.23c8740000000p-1",
        "0x1.52f3400000000p-3",
        "0x1.3da3a80000000p-2",
        "0x1.6103980000000p-1",
    ],
    ("float32", -2.0, 3.0): [
        "0x1.c631680000000p-2",
        "0x1.6623f00000000p+0",
        "0x1.14d3d80000000p+0",
        "0x1.9c33800000000p-1",
        "0x1.034ce80000000p-2",
        "0x1.dbd10c0000000p-1",
    ],
    ("float16", 0.0, 1.0): [
        "0x1.3e00000000000p-2",
        "0x1.b400000000000p-3",
        "0x1.c000000000000p-5",
        "0x1.5000000000000p-1",
        "0x1.dc00000000000p-3",
        "0x1.a500000000000p-2",
        "0x1.d480000000000p-1",
        "0x1.9980000000000p-1",
    ],
    ("float16", -2.0, 3.0): [
        "-0x1.9e80000000000p+0",
        "-0x1.0c40000000000p+0",
        "0x1.7080000000000p+1",
        "0x1.c900000000000p+0",
        "0x1.f800000000000p-3",
        "-0x1.d900000000000p-2",
    ],
}
BERNOULLI = {
    0.0: "00000000000000000000000000000000",
    0.1: "00000000000100000001100000000010",
    0.5: "00110110010100000001100000001110",
    0.9: "00111111110111101111101111111111",
    1.0: "11111111111111111111111111111111",
}
NORMAL = {
    "float32": [
        "0x1.9f657a0000000p+0",
        "0x1.033be00000000p+1",
        "-0x1.bc002e0000000p-2",
        "-0x1.4204440000000p-4",
        "0x1.68a2580000000p-3",
        "-0x1.f1b5ae0000000p-1",
        "-0x1.fb2f980000000p-2",
        "0x1.fa3e620000000p-2",
        "0x1.5425980000000p-1",
        "-0x1.e67bd40000000p-1",
        "0x1.16fada0000000p+1",
        "-0x1.f484c00000000p+0",
        "0x1.6f2d2a0000000p-2",
        "0x1.432a180000000p-3",
        "0x1.46ef060000000p+0",
        "0x1.82add20000000p+0",
    ],
    "float32 (3, 5) key 42": [
        "-0x1.cfbe2a0000000p-6",
        "0x1.de57d00000000p-2",
        "0x1.2eccc20000000p-2",
        "0x1.3a76480000000p-3",
        "-0x1.fc09d60000000p-4",
        "0x1.bc42340000000p-3",
        "-0x1.70dd720000000p+0",
        "0x1.8300120000000p-1",
        "0x1.0af6340000000p-1",
        "0x1.d201da0000000p-1",
        "-0x1.89b97a0000000p-2",
        "0x1.23cb760000000p+0",
        "0x1.721f0c0000000p+0",
        "0x1.14b64c0000000p+0",
        "-0x1.cd276c0000000p-5",
    ],
    "float16": [
        "-0x1.f980000000000p-2",
        "-0x1.9740000000000p-1",
        "-0x1.9940000000000p+0",
        "0x1.9c80000000000p-2",
        "-0x1.75c0000000000p-1",
        "-0x1.cac0000000000p-3",
        "0x1.5fc0000000000p+0",
        "0x1.af00000000000p-1",
    ],
}
DROPOUT_KEY42 = {
    ("float32", (3, 4), 0.1): [
        "-0x1.1c71c80000000p+1",
        "-0x1.ce38e40000000p+0",
        "-0x1.638e3a0000000p+0",
        "-0x1.f1c71e0000000p-1",
        "-0x1.1c71c80000000p-1",
        "-0x1.1c71c80000000p-3",
        "0x1.1c71c80000000p-2",
        "0x1.638e3a0000000p-1",
        "0x1.1c71c80000000p+0",
        "0x1.871c740000000p+0",
        "0x1.f1c71e0000000p+0",
        "0x1.2e38e40000000p+1",
    ],
    ("float32", (3, 4), 0.5): [
        "-0x1.0000000000000p+2",
        "0x0.0p+0",
        "0x0.0p+0",
        "0x0.0p+0",
        "-0x1.0000000000000p+0",
        "0x0.0p+0",
        "0x1.0000000000000p-1",
        "0x0.0p+0",
        "0x0.0p+0",
        "0x0.0p+0",
        "0x1.c000000000000p+1",
        "0x0.0p+0",
    ],
    ("float32", (1,), 0.5): ["-0x1.0000000000000p+2"],
    ("float16", (3, 4), 0.1): [
        "-0x1.1c80000000000p+1",
        "-0x1.ce40000000000p+0",
        "-0x1.6380000000000p+0",
        "-0x1.f200000000000p-1",
        "-0x1.1c80000000000p-1",
        "-0x1.1c80000000000p-3",
        "0x1.1c80000000000p-2",
        "0x1.6380000000000p-1",
        "0x1.1c80000000000p+0",
        "0x1.8740000000000p+0",
        "0x1.f200000000000p+0",
        "0x1.2e40000000000p+1",
    ],
}
KEY_INT64 = {
    -1: [4294967295, 4294967295],
    4294967301: [1, 5],
    1099511627783: [256, 7],
    -1099511627776: [4294967040, 0],
    9223372036854775807: [2147483647, 4294967295],
}
KEY_UINT64_MAX = [4294967295, 4294967295]
BITS64 = [7719171245655871230, 3989946895414531357, 17807037942121513089, 10597664315880824766]
UNIFORM64 = {
    (0.0, 1.0): [
        "0x1.ac80056666e90p-2",
        "0x1.baf91c7e6ed88p-3",
        "0x1.ee3e9d53441c8p-1",
        "0x1.2624ef17c9d1ap-1",
        "0x1.107ffd8233b78p-1",
        "0x1.6b6c4379c215cp-2",
    ],
    (-1.5, 0.25): [
        "-0x1.81a6f00b4788cp-1",
        "-0x1.794686700fd32p+0",
        "-0x1.fb22199995725p-2",
        "-0x1.c8543e2915dd4p-3",
        "-0x1.2f7637c5a8d85p-2",
        "-0x1.7e1045e4a80fdp-2",
    ],
}
NORMAL64 = [
    "-0x1.a5909049a141dp-3",
    "-0x1.91ccd1e1b7b4ap-1",
    "0x1.d0eb0e61cf797p+0",
    "0x1.80b45ca1069abp-3",
    "0x1.4b3c1e85a437cp-4",
    "-0x1.7d0a9c9f7177fp-2",
]
# fmt: on

K0 = prng.key(0)
K42 = prng.key(42)
NAMED_KEYS = {
    "0": K0,
    "42": K42,
    "split(0)[1]": prng.split(K0)[1],
    "split(42, 3)[2]": prng.split(K42, 3)[2],
}


def words(array: np.ndarray) -> list[int]:
    return [int(v) for v in array.reshape(-1)]


def from_hex(values: list[str], dtype: str) -> np.ndarray:
    """Exact: every float16/float32 value is a float64."""
    return np.array([float.fromhex(v) for v in values]).astype(dtype)


def assert_same_bits(actual: np.ndarray, expected: np.ndarray) -> None:
    assert actual.dtype == expected.dtype
    assert actual.shape == expected.shape
    np.testing.assert_array_equal(
        actual.view(f"uint{8 * actual.itemsize}"), expected.view(f"uint{8 * expected.itemsize}")
    )


def ulp_distance(actual: np.ndarray, expected: np.ndarray) -> float:
    spacing = np.spacing(np.abs(expected)).astype(np.float64)
    return float(np.max(np.abs(actual.astype(np.float64) - expected) / spacing))


# ------------------------------------------------------------------ hash
@pytest.mark.parametrize(
    ("key", "count", "expected"),
    [  # Random123's known-answer tests for threefry2x32_20 (also in JAX's tests)
        ((0, 0), (0, 0), (0x6B200159, 0x99BA4EFE)),
        ((0xFFFFFFFF, 0xFFFFFFFF), (0xFFFFFFFF, 0xFFFFFFFF), (0x1CB996FC, 0xBB002BE7)),
        ((0x13198A2E, 0x03707344), (0x243F6A88, 0x85A308D3), (0xC4923A9C, 0x483DF7A0)),
    ],
)
def test_threefry2x32_known_answers(key, count, expected):
    x0, x1 = prng.threefry2x32(np.array(key, np.uint32), count[0], count[1])
    assert (int(x0), int(x1)) == expected


def test_threefry2x32_broadcasts_and_keeps_shape():
    x0, x1 = prng.threefry2x32(K42, np.zeros((2, 3), np.uint32), np.arange(3, dtype=np.uint32))
    assert x0.shape == x1.shape == (2, 3) and x0.dtype == np.uint32
    assert words(x0[0]) == words(x0[1])


def test_threefry2x32_takes_a_prngkey_value():
    assert words(np.stack(prng.threefry2x32(PRNGKey([0, 42]), 0, 5))) == FOLD_IN[("42", 5)]


# ------------------------------------------------------------------ keys
@pytest.mark.parametrize("seed", sorted(KEY_INT))
def test_key_from_python_int_as_jax_default_config(seed):
    key = prng.key(seed)
    assert key.dtype == np.uint32 and key.shape == (2,)
    assert words(key) == KEY_INT[seed]


@pytest.mark.parametrize(("dtype", "seed"), sorted(KEY_TYPED))
def test_key_from_typed_seed(dtype, seed):
    assert words(prng.key(np.array(seed, dtype))) == KEY_TYPED[(dtype, seed)]
    assert words(prng.key(seed, dtype)) == KEY_TYPED[(dtype, seed)]


@pytest.mark.parametrize("seed", sorted(KEY_INT64))
def test_key_from_int64_seed_as_jax_x64(seed):
    assert words(prng.key(np.int64(seed))) == KEY_INT64[seed]
    assert words(prng.key(seed, "int64")) == KEY_INT64[seed]


def test_key_from_uint64_seed():
    assert words(prng.key(np.uint64(2**64 - 1))) == KEY_UINT64_MAX


@pytest.mark.parametrize("seed", [1.5, True, "3", np.array([1, 2]), np.array(1.0)])
def test_key_rejects_non_integer_seeds(seed):
    with pytest.raises(TypeError):
        prng.key(seed)


def test_key_rejects_python_int_beyond_int64_as_jax():
    with pytest.raises(OverflowError):
        prng.key(2**63)


@pytest.mark.parametrize(("name", "num"), sorted(SPLIT))
def test_split(name, num):
    keys = prng.split(NAMED_KEYS[name], num)
    assert keys.shape == (num, 2) and keys.dtype == np.uint32
    assert words(keys) == SPLIT[(name, num)]


def test_split_default_num_and_prefix_property():
    # partitionable mode: key i of a split only depends on i
    assert words(prng.split(K0)) == SPLIT[("0", 2)]
    assert words(prng.split(K0, 3)[:2]) == SPLIT[("0", 2)]
    assert prng.split(K0, 0).shape == (0, 2)


@pytest.mark.parametrize(("name", "data"), sorted(FOLD_IN))
def test_fold_in(name, data):
    assert words(prng.fold_in(NAMED_KEYS[name], data)) == FOLD_IN[(name, data)]
    assert words(prng.fold_in(NAMED_KEYS[name], np.uint32(data))) == FOLD_IN[(name, data)]


def test_fold_in_wraps_integers_modulo_2_32():
    assert words(prng.fold_in(K0, np.int32(-1))) == FOLD_IN_INT32_MINUS_1
    assert words(prng.fold_in(K0, np.array(2**32 - 1, np.int64))) == FOLD_IN_INT32_MINUS_1
    assert words(prng.fold_in(K0, -1)) == FOLD_IN_INT32_MINUS_1


@pytest.mark.parametrize("data", [1.0, True, np.array([1, 2])])
def test_fold_in_rejects_non_integers(data):
    with pytest.raises(TypeError):
        prng.fold_in(K0, data)


# ------------------------------------------------------------------ bits
@pytest.mark.parametrize(("width", "shape"), sorted(BITS))
def test_random_bits(width, shape):
    key = K0 if (width, shape) != (32, (2, 3)) else K42
    bits = prng.random_bits(key, width, shape)
    assert bits.dtype == np.dtype(f"uint{width}") and bits.shape == shape
    assert words(bits) == BITS[(width, shape)]


def test_random_bits_64():
    bits = prng.random_bits(K0, 64, (4,))
    assert bits.dtype == np.uint64
    assert words(bits) == BITS64


def test_random_bits_scalar_shape_is_a_0d_array():
    bits = prng.random_bits(K0, 32, ())
    assert isinstance(bits, np.ndarray) and bits.shape == ()
    assert int(bits) == BITS[(32, (8,))][0]


# -------------------------------------------------------------- samplers
@pytest.mark.parametrize(("dtype", "low", "high"), sorted(UNIFORM))
def test_uniform(dtype, low, high):
    key, shape = (K0, (8,)) if (low, high) == (0.0, 1.0) else (K42, (2, 3))
    values = prng.uniform(key, shape, dtype, low, high)
    expected = from_hex(UNIFORM[(dtype, low, high)], dtype).reshape(shape)
    assert_same_bits(values, expected)
    assert np.all((values >= low) & (values < high))


@pytest.mark.parametrize(("low", "high"), sorted(UNIFORM64))
def test_uniform_float64(low, high):
    key = K0 if (low, high) == (0.0, 1.0) else K42
    assert_same_bits(
        prng.uniform(key, (6,), "float64", low, high), from_hex(UNIFORM64[(low, high)], "float64")
    )


def test_uniform_rejects_integer_dtypes():
    with pytest.raises(TypeError):
        prng.uniform(K0, (2,), "int32")


@pytest.mark.parametrize("p", sorted(BERNOULLI))
def test_bernoulli(p):
    mask = prng.bernoulli(K0, p, (4, 8))
    assert mask.dtype == np.bool_ and mask.shape == (4, 8)
    assert "".join("1" if v else "0" for v in mask.reshape(-1)) == BERNOULLI[p]


@pytest.mark.parametrize(
    ("name", "key", "shape", "dtype", "max_ulp"),
    [
        ("float32", K0, (16,), "float32", 2),
        ("float32 (3, 5) key 42", K42, (3, 5), "float32", 2),
        ("float16", K0, (8,), "float16", 2),
    ],
)
def test_normal_within_2_ulp(name, key, shape, dtype, max_ulp):
    values = prng.normal(key, shape, dtype)
    expected = from_hex(NORMAL[name], dtype).reshape(shape)
    assert values.dtype == np.dtype(dtype) and values.shape == shape
    assert ulp_distance(values, expected) <= max_ulp


def test_normal_float64_within_a_few_ulp():
    # numpy's float64 log may differ from the libm log XLA calls by an ulp
    values = prng.normal(K0, (6,), "float64")
    assert ulp_distance(values, from_hex(NORMAL64, "float64")) <= 4


def test_erfinv_edges_as_xla():
    x = np.array([-1.0, 1.0, 0.0, 0.5, 1.5], np.float32)
    result = prng.erfinv(x)
    assert result.dtype == np.float32
    assert list(result[:3]) == [-np.inf, np.inf, 0.0]
    assert abs(float(result[3]) - 0.4769362762044699) < 1e-7
    assert np.isnan(result[4])


# ---------------------------------------------------------------- dropout
def dropout_input(shape: tuple[int, ...], dtype: str) -> np.ndarray:
    """The x of make_prng_vectors.dropout_input."""
    n = int(np.prod(shape))
    return (np.arange(n, dtype=np.float64).reshape(shape) * 0.375 - 2.0).astype(dtype)


@pytest.mark.parametrize(("dtype", "shape", "rate"), sorted(DROPOUT_KEY42))
def test_dropout_as_flax(dtype, shape, rate):
    x = dropout_input(shape, dtype)
    expected = from_hex(DROPOUT_KEY42[(dtype, shape, rate)], dtype).reshape(shape)
    assert_same_bits(prng.dropout(K42, x, rate), expected)


def test_dropout_mask_is_bernoulli_of_keep():
    x = dropout_input((3, 4), "float32")
    y = prng.dropout(K42, x, 0.5)
    np.testing.assert_array_equal(y != 0, prng.bernoulli(K42, 0.5, (3, 4)) & (x != 0))


def test_dropout_edge_rates_as_flax():
    x = dropout_input((3, 4), "float32")
    assert prng.dropout(K42, x, 0.0) is x  # flax returns its input
    zeros = prng.dropout(K42, x, 1.0)
    assert zeros.dtype == np.float32 and not zeros.any()
    for rate in (-0.1, 1.5):
        with pytest.raises(ValueError):
            prng.dropout(K42, x, rate)


def test_reference_versions():
    assert VERSIONS == {"jax": "0.10.2", "flax": "0.12.8"}
