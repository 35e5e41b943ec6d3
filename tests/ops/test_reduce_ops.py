"""Reductions (sum, mean, max, min, prod, argmax): Relay's axis/keepdims/exclude
rules in the type relations, and the numpy rules against numpy formulas."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import effir  # noqa: F401  (registers the operators)
from effir.ir.types import IncompleteType, TupleType
from effir.ops.relations import NotReady, OpFailure, RelationError

from .rules import T, assert_type, rel
from .rules import run_tensor as run

REDUCE = ("sum", "mean", "max", "min", "prod")


# --------------------------------------------------------------- relations
@pytest.mark.parametrize("name", REDUCE)
@pytest.mark.parametrize(
    ("attrs", "shape"),
    [
        ({}, ()),
        ({"axis": None, "keepdims": True}, (1, 1, 1)),
        ({"axis": []}, ()),  # Relay: an empty list means every axis
        ({"axis": [1]}, (2, "?")),
        ({"axis": 1}, (2, "?")),
        ({"axis": [-1, 0]}, ("n",)),
        ({"axis": [1], "keepdims": True}, (2, 1, "?")),
        ({"axis": [1], "exclude": True}, ("n",)),
        ({"axis": [1], "exclude": True, "keepdims": True}, (1, "n", 1)),
        ({"axis": [0, 1, 2], "exclude": True}, (2, "n", "?")),  # nothing reduced
        ({"axis": None, "exclude": True}, ()),  # None: every axis, as in Relay
    ],
)
def test_reduce_relation_shapes(name, attrs, shape):
    assert_type(rel(name, T((2, "n", "?")), **attrs), shape, "float32")


def test_reduce_relation_on_a_scalar():
    assert_type(rel("sum", T((), "int8")), (), "int8")
    assert_type(rel("max", T(()), keepdims=True), (), "float32")


@pytest.mark.parametrize("name", ["sum", "prod", "max", "min"])
@pytest.mark.parametrize("dtype", ["int8", "uint32", "float16", "float64"])
def test_reduce_relation_keeps_the_dtype(name, dtype):
    assert_type(rel(name, T((3, 4), dtype), axis=[0]), (4,), dtype)


def test_reduce_relation_dtype_errors():
    with pytest.raises(RelationError, match="^mean: .*must have a float dtype, got int32"):
        rel("mean", T((3,), "int32"))
    for name in ("sum", "prod"):
        with pytest.raises(RelationError, match=f"^{name}: .*got bool"):
            rel(name, T((3,), "bool"))
    assert_type(rel("max", T((3,), "bool")), (), "bool")


def test_reduce_relation_axis_errors():
    with pytest.raises(RelationError, match="axis 3 is out of range for a tensor of rank 3"):
        rel("sum", T((2, 3, 4)), axis=[3])
    with pytest.raises(RelationError, match="axis -4 is out of range"):
        rel("sum", T((2, 3, 4)), axis=[-4], exclude=True)
    with pytest.raises(RelationError, match=r"repeated axis in \[1, -2\]"):
        rel("max", T((2, 3, 4)), axis=[1, -2])
    with pytest.raises(RelationError, match="must be a tensor"):
        rel("sum", TupleType((T((2,)),)))
    with pytest.raises(NotReady):
        rel("sum", IncompleteType())


def test_argmax_relation():
    x = T((2, "n", "?"), "float16")
    assert_type(rel("argmax", x), (), "int32")
    assert_type(rel("argmax", x, keepdims=True), (1, 1, 1), "int32")
    assert_type(rel("argmax", x, axis=[1]), (2, "?"), "int32")
    assert_type(rel("argmax", x, axis=-1, keepdims=True), (2, "n", 1), "int32")
    assert_type(rel("argmax", x, axis=[0, 2], exclude=True), (2, "?"), "int32")
    assert_type(rel("argmax", x, axis=[2, 0, 1]), (), "int32")
    assert_type(rel("argmax", T((4,), "bool")), (), "int32")
    assert_type(rel("argmax", T(())), (), "int32")
    with pytest.raises(RelationError, match=r"^argmax: .*one axis or over all axes.*\[1, 2\]"):
        rel("argmax", x, axis=[1, 2])
    with pytest.raises(RelationError, match=r"one axis or over all axes.*\[0, 1\]"):
        rel("argmax", x, axis=[2], exclude=True)


# ------------------------------------------------------------------ values
X = np.array([[1.5, -2.0, 3.0], [4.0, 0.5, -6.0]], dtype=np.float32)

FORMULA = {
    "sum": lambda x, axes, keep: x.astype(np.float64).sum(axis=axes, keepdims=keep),
    "mean": lambda x, axes, keep: _mean(x, axes, keep),
    "max": lambda x, axes, keep: x.max(axis=axes, keepdims=keep),
    "min": lambda x, axes, keep: x.min(axis=axes, keepdims=keep),
    "prod": lambda x, axes, keep: x.astype(np.float64).prod(axis=axes, keepdims=keep),
}


def _mean(x, axes, keep):
    total = x.astype(np.float64).sum(axis=axes, keepdims=keep)
    count = int(np.prod([x.shape[a] for a in axes]))
    return total / count if count else np.full_like(total, np.nan)


@pytest.mark.parametrize("name", REDUCE)
@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_reduce_values(name, dtype):
    x = X.astype(dtype)
    for attrs, axes in [
        ({}, (0, 1)),
        ({"axis": [1]}, (1,)),
        ({"axis": [1], "exclude": True}, (0,)),
        ({"axis": [0], "keepdims": True}, (0,)),
    ]:
        out = run(name, x, **attrs)
        expected = FORMULA[name](x, axes, attrs.get("keepdims", False))
        assert out.dtype == np.dtype(dtype) and out.shape == expected.shape
        np.testing.assert_allclose(out.astype(np.float64), expected, rtol=2e-3)


def test_integer_sums_keep_the_dtype_and_wrap():
    x = np.array([100, 100, 100], np.int8)
    out = run("sum", x)
    assert out.shape == () and out.dtype == np.int8 and int(out) == 300 - 256
    out = run("prod", np.array([16, 16], np.int8))
    assert out.dtype == np.int8 and int(out) == 0
    out = run("sum", np.array([[1, 2], [3, 4]], np.uint16), axis=[0])
    assert out.dtype == np.uint16 and out.tolist() == [4, 6]


def test_float16_sum_accumulates_in_float32():
    x = np.full(4096, 1.0, np.float16)  # float16 stops counting at 2048
    out = run("sum", x)
    assert out.dtype == np.float16 and float(out) == 4096.0
    assert float(run("mean", x)) == 1.0


@pytest.mark.filterwarnings("error")
def test_empty_reductions():
    empty = np.zeros((0, 3), np.float32)
    assert run("sum", empty, axis=[0]).tolist() == [0.0, 0.0, 0.0]
    assert run("prod", empty, axis=[0]).tolist() == [1.0, 1.0, 1.0]
    assert np.isnan(run("mean", empty, axis=[0])).all()
    for name in ("max", "min", "argmax"):
        with pytest.raises(OpFailure, match="empty axis"):
            run(name, empty, axis=[0])
        with pytest.raises(OpFailure, match="empty axis"):
            run(name, empty)
    # reducing the non-empty axis of an empty tensor is fine
    assert run("max", empty, axis=[1]).shape == (0,)
    assert run("argmax", empty, axis=[1]).shape == (0,)


def test_max_min_on_bool_and_nan():
    b = np.array([[True, False], [False, False]])
    assert run("max", b, axis=[1]).tolist() == [True, False]
    assert run("min", b).tolist() is False
    assert np.isnan(run("max", np.array([1.0, np.nan], np.float32)))


def test_reduce_over_nothing_is_the_identity():
    x = np.arange(6, dtype=np.int32).reshape(2, 3)
    out = run("sum", x, axis=[0, 1], exclude=True)
    assert out.dtype == np.int32 and out.tolist() == x.tolist()
    assert run("max", np.asarray(np.float32(2.5))).tolist() == 2.5


def test_argmax_values():
    x = np.array([[1, 7, 7], [9, 2, 9]], np.int32)
    out = run("argmax", x, axis=[1])
    assert out.dtype == np.int32 and out.tolist() == [1, 0]
    assert run("argmax", x, axis=[1], select_last_index=True).tolist() == [2, 2]
    assert run("argmax", x, axis=[0], keepdims=True).tolist() == [[1, 0, 1]]
    # over every axis: an index into the flattened tensor
    out = run("argmax", x)
    assert out.shape == () and out.dtype == np.int32 and int(out) == 3
    assert int(run("argmax", x, select_last_index=True)) == 5
    assert run("argmax", x, keepdims=True).tolist() == [[3]]
    assert run("argmax", x, axis=[0], exclude=True).tolist() == [1, 0]
    assert run("argmax", np.array([0.0, np.nan, 1.0, np.nan], np.float32)).tolist() == 1
    assert run("argmax", np.asarray(np.float32(4.0))).tolist() == 0
    out = run("argmax", x, axis=[0, 1], exclude=True)  # over no axis: every index 0
    assert out.dtype == np.int32 and out.tolist() == [[0, 0, 0], [0, 0, 0]]


# -------------------------------------------------------------- properties
@st.composite
def reductions(draw):
    shape = tuple(draw(st.lists(st.integers(0, 3), min_size=0, max_size=4)))
    rank = len(shape)
    axis = draw(
        st.none()
        | st.lists(st.integers(0, max(rank - 1, 0)), unique=True, max_size=rank).map(
            lambda axes: [a - rank if a % 2 else a for a in axes]  # some negative
        )
    )
    keepdims = draw(st.booleans())
    exclude = draw(st.booleans())
    return shape, axis, keepdims, exclude


def expected_axes(rank, axis, exclude):
    """Relay's rule, written independently of the implementation."""
    if axis is None or len(axis) == 0:
        return tuple(range(rank))
    listed = {a % rank for a in axis}
    return tuple(a for a in range(rank) if (a in listed) != exclude)


