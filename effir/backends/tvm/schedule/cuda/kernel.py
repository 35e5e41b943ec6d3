"""The CUDA schedule of a kernel (the package docstring, "CUDA")."""

from __future__ import annotations

from typing import Any

from tvm import s_tir, tirx
from tvm.s_tir import dlight

from ... import precision
from ..common import DATA_PAR, ILLEGAL, ORDERED, Blocks, attempt, same_domain
from ..inline import inline_operand_rounding, inline_within_budget
from .tensor_core import schedule_tensor_core

GPU_THREADS = 256
"""Threads per block for a loop nest bound by ``_bind_threads``."""


def schedule_cuda(func: Any, target: Any) -> Any:
    """Inline within the budget (dlight's own fallback inlines every block,
    and a chain of squarings inlined whole is exponential in size); with a
    TF32 or bfloat16 precision, a product on the tensor cores where its
    shape allows ([RULE SCHED-TENSORCORE]); then dlight's matmul, GEMV and
    reduction rules where one applies to the whole function, else one
    thread per output element of each block."""
    sch = s_tir.Schedule(func)
    inline_within_budget(sch)
    products = precision.current()
    if products != "float32":
        on_tensor_cores = schedule_tensor_core(sch.copy(), products)
        if on_tensor_cores is not None:
            return on_tensor_cores
        inline_operand_rounding(sch)  # read, rounded, where the product loads its operands
    blocks = Blocks(sch)
    anchors = [b for b in blocks.all() if blocks.is_reduction(b)]
    ordered = any(ORDERED in sch.get(b).annotations for b in anchors)
    if len(anchors) == 1 and not ordered:
        rules = (dlight.gpu.Matmul(), dlight.gpu.GEMV(), dlight.gpu.Reduction())
        with target:
            for rule in (*rules, dlight.gpu.GeneralReduction()):
                try:
                    scheduled = rule.apply(sch.mod["main"], target, False)
                except ILLEGAL:
                    continue
                if scheduled is not None:
                    return scheduled.mod
    _bind_all(sch, blocks)
    return sch.mod


def _bind_all(sch: Any, blocks: Blocks) -> None:
    """One thread per output element of each block, consumers first. A
    block left out of its only consumer by the budget is computed in the
    consumer's thread, into a local buffer: a CUDA kernel cannot allocate
    global memory for an intermediate tensor."""
    outputs = blocks.outputs()
    threads: dict[str, Any] = {}
    for block in reversed(blocks.all()):
        name = blocks.name(block)
        consumers = blocks.consumers(block)
        if name not in outputs and len(consumers) == 1:
            at = threads.get(blocks.name(consumers[0]))
            if (
                at is not None
                and same_domain(sch, block, consumers[0])
                and attempt(lambda b=block, a=at: sch.compute_at(b, a))
            ):
                attempt(lambda b=block: sch.set_scope(b, 0, "local"))
                threads[name] = at
                continue
        threads[name] = _bind_threads(sch, blocks, block)
        _localise_private_buffers(sch, blocks, block)


def _localise_private_buffers(sch: Any, blocks: Blocks, block: Any) -> None:
    """Buffers only ``block`` reads and writes (a tuple reduction's running
    value next to its index) live in its thread's registers."""
    params = {str(b.name) for b in sch.mod["main"].params}
    others = [b for b in blocks.all() if blocks.name(b) != blocks.name(block)]
    read_elsewhere = {str(r.source.name) for b in others for r in sch.get(b).reads}
    for k, region in enumerate(sch.get(block).writes):
        name = str(region.source.name)
        if name not in params and name not in read_elsewhere:
            attempt(lambda i=k: sch.set_scope(block, i, "local"))


def _bind_threads(sch: Any, blocks: Blocks, block: Any) -> Any:
    """The block's spatial loops fused and split over blocks of
    ``GPU_THREADS`` threads; its reduction loops run in each thread.
    Returns the thread loop."""
    loops = sch.get_loops(block)
    kinds = [int(iv.iter_type) for iv in sch.get(block).iter_vars]
    spatial = [lp for lp, kd in zip(loops, kinds, strict=False) if kd == DATA_PAR]
    reduce = [lp for lp, kd in zip(loops, kinds, strict=False) if kd != DATA_PAR]
    if not spatial:
        spatial = [sch.add_unit_loop(block)]
    sch.reorder(*spatial, *reduce)
    fused = sch.fuse(*spatial) if len(spatial) > 1 else spatial[0]
    extent = sch.get(fused).extent
    # a symbolic extent (a checkpointed loop's segment of steps) is split
    # by GPU_THREADS, the last block's threads beyond it predicated off
    known = isinstance(extent, tirx.IntImm)
    threads = min(GPU_THREADS, max(1, int(extent))) if known else GPU_THREADS
    bx, tx = sch.split(fused, [None, threads])
    sch.bind(bx, "blockIdx.x")
    sch.bind(tx, "threadIdx.x")
    return tx
