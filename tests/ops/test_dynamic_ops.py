"""Type relations and numpy rules of the operators whose result shape depends
on values: the shape-tensor variants (dyn.zeros, dyn.ones, dyn.full,
dyn.reshape; effir/ops/creation.py and shape.py), boolean_mask and argwhere
(effir/ops/dynamic.py)."""

from __future__ import annotations

import numpy as np
import pytest

import effir  # noqa: F401  (registers the operators)
from effir.ir.types import ANY, IncompleteType, TupleType
from effir.ops.relations import NotReady, OpFailure, RelationError

from .rules import T, rel, run


def conforms(value, t):
    """``value`` has exactly ``t``'s dtype and a shape compatible with it."""
    assert isinstance(value, np.ndarray), type(value)
    assert value.dtype == np.dtype(t.dtype), (value.dtype, t.dtype)
    assert value.ndim == t.ndim, (value.shape, t.shape)
    assert all(d == ANY or a == d for a, d in zip(value.shape, t.shape, strict=True))


# ------------------------------------------------------------ dyn.zeros/ones
@pytest.mark.parametrize("name", ["dyn.zeros", "dyn.ones"])
def test_dyn_constant_relation(name):
    t = rel(name, T((3,), "int64"), dtype="int8")
    assert t.shape == (ANY, ANY, ANY) and t.dtype == "int8"
    assert rel(name, T((0,), "uint32")).shape == ()
    with pytest.raises(RelationError, match=rf"{name}: the shape must have a static length"):
        rel(name, T(("n",), "int64"))
    with pytest.raises(RelationError, match=r"static length \(the result's rank\)"):
        rel(name, T(("?",), "int64"))
    with pytest.raises(RelationError, match="the shape must be a 1-d tensor"):
        rel(name, T((), "int64"))
    with pytest.raises(RelationError, match="the shape must have a signed integer or unsigned"):
        rel(name, T((2,), "float32"))
    with pytest.raises(RelationError, match=f"{name}: the shape must be a tensor"):
        rel(name, TupleType(()))
    with pytest.raises(NotReady):
        rel(name, IncompleteType())


def test_dyn_constant_numpy_rule():
    shape = np.array([2, 3], "int64")
    out = run("dyn.ones", shape, dtype="int16")
    np.testing.assert_array_equal(out, np.ones((2, 3)))
    conforms(out, rel("dyn.ones", T((2,), "int64"), dtype="int16"))
    out = run("dyn.zeros", np.array([], "int32"))
    assert out.shape == () and out.dtype == np.float32 and out == 0
    with pytest.raises(OpFailure, match=r"negative size in shape \(2, -1\)"):
        run("dyn.zeros", np.array([2, -1], "int32"))


def test_dyn_full():
    t = rel("dyn.full", T((), "float32"), T((2,), "int32"), dtype="int32")
    assert t.shape == (ANY, ANY) and t.dtype == "int32"
    with pytest.raises(RelationError, match="dyn.full: the fill value must be a scalar"):
        rel("dyn.full", T((2,)), T((2,), "int32"))
    with pytest.raises(RelationError, match="dyn.full: the shape must have a static length"):
        rel("dyn.full", T(()), T(("n",), "int32"))
    with pytest.raises(NotReady):
        rel("dyn.full", T(()), IncompleteType())
    out = run("dyn.full", np.asarray(-1.5, "float32"), np.array([3, 1], "int64"), dtype="int32")
    np.testing.assert_array_equal(out, [[-1], [-1], [-1]])
    conforms(out, t)
    with pytest.raises(OpFailure, match="negative size"):
        run("dyn.full", np.asarray(1.0, "float32"), np.array([-3], "int64"))


# ---------------------------------------------------------------- dyn.reshape
def test_dyn_reshape_relation():
    t = rel("dyn.reshape", T(("n", 3), "int8"), T((3,), "int64"))
    assert t.shape == (ANY, ANY, ANY) and t.dtype == "int8"
    with pytest.raises(RelationError, match="dyn.reshape: the new shape must have a static"):
        rel("dyn.reshape", T((6,)), T(("?",), "int64"))
    with pytest.raises(RelationError, match="dyn.reshape: the new shape must have a signed"):
        rel("dyn.reshape", T((6,)), T((2,), "bool"))
    with pytest.raises(NotReady):
        rel("dyn.reshape", IncompleteType(), T((2,), "int64"))


