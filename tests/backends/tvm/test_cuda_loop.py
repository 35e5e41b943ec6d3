"""Static loops as whole GPU kernels (effir/backends/tvm/loop/cuda/): what
the CUDA build of a loop is, checked on its code (no GPU here: the CUDA
source TVM generates and the PTX nvcc compiles it to), and run where a GPU
is (benchmarks/cuda_loop_checks.py). The algorithm itself, run serially
on the CPU against the interpreter: test_cuda_loop_emulated.py."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import tvm
from tvm import tirx

import effir
from effir.backends.tvm.kernel import rounding
from effir.backends.tvm.target import building, make_target

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "examples"))

from gru_loop import gru_text  # noqa: E402

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")


def cuda_gru(inputs: int, hidden: int, batch: int) -> Any:
    """The GRU built for CUDA at ``batch`` (its length symbolic)."""
    module = effir.check(effir.parse(gru_text(inputs, hidden)))
    compiled = effir.compile(module, target="cuda", dims={"b": batch, "t": 100})
    (spec,) = compiled.specialisations.values()
    return spec


def loop_symbols(spec: Any) -> tuple[set[str], set[str], int]:
    """The persistent kernels and prologues the Relax program calls, and its
    VM loops (functions of a loop's levels)."""
    text = spec.program.module.script()
    kernels = set(re.findall(r"effir_[0-9a-f]{16}_loop_\d+(?![_\d])", text))
    prologues = set(re.findall(r"effir_[0-9a-f]{16}_loop_\d+_prologue", text))
    return kernels, prologues, len(re.findall(r"def (?:foreach|while)_\d+_level0", text))


def kernel_source(source: str, name: str) -> str:
    """The CUDA source of the ``__global__`` function named ``name``."""
    start = source.rindex(f" {name}(")
    return source[start : source.index("\n}\n", start)]


def device_launch_params(func: Any, target: Any) -> dict[str, list[str]]:
    """Each device kernel's launch parameters after TVM's host/device split
    (what the CUDA runtime reads to launch it, cooperatively or not)."""
    with building(target):
        mod = tvm.tirx.transform.BindTarget(target)(tvm.IRModule({"main": func}))
        pipeline, _, _ = tvm.tirx.get_default_tir_pipeline(target)
        mod = pipeline(mod)
    return {
        str(gv.name_hint): [str(p) for p in f.attrs.get("tirx.kernel_launch_params", [])]
        for gv, f in mod.functions.items()
        if f.attrs.get("tirx.is_global_func")
    }


@needs_nvcc
def test_the_gru_at_hidden_256_is_one_persistent_kernel_with_a_grid_barrier() -> None:
    """Hidden 256, batch 32: no VM loop; the prologue (the input
    projections of every step, one product) then one kernel of many blocks
    for every step, a grid barrier per step, launched cooperatively, each
    block's rows of U staged in shared memory and read there by the
    product; nvcc compiles both to PTX."""
    spec = cuda_gru(256, 256, 32)
    kernels, prologues, vm_loops = loop_symbols(spec)
    assert vm_loops == 0 and len(kernels) == 1 and len(prologues) == 1
    source = spec.source("cuda")
    (kernel,) = kernels
    loop = kernel_source(source, f"{kernel}_kernel")
    # two steps per iteration and an odd last one, and the barrier after S[0] = init
    assert loop.count("tvm_builtin_cuda_grid_sync();") == 4
    staged = re.search(r"__shared__ alignas\(\d+\) float (dense_u_staged_ptr)\[", loop)
    assert staged is not None
    product = re.search(r"dense_acc0_ptr\[0\] = fmaf\((.*)\);", loop)
    assert product is not None and "dense_u_staged_ptr" in product.group(1)
    assert "captured2_ptr" not in product.group(1)  # U never read from global memory there
    assert "hoisted0_ptr" in loop  # the prologue's input projections
    prologue = kernel_source(source, f"{next(iter(prologues))}_kernel")
    assert "x_seq" in prologue and "dense_ptr" in prologue
    ptx = spec.ptx()
    assert f".entry {kernel}_kernel" in ptx and f".entry {next(iter(prologues))}_kernel" in ptx


@needs_nvcc
def test_the_persistent_kernel_is_launched_cooperatively() -> None:
    """Every block of a grid that waits at a grid barrier must be resident:
    the kernel is launched cooperatively (CUDA refuses a grid too large
    rather than hang), its grid no larger than the GPU's multiprocessors;
    the prologue, an ordinary kernel, is not."""
    from gru_loop import loop_body

    from effir.backends.tvm.loop.cuda import function as cuda_function
    from effir.backends.tvm.loop.cuda import lower_cuda_loop
    from effir.ir.visitor import free_vars

    target = make_target("cuda")
    body = loop_body(256, 256)
    loop = lower_cuda_loop(body, {"b": 1}, list(free_vars(body)), {}, None, target)
    assert 1 < loop.blocks <= cuda_function.multiprocessors(target)
    kernel = device_launch_params(loop.func, target)
    assert list(kernel.values()) == [["blockIdx.x", "threadIdx.x", "tirx.use_cooperative_launch"]]
    prologue = device_launch_params(loop.prologue, target)
    assert all("tirx.use_cooperative_launch" not in p for p in prologue.values())


@needs_nvcc
def test_one_block_runs_the_hidden_32_gru_with_syncthreads_alone() -> None:
    """Hidden 32: the step is one block's (SINGLE_BLOCK_WORK), so no grid
    barrier and no cooperative launch; the state's two buffers, U and the
    sequence's rows (32 steps at a time) are in shared memory."""
    spec = cuda_gru(32, 32, 1)
    kernels, _, vm_loops = loop_symbols(spec)
    assert vm_loops == 0 and len(kernels) == 1
    loop = kernel_source(spec.source("cuda"), f"{next(iter(kernels))}_kernel")
    assert "grid_sync" not in loop and "__syncthreads();" in loop
    for shared in ("state0_even_ptr", "state0_odd_ptr", "dense_u_staged_ptr", "hoisted0_rows_ptr"):
        assert re.search(rf"__shared__ alignas\(\d+\) float {shared}\[", loop), shared
    assert ".entry" in spec.ptx()


@needs_nvcc
def test_the_gradients_loops_are_persistent_kernels_rounding_per_operator() -> None:
    """value_and_grad of a GRU: the forward and the reverse loop are both
    persistent kernels, and a gradient program's fenced products are CUDA's
    unfused ``__fmul_rn`` (kernel/rounding.py [RULE KERNEL-ROUND]), so that the
    checkpoint modes can agree bit for bit."""
    from tests.support.hoist_grad_programs import _gru_text

    g = effir.value_and_grad(effir.parse(_gru_text(12, 4, 3, 8)), wrt=["h0", "w", "u"])
    compiled = effir.compile(g, target="cuda", entry="main_grad")
    (spec,) = compiled.specialisations.values()
    kernels, _, vm_loops = loop_symbols(spec)
    assert vm_loops == 0 and len(kernels) == 2
    source = spec.source("cuda")
    assert "__fmul_rn(" in source and "llvm" not in source
    assert ".entry" in spec.ptx()


@needs_nvcc
@pytest.mark.parametrize("checkpoint", ["loop", "sqrt"])
def test_a_checkpointed_gradients_inner_loops_build_for_cuda(checkpoint: str) -> None:
    """Checkpointing splits the loop into segments: the inner loops' step
    counts are products of symbols, which the prologue's thread binding
    must take as they are (it once asked for their integer value). The
    segments (3 of 4 steps) are short, the nest is not: partial
    evaluation keeps the forward's loop over the segments (it once
    unrolled the whole nest into straight-line code), which is a
    persistent kernel as the reverse segment's loop is; the reverse loop
    over the segments, whose body holds that loop, stays the VM's."""
    from tests.support.hoist_grad_programs import _gru_text

    module = effir.parse(_gru_text(12, 4, 3, 8))
    g = effir.value_and_grad(module, wrt=["h0", "w", "u"], checkpoint=checkpoint)
    compiled = effir.compile(g, target="cuda", entry="main_grad")
    (spec,) = compiled.specialisations.values()
    kernels, prologues, vm_loops = loop_symbols(spec)
    assert len(kernels) == 2 and prologues and vm_loops == 1, (kernels, vm_loops)
    assert ".entry" in spec.ptx()


@needs_nvcc
def test_a_loop_whose_body_unrolled_a_short_loop_is_one_persistent_kernel() -> None:
    """A loop over segments whose inner loop unrolls in its body: the
    prologue hoists every step's input product, over a symbolic count of
    segments, where a product and its elementwise consumer share a domain
    of symbolic extent (the thread binding once asked for its integer
    value)."""
    text = """#[version = "0.0.5"]
def @main(%xs: Tensor[(4, 3, 2, 8), float32], %h0: Tensor[(2, 8), float32],
          %w: Tensor[(8, 8), float32]) {
  cf.foreach(fn (%seg: Tensor[(3, 2, 8), float32], %s: Tensor[(2, 8), float32]) {
    let %r = cf.foreach(fn (%x: Tensor[(2, 8), float32], %h: Tensor[(2, 8), float32]) {
      let %n = tanh(add(nn.dense(%x, %w), %h));
      (%n, %n)
    }, %seg, %s);
    (%r.0, %r.1)
  }, %xs, %h0)
}
"""
    (spec,) = effir.compile(effir.parse(text), target="cuda").specialisations.values()
    kernels, prologues, vm_loops = loop_symbols(spec)
    assert len(kernels) == 1 and len(prologues) == 1 and vm_loops == 0, (kernels, vm_loops)
    assert ".entry" in spec.ptx()


@needs_nvcc
def test_a_loop_with_a_branch_stays_a_vm_loop_on_cuda() -> None:
    """A body the kernel cannot hold (an ``if`` on data) is still the VM's
    loop of kernels, as before."""
    text = """#[version = "0.0.5"]
def @main(%xs: Tensor[(12, 4), float32], %h0: Tensor[(4), float32]) {
  let %step = fn (%x: Tensor[(4), float32], %h: Tensor[(4), float32]) {
    let %n = if (sum(%x) > 0f) { tanh(%x + %h) } else { %h * 0.5f };
    (%n, %n)
  };
  cf.foreach(%step, %xs, %h0)
}
"""
    (spec,) = effir.compile(effir.parse(text), target="cuda").specialisations.values()
    kernels, _, vm_loops = loop_symbols(spec)
    assert not kernels and vm_loops == 1


def test_a_fenced_product_is_cudas_unfused_multiply() -> None:
    """[RULE KERNEL-ROUND] on CUDA: the fence (LLVM's) becomes ``__fmul_rn`` around
    the product its ``Let`` bindings end in; another fenced value is
    itself."""
    x, y, v = (tirx.Var(n, "float32") for n in "xyv")
    fenced = tirx.call_llvm_pure_intrin("float32", rounding.FENCE, tirx.Let(v, x + y, v * y))
    plain = tirx.call_llvm_pure_intrin("float32", rounding.FENCE, x + y)
    out = rounding.for_cuda(tirx.Evaluate(fenced + plain))
    text = str(out)
    assert "__fmul_rn" in text and "call_llvm_pure_intrin" not in text
    assert text.count("__fmul_rn") == 1


@pytest.mark.skipif(not tvm.cuda(0).exist, reason="needs a GPU (a lent GPU machine runs it)")
def test_persistent_loops_run_on_the_gpu_and_equal_the_interpreter() -> None:
    """The GRU at the timed sizes (and 0, 1, 3 steps), the RNN with dropout
    in its step, and the GRU language model's gradient in the three
    checkpoint modes (bit-identical), compiled for CUDA and run."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "cuda_loop_checks.py"), "--part", "checks"],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=ROOT,
    )
    assert done.returncode == 0 and "all ok" in done.stdout, done.stdout + done.stderr


@needs_nvcc
def test_the_gpu_check_scripts_dry_rows_build_every_check_for_cuda() -> None:
    """benchmarks/cuda_device.py calls ``rows(target, dry)``: in dry mode
    every check's programs are built for CUDA, their loops persistent
    kernels, and nothing is run (rows ``built``)."""
    import cuda_loop_checks

    rows = cuda_loop_checks.rows("cuda", dry=True)
    assert len(rows) == 5, rows
    for name, status, detail in rows:
        assert status == "built", (name, status, detail)
        assert "persistent" in detail and "not run" in detail, detail
    with pytest.raises(ValueError, match="dry mode builds for cuda"):
        cuda_loop_checks.rows("llvm", dry=True)
