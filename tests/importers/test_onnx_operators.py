"""The operators the importer maps onto effir's, one model each, against
onnxruntime: attributes, negative axes and indices, shapes computed at run
time (a dynamic Slice, Expand, Reshape), data-dependent results (NonZero,
Unique, Range)."""

from __future__ import annotations

import numpy as np
import pytest

from .onnx_models import I64, F, check_against_ort, const, helper, model, tensor

RNG = np.random.default_rng(0)
X = RNG.standard_normal((3, 4)).astype(np.float32)
X3 = RNG.standard_normal((2, 3, 4)).astype(np.float32)
INTS = np.array([[-7, 5, 0, 3], [8, -2, -9, 1], [4, 4, -1, 6]], np.int32)


def one(op, inputs, output_rank, *args, opset=17, consts=(), out_dtype=F, **attrs):
    """A model of one ``op`` node on ``inputs`` (names with their values;
    constants in ``consts``), its output of rank ``output_rank``."""
    nodes = [const(n, v) for n, v in consts]
    names = [n for n, _ in inputs] + [n for n, _ in consts]
    order = attrs.pop("order", names)
    nodes.append(helper.make_node(op, order, ["y"], **attrs))
    specs = [
        tensor(
            n, {np.float32: F, np.int64: I64, np.int32: 6, np.bool_: 9}[v.dtype.type], list(v.shape)
        )
        for n, v in inputs
    ]
    made = model(nodes, specs, [tensor("y", out_dtype, [None] * output_rank)], opset=opset)
    return made, [v for _, v in inputs]


