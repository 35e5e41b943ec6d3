"""Calls of compiled code with arrays where the program runs, and failures
inside compiled code.

The first run of effir's CUDA builds on a real GPU found that every CUDA
program failed before its first kernel with TVM's "expected cuda" (the VM
was handed host tensors) and that a CUDA failure whose text ended in a
stray NUL byte was reported as an empty message. Calls now move values
through runtime/placement.py [RULE RUNTIME-DEVICE]: arrays already on the program's
device are used in place (DLPack), results can stay there
(``on_device``), and the State's cells stay on a GPU between calls.

On the CPU (llvm) everything here runs: PyTorch's CPU tensors reach the
compiled code and come back without a copy. The GPU half (PyTorch, JAX and
CuPy arrays on the GPU, the State left there) runs where a GPU is, through
benchmarks/cuda_device.py; without one, what can be checked without
running it is (refusals, the State's bookkeeping, the stream rule).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tvm

import effir
from effir.backends.state import State
from effir.backends.tvm.runtime.errors import run_time_error
from effir.backends.tvm.runtime.placement import Placement
from effir.backends.tvm.runtime.signature import KeySpec, TensorSpec
from effir.runtime.device_array import DeviceArray
from effir.runtime.values import PRNGKey

try:
    import torch
except ImportError:  # the project's test dependencies leave PyTorch out
    torch = None
needs_torch = pytest.mark.skipif(torch is None, reason="needs PyTorch")

ROOT = Path(__file__).resolve().parents[3]
GPU = bool(tvm.cuda(0).exist)

PASS_THROUGH = """#[version = "0.0.5"]
def @main(%x: Tensor[(3, 4), float32], %w: Tensor[(4, 2), float32])
    -> (Tensor[(3, 4), float32], Tensor[(3, 2), float32]) {
  (%x, tanh(nn.matmul(%x, %w)))
}
"""

KEYED = """#[version = "0.0.5"]
global @rng: Ref[Key] = ref(random.key(3));
def @main(%x: Tensor[(8), float32]) -> Tensor[(8), float32] {
  nn.dropout(%x, @rng, rate=0.5)
}
"""


@pytest.fixture(scope="module")
def pass_through() -> Any:
    return effir.compile(effir.check(effir.parse(PASS_THROUGH)))


@needs_torch
def test_torch_cpu_tensors_reach_compiled_code_and_come_back_without_a_copy(pass_through) -> None:
    x, w = torch.randn(3, 4), torch.randn(4, 2)
    same, product = pass_through(x, w)
    assert np.shares_memory(same, x.numpy())  # in and out: the tensor's own memory
    np.testing.assert_allclose(product, np.tanh(x.numpy() @ w.numpy()), rtol=1e-5)


class _Foreign:
    """A CPU array of another library, seen only through DLPack (as a
    PyTorch or JAX CPU array is: no ``__array__``)."""

    def __init__(self, array: np.ndarray) -> None:
        self.array = array

    def __dlpack__(self, **kwargs: Any) -> Any:
        return self.array.__dlpack__(**kwargs)

    def __dlpack_device__(self) -> tuple[int, int]:
        return self.array.__dlpack_device__()


def test_any_dlpack_cpu_array_reaches_compiled_code_without_a_copy(pass_through) -> None:
    x = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    same, _ = pass_through.on_device(_Foreign(x), np.ones((4, 2), np.float32))
    assert np.shares_memory(np.from_dlpack(same), x)


@needs_torch
def test_on_device_results_are_dlpack_arrays_that_torch_shares(pass_through) -> None:
    x, w = torch.randn(3, 4), torch.randn(4, 2)
    same, product = pass_through.on_device(x, w)
    assert isinstance(same, DeviceArray) and isinstance(product, DeviceArray)
    assert (same.shape, same.dtype, same.device) == ((3, 4), "float32", "cpu:0")
    assert repr(product) == "DeviceArray(Tensor[(3, 2), float32] on cpu:0)"
    assert torch.from_dlpack(same).data_ptr() == x.data_ptr()
    np.testing.assert_array_equal(np.asarray(product), pass_through(x, w)[1])
    # A DeviceArray is an argument as it is: the next call takes it.
    again, _ = pass_through.on_device(same, w)
    assert torch.from_dlpack(again).data_ptr() == x.data_ptr()


@needs_torch
def test_a_loaded_artifact_leaves_its_results_on_the_device_too(pass_through, tmp_path) -> None:
    pass_through.export(tmp_path / "a")
    loaded = effir.load(tmp_path / "a")
    x, w = torch.randn(3, 4), torch.randn(4, 2)
    same, product = loaded.on_device(x, w)
    assert torch.from_dlpack(same).data_ptr() == x.data_ptr()
    np.testing.assert_array_equal(product.numpy(), pass_through(x, w)[1])


def test_a_cpu_program_keeps_its_state_on_the_host() -> None:
    module = effir.check(effir.parse(KEYED))
    compiled, state, reference = effir.compile(module), effir.State(module), effir.State(module)
    x = np.arange(8, dtype=np.float32)
    got = compiled.on_device(x, state=state)
    np.testing.assert_array_equal(got.numpy(), effir.interpret(module, x, state=reference))
    assert state._on_device == {} and state["rng"] == reference["rng"]


# -------------------------------------------------- a GPU program, without a GPU
class _FakeGPUArray:
    """What PyTorch, JAX and CuPy arrays show of themselves on a GPU:
    DLPack's device, and an export that fails here (no GPU to share)."""

    shape, dtype = (3, 4), "float32"

    def __init__(self, device: tuple[int, int]) -> None:
        self.device = device

    def __dlpack_device__(self) -> tuple[int, int]:
        return self.device

    def __dlpack__(self, **_: Any) -> Any:
        raise BufferError("a strided view cannot be exported")

    def __array__(self, *_: Any, **__: Any) -> Any:
        raise TypeError("can't convert cuda:0 device type tensor to numpy")


