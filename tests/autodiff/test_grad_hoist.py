"""The cotangents of a loop's invariants (weights a body closes over) are
summed after the reverse loop, as one product over the stacked steps
(``effir.autodiff.hoist``): gradients still match finite differences and
the three checkpointing modes stay bit-identical."""

from __future__ import annotations

import numpy as np
import pytest

import effir
from effir.ir.expr import Call, Function, Op
from effir.ir.functor import post_order
from effir.passes.transforms.dce import dce
from tests.support.grad_harness import check_grad, stacked_elements
from tests.support.hoist_grad_programs import _gru_text
from tests.support.isolated import run_isolated

MODES = ("none", "loop", "sqrt")

CELL = """#[version = "0.0.5"]
def @main(%xs: Tensor[(LEN, 2, 3), float64], %h0: Tensor[(2, 4), float64],
          %w: Tensor[(4, 3), float64], %u: Tensor[(4, 4), float64], %b: Tensor[(4), float64]) {
  let %step = fn (%x: Tensor[(2, 3), float64], %h: Tensor[(2, 4), float64]) {
    let %n = tanh(add(add(nn.dense(%x, %w), %b), nn.dense(%h, %u)));
    (sum(%n, axis=[1]), %n)
  };
  let %r = cf.foreach(%step, %xs, %h0);
  add(sum(multiply(%r.0, %r.0)), sum(%r.1))
}
"""
WRT = ["xs", "h0", "w", "u", "b"]


def _cell(length: int):
    m = effir.parse(CELL.replace("LEN", str(length)))
    rng = np.random.default_rng(length)
    shapes = [(length, 2, 3), (2, 4), (4, 3), (4, 4), (4,)]
    return m, [rng.normal(size=s) * 0.5 for s in shapes]


def _products(module, name: str, transpose_a: bool | None = None) -> tuple[int, int]:
    """``name`` calls (nn.matmul: with transpose_a as given) inside and
    outside the loop bodies of the gradient function."""
    fn = module["main_grad"]
    inside = set()
    for node in post_order(fn.body):
        if isinstance(node, Function):
            inside.update(id(n) for n in post_order(node.body))
    counts = [0, 0]
    for node in post_order(fn.body):
        if (
            isinstance(node, Call)
            and isinstance(node.callee, Op)
            and node.callee.name == name
            and (transpose_a is None or node.attrs.get("transpose_a") == transpose_a)
        ):
            counts[id(node) in inside] += 1
    return counts[1], counts[0]


@pytest.mark.parametrize("mode", MODES)
def test_invariant_cotangents_against_finite_differences(mode):
    m, args = _cell(5)
    check_grad(m, args, WRT, checkpoint=mode)


def test_weight_products_run_after_the_reverse_loop():
    m, _ = _cell(3)  # too short for chunks: one product after the loop
    g = dce(effir.grad(m, wrt=WRT, checkpoint="none", specialise=False))
    # d/dw and d/du: one product each after the loop (as nn.dense of the
    # transposed stacks), none in it
    assert _products(g, "nn.matmul", transpose_a=True) == (0, 0)
    assert _products(g, "nn.dense") == (2, 2)  # the forward's two, in its loop
    # x_t's cotangent (ct_t @ w) after the loop too; h's (ct_t @ u) is carried
    assert _products(g, "nn.matmul", transpose_a=False) == (1, 1)


@pytest.mark.parametrize("length, tail", [(9, 0), (7, 1)])
def test_weight_products_run_per_chunk(length, tail):
    """From 4 steps on, the hoisted products run once per chunk of
    about sqrt(T) steps, in a loop over the chunks after the reverse loop
    (the tail's chunk before it), never per step."""
    m, _ = _cell(length)
    g = dce(effir.grad(m, wrt=WRT, checkpoint="none", specialise=False))
    assert _products(g, "nn.matmul", transpose_a=True) == (0, 0)
    # (inside loops, outside): the forward's two and the chunks' two; the tail's
    assert _products(g, "nn.dense") == (4, 2 * tail)
    # ct_t @ u in the reverse loop, ct_t @ w for x_t per chunk (and the tail's)
    assert _products(g, "nn.matmul", transpose_a=False) == (2, tail)


