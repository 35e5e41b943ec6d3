"""Type relations and numpy rules of the shape operators (effir/ops/shape.py):
static, symbolic and ``?`` shapes, the relations' error messages, and the
numpy rules against numpy (property tests for reshape, transpose,
strided_slice and take)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import effir  # registers the operators
from effir.ir.types import ANY, IncompleteType, TensorType, TupleType
from effir.ops.relations import NotReady, OpFailure, RelationError
from tests.support.shape_strategies import prime_factors

from .rules import T, rel, run


def shape(name, *args, **attrs):
    result = rel(name, *args, **attrs)
    assert isinstance(result, TensorType), result
    return result.shape


def conforms(value, t, env=None):
    """``value`` has exactly ``t``'s dtype and a shape compatible with it;
    ``env`` gives the symbols' run-time sizes."""
    env = env or {}
    if isinstance(t, TupleType):
        assert isinstance(value, tuple) and len(value) == len(t.fields)
        for v, f in zip(value, t.fields, strict=True):
            conforms(v, f, env)
        return
    assert isinstance(value, np.ndarray), type(value)
    assert value.dtype == np.dtype(t.dtype), (value.dtype, t.dtype)
    assert value.ndim == t.ndim, (value.shape, t.shape)
    for actual, d in zip(value.shape, t.shape, strict=True):
        if d != ANY:
            assert actual == env.get(d, d), (value.shape, t.shape)


def arange(*dims, dtype="float32"):
    return np.arange(math.prod(dims), dtype=dtype).reshape(dims)


# ------------------------------------------------------------------ reshape
@pytest.mark.parametrize(
    ("src", "newshape", "expected"),
    [
        ((2, 3, 4), [6, 4], (6, 4)),
        ((2, 3, 4), [-1], (24,)),
        ((2, 3, 4), [0, -1], (2, 12)),
        ((2, 3, 4), [-1, 0, 2], (4, 3, 2)),
        ((1,), [], ()),
        ((), [1, 1], (1, 1)),
        ((0, 3), [3, 0, -1], (3, 3, 0)),
        (("n", 3, 4), [0, -1], ("n", 12)),
        (("n", 3, 4), [12, -1], (12, "n")),
        (("n", 3, 4), [-1, 4], ("?", 4)),
        (("n", "m"), [0, 0], ("n", "m")),
        (("n", "m"), [-1], ("?",)),
        (("n", "m", 6), [0, 3, -1], ("n", 3, "?")),
        (("n", 6), [0, 4, -1], ("n", 4, "?")),
        (("n", "n"), [0, -1], ("n", "n")),
        (("?", 3), [-1, 3], ("?", 3)),
        (("?", 3), [0, 3], ("?", 3)),
    ],
)
def test_reshape_relation(src, newshape, expected):
    assert shape("reshape", T(src), newshape=newshape) == expected


def test_reshape_keeps_dtype_and_allows_undecidable_symbolic_sizes():
    assert rel("reshape", T((2, 3), "int8"), newshape=[3, 2]).dtype == "int8"
    # A symbol may be anything (0 too): only static sizes are checked statically.
    assert shape("reshape", T(("n", 4)), newshape=[8]) == (8,)
    assert shape("reshape", T(("n", 4)), newshape=[3, -1]) == (3, "?")


@pytest.mark.parametrize(
    ("src", "newshape", "message"),
    [
        ((3, 4), [5, -1], r"reshape: cannot reshape 12 elements into shape \(5, -1\)"),
        ((3, 4), [5, 2], r"reshape: cannot reshape 12 elements into shape \(5, 2\)"),
        ((3, 0), [-1, 0], r"cannot reshape 0 elements into shape \(-1, 0\)"),
        ((3, 4), [-1, -1], r"reshape: newshape \(-1, -1\) has more than one -1"),
        ((3, 4), [-2], r"reshape: special value -2 in newshape is not supported"),
        ((3, 4), [2, 2, 0], r"copies dimension 2 \(0\), but the input has rank 2"),
    ],
)
def test_reshape_errors(src, newshape, message):
    with pytest.raises(RelationError, match=message):
        rel("reshape", T(src), newshape=newshape)


def test_relations_wait_for_unknown_arguments_and_reject_non_tensors():
    with pytest.raises(NotReady):
        rel("reshape", IncompleteType(), newshape=[1])
    with pytest.raises(RelationError, match="reshape: the argument must be a tensor"):
        rel("reshape", TupleType(()), newshape=[1])
    with pytest.raises(NotReady):
        rel("concatenate", IncompleteType())
    with pytest.raises(NotReady):
        rel("concatenate", TupleType((T((1,)), IncompleteType())))


