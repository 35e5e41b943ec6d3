"""Importing TVM for effir, without the PyTorch import TVM's FFI makes.

tvm_ffi imports PyTorch, when it is installed, as soon as it is imported
itself (to register a DLPack fast path and to order two libraries' symbols
on one Windows configuration), whether or not the process uses PyTorch:
1.3 s of the 3 s that ``import tvm`` costs on the development machine,
paid by every first ``effir.compile`` or ``effir.load``. effir never hands
a PyTorch tensor to TVM (the input contract converts arguments to numpy
first: runtime/arguments.py), so when PyTorch is not imported yet, TVM is
imported with it hidden, and tvm_ffi goes without its PyTorch support in
this process. A program that has imported PyTorch already, or sets
``EFFIR_TVM_WITH_TORCH=1``, gets TVM's own behaviour.

``import_tvm`` runs before any of effir's modules imports TVM, where a
user's call first needs it: ``effir.compile``, ``effir.load``,
``effir.compile_packed`` and ``effir compile`` call it (a module that
imports the backend's modules directly gets TVM's own import)."""

from __future__ import annotations

import os
import sys


def import_tvm() -> None:
    """Import TVM (once), hiding PyTorch from tvm_ffi unless it is imported."""
    if "tvm" in sys.modules or "tvm_ffi" in sys.modules:
        return
    if "torch" in sys.modules or os.environ.get("EFFIR_TVM_WITH_TORCH") == "1":
        import tvm  # noqa: F401

        return
    sys.modules["torch"] = None  # type: ignore[assignment]  # `import torch` raises ImportError
    try:
        import tvm  # noqa: F401
        from tvm import relax  # noqa: F401  (what effir uses, under the same hiding)
    finally:
        if sys.modules.get("torch", 0) is None:
            del sys.modules["torch"]
