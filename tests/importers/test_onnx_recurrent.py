"""``RNN``, ``GRU`` and ``LSTM`` against onnxruntime, attribute by
attribute: directions, ``linear_before_reset``, ``sequence_lens``,
``layout``, activations with alphas and betas, ``clip``, peepholes,
``input_forget``, initial states; each direction one ``cf.foreach`` over
a symbolic length, never unrolled."""

from __future__ import annotations

import numpy as np
import pytest

import effir

from .onnx_models import F, assert_matches, check_against_ort, helper, model, ort, run, tensor

GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
T, N, I, H = 5, 3, 4, 6  # time, batch, input, hidden


def _layer(kind: str, directions: int = 1, lengths: bool = False, initial: bool = False,
           peepholes: bool = False, layout: int = 0, time: object = T, **attrs):  # fmt: skip
    g = GATES[kind]
    rng = np.random.default_rng(sum(map(ord, kind)) + directions)
    x_shape = [time, N, I] if layout == 0 else [N, time, I]
    state_shape = [directions, N, H] if layout == 0 else [N, directions, H]
    weights = {
        "W": rng.standard_normal((directions, g * H, I)).astype(np.float32) * 0.5,
        "R": rng.standard_normal((directions, g * H, H)).astype(np.float32) * 0.5,
        "B": rng.standard_normal((directions, 2 * g * H)).astype(np.float32) * 0.5,
    }
    inputs = [tensor("X", F, x_shape)]
    names = ["X", "W", "R", "B", "", "", "", ""]
    args = [rng.standard_normal([T if d == time else d for d in x_shape]).astype(np.float32)]
    if lengths:
        inputs.append(tensor("lens", 6, [N]))
        names[4] = "lens"
        args.append(np.array([T, 2, 0], np.int32))
    if initial:
        inputs.append(tensor("h0", F, state_shape))
        names[5] = "h0"
        args.append(rng.standard_normal(state_shape).astype(np.float32))
        if kind == "LSTM":
            inputs.append(tensor("c0", F, state_shape))
            names[6] = "c0"
            args.append(rng.standard_normal(state_shape).astype(np.float32))
    if peepholes:
        weights["P"] = rng.standard_normal((directions, 3 * H)).astype(np.float32) * 0.5
        names[7] = "P"
    count = 8 if kind == "LSTM" else 6
    names = names[:count]
    while names and not names[-1]:
        names.pop()
    outs = ["Y", "Y_h"] + (["Y_c"] if kind == "LSTM" else [])
    direction = (
        {1: "forward", 2: "bidirectional"}[directions]
        if directions == 2 or "direction" not in attrs
        else attrs.pop("direction")
    )
    node = helper.make_node(
        kind, names, outs, hidden_size=H, direction=direction, layout=layout, **attrs
    )
    y_shape = [time, directions, N, H] if layout == 0 else [N, time, directions, H]
    outputs = [tensor("Y", F, y_shape), tensor("Y_h", F, state_shape)]
    if kind == "LSTM":
        outputs.append(tensor("Y_c", F, state_shape))
    return model([node], inputs, outputs, list(weights.items()), opset=14), args


CASES = [
    ("RNN", {}),
    ("RNN", {"directions": 2, "initial": True}),
    ("RNN", {"lengths": True, "direction": "reverse"}),
    ("RNN", {"activations": ["Affine"], "activation_alpha": [0.5], "activation_beta": [0.2]}),
    (
        "RNN",
        {
            "activations": ["LeakyRelu", "HardSigmoid"],
            "activation_alpha": [0.3, 0.4],
            "activation_beta": [0.6],
            "directions": 2,
        },
    ),
    (
        "RNN",
        {
            "activations": ["ScaledTanh"],
            "activation_alpha": [1.5],
            "activation_beta": [0.7],
            "clip": 0.8,
        },
    ),
    ("GRU", {}),
    ("GRU", {"linear_before_reset": 1}),
    ("GRU", {"directions": 2, "lengths": True, "initial": True}),
    ("GRU", {"layout": 1, "initial": True}),
    ("GRU", {"clip": 0.5, "direction": "reverse"}),
    (
        "GRU",
        {
            "activations": ["HardSigmoid", "Softsign"],
            "activation_alpha": [0.3],
            "activation_beta": [0.4],
        },
    ),
    ("LSTM", {}),
    ("LSTM", {"peepholes": True, "initial": True}),
    ("LSTM", {"directions": 2, "lengths": True, "peepholes": True}),
    ("LSTM", {"input_forget": 1}),
    ("LSTM", {"layout": 1, "lengths": True, "initial": True}),
    ("LSTM", {"activations": ["Sigmoid", "Elu", "Relu"], "activation_alpha": [0.7], "clip": 2.0}),
]


@pytest.mark.parametrize(
    ("kind", "attrs"), CASES, ids=[f"{k}-{i}" for i, (k, _) in enumerate(CASES)]
)
def test_recurrent_layer_matches_onnxruntime(kind, attrs):
    attrs = dict(attrs)
    made, args = _layer(kind, **attrs)
    if not attrs.get("layout"):
        check_against_ort(made, *args, rtol=1e-4)
        return
    # onnxruntime refuses layout 1 (batch first): the same layer in layout 0
    # on the transposed inputs, its outputs transposed back
    attrs["layout"] = 0
    time_major, _ = _layer(kind, **attrs)
    flipped = [a.transpose(1, 0, 2) if a.ndim == 3 else a for a in args]
    want = ort(time_major, *flipped)
    want = [want[0].transpose(2, 0, 1, 3)] + [w.transpose(1, 0, 2) for w in want[1:]]
    assert_matches(run(made, *args), want, rtol=1e-4)


def test_each_direction_is_one_loop_over_a_symbolic_length():
    made, args = _layer("LSTM", directions=2, time="T")
    module = effir.from_onnx(made)
    text = effir.astext(module)
    assert text.count("cf.foreach") == 2 and "%X: Tensor[(T, 3, 4), float32]" in text
    assert module["main"].body.checked_type.fields[0].shape == ("T", 2, N, H)
    for steps in (2, 7):
        x = np.random.default_rng(steps).standard_normal((steps, N, I)).astype(np.float32)
        check_against_ort(made, x, rtol=1e-4)