def test_reshape_numpy_rule():
    x = arange(2, 3, 4)
    out = run("reshape", x, newshape=[0, -1])
    np.testing.assert_array_equal(out, x.reshape(2, 12))
    assert out.dtype == np.float32
    with pytest.raises(OpFailure, match=r"cannot reshape 24 elements into shape \(5, -1\)"):
        run("reshape", x, newshape=[5, -1])
    with pytest.raises(OpFailure, match=r"cannot reshape 0 elements into shape \(-1, 0\)"):
        run("reshape", np.zeros((3, 0), "float32"), newshape=[-1, 0])


@st.composite
def reshapes(draw):
    """A static shape, a valid newshape with 0s and at most one -1, and a
    symbolic version of the shape (some dims made symbols or ``?``)."""
    src = draw(st.lists(st.integers(1, 6), max_size=4))
    factors = [f for d in src for f in prime_factors(d)]
    factors = draw(st.permutations(factors))
    rank = draw(st.integers(0, 4))
    out = [1] * rank
    for f in factors:
        if rank == 0:
            out = [1]
            rank = 1
        out[draw(st.integers(0, rank - 1))] *= f
    if not out and math.prod(src) != 1:
        out = [math.prod(src)]
    newshape = list(out)
    for i in range(len(newshape)):
        if i < len(src) and src[i] == out[i] and draw(st.booleans()):
            newshape[i] = 0
    if newshape and draw(st.booleans()):
        candidates = [i for i, d in enumerate(newshape) if d != 0]
        if candidates:
            newshape[draw(st.sampled_from(candidates))] = -1
    symbolic, env = [], {}
    for i, d in enumerate(src):
        kind = draw(st.sampled_from(["static", "static", "symbol", "shared", "any"]))
        if kind == "symbol":
            env[f"s{i}"] = d
            symbolic.append(f"s{i}")
        elif kind == "shared":  # equal sizes share one symbol
            env[f"v{d}"] = d
            symbolic.append(f"v{d}")
        elif kind == "any":
            symbolic.append(ANY)
        else:
            symbolic.append(d)
    return tuple(src), newshape, tuple(symbolic), env


@settings(max_examples=300)
@given(reshapes())
def test_reshape_relation_matches_numpy(case):
    src, newshape, symbolic, env = case
    x = arange(*src)
    out = run("reshape", x, newshape=newshape)
    assert out.shape == shape("reshape", T(src), newshape=newshape)
    np.testing.assert_array_equal(out.reshape(-1), x.reshape(-1))
    conforms(out, rel("reshape", T(symbolic), newshape=newshape), env)


# ---------------------------------------------------------------- transpose
def test_transpose_relation():
    assert shape("transpose", T((2, "n", "?"))) == ("?", "n", 2)
    assert shape("transpose", T((2, "n", 4)), axes=[1, -1, 0]) == ("n", 4, 2)
    assert shape("transpose", T(())) == ()
    with pytest.raises(RelationError, match=r"transpose: axes \[0, 0\] are not a permutation"):
        rel("transpose", T((2, 3)), axes=[0, 0])
    with pytest.raises(RelationError, match=r"axes \[0\] must list each of the 2 axes once"):
        rel("transpose", T((2, 3)), axes=[0])
    with pytest.raises(RelationError, match="axis 2 is out of range for a tensor of rank 2"):
        rel("transpose", T((2, 3)), axes=[0, 2])


@given(
    st.lists(st.integers(0, 4), max_size=4).flatmap(
        lambda dims: st.tuples(
            st.just(tuple(dims)),
            st.permutations(range(len(dims))),
            st.lists(st.booleans(), min_size=len(dims), max_size=len(dims)),
        )
    )
)
def test_transpose_matches_numpy(case):
    dims, perm, negate = case
    axes = [a - len(dims) if neg else a for a, neg in zip(perm, negate, strict=True)]
    x = arange(*dims)
    out = run("transpose", x, axes=axes)
    np.testing.assert_array_equal(out, np.transpose(x, perm))
    assert out.shape == shape("transpose", T(dims), axes=axes)
    np.testing.assert_array_equal(run("transpose", x), x.T)


