"""Elementwise, broadcasting, comparison and logic operators: their type
relations (static, symbolic and ``?`` shapes, no dtype promotion) and their
numpy rules, checked against independent numpy formulas."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import effir  # noqa: F401  (registers the operators)
from effir.ir.types import IncompleteType, TupleType
from effir.ops.elementwise import BINARY, COMPARISON
from effir.ops.relations import NotReady, OpFailure, RelationError

from .rules import T, assert_type, rel
from .rules import run_tensor as run

# ------------------------------------------------------------------ unary
FLOAT_UNARY = {
    "exp": lambda x: np.exp(x),
    "log": lambda x: np.log(x),
    "sqrt": lambda x: np.sqrt(x),
    "tanh": lambda x: np.tanh(x),
    "sigmoid": lambda x: 1.0 / (1.0 + np.exp(-x)),
    "sin": lambda x: np.sin(x),
    "cos": lambda x: np.cos(x),
    "floor": lambda x: np.floor(x),
    "ceil": lambda x: np.ceil(x),
}


@pytest.mark.parametrize("name", ["negative", *FLOAT_UNARY, "nn.relu"])
@pytest.mark.parametrize("shape", [(2, 3), ("n", 3), ("?", "m"), ()])
def test_unary_relation_keeps_the_type(name, shape):
    assert_type(rel(name, T(shape)), shape, "float32")


def test_logical_not_relation():
    assert_type(rel("logical_not", T(("n", "?"), "bool")), ("n", "?"), "bool")
    with pytest.raises(RelationError, match="must have a bool dtype, got float32"):
        rel("logical_not", T((2,)))


@pytest.mark.parametrize("name", FLOAT_UNARY)
@pytest.mark.parametrize("dtype", ["int32", "uint8", "bool"])
def test_float_unary_rejects_other_dtypes(name, dtype):
    with pytest.raises(RelationError, match=f"^{name}: .*must have a float dtype, got {dtype}"):
        rel(name, T((2,), dtype))


@pytest.mark.parametrize("name", ["negative", "nn.relu", "abs"])
def test_numeric_unary_rejects_bool_but_takes_ints(name):
    assert_type(rel(name, T((2,), "int8")), (2,), "int8")
    with pytest.raises(RelationError, match="got bool"):
        rel(name, T((2,), "bool"))


def test_unary_needs_a_tensor_and_waits_for_unknown_types():
    with pytest.raises(RelationError, match="must be a tensor"):
        rel("exp", TupleType((T((2,)),)))
    with pytest.raises(NotReady):
        rel("exp", IncompleteType())


@pytest.mark.parametrize("name", FLOAT_UNARY)
@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_float_unary_values(name, dtype):
    x = np.array([[0.25, 1.0, 2.5], [3.0, 0.5, 7.0]], dtype=dtype)
    out = run(name, x)
    assert out.dtype == np.dtype(dtype)
    expected = FLOAT_UNARY[name](x.astype(np.float64))
    tolerance = 2e-3 if dtype == "float16" else 1e-6
    np.testing.assert_allclose(out.astype(np.float64), expected, rtol=tolerance)


@pytest.mark.filterwarnings("error")
def test_sigmoid_saturates_without_nan():
    for dtype in ("float16", "float32"):
        out = run("sigmoid", np.array([-1e4, -100.0, 0.0, 100.0, 1e4], dtype=dtype))
        np.testing.assert_array_equal(out, np.array([0, 0, 0.5, 1, 1], dtype=dtype))


@pytest.mark.filterwarnings("error")
def test_log_and_sqrt_follow_ieee():
    out = run("log", np.array([0.0, -1.0], dtype=np.float32))
    assert out[0] == -np.inf and np.isnan(out[1])
    assert np.isnan(run("sqrt", np.array([-4.0], dtype=np.float32))[0])


def test_negative_relu_and_logical_not_values():
    x = np.array([-3, 0, 5], dtype=np.int16)
    np.testing.assert_array_equal(run("negative", x), np.array([3, 0, -5], dtype=np.int16))
    assert run("negative", x).dtype == np.int16
    np.testing.assert_array_equal(run("nn.relu", x), np.array([0, 0, 5], dtype=np.int16))
    f = np.array([-1.5, 2.0], dtype=np.float16)
    out = run("nn.relu", f)
    assert out.dtype == np.float16 and list(out) == [0.0, 2.0]
    b = np.array([True, False])
    np.testing.assert_array_equal(run("logical_not", b), np.array([False, True]))


def test_scalar_results_are_0d_arrays():
    out = run("exp", np.asarray(np.float32(0.0)))
    assert out.shape == () and out.dtype == np.float32 and out == 1.0
    out = run("add", np.asarray(np.int32(2)), np.asarray(np.int32(3)))
    assert type(out) is np.ndarray and out.shape == () and out.dtype == np.int32


# ----------------------------------------------------------------- binary
@pytest.mark.parametrize(
    ("a", "b", "result"),
    [
        ((2, 1, 3), (4, 3), (2, 4, 3)),
        ((), (2, 3), (2, 3)),
        (("n", 1), (1, "m"), ("n", "m")),
        (("n", 3), ("n", 3), ("n", 3)),
        (("n", 3), ("?", 3), ("n", 3)),
        (("?",), (5,), (5,)),
        (("?",), (1,), ("?",)),
        (("?",), ("?",), ("?",)),
        ((1,), ("k",), ("k",)),
    ],
)
@pytest.mark.parametrize("name", ["add", "maximum", "power"])
def test_binary_relation_broadcasts(name, a, b, result):
    assert_type(rel(name, T(a), T(b)), result, "float32")
    assert_type(rel(name, T(b), T(a)), result, "float32")


@pytest.mark.parametrize(
    ("a", "b"), [((2, 3), (4,)), (("n",), ("m",)), (("n",), (3,)), ((2, "n"), (3, 1))]
)
def test_binary_relation_rejects_shapes_that_do_not_broadcast(a, b):
    with pytest.raises(RelationError, match="^subtract: shapes .* do not broadcast"):
        rel("subtract", T(a), T(b))


def test_binary_relation_never_promotes():
    with pytest.raises(RelationError, match="same dtype, got float32, float16"):
        rel("add", T((2,)), T((2,), "float16"))
    with pytest.raises(RelationError, match="same dtype, got int32, int64"):
        rel("less", T((2,), "int32"), T((2,), "int64"))
    with pytest.raises(RelationError, match="got bool"):
        rel("multiply", T((2,), "bool"), T((2,), "bool"))
    with pytest.raises(NotReady):
        rel("add", T((2,)), IncompleteType())


@pytest.mark.parametrize("name", BINARY)
@pytest.mark.parametrize("dtype", ["int8", "uint16", "float16", "float64"])
def test_binary_relation_keeps_numeric_dtypes(name, dtype):
    assert_type(rel(name, T((2,), dtype), T(("?",), dtype)), (2,), dtype)


@pytest.mark.parametrize("name", COMPARISON)
def test_comparisons_give_bool(name):
    assert_type(rel(name, T(("n", 1)), T((3,))), ("n", 3), "bool")
    assert_type(rel(name, T((2,), "bool"), T((2,), "bool")), (2,), "bool")


@pytest.mark.parametrize("name", ["logical_and", "logical_or"])
def test_logical_ops_take_bool_only(name):
    assert_type(rel(name, T((2, 1), "bool"), T(("n",), "bool")), (2, "n"), "bool")
    with pytest.raises(RelationError, match="must have a bool dtype, got int32"):
        rel(name, T((2,), "int32"), T((2,), "int32"))


ARITHMETIC = {
    "add": lambda a, b: a + b,
    "subtract": lambda a, b: a - b,
    "multiply": lambda a, b: a * b,
    "divide": lambda a, b: a / b,
    "power": lambda a, b: a**b,
    "maximum": lambda a, b: np.where(a > b, a, b),
    "minimum": lambda a, b: np.where(a < b, a, b),
    "mod": lambda a, b: a - np.floor(a / b) * b,
    "fmod": lambda a, b: a - np.trunc(a / b) * b,
}


@pytest.mark.parametrize("name", BINARY)
@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_float_binary_values_keep_the_dtype(name, dtype):
    a = np.array([[0.5, 1.5, 2.0]], dtype=dtype)
    b = np.array([[2.0], [0.25]], dtype=dtype)
    out = run(name, a, b)
    assert out.dtype == np.dtype(dtype) and out.shape == (2, 3)
    expected = ARITHMETIC[name](a.astype(np.float64), b.astype(np.float64))
    np.testing.assert_allclose(out.astype(np.float64), expected, rtol=1e-3)


@pytest.mark.filterwarnings("error")
def test_float_division_by_zero_is_ieee_and_silent():
    out = run("divide", np.array([1.0, -1.0, 0.0], np.float32), np.zeros(3, np.float32))
    assert out.dtype == np.float32
    assert out[0] == np.inf and out[1] == -np.inf and np.isnan(out[2])


def test_integer_divide_truncates_toward_zero():
    a = np.array([7, -7, 7, -7, 6, -6, 0], dtype=np.int32)
    b = np.array([2, 2, -2, -2, 3, -3, -5], dtype=np.int32)
    out = run("divide", a, b)
    assert out.dtype == np.int32
    expected = [int(x / y) for x, y in zip(a.tolist(), b.tolist(), strict=True)]
    assert out.tolist() == expected == [3, -3, -3, 3, 2, 2, 0]


@given(
    st.lists(st.integers(-128, 127), min_size=1, max_size=8),
    st.lists(st.integers(-128, 127).filter(bool), min_size=1, max_size=8),
)
@settings(max_examples=50, deadline=None)
def test_integer_divide_matches_c(xs, ys):
    n = min(len(xs), len(ys))
    a, b = np.array(xs[:n], np.int8), np.array(ys[:n], np.int8)
    expected = [_c_div(x, y, 8) for x, y in zip(xs[:n], ys[:n], strict=True)]
    assert run("divide", a, b).tolist() == expected


def _c_div(x, y, bits):
    """C's truncating division, wrapped to ``bits`` (only -128 / -1 wraps)."""
    q = abs(x) // abs(y) * (1 if (x < 0) == (y < 0) else -1)
    half = 1 << (bits - 1)
    return (q + half) % (1 << bits) - half


