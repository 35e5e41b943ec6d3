"""Training in the library (docs/training.md): ``effir.train_step`` makes
one program of forward, backward, optimiser update, next key and
statistics, run as one call; ``TrainState`` is what a run carries from step
to step; a checkpoint saves it whole and ``TrainStep.restore`` resumes it
bit for bit.

- ``step``: ``train_step``, ``train_step_module`` (the program alone),
  ``step_signature`` (of a step written by hand), ``TrainStep``,
  ``TrainState``;
- ``checkpoint``: the ``.npz`` format, ``read_checkpoint``, ``metadata_of``.
"""

from .checkpoint import Checkpoint, CheckpointError, metadata_of, read_checkpoint
from .step import (
    StepSignature,
    TrainingError,
    TrainState,
    TrainStep,
    step_signature,
    train_step,
    train_step_module,
)

__all__ = [
    "Checkpoint",
    "CheckpointError",
    "StepSignature",
    "TrainState",
    "TrainStep",
    "TrainingError",
    "metadata_of",
    "read_checkpoint",
    "step_signature",
    "train_step",
    "train_step_module",
]
