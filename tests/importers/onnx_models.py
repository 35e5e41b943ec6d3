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
