"""The register tile of a whole loop's contractions (loop/cpu/schedule.py):
a tile of few rows (a step at batch 1 or 2: a matrix-vector product) spans
several panels of columns, so that each step of the reduction issues
independent multiply-adds instead of waiting on one chain (the
hidden-32 GRU at batch 1), and no tile holds more accumulators than the
CPU has registers for; a right-hand side too large for L2 is tiled
column panel by column panel (batch 32). Values are checked by
test_loop.py (batch 2 runs the widened tile), here for the panel order,
and by the benchmarks."""

from __future__ import annotations

import re

import numpy as np
import pytest

import effir
from effir.backends.tvm.loop import build_loop, lower_loop
from effir.backends.tvm.loop.cpu import rows
from effir.backends.tvm.loop.cpu import schedule as cpu_schedule
from effir.backends.tvm.loop.cpu.schedule import _rows_per_tile, _tile_order, _tile_panels
from effir.backends.tvm.schedule.cpu import gemm as schedule_gemm
from tests.support.gru_programs import gru_text
from tests.support.loop_programs import GRU, assert_close, foreach_of, gru_inputs, module, uniform


@pytest.mark.parametrize(
    ("panels", "vectors", "rows", "expected"),
    [
        (3, 2, 1, 3),  # hidden 32, batch 1: 96 columns, one tile of 6 vectors
        (24, 2, 1, 4),  # hidden 256, batch 1: 768 columns, tiles of 8 vectors
        (3, 2, 2, 3),  # batch 2: 2 rows x 6 vectors
        (24, 2, 8, 1),  # 8 rows (batch 32): two vectors, as before
        (3, 1, 2, 3),  # panels of one vector (48 columns), batch 2
        (3, 1, 8, 1),  # 8 rows of 3 one-vector panels: one panel (3 does not split by 2)
        (5, 2, 1, 1),  # a prime count of panels wider than the tile's limit: one
    ],
)
def test_tile_width_with_avx512(
    panels: int, vectors: int, rows: int, expected: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cpu_schedule, "accumulators", lambda: cpu_schedule.ACCUMULATORS)
    assert _tile_panels(panels, vectors, rows) == expected
    width = expected * vectors
    assert width <= cpu_schedule.MAX_TILE_VECTORS
    assert rows * width <= max(cpu_schedule.ACCUMULATORS, rows * vectors)


