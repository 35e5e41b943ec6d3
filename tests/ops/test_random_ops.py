"""Type relations and numpy rules of the random operators (effir/ops/random.py).

The expected values come from JAX 0.10.2 / flax 0.12.8 in JAX's default
configuration, the same vectors as tests/runtime/test_prng.py (see there and
tests/runtime/make_prng_vectors.py for how they were computed); JAX itself is
not needed."""

from __future__ import annotations

import numpy as np
import pytest

import effir  # noqa: F401  (registers the operators)
from effir.ir.types import IncompleteType, KeyType, TensorType, TupleType
from effir.ops.relations import NotReady, OpFailure, RelationError
from effir.runtime import prng
from effir.runtime.values import PRNGKey

from .rules import T, rel, run

KEY = KeyType()


def assert_tensor_type(t, shape, dtype):
    assert isinstance(t, TensorType)
    assert (t.shape, t.dtype) == (tuple(shape), dtype)


def scalar(value, dtype):
    return np.array(value, dtype=dtype)


K0 = PRNGKey([0, 0])  # random.key(0)
K42 = PRNGKey([0, 42])  # random.key(42)


# ============================================================ type relations
# ------------------------------------------------------------- random.key
@pytest.mark.parametrize("dtype", ["int8", "int32", "int64", "uint32", "uint64"])
def test_key_relation(dtype):
    assert isinstance(rel("random.key", T((), dtype)), KeyType)


@pytest.mark.parametrize(
    ("seed", "message"),
    [
        (T((), "float32"), "the seed of random.key must have a signed integer or unsigned"),
        (T((), "bool"), "the seed of random.key must have a signed integer or unsigned"),
        (T((2,), "int32"), r"the seed of random.key must be a scalar \(rank 0\)"),
        (KEY, "the seed of random.key must be a tensor, got Key"),
    ],
)
def test_key_relation_errors(seed, message):
    with pytest.raises(RelationError, match=message):
        rel("random.key", seed)


def test_key_relation_waits_for_its_seed():
    with pytest.raises(NotReady):
        rel("random.key", IncompleteType())


# ----------------------------------------------------------- random.split
@pytest.mark.parametrize("num", [0, 1, 2, 3])
def test_split_relation(num):
    t = rel("random.split", KEY, num=num)
    assert isinstance(t, TupleType) and len(t.fields) == num
    assert all(isinstance(f, KeyType) for f in t.fields)


def test_split_relation_default_num_is_2():
    assert len(rel("random.split", KEY).fields) == 2


def test_split_relation_errors():
    with pytest.raises(RelationError) as err:
        rel("random.split", T((2,), "uint32"))
    assert err.value.message == "random.split expects a Key, got Tensor[(2), uint32]"
    with pytest.raises(RelationError, match="random.split: num must be >= 0, got -1"):
        rel("random.split", KEY, num=-1)
    with pytest.raises(NotReady):
        rel("random.split", IncompleteType())


# --------------------------------------------------------- random.fold_in
def test_fold_in_relation():
    assert isinstance(rel("random.fold_in", KEY, T((), "int32")), KeyType)
    assert isinstance(rel("random.fold_in", KEY, T((), "uint64")), KeyType)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((T((), "int32"), T((), "int32")), "random.fold_in expects a Key, got int32"),
        ((KEY, T((), "float32")), "the data of random.fold_in must have a signed integer"),
        ((KEY, T((3,), "int32")), "the data of random.fold_in must be a scalar"),
        ((KEY, KEY), "the data of random.fold_in must be a tensor, got Key"),
    ],
)
def test_fold_in_relation_errors(args, message):
    with pytest.raises(RelationError, match=message):
        rel("random.fold_in", *args)


@pytest.mark.parametrize("args", [(IncompleteType(), T((), "int32")), (KEY, IncompleteType())])
def test_fold_in_relation_waits(args):
    with pytest.raises(NotReady):
        rel("random.fold_in", *args)


# ------------------------------------------- random.uniform, random.normal
@pytest.mark.parametrize("name", ["random.uniform", "random.normal"])
def test_sampler_relations(name):
    assert_tensor_type(rel(name, KEY), (), "float32")
    assert_tensor_type(rel(name, KEY, shape=[2, 3]), (2, 3), "float32")
    assert_tensor_type(rel(name, KEY, shape=[4], dtype="float16"), (4,), "float16")
    assert_tensor_type(rel(name, KEY, shape=[0, 5], dtype="float64"), (0, 5), "float64")


def test_uniform_relation_takes_its_range():
    assert_tensor_type(rel("random.uniform", KEY, shape=[2], low=-3, high=5.5), (2,), "float32")


