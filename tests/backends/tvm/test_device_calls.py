"""Calls of code built for a GPU, and failures inside compiled code.

The first run of effir's CUDA builds on a real GPU (an H200, lent for
benchmarks/cuda_device.py) found two defects that no CPU machine shows:
every CUDA program failed before its first kernel with TVM's "expected
cuda" (the VM was handed host tensors: runtime/thread_vms.py now copies the
arguments to the device and the results back), and a CUDA failure whose
text ended in a stray NUL byte was reported as an empty message. The
device half runs only where a GPU is; the rest runs everywhere.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tvm
import tvm_ffi

from effir.backends.tvm.runtime.errors import run_time_error
from effir.backends.tvm.runtime.thread_vms import HOST, _moved

ROOT = Path(__file__).resolve().parents[3]


def test_a_failure_ending_in_stray_bytes_keeps_its_message() -> None:
    err = RuntimeError("CUDAError: cuLaunchKernel failed: too many resources requested\n\x00\n")
    message = str(run_time_error(err, "main"))
    assert message.endswith("@main: compiled code failed: CUDAError: cuLaunchKernel failed: "
                            "too many resources requested"), message  # fmt: skip


def test_a_failure_with_no_text_names_its_type() -> None:
    assert str(run_time_error(RuntimeError("\x00"), "f")).endswith(
        "compiled code failed: RuntimeError"
    )


def test_values_already_on_the_device_are_not_copied() -> None:
    a = tvm.runtime.tensor(np.arange(3, dtype="float32"))
    b = tvm.runtime.tensor(np.ones((2, 2), dtype="int32"))
    assert _moved(a, HOST) is a
    nested = _moved(tvm_ffi.convert([a, tvm_ffi.convert([b])]), HOST)
    assert np.array_equal(nested[0].numpy(), a.numpy())
    assert np.array_equal(nested[1][0].numpy(), b.numpy())
    assert _moved(7, HOST) == 7  # not a tensor: as it is


@pytest.mark.skipif(not tvm.cuda(0).exist, reason="needs a GPU (a lent GPU machine runs it)")
def test_cuda_builds_run_on_the_gpu_and_equal_the_interpreter() -> None:
    """Every run-time check, the GRU (exported and loaded too) and the
    effectful GRU language model, built for CUDA and run on the GPU."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "cuda_device.py"), "--part", "checks"],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
    )
    assert done.returncode == 0 and "all ok" in done.stdout, done.stdout + done.stderr
