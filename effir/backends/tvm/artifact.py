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

What is checked is what runs: each file is read once, its checksum taken
over the bytes read, and a library is loaded from a private copy of those
bytes, so replacing a file of the artifact after ``load`` has no effect.
Checksums detect corruption; tampering is detected only with a key:
``export(..., key=...)`` writes an HMAC-SHA256 of the manifest (which holds
every file's checksum), and ``load(path, key=...)`` refuses an artifact
whose manifest it does not authenticate (docs/backend.md, "Trust model").
"""

from __future__ import annotations

import hashlib
import hmac
import io
import json
import os
import shutil
import stat
import tempfile
import threading
import weakref
from pathlib import Path
from typing import Any

import numpy as np
import tvm

from ...io_safety import install_directory, staging_directory
from ...ir.diagnostics import Error
from ...ops.effects import WORLD
from ...runtime.values import PRNGKey
from ..state import State
from .compile import CompiledModule, printing_to, runner
from .errors import BackendError
from .signature import (
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
from .thread_vms import ThreadVMs

FORMAT = "effir-artifact"
VERSION = 1
MANIFEST = "effir-artifact.json"
SIGNATURE = "effir-artifact.sig"
MAX_MANIFEST_BYTES = 64 << 20
# The device each target kind runs on (a manifest naming another is refused).
DEVICES = {"llvm": "cpu", "cuda": "cuda"}

Key = bytes | str


class ArtifactError(Error):
    """An artifact that cannot be exported or loaded, and why."""

    kind = "artifact error"


# ================================================================= export
def export(compiled: CompiledModule, path: str | os.PathLike[str], key: Key | None = None) -> Path:
    """Write ``compiled`` with every specialisation built so far to the
    directory ``path`` (replaced as a whole, only once the new one is
    complete). Call the program once per shape binding it must serve, or
    use ``compiled.specialization(entry, dims)``, before exporting. With a
    ``key``, the manifest is signed (HMAC-SHA256) so that ``load(path,
    key=...)`` detects tampering, not only corruption."""
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
    staging = staging_directory(target, MANIFEST)  # io_safety.py: what may be replaced
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
                {
                    "dims": dict(dims),
                    "library": library,
                    "sha256": _digest(staging / library),
                    "recursive": spec.program.recursive,
                }
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
        manifest_bytes = (json.dumps(manifest, indent=2) + "\n").encode()
        (staging / MANIFEST).write_bytes(manifest_bytes)
        if key is not None:
            (staging / SIGNATURE).write_text(_signature(manifest_bytes, key) + "\n")
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return install_directory(staging, target, MANIFEST)


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
        if self.target_kind not in DEVICES:
            raise ArtifactError(
                f"{path / MANIFEST}: unknown target kind {self.target_kind!r} "
                f"(known: {', '.join(DEVICES)})"
            )
        # Libraries are loaded from private copies of the bytes whose
        # checksums were checked: what was checked is what runs.
        self._private = Path(tempfile.mkdtemp(prefix="effir-load-"))
        weakref.finalize(self, shutil.rmtree, self._private, True)
        self._cells: list[tuple[str, Spec, list[np.ndarray]]] = []
        for cell in manifest["cells"]:
            name = str(cell["name"])
            spec = spec_from_json(cell["type"], f"{MANIFEST}, cell {name}")
            arrays = [_state_array(path, name, f["file"], f["sha256"]) for f in cell["files"]]
            _check_cell(path, name, spec, arrays)
            self._cells.append((name, spec, arrays))
        cell_names = {WORLD} | {name for name, _, _ in self._cells}
        self.entries: dict[str, tuple[Signature, dict[tuple[tuple[str, int], ...], Path]]] = {}
        self.recursive: set[Path] = set()  # run on a large stack (vm_run.py)
        for entry, record in manifest["entries"].items():
            signature = Signature.from_json(record["signature"], f"{MANIFEST}, @{entry}")
            unknown = sorted(set(signature.state_in + signature.state_out) - cell_names)
            if unknown:
                raise ArtifactError(
                    f"{path / MANIFEST}: @{entry} passes the cell(s) {', '.join(unknown)}, "
                    "which the artifact does not declare"
                )
            libraries = {}
            for spec in record["specializations"]:
                dims = tuple(
                    sorted((str(k), _dimension(path, k, v)) for k, v in spec["dims"].items())
                )
                data = _checked_bytes(path, spec["library"], spec["sha256"])
                private = self._private / f"{len(list(self._private.iterdir()))}.so"
                private.write_bytes(data)
                libraries[dims] = private
                if spec.get("recursive", False) is True:
                    self.recursive.add(private)
            self.entries[str(entry)] = (signature, libraries)
        self._vms: dict[Path, ThreadVMs] = {}  # per library, one VM per thread
        self._lock = threading.Lock()

    def new_state(self) -> State:
        values = {}
        for name, spec, arrays in self._cells:
            values[name] = _rebuild(spec, iter([a.copy() for a in arrays]))
        return State.from_values(values)

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
        self,
        *args: Any,
        entry: str = "main",
        state: State | None = None,
        sink: Any = None,
        **named: Any,
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
            return call_entry(function, signature, args, state, named, entry.removeprefix("@"))

    def _function(self, library: Path, entry: str) -> Any:
        """``entry`` of the calling thread's VM for ``library`` (loaded
        once, whichever threads ask at once: thread_vms.py), run as a
        compiled module runs it (vm_run.py: errors, the large stack)."""
        vms = self._vms.get(library)
        if vms is None:
            with self._lock:
                vms = self._vms.get(library)
                if vms is None:
                    vms = self._vms[library] = ThreadVMs(self._load(library), self._device(library))
        return runner(vms.function(entry), library in self.recursive)

    def _load(self, library: Path) -> Any:
        try:
            return tvm.runtime.load_module(str(library))
        except Exception as err:  # TVM's loader: a library it cannot read
            raise ArtifactError(f"{library}: TVM cannot load this library: {err}") from None

    def _device(self, library: Path) -> Any:
        kind = self.target_kind
        device = tvm.device(DEVICES[kind], 0)
        if not device.exist:
            raise ArtifactError(f"{library}: built for {kind}, and this machine has no such device")
        return device


def load(path: str | os.PathLike[str], key: Key | None = None) -> LoadedModule:
    """The program exported to ``path`` (see ``export``); ArtifactError
    when it is not a complete, intact effir artifact of this version, or,
    with a ``key``, when its manifest is not signed with that key."""
    root = Path(path)
    manifest_path = root / MANIFEST
    try:
        if not manifest_path.is_file():
            raise ArtifactError(f"{root}: not an effir artifact (no {MANIFEST})")
        if manifest_path.stat().st_size > MAX_MANIFEST_BYTES:
            raise ArtifactError(f"{manifest_path}: the manifest is larger than any effir writes")
        manifest_bytes = manifest_path.read_bytes()
    except OSError as err:
        raise ArtifactError(f"{manifest_path}: cannot read the manifest ({err.strerror})") from None
    if key is not None:
        _verify_signature(root, manifest_bytes, key)
    try:
        manifest = json.loads(manifest_bytes)
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ArtifactError(f"{manifest_path}: the manifest is not valid JSON ({err})") from None
    except RecursionError:
        raise ArtifactError(f"{manifest_path}: the manifest is nested too deeply") from None
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
    except RecursionError:
        raise ArtifactError(f"{manifest_path}: the manifest is nested too deeply") from None


def _signature(manifest: bytes, key: Key) -> str:
    secret = key.encode() if isinstance(key, str) else bytes(key)
    return hmac.new(secret, manifest, hashlib.sha256).hexdigest()


def _verify_signature(root: Path, manifest: bytes, key: Key) -> None:
    try:
        recorded = (root / SIGNATURE).read_text().strip()
    except FileNotFoundError:
        raise ArtifactError(
            f"{root}: the artifact is not signed (no {SIGNATURE}), and a key was given"
        ) from None
    except (OSError, UnicodeDecodeError) as err:
        raise ArtifactError(f"{root / SIGNATURE}: cannot read the signature ({err})") from None
    if not hmac.compare_digest(recorded, _signature(manifest, key)):
        raise ArtifactError(
            f"{root}: the manifest's signature does not match the key: the artifact was "
            "changed after it was exported, or signed with another key"
        )


def _dimension(root: Path, name: Any, value: Any) -> int:
    if type(value) is not int or not 0 <= value < 1 << 63:
        raise ArtifactError(
            f"{root / MANIFEST}: dimension {name!r} must be a non-negative integer, not {value!r}"
        )
    return value


def _checked_bytes(root: Path, relative: Any, digest: Any) -> bytes:
    """The contents of ``root/relative``, read once, whose SHA-256 is
    ``digest``: the bytes checked are the bytes returned."""
    if not isinstance(relative, str) or not isinstance(digest, str):
        raise ArtifactError(f"{root / MANIFEST}: a file entry must name a file and its sha256")
    try:
        base = root.resolve(strict=True)
        path = (root / relative).resolve()
        if base not in path.parents:
            raise ArtifactError(f"{root / MANIFEST}: {relative!r} points outside the artifact")
        path = path.resolve(strict=True)
    except FileNotFoundError:
        raise ArtifactError(f"{root}: {relative} is missing") from None
    except (OSError, RuntimeError) as err:  # a symlink loop is a RuntimeError
        raise ArtifactError(f"{root}: {relative} cannot be resolved ({err})") from None
    try:
        with open(path, "rb") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                raise ArtifactError(f"{root}: {relative} is not a regular file")
            data = f.read()
    except OSError as err:
        raise ArtifactError(f"{root}: {relative} cannot be read ({err.strerror})") from None
    if hashlib.sha256(data).hexdigest() != digest:
        raise ArtifactError(
            f"{root}: {relative} is corrupt or truncated (its SHA-256 does not match the manifest)"
        )
    return data


def _state_array(root: Path, cell: str, relative: Any, digest: Any) -> np.ndarray:
    data = _checked_bytes(root, relative, digest)
    try:
        return np.load(io.BytesIO(data), allow_pickle=False)
    except (ValueError, OSError, EOFError) as err:
        raise ArtifactError(
            f"{root}: {relative}, a value of cell {cell}, is not a plain .npy array ({err})"
        ) from None


def _check_cell(root: Path, cell: str, spec: Spec, arrays: list[np.ndarray]) -> None:
    """The cell's files hold exactly the tensors its type says."""
    leaves: list[Spec] = []
    stack = [spec]
    while stack:
        s = stack.pop()
        if isinstance(s, TupleSpec):
            stack.extend(reversed(s.fields))
        else:
            leaves.append(s)
    if len(leaves) != len(arrays):
        raise ArtifactError(
            f"{root / MANIFEST}: cell {cell} has {len(arrays)} file(s) for {len(leaves)} tensor(s)"
        )
    for leaf, array in zip(leaves, arrays, strict=True):
        if isinstance(leaf, TensorSpec):
            expected = (tuple(leaf.shape), leaf.dtype)
        else:  # a key: two uint32 words
            expected = ((2,), "uint32")
        if (array.shape, str(array.dtype)) != expected:
            raise ArtifactError(
                f"{root}: cell {cell} holds a {str(array.dtype)} array of shape {array.shape}, "
                f"where its type says {expected[1]} of shape {expected[0]}"
            )


def _rebuild(spec: Spec, arrays: Any) -> Any:
    if isinstance(spec, TupleSpec):
        return tuple(_rebuild(f, arrays) for f in spec.fields)
    array = next(arrays)
    return PRNGKey(array) if isinstance(spec, KeySpec) else array