# -------------------------------------------------------- expand_dims/squeeze
def test_expand_dims():
    assert shape("expand_dims", T(("n", 3)), axis=0) == (1, "n", 3)
    assert shape("expand_dims", T(("n", 3)), axis=2, num_newaxis=2) == ("n", 3, 1, 1)
    assert shape("expand_dims", T(("n", 3)), axis=-1) == ("n", 3, 1)
    assert shape("expand_dims", T(("n", 3)), axis=-3) == (1, "n", 3)
    assert shape("expand_dims", T(()), axis=0, num_newaxis=0) == ()
    with pytest.raises(RelationError, match=r"expand_dims: axis 3 is out of range \[-3, 2\]"):
        rel("expand_dims", T((2, 3)), axis=3)
    with pytest.raises(RelationError, match="axis -4 is out of range"):
        rel("expand_dims", T((2, 3)), axis=-4)
    with pytest.raises(RelationError, match="num_newaxis must be >= 0, got -1"):
        rel("expand_dims", T((2, 3)), axis=0, num_newaxis=-1)
    x = arange(2, 3)
    assert run("expand_dims", x, axis=1, num_newaxis=2).shape == (2, 1, 1, 3)
    assert run("expand_dims", x, axis=-1).shape == (2, 3, 1)


def test_squeeze():
    assert shape("squeeze", T((1, 3, 1))) == (3,)
    assert shape("squeeze", T((1, 3, 1)), axis=[0]) == (3, 1)
    assert shape("squeeze", T(("n", 3, "?")), axis=[0, -1]) == (3,)
    assert shape("squeeze", T((1, 3)), axis=[]) == (1, 3)
    with pytest.raises(RelationError, match="squeeze: dimension 1 of .* is n.*explicit axis"):
        rel("squeeze", T((1, "n")))
    with pytest.raises(RelationError, match=r"dimension 0 of \(\?, 1\) is \?"):
        rel("squeeze", T(("?", 1)))
    with pytest.raises(RelationError, match="squeeze: cannot squeeze axis 1 of size 3"):
        rel("squeeze", T((1, 3)), axis=1)
    with pytest.raises(RelationError, match="repeated axis"):
        rel("squeeze", T((1, 3)), axis=[0, -2])
    x = arange(1, 3, 1)
    assert run("squeeze", x).shape == (3,)
    assert run("squeeze", x, axis=-1).shape == (1, 3)
    assert run("squeeze", arange(1)).shape == ()
    with pytest.raises(OpFailure, match="cannot squeeze axis 1 of size 3"):
        run("squeeze", x, axis=[0, 1])


# ------------------------------------------------------ concatenate / stack
def tup(*shapes, dtype="float32"):
    return TupleType(tuple(T(s, dtype) for s in shapes))


def test_concatenate_relation():
    assert shape("concatenate", tup((2, 3), (4, 3))) == (6, 3)
    assert shape("concatenate", tup((2, "n"), (2, 3)), axis=1) == (2, "?")
    assert shape("concatenate", tup(("?", 3), (2, "?"))) == ("?", 3)
    assert shape("concatenate", tup(("n", 3), (0, 3))) == ("n", 3)
    assert shape("concatenate", tup(("?", 3), (0, 3), (0, 3))) == ("?", 3)
    assert shape("concatenate", tup(("n", 3))) == ("n", 3)
    assert shape("concatenate", tup(("n", 3), ("n", 3))) == ("?", 3)
    assert shape("concatenate", tup(("n", 3), ("m", 3))) == ("?", 3)
    assert shape("concatenate", tup((2, "n"), (3, "n"))) == (5, "n")
    assert shape("concatenate", tup((2, 3), (2, 4)), axis=-1) == (2, 7)


@pytest.mark.parametrize(
    ("arg", "message"),
    [
        (TupleType(()), "concatenate: the tuple of tensors is empty"),
        (T((2,)), "concatenate: the argument must be a tuple of tensors"),
        (tup((2, 3), (2, 4)), "concatenate: sizes along axis 1 do not match: 3 vs 4"),
        (tup((2, "n"), (2, "m")), "sizes along axis 1 do not match: n vs m"),
        (tup((2, 3), (2,)), r"the tensors must have the same rank, got shapes \(2, 3\), \(2\)"),
        (tup((), ()), "cannot concatenate scalars"),
        (
            TupleType((T((2,), "float32"), T((2,), "int32"))),
            "the tensors must have the same dtype, got float32, int32",
        ),
    ],
)
def test_concatenate_errors(arg, message):
    with pytest.raises(RelationError, match=message):
        rel("concatenate", arg)


def test_concatenate_axis_out_of_range():
    with pytest.raises(RelationError, match="axis 2 is out of range for a tensor of rank 2"):
        rel("concatenate", tup((2, 3), (2, 3)), axis=2)


def test_concatenate_numpy_rule():
    a, b = arange(2, 3), arange(2, 1) + 100
    out = run("concatenate", (a, b), axis=1)
    np.testing.assert_array_equal(out, np.concatenate([a, b], axis=1))
    conforms(out, rel("concatenate", tup((2, 3), (2, 1)), axis=1))
    with pytest.raises(OpFailure, match="cannot concatenate shapes"):
        run("concatenate", (a, arange(3, 1)), axis=1)


