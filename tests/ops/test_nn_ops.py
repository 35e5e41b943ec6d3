"""Neural-network operators: dense, matmul, softmax, layer and batch norm.
Type relations on static, symbolic and ``?`` shapes with their messages;
numpy rules against independent formulas and, for batch_norm_train, against
values PyTorch 2.13 computes (written in as constants: torch is not a dependency)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import effir  # noqa: F401  (registers the operators)
from effir.ir.types import IncompleteType, TensorType, TupleType
from effir.ops.relations import NotReady, OpFailure, RelationError

from .rules import T, rel, run


def assert_type(t, shape, dtype="float32"):
    assert isinstance(t, TensorType)
    assert (t.shape, t.dtype) == (tuple(shape), dtype)


RNG = np.random.default_rng(0)


def randn(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


# ------------------------------------------------------------------- dense
@pytest.mark.parametrize(
    ("x", "w", "out"),
    [
        ((4, 256), (768, 256), (4, 768)),
        (("n", 256), (768, 256), ("n", 768)),
        (("b", "s", 64), ("u", 64), ("b", "s", "u")),
        (("?", "?"), (10, 3), ("?", 10)),
        ((3,), ("?", 3), ("?",)),
        (("n", "k"), (5, "k"), ("n", 5)),
    ],
)
def test_dense_relation(x, w, out):
    assert_type(rel("nn.dense", T(x), T(w)), out)


def test_dense_relation_units_and_out_dtype():
    assert_type(rel("nn.dense", T(("n", 8)), T(("?", 8)), units=16), ("n", 16))
    assert_type(rel("nn.dense", T((2, 8)), T((16, 8)), units=16), (2, 16))
    t = rel("nn.dense", T((2, 8), "int8"), T((16, 8), "int8"), out_dtype="int32")
    assert_type(t, (2, 16), "int32")
    assert_type(rel("nn.dense", T((2, 8), "float16"), T((16, 8), "float16")), (2, 16), "float16")


def test_dense_relation_errors():
    with pytest.raises(
        RelationError, match="^nn.dense: the reduction dimensions do not match: 256 vs 128$"
    ):
        rel("nn.dense", T(("n", 256)), T((768, 128)))
    with pytest.raises(RelationError, match="reduction dimensions do not match: k vs j"):
        rel("nn.dense", T(("n", "k")), T((768, "j")))
    with pytest.raises(
        RelationError, match="units and the weight's first dimension do not match: 10 vs 768"
    ):
        rel("nn.dense", T((2, 4)), T((768, 4)), units=10)
    with pytest.raises(RelationError, match="the weight must be 2-d"):
        rel("nn.dense", T((2, 4)), T((4,)))
    with pytest.raises(RelationError, match="the data must have at least one dimension"):
        rel("nn.dense", T(()), T((3, 4)))
    with pytest.raises(RelationError, match="same dtype, got float32, float16"):
        rel("nn.dense", T((2, 4)), T((3, 4), "float16"))
    with pytest.raises(RelationError, match="got bool"):
        rel("nn.dense", T((2, 4), "bool"), T((3, 4), "bool"))
    with pytest.raises(RelationError, match='out_dtype "float" is not a dtype'):
        rel("nn.dense", T((2, 4)), T((3, 4)), out_dtype="float")
    with pytest.raises(RelationError, match="out_dtype must be a numeric dtype"):
        rel("nn.dense", T((2, 4)), T((3, 4)), out_dtype="bool")
    with pytest.raises(NotReady):
        rel("nn.dense", T((2, 4)), IncompleteType())


def test_dense_values():
    x, w = randn(2, 3, 5), randn(4, 5)
    out = run("nn.dense", x, w)
    assert out.dtype == np.float32 and out.shape == (2, 3, 4)
    expected = np.einsum("bsk,uk->bsu", x.astype(np.float64), w.astype(np.float64))
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)
    out = run("nn.dense", x[0, 0], w, units=4)  # 1-d data
    np.testing.assert_allclose(out, expected[0, 0], rtol=1e-5, atol=1e-5)
    out = run("nn.dense", x, w, out_dtype="float64")
    assert out.dtype == np.float64
    np.testing.assert_allclose(out, expected, rtol=1e-12)


def test_dense_integer_values_and_out_dtype():
    x = np.array([[100, 100]], np.int8)
    w = np.array([[1, 1], [1, -1]], np.int8)
    out = run("nn.dense", x, w, out_dtype="int32")
    assert out.dtype == np.int32 and out.tolist() == [[200, 0]]
    out = run("nn.dense", x, w)  # int8 arithmetic wraps
    assert out.dtype == np.int8 and out.tolist() == [[200 - 256, 0]]


def test_dense_float16_keeps_its_dtype():
    x, w = randn(3, 64, dtype=np.float16), randn(2, 64, dtype=np.float16)
    out = run("nn.dense", x, w)
    assert out.dtype == np.float16
    expected = x.astype(np.float64) @ w.astype(np.float64).T
    np.testing.assert_allclose(out, expected, rtol=1e-2, atol=1e-2)


def test_dense_run_time_mismatches():
    with pytest.raises(OpFailure, match="reduction dimensions do not match: 3 vs 4"):
        run("nn.dense", randn(2, 3), randn(5, 4))
    with pytest.raises(OpFailure, match="units=6"):
        run("nn.dense", randn(2, 4), randn(5, 4), units=6)


# ------------------------------------------------------------------ matmul
@pytest.mark.parametrize(
    ("a", "b", "attrs", "out"),
    [
        ((3, 4), (4, 5), {}, (3, 5)),
        ((2, 1, 3, 4), (5, 4, 6), {}, (2, 5, 3, 6)),
        (("b", "m", "k"), ("b", "k", "n"), {}, ("b", "m", "n")),
        (("b", "m", "k"), (1, "k", "n"), {}, ("b", "m", "n")),
        (("?", 3, 4), (2, 4, 5), {}, (2, 3, 5)),
        ((4, 3), (4, 5), {"transpose_a": True}, (3, 5)),
        ((3, 4), (5, 4), {"transpose_b": True}, (3, 5)),
        ((7, 4, 3), (5, 4), {"transpose_a": True, "transpose_b": True}, (7, 3, 5)),
        ((3, 4), (4, "?"), {"units": 5}, (3, 5)),
        ((3, 4), (4, 5), {"out_dtype": "float64"}, (3, 5)),
    ],
)
def test_matmul_relation(a, b, attrs, out):
    dtype = attrs.get("out_dtype", "float32")
    assert_type(rel("nn.matmul", T(a), T(b), **attrs), out, dtype)


def test_matmul_relation_errors():
    with pytest.raises(
        RelationError, match="^nn.matmul: the reduction dimensions do not match: 4 vs 3"
    ):
        rel("nn.matmul", T((3, 4)), T((3, 5)))
    with pytest.raises(RelationError, match="the reduction dimensions do not match: 3 vs 4"):
        rel("nn.matmul", T((3, 4)), T((4, 5)), transpose_a=True)
    with pytest.raises(RelationError, match="the reduction dimensions do not match: 4 vs 5"):
        rel("nn.matmul", T((3, 4)), T((4, 5)), transpose_b=True)
    with pytest.raises(RelationError, match="the first argument must have rank >= 2"):
        rel("nn.matmul", T((4,)), T((4, 5)))
    with pytest.raises(RelationError, match="the second argument must have rank >= 2"):
        rel("nn.matmul", T((3, 4)), T((4,)))
    with pytest.raises(RelationError, match=r"shapes \(2\) and \(3\) do not broadcast"):
        rel("nn.matmul", T((2, 3, 4)), T((3, 4, 5)))
    with pytest.raises(
        RelationError, match="units and the output's last dimension do not match: 6 vs 5"
    ):
        rel("nn.matmul", T((3, 4)), T((4, 5)), units=6)
    with pytest.raises(RelationError, match="same dtype, got float32, float64"):
        rel("nn.matmul", T((3, 4)), T((4, 5), "float64"))


@pytest.mark.parametrize("transpose_a", [False, True])
@pytest.mark.parametrize("transpose_b", [False, True])
def test_matmul_values(transpose_a, transpose_b):
    a = randn(2, 1, 3, 4)
    b = randn(5, 4, 6)
    if transpose_a:
        a = np.ascontiguousarray(np.swapaxes(a, -1, -2))
    if transpose_b:
        b = np.ascontiguousarray(np.swapaxes(b, -1, -2))
    out = run("nn.matmul", a, b, transpose_a=transpose_a, transpose_b=transpose_b)
    a64 = a.astype(np.float64)
    b64 = b.astype(np.float64)
    sa = "...km" if transpose_a else "...mk"
    sb = "...nk" if transpose_b else "...kn"
    expected = np.einsum(f"{sa},{sb}->...mn", a64, b64)
    assert out.dtype == np.float32 and out.shape == expected.shape == (2, 5, 3, 6)
    t = rel("nn.matmul", T(a.shape), T(b.shape), transpose_a=transpose_a, transpose_b=transpose_b)
    assert t.shape == out.shape
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)


def test_matmul_run_time_mismatches():
    with pytest.raises(OpFailure, match="reduction dimensions"):
        run("nn.matmul", randn(3, 4), randn(5, 6))
    with pytest.raises(OpFailure, match="do not broadcast"):
        run("nn.matmul", randn(2, 3, 4), randn(3, 4, 5))


@given(
    hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=2, max_side=3),
    st.integers(0, 3),
    st.integers(0, 3),
    st.integers(0, 3),
)
@settings(max_examples=60, deadline=None)
def test_matmul_batch_broadcasting(batch, m, k, n):
    a_batch, b_batch = batch.input_shapes
    a = np.ones(a_batch + (m, k), np.float32)
    b = np.ones(b_batch + (k, n), np.float32)
    out = run("nn.matmul", a, b)
    t = rel("nn.matmul", T(a.shape), T(b.shape))
    assert t.shape == out.shape == batch.result_shape + (m, n)
    np.testing.assert_array_equal(out, np.full(out.shape, k, np.float32))


# ----------------------------------------------------------------- softmax
@pytest.mark.parametrize("name", ["nn.softmax", "nn.log_softmax"])
def test_softmax_relation(name):
    assert_type(rel(name, T(("n", "?", 10))), ("n", "?", 10))
    assert_type(rel(name, T((2, 3), "float16"), axis=0), (2, 3), "float16")
    with pytest.raises(RelationError, match=f"^{name}: .*float dtype, got int32"):
        rel(name, T((2, 3), "int32"))
    with pytest.raises(RelationError, match="axis 2 is out of range for a tensor of rank 2"):
        rel(name, T((2, 3)), axis=2)
    with pytest.raises(RelationError, match="axis -1 is out of range for a tensor of rank 0"):
        rel(name, T(()))


def _softmax64(x, axis):
    e = np.exp(x.astype(np.float64))
    return e / e.sum(axis=axis, keepdims=True)


@pytest.mark.parametrize("axis", [-1, 0, 1])
@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_softmax_values(axis, dtype):
    x = randn(3, 4, 2).astype(dtype)
    out = run("nn.softmax", x, axis=axis)
    log_out = run("nn.log_softmax", x, axis=axis)
    assert out.dtype == log_out.dtype == np.dtype(dtype)
    tolerance = 2e-3 if dtype == "float16" else 1e-6
    expected = _softmax64(x, axis)
    np.testing.assert_allclose(out, expected, rtol=tolerance, atol=tolerance)
    np.testing.assert_allclose(log_out, np.log(expected), rtol=tolerance, atol=tolerance)


@pytest.mark.filterwarnings("error")
def test_softmax_is_numerically_stable():
    x = np.array([[1000.0, 1001.0, 1002.0], [-1000.0, -1000.0, -1e30]], np.float32)
    out = run("nn.softmax", x)
    shifted = np.array([[-2.0, -1.0, 0.0], [0.0, 0.0, -np.inf]])
    np.testing.assert_allclose(out, _softmax64(shifted, -1), rtol=1e-6)
    log_out = run("nn.log_softmax", x)
    assert np.isfinite(log_out[0]).all()
    np.testing.assert_allclose(log_out[0], np.log(_softmax64(shifted[:1], -1))[0], rtol=1e-6)
    assert run("nn.softmax", np.zeros((2, 0), np.float32)).shape == (2, 0)


# -------------------------------------------------------------- layer norm
def test_layer_norm_relation():
    g = T((768,))
    assert_type(rel("nn.layer_norm", T(("b", "s", 768)), g, g), ("b", "s", 768))
    # `?` in the data is refined by gamma's length
    assert_type(rel("nn.layer_norm", T(("b", "?")), g, T(("?",))), ("b", 768))
    assert_type(rel("nn.layer_norm", T(("d", 5)), T(("d",)), T(("d",)), axis=0), ("d", 5))
    with pytest.raises(
        RelationError,
        match="^nn.layer_norm: the length of gamma and axis 2 of the data do not match: 512 vs 768",
    ):
        rel("nn.layer_norm", T((2, 3, 768)), T((512,)), g)
    with pytest.raises(RelationError, match="the length of beta and axis 1 of the data"):
        rel("nn.layer_norm", T((2, "n")), T(("n",)), T(("m",)))
    with pytest.raises(RelationError, match="gamma must be 1-d"):
        rel("nn.layer_norm", T((2, 3)), T((1, 3)), T((3,)))
    with pytest.raises(
        RelationError, match="the data and beta must have the same dtype, got float32, float16"
    ):
        rel("nn.layer_norm", T((2, 3)), T((3,)), T((3,), "float16"))
    with pytest.raises(RelationError, match="the data must have a float dtype, got int32"):
        rel("nn.layer_norm", T((2, 3), "int32"), T((3,), "int32"), T((3,), "int32"))
    with pytest.raises(RelationError, match="axis 2 is out of range"):
        rel("nn.layer_norm", T((2, 3)), g, g, axis=2)
    with pytest.raises(NotReady):
        rel("nn.layer_norm", T((2, 3)), T((3,)), IncompleteType())


def _layer_norm64(x, gamma, beta, axis, eps, center=True, scale=True):
    x = x.astype(np.float64)
    mean = x.mean(axis=axis, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=axis, keepdims=True)
    y = (x - mean) / np.sqrt(var + eps)
    shape = [1] * x.ndim
    shape[axis] = -1
    if scale:
        y = y * gamma.astype(np.float64).reshape(shape)
    if center:
        y = y + beta.astype(np.float64).reshape(shape)
    return y


@pytest.mark.parametrize("axis", [-1, 1, 0])
@pytest.mark.parametrize(("center", "scale"), [(True, True), (False, True), (True, False)])
def test_layer_norm_values(axis, center, scale):
    x = randn(3, 4, 5) * 3 + 1
    c = x.shape[axis]
    gamma, beta = randn(c), randn(c)
    attrs = {"axis": axis, "epsilon": 1e-3, "center": center, "scale": scale}
    out = run("nn.layer_norm", x, gamma, beta, **attrs)
    assert out.dtype == np.float32 and out.shape == x.shape
    expected = _layer_norm64(x, gamma, beta, axis, 1e-3, center, scale)
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-5)


def test_layer_norm_float16_and_run_time_mismatch():
    x = randn(2, 8, dtype=np.float16)
    g, b = np.ones(8, np.float16), np.zeros(8, np.float16)
    out = run("nn.layer_norm", x, g, b)
    assert out.dtype == np.float16
    np.testing.assert_allclose(out, _layer_norm64(x, g, b, -1, 1e-5), atol=1e-2)
    with pytest.raises(OpFailure, match=r"gamma has shape \(7,\), expected \(8,\)"):
        run("nn.layer_norm", randn(2, 8), randn(7), randn(8))


# --------------------------------------------------------------- batch norm
BN_ARGS = ("gamma", "beta", "running_mean", "running_var")


def test_batch_norm_relations():
    v = T(("c",))
    x = T(("n", "c", "?", "?"))
    assert_type(rel("nn.batch_norm_infer", x, v, v, v, v), ("n", "c", "?", "?"))
    t = rel("nn.batch_norm_train", x, v, v, v, v)
    assert isinstance(t, TupleType) and len(t.fields) == 3
    assert_type(t.fields[0], ("n", "c", "?", "?"))
    assert_type(t.fields[1], ("c",))
    assert_type(t.fields[2], ("c",))
    # channels last, and a `?` channel refined by a vector
    q = T(("?",), "float64")
    t = rel("nn.batch_norm_train", T((8, "?"), "float64"), q, T((16,), "float64"), q, q, axis=-1)
    assert_type(t.fields[0], (8, 16), "float64")
    assert_type(t.fields[2], (16,), "float64")


@pytest.mark.parametrize("name", ["nn.batch_norm_infer", "nn.batch_norm_train"])
def test_batch_norm_relation_errors(name):
    v = T((3,))
    with pytest.raises(
        RelationError,
        match=f"^{name}: the length of running_var and axis 1 of the data do not match: 4 vs 3",
    ):
        rel(name, T((2, 3, 5)), v, v, v, T((4,)))
    with pytest.raises(RelationError, match="the length of gamma and axis 2 of the data"):
        rel(name, T((2, 5, 4)), v, v, v, v, axis=2)
    with pytest.raises(RelationError, match="running_mean must be 1-d"):
        rel(name, T((2, 3)), v, v, T((3, 1)), v)
    with pytest.raises(RelationError, match="the data and beta must have the same dtype"):
        rel(name, T((2, 3)), v, T((3,), "float64"), v, v)
    with pytest.raises(RelationError, match="float dtype, got int32"):
        i = T((3,), "int32")
        rel(name, T((2, 3), "int32"), i, i, i, i)
    with pytest.raises(RelationError, match="axis 1 is out of range for a tensor of rank 1"):
        rel(name, T((3,)), v, v, v, v)


def test_batch_norm_infer_values():
    x = randn(4, 3, 2)
    gamma, beta, mean = randn(3), randn(3), randn(3)
    var = np.abs(randn(3)) + 0.5
    out = run("nn.batch_norm_infer", x, gamma, beta, mean, var, epsilon=1e-3)
    assert out.dtype == np.float32 and out.shape == x.shape
    s = (1, 3, 1)
    expected = (x.astype(np.float64) - mean.reshape(s)) / np.sqrt(
        var.reshape(s).astype(np.float64) + 1e-3
    ) * gamma.reshape(s) + beta.reshape(s)
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-6)
    out = run("nn.batch_norm_infer", x, *(np.ones(2, np.float32),) * 4, axis=-1)
    assert out.shape == x.shape


def test_batch_norm_train_by_hand():
    # channel 0: 1, 2, 3, 4 (mean 2.5, biased var 1.25, unbiased 5/3)
    # channel 1: 2, 4, 6, 8 (mean 5, biased var 5, unbiased 20/3)
    x = np.array([[1, 2], [2, 4], [3, 6], [4, 8]], np.float32)
    gamma, beta = np.array([1, 2], np.float32), np.array([0, 1], np.float32)
    rm, rv = np.array([0, 1], np.float32), np.array([1, 2], np.float32)
    y, new_mean, new_var = run("nn.batch_norm_train", x, gamma, beta, rm, rv, momentum=0.1)
    assert y.dtype == new_mean.dtype == new_var.dtype == np.float32
    assert new_mean.shape == new_var.shape == (2,)
    np.testing.assert_allclose(new_mean, [0.9 * 0 + 0.1 * 2.5, 0.9 * 1 + 0.1 * 5], rtol=1e-6)
    np.testing.assert_allclose(new_var, [0.9 * 1 + 0.1 * 5 / 3, 0.9 * 2 + 0.1 * 20 / 3], rtol=1e-6)
    np.testing.assert_allclose(new_var, [1.0666666, 2.4666667], rtol=1e-6)  # PyTorch's values
    expected_y = np.array(
        [
            [-1.34163535, -1.68327892],
            [-0.44721174, 0.10557365],
            [0.44721186, 1.89442623],
            [1.34163547, 3.68327880],
        ]
    )  # torch.nn.functional.batch_norm(..., training=True), PyTorch 2.13
    np.testing.assert_allclose(y, expected_y, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(y[:, 0], (x[:, 0] - 2.5) / np.sqrt(1.25 + 1e-5), rtol=1e-6)


def test_batch_norm_train_matches_pytorch_ncl():
    # x = torch.arange(12.).reshape(2, 2, 3) ** 1.5; momentum 0.3, eps 1e-3
    x = (np.arange(12, dtype=np.float32).reshape(2, 2, 3)) ** np.float32(1.5)
    gamma, beta = np.array([0.5, -1], np.float32), np.array([0.25, 2], np.float32)
    rm, rv = np.array([0.5, -1], np.float32), np.array([2, 0.5], np.float32)
    y, new_mean, new_var = run(
        "nn.batch_norm_train", x, gamma, beta, rm, rv, momentum=0.3, epsilon=1e-3
    )
    torch_y = np.array(
        [
            [[-0.30222866, -0.24670322, -0.14517900], [3.20390749, 2.97455025, 2.71439576]],
            [[0.51382536, 0.72611696, 0.95416862], [1.42033362, 1.04218638, 0.64462632]],
        ]
    )
    np.testing.assert_allclose(y, torch_y, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(new_mean, [3.33365202, 5.27410746], rtol=1e-6)
    np.testing.assert_allclose(new_var, [30.59128189, 54.15018082], rtol=1e-6)
    # The same numbers from the formulas, in float64.
    x64 = x.astype(np.float64)
    n = 2 * 3
    batch_mean = x64.mean(axis=(0, 2))
    batch_var = x64.var(axis=(0, 2))
    np.testing.assert_allclose(new_mean, 0.7 * rm + 0.3 * batch_mean, rtol=1e-6)
    np.testing.assert_allclose(new_var, 0.7 * rv + 0.3 * batch_var * n / (n - 1), rtol=1e-6)


def test_batch_norm_train_channels_last_and_float16():
    x = randn(5, 2, 3, dtype=np.float16)
    ones, zeros = np.ones(3, np.float16), np.zeros(3, np.float16)
    y, m, v = run("nn.batch_norm_train", x, ones, zeros, zeros, ones, axis=-1, momentum=1.0)
    assert y.dtype == m.dtype == v.dtype == np.float16
    x64 = x.astype(np.float64).reshape(-1, 3)
    np.testing.assert_allclose(m, x64.mean(axis=0), rtol=1e-2, atol=1e-3)
    np.testing.assert_allclose(v, x64.var(axis=0, ddof=1), rtol=1e-2, atol=1e-3)
    expected = (x64 - x64.mean(axis=0)) / np.sqrt(x64.var(axis=0) + 1e-5)
    np.testing.assert_allclose(y.reshape(-1, 3), expected, atol=1e-2)


def test_batch_norm_train_needs_more_than_one_value_per_channel():
    v = np.ones(3, np.float32)
    with pytest.raises(OpFailure, match="more than 1 value per channel"):
        run("nn.batch_norm_train", randn(1, 3), v, v, v, v)
    with pytest.raises(OpFailure, match="more than 1 value per channel"):
        run("nn.batch_norm_train", randn(1, 3, 1), v, v, v, v)
    # n == 0: an empty batch leaves the running statistics unchanged (PyTorch)
    rm, rv = np.array([0.5, -1, 2], np.float32), np.array([2, 0.5, 1], np.float32)
    y, m, var = run("nn.batch_norm_train", np.zeros((0, 3), np.float32), v, v, rm, rv)
    assert y.shape == (0, 3) and m.tolist() == rm.tolist() and var.tolist() == rv.tolist()


def test_batch_norm_run_time_mismatch():
    v = np.ones(3, np.float32)
    with pytest.raises(OpFailure, match=r"running_var has shape \(4,\)"):
        run("nn.batch_norm_infer", randn(2, 3), v, v, v, np.ones(4, np.float32))
