"""Optional values as options, against onnxruntime: ``Optional`` of a
value or empty, ``OptionalHasElement``, ``OptionalGetElement``; a value
read from an absent optional is a located run-time error; a loop whose
carried optional becomes a plain value carries it present (``Some``); an
imported optional prints, parses back and compiles."""

from __future__ import annotations

import numpy as np
import pytest

import effir
from tests.support.isolated import run_isolated

from .onnx_models import I64, B, F, check_against_ort, graph, helper, model, run, tensor

X = np.array([1.5, -2.0, 3.0], np.float32)
OPTIONAL_X = helper.make_optional_type_proto(helper.make_tensor_type_proto(F, [3]))


def _branch_optional(guarded: bool):
    """``o`` is ``x`` when ``c``, else empty; ``y`` is its value (when
    ``guarded``: zeros where it is absent)."""
    then = graph([helper.make_node("Optional", ["x"], ["o1"])], [], [tensor("o1", F, [3])], "t")
    then.output[0].type.CopyFrom(OPTIONAL_X)
    empty = helper.make_node("Optional", [], ["o2"], type=OPTIONAL_X.optional_type.elem_type)
    other = graph([empty], [], [tensor("o2", F, [3])], "e")
    other.output[0].type.CopyFrom(OPTIONAL_X)
    nodes = [
        helper.make_node("If", ["c"], ["o"], then_branch=then, else_branch=other),
        helper.make_node("OptionalHasElement", ["o"], ["has"]),
    ]
    get = helper.make_node("OptionalGetElement", ["o"], ["value"])
    if guarded:
        present = graph([get], [], [tensor("value", F, [3])], "present")
        zeros = helper.make_node("Sub", ["x", "x"], ["zeros"])
        absent = graph([zeros], [], [tensor("zeros", F, [3])], "absent")
        nodes.append(
            helper.make_node("If", ["has"], ["y"], then_branch=present, else_branch=absent)
        )
    else:
        nodes.append(helper.make_node("Identity", ["value"], ["y"]))
        nodes.insert(2, get)
    return model(
        nodes,
        [tensor("c", B, []), tensor("x", F, [3])],
        [tensor("has", B, []), tensor("y", F, [3])],
        opset=18,
    )


@pytest.mark.parametrize("present", [True, False])
def test_an_optional_of_a_branch_matches_onnxruntime(present):
    got = check_against_ort(_branch_optional(guarded=True), np.array(present), X)
    assert bool(got[0]) is present


def test_reading_an_absent_optional_is_a_located_run_time_error():
    module = effir.from_onnx(_branch_optional(guarded=False))
    assert "Some(" in effir.astext(module) and "None" in effir.astext(module)
    np.testing.assert_array_equal(effir.interpret(module, np.array(True), X)[1], X)
    with pytest.raises(effir.EvalError) as err:
        effir.interpret(module, np.array(False), X)
    assert "OptionalGetElement" in err.value.span.source.line_text(err.value.line)


def _carried_optional():
    """A ``Loop`` carrying an optional that starts empty and is a plain
    tensor after each step: ``x`` first, then twice the last."""
    body_nodes = [
        helper.make_node("Identity", ["c"], ["c_out"]),
        helper.make_node("OptionalHasElement", ["v"], ["has"]),
        helper.make_node(
            "If",
            ["has"],
            ["v_out"],
            then_branch=graph(
                [
                    helper.make_node("OptionalGetElement", ["v"], ["last"]),
                    helper.make_node("Add", ["last", "last"], ["twice"]),
                ],
                [],
                [tensor("twice", F, [3])],
                "again",
            ),
            else_branch=graph(
                [helper.make_node("Identity", ["x"], ["first"])],
                [],
                [tensor("first", F, [3])],
                "first",
            ),
        ),
    ]
    body = graph(
        body_nodes,
        [tensor("i", I64, []), tensor("c", B, []), tensor("v", F, [3])],
        [tensor("c_out", B, []), tensor("v_out", F, [3])],
    )
    body.input[2].type.CopyFrom(OPTIONAL_X)
    nodes = [
        helper.make_node("Optional", [], ["none"], type=OPTIONAL_X.optional_type.elem_type),
        helper.make_node("Loop", ["M", "", "none"], ["final"], body=body),
        helper.make_node("OptionalHasElement", ["final"], ["ran"]),
    ]
    return model(
        nodes,
        [tensor("M", I64, []), tensor("x", F, [3])],
        [tensor("ran", B, [])],
        opset=18,
    )


@pytest.mark.parametrize("trips", [0, 1, 3])
def test_a_loop_carried_optional_becomes_present(trips):
    made = _carried_optional()
    made.graph.node.append(helper.make_node("Identity", ["final"], ["final_out"]))
    made.graph.output.append(helper.make_value_info("final_out", OPTIONAL_X))
    module = effir.from_onnx(made)
    ran, final = effir.interpret(module, np.array(trips, np.int64), X)
    assert bool(ran) is (trips > 0)
    if trips == 0:
        assert final.constructor == "None"
    else:
        assert final.constructor == "Some"
        np.testing.assert_array_equal(final.fields[0], X * 2 ** (trips - 1))
    assert run(_carried_optional(), np.array(trips, np.int64), X)[0] == (trips > 0)


def test_an_optional_getter_of_a_plain_value_at_version_15_is_an_error():
    made = model(
        [helper.make_node("OptionalGetElement", ["x"], ["y"])],
        [tensor("x", F, [3])],
        [tensor("y", F, [3])],
        opset=15,
    )
    with pytest.raises(effir.ModelImportError, match="its input must be an optional value"):
        effir.from_onnx(made)


@pytest.mark.tvm
def test_an_imported_optional_prints_parses_back_and_compiles():
    module = effir.from_onnx(_branch_optional(guarded=True))
    effir.assert_structural_equal(effir.parse(effir.astext(module)), module)
    code = """
import numpy as np, effir
from tests.importers.test_onnx_optionals import X, _branch_optional
module = effir.from_onnx(_branch_optional(guarded=True))
compiled = effir.compile(module)
for present in (True, False):
    got = compiled(np.array(present), X)
    want = effir.interpret(module, np.array(present), X)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w)
print("ok")
"""
    assert "ok" in run_isolated(code, timeout=300).check().stdout