@given(reductions(), st.sampled_from(REDUCE), st.data())
@settings(max_examples=200, deadline=None)
def test_reduction_relation_matches_numpy(reduction, name, data):
    shape, axis, keepdims, exclude = reduction
    x = np.arange(int(np.prod(shape)), dtype=np.float64).reshape(shape) % 5 - 2
    attrs = {"axis": axis, "keepdims": keepdims, "exclude": exclude}
    axes = expected_axes(len(shape), axis, exclude)
    # The relation on the static shape, and on the shape with a `?` and a symbol.
    t = rel(name, T(shape, "float64"), **attrs)
    if shape:
        hidden = data.draw(st.integers(0, len(shape) - 1))
        vague = list(shape)
        vague[hidden] = data.draw(st.sampled_from(["?", "n"]))
        vt = rel(name, T(vague, "float64"), **attrs)
        assert len(vt.shape) == len(t.shape)
        for v, s in zip(vt.shape, t.shape, strict=True):
            assert v == s or v in ("?", "n")
    if name in ("max", "min") and any(shape[a] == 0 for a in axes):
        with pytest.raises(OpFailure):
            run(name, x, **attrs)
        return
    out = run(name, x, **attrs)
    assert out.shape == t.shape and out.dtype == np.float64
    np.testing.assert_allclose(out, FORMULA[name](x, axes, keepdims), equal_nan=True)


