"""Where a compiled program's values live: the device it was built for, and
the moves between there and its caller.

[RULE RUNTIME-DEVICE] A Relax VM built for a GPU takes its arguments in the GPU's
memory and leaves its results there (handed host tensors, every CUDA
program failed with TVM's "expected cuda" before its first kernel: found
on the first run on a real GPU). ``Placement`` makes each move once, and
none it can avoid:

- an argument on the host (numpy, Python values, a PyTorch CPU tensor) is
  copied to the device, one copy; one already there (a ``DeviceArray`` an
  earlier call returned, or anything exporting DLPack on that device:
  PyTorch, JAX, CuPy) is used where it is (``take``); one on another
  device is an ``ArgumentError`` naming both;
- a result is copied to the host as numpy (``compiled(...)``), or left
  where it is as a ``DeviceArray`` (``compiled.on_device(...)``), which
  those libraries take back through DLPack;
- the cells a call passes (keys, batch-norm statistics) stay on the device
  between calls (``State.keep_on_device``): the host copies them back only
  when it reads the State;
- the world token, which orders output and is never read, is one tensor
  made on the device once.

On the CPU (llvm) the device is the host: numpy arrays, PyTorch CPU tensors
and the VM's tensors share memory through DLPack (``to_tvm``, ``from_tvm``),
so nothing is copied there, as before.

Streams: TVM launches effir's kernels on the device's default stream;
DLPack exchanges with libraries on that stream (PyTorch's default) need no
wait, and a ``DeviceArray`` handed to a consumer naming another stream
waits for the device first (runtime/device_array.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import tvm_ffi

from ....ir.diagnostics import ArgumentError
from ....ir.expr import TypeData
from ....runtime.device_array import DLPACK_CPU, HOST_READABLE, DeviceArray, device_name
from ....runtime.values import PRNGKey
from .errors import BackendError
from .signature import AdtSpec, KeySpec, Spec, TupleSpec, from_tvm, to_tvm
from .tvm_runtime import copy_to, synchroniser, tensor


class Placement:
    """The device of one compiled program (the CPU, the first GPU: runtime/tvm_runtime.py)
    and the moves of values to and from it."""

    def __init__(self, device: Any) -> None:
        self.device = device
        self.dlpack = (int(device.dlpack_device_type()), int(device.index))
        self.on_host = self.dlpack[0] == DLPACK_CPU
        self.name = device_name(self.dlpack)
        self._world: Any = None
        self._sync = synchroniser(device)

    # ------------------------------------------------------------ in
    def take(self, value: Any, where: str) -> DeviceArray | None:
        """A tensor argument in this device's memory, as it is (the input
        contract's ``on_device``, effir/runtime/arguments.py); None for a
        value on the host, which the numpy route converts. On the CPU every
        value takes that route (zero-copy for DLPack arrays)."""
        if self.on_host:
            return None
        try:
            exported = isinstance(value, DeviceArray) or hasattr(value, "__dlpack__")
            device = tuple(value.__dlpack_device__()) if exported else None
        except Exception:  # a foreign object whose protocol fails: the host route says why
            return None
        if device is None or device[0] in HOST_READABLE:
            return None  # pinned or managed memory too: the numpy route copies it
        if device != self.dlpack:
            raise ArgumentError(
                f"{where} is in the memory of {device_name(device)}, and the program runs "
                f"on {self.name}: move it there first"
            )
        if isinstance(value, DeviceArray):
            return value
        try:
            tensor = tvm_ffi.from_dlpack(value, require_contiguous=True)
        except Exception as err:  # a strided view, an unsupported dtype...
            raise ArgumentError(
                f"{where}: a {type(value).__name__} on {self.name} that cannot be used in place "
                f"({type(err).__name__}: {str(err).strip()}); pass a contiguous array"
            ) from None
        return self.device_array(tensor)

    def argument(
        self,
        value: Any,
        spec: Spec,
        any_alignment: bool = True,
        adts: Mapping[str, TypeData] | None = None,
    ) -> Any:
        """A checked argument (or a cell's value) as the VM takes it, on
        this device: copied there from the host once, or as it is. ADT
        values (``adts``: their types' definitions) are built on the host."""
        if isinstance(spec, AdtSpec):
            if not self.on_host:
                raise BackendError(
                    "an ADT value as an argument of a program compiled for a GPU is not "
                    "supported; pass its fields as tensors, or compile for the CPU"
                )
            return to_tvm(value, spec, any_alignment, adts)
        if isinstance(spec, TupleSpec):
            fields = zip(value, spec.fields, strict=True)
            return tvm_ffi.convert([self.argument(v, f, any_alignment, adts) for v, f in fields])
        if isinstance(value, DeviceArray):
            value = value.data
        if isinstance(value, tvm_ffi.Tensor):  # a DeviceArray's, or a cell left on a device
            there = (int(value.device.dlpack_device_type()), int(value.device.index))
            return value if there == self.dlpack else copy_to(value, self.device)
        if self.on_host:
            return to_tvm(value, spec, any_alignment)
        array = value.data if isinstance(value, PRNGKey) else np.asarray(value)
        return tensor(array, self.device)

    def world(self) -> Any:
        """The world token's value (``int64`` 0), made on this device once."""
        if self.on_host:
            return np.int64(0)
        if self._world is None:
            self._world = tensor(np.zeros((), np.int64), self.device)
        return self._world

    # ----------------------------------------------------------- out
    def result(
        self,
        value: Any,
        spec: Spec,
        keep: bool = False,
        adts: Mapping[str, TypeData] | None = None,
    ) -> Any:
        """A VM result as the caller gets it: numpy arrays, keys as
        ``PRNGKey`` and tuples as tuples, as the interpreter gives them;
        with ``keep``, tensors left on this device as ``DeviceArray``\\ s
        (keys still come back as ``PRNGKey``: two words)."""
        if isinstance(spec, AdtSpec):
            if not self.on_host:
                raise BackendError(
                    "an ADT value as a result of a program compiled for a GPU is not "
                    "supported; return its fields as tensors, or compile for the CPU"
                )
            return from_tvm(value, spec, adts)
        if isinstance(spec, TupleSpec):
            fields = zip(value, spec.fields, strict=True)
            return tuple(self.result(v, f, keep, adts) for v, f in fields)
        if keep and not isinstance(spec, KeySpec):
            return self.device_array(value)
        if self.on_host:
            return from_tvm(value, spec, adts)
        array = value.numpy()  # a GPU's tensor (TVM's: a GPU program was built here)
        return PRNGKey(array) if isinstance(spec, KeySpec) else array

    def store(self, cells: Any, name: str, value: Any, spec: Spec) -> None:
        """A cell's new value, from the VM: left on this device (copied back
        only when the host reads the State), or on the host for the CPU."""
        if self.on_host:
            cells.set_value(name, from_tvm(value, spec))
        else:
            cells.keep_on_device(name, value, lambda v: self.result(v, spec))

    def device_array(self, value: Any) -> DeviceArray:
        return DeviceArray(value, tuple(value.shape), str(value.dtype), self._sync)