@pytest.fixture(scope="module")
def on_cuda() -> Any:
    return effir.compile(effir.check(effir.parse(PASS_THROUGH)), target="cuda")


def test_an_array_on_another_gpu_is_refused_naming_both_devices(on_cuda) -> None:
    with pytest.raises(effir.ArgumentError) as err:
        on_cuda(_FakeGPUArray((2, 1)), np.zeros((4, 2), np.float32))
    assert str(err.value) == (
        "runtime error: argument %x of @main is in the memory of cuda:1, and the program "
        "runs on cuda:0: move it there first"
    )


def test_a_gpu_array_that_cannot_be_shared_is_an_argument_error(on_cuda) -> None:
    with pytest.raises(effir.ArgumentError) as err:
        on_cuda(np.zeros((3, 4), np.float32), _FakeGPUArray((2, 0)))
    assert str(err.value) == (
        "runtime error: argument %w of @main: a _FakeGPUArray on cuda:0 that cannot be used "
        "in place (BufferError: a strided view cannot be exported); pass a contiguous array"
    )


def test_a_cpu_program_refuses_a_gpu_array_it_cannot_read(pass_through) -> None:
    with pytest.raises(effir.ArgumentError, match="cannot be read as an array on the CPU"):
        pass_through(_FakeGPUArray((2, 0)), np.zeros((4, 2), np.float32))


@needs_torch
def test_host_arrays_take_the_copying_route_to_a_gpu() -> None:
    placement = Placement(tvm.cuda(0))
    assert placement.take(np.zeros(3), "x") is None
    assert placement.take(torch.zeros(3), "x") is None
    host = DeviceArray(tvm.runtime.tensor(np.zeros(3, np.float32)), (3,), "float32")
    assert placement.take(host, "x") is None  # a CPU program's result: copied over
    for readable in ((3, 0), (13, 0)):  # pinned and managed memory: the host reads them
        assert placement.take(_FakeGPUArray(readable), "x") is None


class _GPUTensor:
    """A VM's tensor as the host sees one on a GPU: only ``numpy()`` reads it."""

    def __init__(self, host: np.ndarray) -> None:
        self.host = host
        self.reads = 0

    def numpy(self) -> np.ndarray:
        self.reads += 1
        return self.host


def test_a_gpu_program_leaves_the_cells_on_the_device_until_the_host_reads_them() -> None:
    module = effir.check(effir.parse(KEYED))
    state = State(module)
    placement = Placement(tvm.cuda(0))
    key = _GPUTensor(np.array([7, 9], np.uint32))
    with state.transaction(on_device=True):
        placement.store(state, "rng", key, KeySpec())
        assert state.device_value("rng") is key
    assert key.reads == 0
    assert state["rng"] == PRNGKey([7, 9]) and key.reads == 1


