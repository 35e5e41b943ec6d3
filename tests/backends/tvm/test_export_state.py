"""An artifact carries the state it is given: a batch-norm model trained
through its compiled program, exported with ``state=``, loaded in Python
(``effir.load``) and run by the C++ runner, gives the trained model's
outputs, not those of the cells' declared initial values. Exporting a
program whose state calls changed, without passing it, warns."""

from __future__ import annotations

import shutil
import subprocess
import warnings
from pathlib import Path

import numpy as np
import pytest

import effir
from effir.backends.tvm.runtime.artifact import ArtifactError

PROGRAM = """#[version = "0.0.5"]
global @bn: Ref[(Tensor[(4), float32], Tensor[(4), float32])] = ref((zeros(shape=[4]), ones(shape=[4])));

def @train(%x: Tensor[(8, 4), float32], %gamma: Tensor[(4), float32], %beta: Tensor[(4), float32]) {
  sum(nn.batch_norm(%x, %gamma, %beta, @bn, training=True))
}

def @main(%x: Tensor[(8, 4), float32], %gamma: Tensor[(4), float32], %beta: Tensor[(4), float32]) {
  nn.batch_norm(%x, %gamma, %beta, @bn)
}
"""


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory):
    """The compiled program, a State after five training calls, the inputs,
    and the trained model's inference output (compiled, and interpreted)."""
    module = effir.check(effir.parse(PROGRAM, source_name="bn.effir"))
    compiled = effir.compile(module)
    rs = np.random.default_rng(0)
    gamma, beta = rs.standard_normal(4).astype("f4"), rs.standard_normal(4).astype("f4")
    state = compiled.new_state()
    for _ in range(5):
        x = (rs.standard_normal((8, 4)) * 3 + 2).astype("f4")
        compiled(x, gamma, beta, entry="train", state=state)
    probe = rs.standard_normal((8, 4)).astype("f4")
    out = compiled(probe, gamma, beta, state=state)
    interpreted = effir.State(module)
    interpreted["bn"] = state["bn"]
    reference = effir.interpret(module, probe, gamma, beta, state=interpreted)
    return compiled, state, (probe, gamma, beta), out, reference


def test_the_trained_statistics_moved(trained) -> None:
    _, state, _, _, _ = trained
    assert not np.allclose(state["bn"][0], 0) and not np.allclose(state["bn"][1], 1)


def test_an_export_with_the_trained_state_runs_the_trained_model(trained, tmp_path: Path) -> None:
    compiled, state, args, out, reference = trained
    np.testing.assert_allclose(out, reference, rtol=1e-5, atol=1e-5)
    compiled.export(tmp_path / "model", state=state)
    loaded = effir.load(tmp_path / "model")
    fresh = loaded.new_state()
    np.testing.assert_array_equal(fresh["bn"][0], state["bn"][0])
    np.testing.assert_array_equal(fresh["bn"][1], state["bn"][1])
    np.testing.assert_allclose(loaded(*args), out, rtol=1e-6, atol=1e-6)
    # the caller's State is not the artifact's: it keeps its own values
    assert fresh["bn"][0] is not state["bn"][0]


def test_exporting_changed_state_without_passing_it_warns(trained, tmp_path: Path) -> None:
    compiled, state, args, out, _ = trained
    with pytest.warns(effir.StateNotExportedWarning, match=r"export\(\.\.\., state=state\)"):
        compiled.export(tmp_path / "initial")
    # what it warns about: the artifact holds the declared initial values
    loaded = effir.load(tmp_path / "initial")
    np.testing.assert_array_equal(loaded.new_state()["bn"][0], np.zeros(4, "f4"))
    assert not np.allclose(loaded(*args), out, atol=1e-3)


def test_exporting_unchanged_state_does_not_warn(tmp_path: Path) -> None:
    module = effir.check(effir.parse(PROGRAM, source_name="bn.effir"))
    compiled = effir.compile(module)
    x, g = np.ones((8, 4), "f4"), np.ones(4, "f4")
    compiled(x, g, g)  # no State given: a fresh one per call, nothing kept
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        compiled.export(tmp_path / "model")
        compiled.export(tmp_path / "model", state=compiled.new_state())


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ({"bn": (np.zeros(4, "f4"), np.ones(4, "f4")), "rng": 1}, "has no state cell @rng"),
        ({}, "no value for the state cell @bn"),
        ({"bn": (np.zeros(5, "f4"), np.ones(4, "f4"))}, "state cell @bn"),
        ([1, 2], "state must be an effir.State or a mapping of cell names to values"),
    ],
)
def test_a_state_that_is_not_the_programs_is_refused(
    trained, tmp_path: Path, bad, message: str
) -> None:
    compiled = trained[0]
    with pytest.raises(ArtifactError, match=message):
        compiled.export(tmp_path / "out", state=bad)
    assert not (tmp_path / "out").exists()


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")
def test_the_cpp_runner_starts_from_the_exported_state(
    trained, runner: Path, tmp_path: Path
) -> None:
    compiled, state, args, out, _ = trained
    compiled.export(tmp_path / "model", state=state)
    inputs = []
    for i, a in enumerate(args):
        np.save(tmp_path / f"in{i}.npy", a)
        inputs.append(str(tmp_path / f"in{i}.npy"))
    (tmp_path / "out").mkdir()
    done = subprocess.run(
        [runner, tmp_path / "model", *inputs, "--out", tmp_path / "out"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    np.testing.assert_allclose(np.load(tmp_path / "out" / "result_0.npy"), out, rtol=1e-6)
