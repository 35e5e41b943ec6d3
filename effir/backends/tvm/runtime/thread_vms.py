"""The Relax virtual machines that run one executable: one per calling thread.

A Relax VM is not reentrant: a call keeps its frames and registers in the
VM object, so two threads calling one VM at once overwrite each other's
registers (TVM's ``Check failed: reg < frame->register_file.size()``, or a
segfault). What a VM shares with another VM made from the same
executable is read-only (the bytecode, the constants, the kernels) or
locked (the pooled allocator of each device), so each thread gets a VM of
its own, made from the shared executable the first time that thread calls
it (about a millisecond), and keeps it for the thread's life; the entry's
function object is cached with it, so a call costs one thread-local
lookup more than a shared VM did (docs/backend.md, "Threads").

A VM built for a GPU takes its arguments in the GPU's memory and returns
its results there: runtime/placement.py moves them [RULE RUNTIME-DEVICE].
"""

from __future__ import annotations

import threading
from typing import Any

from .errors import register_check_function
from .tvm_runtime import virtual_machine

register_check_function()  # the checks of the code these VMs run report through it


MODULES = threading.Lock()
"""Held while TVM looks into or writes out compiled modules outside a
call: a VM's creation (it looks up every function it calls) and an export
(LLVM's code generation for a file changes the module it reads). A kernel
module is shared by every build of the process that calls it
(relax/apart.py), so an export on one thread (the build cache's writer)
must not run while a VM of another build is made on another."""


class ThreadVMs:
    """The VMs of one executable (a ``relax.build`` result or a loaded
    library), one per thread, made lazily."""

    def __init__(self, executable: Any, device: Any) -> None:
        self._executable = executable
        self._device = device
        self._runnable: Any = None  # the executable as a runtime module, made once
        self._lock = threading.Lock()
        self._local = threading.local()

    def function(self, entry: str) -> Any:
        """``entry`` of the calling thread's VM."""
        functions: dict[str, Any] | None = getattr(self._local, "functions", None)
        if functions is None:
            with MODULES:
                vm = virtual_machine(self._module(), self._device)
            self._local.vm = vm
            functions = self._local.functions = {}
        function = functions.get(entry)
        if function is None:
            function = functions[entry] = self._local.vm[entry]
        return function

    def _module(self) -> Any:
        """The runnable module, once: ``Executable.jit`` exports and loads
        one when the executable holds code that must be linked first, and
        two threads must not both do that."""
        if self._runnable is None:
            with self._lock:
                if self._runnable is None:
                    executable = self._executable
                    self._runnable = executable.jit() if hasattr(executable, "jit") else executable
        return self._runnable