@pytest.mark.parametrize("mode", ["loop", "sqrt"])
def test_recomputing_backward_stores_chunks_not_steps(mode):
    """Under checkpointing, the reverse loops stack one chunk of hoisted
    factors (about sqrt(T) steps), not T steps: per step more, the stacks
    grow by the forward's output (2 elements), under ``loop`` its carry (8),
    and x_t's cotangent (6), not by the hoisted factors (the
    pre-activation's cotangent, x_t and h_t: 22 more); the chunks' stacks
    grow as sqrt(T)."""

    def stored(length: int) -> int:
        m, _ = _cell(length)
        g = effir.grad(m, wrt=WRT, checkpoint=mode, specialise=False)
        return stacked_elements(effir.check(dce(g)))

    per_step = (stored(64) - stored(16)) / 48
    assert per_step <= 20, per_step


@pytest.mark.parametrize("length", [1, 7, 10])
def test_hoisted_modes_are_bit_identical(length):
    m, args = _cell(length)
    out = {}
    for mode in MODES:
        g = effir.grad(m, wrt=WRT, checkpoint=mode, specialise=False)
        out[mode] = [np.asarray(x) for x in effir.interpret(g, *args, entry="main_grad")]
    for mode in ("loop", "sqrt"):
        for a, b in zip(out["none"], out[mode], strict=True):
            np.testing.assert_array_equal(a, b)


def check_compiled_modes_bit_identical() -> None:
    """Compiled (the hoisted products as TVM kernels, sqrt's joined
    factors): the three modes agree bit for bit and equal the interpreter."""
    m, args = _cell(10)
    out = {}
    for mode in MODES:
        g = effir.grad(m, wrt=WRT, checkpoint=mode)
        compiled = effir.compile(g, entry="main_grad")
        out[mode] = [np.asarray(x) for x in compiled(*args, entry="main_grad")]
        want = effir.interpret(g, *args, entry="main_grad")
        for got, ref in zip(out[mode], want, strict=True):
            np.testing.assert_allclose(got, np.asarray(ref), rtol=1e-12, atol=1e-13)
    for mode in ("loop", "sqrt"):
        for a, b in zip(out["none"], out[mode], strict=True):
            np.testing.assert_array_equal(a, b)
    print("ok")


@pytest.mark.nightly  # three builds
def test_compiled_modes_are_bit_identical():
    run = run_isolated(
        "from tests.autodiff.test_grad_hoist import check_compiled_modes_bit_identical"
        "; check_compiled_modes_bit_identical()"
    )
    run.check()
    assert "ok" in run.stdout


def check_compiled_gru_modes_bit_identical(length: int = 9) -> None:
    """Compiled, the GRU's loss and gradients are the same bits in the
    three modes, and close to the interpreter's. They differed in the last
    bits: LLVM contracted a product of one operator and a sum of the next
    into a fused multiply-add wherever the product had a single use in its
    kernel, so the gates' cotangents of the first backward step rounded
    differently in ``none``'s reverse loop, which reads the stored
    residuals, than in ``loop``'s, which recomputes them
    (backends/tvm/kernel/rounding.py [RULE KERNEL-ROUND])."""
    batch, inputs, hidden = 4, 3, 5
    m = effir.parse(_gru_text(length, batch, inputs, hidden))
    rng = np.random.default_rng(length)
    shapes = [(length, batch, inputs), (batch, hidden), (3 * hidden, inputs)]
    shapes += [(3 * hidden, hidden), (3 * hidden,)]
    args = [(rng.normal(size=s) * 0.5).astype("float32") for s in shapes]
    wrt = ["h0", "w", "u", "bias"]
    out = {}
    for mode in MODES:
        g = effir.value_and_grad(m, wrt=wrt, checkpoint=mode)
        value, grads = effir.compile(g, entry="main_grad")(*args, entry="main_grad")
        out[mode] = [np.asarray(value), *(np.asarray(x) for x in grads)]
    want_value, want = effir.interpret(g, *args, entry="main_grad")
    for got, ref in zip(out["sqrt"], [want_value, *want], strict=True):
        np.testing.assert_allclose(got, np.asarray(ref), rtol=1e-5, atol=1e-6)
    for mode in ("loop", "sqrt"):
        for i, (a, b) in enumerate(zip(out["none"], out[mode], strict=True)):
            assert np.array_equal(a, b), (mode, i, int((a != b).sum()), np.abs(a - b).max())
    print("ok")