def test_dyn_reshape_numpy_rule():
    x = np.arange(24, dtype="float32").reshape(2, 3, 4)
    t = rel("dyn.reshape", T((2, 3, 4)), T((2,), "int32"))
    for newshape, expected in [([0, -1], (2, 12)), ([-1, 0], (8, 3)), ([4, 6], (4, 6))]:
        out = run("dyn.reshape", x, np.array(newshape, "int32"))
        np.testing.assert_array_equal(out, x.reshape(expected))
        conforms(out, t)
    with pytest.raises(OpFailure, match=r"cannot reshape 24 elements into shape \(5, -1\)"):
        run("dyn.reshape", x, np.array([5, -1], "int64"))
    with pytest.raises(OpFailure, match=r"newshape \(-1, -1\) has more than one -1"):
        run("dyn.reshape", x, np.array([-1, -1], "int64"))
    with pytest.raises(OpFailure, match="special value -3 in newshape is not supported"):
        run("dyn.reshape", x, np.array([-3], "int64"))
    with pytest.raises(OpFailure, match=r"copies dimension 3 \(0\), but the input has rank 3"):
        run("dyn.reshape", x, np.array([1, 1, 1, 0], "int64"))


def test_dyn_reshape_allowzero_takes_a_0_as_a_size():
    # a shape read at run time from an empty tensor: (0, 0) is two sizes,
    # not two copies of the input's dimensions (ONNX Reshape's allowzero)
    x = np.zeros((0,), "float64")
    out = run("dyn.reshape", x, np.array([0, 0], "int64"), allowzero=True)
    assert out.shape == (0, 0)
    y = np.arange(6, dtype="float64").reshape(2, 3)
    out = run("dyn.reshape", y, np.array([2, 0], "int64"), allowzero=False)
    assert out.shape == (2, 3)  # without it, the 0 copies the input's 3
    with pytest.raises(OpFailure, match=r"cannot reshape 6 elements into shape \(2, 0\)"):
        run("dyn.reshape", y, np.array([2, 0], "int64"), allowzero=True)
    with pytest.raises(OpFailure, match=r"has more than one -1"):
        run("dyn.reshape", y, np.array([-1, -1], "int64"), allowzero=True)


# -------------------------------------------------------------- boolean_mask
@pytest.mark.parametrize(
    ("data", "mask", "expected"),
    [
        ((4, 3), (4,), ("?", 3)),
        ((4, 3), (4, 3), ("?",)),
        (("n", 3), ("n",), ("?", 3)),
        (("n", "m"), ("?",), ("?", "m")),
        (("?", 5), (7,), ("?", 5)),
        ((4, 3), (), ("?", 4, 3)),
    ],
)
def test_boolean_mask_relation(data, mask, expected):
    t = rel("boolean_mask", T(data, "int32"), T(mask, "bool"))
    assert t.shape == expected and t.dtype == "int32"


def test_boolean_mask_errors():
    with pytest.raises(RelationError, match="boolean_mask: the mask must have a bool dtype"):
        rel("boolean_mask", T((4,)), T((4,), "int32"))
    with pytest.raises(
        RelationError, match="boolean_mask: the mask's and the data's dimensions 1 do not match"
    ):
        rel("boolean_mask", T((4, 3)), T((4, 2), "bool"))
    with pytest.raises(RelationError, match="dimensions 0 do not match: m vs n"):
        rel("boolean_mask", T(("n",)), T(("m",), "bool"))
    with pytest.raises(RelationError, match="has a higher rank than the data"):
        rel("boolean_mask", T((4,)), T((4, 1), "bool"))
    with pytest.raises(NotReady):
        rel("boolean_mask", T((4,)), IncompleteType())


def test_boolean_mask_numpy_rule():
    x = np.arange(12, dtype="int32").reshape(4, 3)
    t = rel("boolean_mask", T((4, 3), "int32"), T((4,), "bool"))
    for mask in (np.array([True, False, True, True]), np.zeros(4, bool), x % 2 == 0):
        out = run("boolean_mask", x, mask)
        np.testing.assert_array_equal(out, x[mask])
        if mask.ndim == 1:
            conforms(out, t)
    out = run("boolean_mask", x, np.asarray(True))
    assert out.shape == (1, 4, 3)
    with pytest.raises(OpFailure, match=r"the mask's shape \(3,\) does not match the data's"):
        run("boolean_mask", x, np.ones(3, bool))


# ------------------------------------------------------------------- argwhere
def test_argwhere():
    t = rel("argwhere", T(("n", 3, "?"), "float32"))
    assert t.shape == (ANY, 3) and t.dtype == "int32"
    assert rel("argwhere", T((), "bool")).shape == (ANY, 0)
    with pytest.raises(RelationError, match="argwhere: the argument must be a tensor"):
        rel("argwhere", TupleType(()))
    with pytest.raises(NotReady):
        rel("argwhere", IncompleteType())
    x = np.array([[0, 1.5, 0], [-2, 0, np.nan]], "float64")
    out = run("argwhere", x)
    np.testing.assert_array_equal(out, np.argwhere(x))
    conforms(out, rel("argwhere", T((2, 3), "float64")))
    conforms(run("argwhere", np.zeros((2, 3), bool)), rel("argwhere", T((2, 3), "bool")))
    conforms(run("argwhere", np.asarray(7, "int8")), rel("argwhere", T((), "int8")))


