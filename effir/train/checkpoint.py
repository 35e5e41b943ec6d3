"""One checkpoint format for a training run: the parameters, the optimiser's
state, the program's ``State`` (PRNG keys, running statistics), the step
count and the user's own metadata, in one ``.npz`` of plain arrays.

    effir.format   "effir-checkpoint"     effir.version  1
    step           int64                  optimizer      "adam" (its name)
    param.<name>   each parameter         opt.<i>        the optimiser's state, in order
    state.<cell>   each cell's arrays, named as ``State.arrays()`` names them
                   (``state.bn.0``, ``state.rng``: a key is its two uint32 words)
    meta.<key>     what the caller adds (a model's configuration, a seed)

Why arrays and nothing else: a checkpoint is read with ``allow_pickle=False``,
so loading one runs no code, and numpy, JAX or any other tool reads it.
Arrays are stored exactly, so a run resumed from a checkpoint continues bit
for bit (tests/train/test_checkpoint.py). A checkpoint is written under a
temporary name beside its path and renamed into place: an interrupted save
leaves the previous checkpoint whole.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..backends.state import read_npz
from ..ir.diagnostics import Error

FORMAT = "effir-checkpoint"
VERSION = 1


class CheckpointError(Error):
    """A checkpoint that cannot be written, read, or restored into this
    training step, and why."""

    kind = "checkpoint error"


@dataclass
class Checkpoint:
    """What a checkpoint file holds, as arrays (``TrainStep.restore`` checks
    them against a program)."""

    params: dict[str, np.ndarray]
    opt_state: tuple[np.ndarray, ...]
    state: dict[str, np.ndarray]
    step: int
    optimizer: str
    metadata: dict[str, np.ndarray] = field(default_factory=dict)


def save_checkpoint(path: str | os.PathLike[str], checkpoint: Checkpoint) -> None:
    """Write ``checkpoint`` to ``path`` (exactly that name), whole or not at all."""
    arrays: dict[str, Any] = {
        "effir.format": np.asarray(FORMAT),
        "effir.version": np.asarray(VERSION, np.int64),
        "step": np.asarray(checkpoint.step, np.int64),
        "optimizer": np.asarray(checkpoint.optimizer),
    }
    arrays |= {f"param.{n}": np.asarray(a) for n, a in checkpoint.params.items()}
    arrays |= {f"opt.{i}": np.asarray(a) for i, a in enumerate(checkpoint.opt_state)}
    arrays |= {f"state.{n}": np.asarray(a) for n, a in checkpoint.state.items()}
    for key, value in checkpoint.metadata.items():
        array = np.asarray(value)
        if array.dtype == object:
            raise CheckpointError(
                f"metadata {key!r}: {type(value).__name__} is not an array, number or string"
            )
        arrays[f"meta.{key}"] = array
    target = Path(path)
    try:
        fd, temporary = tempfile.mkstemp(dir=target.parent or ".", prefix=f".{target.name}.")
    except OSError as err:
        raise CheckpointError(f"{target}: cannot write: {err.strerror or err}") from None
    try:
        with os.fdopen(fd, "wb") as out:
            np.savez(out, **arrays)
        os.replace(temporary, target)
    except OSError as err:
        Path(temporary).unlink(missing_ok=True)
        raise CheckpointError(f"{target}: cannot write: {err.strerror or err}") from None
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def read_checkpoint(path: str | os.PathLike[str]) -> Checkpoint:
    """The arrays of the checkpoint in ``path``; CheckpointError when it is
    not one this effir wrote."""
    where = os.fspath(path)
    arrays = read_npz(path, CheckpointError, "an effir checkpoint")
    if str(arrays.pop("effir.format", "")) != FORMAT:
        raise CheckpointError(f"{where}: not an effir checkpoint (no effir.format)")
    version = arrays.pop("effir.version", None)
    if version is None or int(version) != VERSION:
        raise CheckpointError(
            f"{where}: checkpoint format version {version}; this effir reads {VERSION}"
        )
    try:
        step = int(arrays.pop("step"))
        optimizer = str(arrays.pop("optimizer"))
    except (KeyError, TypeError, ValueError) as err:
        raise CheckpointError(f"{where}: malformed checkpoint ({err})") from None
    params, opt, state, metadata = {}, {}, {}, {}
    sections = {"param.": params, "opt.": opt, "state.": state, "meta.": metadata}
    for name, array in arrays.items():
        prefix = next((p for p in sections if name.startswith(p)), None)
        if prefix is None:
            raise CheckpointError(f"{where}: holds {name!r}, which no checkpoint holds")
        sections[prefix][name[len(prefix) :]] = array
    count = len(opt)
    if sorted(opt) != sorted(str(i) for i in range(count)):
        raise CheckpointError(f"{where}: the optimiser's state is not opt.0 ... opt.{count - 1}")
    return Checkpoint(
        params,
        tuple(opt[str(i)] for i in range(count)),
        state,
        step,
        optimizer,
        metadata,
    )


def metadata_of(path: str | os.PathLike[str]) -> Mapping[str, np.ndarray]:
    """The ``meta.*`` arrays of a checkpoint: what a script needs to rebuild
    its model (sizes, seed) before it restores the run."""
    return read_checkpoint(path).metadata
