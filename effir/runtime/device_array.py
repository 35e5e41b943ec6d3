"""A tensor in a device's memory, as compiled code holds it.

A program built for a GPU computes in the GPU's memory. Copying every
argument there and every result back at each call costs more than a small
program runs (docs/backend.md, "CUDA"), so a compiled module also takes
arrays already on its device and can leave its results there:

- an argument that exports DLPack (``__dlpack__``/``__dlpack_device__``)
  on the module's device, a PyTorch, JAX or CuPy array, is used where it is,
  without a copy: the backend wraps the memory as a ``DeviceArray``, whose
  shape and dtype the input contract checks (effir/runtime/arguments.py)
  and whose data no host code reads;
- ``compiled.on_device(...)`` returns ``DeviceArray``\\ s, which those
  libraries take back through DLPack without a copy, and which the next call
  takes as arguments as they are.

This module holds no device code: ``data`` is the runtime's own tensor
(TVM's), used only through DLPack and ``numpy()``, so the layers below the
backend need no TVM.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

DLPACK_CPU = 1
"""DLPack's device type of host memory (``kDLCPU``)."""

DEVICE_NAMES = {
    1: "cpu",
    2: "cuda",
    3: "cuda_host",
    4: "opencl",
    7: "vulkan",
    8: "metal",
    11: "rocm_host",
    13: "cuda_managed",
}
"""DLPack's device types by name, for messages."""

HOST_READABLE = (1, 3, 11, 13)
"""DLPack's device types whose memory the host reads: the CPU's, pinned
host memory (CUDA's and ROCm's) and CUDA's managed memory."""

_LEGACY_STREAMS = (None, 1, 2, -1)
"""DLPack ``stream`` values that need no wait: none named (the legacy
default stream), the legacy and per-thread default streams (both ordered
after the legacy default stream's work), and -1 (the consumer asks for
none)."""


def device_name(device: tuple[int, int]) -> str:
    """``(2, 0)`` as ``cuda:0``."""
    kind, index = device
    return f"{DEVICE_NAMES.get(kind, f'device type {kind}')}:{index}"


class DeviceArray:
    """A tensor in a device's memory (a GPU's), as compiled code holds it.

    A DLPack producer: ``torch.from_dlpack(a)``, ``jax.numpy.from_dlpack(a)``
    and ``cupy.from_dlpack(a)`` share its memory; ``numpy.asarray(a)`` and
    ``a.numpy()`` copy it to the host. A program built for its device takes
    it as an argument as it is.

    Streams: compiled code runs on the device's default stream. A consumer
    that names another stream in ``__dlpack__`` (DLPack's protocol) gets the
    array once the work that computed it is done (``ready``); one on the
    default stream is ordered after that work already."""

    __slots__ = ("data", "shape", "dtype", "_ready")

    def __init__(
        self,
        data: Any,
        shape: tuple[int, ...],
        dtype: str,
        ready: Callable[[], None] | None = None,
    ) -> None:
        self.data = data  # the runtime's tensor (TVM's), sharing this memory
        self.shape = tuple(int(d) for d in shape)
        self.dtype = str(dtype)
        self._ready = ready  # waits for the device's default stream

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def device(self) -> str:
        """Where the data is: ``cuda:0``, ``cpu:0``."""
        return device_name(self.__dlpack_device__())

    def __dlpack_device__(self) -> tuple[int, int]:
        kind, index = self.data.__dlpack_device__()
        return int(kind), int(index)

    def __dlpack__(
        self,
        *,
        stream: Any = None,
        max_version: tuple[int, int] | None = None,
        dl_device: tuple[int, int] | None = None,
        copy: bool | None = None,
    ) -> Any:
        if stream not in _LEGACY_STREAMS and self._ready is not None:
            self._ready()  # the consumer's stream is not ordered after ours
        if max_version is None:  # a consumer of DLPack before 1.0
            return self.data.__dlpack__()
        return self.data.__dlpack__(max_version=max_version, dl_device=dl_device, copy=copy)

    def numpy(self) -> np.ndarray:
        """A copy in host memory (waits for the device)."""
        if self.__dlpack_device__()[0] == DLPACK_CPU:
            return np.from_dlpack(self.data).copy()
        return np.asarray(self.data.numpy())

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        if self.__dlpack_device__()[0] == DLPACK_CPU and not copy:
            array = np.from_dlpack(self.data)  # host memory: shared, as numpy's own views
        elif copy is False:
            raise ValueError(f"{self!r} cannot be read on the host without a copy")
        else:
            array = self.numpy()
        return array if dtype is None else array.astype(dtype, copy=False)

    def __repr__(self) -> str:
        dims = ", ".join(str(d) for d in self.shape)
        return f"DeviceArray(Tensor[({dims}), {self.dtype}] on {self.device})"