@pytest.mark.parametrize(
    ("panels", "vectors", "rows", "expected"),
    [
        (3, 2, 1, 3),  # hidden 32, batch 1: 6 vectors (12 registers of 32 bytes)
        (24, 2, 1, 3),  # hidden 256, batch 1: tiles of 6 vectors, not 8 (spills)
        (24, 2, 2, 1),  # 2 rows x 2 vectors
        (3, 1, 6, 1),
    ],
)
def test_tile_width_without_avx512(
    panels: int, vectors: int, rows: int, expected: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """16 registers of 32 bytes: at most ACCUMULATORS_AVX2 vectors of
    accumulators, so that the tile stays in registers."""
    monkeypatch.setattr(cpu_schedule, "accumulators", lambda: cpu_schedule.ACCUMULATORS_AVX2)
    assert _tile_panels(panels, vectors, rows) == expected
    assert rows * expected * vectors <= max(cpu_schedule.ACCUMULATORS_AVX2, rows * vectors)


def test_rows_per_tile() -> None:
    assert _rows_per_tile([1], 8) == 1
    assert _rows_per_tile([32], 8) == 8
    assert _rows_per_tile([2, 3], 8) == 6


def test_tile_order_keeps_a_large_weight_panel_by_panel() -> None:
    """A right-hand side larger than L2 (the hidden-256 GRU's 768 x 256
    weights) runs column panel by column panel, each panel over every row
    tile (batch 32); a small one keeps the row tiles outside."""
    rows, cols, steps = "rows", "cols", "steps"
    big, small = 768 * 256 * 4, 96 * 32 * 4
    assert _tile_order([rows], cols, big) == [cols, rows]
    assert _tile_order([steps, rows], cols, big) == [steps, cols, rows]
    assert _tile_order([rows], cols, small) == [rows, cols]
    assert _tile_order([], cols, big) == [cols]


@pytest.mark.parametrize("threads", ["serial", "parallel"])
def test_gru_panel_by_panel_matches_the_interpreter(
    threads: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The GRU of test_loop.py with every contraction's tiles in the order
    of a large weight (the threshold lowered), its step and its batched
    prologue, serial and on the thread pool: the same values."""
    monkeypatch.setattr(cpu_schedule, "CACHED_OPERAND_BYTES", 0)
    if threads == "parallel":
        monkeypatch.setattr(cpu_schedule, "PARALLEL_MIN_WORK", 1)
    mod = module(GRU)
    _, body, _ = foreach_of(mod)
    kernel = build_loop(body, module=mod, parallel=threads == "parallel")
    for t, b in [(11, 2), (16, 8)]:
        args = gru_inputs(np.random.default_rng(t * 10 + b), t, b)
        assert_close(kernel(*args), effir.interpret(mod, *args))
        assert kernel.specialise({"b": b}).lowered.unscheduled == []


@pytest.mark.parametrize(("batch", "parallel_loops"), [(32, 2), (1, 0)])
def test_no_barrier_per_step_in_the_hidden_256_gru(
    batch: int, parallel_loops: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A parallel loop ends at a barrier, which on a busy machine
    waits a time slice. The hidden-256 GRU's step (a 2**22.6 multiply-add
    product and its gates at batch 32) has no parallel loop, no barrier per
    step; at batch 32 the batch-32 prologue's projection of all steps and
    the loop over blocks of rows around the steps (loop/rows.py, two
    threads) are on the thread pool, one barrier a call each. Scheduled
    only, not built."""
    monkeypatch.setattr(rows, "pool_threads", lambda: 2)
    _, body, _ = foreach_of(module(gru_text(256)))
    captured = build_loop(body).captured  # the batch is symbolic: nothing built yet
    lowered = lower_loop(body, {"b": batch}, captured, {}, None, parallel=True)
    assert lowered.unscheduled == []
    script = lowered.func.script()
    assert script.count("T.parallel(") == parallel_loops
    step = script.index("for t in range(")
    assert "T.parallel(" not in script[step:]


CHUNKS = """
def @main(%a: Tensor[(t, 64, 256), float32], %b: Tensor[(t, 64, 256), float32],
          %w: Tensor[(256, 256), float32], %s0: Tensor[(256, 256), float32],
          %s1: Tensor[(256), float32]) {
  let %f = fn (%chunk: (Tensor[(64, 256), float32], Tensor[(64, 256), float32]),
               %sums: (Tensor[(256, 256), float32], Tensor[(256), float32])) {
    let %prod = nn.dense(transpose(%chunk.0), transpose(%chunk.1));
    let %total = sum(%chunk.0, axis=[0]);
    (nn.matmul(%chunk.0, %w), (add(%sums.0, %prod), add(%sums.1, %total)))
  };
  cf.foreach(%f, (%a, %b), (%s0, %s1))
}
"""


def test_chunk_products_are_packed_and_not_padded() -> None:
    """The weight-gradient sums of a reverse loop, chunk by chunk
    (autodiff/sqrt.py): each step a product of two of its stacks
    ``(64 x 256)^T (64 x 256)``, a product by a weight, and a bias sum. The
    products, batched over the steps in the prologue, pack both operands
    into panels (schedule/cpu/gemm.py [BATCH]), each its own copy (the sum
    reads the stack as it lies); the sum, one row a step, stays in the step
    [RULE LOOPFN-NOPAD], so the batched tensors are not padded to whole tiles of
    steps (at 10 steps, 16 were computed). Before: neither packed, every
    product run for 16 steps."""
    mod = module(CHUNKS)
    _, body, _ = foreach_of(mod)
    kernel = build_loop(body, module=mod)
    rng = np.random.default_rng(3)
    a, b = uniform(rng, 10, 64, 256), uniform(rng, 10, 64, 256)
    w, s0, s1 = uniform(rng, 256, 256), uniform(rng, 256, 256), uniform(rng, 256)
    outs, (p, q) = kernel((a, b), (s0, s1), w)
    np.testing.assert_allclose(outs, a @ w, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(p, s0 + np.einsum("cki,ckj->ij", a, b), rtol=1e-5, atol=1e-3)
    np.testing.assert_allclose(q, s1 + a.sum(axis=(0, 1)), rtol=1e-5, atol=1e-3)
    lowered = kernel.specialise({}).lowered
    assert lowered.unscheduled == []
    assert not lowered.padded
    script = lowered.func.script()
    panels = re.findall(r"_global(?:_\d+)? = T.sblock_alloc_buffer", script)
    assert len(panels) == 4  # two panels for each product


@pytest.mark.parametrize(("batch", "packed_as_a_kernel"), [(32, True), (1, False)])
def test_the_batched_input_projection_packs_both_operands(
    batch: int, packed_as_a_kernel: bool
) -> None:
    """The hidden-256 GRU's input projection at batch 32 (a 32 x 256 by
    256 x 768 product a step, batched over the steps in the prologue) is
    scheduled as a kernel's large product, both operands copied into
    panels (schedule/cpu/gemm.py [BATCH]), not as graph.py's weight panels
    under the recurrence's register tile: 62 -> 46 ms of CPU for the loop
    at T=100 (one thread, interleaved), bit-identical results. At batch 1
    the projection keeps the weight's panels. Scheduled only, not built."""
    _, body, _ = foreach_of(module(gru_text(256)))
    captured = build_loop(body).captured
    lowered = lower_loop(body, {"b": batch}, captured, {}, None, parallel=True)
    assert lowered.unscheduled == []
    prologue = lowered.func.script().split("for t in range(")[0]
    panels = re.findall(r"(\w+)_global(?:_\d+)? = T.sblock_alloc_buffer", prologue)
    if packed_as_a_kernel:
        assert "w_packed" not in prologue
        assert sorted(panels) == ["w", "x_seq"]  # the weight and the batched x_t
    else:
        assert "w_packed" in prologue and panels == []


REVERSE = """
def @main(%xs: Tensor[(t, 32, 64), float32], %c0: Tensor[(32, 32), float32],
          %u: Tensor[(64, 32), float32]) {
  let %f = fn (%x: Tensor[(32, 64), float32], %ct: Tensor[(32, 32), float32]) {
    let %g = multiply(concatenate((%ct, %ct), axis=1), %x);
    (%g, add(multiply(%ct, 0.5f), nn.matmul(%g, %u)))
  };
  cf.foreach(%f, %xs, %c0)
}
"""


def test_a_k_major_weight_of_the_step_is_packed_once_a_call(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """graph.py [PACK K]: the step's product by a weight read k-major (a
    reverse loop's ``ct @ u``, ``nn.matmul``) reads panels of the weight
    packed once a call in the prologue, as ``nn.dense``'s weight is;
    before, a large one was copied into panels at every step (the
    kernel's packed product, schedule/cpu/gemm.py), a small one read across
    rows. The product is made large here by lowering the threshold; the
    values are the interpreter's."""
    monkeypatch.setattr(schedule_gemm, "MIN_MULTIPLY_ADDS", 1)
    mod = module(REVERSE)
    _, body, _ = foreach_of(mod)
    kernel = build_loop(body, module=mod)
    rng = np.random.default_rng(5)
    args = (
        uniform(rng, 7, 32, 64, scale=0.5),
        uniform(rng, 32, 32),
        uniform(rng, 64, 32, scale=0.1),
    )
    (outs, final), (want_outs, want_final) = kernel(*args), effir.interpret(mod, *args)
    np.testing.assert_allclose(outs, want_outs, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(final, want_final, rtol=1e-4, atol=1e-5)
    lowered = kernel.specialise({}).lowered
    assert lowered.unscheduled == []
    script = lowered.func.script()
    prologue, step = script.split("for t in range(")
    assert "u_packed" in prologue
    assert "_global" not in step  # no copy of the weight, or of anything, per step