def test_stack():
    assert shape("stack", tup((2, 3), (2, 3), (2, 3))) == (3, 2, 3)
    assert shape("stack", tup(("n", "?"), ("?", 3)), axis=-1) == ("n", 3, 2)
    assert shape("stack", tup((), ())) == (2,)
    assert shape("stack", tup((2, 3), (2, 3)), axis=1) == (2, 2, 3)
    with pytest.raises(RelationError, match="stack: sizes along axis 0 do not match: 2 vs 3"):
        rel("stack", tup((2,), (3,)))
    with pytest.raises(RelationError, match="stack: axis 3 is out of range"):
        rel("stack", tup((2, 3), (2, 3)), axis=3)
    with pytest.raises(RelationError, match="stack: the tuple of tensors is empty"):
        rel("stack", TupleType(()))
    a, b = arange(2, 3), arange(2, 3) * 2
    np.testing.assert_array_equal(run("stack", (a, b), axis=-1), np.stack([a, b], -1))
    out = run("stack", (np.asarray(1.0, "float32"), np.asarray(2.0, "float32")))
    conforms(out, rel("stack", tup((), ())))
    with pytest.raises(OpFailure, match="cannot stack shapes"):
        run("stack", (a, arange(3, 2)))


# -------------------------------------------------------------------- split
def test_split_sections():
    result = rel("split", T((6, "n")), indices_or_sections=3)
    assert [f.shape for f in result.fields] == [(2, "n")] * 3
    result = rel("split", T((2, "n")), indices_or_sections=2, axis=1)
    assert [f.shape for f in result.fields] == [(2, "?")] * 2
    result = rel("split", T(("?",)), indices_or_sections=1)
    assert [f.shape for f in result.fields] == [("?",)]
    with pytest.raises(RelationError, match="split: cannot split a dimension of size 7 into 3"):
        rel("split", T((7,)), indices_or_sections=3)
    with pytest.raises(RelationError, match="number of sections must be positive, got 0"):
        rel("split", T((7,)), indices_or_sections=0)
    with pytest.raises(RelationError, match="split: cannot split a scalar"):
        rel("split", T(()), indices_or_sections=1)
    with pytest.raises(RelationError, match="axis 1 is out of range"):
        rel("split", T((2,)), indices_or_sections=1, axis=1)


@pytest.mark.parametrize(
    ("dim", "indices", "expected"),
    [
        (10, [2, 5], [2, 3, 5]),
        (10, [5, 2], [5, 0, 8]),
        (10, [-3], [7, 3]),
        (10, [12], [10, 0]),
        (10, [], [10]),
        # numpy clips indices past a dimension of unknown size: no size is known.
        ("n", [2, 5], ["?", "?", "?"]),
        ("n", [], ["n"]),
        ("?", [3], ["?", "?"]),
        ("n", [-3, 5], ["?", "?", "?"]),
    ],
)
def test_split_indices(dim, indices, expected):
    result = rel("split", T((4, dim)), indices_or_sections=indices, axis=1)
    assert [f.shape for f in result.fields] == [(4, d) for d in expected]


def test_split_numpy_rule():
    x = arange(4, 10)
    for spec in (2, [2, 5], [5, 2], [-3], []):
        out = run("split", x, indices_or_sections=spec, axis=-1)
        expected = np.split(x, spec, axis=-1)
        assert len(out) == len(expected)
        for got, want in zip(out, expected, strict=True):
            np.testing.assert_array_equal(got, want)
        conforms(out, rel("split", T((4, 10)), indices_or_sections=spec, axis=-1))
        conforms(out, rel("split", T((4, "n")), indices_or_sections=spec, axis=-1), {"n": 10})
    with pytest.raises(OpFailure, match="cannot split a dimension of size 10 into 3"):
        run("split", x, indices_or_sections=3, axis=1)