@given(reductions(), st.booleans())
@settings(max_examples=150, deadline=None)
def test_argmax_relation_matches_numpy(reduction, last):
    shape, axis, keepdims, exclude = reduction
    attrs = {"axis": axis, "keepdims": keepdims, "exclude": exclude, "select_last_index": last}
    axes = expected_axes(len(shape), axis, exclude)
    if 1 < len(axes) < len(shape):
        with pytest.raises(RelationError):
            rel("argmax", T(shape), **attrs)
        return
    t = rel("argmax", T(shape), **attrs)
    x = (np.arange(int(np.prod(shape))) * 7 % 4).reshape(shape).astype(np.float32)
    if any(shape[a] == 0 for a in axes):
        with pytest.raises(OpFailure):
            run("argmax", x, **attrs)
        return
    out = run("argmax", x, **attrs)
    assert out.shape == t.shape and out.dtype == np.int32
    # Independent check: each index points at a maximum, the first or the last.
    flat_axes = axes if len(axes) == 1 else tuple(range(len(shape)))
    if not axes:
        assert (out == 0).all()
        return
    moved = np.moveaxis(x, flat_axes, tuple(range(len(flat_axes))))
    k = len(flat_axes)
    moved = moved.reshape((int(np.prod(moved.shape[:k])),) + moved.shape[k:])
    best = moved.max(axis=0)
    hits = moved == best
    first = hits.argmax(axis=0)
    last_hit = moved.shape[0] - 1 - hits[::-1].argmax(axis=0)
    expected = last_hit if last else first
    np.testing.assert_array_equal(out.reshape(expected.shape), expected)


# ------------------------------------------------------------------ cumsum
def test_cumsum_relation():
    assert_type(rel("cumsum", T(("n", 3), "int8"), axis=-1), ("n", 3), "int8")
    with pytest.raises(RelationError, match="cumsum: the argument must have an axis"):
        rel("cumsum", T(()), axis=0)
    with pytest.raises(RelationError, match="axis 2 is out of range"):
        rel("cumsum", T((2, 3)), axis=2)
    with pytest.raises(RelationError, match="got bool"):
        rel("cumsum", T((2,), "bool"), axis=0)


@pytest.mark.parametrize("exclusive", [False, True])
@pytest.mark.parametrize("reverse", [False, True])
def test_cumsum_values(exclusive, reverse):
    """ONNX's CumSum reference: the four variants."""
    x = np.arange(1, 7, dtype="float32").reshape(2, 3)
    out = run("cumsum", x, axis=1, exclusive=exclusive, reverse=reverse)
    data = x[:, ::-1] if reverse else x
    expected = np.cumsum(data, axis=1)
    if exclusive:
        expected = np.concatenate([np.zeros((2, 1), "float32"), expected[:, :-1]], axis=1)
    np.testing.assert_array_equal(out, expected[:, ::-1] if reverse else expected)


def test_cumsum_wraps_integers_and_keeps_empty_axes():
    out = run("cumsum", np.array([100, 100, 100], "int8"), axis=0)
    np.testing.assert_array_equal(out, np.array([100, -56, 44], "int8"))
    empty = run("cumsum", np.zeros((2, 0), "float32"), axis=1, exclusive=True)
    assert empty.shape == (2, 0) and empty.dtype == np.float32
