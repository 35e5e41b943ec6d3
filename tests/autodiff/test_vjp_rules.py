"""Every operator's VJP rule (effir/ops/*.py, ``"vjp"``) against central
finite differences in float64, over shapes and attributes drawn by
hypothesis; every operator has a rule or is declared not differentiable;
a missing rule is a located DifferentiationError."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import effir
from effir.ir import all_ops
from effir.ir.builder import LetBuilder
from effir.ir.expr import Call, Op
from effir.ir.op import op_def
from effir.ir.types import TensorType, TupleType
from effir.ir.visitor import post_order
from effir.ir.vjp import NOT_DIFFERENTIABLE, DifferentiationError, VjpContext, vjp_rule
from effir.runtime.values import PRNGKey
from tests.support.isolated import run_isolated

from .vjp_harness import Backward, check_vjp, evaluate, type_of_value

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
@pytest.mark.parametrize(
    "name", ["negative", "exp", "tanh", "sigmoid", "nn.relu", "abs", "sin", "cos"]
)
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


@pytest.mark.parametrize("name", ["mod", "fmod"])
@FEW
@given(shapes=broadcast_pair(), seed=st.integers(0, 2**16))
def test_mod_and_fmod(name, shapes, seed):
    """Away from the jumps (|x| < |y| < 2 |x| keeps the quotient fixed near the
    point): dx = ct, dy = -quotient ct."""
    rng = np.random.default_rng(seed)
    x = rand(rng, shapes[0], low=0.5) * rng.choice([-1.0, 1.0], shapes[0])
    y = np.abs(rand(rng, shapes[1], low=0.2)) * 0.37 * rng.choice([-1.0, 1.0], shapes[1])
    check_vjp(name, [x, y], seed=seed)


@pytest.mark.parametrize("name", ["floor", "ceil"])
def test_floor_and_ceil_have_zero_slope(name):
    (g,) = check_vjp(name, [np.array([-1.3, 0.2, 2.7])], directions=0)
    np.testing.assert_array_equal(g, 0.0)


def test_abs_slope_at_zero_is_zero():
    (g,) = check_vjp("abs", [np.array([-1.0, 0.0, 2.0])], directions=0)
    assert g[1] == 0.0


@FEW
@given(case=st.sampled_from([((5,), 0), ((2, 3), 1), ((2, 3), 0), ((3, 2, 2), -1)]),
       flags=st.tuples(st.booleans(), st.booleans()), seed=st.integers(0, 2**16))  # fmt: skip
def test_cumsum(case, flags, seed):
    shape, axis = case
    x = rand(np.random.default_rng(seed), shape)
    check_vjp("cumsum", [x], seed=seed, axis=axis, exclusive=flags[0], reverse=flags[1])


def test_forget_dims_and_arange():
    check_vjp("forget_dims", [np.arange(6.0).reshape(2, 3)], axes=[0])
    bounds = [np.array(0.25), np.array(3.1), np.array(0.7)]
    (d_start, d_limit, d_delta) = check_vjp("dyn.arange", bounds)
    assert d_limit is None or not np.any(d_limit)


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
    backward = Backward("cast", [type_of_value(x)], {"dtype": dst})
    (g,) = backward([x], np.ones(4, dst))
    assert g.dtype == np.dtype(src) and np.all(g == 1)


def test_cast_to_or_from_integers_has_no_cotangent():
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


# ---------------------------------------------------------------------- shape
nonempty = st.lists(st.integers(1, 3), min_size=1, max_size=3).map(tuple)


@FEW
@given(shape=shapes, seed=st.integers(0, 2**16), flat=st.booleans())
def test_reshape_and_dyn_reshape(shape, seed, flat):
    x = rand(np.random.default_rng(seed), shape)
    newshape = [-1] if flat else list(reversed(shape))
    check_vjp("reshape", [x], seed=seed, newshape=newshape)
    check_vjp("dyn.reshape", [x, np.array(newshape, dtype=np.int64)], seed=seed)


@FEW
@given(shape=shapes, data=st.data())
def test_transpose(shape, data):
    axes = data.draw(st.none() | st.permutations(range(len(shape))))
    x = rand(np.random.default_rng(len(shape)), shape)
    check_vjp("transpose", [x], axes=None if axes is None else list(axes))


@FEW
@given(shape=shapes, data=st.data())
def test_expand_dims(shape, data):
    axis = data.draw(st.integers(-len(shape) - 1, len(shape)))
    count = data.draw(st.integers(0, 2))
    check_vjp("expand_dims", [rand(np.random.default_rng(0), shape)], axis=axis, num_newaxis=count)


@FEW
@given(shape=st.lists(st.sampled_from([1, 2]), max_size=4).map(tuple), data=st.data())
def test_squeeze(shape, data):
    ones = [i for i, d in enumerate(shape) if d == 1]
    axis = data.draw(
        st.none() | st.lists(st.sampled_from(ones), unique=True) if ones else st.none()
    )
    check_vjp("squeeze", [rand(np.random.default_rng(0), shape)], axis=axis)


@FEW
@given(shapes=broadcast_pair(), seed=st.integers(0, 2**16))
def test_broadcast_to(shapes, seed):
    small, big = sorted(shapes, key=len)
    target = np.broadcast_shapes(small, big)
    check_vjp("broadcast_to", [rand(np.random.default_rng(seed), small)], shape=list(target))


@FEW
@given(shape=nonempty, data=st.data())
def test_concatenate_and_stack(shape, data):
    rng = np.random.default_rng(len(shape))
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    sizes = data.draw(st.lists(st.integers(0, 3), min_size=1, max_size=3))
    parts = []
    for size in sizes:
        s = list(shape)
        s[axis] = size
        parts.append(rand(rng, tuple(s)))
    check_vjp("concatenate", [tuple(parts)], axis=axis)
    same = tuple(rand(rng, shape) for _ in sizes)
    check_vjp("stack", [same], axis=data.draw(st.integers(-len(shape) - 1, len(shape))))


@FEW
@given(shape=nonempty, data=st.data())
def test_split(shape, data):
    axis = data.draw(st.integers(0, len(shape) - 1))
    spec = data.draw(
        st.sampled_from([d for d in (1, 2, 3) if shape[axis] % d == 0])
        | st.lists(st.integers(0, 4), max_size=2).map(sorted)
    )
    x = rand(np.random.default_rng(0), shape)
    pieces = len(spec) + 1 if isinstance(spec, list) else spec
    with_ct = data.draw(st.lists(st.booleans(), min_size=pieces, max_size=pieces))
    check_vjp("split", [x], with_ct=with_ct, indices_or_sections=spec, axis=axis)


@st.composite
def slicing(draw):
    shape = draw(nonempty)
    begin, end, strides = [], [], []
    for d in shape[: draw(st.integers(1, len(shape)))]:
        begin.append(draw(st.integers(-d - 1, d + 1)))
        end.append(draw(st.integers(-d - 1, d + 1)))
        strides.append(draw(st.sampled_from([1, 2, -1, -2])))
    return shape, {"begin": begin, "end": end, "strides": strides}


@FEW
@given(case=slicing(), seed=st.integers(0, 2**16))
def test_strided_slice_and_strided_set(case, seed):
    shape, attrs = case
    rng = np.random.default_rng(seed)
    x = rand(rng, shape)
    check_vjp("strided_slice", [x], seed=seed, **attrs)
    v = rand(rng, np.asarray(x[tuple(slice(*t) for t in zip(*attrs.values(), strict=True))]).shape)
    check_vjp("strided_set", [x, v], seed=seed, **attrs)


@FEW
@given(shape=nonempty, data=st.data(), seed=st.integers(0, 2**16))
def test_take_and_scatter_add(shape, data, seed):
    rng = np.random.default_rng(seed)
    axis = data.draw(st.none() | st.integers(-len(shape), len(shape) - 1))
    mode = data.draw(st.sampled_from(["clip", "wrap", "fast"]))
    size = int(np.prod(shape)) if axis is None else shape[axis]
    index_shape = data.draw(st.lists(st.integers(1, 4), max_size=2).map(tuple))
    low, high = (0, size) if mode == "fast" else (-size - 2, size + 2)
    indices = rng.integers(low, high, index_shape).astype(np.int32)
    x = rand(rng, shape)
    (g, none) = check_vjp("take", [x, indices], seed=seed, axis=axis, mode=mode)
    assert none is None
    if axis is not None:
        updates = rand(rng, np.take(x, np.clip(indices, 0, size - 1), axis=axis).shape)
        check_vjp("scatter_add", [x, indices, updates], seed=seed, axis=axis, mode=mode)


def test_embedding_backward_accumulates_repeated_rows():
    table = np.zeros((4, 2))
    tokens = np.array([[1, 3], [1, 1]], dtype=np.int32)
    (g, _) = check_vjp("take", [table, tokens], axis=0, directions=0)
    ct = np.random.default_rng(0).standard_normal((2, 2, 2))
    expected = np.zeros((4, 2))
    np.add.at(expected, tokens, ct)
    np.testing.assert_allclose(g, expected)


# ------------------------------------------------------------------------- nn
@FEW
@given(
    lead=st.lists(st.integers(1, 3), max_size=2).map(tuple),
    k=st.integers(1, 3),
    units=st.integers(1, 3),
    seed=st.integers(0, 2**16),
)
def test_dense(lead, k, units, seed):
    rng = np.random.default_rng(seed)
    check_vjp("nn.dense", [rand(rng, lead + (k,)), rand(rng, (units, k))], seed=seed)


@FEW
@given(
    batch=broadcast_pair(),
    mkn=st.tuples(st.integers(1, 3), st.integers(1, 3), st.integers(1, 3)),
    ta=st.booleans(),
    tb=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_matmul(batch, mkn, ta, tb, seed):
    m, k, n = mkn
    rng = np.random.default_rng(seed)
    a = rand(rng, batch[0] + ((k, m) if ta else (m, k)))
    b = rand(rng, batch[1] + ((n, k) if tb else (k, n)))
    check_vjp("nn.matmul", [a, b], seed=seed, transpose_a=ta, transpose_b=tb)


@pytest.mark.parametrize("name", ["nn.softmax", "nn.log_softmax"])
@FEW
@given(shape=nonempty, data=st.data(), seed=st.integers(0, 2**16))
def test_softmax(name, shape, data, seed):
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    check_vjp(name, [rand(np.random.default_rng(seed), shape)], seed=seed, axis=axis)


@FEW
@given(
    shape=st.lists(st.integers(2, 3), min_size=1, max_size=3).map(tuple),
    data=st.data(),
    seed=st.integers(0, 2**16),
)
def test_layer_norm(shape, data, seed):
    rng = np.random.default_rng(seed)
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    c = shape[axis]
    flags = {"center": data.draw(st.booleans()), "scale": data.draw(st.booleans())}
    inputs = [rand(rng, shape), rand(rng, (c,)), rand(rng, (c,))]
    grads = check_vjp("nn.layer_norm", inputs, seed=seed, axis=axis, epsilon=1e-3, **flags)
    assert (grads[1] is None) != flags["scale"] and (grads[2] is None) != flags["center"]


@st.composite
def channels(draw):
    shape = draw(st.lists(st.integers(1, 3), min_size=2, max_size=3).map(tuple))
    axis = draw(st.integers(-len(shape), len(shape) - 1))
    if np.prod(shape) // shape[axis] < 2:  # training needs 2 values per channel
        shape = (3,) + shape
        axis = axis + 1 if axis >= 0 else axis
    return shape, axis


@FEW
@given(case=channels(), seed=st.integers(0, 2**16))
def test_batch_norm_infer(case, seed):
    shape, axis = case
    rng = np.random.default_rng(seed)
    c = shape[axis]
    inputs = [rand(rng, shape)] + [rand(rng, (c,)) for _ in range(3)] + [rand(rng, (c,), 0.5)]
    check_vjp("nn.batch_norm_infer", inputs, seed=seed, axis=axis, epsilon=1e-3)


@FEW
@given(
    case=channels(),
    with_ct=st.lists(st.booleans(), min_size=3, max_size=3),
    seed=st.integers(0, 2**16),
)
def test_batch_norm_train(case, with_ct, seed):
    """Through the batch statistics; the running statistics are state: no
    cotangent when the new ones get none (as in a state-passing program)."""
    shape, axis = case
    rng = np.random.default_rng(seed)
    c = shape[axis]
    inputs = [rand(rng, shape)] + [rand(rng, (c,)) for _ in range(3)] + [rand(rng, (c,), 0.5)]
    attrs = {"axis": axis, "epsilon": 1e-3, "momentum": 0.3}
    grads = check_vjp("nn.batch_norm_train", inputs, seed=seed, with_ct=with_ct, **attrs)
    assert (grads[3] is None) != with_ct[1] and (grads[4] is None) != with_ct[2]


# ------------------------------------------------------------ random, effects
@FEW
@given(shape=shapes, rate=st.sampled_from([0.0, 0.25, 0.5, 1.0]), seed=st.integers(0, 2**16))
def test_dropout_backward_uses_the_forward_mask(shape, rate, seed):
    """The same key draws the same bits: the backward's mask is the forward's."""
    rng = np.random.default_rng(seed)
    x = rand(rng, shape)
    key = PRNGKey([seed, 7])
    (g, none) = check_vjp("random.dropout", [x, key], seed=seed, rate=rate)
    assert none is None
    kept = evaluate("random.dropout", [np.ones(shape), key], {"rate": rate}) != 0
    ct = np.random.default_rng(seed).standard_normal(shape)
    scale = 0.0 if rate == 1.0 else 1 / (1 - rate)
    np.testing.assert_allclose(g, np.where(kept, ct * scale, 0.0))


def test_print_passes_the_cotangent_through():
    x = np.arange(3.0)
    (g,) = check_vjp("debug.print", [x], label="x")
    world, gx = check_vjp("io.print", [np.int64(0), x], with_ct=[False, True])
    assert world is None and np.array_equal(gx, g)


@FEW
@given(shape=shapes, seed=st.integers(0, 2**16))
def test_full_sums_into_the_fill_value(shape, seed):
    value = np.asarray(np.random.default_rng(seed).standard_normal())
    check_vjp("full", [value], seed=seed, shape=list(shape), dtype="float64")
    # a float32 result (no finite differences there): the sum, cast back
    (g,) = check_vjp("full", [value], seed=seed, shape=list(shape), dtype="float32", directions=0)
    ct = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    assert g.dtype == np.float64 and np.isclose(g, ct.sum(), rtol=1e-5)
    sizes = np.array(shape, dtype=np.int64)
    _, none = check_vjp("dyn.full", [value, sizes], seed=seed, dtype="float64")
    assert none is None


@FEW
@given(shape=nonempty, data=st.data(), seed=st.integers(0, 2**16))
def test_boolean_mask(shape, data, seed):
    rng = np.random.default_rng(seed)
    k = data.draw(st.integers(0, len(shape)))
    mask = rng.random(shape[:k]) < 0.5
    g, none = check_vjp("boolean_mask", [rand(rng, shape), mask], seed=seed)
    assert none is None
    assert np.all(g[~mask] == 0)


def test_boolean_mask_with_symbolic_trailing_dimensions():
    x = np.arange(12.0).reshape(2, 3, 2)
    mask = np.array([[True, False, True], [False, False, True]])
    types = [TensorType((2, 3, "m"), "float64"), TensorType((2, 3), "bool")]
    g, _ = check_vjp("boolean_mask", [x, mask], types=types)
    assert np.all(g[~mask] == 0) and np.all(g[mask] != 0)


@pytest.mark.parametrize("name", ["nn.dropout", "nn.batch_norm"])
def test_surface_effect_operators_ask_for_state_passing(name):
    source = (
        '#[version = "0.0.5"]\n'
        "global @rng: Ref[Key] = ref(random.key(0));\n"
        "global @bn: Ref[(Tensor[(2), float32], Tensor[(2), float32])] = "
        "ref((zeros(shape=[2]), ones(shape=[2])));\n"
        "def @main(%x: Tensor[(3, 2), float32], %g: Tensor[(2), float32]) {\n"
        "  let %d = nn.dropout(%x, @rng);\n"
        "  nn.batch_norm(%d, %g, %g, @bn, training=True)\n"
        "}\n"
    )
    module = effir.check(effir.parse(source))
    call = next(c for c in calls(module) if c.callee.name == name)
    ctx = VjpContext(LetBuilder(), call)
    with pytest.raises(DifferentiationError, match="state-passing") as err:
        vjp_rule(call)(ctx, call.args, call.attrs, call.args[0], call.args[0])
    assert err.value.span is not None and err.value.span.line >= 5


# ------------------------------------------------------------------- coverage
CONTROL_FLOW = {"cf.foreach", "cf.while_loop"}  # the grad transformation's own


def test_every_operator_has_a_vjp_rule_or_is_declared_not_differentiable():
    missing = [d.name for d in all_ops() if d.name not in CONTROL_FLOW and "vjp" not in d.rules]
    assert not missing, f"operators without a vjp rule: {missing}"
    declared = {d.name for d in all_ops() if d.rules.get("vjp") is NOT_DIFFERENTIABLE}
    assert {"equal", "argmax", "argwhere", "shape_of", "random.normal", "zeros"} <= declared
    assert not {"exp", "take", "nn.dense", "random.dropout", "boolean_mask"} & declared


def test_a_missing_rule_names_the_operator_and_its_location(monkeypatch):
    module = effir.check(
        effir.parse(
            '#[version = "0.0.5"]\n'
            "def @main(%x: Tensor[(3), float32]) {\n  let %y = negative(%x);\n  exp(%y)\n}\n"
        )
    )
    call = next(c for c in calls(module) if c.callee.name == "exp")
    monkeypatch.delitem(op_def("exp").rules, "vjp")
    with pytest.raises(DifferentiationError, match="operator exp has no vjp rule") as err:
        vjp_rule(call)
    assert err.value.span is not None and err.value.span.line == 4
    assert "exp(%y)" in str(err.value)


def calls(module):
    return [
        n for n in post_order(module["main"]) if isinstance(n, Call) and isinstance(n.callee, Op)
    ]


# ---------------------------------------------------------- symbolic shapes
def sym(shape, dtype="float64"):
    return TensorType(shape, dtype)


def _symbolic_cases():
    rng = np.random.default_rng(5)
    x = rand(rng, (4, 3))
    idx = np.array([2, 0, 2], np.int32)
    c = 3
    return [
        ("sum", [x], [sym(("n", 3))], {"axis": [0]}),
        ("mean", [x], [sym(("n", "m"))], {"axis": [1], "keepdims": True}),
        ("max", [x], [sym(("n", 3))], {"axis": [0]}),
        ("prod", [x], [sym(("n", 3))], {}),
        ("add", [x, rand(rng, (3,))], [sym(("n", 3)), sym((3,))], {}),
        # sizes that may be 1 at run time: summed where they were (unbroadcast)
        ("add", [x, rand(rng, (1, 3))], [sym(("n", 3)), sym(("?", 3))], {}),
        ("multiply", [x, rand(rng, (4, 3))], [sym(("n", 3)), sym(("?", 3))], {}),
        ("add", [x, rand(rng, (1, 1))], [sym(("?", "?")), sym(("?", "?"))], {}),
        ("multiply", [rand(rng, (4, 1)), x], [sym(("?", "?")), sym((4, 3))], {}),
        ("maximum", [rand(rng, (1, 3)), x], [sym(("?", 3)), sym(("?", 3))], {}),
        ("reshape", [x], [sym(("n", 3))], {"newshape": [-1]}),
        ("strided_slice", [x], [sym(("n", 3))], {"begin": [1], "end": [3]}),
        ("split", [x], [sym(("n", 3))], {"indices_or_sections": 2}),
        ("concatenate", [(x, x)], [TupleType((sym((4, 3)), sym(("n", 3))))], {"axis": 0}),
        ("take", [x, idx], [sym(("n", 3)), sym(("k",), "int32")], {"axis": 0}),
        ("take", [x, idx], [sym(("n", 3)), sym((3,), "int32")], {}),
        ("nn.dense", [x, rand(rng, (2, 3))], [sym(("n", 3)), sym((2, 3))], {}),
        (
            "nn.dense",
            [rand(rng, (2, 2, 3)), rand(rng, (2, 3))],
            [sym(("b", 2, "k")), sym((2, "k"))],
            {},
        ),
        ("nn.softmax", [x], [sym(("n", "m"))], {}),
        (
            "nn.layer_norm",
            [x, rand(rng, (c,)), rand(rng, (c,))],
            [sym(("n", 3)), sym((3,)), sym((3,))],
            {},
        ),
        (
            "nn.batch_norm_train",
            [x] + [rand(rng, (c,)) for _ in range(3)] + [rand(rng, (c,), 0.5)],
            [sym(("n", 3))] + [sym((3,))] * 4,
            {"axis": 1},
        ),
    ]


@pytest.mark.parametrize("case", _symbolic_cases(), ids=lambda c: c[0])
def test_rules_with_symbolic_shapes(case):
    """Dimensions like ``n`` read their sizes at run time (shape_of, dyn.*)."""
    name, inputs, types, attrs = case
    check_vjp(name, inputs, types=types, **attrs)


@pytest.mark.parametrize(
    ("shapes", "types", "axis"),
    [
        ([(2, 3), (4, 3)], [("n", 3), (4, 3)], 0),
        ([(2, 3), (2, 1), (2, 4)], [(2, "k"), (2, "j"), (2, "m")], 1),
        ([(2, 2), (2, 3), (2, 1)], [(2, 2), ("?", "?"), (2, 1)], -1),
    ],
)
def test_concatenate_of_sizes_known_at_run_time(shapes, types, axis):
    # before: "concatenate: the size n of an input along axis 0 is known
    # only at run time (only the last input's may be)"
    rng = np.random.default_rng(len(shapes))
    inputs = [tuple(rand(rng, shape) for shape in shapes)]
    check_vjp("concatenate", inputs, types=[TupleType(tuple(sym(t) for t in types))], axis=axis)


# ------------------------------------------------------------------ compiled
@pytest.mark.tvm
def test_compiled_backward_programs_equal_the_interpreter():
    """dense, softmax, take's scatter-add (static and symbolic token counts),
    batch_norm_train, dropout, strided_slice's strided_set and boolean_mask's
    scatter back, compiled as one module (compiled code: in a fresh process)."""
    script = "from tests.autodiff.vjp_harness import compiled_backward_check\n"
    script += "print(compiled_backward_check())\n"
    result = run_isolated(script).check()
    assert result.stdout.strip().endswith("ok")


@pytest.mark.parametrize(
    ("name", "inputs", "attrs"),
    [
        ("divide", [np.arange(3), np.ones(3, np.int64)], {}),
        ("nn.relu", [np.arange(3)], {}),
        ("sum", [np.arange(3)], {}),
        ("max", [np.arange(3)], {}),
        ("take", [np.arange(3), np.array([0, 2], np.int32)], {}),
        ("reshape", [np.arange(4)], {"newshape": [2, 2]}),
        ("nn.dense", [np.ones((2, 3), np.int8), np.ones((4, 3), np.int8)], {"out_dtype": "int32"}),
        ("where", [np.array([True, False]), np.arange(2), np.arange(2)], {}),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_integer_values_have_no_cotangent(name, inputs, attrs):
    backward = Backward(name, [type_of_value(v) for v in inputs], attrs)
    assert not any(backward.present)


HALF = [
    ("power", [TensorType((3,), "float16")] * 2, {}),
    ("maximum", [TensorType((3,), "float16"), TensorType((1,), "float16")], {}),
    ("prod", [TensorType((3, 2), "float16")], {}),
    ("nn.log_softmax", [TensorType((3, 2), "float16")], {}),
    ("nn.layer_norm", [TensorType((3, 2), "float16")] + [TensorType((2,), "float16")] * 2, {}),
    (
        "nn.batch_norm_train",
        [TensorType((3, 2), "float16")] + [TensorType((2,), "float16")] * 4,
        {},
    ),
    (
        "nn.dense",
        [TensorType((3, 2), "float16"), TensorType((4, 2), "float16")],
        {"out_dtype": "float32"},
    ),
    ("full", [TensorType((), "float16")], {"shape": [2], "dtype": "float32"}),
]


@pytest.mark.parametrize(("name", "types", "attrs"), HALF, ids=[c[0] for c in HALF])
def test_rules_type_check_in_float16(name, types, attrs):
    """The rules' constants take the values' dtype; a widened result
    (out_dtype, a float32 fill) gives its cotangent back in the input's."""
    backward = Backward(name, types, attrs)
    assert any(backward.present)
