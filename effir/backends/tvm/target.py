"""TVM targets for this machine: TVM 0.27 rejects target strings with flags
(``"llvm -mcpu=..."``), and plain ``"llvm"`` compiles for generic x86-64,
3.5x slower than code for the host CPU (docs/backend.md)."""

from __future__ import annotations

import contextlib
import shutil
import threading
from collections.abc import Iterator
from functools import cache
from typing import Any

import tvm
import tvm_ffi
from tvm.support import nvcc

from .runtime.errors import BackendError, CompileError, register_check_function
from .schedule.cuda.tensor_core import LIBRARY

register_check_function()  # compiled code reports its checks through it


@cache
def host_cpu() -> str:
    return str(tvm.target.codegen.llvm_get_system_cpu())


def gpu_host() -> Any:
    """The host of a GPU target: the CPU of any x86-64 machine (LLVM's
    generic one). What a GPU program runs on the host is the VM's shape
    arithmetic, which no vector extension speeds up; code for this CPU
    (AVX-512 here) would make an exported CUDA artifact fail with an illegal
    instruction on a GPU machine whose CPU lacks them."""
    return tvm.target.Target({"kind": "llvm"})


# What a CUDA target says unless the user's says otherwise: sm_90 (an H100
# or H200), and the limits of every GPU from sm_70 on, which TVM's GPU
# rules otherwise assume with a warning per kernel.
CUDA_DEFAULTS = {
    "kind": "cuda",
    "arch": "sm_90",
    "max_shared_memory_per_block": 49152,
    "max_threads_per_block": 1024,
}


TARGET_KINDS = ("llvm", "cuda")


def make_target(name: str | dict[str, Any] | Any) -> Any:
    """A Target from what users write: ``"llvm"`` (the host CPU) or
    ``"cuda"`` (sm_90, with the host CPU as host), the strings TVM users
    write (``"llvm -mcpu=skylake-avx512 -mattr=+avx2,+fma"``,
    ``"cuda -arch=sm_80"``: TVM 0.27 itself refuses them), a TVM config
    dict (``{"kind": "llvm", "mcpu": ...}``) or a ``tvm.target.Target``.
    An unknown kind or option is a ``CompileError`` listing the known ones."""
    if isinstance(name, tvm.target.Target):
        return name
    config = dict(name) if isinstance(name, dict) else _target_config(name)
    kind = config.get("kind")
    if kind not in TARGET_KINDS:
        raise CompileError(f"unknown target {name!r}: its kind must be llvm or cuda")
    options = _options(kind)
    unknown = [k for k in config if k not in options]
    if unknown:
        known = ", ".join(sorted(k for k in options if k not in ("kind", "tag", "keys")))
        raise CompileError(
            f"target {name!r}: unknown option -{unknown[0]} (options of {kind}: {known})"
        )
    for key, value in list(config.items()):
        if isinstance(value, str) and key != "kind":
            config[key] = _option_value(name, key, value, str(options.get(key, "str")))
    if kind == "llvm":
        config.setdefault("mcpu", host_cpu())
        return _target(name, config)
    return _target(name, {**CUDA_DEFAULTS, **config}, host=gpu_host())


@cache
def _options(kind: str) -> dict[str, str]:
    """The options of a target kind and their TVM types ("int", "Array<str>"...)."""
    probe = {"kind": kind, "arch": "sm_90"} if kind == "cuda" else {"kind": kind}
    return {str(k): str(v) for k, v in tvm.target.Target(probe).kind.options.items()}


def _target_config(text: Any) -> dict[str, Any]:
    """``"kind -key=value -flag ..."`` as a config dict (values still text)."""
    if not isinstance(text, str) or not text.split():
        raise CompileError(
            f'unknown target {text!r}: use "llvm" or "cuda" (with -key=value options)'
        )
    kind, *flags = text.split()
    config: dict[str, Any] = {"kind": kind}
    for flag in flags:
        if not flag.startswith("-") or flag in ("-", "--"):
            raise CompileError(f"target {text!r}: expected -key=value, found {flag!r}")
        key, sep, value = flag.lstrip("-").partition("=")
        config[key] = value if sep else "true"
    return config