# ------------------------------------------------------------ strided_slice
@pytest.mark.parametrize(
    ("src", "attrs", "expected"),
    [
        ((4, 5), dict(begin=[1, 0], end=[3, 5]), (2, 5)),
        ((4, 5), dict(begin=[1], end=[3]), (2, 5)),
        ((4, 5), dict(begin=[0, 4], end=[4, 0], strides=[2, -1]), (2, 4)),
        ((4, 5), dict(begin=[-1], end=[-100], strides=[-1]), (4, 5)),
        ((4, 5), dict(begin=[10], end=[20]), (0, 5)),
        ((4, 5), dict(begin=[2], end=[1], axes=[1]), (4, 0)),
        ((4, 5), dict(begin=[1], end=[3], axes=[-1]), (4, 2)),
        ((4, 5), dict(begin=[1, 2], end=[2, -1], slice_mode="size"), (2, 3)),
        ((4, 5), dict(begin=[1], end=[2], strides=[3], slice_mode="size"), (2, 5)),
        # A negative begin counts from the end; the size runs towards the end.
        ((5,), dict(begin=[-2], end=[2], slice_mode="size"), (2,)),
        ((5,), dict(begin=[-3], end=[2], slice_mode="size"), (2,)),
        ((5,), dict(begin=[-2], end=[5], slice_mode="size"), (2,)),
        ((4, 5), dict(begin=[], end=[], strides=[1, 2]), (4, 3)),
        (("n", "?"), dict(begin=[0, 0], end=[2**31 - 1, 2**63]), ("n", "?")),
        (("n", 5), dict(begin=[0], end=[2**31 - 1]), ("n", 5)),
        (("n", 5), dict(begin=[0], end=[-1], slice_mode="size"), ("n", 5)),
        (("n", 5), dict(begin=[], end=[], strides=[1, 2]), ("n", 3)),
        (("n", 5), dict(begin=[1], end=[2**31 - 1]), ("?", 5)),
        (("n", 5), dict(begin=[0], end=[3]), ("?", 5)),
        (("n", 5), dict(begin=[0], end=[2**31 - 1], strides=[2]), ("?", 5)),
        (("n", 5), dict(begin=[0], end=[2], slice_mode="size"), ("?", 5)),
        (("n", 5), dict(begin=[-1], end=[-100], strides=[-1]), ("?", 5)),
    ],
)
def test_strided_slice_relation(src, attrs, expected):
    assert shape("strided_slice", T(src), **attrs) == expected


@pytest.mark.parametrize(
    ("attrs", "message"),
    [
        (dict(begin=[0], end=[1], strides=[0]), "strided_slice: stride 0 on axis 0"),
        (dict(begin=[0, 0, 0], end=[1]), r"at most one entry per axis \(2\), got 3, 1 and 0"),
        (dict(begin=[0], end=[1, 2], axes=[0]), "one entry per axis in axes"),
        (dict(begin=[0, 0], end=[1, 1], axes=[0, -2]), "repeated axis in axes"),
        (dict(begin=[0], end=[1], axes=[2]), "axis 2 is out of range"),
        (dict(begin=[0], end=[1], slice_mode="step"), 'slice_mode must be "end" or "size"'),
    ],
)
def test_strided_slice_errors(attrs, message):
    with pytest.raises(RelationError, match=message):
        rel("strided_slice", T((4, 5)), **attrs)


def test_strided_slice_numpy_rule():
    x = arange(4, 5)
    np.testing.assert_array_equal(
        run("strided_slice", x, begin=[1, 2], end=[2, -1], slice_mode="size"), x[1:3, 2:]
    )
    np.testing.assert_array_equal(
        run("strided_slice", x, begin=[3], end=[0], strides=[-2], axes=[1]), x[:, 3:0:-2]
    )
    np.testing.assert_array_equal(run("strided_slice", x, begin=[-2], end=[-1]), x[-2:-1])
    with pytest.raises(OpFailure, match="stride 0 on axis 0"):
        run("strided_slice", x, begin=[0], end=[1], strides=[0])


_BOUNDS = st.one_of(st.integers(-8, 8), st.sampled_from([2**31 - 1, -(2**31)]))


@st.composite
def slices(draw):
    dims = draw(st.lists(st.integers(0, 6), min_size=1, max_size=3))
    rank = len(dims)
    if draw(st.booleans()):  # per-axis begin/end/strides, maybe shorter than the rank
        n = draw(st.integers(0, rank))
        axes = list(range(n))
        attrs = {}
    else:
        axes = draw(st.lists(st.integers(0, rank - 1), unique=True, max_size=rank))
        attrs = {"axes": [a - rank if draw(st.booleans()) else a for a in axes]}
    begin = [draw(_BOUNDS) for _ in axes]
    end = [draw(_BOUNDS) for _ in axes]
    strides = [draw(st.integers(-3, 3).filter(bool)) for _ in axes]
    attrs.update(begin=begin, end=end, strides=strides)
    index = [slice(None)] * rank
    for a, b, e, s in zip(axes, begin, end, strides, strict=True):
        index[a] = slice(b, e, s)
    hidden = [draw(st.sampled_from([d, d, ANY, f"s{i}"])) for i, d in enumerate(dims)]
    env = {f"s{i}": d for i, d in enumerate(dims)}
    return tuple(dims), attrs, tuple(index), tuple(hidden), env