CASES = {
    "Abs": one("Abs", [("x", X)], 2),
    "Sin": one("Sin", [("x", X)], 2),
    "Cos": one("Cos", [("x", X)], 2),
    "Floor": one("Floor", [("x", X)], 2),
    "Ceil": one("Ceil", [("x", X)], 2),
    "Mod": one("Mod", [("a", INTS), ("b", np.array([3, -4, 5, 2], np.int32))], 2, out_dtype=6),
    "Mod-fmod": one("Mod", [("a", X), ("b", np.full(4, 0.7, np.float32))], 2, fmod=1),
    "CumSum": one("CumSum", [("x", X3)], 3, consts=[("axis", np.int64(-1))]),
    "CumSum-exclusive-reverse": one(
        "CumSum", [("x", X3)], 3, consts=[("axis", np.int32(1))], exclusive=1, reverse=1
    ),
    "CumSum-run-time-axis": one("CumSum", [("x", X3), ("axis", np.array(1, np.int64))], 3),
    "Gemm": one("Gemm", [("a", X), ("b", X)], 2, transB=1, alpha=0.5),
    "Gemm-bias": one(
        "Gemm", [("a", X), ("b", X), ("c", np.ones(4, np.float32))], 2, transA=1, beta=2.0
    ),
    "MatMul-vector": one("MatMul", [("a", X[0]), ("b", X.T.copy())], 1),
    "MatMul-batch": one("MatMul", [("a", X3), ("b", X.T.copy())], 3),
    "Gather-negative": one(
        "Gather", [("x", X3)], 4, consts=[("i", np.array([[-1, 0], [1, -2]], np.int64))], axis=1
    ),
    "Gather-run-time": one("Gather", [("x", X), ("i", np.array([2, -4, 0], np.int64))], 2, axis=1),
    "Slice": one(
        "Slice",
        [("x", X3)],
        3,
        consts=[
            ("s", np.array([1, -1])),
            ("e", np.array([1000, -4])),
            ("a", np.array([1, 2])),
            ("p", np.array([1, -1])),
        ],
    ),
    "Slice-run-time": one(
        "Slice",
        [
            ("x", X3),
            ("s", np.array([0, 3])),
            ("e", np.array([-1, 0])),
            ("a", np.array([1, -1])),
            ("p", np.array([1, -2])),
        ],
        3,
    ),
    "Expand": one("Expand", [("x", X[:, :1].copy())], 3, consts=[("shape", np.array([2, 1, 4]))]),
    "Expand-run-time": one("Expand", [("x", X[:1]), ("shape", np.array([3, 1], np.int64))], 2),
    "Range": one(
        "Range",
        [("a", np.array(2, np.int64)), ("b", np.array(11, np.int64)), ("d", np.array(3, np.int64))],
        1,
        out_dtype=I64,
    ),
    "NonZero": one("NonZero", [("x", INTS)], 2, out_dtype=I64),
    "Where": one("Where", [("c", X > 0), ("a", X), ("b", -X)], 2),
    "Reshape-shape-of": one("Reshape", [("x", X3)], 2, consts=[("s", np.array([0, -1]))]),
    "Reshape-run-time": one("Reshape", [("x", X3), ("s", np.array([4, 6], np.int64))], 2),
    "Flatten": one("Flatten", [("x", X3)], 2, axis=2),
    "Transpose": one("Transpose", [("x", X3)], 3, perm=[2, 0, 1]),
    "Squeeze": one("Squeeze", [("x", X3[:1])], 2, consts=[("a", np.array([0]))]),
    "Unsqueeze": one("Unsqueeze", [("x", X)], 4, consts=[("a", np.array([0, -1]))]),
    "Concat": one("Concat", [("a", X), ("b", X)], 2, axis=-1),
    "Softmax": one("Softmax", [("x", X3)], 3, axis=1),
    "LogSoftmax": one("LogSoftmax", [("x", X3)], 3),
    "ReduceMean": one("ReduceMean", [("x", X3)], 3, consts=[("a", np.array([0, 2]))], opset=18),
    "ReduceSum": one("ReduceSum", [("x", X3)], 1, consts=[("a", np.array([-1, 0]))], keepdims=0),
    "ReduceMax": one("ReduceMax", [("x", X3)], 2, axes=[1], keepdims=0, opset=13),
    "Clip": one("Clip", [("x", X)], 2, consts=[("lo", np.float32(-0.5)), ("hi", np.float32(0.5))]),
    "Pow": one("Pow", [("x", np.abs(X)), ("e", np.array(2, np.int64))], 2),
    "Cast": one("Cast", [("x", X * 3)], 2, out_dtype=6, to=6),
    "LeakyRelu": one("LeakyRelu", [("x", X)], 2, alpha=0.2),
    "Elu": one("Elu", [("x", X)], 2, alpha=0.7),
    "Selu": one("Selu", [("x", X)], 2),
    "HardSigmoid": one("HardSigmoid", [("x", X)], 2, alpha=0.3, beta=0.4),
    "Softplus": one("Softplus", [("x", X)], 2),
    "Softsign": one("Softsign", [("x", X)], 2),
    "Max": one("Max", [("a", X), ("b", X[:1]), ("c", -X)], 2),
    "Mean": one("Mean", [("a", X), ("b", -X)], 2),
    "ConstantOfShape": one(
        "ConstantOfShape",
        [("s", np.array([2, 3], np.int64))],
        2,
        out_dtype=I64,
        value=helper.make_tensor("v", I64, [1], [7]),
    ),
    "Shape-slice": one("Shape", [("x", X3)], 1, out_dtype=I64, start=1, end=-1, opset=15),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_operator_matches_onnxruntime(name):
    made, args = CASES[name]
    check_against_ort(made, *args)


@pytest.mark.parametrize("sorted_", [0, 1])
@pytest.mark.parametrize("axis", [None, 0, -1])
def test_unique_matches_onnxruntime(sorted_, axis):
    x = np.array([[1, 3, 1], [2, 3, 1], [1, 3, 1]], np.float32)
    attrs = {"sorted": sorted_} | ({} if axis is None else {"axis": axis})
    outputs = [tensor("y", F, [None] * (1 if axis is None else 2))] + [
        tensor(n, I64, [None]) for n in ("i", "inv", "c")
    ]
    made = model(
        [helper.make_node("Unique", ["x"], ["y", "i", "inv", "c"], **attrs)],
        [tensor("x", F, [3, 3])],
        outputs,
    )
    check_against_ort(made, x)


def test_a_reshape_to_sizes_read_from_a_shape_stays_static():
    """A framework's flatten: ``Reshape(x, Concat(Unsqueeze(Gather(Shape(x),
    0)), [-1]))`` with a symbolic batch is ``reshape(x, [0, -1])``, typed
    ``(batch, 12)``, not a ``dyn.reshape`` that forgets every size; and back
    with ``Shape(x, start=1)``."""
    import effir

    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        const("zero", np.int64(0)),
        helper.make_node("Gather", ["s", "zero"], ["b"]),
        const("ax", np.array([0])),
        helper.make_node("Unsqueeze", ["b", "ax"], ["b1"]),
        const("m1", np.array([-1])),
        helper.make_node("Concat", ["b1", "m1"], ["flat"], axis=0),
        helper.make_node("Reshape", ["x", "flat"], ["y"]),
        helper.make_node("Shape", ["x"], ["tail"], start=1),
        helper.make_node("Concat", ["m1", "tail"], ["back"], axis=0),
        helper.make_node("Reshape", ["y", "back"], ["z"]),
    ]
    made = model(
        nodes,
        [tensor("x", F, ["batch", 3, 4])],
        [tensor("y", F, ["batch", 12]), tensor("z", F, ["batch", 3, 4])],
    )
    module = effir.from_onnx(made)
    assert "dyn.reshape" not in effir.astext(module)
    y_type, z_type = module["main"].body.checked_type.fields
    assert y_type.shape == ("batch", 12) and z_type.shape == ("batch", 3, 4)
    check_against_ort(made, X3.reshape(2, 3, 4))