@pytest.mark.parametrize("name", ["random.uniform", "random.normal"])
def test_sampler_relation_errors(name):
    with pytest.raises(RelationError, match=f"{name} draws floats: dtype must be a float"):
        rel(name, KEY, dtype="int32")
    with pytest.raises(RelationError, match=rf"negative size -1 in the shape of {name}"):
        rel(name, KEY, shape=[2, -1])
    with pytest.raises(RelationError, match=rf"{name} expects a Key, got Tensor\[\(2\), uint32\]"):
        rel(name, T((2,), "uint32"))
    with pytest.raises(NotReady):
        rel(name, IncompleteType())


# -------------------------------------------------------- random.bernoulli
def test_bernoulli_relation():
    assert_tensor_type(rel("random.bernoulli", KEY), (), "bool")
    assert_tensor_type(rel("random.bernoulli", KEY, p=0.25, shape=[3, 4]), (3, 4), "bool")
    assert_tensor_type(rel("random.bernoulli", KEY, p=1, shape=[1]), (1,), "bool")


@pytest.mark.parametrize("p", [-0.5, 1.5, float("nan")])
def test_bernoulli_relation_rejects_bad_p(p):
    with pytest.raises(RelationError, match=r"random.bernoulli: p must be in \[0, 1\]"):
        rel("random.bernoulli", KEY, p=p)


def test_bernoulli_relation_errors():
    with pytest.raises(RelationError, match="random.bernoulli expects a Key, got float32"):
        rel("random.bernoulli", T((), "float32"))
    with pytest.raises(RelationError, match="negative size -2 in the shape of random.bernoulli"):
        rel("random.bernoulli", KEY, shape=[-2])


# ---------------------------------------------------------- random.dropout
@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
@pytest.mark.parametrize("rate", [0.0, 0.1, 0.5, 1.0])
def test_dropout_relation_is_the_input_type(dtype, rate):
    x = T(("n", 4, "?"), dtype)
    assert_tensor_type(rel("random.dropout", x, KEY, rate=rate), ("n", 4, "?"), dtype)


@pytest.mark.parametrize(
    ("args", "attrs", "message"),
    [
        ((T((2,), "int32"), KEY), {}, "the input of random.dropout must have a float dtype"),
        ((KEY, KEY), {}, "the input of random.dropout must be a tensor, got Key"),
        ((T((2,)), T((2,), "uint32")), {}, "random.dropout expects a Key, got Tensor"),
        ((T((2,)), KEY), {"rate": 1.5}, r"random.dropout: rate must be in \[0, 1\], got 1.5"),
        ((T((2,)), KEY), {"rate": -0.1}, r"random.dropout: rate must be in \[0, 1\], got -0.1"),
    ],
)
def test_dropout_relation_errors(args, attrs, message):
    with pytest.raises(RelationError, match=message):
        rel("random.dropout", *args, **attrs)


@pytest.mark.parametrize("args", [(IncompleteType(), KEY), (T((2,)), IncompleteType())])
def test_dropout_relation_waits(args):
    with pytest.raises(NotReady):
        rel("random.dropout", *args)


# =============================================================== numpy rules
@pytest.mark.parametrize(
    ("seed", "dtype", "expected"),
    [
        (0, "int32", [0, 0]),
        (42, "int32", [0, 42]),
        (-1, "int32", [0, 2**32 - 1]),  # jax.random.PRNGKey(-1)
        (2**32 - 1, "uint32", [0, 2**32 - 1]),
        (-1, "int64", [2**32 - 1, 2**32 - 1]),  # an int64 seed, as JAX with x64
        (2**40 + 7, "int64", [256, 7]),
        (-1, "int8", [0, 2**32 - 1]),
    ],
)
def test_key_numpy(seed, dtype, expected):
    key = run("random.key", scalar(seed, dtype))
    assert isinstance(key, PRNGKey)
    assert key == PRNGKey(expected)


def test_split_numpy():
    keys = run("random.split", K42, num=3)
    assert isinstance(keys, tuple) and all(isinstance(k, PRNGKey) for k in keys)
    assert keys == (
        PRNGKey([1832780943, 270669613]),
        PRNGKey([64467757, 2916123636]),
        PRNGKey([2465931498, 255383827]),
    )
    assert run("random.split", K42) == keys[:2]
    assert run("random.split", K42, num=0) == ()


