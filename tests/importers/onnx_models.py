"""Small ONNX models written with ``onnx.helper`` for the importer's tests,
and running them in onnxruntime and in effir."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import effir

F, I64, B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL


def tensor(name: str, elem: int, shape: Sequence[Any] | None) -> Any:
    return helper.make_tensor_value_info(name, elem, shape)


def const(name: str, value: Any) -> Any:
    """A ``Constant`` node giving ``value`` as ``name``."""
    return helper.make_node(
        "Constant", [], [name], value=numpy_helper.from_array(np.asarray(value), name)
    )


def model(
    nodes: list[Any],
    inputs: list[Any],
    outputs: list[Any],
    initializers: Sequence[tuple[str, Any]] = (),
    opset: int = 17,
    name: str = "test",
) -> Any:
    graph = helper.make_graph(
        nodes,
        name,
        inputs,
        outputs,
        [numpy_helper.from_array(np.asarray(v), n) for n, v in initializers],
    )
    made = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    made.ir_version = 8
    return made


def graph(nodes: list[Any], inputs: list[Any], outputs: list[Any], name: str = "body") -> Any:
    return helper.make_graph(nodes, name, inputs, outputs)


def ort(made: Any, *args: Any) -> list[Any]:
    """onnxruntime's outputs (its graph optimisations off: they delete a
    training-mode dropout)."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = onnxruntime.InferenceSession(
        made.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    names = [i.name for i in session.get_inputs()]
    return session.run(None, dict(zip(names, args, strict=True)))


def run(made: Any, *args: Any, **options: Any) -> list[Any]:
    """effir's outputs (interpreted), as a list like onnxruntime's."""
    module = effir.from_onnx(made, **options)
    out = effir.interpret(module, *args)
    count = len(made.graph.output)
    return list(out) if count > 1 else [out]


def assert_matches(got: Sequence[Any], want: Sequence[Any], rtol: float = 1e-5) -> None:
    assert len(got) == len(want)
    for k, (g, w) in enumerate(zip(got, want, strict=True)):
        g, w = np.asarray(g), np.asarray(w)
        assert g.dtype == w.dtype, (k, g.dtype, w.dtype)
        assert g.shape == w.shape, (k, g.shape, w.shape)
        if w.dtype.kind == "f":
            np.testing.assert_allclose(g, w, rtol=rtol, atol=1e-6, err_msg=f"output {k}")
        else:
            np.testing.assert_array_equal(g, w, err_msg=f"output {k}")


def check_against_ort(made: Any, *args: Any, rtol: float = 1e-5, **options: Any) -> list[Any]:
    onnx.checker.check_model(made)
    got = run(made, *args, **options)
    assert_matches(got, ort(made, *args), rtol)
    return got


def composite(elem: int = F, dtype: str = "float32") -> Any:
    """A model with a bit of everything the importer keeps: a GRU over a
    symbolic length ``T``, dropout in training mode, training-mode batch
    normalisation of constant statistics (a state cell), a ``Loop`` with an
    ``If`` in its body that captures an outer value, a sequence built and
    concatenated, and a scalar loss first among its outputs."""
    rng = np.random.default_rng(42)
    hidden = 4

    def w(*shape: int) -> Any:
        return (rng.standard_normal(shape) * 0.4).astype(dtype)

    weights = [
        ("W", w(1, 3 * hidden, 3)),
        ("R", w(1, 3 * hidden, hidden)),
        ("B", w(1, 6 * hidden)),
        ("scale", w(hidden) + 1),
        ("bias", w(hidden)),
        ("mean", np.zeros(hidden, dtype)),
        ("var", np.ones(hidden, dtype)),
        ("proj", w(hidden, 2)),
        ("two", np.asarray(2, np.int64)),
        ("zero", np.asarray(0, np.int64)),
        ("trips", np.asarray(3, np.int64)),
        ("ratio", np.asarray(0.25, dtype)),
        ("train", np.asarray(True)),
        ("axes0", np.asarray([0], np.int64)),
        ("axes2", np.asarray([2], np.int64)),
    ]
    step = graph(
        [
            helper.make_node("Identity", ["go"], ["go_out"]),
            helper.make_node("Mod", ["i", "two"], ["parity"]),
            helper.make_node("Equal", ["parity", "zero"], ["even"]),
            helper.make_node(
                "If",
                ["even"],
                ["moved"],
                then_branch=graph([helper.make_node("Add", ["acc", "normed"], ["up"])], [], [tensor("up", elem, [2, hidden])], "up"),
                else_branch=graph([helper.make_node("Sub", ["acc", "normed"], ["down"])], [], [tensor("down", elem, [2, hidden])], "down"),
            ),
            helper.make_node("Tanh", ["moved"], ["acc_out"]),
        ],
        [tensor("i", I64, []), tensor("go", B, []), tensor("acc", elem, [2, hidden])],
        [tensor("go_out", B, []), tensor("acc_out", elem, [2, hidden])],
        "step",
    )  # fmt: skip
    nodes = [
        helper.make_node("GRU", ["x", "W", "R", "B"], ["ys", "last"], hidden_size=hidden),
        helper.make_node("Squeeze", ["last", "axes0"], ["h"]),
        helper.make_node("Dropout", ["h", "ratio", "train"], ["dropped"]),
        helper.make_node("Unsqueeze", ["dropped", "axes2"], ["d3"]),
        helper.make_node(
            "BatchNormalization", ["d3", "scale", "bias", "mean", "var"], ["bn", "running_mean", "running_var"],
            training_mode=1, momentum=0.9, name="norm",
        ),
        helper.make_node("Squeeze", ["bn", "axes2"], ["normed"]),
        helper.make_node("Loop", ["trips", "", "normed"], ["final"], body=step),
        helper.make_node("MatMul", ["final", "proj"], ["logits"]),
        helper.make_node("SequenceConstruct", ["logits", "logits"], ["pair"]),
        helper.make_node("ConcatFromSequence", ["pair"], ["both"], axis=0),
        helper.make_node("Mul", ["both", "both"], ["squares"]),
        helper.make_node("ReduceSum", ["squares"], ["loss"], keepdims=0),
    ]  # fmt: skip
    return model(
        nodes,
        [tensor("x", elem, ["T", 2, 3])],
        [
            tensor("loss", elem, []),
            tensor("logits", elem, [2, 2]),
            tensor("running_mean", elem, [hidden]),
        ],
        weights,
        opset=17,
        name="composite",
    )
