"""Exported programs: ``compiled.export(path)`` and ``effir.load(path)``.

An artifact is a directory that runs without effir's frontend, its passes
or a compiler: TVM's runtime loads it, from Python (``effir.load``) or from
C++ (examples/cpp/run_model.cc).

    artifact/
      effir-artifact.json   the manifest (below)
      lib/main-0.so         one shared library per specialisation: the Relax
      lib/main-1.so         VM executable with its kernels, for one binding of
                            the entry's symbolic dimensions
      state/rng.0.npy       the cells' values, one .npy per tensor: the State
                            given to export(..., state=), else the declared
                            initial values

The manifest says what the artifact is (``"format": "effir-artifact"``,
``"version"``), the target it was built for, each entry's signature
(runtime/signature.py: parameters, state passing, result, as plain JSON), each
specialisation's dimensions, library and SHA-256, and each cell's type and
files, and whether its libraries take arrays at any address
(``"any_alignment"``, relax/pipeline.py [RULE PIPELINE-ANYALIGN]: an artifact without
it has its arguments copied to 64-byte aligned memory). Loading checks the format, the version and every checksum before it
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

from ....ir import type_tree
from ....ir.diagnostics import Error
from ....ir.types import KeyType, TensorType
from ....ops.effects import WORLD
from ....runtime.arguments import check_call_options, unknown_entry
from ....runtime.values import PRNGKey
from ...state import State
from .entry_call import call_entry
from .errors import BackendError, run_time_error
from .placement import Placement
from .printing import printing_to
from .signature import (
    Dims,
    Signature,
    Spec,
    spec_from_json,
    type_of,
)
from .stack import runner
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


# =================================================================== load
class LoadedModule:
    """A program reloaded from an artifact: call it as the compiled program
    (``loaded(*args, state=..., sink=...)``); ``new_state()`` gives the
    cells' values the artifact holds (those of the State it was exported
    with: a trained model's)."""

    def __init__(self, path: Path, manifest: dict[str, Any]) -> None:
        self.path = path
        self.target = str(manifest["target"])
        self.any_alignment = manifest.get("any_alignment") is True
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
            expected = _cell_leaves(path, name, spec, cell["files"])
            arrays = [
                _state_array(path, name, f["file"], f["sha256"], leaf)
                for f, leaf in zip(cell["files"], expected, strict=True)
            ]
            self._cells.append((name, spec, arrays))
        cell_names = {WORLD} | {name for name, _, _ in self._cells}
        self.entries: dict[str, tuple[Signature, dict[tuple[tuple[str, int], ...], Path]]] = {}
        self.recursive: set[Path] = set()  # run on a large stack (runtime/stack.py)
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
        self.placement = Placement(tvm.device(DEVICES[self.target_kind], 0))
        """The device the artifact runs on, and the moves to and from it."""

    def new_state(self) -> State:
        values = {}
        for name, spec, arrays in self._cells:
            values[name] = _rebuild(spec, iter([a.copy() for a in arrays]))
        return State.from_values(values)

    @property
    def entry(self) -> str:
        """What a call runs when it names no ``entry=``: ``@main``, or the
        artifact's only entry (a program compiled with ``entry="decode"``)."""
        if "main" not in self.entries and len(self.entries) == 1:
            return next(iter(self.entries))
        return "main"

    def signature(self, entry: str | None = None) -> Signature:
        return self._entry(entry)[0]

    def _entry(self, entry: str | None) -> tuple[Signature, dict[Any, Path]]:
        name = (entry or self.entry).removeprefix("@")
        if name not in self.entries:
            raise unknown_entry(name, self.entries)
        return self.entries[name]

    def __call__(
        self,
        *args: Any,
        entry: str | None = None,
        state: State | None = None,
        sink: Any = None,
        **named: Any,
    ) -> Any:
        """As the compiled program's call: numpy results on the host."""
        return self._call(args, entry, state, sink, named, keep=False)

    def on_device(
        self,
        *args: Any,
        entry: str = "main",
        state: State | None = None,
        sink: Any = None,
        **named: Any,
    ) -> Any:
        """As the compiled program's ``on_device``: the results left on the
        device the artifact runs on, as ``DeviceArray``\\ s."""
        return self._call(args, entry, state, sink, named, keep=True)

    def _call(
        self,
        args: tuple[Any, ...],
        entry: str,
        state: State | None,
        sink: Any,
        named: dict[str, Any],
        keep: bool,
    ) -> Any:
        check_call_options(entry, state, sink, State)
        entry = entry or self.entry
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
                return call_entry(
                    function,
                    signature,
                    args,
                    state,
                    self.placement,
                    named,
                    entry.removeprefix("@"),
                    any_alignment=self.any_alignment,
                    keep=keep,
                )
            except Error:
                raise
            except Exception as err:  # inside compiled code (TVM, a packed function)
                raise run_time_error(err, entry.removeprefix("@")) from None

    def _function(self, library: Path, entry: str) -> Any:
        """``entry`` of the calling thread's VM for ``library`` (loaded
        once, whichever threads ask at once: runtime/thread_vms.py), run as a
        compiled module runs it (runtime/stack.py: errors, the large stack)."""
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
        device = self.placement.device
        if not device.exist:
            raise ArtifactError(
                f"{library}: built for {self.target_kind}, and this machine has no such device"
            )
        return device


