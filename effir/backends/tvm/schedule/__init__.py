"""Schedules: how a kernel's loops run on the target.

``te.create_prim_func`` gives one loop nest per TE compute, in the order the
rules built them: unscheduled, a fused kernel runs 20-70x slower than
numpy (docs/backend.md, "Schedules"). ``schedule_prim_func`` rewrites the loops with
``tvm.s_tir.Schedule``; it reads the blocks' structure (spatial or
reduction iterators, which buffer an operand's innermost index walks),
never which operator a block came from.

CPU (LLVM), in five steps:

1. Inline. A spatial block that is not an output is substituted into its
   consumers (``compute_inline``), repeatedly, so that a chain of
   elementwise and injective operators becomes one loop nest computing each
   output element in registers. [RULE SCHED-BUDGET] LLVM code generation of TVM
   expressions substitutes every ``let`` variable by its value, so an
   expression whose lets are used k times each, nested n deep, costs k^n to
   compile (a chain of eight inlined ``tanh`` takes minutes). A producer is
   inlined only while the consumer's let-substituted size stays under
   ``INLINE_BUDGET`` nodes; otherwise it stays a block of its own (step 5).
   Nothing is inlined into a matmul-like block: it reads each operand
   element many times, so the producer would be recomputed per read
   (Relay's rule for ``out_fusable`` anchors).
2. Matmul-like blocks (a sum of products of two operands over one
   reduction axis, ``nn.dense`` and ``nn.matmul``), as the hand-scheduled
   GRU step kernel was first:
   - the right operand contiguous along the output's last axis j
     (``a @ b``): tile i by 4 and j by two vectors, reorder to
     ``io, jo, k, ii, ji``, unroll ii, vectorise ji, accumulate the tile in
     a local buffer (``cache_write``; LLVM keeps it in registers);
   - contiguous along k (``x @ w.T``, dense's weight layout) with at least 8
     rows: pack the weight into ``[j / J, k, j % J]`` (a copy of N*K
     elements per call, small beside the M*N*K products), then as above;
   - contiguous along k with few rows (a GEMV, batch 1): split k by a vector
     and ``rfactor`` it, so that each output accumulates vector partial sums
     along k (loads contiguous in both operands), four rows and four columns
     at a time, summed across the vector at the end.
   - a large two-dimensional product (from 2**22 multiply-adds: the weight
     gradients of a training step) packs both operands, and computes a
     transpose fused before it in the copy (schedule/cpu/gemm.py).
   The epilogue (the inlined chain after the product: bias, activation) is
   computed at the tile, from the accumulators.
3. Other reductions: a reduction over outer axes vectorises the innermost
   (spatial, contiguous) axis inside the reduction loop; a reduction of
   contiguous elements with one accumulator uses the rfactor scheme.
4. Elementwise outputs: all loops fused, split by a vector, vectorised.
5. A producer kept out of its only consumer by the budget is computed at
   the consumer's vector tile into a local buffer (registers): the code
   stays linear in the chain's length and nothing goes to memory.

Every step is attempted and kept only if TVM accepts it
(``ScheduleError`` means "not legal here"): a schedule never changes what
a kernel computes, only how fast.

CUDA: the blocks are inlined within the same budget (dlight's own fallback
inlines every block, and a chain of squarings inlined whole is exponential
in size); with a TF32 or bfloat16 precision, a product whose shape allows
runs on the tensor cores (cuda/tensor_core.py [RULE SCHED-TENSORCORE]), and the
computes rounding the other products' operands are inlined into them;
then, when the function has one reduction, dlight's GPU rules
(matmul, GEMV, reduction) schedule it inside ``with target``; otherwise
each block runs one thread per output element, a producer kept out of its
only consumer computed in the consumer's thread (a CUDA kernel cannot
allocate global memory for an intermediate tensor).

Known limitations: no multithreading (``parallel`` did not pay at these
sizes on 2 cores); tile sizes are fixed, not tuned; a
matmul-like block with a batched, k-contiguous right operand and many rows
is tiled without packing; on CUDA, a kernel whose over-budget producer
feeds two blocks, outside the dlight rules, needs global scratch memory
and fails to build (a BackendError); the GPU schedules are compiled to PTX
in tests but were not run on a GPU.
"""

from __future__ import annotations

from typing import Any

from .cpu.kernel import schedule_cpu
from .cuda.kernel import schedule_cuda


def schedule_prim_func(func: Any, target: Any) -> Any:
    """The scheduled IRModule (``{"main": func}``) for ``target``."""
    if target.kind.name == "llvm":
        return schedule_cpu(func, target)
    return schedule_cuda(func, target)
