"""Effects made explicit: dropout, training-mode batch normalisation and
the random operators on state cells. Random values are checked by their
properties (shapes, rates, ranges) and by reproducibility from the key:
the same seed gives the same bits, successive calls on one State draw
fresh ones; Bernoulli against numpy's reading of the specification (true
with probability p: onnxruntime 1.32 draws 1 with probability 1 - p)."""

from __future__ import annotations

import numpy as np
import pytest

import effir

from .onnx_models import I64, B, F, check_against_ort, const, helper, model, tensor

SEED = 3


def _dropout(
    ratio=0.5,
    training=True,
    seed=None,
    size=(256, 256),
    runtime_ratio=False,
    runtime_training=False,
):
    nodes, inputs, names = [], [tensor("x", F, list(size))], ["x", "r", "t"]
    if runtime_ratio:
        inputs.append(tensor("r", F, []))
    else:
        nodes.append(const("r", np.float32(ratio)))
    if runtime_training:
        inputs.append(tensor("t", B, []))
    else:
        nodes.append(const("t", np.bool_(training)))
    attrs = {} if seed is None else {"seed": float(seed)}
    nodes.append(helper.make_node("Dropout", names, ["y", "mask"], name="drop", **attrs))
    return model(nodes, inputs, [tensor("y", F, list(size)), tensor("mask", B, list(size))])


X = np.random.default_rng(0).standard_normal((256, 256)).astype(np.float32) + 3.0


def _run(module, *args, state=None):
    return effir.interpret(
        module, *args, state=state if state is not None else effir.State(module, seed=SEED)
    )


@pytest.mark.parametrize("ratio", [0.1, 0.5, 0.8])
def test_dropout_in_training_mode_drops_at_its_rate_and_the_mask_is_the_output_s(ratio):
    module = effir.from_onnx(_dropout(ratio))
    y, mask = _run(module, X)
    assert y.dtype == np.float32 and mask.dtype == np.bool_ and y.shape == mask.shape == X.shape
    np.testing.assert_allclose(y, np.where(mask, X / np.float32(1 - ratio), 0), rtol=1e-6)
    dropped = 1 - mask.mean()
    assert abs(dropped - ratio) < 4 * np.sqrt(ratio * (1 - ratio) / X.size)


def test_dropout_draws_the_same_mask_from_the_same_key_and_a_fresh_one_each_call():
    module = effir.from_onnx(_dropout(0.5))
    first, second = effir.State(module, seed=SEED), effir.State(module, seed=SEED)
    y1, m1 = _run(module, X, state=first)
    y2, m2 = _run(module, X, state=second)
    np.testing.assert_array_equal(m1, m2)
    np.testing.assert_array_equal(y1, y2)
    _, m3 = _run(module, X, state=first)  # the key moved on
    assert (m1 != m3).mean() > 0.4


def test_dropout_with_a_seed_has_a_key_cell_of_its_own_started_from_it():
    module = effir.from_onnx(_dropout(0.5, seed=7))
    (cell,) = module.cells
    assert cell.startswith("rng_")
    _, mask = effir.interpret(module, X)  # a fresh State: the cell starts from key(7)
    _, again = effir.interpret(module, X)
    np.testing.assert_array_equal(mask, again)
    _, other = effir.interpret(effir.from_onnx(_dropout(0.5, seed=8)), X)
    assert (mask != other).any()


def test_dropout_in_inference_mode_and_of_ratio_zero_is_the_identity():
    for made in (_dropout(0.5, training=False), _dropout(0.0)):
        y, mask = _run(effir.from_onnx(made), X)
        np.testing.assert_array_equal(y, X)
        assert mask.all()
    check_against_ort(_dropout(0.5, training=False), X)


def test_a_training_mode_known_at_run_time_is_an_if_that_draws_only_when_training():
    module = effir.from_onnx(_dropout(0.3, runtime_training=True))
    assert "if (" in effir.astext(module)
    state = effir.State(module, seed=SEED)
    key = state["rng"]
    y, mask = _run(module, X, np.array(False), state=state)
    np.testing.assert_array_equal(y, X)
    assert mask.all() and state["rng"] == key  # no draw
    y, mask = _run(module, X, np.array(True), state=state)
    assert not mask.all() and state["rng"] != key


def test_a_ratio_known_at_run_time():
    module = effir.from_onnx(_dropout(runtime_ratio=True))
    y, mask = _run(module, X, np.array(0.25, np.float32))
    np.testing.assert_allclose(y, np.where(mask, X / np.float32(0.75), 0), rtol=1e-6)
    assert abs((1 - mask.mean()) - 0.25) < 0.02


# ----------------------------------------------------------- batch norm
def _batch_norm(momentum=0.9, stats_as_inputs=False):
    rng = np.random.default_rng(1)
    mean, var = rng.standard_normal(3).astype(np.float32), rng.random(3).astype(np.float32) + 0.5
    scale, bias = (
        rng.standard_normal(3).astype(np.float32),
        rng.standard_normal(3).astype(np.float32),
    )
    inputs = [tensor("x", F, [4, 3, 5])]
    initializers = [("scale", scale), ("bias", bias)]
    if stats_as_inputs:
        inputs += [tensor("mean", F, [3]), tensor("var", F, [3])]
    else:
        initializers += [("mean", mean), ("var", var)]
    node = helper.make_node(
        "BatchNormalization", ["x", "scale", "bias", "mean", "var"], ["y", "rm", "rv"],
        training_mode=1, momentum=momentum, epsilon=1e-3, name="bn",
    )  # fmt: skip
    outputs = [tensor("y", F, [4, 3, 5]), tensor("rm", F, [3]), tensor("rv", F, [3])]
    return model([node], inputs, outputs, initializers, opset=15), (mean, var, scale, bias)


