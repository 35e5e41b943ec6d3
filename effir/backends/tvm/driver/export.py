"""``compiled.export(path)``: a compiled program written as an artifact
(runtime/artifact.py describes the format and loads it)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import tvm

from ....io_safety import install_directory, staging_directory
from ....ir import type_tree
from ....runtime.values import PRNGKey
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
from ..runtime.signature import KeySpec, Spec, TensorSpec, TupleSpec, spec_to_json, type_of
from .compile import CompiledModule


def export(compiled: CompiledModule, path: str | os.PathLike[str], key: Key | None = None) -> Path:
    """Write ``compiled`` with every specialisation built so far to the
    directory ``path`` (replaced as a whole, only once the new one is
    complete). Call the program once per shape binding it must serve, or
    use ``compiled.specialization(entry, dims)``, before exporting. With a
    ``key``, the manifest is signed (HMAC-SHA256) so that ``load(path,
    key=...)`` detects tampering, not only corruption."""
    target = Path(path)
    if key is not None:
        key_bytes(key)  # refused before anything is written
    built = [(key, spec) for key, spec in compiled.specializations.items()]
    if not built:
        raise ArtifactError(
            "nothing to export: the program has not been built for any shape yet; call it "
            "once (or compiled.specialization('main', dims)) for each shape it must serve"
        )
    staging = staging_directory(target, MANIFEST)  # io_safety.py: what may be replaced
    try:
        (staging / "lib").mkdir()
        (staging / "state").mkdir()
        entries: dict[str, Any] = {}
        for n, ((entry, dims), spec) in enumerate(built):
            library = f"lib/{entry}-{n}.so"
            if spec.library is not None:  # loaded from the build cache: its library
                shutil.copyfile(spec.library, staging / library)
            else:
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
