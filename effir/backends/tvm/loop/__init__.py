"""A whole ``cf.foreach`` loop as one TVM function.

Purpose
-------
``cf.foreach(body, xs, init)`` runs ``body(x_t, state) -> (out_t, state')``
once per step. Dispatching each step from Python costs about a microsecond
a call, and a kernel per step re-reads loop-invariant data (the weights)
every time. When the body is static (every shape known once the symbolic
dimensions of its parameters are) and pure, ``build_loop`` compiles the
whole loop into one TIR PrimFunc: a serial loop over ``t`` whose body is the
scheduled step. The sequence length ``T`` is a symbolic dimension of that
function, so a new length needs no new build.

What the body may contain: a let chain of pure operator calls that have a
``te`` rule (kernel/rules.py), calls of functions bound in the chain, captured
(given in ``functions``) or global (in ``module``) -- primitive functions
from ``fuse`` and ``lower-tvm`` above all; their bodies are evaluated in
place -- tuples, projections, constants. Anything else (``if``, ``match``,
references, effects, a recursive function) is a ``BackendError`` naming the
construct. Free variables of the body (weights, say) become extra arguments
of the kernel, in order of first occurrence (``LoopKernel.captured``).

The algorithm
-------------
1. [EVAL] Evaluate the body symbolically into TE tensors: one placeholder
   per leaf of ``x_t``, of the state and of each captured value (a key is a
   ``uint32[2]`` tensor); non-scalar constants become placeholders fed their
   data at each call. Each operator's ``te`` rule gives its result.
2. [CLASS] Class each TE operation by what it depends on: CONST (captured
   values only), SEQ (``x_t`` and captured values, not the state) or STEP
   (the state). Only STEP operations must run inside the loop.
3. [PACK] A contraction ``C[..., n] = sum_k A[..., k] * B[n, k]`` whose
   ``B`` is CONST (``nn.dense`` with a weight) reads ``B`` across rows,
   which does not vectorise along ``n``. ``B`` is repacked once per call
   into panels ``Bp[n / w, k, n % w]`` (``w`` two vectors, when they divide
   ``n``), so that the contraction reads contiguous vectors of ``Bp``; a
   ``B`` read ``B[k, n]`` (``nn.matmul``'s weight) by a product in the step
   is packed the same way [PACK K].
4. [HOIST] Every CONST or SEQ operation that is a reduction or a packing
   runs before the loop, in a *prologue*: CONST ones once, SEQ ones for all
   steps at once (the tensor gains a leading ``T`` axis: the input-to-hidden
   products of an RNN become one large matrix product, which runs near the
   machine's peak, instead of ``T`` matrix-vector products that each read
   the weights). The step reads row ``t`` of a SEQ result. Cheap SEQ
   operations (elementwise) stay in the step, where they fuse into their
   consumers. When a step has too few rows for a register tile (batch 1),
   the ``T`` axis is padded to a multiple of the tile (``padded_length``);
   a reduction of step data alone whose rows do not tile (a sum to one
   row a step) stays in the step rather than pad them all [RULE LOOPFN-NOPAD].
5. [SCHED] The prologue and the step are each a PrimFunc
   (``te.create_prim_func``) scheduled by ``cpu.schedule``: spatial blocks are
   inlined into their consumers (within schedule/inline.py's budget on the
   expression's size, and neither into a reduction nor at several reading
   sites when expensive); a large product of two operands neither a packed
   weight (the per-chunk weight gradients of a backward; a batched input
   projection whose step product is large, whose weight [PACK] then
   leaves as it lies) is packed as a kernel's (schedule/cpu/gemm.py [BATCH]);
   other contractions get a register tile (up to 8 rows x
   two vectors accumulated in registers over ``k``, vectorised along
   ``n``; a tile of fewer rows, as a step at batch 1, spans more panels of
   columns, so that the reduction issues independent multiply-adds; as
   many accumulators as the CPU has registers for: fewer without
   AVX-512; a right-hand side larger than L2 tiled column panel by
   column panel, each panel over every row tile); packings copy tile by
   tile; other blocks vectorise their
   innermost axis when it is contiguous. Large contractions and heavy
   elementwise blocks (from 2**27 multiply-adds, about a time slice's
   work: a busy machine makes each barrier wait a time slice) spread over
   TVM's thread pool (``parallel``).
   [ROWS] A loop whose rows are independent (each row of the new state
   and of ``out_t`` computed from the same row of the state and of
   ``x_t`` and from captured values only, checked on the TE graph:
   ``rows``) and whose work is large enough runs by blocks of rows:
   ``parallel for blk: for t: step(rows of blk)``, each thread carrying
   its rows through every step with no barrier per step, its step built
   for a block of rows (bit-identical results: each row's arithmetic is
   unchanged). As many blocks as TVM's pool has threads, each of at least
   4 rows (batch 1 stays serial).
6. [LOOP] The loop PrimFunc: the prologue; the state copied into a double
   buffer ``S[2, ...]``; ``for t in range(T)`` one block whose
   ``match_buffer`` views bind the step's buffers to ``xs[t]``, to row
   ``t`` of the prologue's results, to ``S[t % 2]`` (state in), to
   ``S[(t + 1) % 2]`` (state out) and to ``outs[t]``; then ``S[T % 2]``
   copied out as the final state. The step's intermediate buffers are
   allocated once, outside the loop; the prologue's results are buffers
   the kernel keeps between calls (one set per thread: fresh pages cost a
   page fault per 4 KiB, more than filling them).

[RULE LOOPFN-ALIGN] Buffers of the loop function are declared aligned to their
element size only: numpy arrays, passed zero-copy through DLPack, are
16-byte aligned at best (a slice, less), and a buffer declared 64-byte
aligned makes LLVM emit aligned vector moves that fault on them.

Known limitations: ``T`` is an int32 (at most 2**31 - 1 elements per
buffer); a ``?`` dimension in the body cannot be compiled (symbolic names
are bound from the arguments at each call, one build per binding); CPU
(llvm) only; reductions other than contractions get no schedule of their
own beyond inlining and vectorisation; the prologue repacks the weights
at every call (about 36 us for 768 x 256 float32), which matters only for
short sequences; TVM 0.27's vectoriser fails on a let-bound vector of
booleans, so blocks that bind one stay scalar.

The package follows these steps, one module each: ``values`` (types and
the values a kernel takes), ``evaluate`` [EVAL], ``graph`` [CLASS] [PACK]
[HOIST], ``cpu.schedule`` [SCHED], ``rows`` [ROWS], ``function`` [LOOP] (and ``lower_loop``,
all steps together), ``kernel`` (building and running: ``LoopKernel``,
``build_loop``). The scheduling helpers it shares with the kernel schedules are in
schedule/common.py. ``packed`` builds the same loop over a packed batch of
sequences of different lengths, whose step runs only the rows still
active (``effir.compile_packed``). ``cuda`` builds the same loop for a
GPU: a prologue and one persistent kernel running every step (its essay,
[RULE CUDA-PERSISTENT]); ``build_loop`` itself builds for the CPU only.
"""

from __future__ import annotations

import os


def _size_thread_pool() -> None:
    """TVM sizes its thread pool once, when first used, from TVM_NUM_THREADS,
    else from half the hardware threads (it assumes two per core): one
    thread on the 2-core development machines, where ``parallel`` loops
    then run serially (25 ms instead of 15 ms for the batch-32 GRU of
    benchmarks/gru_loop.py). Unless the user chose, use every core this
    process may run on. Done at import, before any kernel starts the pool."""
    affinity = getattr(os, "sched_getaffinity", None)  # Linux only
    cores = len(affinity(0)) if affinity else os.cpu_count() or 1
    os.environ.setdefault("TVM_NUM_THREADS", str(cores))


_size_thread_pool()

from .build import LoopKernel, build_loop  # noqa: E402
from .function import LoweredLoop, lower_loop  # noqa: E402  (after the pool is sized)
from .graph import ROW_TILE, padded_length  # noqa: E402

__all__ = ["ROW_TILE", "LoopKernel", "LoweredLoop", "build_loop", "lower_loop", "padded_length"]