def test_fold_in_numpy():
    assert run("random.fold_in", K0, scalar(7, "uint32")) == PRNGKey([2716826189, 292468403])
    minus_one = PRNGKey([743310391, 3789761811])  # fold_in(key(0), int32(-1)) in JAX
    assert run("random.fold_in", K0, scalar(-1, "int32")) == minus_one
    assert run("random.fold_in", K0, scalar(2**32 - 1, "int64")) == minus_one


def test_uniform_numpy():
    values = run("random.uniform", K0, shape=[8])
    assert values.dtype == np.float32 and values.shape == (8,)
    assert [float(v).hex() for v in values[:3]] == [
        "0x1.e5349c0000000p-1",
        "0x1.f5086c0000000p-1",
        "0x1.5444380000000p-2",
    ]


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_uniform_numpy_dtype_and_range(dtype):
    values = run("random.uniform", K42, shape=[4, 5], dtype=dtype, low=-2.0, high=3.0)
    assert values.dtype == np.dtype(dtype) and values.shape == (4, 5)
    assert np.all((values >= -2.0) & (values < 3.0))
    np.testing.assert_array_equal(values, prng.uniform(K42.data, (4, 5), dtype, -2.0, 3.0))


@pytest.mark.parametrize("name", ["random.uniform", "random.normal"])
def test_sampler_scalar_is_a_0d_array(name):
    value = run(name, K0)
    assert isinstance(value, np.ndarray) and value.shape == () and value.dtype == np.float32


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_normal_numpy(dtype):
    values = run("random.normal", K0, shape=[3, 4], dtype=dtype)
    assert values.dtype == np.dtype(dtype) and values.shape == (3, 4)
    np.testing.assert_array_equal(values, prng.normal(K0.data, (3, 4), dtype))


def test_normal_numpy_matches_jax():
    values = run("random.normal", K0, shape=[2])
    assert [float(v).hex() for v in values] == ["0x1.9f657a0000000p+0", "0x1.033be00000000p+1"]


@pytest.mark.parametrize(
    ("p", "expected"),
    [
        (0.1, "00000000000100000001100000000010"),
        (0.5, "00110110010100000001100000001110"),
        (1.0, "11111111111111111111111111111111"),
    ],
)
def test_bernoulli_numpy(p, expected):
    mask = run("random.bernoulli", K0, p=p, shape=[4, 8])
    assert mask.dtype == np.bool_ and mask.shape == (4, 8)
    assert "".join("1" if v else "0" for v in mask.reshape(-1)) == expected


def dropout_input(dtype="float32"):
    """The ramp of make_prng_vectors.dropout_input((3, 4), dtype)."""
    return (np.arange(12, dtype=np.float64).reshape(3, 4) * 0.375 - 2.0).astype(dtype)


def test_dropout_numpy_as_flax():
    x = dropout_input()
    half = run("random.dropout", x, K42, rate=0.5)
    assert half.dtype == np.float32 and half.shape == (3, 4)
    assert half.tolist() == [[-4.0, 0.0, 0.0, 0.0], [-1.0, 0.0, 0.5, 0.0], [0.0, 0.0, 3.5, 0.0]]
    tenth = run("random.dropout", x, K42, rate=0.1)
    assert [float(v).hex() for v in tenth[0]] == [
        "-0x1.1c71c80000000p+1",
        "-0x1.ce38e40000000p+0",
        "-0x1.638e3a0000000p+0",
        "-0x1.f1c71e0000000p-1",
    ]


@pytest.mark.parametrize("dtype", ["float16", "float64"])
def test_dropout_numpy_keeps_dtype(dtype):
    x = dropout_input(dtype)
    y = run("random.dropout", x, K42, rate=0.25)
    assert y.dtype == np.dtype(dtype) and y.shape == x.shape


def test_dropout_numpy_edge_rates():
    x = dropout_input()
    np.testing.assert_array_equal(run("random.dropout", x, K42, rate=0.0), x)
    zeros = run("random.dropout", x, K42, rate=1.0)
    assert zeros.dtype == np.float32 and not zeros.any()
    with pytest.raises(OpFailure, match=r"rate must be in \[0, 1\]"):
        run("random.dropout", x, K42, rate=2.0)


@pytest.mark.parametrize(
    ("name", "args"),
    [
        ("random.split", (np.array([0, 0], np.uint32),)),
        ("random.fold_in", (np.array([0, 0], np.uint32), scalar(1, "int32"))),
        ("random.uniform", ((0, 0),)),
        ("random.dropout", (np.zeros(2, np.float32), None)),
    ],
)
def test_numpy_rules_want_a_key_value(name, args):
    with pytest.raises(OpFailure, match="expects a PRNG key"):
        run(name, *args)
