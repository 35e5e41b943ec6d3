"""``compiled.export(path)``: a compiled program written as an artifact
(runtime/artifact.py describes the format and loads it), its cells holding
the State given (``state=``: a trained model's) or their declared initial
values.

It builds on runtime/ only: ``export`` reads a compiled program through
``Exportable`` (what it needs of one), which ``CompiledModule``
(driver/compile.py, whose ``export`` method calls it) has.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import threading
import warnings
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import tvm

from ....io_safety import install_directory, staging_directory
from ....ir import type_tree
from ....ir.module import IRModule
from ....runtime.values import PRNGKey
from ...state import State, StateError
from ..runtime.artifact import (
    FORMAT,
    MANIFEST,
    SIGNATURE,
    VERSION,
    ArtifactError,
    Key,
    key_bytes,
    manifest_signature,
)
from ..runtime.errors import StateNotExportedWarning
from ..runtime.signature import (
    KeySpec,
    Signature,
    Spec,
    TensorSpec,
    TupleSpec,
    spec_to_json,
    type_of,
)
from ..runtime.thread_vms import MODULES


class BuiltProgram(Protocol):
    """What an export reads of a built program (``RelaxProgram``)."""

    @property
    def recursive(self) -> bool: ...


class Built(Protocol):
    """What an export reads of one built binding (``Specialisation``)."""

    @property
    def program(self) -> BuiltProgram: ...

    @property
    def library(self) -> Path | None: ...

    @property
    def writer(self) -> threading.Thread | None: ...

    def exportable(self) -> Any: ...


class Exportable(Protocol):
    """What an export reads of a compiled program (``CompiledModule``)."""

    @property
    def source(self) -> IRModule: ...

    @property
    def target_text(self) -> str: ...

    @property
    def target_kind(self) -> str: ...

    @property
    def precision(self) -> str: ...

    @property
    def specialisations(self) -> Mapping[tuple[str, tuple[tuple[str, int], ...]], Built]: ...

    @property
    def changed_states(self) -> Iterable[State]: ...

    def signature(self, entry: str | None = None) -> Signature: ...

    def new_state(self, seed: int | None = None) -> State: ...


def export(
    compiled: Exportable,
    path: str | os.PathLike[str],
    key: Key | None = None,
    state: State | Mapping[str, Any] | None = None,
) -> Path:
    """Write ``compiled`` with every specialisation built so far to the
    directory ``path`` (replaced as a whole, only once the new one is
    complete). Call the program once per shape binding it must serve, or
    use ``compiled.specialisation(entry, dims)``, before exporting. The
    cells start from ``state`` (checked against the program's cells) or,
    without it, from their declared initial values. With a ``key``, the
    manifest is signed (HMAC-SHA256) so that ``load(path, key=...)``
    detects tampering, not only corruption."""
    target = Path(path)
    if key is not None:
        key_bytes(key)  # refused before anything is written
    exported_state = _exported_state(compiled, state)  # likewise
    built = [(key, spec) for key, spec in compiled.specialisations.items()]
    if not built:
        raise ArtifactError(
            "nothing to export: the program has not been built for any shape yet; call it "
            "once (or compiled.specialisation('main', dims)) for each shape it must serve"
        )
    staging = staging_directory(target, MANIFEST)  # io_safety.py: what may be replaced
    try:
        (staging / "lib").mkdir()
        (staging / "state").mkdir()
        entries: dict[str, Any] = {}
        for n, ((entry, dims), spec) in enumerate(built):
            library = f"lib/{entry}-{n}.so"
            if spec.writer is not None:  # the build cache's copy is being written: wait
                spec.writer.join()
            if spec.library is not None:  # loaded from or written to the build cache
                shutil.copyfile(spec.library, staging / library)
            else:
                executable = spec.exportable()
                with MODULES:
                    executable.export_library(str(staging / library))
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
        for name in compiled.source.cells:
            spec_type = _spec_of_value(exported_state[name])
            files = []
            for k, array in enumerate(_arrays(exported_state[name], spec_type)):
                file = f"state/{name}.{k}.npy"
                np.save(staging / file, array, allow_pickle=False)
                files.append({"file": file, "sha256": _digest(staging / file)})
            cells.append({"name": name, "type": spec_to_json(spec_type), "files": files})
        manifest = {
            "format": FORMAT,
            "version": VERSION,
            "target": compiled.target_text,
            "target_kind": compiled.target_kind,
            "precision": compiled.precision,
            "tvm": tvm.__version__,
            "any_alignment": True,
            "entries": entries,
            "cells": cells,
        }
        manifest_bytes = (json.dumps(manifest, indent=2) + "\n").encode()
        (staging / MANIFEST).write_bytes(manifest_bytes)
        if key is not None:
            (staging / SIGNATURE).write_text(manifest_signature(manifest_bytes, key) + "\n")
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return install_directory(staging, target, MANIFEST)


def _exported_state(compiled: Exportable, given: Any) -> State:
    """The State the artifact's cells hold: ``given`` checked against the
    program's cells (each one given a value of its type, no other), or the
    initial values, with a warning when the program's calls changed a
    State the caller kept (a trained model exported without its training)."""
    fresh = compiled.new_state()
    if given is None:
        initial = fresh.arrays()
        if any(_differs(s.arrays(), initial) for s in list(compiled.changed_states)):
            warnings.warn(
                StateNotExportedWarning(
                    "the artifact's cells hold their declared initial values, but calls of "
                    "this program changed a State: to export that state (a trained model's "
                    "statistics, its key), use export(..., state=state)"
                ),
                stacklevel=4,
            )
        return fresh
    if isinstance(given, State):
        values = given.values()
    elif isinstance(given, Mapping):
        values = {str(name).removeprefix("@"): value for name, value in given.items()}
    else:
        raise ArtifactError(
            "export: the state must be an effir.State or a mapping of cell names to values, "
            f"not {type(given).__name__}"
        )
    known = ", ".join(f"@{n}" for n in fresh) or "none"
    for name in values:
        if name not in fresh:
            raise ArtifactError(
                f"export: the program has no state cell @{name} (its cells: {known})"
            )
    for name in fresh:
        if name not in values:
            raise ArtifactError(f"export: no value for the state cell @{name} in the state given")
        try:
            fresh[name] = values[name]
        except StateError as err:
            raise ArtifactError(f"export: {err.message}") from None
    return fresh


def _differs(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> bool:
    return a.keys() != b.keys() or any(not np.array_equal(a[k], b[k]) for k in a)


def _spec_of_value(value: Any) -> Spec:
    """The spec of a cell's value (its declaration's type may be implicit)."""
    if isinstance(value, tuple):
        return TupleSpec(tuple(_spec_of_value(v) for v in value))
    if isinstance(value, PRNGKey):
        return KeySpec()
    array = np.asarray(value)
    return TensorSpec(tuple(array.shape), str(array.dtype))


def _arrays(value: Any, spec: Spec) -> list[np.ndarray]:
    """The arrays of a cell's value, in order."""
    leaves = type_tree.flatten(type_of(spec), value)
    return [np.asarray(v.data if isinstance(v, PRNGKey) else v) for v in leaves]


def _digest(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()
