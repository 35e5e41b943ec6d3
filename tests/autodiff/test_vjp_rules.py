"""Every operator's VJP rule (effir/ops/*.py, ``"vjp"``) against central
finite differences in float64, over shapes and attributes drawn by
hypothesis; every operator has a rule or is declared not differentiable;
a missing rule is a located DifferentiationError."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import effir  # noqa: F401  (registers the operators)

from .vjp_harness import check_vjp

F64 = np.float64
FEW = settings(max_examples=8)


def rand(rng, shape, low=None):
    x = rng.standard_normal(shape)
    if low is not None:
        x = np.abs(x) + low
    return np.asarray(x, dtype=F64)


shapes = st.lists(st.integers(1, 3), min_size=0, max_size=3).map(tuple)


@st.composite
def broadcast_pair(draw):
    """Two shapes that broadcast: a suffix of the other, with some 1s."""
    shape = draw(shapes)
    cut = draw(st.integers(0, len(shape)))
    other = list(shape[cut:])
    for i in range(len(other)):
        if draw(st.booleans()):
            other[i] = 1
    if draw(st.booleans()):
        return shape, tuple(other)
    return tuple(other), shape


# ---------------------------------------------------------------- elementwise
@pytest.mark.parametrize("name", ["negative", "exp", "tanh", "sigmoid", "nn.relu"])
@FEW
@given(shape=shapes, seed=st.integers(0, 2**16))
def test_unary(name, shape, seed):
    check_vjp(name, [rand(np.random.default_rng(seed), shape)], seed=seed)


@pytest.mark.parametrize("name", ["log", "sqrt"])
@FEW
@given(shape=shapes, seed=st.integers(0, 2**16))
def test_unary_positive(name, shape, seed):
    check_vjp(name, [rand(np.random.default_rng(seed), shape, low=0.5)], seed=seed)


@pytest.mark.parametrize("name", ["add", "subtract", "multiply", "maximum", "minimum"])
@FEW
@given(shapes=broadcast_pair(), seed=st.integers(0, 2**16))
def test_binary(name, shapes, seed):
    rng = np.random.default_rng(seed)
    check_vjp(name, [rand(rng, shapes[0]), rand(rng, shapes[1])], seed=seed)


@FEW
@given(shapes=broadcast_pair(), seed=st.integers(0, 2**16))
def test_divide_and_power(shapes, seed):
    rng = np.random.default_rng(seed)
    check_vjp("divide", [rand(rng, shapes[0]), rand(rng, shapes[1], low=0.5)], seed=seed)
    check_vjp("power", [rand(rng, shapes[0], low=0.5), rand(rng, shapes[1])], seed=seed)


def test_power_at_zero_has_no_nan():
    # JAX's convention: the exponent's slope at x = 0 is 0, not nan
    (gx, gy) = check_vjp("power", [np.zeros(3), np.full(3, 2.0)], directions=0)
    assert np.all(np.isfinite(gy)) and np.all(gy == 0)


def test_extremum_ties_split_evenly():
    x = np.array([1.0, 2.0, 3.0])
    y = np.array([1.0, 5.0, 0.0])
    for name in ("maximum", "minimum"):
        gx, gy = check_vjp(name, [x, y], directions=0)
        ct = np.random.default_rng(0).standard_normal(3)
        first = x > y if name == "maximum" else x < y
        np.testing.assert_allclose(gx, np.where(x == y, 0.5, np.where(first, 1, 0)) * ct)
        np.testing.assert_allclose(gx + gy, ct)


@FEW
@given(shapes=broadcast_pair(), seed=st.integers(0, 2**16))
def test_where(shapes, seed):
    rng = np.random.default_rng(seed)
    cond = rng.random(shapes[0]) < 0.5
    _, gx, gy = check_vjp("where", [cond, rand(rng, shapes[1]), rand(rng, shapes[0])], seed=seed)
    assert _ is None


def test_relu_slope_at_zero_is_zero():
    (g,) = check_vjp("nn.relu", [np.array([-1.0, 0.0, 2.0])], directions=0)
    ct = np.random.default_rng(0).standard_normal(3)
    np.testing.assert_allclose(g, [0, 0, ct[2]])


@pytest.mark.parametrize(("src", "dst"), [("float64", "float32"), ("float32", "float64")])
def test_cast_between_floats(src, dst):
    x = np.arange(4, dtype=src)
    # the backward program casts the cotangent back
    from .vjp_harness import Backward, type_of_value

    backward = Backward("cast", [type_of_value(x)], {"dtype": dst})
    (g,) = backward([x], np.ones(4, dst))
    assert g.dtype == np.dtype(src) and np.all(g == 1)


def test_cast_to_or_from_integers_has_no_cotangent():
    from .vjp_harness import Backward, type_of_value

    for x, dtype in ((np.arange(3.0), "int32"), (np.arange(3), "float64")):
        backward = Backward("cast", [type_of_value(x)], {"dtype": dtype})
        assert backward.present == [False]


# ----------------------------------------------------------------- reductions
@st.composite
def reduction(draw):
    shape = draw(st.lists(st.integers(1, 3), min_size=1, max_size=3).map(tuple))
    axis = draw(
        st.none() | st.lists(st.integers(-len(shape), len(shape) - 1), max_size=2, unique=True)
    )
    if axis is not None and len({a % len(shape) for a in axis}) != len(axis):
        axis = [axis[0]]
    return shape, {"axis": axis, "keepdims": draw(st.booleans()), "exclude": draw(st.booleans())}


@pytest.mark.parametrize("name", ["sum", "mean", "max", "min", "prod"])
@FEW
@given(case=reduction(), seed=st.integers(0, 2**16))
def test_reduction(name, case, seed):
    shape, attrs = case
    check_vjp(name, [rand(np.random.default_rng(seed), shape)], seed=seed, **attrs)


def test_max_min_split_ties_evenly():
    x = np.array([[1.0, 3.0, 3.0], [2.0, 2.0, 2.0]])
    for name in ("max", "min"):
        (g,) = check_vjp(name, [x], axis=[1], directions=0)
        ct = np.random.default_rng(0).standard_normal(2)
        hit = x == (x.max(1) if name == "max" else x.min(1))[:, None]
        np.testing.assert_allclose(g, hit * (ct / hit.sum(1))[:, None])


@pytest.mark.parametrize("zeros", [[1], [0, 2]])
def test_prod_with_zeros(zeros):
    x = np.array([2.0, 3.0, 5.0, 7.0])
    x[zeros] = 0.0
    (g,) = check_vjp("prod", [x], directions=0)
    ct = np.random.default_rng(0).standard_normal(())
    expected = [ct * np.prod(np.delete(x, i)) for i in range(4)]
    np.testing.assert_allclose(g, expected)
    check_vjp("prod", [x])  # one zero: still smooth there