def test_integer_divide_edge_cases():
    low = np.iinfo(np.int32).min
    assert run("divide", np.array([low], np.int32), np.array([-1], np.int32)).tolist() == [low]
    out = run("divide", np.array([7, 200], np.uint8), np.array([2, 3], np.uint8))
    assert out.dtype == np.uint8 and out.tolist() == [3, 66]
    with pytest.raises(OpFailure, match="integer division by zero"):
        run("divide", np.array([1, 2], np.int32), np.array([1, 0], np.int32))
    with pytest.raises(OpFailure, match="integer division by zero"):
        run("divide", np.array([[1], [2]], np.int64), np.array(0, np.int64))


def test_integer_power():
    out = run("power", np.array([2, -3, 5, 0], np.int32), np.array([10, 3, 0, 0], np.int32))
    assert out.dtype == np.int32 and out.tolist() == [1024, -27, 1, 1]
    with pytest.raises(OpFailure, match="negative exponent"):
        run("power", np.array([2, 2], np.int32), np.array([1, -1], np.int32))
    # unsigned exponents are never negative; the result wraps like C
    assert run("power", np.array([3], np.uint8), np.array([5], np.uint8)).tolist() == [243]
    assert run("power", np.array([3], np.int8), np.array([5], np.int8)).tolist() == [-13]


