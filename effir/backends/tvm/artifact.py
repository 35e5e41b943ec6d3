"""Exported programs: ``compiled.export(path)`` and ``effir.load(path)``.

An artifact is a directory that runs without effir's frontend, its passes
or a compiler: TVM's runtime loads it, from Python (``effir.load``) or from
C++ (examples/cpp/run_model.cc).

    artifact/
      effir-artifact.json   the manifest (below)
      lib/main-0.so         one shared library per specialisation: the Relax
      lib/main-1.so         VM executable with its kernels, for one binding of
                            the entry's symbolic dimensions
      state/rng.0.npy       the cells' initial values, one .npy per tensor

The manifest says what the artifact is (``"format": "effir-artifact"``,
``"version"``), the target it was built for, each entry's signature
(signature.py: parameters, state passing, result, as plain JSON), each
specialisation's dimensions, library and SHA-256, and each cell's type and
files. Loading checks the format, the version and every checksum before it
loads a library, so a corrupt, truncated or foreign artifact is a clear
``ArtifactError``, never a crash; ``.npy`` files are read with
``allow_pickle=False``: nothing in an artifact runs as Python.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import tvm
from tvm import relax

from ...ir.diagnostics import Error
from ...runtime.values import PRNGKey
from .compile import CompiledModule, printing_to
from .errors import BackendError, run_time_error
from .signature import (
    CellValues,
    Dims,
    KeySpec,
    Signature,
    Spec,
    TensorSpec,
    TupleSpec,
    call_entry,
    spec_from_json,
    spec_to_json,
)

FORMAT = "effir-artifact"
VERSION = 1
MANIFEST = "effir-artifact.json"


class ArtifactError(Error):
    """An artifact that cannot be exported or loaded, and why."""

    kind = "artifact error"


# ================================================================= export
def export(compiled: CompiledModule, path: str | os.PathLike[str]) -> Path:
    """Write ``compiled`` with every specialisation built so far to the
    directory ``path`` (replaced as a whole, only once the new one is
    complete). Call the program once per shape binding it must serve, or
    use ``compiled.specialization(entry, dims)``, before exporting."""
    target = Path(path)
    built = [(key, spec) for key, spec in compiled.specializations.items()]
    if not built:
        raise ArtifactError(
            "nothing to export: the program has not been built for any shape yet; call it "
            "once (or compiled.specialization('main', dims)) for each shape it must serve"
        )
    for (entry, dims), spec in built:
        if not spec.exportable:
            raise ArtifactError(
                f"@{entry} for {dict(dims) or 'its static shapes'} has kernels of data-dependent "
                "shape, built in Python when called: it runs here but cannot be exported"
            )
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".effir-export-", dir=target.parent))
    staging.chmod(0o755)
    try:
        (staging / "lib").mkdir()
        (staging / "state").mkdir()
        entries: dict[str, Any] = {}
        for n, ((entry, dims), spec) in enumerate(built):
            library = f"lib/{entry}-{n}.so"
            spec.executable.export_library(str(staging / library))
            record = entries.setdefault(
                entry, {"signature": compiled.signature(entry).to_json(), "specializations": []}
            )
            record["specializations"].append(
                {"dims": dict(dims), "library": library, "sha256": _digest(staging / library)}
            )
        cells = []
        state = compiled.new_state()
        for name in compiled.source.cells:
            spec_type = _spec_of_value(state[name])
            files = []
            for k, array in enumerate(_arrays(state[name], spec_type)):
                file = f"state/{name}.{k}.npy"
                np.save(staging / file, array, allow_pickle=False)
                files.append({"file": file, "sha256": _digest(staging / file)})
            cells.append({"name": name, "type": spec_to_json(spec_type), "files": files})
        manifest = {
            "format": FORMAT,
            "version": VERSION,
            "target": str(compiled.target),
            "target_kind": compiled.target.kind.name,
            "tvm": tvm.__version__,
            "entries": entries,
            "cells": cells,
        }
        (staging / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
        if target.exists():
            old = target.with_name(f".{target.name}.old")
            shutil.rmtree(old, ignore_errors=True)
            target.rename(old)
            staging.rename(target)
            shutil.rmtree(old, ignore_errors=True)
        else:
            staging.rename(target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return target


def _spec_of_value(value: Any) -> Spec:
    """The spec of a cell's value (its declaration's type may be implicit)."""
    if isinstance(value, tuple):
        return TupleSpec(tuple(_spec_of_value(v) for v in value))
    if isinstance(value, PRNGKey):
        return KeySpec()
    array = np.asarray(value)
    return TensorSpec(tuple(array.shape), str(array.dtype))


def _arrays(value: Any, spec: Spec) -> list[np.ndarray]:
    if isinstance(spec, TupleSpec):
        return [a for v, f in zip(value, spec.fields, strict=True) for a in _arrays(v, f)]
    return [np.asarray(value.data if isinstance(value, PRNGKey) else value)]


def _digest(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


# =================================================================== load
class LoadedModule:
    """A program reloaded from an artifact: call it as the compiled program
    (``loaded(*args, state=..., sink=...)``); ``new_state()`` gives the
    cells' initial values."""

    def __init__(self, path: Path, manifest: dict[str, Any]) -> None:
        self.path = path
        self.target = str(manifest["target"])
        self.target_kind = str(manifest.get("target_kind", "llvm"))
        self.entries: dict[str, tuple[Signature, dict[tuple[tuple[str, int], ...], Path]]] = {}
        for entry, record in manifest["entries"].items():
            signature = Signature.from_json(record["signature"], f"{MANIFEST}, @{entry}")
            libraries = {}
            for spec in record["specializations"]:
                dims = tuple(sorted((str(k), int(v)) for k, v in spec["dims"].items()))
                libraries[dims] = _checked(path, spec["library"], spec["sha256"])
            self.entries[entry] = (signature, libraries)
        self._cells = []
        for cell in manifest["cells"]:
            spec = spec_from_json(cell["type"], f"{MANIFEST}, cell {cell['name']}")
            files = [_checked(path, f["file"], f["sha256"]) for f in cell["files"]]
            self._cells.append((str(cell["name"]), spec, files))
        self._functions: dict[Path, Any] = {}

    def new_state(self) -> CellValues:
        values = {}
        for name, spec, files in self._cells:
            arrays = iter([np.load(f, allow_pickle=False) for f in files])
            values[name] = _rebuild(spec, arrays)
        return CellValues(values)

    def signature(self, entry: str = "main") -> Signature:
        return self._entry(entry)[0]

    def _entry(self, entry: str) -> tuple[Signature, dict[Any, Path]]:
        name = entry.removeprefix("@")
        if name not in self.entries:
            raise ArtifactError(
                f"the artifact has no entry @{name} (it has @{', @'.join(self.entries)})"
            )
        return self.entries[name]

    def __call__(
        self, *args: Any, entry: str = "main", state: CellValues | None = None, sink: Any = None
    ) -> Any:
        signature, libraries = self._entry(entry)
        if state is None:
            state = self.new_state()

        def function(dims: Dims) -> Any:
            # A build binds the dimensions its kernels need static; the
            # others are symbolic, any size serves.
            for bound, library in libraries.items():
                if all(dims.get(d) == size for d, size in bound):
                    return self._function(library, entry.removeprefix("@"))
            shown = ", ".join(str(dict(k)) for k in libraries) or "none"
            raise BackendError(
                f"the artifact was exported for the dimensions {shown}, not "
                f"{dict(sorted(dims.items()))}: compile and export it for these shapes"
            )

        with printing_to(sink):
            try:
                return call_entry(function, signature, args, state)
            except Error:
                raise
            except Exception as err:  # inside compiled code (TVM, a packed function)
                raise run_time_error(err, entry.removeprefix("@")) from None

    def _function(self, library: Path, entry: str) -> Any:
        known = self._functions.get(library)
        if known is None:
            try:
                executable = tvm.runtime.load_module(str(library))
            except Exception as err:  # TVM's loader: a library it cannot read
                raise ArtifactError(f"{library}: TVM cannot load this library: {err}") from None
            kind = self.target_kind
            device = tvm.cpu() if kind == "llvm" else tvm.device(kind, 0)
            if not device.exist:
                raise ArtifactError(
                    f"{library}: built for {kind}, and this machine has no such device"
                )
            vm = relax.VirtualMachine(executable, device)
            known = self._functions[library] = vm[entry]
        return known


