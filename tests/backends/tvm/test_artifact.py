"""Exported programs (effir/backends/tvm/runtime/artifact.py): export, then
``effir.load`` without the IR, gives the compiled program's results and
state; every way an artifact can be broken is a clear ArtifactError."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import effir
from effir.backends.tvm.runtime.artifact import MANIFEST, ArtifactError
from effir.backends.tvm.runtime.errors import BackendError
from tests.support.artifact_programs import program


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, effir.IRModule]:
    module = program()
    compiled = effir.compile(module)
    rng = np.random.default_rng(0)
    w = rng.standard_normal((4, 4)).astype(np.float32)
    for n in (2, 5):  # two specialisations
        compiled(rng.standard_normal((n, 4)).astype(np.float32), w, sink=lambda l, v: None)
    path = tmp_path_factory.mktemp("export") / "model"
    compiled.export(path)
    return path, module


def test_a_reloaded_program_runs_as_the_interpreter(exported) -> None:
    path, module = exported
    loaded = effir.load(path)
    state, ref_state = loaded.new_state(), effir.State(module)
    rng = np.random.default_rng(1)
    w = rng.standard_normal((4, 4)).astype(np.float32)
    for n in (5, 2, 5):
        x = rng.standard_normal((n, 4)).astype(np.float32)
        printed: list = []
        ref_printed: list = []
        out = loaded(x, w, state=state, sink=lambda l, v, into=printed: into.append((l, v)))
        ref = effir.interpret(
            module, x, w, state=ref_state, sink=lambda l, v, into=ref_printed: into.append((l, v))
        )
        np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-6)
        assert np.array_equal(state["rng"].data, ref_state["rng"].data)
        assert state["count"] == ref_state["count"]
        assert [l for l, _ in printed] == ["total"]
        np.testing.assert_allclose(printed[0][1], ref_printed[0][1], rtol=1e-5)


def test_shapes_it_was_not_exported_for_are_refused(exported) -> None:
    loaded = effir.load(exported[0])
    w = np.zeros((4, 4), np.float32)
    with pytest.raises(BackendError, match=r"exported for the dimensions .*'n': 2.*not \{'n': 3\}"):
        loaded(np.zeros((3, 4), np.float32), w)
    with pytest.raises(
        effir.ArgumentError, match=r"parameter %w of @main expects Tensor\[\(4, 4\), float32\]"
    ):
        loaded(np.zeros((2, 4), np.float32), np.zeros((3, 4), np.float32))


def copy_of(src: Path, dst: Path) -> Path:
    import shutil

    shutil.copytree(src, dst)
    return dst


def test_a_corrupt_or_truncated_library_is_refused(exported, tmp_path: Path) -> None:
    path = copy_of(exported[0], tmp_path / "corrupt")
    library = next((path / "lib").iterdir())
    data = bytearray(library.read_bytes())
    data[len(data) // 2] ^= 0xFF
    library.write_bytes(bytes(data))
    with pytest.raises(ArtifactError, match=r"lib/main-\d\.so is corrupt or truncated"):
        effir.load(path)
    library.write_bytes(bytes(data[: len(data) // 3]))
    with pytest.raises(ArtifactError, match="corrupt or truncated"):
        effir.load(path)
    library.unlink()
    with pytest.raises(ArtifactError, match="is missing"):
        effir.load(path)


def test_a_manifest_of_another_version_or_format_is_refused(exported, tmp_path: Path) -> None:
    path = copy_of(exported[0], tmp_path / "versions")
    manifest = json.loads((path / MANIFEST).read_text())
    (path / MANIFEST).write_text(json.dumps({**manifest, "version": 99}))
    with pytest.raises(ArtifactError, match="format version 99; this effir reads version 1"):
        effir.load(path)
    (path / MANIFEST).write_text(json.dumps({**manifest, "format": "something-else"}))
    with pytest.raises(ArtifactError, match="not an effir artifact manifest"):
        effir.load(path)
    (path / MANIFEST).write_text(json.dumps(manifest)[:100])
    with pytest.raises(ArtifactError, match="not valid JSON"):
        effir.load(path)
    broken = {**manifest, "entries": {"main": {"signature": {"params": 3}}}}
    (path / MANIFEST).write_text(json.dumps(broken))
    with pytest.raises(ArtifactError, match="malformed"):
        effir.load(path)
    escaping = json.loads(json.dumps(manifest))
    escaping["cells"][0]["files"][0]["file"] = "../../etc/passwd"
    (path / MANIFEST).write_text(json.dumps(escaping))
    with pytest.raises(ArtifactError, match="points outside the artifact"):
        effir.load(path)
    with pytest.raises(ArtifactError, match="not an effir artifact"):
        effir.load(tmp_path / "nothing-here")


def test_export_needs_a_build_and_replaces_a_directory_whole(tmp_path: Path) -> None:
    module = program()
    compiled = effir.compile(module)
    with pytest.raises(ArtifactError, match="nothing to export"):
        compiled.export(tmp_path / "model")
    assert not (tmp_path / "model").exists()
    compiled(np.ones((2, 4), np.float32), np.eye(4, dtype=np.float32), sink=lambda l, v: None)
    first = compiled.export(tmp_path / "model")
    (first / "stale-file").write_text("left from before")
    compiled.export(tmp_path / "model")
    assert not (tmp_path / "model" / "stale-file").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["model"]  # no staging left behind


def test_a_loaded_programs_state_is_an_effir_state(exported, tmp_path: Path) -> None:
    """The same State contract as with the IR: a mapping, checked
    assignment, save and load, all-or-nothing calls."""
    loaded = effir.load(exported[0])
    state = loaded.new_state()
    assert isinstance(state, effir.State)
    assert sorted(state) == ["count", "rng"] and len(state) == 2
    w = np.eye(4, dtype=np.float32)
    loaded(np.ones((2, 4), np.float32), w, state=state, sink=lambda l, v: None)
    state.save(tmp_path / "state.npz")
    again = loaded.new_state().load(tmp_path / "state.npz")
    assert np.array_equal(again["rng"].data, state["rng"].data)
    assert again["count"] == state["count"] == 1
    with pytest.raises(effir.EvalError, match="count"):
        state["count"] = np.zeros((3,), np.int64)
    before = state.values()
    with pytest.raises(effir.ArgumentError):
        loaded(np.ones((2, 5), np.float32), w, state=state)
    assert state.values() == before