def test_integer_arithmetic_wraps():
    a = np.array([127, -128], np.int8)
    assert run("add", a, np.array([1, -1], np.int8)).tolist() == [-128, 127]
    assert run("multiply", a, np.array([2, 2], np.int8)).tolist() == [-2, 0]


def test_maximum_and_minimum_propagate_nan():
    a = np.array([np.nan, 1.0], np.float32)
    b = np.array([0.0, np.nan], np.float32)
    assert np.isnan(run("maximum", a, b)).all() and np.isnan(run("minimum", a, b)).all()


COMPARE = {
    "equal": lambda a, b: a == b,
    "not_equal": lambda a, b: a != b,
    "less": lambda a, b: a < b,
    "less_equal": lambda a, b: a <= b,
    "greater": lambda a, b: a > b,
    "greater_equal": lambda a, b: a >= b,
}


@pytest.mark.parametrize("name", COMPARISON)
def test_comparison_values(name):
    a = np.array([[1.0, 2.0, np.nan]], np.float32)
    b = np.array([[2.0], [1.0], [np.nan]], np.float32)
    out = run(name, a, b)
    assert out.dtype == np.bool_ and out.shape == (3, 3)
    expected = [
        [COMPARE[name](float(x), float(y)) for x in a[0]] for y in b[:, 0]
    ]  # Python floats: IEEE comparisons, NaN unordered
    assert out.tolist() == expected