def test_a_gpu_program_gives_numpy_results_unless_they_stay_on_the_device() -> None:
    placement = Placement(tvm.cuda(0))
    value = _GPUTensor(np.ones(2, np.float32))
    assert isinstance(placement.result(value, TensorSpec((2,), "float32")), np.ndarray)
    key = placement.result(_GPUTensor(np.array([1, 2], np.uint32)), KeySpec(), keep=True)
    assert key == PRNGKey([1, 2])  # a key comes back to the host: two words


class _Data:
    def __init__(self) -> None:
        self.exports: list[dict[str, Any]] = []

    def __dlpack_device__(self) -> tuple[int, int]:
        return (2, 0)

    def __dlpack__(self, **kwargs: Any) -> str:
        self.exports.append(kwargs)
        return "capsule"


@pytest.mark.parametrize(
    ("stream", "waits"), [(None, False), (1, False), (2, False), (-1, False), (0x7F00, True)]
)
def test_a_consumer_on_another_stream_waits_for_the_device(stream: Any, waits: bool) -> None:
    waited: list[bool] = []
    array = DeviceArray(_Data(), (2,), "float32", ready=lambda: waited.append(True))
    assert array.__dlpack__(stream=stream, max_version=(1, 0)) == "capsule"
    assert waited == ([True] if waits else [])
    assert array.data.exports == [{"max_version": (1, 0), "dl_device": None, "copy": None}]


# ------------------------------------------------------ failures, any device
def test_a_failure_ending_in_stray_bytes_keeps_its_message() -> None:
    err = RuntimeError("CUDAError: cuLaunchKernel failed: too many resources requested\n\x00\n")
    message = str(run_time_error(err, "main"))
    assert message.endswith("@main: compiled code failed: CUDAError: cuLaunchKernel failed: "
                            "too many resources requested"), message  # fmt: skip


def test_a_failure_with_no_text_names_its_type() -> None:
    assert str(run_time_error(RuntimeError("\x00"), "f")).endswith(
        "compiled code failed: RuntimeError"
    )


# ------------------------------------------------------------------ on a GPU
def _cuda_device(part: str, *options: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "cuda_device.py"), "--part", part, *options],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
    )


@pytest.mark.skipif(GPU or shutil.which("nvcc") is None, reason="needs nvcc, and no GPU")
def test_the_gpu_script_builds_its_device_checks_here() -> None:
    """benchmarks/cuda_device.py --dry builds what a GPU run would run (so
    a lent machine's minutes are not lost to a silly error)."""
    done = _cuda_device("device", "--dry")
    assert done.returncode == 0 and "all ok" in done.stdout, done.stdout + done.stderr
    built = re.findall(r"^\| device +\| [^|]+\| built +\|", done.stdout, re.M)
    assert len(built) == 4, done.stdout


@pytest.mark.skipif(not GPU, reason="needs a GPU (a lent GPU machine runs it)")
def test_cuda_builds_run_on_the_gpu_and_equal_the_interpreter() -> None:
    """Every run-time check, the GRU (exported and loaded too) and the
    effectful GRU language model, built for CUDA and run on the GPU."""
    done = _cuda_device("checks")
    assert done.returncode == 0 and "all ok" in done.stdout, done.stdout + done.stderr


@pytest.mark.skipif(not GPU, reason="needs a GPU (a lent GPU machine runs it)")
def test_gpu_arrays_are_used_in_place_and_results_stay_on_the_gpu() -> None:
    """PyTorch (and JAX, CuPy where installed) arrays on the GPU in,
    DeviceArrays out, shared without a copy; the State stays on the GPU."""
    done = _cuda_device("device")
    assert done.returncode == 0 and "all ok" in done.stdout, done.stdout + done.stderr


@pytest.mark.skipif(GPU, reason="a machine without a GPU")
def test_a_gpu_program_without_a_gpu_says_so_before_it_moves_anything() -> None:
    # The world token (a print orders it) was made on the device before the
    # device was looked for: TVM's "Device API cuda is not enabled" came out.
    printing = effir.check(
        effir.parse('#[version = "0.0.5"]\ndef @main(%x: float32) { debug.print(%x) }')
    )
    compiled = effir.compile(printing, target="cuda")
    with pytest.raises(effir.BackendError, match="this machine has no such device"):
        compiled(np.float32(1))