def load(path: str | os.PathLike[str], key: Key | None = None) -> LoadedModule:
    """The program exported to ``path`` (see ``export``); ArtifactError
    when it is not a complete, intact effir artifact of this version, or,
    with a ``key``, when its manifest is not signed with that key."""
    root = Path(path)
    manifest_path = root / MANIFEST
    if not manifest_path.exists():
        raise ArtifactError(f"{root}: not an effir artifact (no {MANIFEST})")
    manifest_bytes = _read_regular(manifest_path, MAX_MANIFEST_BYTES, str(manifest_path))
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


def manifest_signature(manifest: bytes, key: Key) -> str:
    return hmac.new(key_bytes(key), manifest, hashlib.sha256).hexdigest()


def key_bytes(key: Any) -> bytes:
    """A signing key: non-empty bytes or text. Anything else is refused, not
    converted (``bytes(5)`` is five zero bytes: a key anyone could guess)."""
    if isinstance(key, str):
        secret = key.encode()
    elif isinstance(key, bytes | bytearray | memoryview):
        secret = bytes(key)
    else:
        raise ArtifactError(f"a signing key must be bytes or str, not {type(key).__name__}")
    if not secret:
        raise ArtifactError("a signing key must not be empty")
    return secret


def _verify_signature(root: Path, manifest: bytes, key: Key) -> None:
    expected = manifest_signature(manifest, key).encode()
    path = root / SIGNATURE
    if not path.exists() and not path.is_symlink():
        raise ArtifactError(
            f"{root}: the artifact is not signed (no {SIGNATURE}), and a key was given"
        )
    recorded = _checked_bytes(root, SIGNATURE, None, limit=1024).strip()
    if not hmac.compare_digest(recorded, expected):
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


def _read_regular(path: Path, limit: int | None, what: str) -> bytes:
    """The bytes of the regular file ``path`` (at most ``limit``): a FIFO or
    a device is refused before it is read (opened without blocking)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        raise ArtifactError(f"{what} is missing") from None
    except OSError as err:
        raise ArtifactError(f"{what} cannot be read ({err.strerror})") from None
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(f.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise ArtifactError(f"{what} is not a regular file")
        if limit is not None and info.st_size > limit:
            raise ArtifactError(f"{what} is larger than any effir writes")
        try:
            return f.read()
        except OSError as err:
            raise ArtifactError(f"{what} cannot be read ({err.strerror})") from None


def _checked_bytes(root: Path, relative: Any, digest: Any, limit: int | None = None) -> bytes:
    """The contents of ``root/relative``, read once, whose SHA-256 is
    ``digest`` (when not None): the bytes checked are the bytes returned."""
    if not isinstance(relative, str) or not isinstance(digest, str | None):
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
    data = _read_regular(path, limit, f"{root}: {relative}")
    if digest is not None and hashlib.sha256(data).hexdigest() != digest:
        raise ArtifactError(
            f"{root}: {relative} is corrupt or truncated (its SHA-256 does not match the manifest)"
        )
    return data


def _cell_leaves(root: Path, cell: str, spec: Spec, files: Any) -> list[tuple[tuple, str]]:
    """The (shape, dtype) of each tensor the cell's type says its files
    hold, in order; ArtifactError when the files are not one per tensor."""
    leaves = [
        (tuple(t.shape), t.dtype) if isinstance(t, TensorType) else ((2,), "uint32")  # a key
        for t in type_tree.leaves(type_of(spec))
    ]
    if not isinstance(files, list) or len(files) != len(leaves):
        count = len(files) if isinstance(files, list) else "no list of"
        raise ArtifactError(
            f"{root / MANIFEST}: cell {cell} has {count} file(s) for {len(leaves)} tensor(s)"
        )
    return leaves


def _state_array(
    root: Path, cell: str, relative: Any, digest: Any, expected: tuple[tuple, str]
) -> np.ndarray:
    """A cell's tensor: its header is checked against the cell's type
    before any data is read or allocated (a header may claim petabytes)."""
    data = _checked_bytes(root, relative, digest)
    buffer = io.BytesIO(data)
    try:
        version = np.lib.format.read_magic(buffer)
        read_header = (
            np.lib.format.read_array_header_1_0
            if version == (1, 0)
            else np.lib.format.read_array_header_2_0
        )
        shape, fortran, dtype = read_header(buffer)
    except (ValueError, OSError, EOFError, SyntaxError) as err:
        raise ArtifactError(
            f"{root}: {relative}, a value of cell {cell}, is not a plain .npy array ({err})"
        ) from None
    if (tuple(shape), str(dtype)) != expected or fortran:
        raise ArtifactError(
            f"{root}: cell {cell} holds a {dtype} array of shape {tuple(shape)}, "
            f"where its type says {expected[1]} of shape {expected[0]}"
        )
    try:
        return np.load(io.BytesIO(data), allow_pickle=False)
    except (ValueError, OSError, EOFError) as err:
        raise ArtifactError(
            f"{root}: {relative}, a value of cell {cell}, is not a plain .npy array ({err})"
        ) from None


def _rebuild(spec: Spec, arrays: Any) -> Any:
    """The value of ``spec`` made of the next arrays (keys as ``PRNGKey``)."""
    return type_tree.unflatten(
        type_of(spec), arrays, lambda t, a: PRNGKey(a) if isinstance(t, KeyType) else a
    )
