"""Models from other frameworks as effir modules (docs/importers.md).

An importer produces IR, as the frontend does: it imports ``ir``, ``ops``,
``passes`` and ``std``, never a backend or the frontend. ``common`` holds
what every importer shares (values and their types as they are built,
sequences as lists, key and statistics cells, recurrent layers as loops,
located errors); ``onnx`` reads ONNX models. The framework a model comes
from is imported only when a model is read: ``import effir`` needs neither
onnx nor torch.
"""

from __future__ import annotations

import os
from typing import Any

from .common.diagnostics import ModelImportError


def from_onnx(
    model_or_path: Any | str | os.PathLike[str] | bytes,
    *,
    opset: int | None = None,
    initializers: str = "constants",
    input_types: Any = None,
) -> Any:
    """An ONNX model (a ``ModelProto``, its serialised bytes, or a path) as
    an effir ``IRModule`` whose ``@main`` takes the graph's inputs and
    returns its outputs (one value, or a tuple of them).

    - ``opset``: the default domain's opset to read the model at (default:
      the model's own); each node's operator is read at the version that
      opset gives it.
    - ``initializers``: ``"constants"`` (weights are constants of the
      program) or ``"parameters"`` (the weights, float initializers of rank
      1 or more but batch norm's running statistics, are parameters of
      ``@main`` after the graph's inputs, named after them: what training with
      ``effir.grad`` needs; ``effir.importers.onnx.initializer_values``
      gives their values).
    - ``input_types``: effir types for inputs whose declared type is not
      precise enough, by name (a sequence input's elements whose rank the
      model does not declare: its element tensor type).

    Control flow stays control flow (``Loop``, ``Scan`` and the recurrent
    layers become ``cf.foreach``/``cf.while_loop``, ``If`` an ``if``),
    sequences are lists, and random operators, dropout and training-mode
    batch normalisation read and write state cells. What cannot be imported
    is a ``ModelImportError`` naming the node, its operator and opset."""
    from .onnx import from_onnx as convert  # lazy: converters load on first use

    return convert(model_or_path, opset=opset, initializers=initializers, input_types=input_types)


def from_torch(exported_program: Any, *, parameters: str = "parameters") -> Any:
    """A ``torch.export.ExportedProgram`` as an effir ``IRModule``
    (``effir.from_torch``; effir/importers/torch/program.py)."""
    from .torch import from_torch as convert  # lazy: converters load on first use

    return convert(exported_program, parameters=parameters)


__all__ = ["ModelImportError", "from_onnx", "from_torch"]
