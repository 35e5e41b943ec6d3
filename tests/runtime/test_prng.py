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
from tests.support.jax_prng_vectors import (
    BERNOULLI,
    DROPOUT_KEY42,
    FOLD_IN,
    FOLD_IN_INT32_MINUS_1,
    K0,
    K42,
    KEY_INT,
    KEY_INT64,
    NAMED_KEYS,
    NORMAL,
    NORMAL64,
    SPLIT,
    UNIFORM,
    UNIFORM64,
    dropout_input,
    from_hex,
    ulp_distance,
)

# fmt: off
VERSIONS = {"jax": "0.10.2", "flax": "0.12.8"}
KEY_TYPED = {
    ("int32", -1): [0, 4294967295],
    ("int32", -42): [0, 4294967254],
    ("uint32", 4294967295): [0, 4294967295],
    ("int8", -1): [0, 4294967295],
}
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
KEY_UINT64_MAX = [4294967295, 4294967295]
BITS64 = [7719171245655871230, 3989946895414531357, 17807037942121513089, 10597664315880824766]
# fmt: on


def words(array: np.ndarray) -> list[int]:
    return [int(v) for v in array.reshape(-1)]


def assert_same_bits(actual: np.ndarray, expected: np.ndarray) -> None:
    assert actual.dtype == expected.dtype
    assert actual.shape == expected.shape
    np.testing.assert_array_equal(
        actual.view(f"uint{8 * actual.itemsize}"), expected.view(f"uint{8 * expected.itemsize}")
    )


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
