"""``lower_cuda_loop``: a static, pure ``cf.foreach`` body to the two
functions its GPU loop is: the prologue (the hoisted products of every
step, one ordinary kernel) and the persistent kernel (every step);
``plan`` chooses the grid."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import tvm
from tvm import te, tirx

from .....ir.expr import Function, Var
from .....ir.module import IRModule
from ...kernel import rounding
from ...kernel.primitive import relax_alignment
from ...schedule import schedule_prim_func
from ..function import step_leaves
from ..graph import Graph, Stages, hoist
from ..values import Leaf
from .kernel import Inputs, KernelBuilder, lanes_for
from .owners import Plan, analyse
from .stages import StepStages, step_stages
from .threads import Threads

SINGLE_BLOCK_WORK = 32 * 1024
"""Multiply-adds of a step (elements times reduction extents, over its
stages) up to which one block runs the loop, with no grid barrier (the
hidden-32 GRU's step: 3,104)."""

BLOCK_THREADS = 256
"""Threads of each block of a multi-block grid."""

MAX_BLOCK_THREADS = 512
"""Most threads of the one block of a single-block loop."""

DEFAULT_MULTIPROCESSORS = {"sm_90": 114, "sm_80": 108, "sm_70": 80}
"""Streaming multiprocessors assumed when no GPU is present at build time
(the smallest part of each architecture: an H100 PCIe has 114, an SXM
or H200 132); with a GPU, its own count."""


@dataclass
class CudaLoop:
    """A whole loop for the GPU, before code generation: ``prologue(inputs
    it takes..., hoisted...)`` then ``func(xs..., init..., captured...,
    constants..., hoisted..., outs..., final..., scratch...)``."""

    func: Any
    prologue: Any | None
    prologue_inputs: list[tuple[str, int]]  # ("x", k) or ("captured", k)
    x: list[Leaf]
    state: list[Leaf]
    captured: list[Leaf]
    constants: list[np.ndarray]  # the body's constants, then the units' tables
    outputs: list[Leaf]
    hoisted: list[tuple[Leaf, bool]]  # the prologue's results; True: one row per step
    scratch: list[Leaf]  # the kernel's buffers for one call
    blocks: int
    threads: int
    phases: int
    staged: list[str]  # the stage and tensor of each read staged in shared memory


def multiprocessors(target: Any) -> int:
    """The GPU's multiprocessors: a cooperative launch needs every block
    resident, one block per multiprocessor at most here."""
    device = tvm.cuda(0)
    if device.exist:
        return int(device.multi_processor_count)
    return DEFAULT_MULTIPROCESSORS.get(str(target.attrs.get("arch", "")), 16)


def plan(steps: StepStages, limit: int, exact: bool) -> tuple[Plan, int]:
    """The grid (the plan of owners.py and the threads per block): one
    block for a small step, else the split of the largest output along
    each of its axes, the one with fewest phases, then most blocks."""
    work = sum(
        int(np.prod(s.shape, dtype=np.int64)) * max(1, s.reduce_extent) for s in steps.stages
    )
    best: tuple[tuple[int, int], Plan] | None = None
    if work > SINGLE_BLOCK_WORK and limit > 1:
        main = max(steps.writer, key=lambda s: int(np.prod(s.shape, dtype=np.int64)))
        for axis in sorted(range(len(main.shape)), key=lambda a: (-main.shape[a], -a)):
            blocks = _grid(main.shape[axis], limit)
            if blocks < 2:
                continue
            candidate = analyse(steps, blocks, {main: axis})
            score = (len(candidate.phases), -blocks)
            if best is None or score < best[0]:
                best = (score, candidate)
    if best is not None:
        return best[1], BLOCK_THREADS
    single = analyse(steps, 1, {})
    items = max(int(np.prod(s.shape, dtype=np.int64)) * lanes_for(s, exact) for s in steps.stages)
    threads = 128
    while threads < MAX_BLOCK_THREADS and threads < items:
        threads *= 2
    return single, threads


def _grid(units: int, limit: int) -> int:
    """Blocks for ``units`` units: at most ``limit``, a divisor of the units
    (even runs, no table) unless that would halve the grid."""
    most = min(units, limit)
    divisor = max(d for d in range(1, most + 1) if units % d == 0)
    return divisor if 2 * divisor > most else most


def lower_cuda_loop(
    body: Function,
    dims: Mapping[str, int],
    captured: Sequence[Var],
    functions: Mapping[Var, Function],
    module: IRModule | None,
    target: Any,
    on_gpu: bool = True,
    blocks: int | None = None,
) -> CudaLoop:
    """[EVAL] [CLASS] [HOIST] as on the CPU (loop/), then [STAGES],
    [OWNERS] and [KERNEL]: the loop over ``body`` as a prologue and one
    persistent kernel. ``on_gpu=False`` builds the same kernel run serially
    on the CPU ([THREADS]); ``blocks`` caps the grid (else the GPU's
    multiprocessors)."""
    builder, x_leaves, s_leaves, cap_leaves, out_leaves, new_leaves = step_leaves(
        body, dims, captured, functions, module
    )
    invariant = frozenset(
        i for i, (n, p) in enumerate(zip(new_leaves, s_leaves, strict=True)) if n.same_as(p)
    )
    changed = [i for i in range(len(new_leaves)) if i not in invariant]
    graph = Graph(x_leaves, s_leaves, cap_leaves, out_leaves + [new_leaves[i] for i in changed])
    graph.classify()
    length = tirx.Var("T", "int32")
    xs_ph = [te.placeholder([length, *t.shape], t.dtype, name=f"{t.op.name}_seq") for t in x_leaves]
    stages = hoist(graph, xs_ph, length, pad=False)
    steps = step_stages(stages.step_outputs, stages.step_inputs)
    exact = rounding.active()
    limit = blocks if blocks is not None else multiprocessors(target)
    the_plan, threads = plan(steps, limit, exact)
    kinds: dict[Any, tuple[str, int]] = {}
    for k, ph in enumerate(x_leaves):
        kinds[ph.op] = ("x", k)
    for k, ph in enumerate(s_leaves):
        kinds[ph.op] = ("state", k)
    for k, ph in enumerate(cap_leaves):
        kinds[ph.op] = ("captured", k)
    for k, ph in enumerate(stages.hoisted_views):
        kinds[ph.op] = ("hoisted", k)
    inputs = Inputs(kinds, invariant, list(stages.hoisted_seq), len(out_leaves), changed)
    leaves = {
        "x": x_leaves,
        "state": s_leaves,
        "captured": cap_leaves,
        "hoisted": stages.prologue_outputs,
        "outputs": out_leaves,
        "step_outputs": list(stages.step_outputs),
    }
    model = Threads(the_plan.blocks, threads, on_gpu)
    built = KernelBuilder(steps, the_plan, inputs, leaves, length, model, exact).build()
    func = tvm.tirx.transform.ConvertSSA()(tvm.IRModule({"main": built.func}))["main"]
    prologue = _prologue(stages, target, on_gpu)
    if on_gpu:
        func = func.with_body(rounding.for_cuda(func.body))
        if prologue is not None:
            prologue = prologue.with_body(rounding.for_cuda(prologue.body))
    prologue_inputs = []
    for ph in stages.prologue_inputs:
        if any(ph.same_as(x) for x in xs_ph):
            prologue_inputs.append(("x", next(k for k, x in enumerate(xs_ph) if ph.same_as(x))))
        else:
            prologue_inputs.append(("captured", kinds[ph.op][1]))

    def leaf(t: te.Tensor, skip: int = 0) -> Leaf:
        return Leaf(tuple(int(d) for d in t.shape[skip:]), str(t.dtype))

    n_captured = len(cap_leaves) - len(builder.constants)
    return CudaLoop(
        func,
        prologue,
        prologue_inputs,
        [leaf(t) for t in x_leaves],
        [leaf(t) for t in s_leaves],
        [leaf(t) for t in cap_leaves[:n_captured]],
        [data for _, data in builder.constants] + built.tables,
        [leaf(t) for t in out_leaves],
        [
            (leaf(t, 1 if seq else 0), seq)
            for t, seq in zip(stages.prologue_outputs, stages.hoisted_seq, strict=True)
        ],
        built.scratch,
        built.blocks,
        built.threads,
        built.phases,
        built.staged,
    )


def _prologue(stages: Stages, target: Any, on_gpu: bool) -> Any:
    """The hoisted operations as one function: on the GPU scheduled as a
    kernel (schedule/), on the CPU as TE writes it. A GPU grid of no blocks
    cannot be launched, so the caller does not call it on no steps
    (relax/loops.py); a guard here, around the kernel, would stop TVM
    placing the kernel's own barriers (ThreadSync inserts none inside a
    condition)."""
    if not stages.prologue_outputs:
        return None
    func = relax_alignment(te.create_prim_func([*stages.prologue_inputs, *stages.prologue_outputs]))
    if on_gpu:
        func = schedule_prim_func(func, target)["main"]
    return func.with_attr("global_symbol", "main").with_attr("tirx.noalias", True)