@settings(max_examples=300)
@given(slices())
def test_strided_slice_matches_python_slicing(case):
    dims, attrs, index, hidden, env = case
    x = arange(*dims)
    out = run("strided_slice", x, **attrs)
    np.testing.assert_array_equal(out, x[index])
    assert out.shape == shape("strided_slice", T(dims), **attrs)
    conforms(out, rel("strided_slice", T(hidden), **attrs), env)


# --------------------------------------------------------------------- take
def test_take_relation():
    assert shape("take", T((5, "n")), T((2, 3), "int64"), axis=0) == (2, 3, "n")
    assert shape("take", T((5, "n", 4)), T(("m",), "uint8"), axis=-2) == (5, "m", 4)
    assert shape("take", T((5, "n")), T((), "int32"), axis=1) == (5,)
    assert shape("take", T((5, "n")), T((7,), "int32")) == (7,)
    assert rel("take", T((5,), "int8"), T((2,), "int32")).dtype == "int8"
    with pytest.raises(RelationError, match="take: the indices must have a signed integer or"):
        rel("take", T((5,)), T((2,), "float32"))
    with pytest.raises(RelationError, match='take: mode must be "clip", "wrap" or "fast"'):
        rel("take", T((5,)), T((2,), "int32"), mode="raise")
    with pytest.raises(RelationError, match="take: axis 1 is out of range"):
        rel("take", T((5,)), T((2,), "int32"), axis=1)
    with pytest.raises(RelationError, match="take: the data must be a tensor"):
        rel("take", TupleType(()), T((2,), "int32"))


def test_take_numpy_rule():
    x = arange(5, 2)
    idx = np.array([0, 7, -1], "int32")
    np.testing.assert_array_equal(run("take", x, idx, axis=0), x[[0, 4, 0]])
    np.testing.assert_array_equal(run("take", x, idx, axis=0, mode="wrap"), x[[0, 2, 4]])
    np.testing.assert_array_equal(run("take", x, idx), x.reshape(-1)[[0, 7, 0]])
    out = run("take", x, np.asarray(1, "int64"), axis=1)
    np.testing.assert_array_equal(out, x[:, 1])
    scalar = run("take", x, np.asarray(3, "uint8"))
    assert isinstance(scalar, np.ndarray) and scalar.shape == () and scalar == 3
    big = np.array([2**64 - 1], "uint64")
    np.testing.assert_array_equal(run("take", x, big, axis=0), x[[4]])  # clipped, not wrapped
    with pytest.raises(OpFailure, match="index 7 is out of range for axis 0 of size 5"):
        run("take", x, idx, axis=0, mode="fast")
    with pytest.raises(OpFailure, match="cannot take from axis 0 of size 0"):
        run("take", np.zeros((0, 2), "float32"), idx, axis=0)
    assert run("take", np.zeros((0, 2), "float32"), idx[:0], axis=0).shape == (0, 2)


@st.composite
def takes(draw):
    dims = draw(st.lists(st.integers(1, 4), min_size=1, max_size=3))
    axis = draw(st.one_of(st.none(), st.integers(-len(dims), len(dims) - 1)))
    size = math.prod(dims) if axis is None else dims[axis]
    idx_shape = draw(st.lists(st.integers(0, 3), max_size=2))
    values = draw(
        st.lists(
            st.integers(-2 * size, 2 * size),
            min_size=math.prod(idx_shape),
            max_size=math.prod(idx_shape),
        )
    )
    dtype = draw(st.sampled_from(["int8", "int32", "int64"]))
    mode = draw(st.sampled_from(["clip", "wrap", "fast"]))
    return tuple(dims), axis, np.array(values, dtype).reshape(idx_shape), mode, size


@settings(max_examples=200)
@given(takes())
def test_take_matches_indexing(case):
    dims, axis, idx, mode, size = case
    x = arange(*dims)
    data = x.reshape(-1) if axis is None else x
    where = 0 if axis is None else axis % len(dims)
    if mode == "clip":
        ref = np.clip(idx, 0, size - 1)
    elif mode == "wrap":
        ref = np.mod(idx, size)
    else:
        ref = idx
        if ((idx < 0) | (idx >= size)).any():
            with pytest.raises(OpFailure, match="is out of range for axis"):
                run("take", x, idx, axis=axis, mode=mode)
            return
    expected = data[(slice(None),) * where + (ref.astype(np.int64),)]
    out = run("take", x, idx, axis=axis, mode=mode)
    np.testing.assert_array_equal(out, expected)
    conforms(out, rel("take", T(dims), T(idx.shape, str(idx.dtype)), axis=axis, mode=mode))


