"""Whole loops built as the GPU's and run on the CPU (loop/cuda/: the GPU's
algorithm checked without a GPU): whether a build emulates them, and with
how many blocks.

Apart from loop/cuda/, which imports TVM: ``effir.compile`` asks before any
build (a program cached in another mode must not be loaded), and a warm
compile imports no TVM Python (runtime/tvm_runtime.py)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

_EMULATED: ContextVar[int | None] = ContextVar("effir_emulated_gpu_loops", default=None)


@contextmanager
def emulated(blocks: int = 8) -> Iterator[None]:
    """Programs compiled for the CPU inside build their whole loops as the
    GPU's (prologue and persistent kernel, of at most ``blocks`` blocks),
    run serially (loop/cuda/ [THREADS]): the GPU's algorithm checked on a CPU."""
    token = _EMULATED.set(blocks)
    try:
        yield
    finally:
        _EMULATED.reset(token)


def emulation() -> int | None:
    """The grid of emulated GPU loops, or None when they are not emulated;
    ``EFFIR_EMULATED_GPU_LOOPS=N`` emulates them, N blocks at most, in every
    CPU build of the process (the differential fuzzer's, a whole test
    suite's)."""
    blocks = _EMULATED.get()
    if blocks is None and os.environ.get("EFFIR_EMULATED_GPU_LOOPS"):
        return int(os.environ["EFFIR_EMULATED_GPU_LOOPS"])
    return blocks
