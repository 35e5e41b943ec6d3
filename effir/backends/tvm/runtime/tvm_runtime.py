"""TVM's runtime as a compiled program needs it, through tvm_ffi and TVM's
shared libraries, without TVM's Python package.

Why: ``import tvm`` costs about 0.6 s of CPU (its Python: a thousand
registered functions, Relax, TIR, the backends), and a process that loads
its programs from the build cache (driver/program_cache.py) needs none of
it: a cached library is loaded by ``libtvm_runtime`` and run by its
virtual machine (``vm_load_executable``, ``vm_initialization``), as the
C++ runner does. This module is that: devices, tensors, loaded libraries,
VMs and the thread pool's size, each a packed function of the runtime
library, which it loads (once) when imported. It works the same when TVM's
Python is imported too (the library is loaded once either way).

The host CPU's name (``host_cpu``) is the one thing a warm compile needs
from TVM's compiler library (LLVM's, for the key of a target "llvm"
leaves to the host): the library is loaded for it, its Python is not."""

from __future__ import annotations

import ctypes
import functools
import importlib.util
import os
from collections.abc import Callable
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import numpy as np
import tvm_ffi

from .importing import import_runtime

import_runtime()  # tvm_ffi without PyTorch and ml_dtypes (runtime/importing.py)

POOLED_ALLOCATOR = 2
"""The VM's memory allocator for each device (TVM's ``VirtualMachine`` default)."""

DLPACK_CPU = 1


def library_directories() -> list[Path]:
    """Where TVM's shared libraries are, as TVM's own loader looks
    (``tvm/libinfo.py``: ``TVM_LIBRARY_PATH`` first, then the package's
    ``lib``), found without importing the ``tvm`` package."""
    found: list[Path] = []
    if os.environ.get("TVM_LIBRARY_PATH"):
        found.append(Path(os.environ["TVM_LIBRARY_PATH"]))
    spec = importlib.util.find_spec("tvm")
    if spec is not None and spec.submodule_search_locations:
        found.extend(Path(p) / "lib" for p in spec.submodule_search_locations)
    return found


def library(name: str) -> Path:
    """The path of TVM's shared library ``name`` (``tvm_runtime``)."""
    for directory in library_directories():
        path = directory / f"lib{name}.so"
        if path.is_file():
            return path
    raise ImportError(f"TVM's lib{name}.so is not found (is apache-tvm installed?)")


@functools.cache
def _load(name: str, mode: int) -> ctypes.CDLL:
    """``name`` loaded once (a later ``import tvm`` loads the same file: one copy)."""
    return ctypes.CDLL(str(library(name)), mode)


_load("tvm_runtime", ctypes.RTLD_GLOBAL)  # as tvm/base.py loads it: its symbols for the kernels


@functools.cache
def _function(name: str) -> Any:
    return tvm_ffi.get_global_func(name)


@functools.cache
def host_cpu() -> str | None:
    """LLVM's name for this machine's CPU (what ``"llvm"`` compiles for:
    target.py), from TVM's compiler library (loaded as tvm/base.py does,
    its symbols kept local); None without one (a TVM of its runtime alone,
    which builds nothing either)."""
    try:
        _load("tvm_compiler", ctypes.RTLD_LOCAL)
        return str(_function("target.llvm_get_system_cpu")())
    except (ImportError, OSError, ValueError):  # absent, unloadable, without LLVM
        return None


@functools.cache
def identity() -> str:
    """Which TVM this is, for the build cache's keys: the package's version
    and the size and time of its runtime and compiler libraries (a rebuilt
    TVM of the same version is another)."""
    try:
        named = version("apache-tvm")
    except PackageNotFoundError:  # a TVM built from source has no distribution record
        named = "unknown"
    parts = [named]
    for name in ("tvm_runtime", "tvm_compiler"):
        try:
            stat = library(name).stat()
            parts.append(f"{name}:{stat.st_size}:{stat.st_mtime_ns}")
        except (ImportError, OSError):
            parts.append(f"{name}:absent")
    return " ".join(parts)


def num_threads() -> int:
    """The size of TVM's thread pool (``TVM_NUM_THREADS``, else the cores)."""
    return int(_function("runtime.NumThreads")())


# ------------------------------------------------------------ devices
CPU = tvm_ffi.device("cpu", 0)


def device(kind: str, index: int = 0) -> Any:
    """The device ``kind`` (``"cpu"``, ``"cuda"``) number ``index``."""
    return tvm_ffi.device(kind, index)


def exists(where: Any) -> bool:
    """Whether this machine has the device ``where`` (the CPU always)."""
    if where.dlpack_device_type() == DLPACK_CPU:
        return True
    return int(_function("runtime.GetDeviceAttr")(where.dlpack_device_type(), where.index, 0)) != 0


def synchroniser(where: Any) -> Callable[[], None]:
    """A function that waits for the work queued on ``where``'s default stream."""

    def sync() -> None:
        _function("runtime.Device_StreamSync")(where, 0)

    return sync


# ------------------------------------------------------------ tensors
def empty(shape: tuple[int, ...], dtype: str, where: Any = CPU) -> Any:
    """A tensor of the runtime's own memory on ``where`` (aligned as TVM aligns)."""
    alloc = _function("runtime.TVMTensorAllocWithScope")
    return alloc(
        tvm_ffi.Shape(tuple(int(d) for d in shape)), tvm_ffi.dtype(str(dtype)), where, None
    )


def tensor(array: np.ndarray, where: Any = CPU) -> Any:
    """A copy of ``array`` in the runtime's memory on ``where`` (a 0-d
    array stays 0-d: ``np.ascontiguousarray`` would make it 1-d)."""
    array = np.asarray(array, order="C")
    host = empty(array.shape, str(array.dtype), CPU)
    if array.size:
        np.from_dlpack(host)[...] = array
    return host if where.dlpack_device_type() == DLPACK_CPU else copy_to(host, where)


def copy_to(value: Any, where: Any) -> Any:
    """``value`` (a tensor) copied to ``where``."""
    made = empty(tuple(value.shape), str(value.dtype), where)
    _function("runtime.TVMTensorCopyFromTo")(value, made, None)
    return made


def to_numpy(value: Any) -> np.ndarray:
    """A tensor's values as a numpy array of their own (a device's copied)."""
    if value.device.dlpack_device_type() == DLPACK_CPU:
        return np.from_dlpack(value).copy()
    return np.from_dlpack(copy_to(value, CPU))


# ------------------------------------------------------------ programs
def load_module(path: str | Path) -> Any:
    """The shared library ``path`` (a VM executable with its kernels) loaded."""
    return tvm_ffi.load_module(str(path))


def virtual_machine(module: Any, where: Any) -> Any:
    """A Relax VM of the executable ``module`` on ``where`` (and the CPU,
    which runs the shape arithmetic), each with TVM's pooled allocator: what
    ``tvm.relax.VirtualMachine`` makes; ``vm[name]`` is a function."""
    vm = module["vm_load_executable"]()
    devices = [where] if where.dlpack_device_type() == DLPACK_CPU else [where, CPU]
    arguments: list[int] = []
    for each in devices:
        arguments += [each.dlpack_device_type(), each.index, POOLED_ALLOCATOR]
    vm["vm_initialization"](*arguments)
    return vm
