"""`effir compile FILE -o DIR [--dims ...] [--target ...]`: compile, export,
and the artifact runs as the interpreter; every user error is one message."""

import numpy as np
import pytest

import effir
from effir.cli import main

from .files import write

pytestmark = pytest.mark.tvm  # every test here builds with TVM (or runs isolated)

H = '#[version = "0.0.5"]\n'
PROGRAM = H + (
    "global @rng: Ref[Key] = ref(random.key(1));\n"
    "def @main(%x: Tensor[(n, 4), float32]) {\n"
    "  tanh(nn.dropout(%x, @rng, rate=0.5))\n"
    "}\n"
)


def test_compile_exports_an_artifact_for_each_shape(tmp_path, capsys):
    path = write(tmp_path, "m.effir", PROGRAM)
    out = tmp_path / "model"
    assert main(["compile", path, "-o", str(out), "--dims", "n=2", "--dims", "n=3"]) == 0
    report = capsys.readouterr().out
    assert "TVM build (n=2)" in report and "TVM build (n=3)" in report
    loaded = effir.load(out)
    module = effir.parse(PROGRAM)
    for n in (2, 3):
        x = np.arange(4 * n, dtype=np.float32).reshape(n, 4)
        state, ref_state = loaded.new_state(), effir.State(module)
        got = loaded(x, state=state)
        want = effir.interpret(module, x, state=ref_state)
        np.testing.assert_allclose(got, want, rtol=1e-5)
        assert np.array_equal(state["rng"].data, ref_state["rng"].data)


@pytest.mark.parametrize(
    ("dims", "message"),
    [
        ([], "has the symbolic dimensions n: give their sizes with --dims n=SIZE"),
        (["--dims", "m=2"], "no size for n"),
        (["--dims", "n=2,m=3"], "no dimension m"),
        (["--dims", "n"], "--dims 'n': expected NAME=SIZE"),
    ],
)
def test_compile_errors(tmp_path, capsys, dims, message):
    path = write(tmp_path, "m.effir", PROGRAM)
    assert main(["compile", path, "-o", str(tmp_path / "model"), *dims]) == 1
    assert message in capsys.readouterr().err
    assert not (tmp_path / "model").exists()


def test_compile_refuses_what_it_cannot_compile(tmp_path, capsys):
    adt = (
        H
        + "type Box { Box(fn (float32) -> float32) }\n"
        + "def @main(%x: float32) { Box(fn (%y: float32) { add(%y, %x) }) }\n"
    )
    path = write(tmp_path, "adt.effir", adt)
    assert main(["compile", path, "-o", str(tmp_path / "model")]) == 1
    err = capsys.readouterr().err
    # ADT values cross the boundary, but not a function in one: a located
    # compile error naming the field.
    assert "adt.effir:3:1: compile error" in err
    assert "field 0 of Box is fn (float32) -> float32" in err
    assert "Traceback" not in err
