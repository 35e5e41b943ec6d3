"""Artifacts as untrusted input: what ``effir.load`` checks is
exactly what it runs (a library swapped after the check is never loaded),
every broken manifest or state file is an ``ArtifactError`` (never a
RecursionError, OverflowError, KeyError or a failure at call time), and a
manifest signed with a key at export is refused when anything in the
artifact was changed."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

import effir
from effir.backends.tvm.runtime.artifact import MANIFEST, SIGNATURE, ArtifactError
from tests.support.artifact_programs import program

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


def test_a_fifo_in_the_artifact_is_refused_not_waited_on(exported: Path, tmp_path: Path) -> None:
    """Opening a FIFO blocks until a writer comes: the loader must refuse
    it (in a subprocess with a time-out, so that a hang is a failure)."""
    from tests.support.isolated import run_isolated

    signed = fresh(exported.with_name("signed"), tmp_path, "signed")
    library = next((signed / "lib").iterdir())
    library.unlink()
    os.mkfifo(library)
    sig = fresh(exported.with_name("signed"), tmp_path, "sig")
    (sig / SIGNATURE).unlink()
    os.mkfifo(sig / SIGNATURE)
    run = run_isolated(
        f"""
        import effir
        from effir.backends.tvm.runtime.artifact import ArtifactError
        for path, key in [({str(signed)!r}, None), ({str(sig)!r}, b"secret key")]:
            try:
                effir.load(path, key=key)
            except ArtifactError as err:
                print("refused:", err.message)
        """,
        timeout=120,
    ).check()
    assert run.stdout.count("is not a regular file") == 2, run.stdout


def test_a_signature_that_is_not_ascii_is_an_artifact_error(exported: Path, tmp_path: Path) -> None:
    signed = fresh(exported.with_name("signed"), tmp_path, "signed")
    (signed / SIGNATURE).write_text("é" * 64)
    with pytest.raises(ArtifactError, match="signature does not match"):
        effir.load(signed, key=b"secret key")


@pytest.mark.parametrize("key", [5, 0, True, -1, 1.5, "", b""])
def test_a_key_that_is_not_non_empty_bytes_or_text_is_refused(
    exported: Path, tmp_path: Path, key: object
) -> None:
    """``bytes(5)`` is five zero bytes, and HMAC pads a key with zeros: an
    int would sign with a key anyone can guess."""
    with pytest.raises(ArtifactError, match="signing key"):
        effir.load(exported.with_name("signed"), key=key)
    compiled = effir.compile(program())
    with pytest.raises(ArtifactError, match="signing key"):
        compiled.export(tmp_path / "never", key=key)
    assert not (tmp_path / "never").exists()


def test_a_state_header_claiming_petabytes_is_refused_before_reading(
    exported: Path, tmp_path: Path
) -> None:
    path = fresh(exported, tmp_path)
    header = "{'descr': '<f4', 'fortran_order': False, 'shape': (1000000000000000,), }"
    header += " " * (63 - (len(header) + 10) % 64) + "\n"
    data = b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header.encode()
    (path / "state" / "count.0.npy").write_bytes(data)
    digest = hashlib.sha256(data).hexdigest()

    def rehash(manifest: dict) -> None:
        for cell in manifest["cells"]:
            for f in cell["files"]:
                if f["file"] == "state/count.0.npy":
                    f["sha256"] = digest

    edit_manifest(path, rehash)
    with pytest.raises(ArtifactError, match="where its type says"):
        effir.load(path)


@pytest.mark.parametrize("bad", [True, 1 << 63, -1, "1x", "x y"])
def test_a_malformed_parameter_dimension_is_an_artifact_error(
    exported: Path, tmp_path: Path, bad: object
) -> None:
    path = fresh(exported, tmp_path)
    edit_manifest(
        path,
        lambda m: m["entries"]["main"]["signature"]["params"][0]["type"].update(tensor=[bad, 4]),
    )
    with pytest.raises(ArtifactError, match="bad dimension"):
        effir.load(path)
    edit_manifest(
        path,
        lambda m: m["entries"]["main"]["signature"]["params"][0]["type"].update(
            tensor=["n", 4], dtype="object"
        ),
    )
    with pytest.raises(ArtifactError, match="unknown dtype"):
        effir.load(path)
