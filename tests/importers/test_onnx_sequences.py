"""Sequences as lists, against onnxruntime: construct, at (negative
positions), insert and erase at positions, length, split (sizes known and
computed), concat (with a new axis), and ``SequenceMap`` with a tensor
beside the sequences; a position out of range is a located run-time
error."""

from __future__ import annotations

import numpy as np
import pytest

import effir

from .onnx_models import I64, F, check_against_ort, const, graph, helper, model, run, tensor

A = np.arange(6, dtype=np.float32).reshape(2, 3)
B3 = np.arange(12, dtype=np.float32).reshape(4, 3) - 5


def _seq_model(nodes, outputs, extra_inputs=()):
    inputs = [tensor("a", F, [2, 3]), tensor("b", F, [4, 3]), *extra_inputs]
    return model(
        [helper.make_node("SequenceConstruct", ["a", "b", "a"], ["s"]), *nodes], inputs, outputs
    )


@pytest.mark.parametrize("position", [0, 2, -1, -3])
def test_sequence_at_and_length(position):
    made = _seq_model(
        [
            const("p", np.int64(position)),
            helper.make_node("SequenceAt", ["s", "p"], ["x"]),
            helper.make_node("SequenceLength", ["s"], ["n"]),
        ],
        [tensor("x", F, [None, 3]), tensor("n", I64, [])],
    )
    check_against_ort(made, A, B3)


@pytest.mark.parametrize("position", [None, 0, 1, -1, 3])
def test_sequence_insert_then_concat(position):
    inputs = ["s", "c"] + ([] if position is None else ["p"])
    nodes = [helper.make_node("SequenceInsert", inputs, ["t"])]
    if position is not None:
        nodes.insert(0, const("p", np.int64(position)))
    nodes.append(helper.make_node("ConcatFromSequence", ["t"], ["y"], axis=0))
    made = _seq_model(nodes, [tensor("y", F, [None, 3])], [tensor("c", F, [1, 3])])
    check_against_ort(made, A, B3, np.full((1, 3), 9.0, np.float32))


@pytest.mark.parametrize("position", [None, 0, -2])
def test_sequence_erase(position):
    inputs = ["s"] + ([] if position is None else ["p"])
    nodes = [helper.make_node("SequenceErase", inputs, ["t"])]
    if position is not None:
        nodes.insert(0, const("p", np.int64(position)))
    nodes.append(helper.make_node("ConcatFromSequence", ["t"], ["y"], axis=0))
    check_against_ort(_seq_model(nodes, [tensor("y", F, [None, 3])]), A, B3)


def test_concat_from_sequence_with_a_new_axis():
    made = model(
        [
            helper.make_node("SequenceConstruct", ["a", "a", "a"], ["s"]),
            helper.make_node("ConcatFromSequence", ["s"], ["y"], axis=1, new_axis=1),
        ],
        [tensor("a", F, [2, 3])],
        [tensor("y", F, [2, 3, 3])],
    )
    check_against_ort(made, A)


@pytest.mark.parametrize(
    ("split", "keepdims"),
    [(None, 1), (None, 0), (np.int64(2), 1), (np.array([1, 3], np.int64), 1)],
)
def test_split_to_sequence(split, keepdims):
    nodes, inputs = [], ["b"]
    if split is not None:
        nodes.append(const("sizes", split))
        inputs.append("sizes")
    nodes += [
        helper.make_node("SplitToSequence", inputs, ["s"], axis=0, keepdims=keepdims),
        helper.make_node("SequenceLength", ["s"], ["n"]),
        const("last", np.int64(-1)),
        helper.make_node("SequenceAt", ["s", "last"], ["x"]),
    ]
    rank = 1 if split is None and not keepdims else 2
    made = model(
        nodes, [tensor("b", F, [4, 3])], [tensor("n", I64, []), tensor("x", F, [None] * rank)]
    )
    check_against_ort(made, B3)


def test_split_to_sequence_with_sizes_computed_at_run_time():
    made = model(
        [helper.make_node("SplitToSequence", ["b", "sizes"], ["s"], axis=0),
         helper.make_node("ConcatFromSequence", ["s"], ["y"], axis=1, new_axis=0),
         helper.make_node("SequenceLength", ["s"], ["n"])],
        [tensor("b", F, [4, 3]), tensor("sizes", I64, [])],
        [tensor("y", F, [None, None]), tensor("n", I64, [])],
    )  # fmt: skip
    y, n = run(made, B3, np.array(2, np.int64))
    assert int(n) == 2 and y.shape == (2, 6)
    np.testing.assert_array_equal(y, np.concatenate([B3[:2], B3[2:]], axis=1))


def test_sequence_map_with_a_tensor_beside_the_sequences():
    body = graph(
        [
            helper.make_node("Add", ["x", "bias"], ["y"]),
            helper.make_node("Shape", ["x"], ["shape"]),
        ],
        [tensor("x", F, [None, 3]), tensor("bias", F, [3])],
        [tensor("y", F, [None, 3]), tensor("shape", I64, [2])],
    )
    made = _seq_model(
        [
            helper.make_node("SequenceMap", ["s", "bias"], ["ys", "shapes"], body=body),
            helper.make_node("ConcatFromSequence", ["ys"], ["y"], axis=0),
            helper.make_node("ConcatFromSequence", ["shapes"], ["sizes"], axis=0),
        ],
        [tensor("y", F, [None, 3]), tensor("sizes", I64, [None])],
        [tensor("bias", F, [3])],
    )
    check_against_ort(made, A, B3, np.array([1, 2, 3], np.float32))


def test_a_position_out_of_range_is_a_located_run_time_error():
    made = _seq_model(
        [helper.make_node("SequenceAt", ["s", "p"], ["x"], name="pick")],
        [tensor("x", F, [None, 3])],
        [tensor("p", I64, [])],
    )
    module = effir.from_onnx(made)
    with pytest.raises(
        effir.EvalError, match="index 5 is out of range for axis 0 of size 3"
    ) as err:
        effir.interpret(module, A, B3, np.array(5, np.int64))
    assert "SequenceAt" in err.value.span.source.line_text(err.value.line)