def test_logical_values():
    a = np.array([True, True, False, False])
    b = np.array([True, False, True, False])
    assert run("logical_and", a, b).tolist() == [True, False, False, False]
    assert run("logical_or", a, b).tolist() == [True, True, True, False]


def test_binary_values_with_shapes_that_fail_at_run_time():
    with pytest.raises(OpFailure, match="do not broadcast"):
        run("add", np.zeros(2, np.float32), np.zeros(3, np.float32))


# ------------------------------------------------- broadcasting properties
DTYPE_FOR = {"float32": np.float32, "int32": np.int32}


@given(
    name=st.sampled_from(BINARY + COMPARISON),
    shapes=hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=4, max_side=4),
    hide=st.lists(st.booleans(), min_size=8, max_size=8),
    data=st.data(),
)
@settings(max_examples=150, deadline=None)
def test_relation_shape_is_numpy_shape(name, shapes, hide, data):
    a_shape, b_shape = shapes.input_shapes
    dtype = data.draw(st.sampled_from(["float32", "int32"]))
    a = np.ones(a_shape, DTYPE_FOR[dtype]) * 2
    b = np.ones(b_shape, DTYPE_FOR[dtype])
    out = run(name, a, b)
    t = rel(name, T(a_shape, dtype), T(b_shape, dtype))
    assert t.shape == out.shape == shapes.result_shape
    assert out.dtype == np.dtype(t.dtype)
    # Hiding some dimensions behind `?` keeps the relation compatible with the
    # values: each result dimension is `?` or the actual size.
    flags = iter(hide)
    a_t = tuple("?" if next(flags) else d for d in a_shape)
    b_t = tuple("?" if next(flags) else d for d in b_shape)
    hidden = rel(name, T(a_t, dtype), T(b_t, dtype))
    assert len(hidden.shape) == out.ndim
    for d, actual in zip(hidden.shape, out.shape, strict=True):
        assert d == "?" or d == actual


@given(hnp.mutually_broadcastable_shapes(num_shapes=3, min_dims=0, max_dims=4, max_side=3))
@settings(max_examples=60, deadline=None)
def test_where_relation_shape_is_numpy_shape(shapes):
    c_shape, x_shape, y_shape = shapes.input_shapes
    cond = np.indices(c_shape).sum(axis=0) % 2 == 0 if c_shape else np.asarray(True)
    x = np.full(x_shape, 1.0, np.float32)
    y = np.full(y_shape, 2.0, np.float32)
    out = run("where", cond, x, y)
    t = rel("where", T(c_shape, "bool"), T(x_shape), T(y_shape))
    assert t.shape == out.shape == shapes.result_shape and out.dtype == np.float32
    np.testing.assert_array_equal(out, np.broadcast_to(np.where(cond, 1.0, 2.0), out.shape))


# ------------------------------------------------------------ where, cast
def test_where_relation():
    t = rel("where", T(("n", 1), "bool"), T((1, 4), "int8"), T(("?", 4), "int8"))
    assert_type(t, ("n", 4), "int8")
    with pytest.raises(RelationError, match="the condition must have a bool dtype, got float32"):
        rel("where", T((2,)), T((2,)), T((2,)))
    with pytest.raises(RelationError, match="x and y must have the same dtype, got float32, int32"):
        rel("where", T((2,), "bool"), T((2,)), T((2,), "int32"))
    with pytest.raises(RelationError, match="do not broadcast"):
        rel("where", T((3,), "bool"), T((2,)), T((2,)))


