"""What cannot be imported is a located ``ModelImportError`` naming the
node (its index and name), its operator type and opset, never a Python
exception; the ``effir import`` command prints it, exits 1, and never
writes over a file that is not an effir program."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

import effir
from effir.cli import main

from .onnx_models import B, F, const, graph, helper, model, tensor


def _relu_then(op: str, **attrs) -> onnx.ModelProto:
    return model(
        [helper.make_node("Relu", ["x"], ["r"], name="first"), helper.make_node(op, ["r"], ["y"], name="second", **attrs)],
        [tensor("x", F, [2])],
        [tensor("y", F, [2])],
        opset=20,
    )  # fmt: skip


def test_an_unsupported_operator_names_its_node_type_and_opset_at_its_line():
    with pytest.raises(effir.ModelImportError) as err:
        effir.from_onnx(_relu_then("Gelu"))
    message = str(err.value)
    assert "node 1 'second' (Gelu-20, opset 20): the operator Gelu is not supported" in message
    assert err.value.line == 4 and "node 1 'second': Gelu(r) -> (y)" in message


def test_an_unsupported_version_is_refused_by_name():
    body = graph(
        [helper.make_node("Identity", ["s"], ["t"])], [tensor("s", F, [2])], [tensor("t", F, [2])]
    )
    made = model(
        [helper.make_node("Scan", ["", "x"], ["y"], body=body, num_scan_inputs=1)],
        [tensor("x", F, [1, 2, 2])],
        [tensor("y", F, [1, 2, 2])],
        opset=8,
    )
    with pytest.raises(
        effir.ModelImportError, match=r"Scan-8 is not supported \(effir reads the versions 9, 11"
    ):
        effir.from_onnx(made)


def test_a_node_of_another_domain_is_refused():
    made = _relu_then("Relu")
    made.graph.node[1].domain = "com.microsoft"
    with pytest.raises(
        effir.ModelImportError, match="com.microsoft.Relu is not of the default ONNX domain"
    ):
        effir.from_onnx(made)


def test_an_error_inside_a_subgraph_points_at_the_inner_node():
    then = graph(
        [helper.make_node("Erf", ["x"], ["e"], name="inner")], [], [tensor("e", F, [2])], "then"
    )
    other = graph([helper.make_node("Neg", ["x"], ["n"])], [], [tensor("n", F, [2])], "else")
    made = model(
        [helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other, name="outer")],
        [tensor("x", F, [2]), tensor("c", B, [])],
        [tensor("y", F, [2])],
    )
    with pytest.raises(effir.ModelImportError) as err:
        effir.from_onnx(made)
    assert "node 0 'inner' (Erf-13, opset 17)" in str(err.value)
    line = err.value.span.source.line_text(err.value.line)
    assert line.strip() == "node 0 'inner': Erf(x) -> (e)"


@pytest.mark.parametrize(
    ("elem", "what"),
    [(TensorProto := onnx.TensorProto.BFLOAT16, "bfloat16 has no effir dtype"), (onnx.TensorProto.STRING, "string has no effir dtype")],
)  # fmt: skip
def test_inputs_effir_has_no_type_for_are_refused(elem, what):
    made = model(
        [helper.make_node("Identity", ["x"], ["y"])],
        [tensor("x", elem, [2])],
        [tensor("y", elem, [2])],
    )
    with pytest.raises(effir.ModelImportError, match=what):
        effir.from_onnx(made)


def test_what_is_not_a_model_is_refused(tmp_path):
    with pytest.raises(effir.ModelImportError, match="no such file"):
        effir.from_onnx(tmp_path / "missing.onnx")
    (tmp_path / "text.onnx").write_text("hello")
    with pytest.raises(effir.ModelImportError, match="not an ONNX model"):
        effir.from_onnx(tmp_path / "text.onnx")
    with pytest.raises(effir.ModelImportError, match="takes an onnx.ModelProto"):
        effir.from_onnx(42)
    with pytest.raises(
        effir.ModelImportError, match="initializers must be one of constants, parameters"
    ):
        effir.from_onnx(_relu_then("Relu"), initializers="weights")
    with pytest.raises(
        effir.ModelImportError, match="input_types names z: not inputs of the model"
    ):
        effir.from_onnx(_relu_then("Relu"), input_types={"z": None})
    with pytest.raises(
        effir.ModelImportError, match="opset 99 is not one the installed onnx package knows"
    ):
        effir.from_onnx(_relu_then("Relu"), opset=99)


def test_a_constant_that_must_be_known_is_named():
    made = model(
        [helper.make_node("Unsqueeze", ["x", "axes"], ["y"], name="grow")],
        [tensor("x", F, [2]), tensor("axes", onnx.TensorProto.INT64, [1])],
        [tensor("y", F, [1, 2])],
    )
    with pytest.raises(
        effir.ModelImportError, match="'grow' .*the axes must be known when the model is imported"
    ):
        effir.from_onnx(made)


# ------------------------------------------------------------------ CLI
@pytest.fixture
def saved(tmp_path):
    def save(made, name="model.onnx"):
        path = tmp_path / name
        onnx.save(made, path)
        return str(path)

    return save


def test_effir_import_prints_the_program_and_writes_it(saved, tmp_path, capsys):
    path = saved(
        model(
            [const("two", np.float32(2)), helper.make_node("Mul", ["x", "two"], ["y"])],
            [tensor("x", F, [2])],
            [tensor("y", F, [2])],
        )
    )
    assert main(["import", path]) == 0
    text = capsys.readouterr().out
    assert text.startswith('#[version = "0.0.5"]') and "multiply(%x, 2f)" in text
    out = tmp_path / "model.effir"
    assert main(["import", path, "-o", str(out)]) == 0
    assert out.read_text() == text and effir.parse(text)
    assert main(["import", path, "-o", str(out), "-q"]) == 0  # an effir program is replaced


def test_effir_import_reports_a_model_it_cannot_read_without_a_traceback(saved, capsys):
    path = saved(_relu_then("Gelu"))
    assert main(["import", path]) == 1
    err = capsys.readouterr().err
    assert "import error: node 1 'second' (Gelu-20, opset 20)" in err and "Traceback" not in err
    assert main(["import", path + ".missing"]) == 1
    assert "no such file" in capsys.readouterr().err


def test_effir_import_never_writes_over_what_is_not_an_effir_program(saved, tmp_path, capsys):
    path = saved(_relu_then("Relu"))
    notes = tmp_path / "notes.txt"
    notes.write_text("mine")
    assert main(["import", path, "-o", str(notes)]) == 1
    assert "not an effir program; refusing to replace it" in capsys.readouterr().err
    assert notes.read_text() == "mine"
    before = open(path, "rb").read()
    assert main(["import", path, "-o", path]) == 1
    assert "that is the model being imported" in capsys.readouterr().err
    assert open(path, "rb").read() == before
    assert main(["import", path, "-o", str(tmp_path)]) == 1
    assert "a directory: refusing to replace it" in capsys.readouterr().err
