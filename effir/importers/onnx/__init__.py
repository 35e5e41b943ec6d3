"""ONNX models as effir modules (docs/importers.md): ``from_onnx``.

The modules: ``model`` (reading a model and its opset), ``listing`` (the
located listing of its nodes), ``types`` (ONNX types as effir types),
``registry`` (which converter reads which operator version), ``graph``
(a graph's nodes converted in order, subgraphs on the trampoline),
``convert`` (the entry), ``values`` (Python values and effir's for
sequences), and the converters by family in ``ops/``. Nothing here imports
``onnx`` until a model is read.
"""

from __future__ import annotations

from .convert import from_onnx, initializer_values

__all__ = ["from_onnx", "initializer_values"]