def _option_value(name: Any, key: str, value: str, kind: str) -> Any:
    """A target option's text as TVM's type for it."""
    try:
        if kind.startswith("Array"):
            return [v for v in value.split(",") if v]
        if kind == "int":
            return int(value)
        if kind == "bool":
            if value.lower() not in ("true", "false", "1", "0"):
                raise ValueError(value)
            return value.lower() in ("true", "1")
    except ValueError:
        raise CompileError(f"target {name!r}: -{key} takes {kind}, not {value!r}") from None
    return value


def _target(name: Any, config: dict[str, Any], host: Any = None) -> Any:
    try:
        return (
            tvm.target.Target(config, host=host) if host is not None else tvm.target.Target(config)
        )
    except Exception as err:  # TVM's own message, as an effir error
        raise CompileError(f"target {name!r}: {err}") from None


@contextlib.contextmanager
def building(target: Any) -> Iterator[None]:
    """Where effir builds code for ``target`` (``tvm.compile``,
    ``relax.build``): inside ``with target``, with TVM's TIR pipeline as
    the current PassContext configures it, less TIR's common-subexpression
    elimination. That pass skips the bodies of ``Let`` expressions when it
    counts and places an expression's binding, but then substitutes its
    variable inside them too: an index used inside a kernel's ``Let``
    expressions (the threefry rounds of ``random.dropout``, the [RULE TE-LET]
    bindings of te_ops) and computed twice by a later statement was
    replaced before its binding, and the build failed ("variable cse_v1 has been
    used before definition", any dropout of 32 elements or more). LLVM and
    NVCC eliminate common subexpressions themselves, so nothing is lost."""
    current = tvm.transform.PassContext.current()
    config = {**current.config, "tirx.disable_cse_tir": True}
    outer = getattr(_effir_build, "active", False)
    _effir_build.active = True
    try:
        with target, tvm.transform.PassContext(opt_level=current.opt_level, config=config):
            yield
    finally:
        _effir_build.active = outer


# ------------------------------------------------------------ CUDA compiler
# TVM compiles the CUDA code it generates with NVRTC by default. NVRTC
# rejects what TVM's GPU matmul rule generates for some shapes (the GRU's
# dense at batch 32: ``alignas(4) float2 dense_reindex_local_ptr[8]``,
# "alignment cannot be set to less than the default alignment"), which
# nvcc compiles: found on the first run on a real GPU, where the build
# failed at the first call. effir's own builds therefore use nvcc when the
# CUDA toolkit is installed (as ``Specialisation.ptx`` already did), and
# TVM's default otherwise; other TVM builds in the process keep TVM's
# choice (the flag is set only inside ``building``, per thread).
_effir_build = threading.local()
_tvm_cuda_compile = nvcc.tvm_callback_cuda_compile


def _cuda_compile(code: str) -> Any:
    code = with_cuda_library(code)
    if getattr(_effir_build, "active", False) and shutil.which("nvcc") is not None:
        return nvcc.compile_cuda(code, target_format="fatbin", compiler="nvcc")
    return _tvm_cuda_compile(code)


def with_cuda_library(code: str) -> str:
    """CUDA source TVM generated, with the device functions of effir's own
    that its kernels call (the tensor-core tiles,
    schedule/cuda/tensor_core.cuh [RULE SCHED-TENSORCORE]) defined before it."""
    if "effir_mma_" not in code:
        return code
    return LIBRARY + "\n" + code


def cuda_source_to_ptx(code: str, target: Any) -> str:
    """PTX of one CUDA source, compiled by nvcc for ``target``'s architecture
    (nvcc works without a GPU, NVRTC needs the cuda-bindings package); a
    source nvcc refuses is a BackendError with nvcc's first errors."""
    if shutil.which("nvcc") is None:
        raise BackendError("PTX is compiled by nvcc, which is not installed")
    try:
        with target:
            ptx = nvcc.compile_cuda(with_cuda_library(code), target_format="ptx", compiler="nvcc")
    except RuntimeError as err:  # TVM's nvcc wrapper: the compiler's output
        errors = [line for line in str(err).splitlines() if "error" in line][:5]
        raise BackendError(
            "nvcc could not compile the generated CUDA code:\n" + "\n".join(errors)
        ) from None
    return bytes(ptx).decode()


tvm_ffi.register_global_func("tvm_callback_cuda_compile", _cuda_compile, override=True)