@pytest.mark.nightly  # three GRU builds (30 s; tests/backends/tvm/test_rounding.py checks the rule)
def test_compiled_gru_modes_are_bit_identical():
    run = run_isolated(
        "from tests.autodiff.test_grad_hoist import check_compiled_gru_modes_bit_identical"
        "; check_compiled_gru_modes_bit_identical()"
    )
    run.check()
    assert "ok" in run.stdout


def check_compiled_loop_backward_memory() -> None:
    """The compiled ``loop`` backward's peak of live tensors (the rise of
    the peak RSS during a call, with TVM's naive allocator and glibc's mmap
    threshold at 64 KiB, as benchmarks/checkpoint_memory.py measures) per
    step more, in (B, H) tensors: the program stores about 1.5 (the carry,
    x_t and its cotangent; 2.4 measured). Each segment's frame of the
    compiled VM loop kept its tuple of recomputed residuals alive until the
    loop ended (12.2; relax/pipeline.py [RULE PIPELINE-KILLUNUSED]), and the segments'
    reverse loop iterated over a reversed copy of the stored carries (3.6;
    autodiff/sqrt.py ``segmented_back``). The gradients equal the
    interpreter's."""
    from pathlib import Path

    from tvm import relax

    init = relax.VirtualMachine.__init__

    def naive(self, mod, device, memory_cfg=None, **kwargs):
        init(self, mod, device, memory_cfg="naive", **kwargs)

    relax.VirtualMachine.__init__ = naive

    def status(field: str) -> int:
        line = next(
            x for x in Path("/proc/self/status").read_text().splitlines() if x.startswith(field)
        )
        return int(line.split()[1]) * 1024

    peaks = {}
    rng = np.random.default_rng(0)
    for length in (100, 400):
        g = effir.value_and_grad(
            effir.parse(_gru_text(length)),
            wrt=["h0", "w", "u", "bias"],
            checkpoint="loop",
        )
        shapes = [(length, 32, 8), (32, 128), (384, 8), (384, 128), (384,)]
        args = [(rng.normal(size=s) * 0.3).astype("float32") for s in shapes]
        compiled = effir.compile(g, entry="main_grad")
        compiled(*args, entry="main_grad")
        before = status("VmRSS")
        Path("/proc/self/clear_refs").write_text("5")
        value, grads = compiled(*args, entry="main_grad")
        peaks[length] = status("VmHWM") - before
        if length == 100:
            want_value, want = effir.interpret(g, *args, entry="main_grad")
            np.testing.assert_allclose(value, want_value, rtol=1e-5)
            for got, ref in zip(grads, want, strict=True):
                np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-5 * np.abs(ref).max())
    per_step = (peaks[400] - peaks[100]) / 300 / (32 * 128 * 4)
    print("per step", per_step, peaks)
    assert per_step < 3.2, (per_step, peaks)
    print("ok")


@pytest.mark.nightly  # two GRU builds
def test_compiled_loop_backward_memory_per_step():
    run = run_isolated(
        "from tests.autodiff.test_grad_hoist import check_compiled_loop_backward_memory"
        "; check_compiled_loop_backward_memory()",
        env={"MALLOC_MMAP_THRESHOLD_": "65536", "EFFIR_CACHE_DIR": "off"},
    )
    run.check()
    assert "ok" in run.stdout, run.stdout