# ------------------------------------------------------------------ unique
def test_unique_relation():
    values, first, inverse, counts = rel("unique", T((2, "n"), "int32")).fields
    assert (values.shape, values.dtype) == ((ANY,), "int32")
    assert (first.shape, inverse.shape, counts.shape) == ((ANY,), (ANY,), (ANY,))
    assert inverse.dtype == first.dtype == counts.dtype == "int64"
    assert rel("unique", T((2, 3))).fields[2].shape == (6,)
    values, _, inverse, _ = rel("unique", T((4, 3)), axis=-2).fields
    assert (values.shape, inverse.shape) == ((ANY, 3), (4,))
    with pytest.raises(RelationError, match="unique: a scalar has no axis"):
        rel("unique", T(()), axis=0)


def test_unique_sorted_and_in_first_occurrence_order():
    """ONNX's Unique examples: sorted, and in the order of first occurrence."""
    x = np.array([2.0, 1.0, 1.0, 3.0, 4.0, 3.0], "float32")
    values, first, inverse, counts = run("unique", x)
    np.testing.assert_array_equal(values, [1, 2, 3, 4])
    np.testing.assert_array_equal(first, [1, 0, 3, 4])
    np.testing.assert_array_equal(inverse, [1, 0, 0, 2, 3, 2])
    np.testing.assert_array_equal(counts, [2, 1, 2, 1])
    values, first, inverse, counts = run("unique", x, sorted=False)
    np.testing.assert_array_equal(values, [2, 1, 3, 4])
    np.testing.assert_array_equal(first, [0, 1, 3, 4])
    np.testing.assert_array_equal(inverse, [0, 1, 1, 2, 3, 2])
    np.testing.assert_array_equal(counts, [1, 2, 2, 1])
    rows = np.array([[1, 0, 0], [1, 0, 0], [2, 3, 4]], "int8")
    values, first, inverse, counts = run("unique", rows, axis=0)
    np.testing.assert_array_equal(values, [[1, 0, 0], [2, 3, 4]])
    assert values.dtype == np.int8 and inverse.tolist() == [0, 0, 1] and counts.tolist() == [2, 1]
    with pytest.raises(OpFailure, match="unique of an empty axis"):
        run("unique", np.zeros((0, 2), "float32"), axis=0)


# -------------------------------------------------------------- dyn.arange
def test_arange_relation():
    t = rel("dyn.arange", T((), "int64"), T((), "int64"), T((), "int64"))
    assert (t.shape, t.dtype) == ((ANY,), "int64")
    with pytest.raises(RelationError, match="start, limit and delta must have the same dtype"):
        rel("dyn.arange", T((), "int64"), T((), "int32"), T((), "int64"))
    with pytest.raises(RelationError, match="must be a scalar"):
        rel("dyn.arange", T((1,)), T(()), T(()))


@pytest.mark.parametrize(
    ("start", "limit", "delta", "expected"),
    [
        (3, 9, 3, [3, 6]),
        (10, 4, -2, [10, 8, 6]),
        (1, 1, 1, []),
        (5, 1, 2, []),
        (0, 7, 3, [0, 3, 6]),
    ],
)
def test_arange_values_are_onnx_range(start, limit, delta, expected):
    for dtype in ("int32", "int64", "float32"):
        args = (np.array(v, dtype) for v in (start, limit, delta))
        out = run("dyn.arange", *args)
        assert out.dtype == np.dtype(dtype)
        np.testing.assert_array_equal(out, np.array(expected, dtype))


def test_arange_refuses_a_zero_or_infinite_step():
    with pytest.raises(OpFailure, match="the step"):
        run("dyn.arange", *(np.array(v, "int32") for v in (0, 5, 0)))
    with pytest.raises(OpFailure, match="must be finite"):
        run("dyn.arange", *(np.array(v, "float32") for v in (0, np.inf, 1)))


# ------------------------------------------------------------- forget_dims
def test_forget_dims_types_dimensions_unknown_and_keeps_the_value():
    assert rel("forget_dims", T((2, "n", 4)), axes=[0, -1]).shape == (ANY, "n", ANY)
    assert rel("forget_dims", T((2, 3))).shape == (ANY, ANY)
    with pytest.raises(RelationError, match="out of range"):
        rel("forget_dims", T((2,)), axes=[1])
    x = np.arange(6.0).reshape(2, 3)
    assert run("forget_dims", x, axes=[1]) is x