# ------------------------------------------------------- broadcast_to & co.
def test_broadcast_to():
    assert shape("broadcast_to", T((3, 1)), shape=[2, 3, 4]) == (2, 3, 4)
    assert shape("broadcast_to", T(("?", 4)), shape=[3, 4]) == (3, 4)
    assert shape("broadcast_to", T(()), shape=[]) == ()
    with pytest.raises(RelationError, match=r"broadcast_to: cannot broadcast \(3, 2\) to \(3, 4\)"):
        rel("broadcast_to", T((3, 2)), shape=[3, 4])
    with pytest.raises(RelationError, match=r"cannot broadcast \(n, 4\) to \(3, 4\)"):
        rel("broadcast_to", T(("n", 4)), shape=[3, 4])
    with pytest.raises(RelationError, match="to the smaller rank"):
        rel("broadcast_to", T((3, 4)), shape=[4])
    with pytest.raises(RelationError, match=r"negative size -1 in shape \(3, -1\)"):
        rel("broadcast_to", T((3, 1)), shape=[3, -1])
    x = arange(3, 1)
    out = run("broadcast_to", x, shape=[2, 3, 4])
    np.testing.assert_array_equal(out, np.broadcast_to(x, (2, 3, 4)))
    out[0, 0, 0] = 42  # a fresh array, not a read-only view of x
    assert x[0, 0] == 0
    with pytest.raises(OpFailure, match=r"cannot broadcast \(3, 1\) to \(2, 4\)"):
        run("broadcast_to", x, shape=[2, 4])


def test_zeros_ones_full():
    t = rel("zeros", shape=[2, 3], dtype="int16")
    assert t.shape == (2, 3) and t.dtype == "int16"
    assert shape("ones", shape=[]) == ()
    with pytest.raises(RelationError, match=r"zeros: negative size -2 in shape \(-2\)"):
        rel("zeros", shape=[-2])
    out = run("ones", shape=[2, 3], dtype="int16")
    np.testing.assert_array_equal(out, np.ones((2, 3)))
    conforms(out, t)
    conforms(run("zeros", shape=[0, 2]), rel("zeros", shape=[0, 2]))
    t = rel("full", T((), "float64"), shape=[2], dtype="int32")
    assert t.shape == (2,) and t.dtype == "int32"
    with pytest.raises(RelationError, match="full: the fill value must be a scalar"):
        rel("full", T((1,)), shape=[2])
    with pytest.raises(NotReady):
        rel("full", IncompleteType(), shape=[2])
    out = run("full", np.asarray(2.7, "float64"), shape=[2], dtype="int32")
    np.testing.assert_array_equal(out, [2, 2])
    conforms(out, t)
    out = run("full", np.asarray(True), shape=[1, 2], dtype="float32")
    assert out.dtype == np.float32 and (out == 1).all()


def test_shape_of():
    t = rel("shape_of", T(("n", 3, "?")))
    assert t.shape == (3,) and t.dtype == "int32"
    assert rel("shape_of", T(()), dtype="int64").shape == (0,)
    with pytest.raises(RelationError, match="shape_of: the result must have a signed integer"):
        rel("shape_of", T((2,)), dtype="float32")
    out = run("shape_of", arange(2, 0, 3), dtype="int64")
    np.testing.assert_array_equal(out, [2, 0, 3])
    conforms(out, rel("shape_of", T((2, 0, 3)), dtype="int64"))
    conforms(run("shape_of", np.asarray(1.0)), rel("shape_of", T(())))


# ------------------------------------------------- scatter_add / strided_set
# The adjoints of take and strided_slice (the vjp rules' scatters).
def test_scatter_add_relation():
    assert shape("scatter_add", T((5, 3)), T((2, 4), "int32"), T((2, 4, 3))) == (5, 3)
    assert shape("scatter_add", T(("n", 3)), T(("k",), "int64"), T(("k", 3)), axis=0) == ("n", 3)
    assert shape("scatter_add", T((2, 5)), T((), "uint8"), T((2,)), axis=-1) == (2, 5)
    with pytest.raises(RelationError, match="must have the shape take gives"):
        rel("scatter_add", T((5, 3)), T((2,), "int32"), T((2,)))
    with pytest.raises(RelationError, match="dimension 1 of the updates"):
        rel("scatter_add", T((5, 3)), T((2,), "int32"), T((2, 4)))
    with pytest.raises(RelationError, match="the indices"):
        rel("scatter_add", T((5, 3)), T((2,)), T((2, 3)))
    with pytest.raises(RelationError, match="mode"):
        rel("scatter_add", T((5,)), T((2,), "int32"), T((2,)), mode="raise")
    with pytest.raises(RelationError, match="scalar"):
        rel("scatter_add", T(()), T((2,), "int32"), T((2,)))