def test_where_values():
    cond = np.array([True, False, True])
    out = run("where", cond, np.array([1, 2, 3], np.int64), np.array(0, np.int64))
    assert out.dtype == np.int64 and out.tolist() == [1, 0, 3]


def test_cast_relation():
    assert_type(rel("cast", T(("n", "?", 3)), dtype="int8"), ("n", "?", 3), "int8")
    assert_type(rel("cast", T((), "bool"), dtype="float16"), (), "float16")


@pytest.mark.filterwarnings("error")
def test_cast_values():
    x = np.array([-1.7, -0.5, 0.0, 0.5, 2.9], np.float32)
    out = run("cast", x, dtype="int32")
    assert out.dtype == np.int32 and out.tolist() == [-1, 0, 0, 0, 2]
    assert run("cast", x, dtype="bool").tolist() == [True, True, False, True, True]
    assert run("cast", np.array([True, False]), dtype="float16").tolist() == [1.0, 0.0]
    assert run("cast", np.array([300], np.int32), dtype="uint8").tolist() == [44]
    out = run("cast", np.asarray(np.float64(1.5)), dtype="float32")
    assert out.shape == () and out.dtype == np.float32
    # out of range: an undefined value, but no error and no warning
    assert run("cast", np.array([np.nan, 1e20], np.float32), dtype="int8").dtype == np.int8


def test_float16_sigmoid_keeps_small_values():
    # exp(12) overflows float16; computed in float32 the result is representable.
    out = run("sigmoid", np.array([-12.0], np.float16))
    assert out.dtype == np.float16
    np.testing.assert_allclose(out.astype(np.float64), 1 / (1 + np.exp(12.0)), rtol=1e-2)


# ------------------------------------------------- abs, mod, fmod (ONNX's)
def test_abs_wraps_like_negative():
    out = run("abs", np.array([-128, -3, 0, 7, 127], "int8"))
    np.testing.assert_array_equal(out, np.array([-128, 3, 0, 7, 127], "int8"))
    np.testing.assert_array_equal(run("abs", np.array([-0.0, -2.5, np.nan])), [0.0, 2.5, np.nan])
    np.testing.assert_array_equal(run("abs", np.array([0, 200], "uint8")), [0, 200])


@pytest.mark.parametrize("name", ["mod", "fmod"])
@pytest.mark.parametrize("dtype", ["int8", "int32", "int64", "uint16", "float32", "float64"])
def test_mod_relation(name, dtype):
    assert_type(rel(name, T((2, 1), dtype), T((3,), dtype)), (2, 3), dtype)
    with pytest.raises(RelationError, match="the same dtype"):
        rel(name, T((2,), dtype), T((2,), "int16"))


def test_mod_takes_the_divisor_sign_and_fmod_the_dividend_sign():
    a = np.array([-7, 7, -7, 7, -128], "int8")
    b = np.array([3, -3, -3, 3, -1], "int8")
    np.testing.assert_array_equal(run("mod", a, b), [2, -2, -1, 1, 0])
    np.testing.assert_array_equal(run("fmod", a, b), [-1, 1, -1, 1, 0])
    x = np.array([-5.5, 5.5, -0.0, 0.0, np.inf, 3.0, -3.0, 2.0], "float32")
    y = np.array([2.0, -2.0, 3.0, -3.0, 2.0, np.inf, np.inf, 0.0], "float32")
    np.testing.assert_array_equal(
        run("mod", x, y), [0.5, -0.5, 0.0, -0.0, np.nan, 3.0, np.inf, np.nan]
    )
    assert np.signbit(run("mod", x, y)[3]) and not np.signbit(run("mod", x, y)[2])
    np.testing.assert_array_equal(run("fmod", x, y), [-1.5, 1.5, -0.0, 0.0, np.nan, 3, -3, np.nan])


@pytest.mark.parametrize("name", ["mod", "fmod"])
def test_integer_modulo_by_zero_fails(name):
    with pytest.raises(OpFailure, match="integer modulo by zero"):
        run(name, np.array([1, 2], "int32"), np.array([1, 0], "int32"))
