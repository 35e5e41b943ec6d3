"""Importing TVM for effir, without the PyTorch, ml_dtypes and cuda-python
imports TVM's FFI makes.

``import tvm`` costs 3 s of CPU on the development machine, and 1.3 s of it
is PyTorch, which tvm_ffi imports whenever it is installed, as soon as it
is imported itself (to register a DLPack fast path and to order two
libraries' symbols on one Windows configuration), whether or not the
process uses PyTorch. effir never hands a PyTorch tensor to TVM (the input
contract converts arguments with ``np.from_dlpack`` first:
runtime/arguments.py). So when the process has not imported PyTorch yet,
TVM is imported with it hidden (``import torch`` raises ImportError, which
tvm_ffi expects), and tvm_ffi goes without its PyTorch support in this
process; a program that imported PyTorch already, or sets
``EFFIR_TVM_FULL_IMPORT=1``, gets TVM's own behaviour. The user's own
later ``import torch`` works as ever.

ml_dtypes (0.6 s more) is hidden alike: tvm_ffi imports it, when
installed, only to map numpy's bfloat16 and float8 array types to TVM's,
and effir has no such dtype (ir/types.py ``DTYPES``), so no array of
them crosses into TVM. A process that loads its programs from the build
cache (driver/program_cache.py) then never imports it, nor does a build
(relax/constants.py [RULE LOWER-CONST]: ``relax.const`` would import it);
TVM's ``Executable.jit`` does, when a first call must link the executable
(a program whose Relax module has no TIR of its own holds an empty C
module), through the ``tvm.contrib.tvmjs`` its ``export_library`` imports.

cuda-python's bindings (``cuda.bindings``, 0.03 s, installed with
PyTorch) alike: tvm_ffi imports their driver module only to take a
``CUstream`` object as an argument, which effir never passes (TVM's own
uses of them, NVRTC, import them when called, after the hiding).

``import_tvm`` runs before any of effir's modules imports TVM, where a
user's call first needs it: ``effir.compile``, ``effir.load``,
``effir.compile_packed`` and ``effir compile`` call it (a module that
imports the backend's modules directly gets TVM's own import).
``import_runtime`` imports tvm_ffi alone, under the same hiding: what a
program loaded from the build cache runs on (runtime/tvm_runtime.py);
``effir.compile`` calls it, and ``import_tvm`` only when it builds."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator

HIDDEN = ("torch", "ml_dtypes", "cuda.bindings")
"""The packages TVM imports when installed that effir does not need."""


def import_tvm() -> None:
    """Import TVM (once), hiding ``HIDDEN`` packages not imported yet."""
    if "tvm.relax" in sys.modules:
        return
    with _hiding():
        import tvm  # noqa: F401  (what this function is for, under the hiding)
        from tvm import relax  # noqa: F401  (what effir uses, under the same hiding)


def import_runtime() -> None:
    """Import tvm_ffi (once), hiding ``HIDDEN`` packages not imported yet."""
    if "tvm_ffi" in sys.modules:
        return
    with _hiding():
        import tvm_ffi  # noqa: F401  (what this function is for, under the hiding)


@contextlib.contextmanager
def _hiding() -> Iterator[None]:
    """``HIDDEN`` packages not imported yet made unimportable meanwhile
    (unless ``EFFIR_TVM_FULL_IMPORT=1``)."""
    hidden = [] if os.environ.get("EFFIR_TVM_FULL_IMPORT") == "1" else HIDDEN
    hidden = [name for name in hidden if name not in sys.modules]
    for name in hidden:
        sys.modules[name] = None  # type: ignore[assignment]  # `import name` raises ImportError
    try:
        yield
    finally:
        for name in hidden:
            if name in sys.modules and sys.modules[name] is None:
                del sys.modules[name]
