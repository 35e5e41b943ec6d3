"""Artifacts as untrusted input (issue 13): what ``effir.load`` checks is
exactly what it runs (a library swapped after the check is never loaded),
every broken manifest or state file is an ``ArtifactError`` (never a
RecursionError, OverflowError, KeyError or a failure at call time), and a
manifest signed with a key at export is refused when anything in the
artifact was changed."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

import effir
from effir.backends.tvm.artifact import MANIFEST, SIGNATURE, ArtifactError

from .test_artifact import program

EVIL = r"""
#include <stdio.h>
__attribute__((constructor)) static void evil(void) {
  FILE *f = fopen(MARKER, "w");
  if (f) { fputs("ran", f); fclose(f); }
}
"""


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    compiled = effir.compile(program())
    compiled(np.ones((2, 4), np.float32), np.eye(4, dtype=np.float32), sink=lambda l, v: None)
    path = tmp_path_factory.mktemp("hardening") / "model"
    compiled.export(path)
    signed = path.with_name("signed")
    compiled.export(signed, key=b"secret key")
    return path


def fresh(exported: Path, tmp_path: Path, name: str = "model") -> Path:
    return Path(shutil.copytree(exported, tmp_path / name))


def edit_manifest(path: Path, edit) -> None:
    manifest = json.loads((path / MANIFEST).read_text())
    edit(manifest)
    (path / MANIFEST).write_text(json.dumps(manifest))


def call(loaded) -> np.ndarray:
    return loaded(np.ones((2, 4), np.float32), np.eye(4, dtype=np.float32), sink=lambda l, v: None)


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
def test_a_library_swapped_after_loading_is_never_run(exported: Path, tmp_path: Path) -> None:
    path = fresh(exported, tmp_path)
    marker = tmp_path / "marker"
    source = tmp_path / "evil.c"
    source.write_text(f'#define MARKER "{marker}"\n' + EVIL)
    evil = tmp_path / "evil.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", evil, source], check=True)
    loaded = effir.load(path)  # checks the checksums
    for library in (path / "lib").iterdir():
        shutil.copy(evil, library)  # replaced between the check and the first call
    result = call(loaded)
    assert not marker.exists(), "the swapped library's constructor ran"
    assert result.shape == (2, 4)


def test_a_symlink_loop_is_an_artifact_error(exported: Path, tmp_path: Path) -> None:
    path = fresh(exported, tmp_path)
    library = next((path / "lib").iterdir())
    library.unlink()
    (path / "lib" / "loop").symlink_to(library)
    library.symlink_to(path / "lib" / "loop")
    with pytest.raises(ArtifactError):
        effir.load(path)


def test_a_symlink_out_of_the_artifact_is_refused(exported: Path, tmp_path: Path) -> None:
    path = fresh(exported, tmp_path)
    library = next((path / "lib").iterdir())
    outside = tmp_path / "outside.so"
    shutil.move(library, outside)
    library.symlink_to(outside)
    with pytest.raises(ArtifactError, match="outside the artifact"):
        effir.load(path)


def test_a_deeply_nested_manifest_is_an_artifact_error(exported: Path, tmp_path: Path) -> None:
    path = fresh(exported, tmp_path)
    (path / MANIFEST).write_text(
        '{"format": "effir-artifact", "version": 1, "x": ' + "[" * 100000 + "]" * 100000 + "}"
    )
    with pytest.raises(ArtifactError):
        effir.load(path)


def test_huge_or_mistyped_dims_are_an_artifact_error(exported: Path, tmp_path: Path) -> None:
    path = fresh(exported, tmp_path)
    text = (exported / MANIFEST).read_text().replace('"n": 2', '"n": 1e400')
    assert text != (exported / MANIFEST).read_text()
    (path / MANIFEST).write_text(text)
    with pytest.raises(ArtifactError, match="dimension"):
        effir.load(path)
    (path / MANIFEST).write_text(text.replace("1e400", '"two"'))
    with pytest.raises(ArtifactError, match="dimension"):
        effir.load(path)


def replace_state_file(path: Path, array: np.ndarray, allow_pickle: bool = False) -> None:
    """Put ``array`` in the count cell's file, its checksum updated."""
    state_file = path / "state" / "count.0.npy"
    np.save(state_file, array, allow_pickle=allow_pickle)
    digest = hashlib.sha256(state_file.read_bytes()).hexdigest()

    def rehash(manifest: dict) -> None:
        for cell in manifest["cells"]:
            for f in cell["files"]:
                if f["file"] == "state/count.0.npy":
                    f["sha256"] = digest

    edit_manifest(path, rehash)


def test_a_pickled_state_file_is_refused_at_load(exported: Path, tmp_path: Path) -> None:
    path = fresh(exported, tmp_path)
    replace_state_file(path, np.array([{"pickled": 1}], dtype=object), allow_pickle=True)
    with pytest.raises(ArtifactError, match="count"):
        effir.load(path)


def test_a_state_file_of_the_wrong_type_is_refused_at_load(exported: Path, tmp_path: Path) -> None:
    path = fresh(exported, tmp_path)
    replace_state_file(path, np.zeros((3,), np.int64))
    with pytest.raises(ArtifactError, match="count"):
        effir.load(path)


def test_an_unknown_state_cell_is_an_artifact_error(exported: Path, tmp_path: Path) -> None:
    path = fresh(exported, tmp_path)

    def rename_cell(manifest: dict) -> None:
        manifest["entries"]["main"]["signature"]["state_in"] = ["no_such_cell"]

    edit_manifest(path, rename_cell)
    with pytest.raises(ArtifactError, match="no_such_cell"):
        effir.load(path)


def test_an_unknown_target_kind_is_an_artifact_error(exported: Path, tmp_path: Path) -> None:
    path = fresh(exported, tmp_path)
    edit_manifest(path, lambda m: m.update(target_kind="quantum"))
    with pytest.raises(ArtifactError, match="quantum"):
        effir.load(path)


def test_a_signed_artifact_is_checked_with_its_key(exported: Path, tmp_path: Path) -> None:
    signed = fresh(exported.with_name("signed"), tmp_path, "signed")
    assert (signed / SIGNATURE).is_file()
    call(effir.load(signed, key=b"secret key"))
    with pytest.raises(ArtifactError, match="signature"):
        effir.load(signed, key=b"another key")
    with pytest.raises(ArtifactError, match="not signed"):
        effir.load(fresh(exported, tmp_path), key=b"secret key")
    # Tampering: a new library with a matching checksum in the manifest.
    edit_manifest(signed, lambda m: m.update(target="llvm -mcpu=other"))
    with pytest.raises(ArtifactError, match="signature"):
        effir.load(signed, key=b"secret key")
    effir.load(signed)  # without a key, the signature is not checked