def _numpy_batch_norm(x, mean, var, scale, bias, momentum):
    m, v = x.mean(axis=(0, 2)), x.var(axis=(0, 2))  # the population variance
    y = (x - m[:, None]) / np.sqrt(v[:, None] + 1e-3) * scale[:, None] + bias[:, None]
    return y, mean * momentum + m * (1 - momentum), var * momentum + v * (1 - momentum)


def test_training_batch_norm_keeps_its_running_statistics_in_a_cell_onnx_s_way():
    made, (mean, var, scale, bias) = _batch_norm(momentum=0.8)
    module = effir.from_onnx(made)
    assert list(module.cells) == ["bn_bn"]
    state = effir.State(module)
    xs = [np.random.default_rng(k).standard_normal((4, 3, 5)).astype(np.float32) for k in range(3)]
    check_against_ort(made, xs[0])  # the first call is onnxruntime's
    for x in xs:
        y, rm, rv = effir.interpret(module, x, state=state)
        want = _numpy_batch_norm(x, mean, var, scale, bias, 0.8)
        for got, expected in zip((y, rm, rv), want, strict=True):
            np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
        mean, var = want[1], want[2]  # the cell moved on: the next call starts there
        np.testing.assert_allclose(state["bn_bn"][0], mean, rtol=1e-6)


def test_training_batch_norm_of_statistics_given_at_run_time_is_pure():
    made, (mean, var, *_) = _batch_norm(stats_as_inputs=True)
    module = effir.from_onnx(made)
    assert not module.cells
    x = np.random.default_rng(5).standard_normal((4, 3, 5)).astype(np.float32)
    check_against_ort(made, x, mean, var)


# ----------------------------------------------------------- random draws
def _random(op, shape=(200, 300), **attrs):
    inputs, args = [], []
    if op.endswith("Like"):
        inputs.append(tensor("like", F, list(shape)))
    node = helper.make_node(
        op,
        ["like"] if inputs else [],
        ["y"],
        **({"shape": list(shape)} if not inputs else {}),
        **attrs,
    )
    return model([node], inputs, [tensor("y", F, list(shape))], opset=17), args


@pytest.mark.parametrize("op", ["RandomUniform", "RandomUniformLike"])
def test_random_uniform_lies_in_its_range(op):
    made, _ = _random(op, low=-2.0, high=3.0)
    module = effir.from_onnx(made)
    args = [np.zeros((200, 300), np.float32)] if op.endswith("Like") else []
    y = _run(module, *args)
    assert y.shape == (200, 300) and y.dtype == np.float32
    assert y.min() >= -2.0 and y.max() < 3.0 and abs(y.mean() - 0.5) < 0.05


@pytest.mark.parametrize("op", ["RandomNormal", "RandomNormalLike"])
def test_random_normal_has_its_mean_and_scale(op):
    made, _ = _random(op, mean=1.5, scale=0.5)
    module = effir.from_onnx(made)
    args = [np.zeros((200, 300), np.float32)] if op.endswith("Like") else []
    y = _run(module, *args)
    assert abs(y.mean() - 1.5) < 0.01 and abs(y.std() - 0.5) < 0.01


def test_random_operators_with_a_seed_repeat_and_without_one_move_on():
    made, _ = _random("RandomNormal", seed=11.0)
    module = effir.from_onnx(made)
    np.testing.assert_array_equal(effir.interpret(module), effir.interpret(module))
    state = effir.State(effir.from_onnx(_random("RandomNormal")[0]), seed=0)
    shared = effir.from_onnx(_random("RandomNormal")[0])
    assert (effir.interpret(shared, state=state) != effir.interpret(shared, state=state)).any()


def test_bernoulli_is_true_with_probability_p():
    """numpy's reading of the specification: onnxruntime draws 1 - p."""
    p = np.full((400, 250), 0.3, np.float32)
    p[0] = 0.0
    p[1] = 1.0
    made = model(
        [helper.make_node("Bernoulli", ["p"], ["y"])],
        [tensor("p", F, [400, 250])],
        [tensor("y", F, [400, 250])],
        opset=15,
    )
    y = _run(effir.from_onnx(made), p)
    assert set(np.unique(y)) <= {0.0, 1.0} and (y[0] == 0).all() and (y[1] == 1).all()
    assert abs(y[2:].mean() - 0.3) < 4 * np.sqrt(0.3 * 0.7 / y[2:].size)


def test_multinomial_draws_classes_at_their_softmax_probabilities():
    logits = np.log(np.array([[0.2, 0.5, 0.3], [0.9, 0.05, 0.05]], np.float32))
    made = model(
        [helper.make_node("Multinomial", ["logits"], ["y"], sample_size=20000, dtype=7)],
        [tensor("logits", F, [2, 3])],
        [tensor("y", I64, [2, 20000])],
        opset=15,
    )
    y = _run(effir.from_onnx(made), logits)
    assert y.dtype == np.int64 and y.shape == (2, 20000)
    for row, probs in zip(y, np.exp(logits), strict=True):
        np.testing.assert_allclose(np.bincount(row, minlength=3) / row.size, probs, atol=0.015)