@settings(max_examples=30)
@given(
    dims=st.lists(st.integers(1, 4), min_size=1, max_size=3),
    index_shape=st.lists(st.integers(0, 3), max_size=2),
    data=st.data(),
)
def test_scatter_add_is_take_transposed(dims, index_shape, data):
    """<take(x, i), u> == <x, scatter_add(0, i, u)> for every x and u: the
    scatter is the gather's adjoint, repeated and out-of-range indices included."""
    axis = data.draw(st.integers(0, len(dims) - 1))
    mode = data.draw(st.sampled_from(["clip", "wrap"]))
    rng = np.random.default_rng(len(dims) + sum(index_shape))
    indices = rng.integers(-6, 7, index_shape).astype(np.int32)
    x = rng.standard_normal(dims)
    taken = run("take", x, indices, axis=axis, mode=mode)
    u = rng.standard_normal(taken.shape)
    scattered = run("scatter_add", np.zeros_like(x), indices, u, axis=axis, mode=mode)
    assert np.isclose(np.vdot(taken, u), np.vdot(x, scattered))
    base = rng.standard_normal(dims)
    added = run("scatter_add", base, indices, u, axis=axis, mode=mode)
    np.testing.assert_allclose(added, base + scattered)


def test_scatter_add_failures():
    with pytest.raises(OpFailure, match="index 3 is out of range for axis 0 of size 3"):
        run("scatter_add", np.zeros(3), np.array([3]), np.ones(1), mode="fast")
    with pytest.raises(OpFailure, match="axis 0 of size 0"):
        run("scatter_add", np.zeros(0), np.array([0]), np.ones(1))
    # integers wrap around, as take's other adjoints do
    out = run("scatter_add", np.array([127], np.int8), np.array([0, 0]), np.array([1, 1], np.int8))
    assert out.dtype == np.int8 and out[0] == -127


def test_strided_set_relation_and_rule():
    assert shape("strided_set", T((5, 4)), T((2, 4)), begin=[1], end=[5], strides=[2]) == (5, 4)
    with pytest.raises(RelationError, match="dimension 0 of the value"):
        rel("strided_set", T((5, 4)), T((3, 4)), begin=[1], end=[5], strides=[2])
    with pytest.raises(RelationError, match="the data and the value"):
        rel("strided_set", T((5,)), T((2,), "int32"), begin=[1], end=[5], strides=[2])
    x = arange(5, 4)
    out = run("strided_set", x, -np.ones((2, 2), "float32"), begin=[3, 1], end=[0, 4],
              strides=[-2, 2])  # fmt: skip
    expected = x.copy()
    expected[3:0:-2, 1:4:2] = -1
    np.testing.assert_array_equal(out, expected)
    assert x[3, 1] == 13  # the input is not written


@settings(max_examples=30)
@given(dims=st.lists(st.integers(0, 4), min_size=1, max_size=3), data=st.data())
def test_strided_set_is_strided_slice_transposed(dims, data):
    begin = [data.draw(st.integers(-5, 5)) for _ in dims]
    end = [data.draw(st.integers(-5, 5)) for _ in dims]
    strides = [data.draw(st.sampled_from([1, 2, -1, -3])) for _ in dims]
    attrs = {"begin": begin, "end": end, "strides": strides}
    rng = np.random.default_rng(len(dims))
    x = rng.standard_normal(dims)
    sliced = run("strided_slice", x, **attrs)
    v = rng.standard_normal(sliced.shape)
    placed = run("strided_set", np.zeros_like(x), v, **attrs)
    assert np.isclose(np.vdot(sliced, v), np.vdot(x, placed))
    np.testing.assert_array_equal(run("strided_slice", placed, **attrs), v)


def test_scatter_add_and_strided_set_in_the_text_format():
    text = (
        '#[version = "0.0.5"]\n\n'
        "def @main(%x: Tensor[(4, 3), float32], %i: Tensor[(2), int32], "
        "%u: Tensor[(2, 3), float32]) {\n"
        '  let %a = scatter_add(%x, %i, %u, mode="wrap");\n'
        "  strided_set(%a, %u, begin=[0], end=[4], strides=[2])\n"
        "}\n"
    )
    module = effir.check(effir.parse(text))
    assert str(module).strip() == text.strip()
    x = np.zeros((4, 3), np.float32)
    out = effir.interpret(module, x, np.array([1, -1], np.int32), np.ones((2, 3), np.float32))
    np.testing.assert_array_equal(out, np.ones((4, 3)))