def load(path: str | os.PathLike[str]) -> LoadedModule:
    """The program exported to ``path`` (see ``export``); ArtifactError
    when it is not a complete, intact effir artifact of this version."""
    root = Path(path)
    manifest_path = root / MANIFEST
    if not manifest_path.is_file():
        raise ArtifactError(f"{root}: not an effir artifact (no {MANIFEST})")
    try:
        manifest = json.loads(manifest_path.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ArtifactError(f"{manifest_path}: the manifest is not valid JSON ({err})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise ArtifactError(f"{manifest_path}: not an effir artifact manifest")
    version = manifest.get("version")
    if version != VERSION:
        raise ArtifactError(
            f"{manifest_path}: artifact format version {version!r}; this effir reads version "
            f"{VERSION}: export it again with this version"
        )
    try:
        return LoadedModule(root, manifest)
    except (KeyError, TypeError, ValueError, AttributeError) as err:
        raise ArtifactError(f"{manifest_path}: malformed manifest ({err})") from None


def _checked(root: Path, relative: str, digest: str) -> Path:
    path = (root / relative).resolve()
    if root.resolve() not in path.parents:
        raise ArtifactError(f"{root / MANIFEST}: {relative!r} points outside the artifact")
    if not path.is_file():
        raise ArtifactError(f"{root}: {relative} is missing")
    if _digest(path) != digest:
        raise ArtifactError(
            f"{root}: {relative} is corrupt or truncated (its SHA-256 does not match the manifest)"
        )
    return path


def _rebuild(spec: Spec, arrays: Any) -> Any:
    if isinstance(spec, TupleSpec):
        return tuple(_rebuild(f, arrays) for f in spec.fields)
    array = next(arrays)
    return PRNGKey(array) if isinstance(spec, KeySpec) else array
