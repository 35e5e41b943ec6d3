"""The C++ runner (examples/cpp/run_model.cc), built with g++ against the
TVM runtime the apache-tvm wheel ships, runs an exported program without
Python: two steps threading the state give the interpreter's results, key
and statistics; a broken artifact is an error message, not a crash."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import effir

from .test_compile import gru_lm

EXAMPLES = Path(__file__).parents[3] / "examples"

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")


@pytest.fixture(scope="module")
def runner(tmp_path_factory: pytest.TempPathFactory) -> Path:
    build = tmp_path_factory.mktemp("cpp")
    shutil.copy(EXAMPLES / "cpp" / "run_model.cc", build)
    shutil.copy(EXAMPLES / "cpp" / "Makefile", build)
    done = subprocess.run(
        ["make", "-s", f"PYTHON={sys.executable}"], cwd=build, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    return build / "run_model"


def test_the_runner_runs_the_gru_model_as_the_interpreter(runner: Path, tmp_path: Path) -> None:
    module, args = gru_lm(4, 2)
    compiled = effir.compile(module)
    compiled(*args, sink=lambda label, value: None)
    compiled.export(tmp_path / "model")
    inputs = []
    for i, a in enumerate(args):
        np.save(tmp_path / f"in{i}.npy", a)
        inputs.append(str(tmp_path / f"in{i}.npy"))
    out = tmp_path / "out"
    out.mkdir()
    done = subprocess.run(
        [runner, tmp_path / "model", *inputs, "--steps", "2", "--out", out],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("print mean activation") == 2
    state = effir.State(module)
    for _ in range(2):
        ref = effir.interpret(module, *args, state=state, sink=lambda label, value: None)
    np.testing.assert_allclose(np.load(out / "result_0.npy"), ref, rtol=1e-5, atol=1e-5)
    assert np.array_equal(np.load(out / "state_rng_0.npy"), state["rng"].data)
    np.testing.assert_allclose(
        np.load(out / "state_bn_0.npy"), state["bn"][0], rtol=1e-5, atol=1e-6
    )

    # A corrupt library: a message and exit status 1.
    library = next((tmp_path / "model" / "lib").iterdir())
    data = bytearray(library.read_bytes())
    data[100] ^= 0xFF
    library.write_bytes(bytes(data))
    done = subprocess.run([runner, tmp_path / "model", *inputs], capture_output=True, text=True)
    assert done.returncode == 1
    assert "is corrupt or truncated" in done.stderr
    done = subprocess.run([runner, tmp_path / "model", inputs[0]], capture_output=True, text=True)
    assert done.returncode == 1 and "@main takes 9 inputs, got 1" in done.stderr


def test_the_runner_fails_as_the_interpreter(runner: Path, tmp_path: Path) -> None:
    """A failed run-time check (integer division by zero; a bad dyn.reshape)
    prints the interpreter's located message and exits non-zero."""
    header = '#[version = "0.0.5"]\n'
    cases = [
        (
            "def @main(%x: Tensor[(3), int32], %y: Tensor[(3), int32]) {\n  divide(%x, %y)\n}\n",
            [np.array([1, 2, 3], "int32"), np.array([1, 0, 1], "int32")],
        ),
        (
            "def @main(%x: Tensor[(6), float32], %s: Tensor[(2), int64]) {\n"
            "  dyn.reshape(%x, %s)\n}\n",
            [np.ones(6, "float32"), np.array([4, 2], "int64")],
        ),
    ]
    for k, (text, args) in enumerate(cases):
        module = effir.check(effir.parse(header + text, source_name="fails.effir"))
        with pytest.raises(effir.EvalError) as expected:
            effir.interpret(module, *args)
        effir.compile(module).export(tmp_path / f"model{k}")
        inputs = []
        for i, a in enumerate(args):
            np.save(tmp_path / f"in{k}_{i}.npy", a)
            inputs.append(str(tmp_path / f"in{k}_{i}.npy"))
        done = subprocess.run(
            [runner, tmp_path / f"model{k}", *inputs], capture_output=True, text=True
        )
        assert done.returncode != 0
        assert str(expected.value) in done.stderr, done.stderr
