"""Schedules: how a kernel's loops run on the target.

``te.create_prim_func`` gives one loop nest per TE compute, in the order the
rules built them: unscheduled, a fused kernel runs 20-70x slower than
numpy (TVM_NOTES.md). ``schedule_prim_func`` rewrites the loops with
``tvm.s_tir.Schedule``; it reads the blocks' structure (spatial or
reduction iterators, which buffer an operand's innermost index walks),
never which operator a block came from.

CPU (LLVM), in five steps:

1. Inline. A spatial block that is not an output is substituted into its
   consumers (``compute_inline``), repeatedly, so that a chain of
   elementwise and injective operators becomes one loop nest computing each
   output element in registers. [RULE BUDGET] LLVM code generation of TVM
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
   step kernel of TVM_NOTES.md:
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
     transpose fused before it in the copy (schedule_gemm.py).
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
in size); then, when the function has one reduction, dlight's GPU rules
(matmul, GEMV, reduction) schedule it inside ``with target``; otherwise
each block runs one thread per output element, a producer kept out of its
only consumer computed in the consumer's thread (a CUDA kernel cannot
allocate global memory for an intermediate tensor).

Known limitations: no multithreading (``parallel`` did not pay at these
sizes on 2 cores, TVM_NOTES.md); tile sizes are fixed, not tuned; a
matmul-like block with a batched, k-contiguous right operand and many rows
is tiled without packing; on CUDA, a kernel whose over-budget producer
feeds two blocks, outside the dlight rules, needs global scratch memory
and fails to build (a BackendError); the GPU schedules are compiled to PTX
in tests but were not run on a GPU.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import tvm
from tvm import s_tir, tirx
from tvm_ffi import get_global_func

from .schedule_common import strip_casts, uses, vector_lanes
from .schedule_gemm import packed_gemm

INLINE_BUDGET = 3000
"""Most let-substituted expression nodes an inlining may produce [RULE BUDGET]."""

_get_realize = get_global_func("s_tir.schedule.GetSBlockRealize")
_ScheduleError = s_tir.ScheduleError
_DATA_PAR, _REDUCE = 0, 2  # tirx.IterVar kinds
_Load = tvm.ir.expr.TensorLoad  # a buffer element read (BufferLoad before TVM 0.27)


def schedule_prim_func(func: Any, target: Any) -> Any:
    """The scheduled IRModule (``{"main": func}``) for ``target``."""
    if target.kind.name == "llvm":
        return _CpuScheduler(func, target).run()
    return _schedule_gpu(func, target)


# ============================================================ block facts
class _Blocks:
    """Queries on the blocks of a schedule's root, recomputed on demand."""

    def __init__(self, sch: Any) -> None:
        self.sch = sch
        root = sch.get_sblock(sch.mod["main"].body.block.name_hint)
        self.root = root

    def all(self) -> list[Any]:
        return list(self.sch.get_child_blocks(self.root))

    def outputs(self) -> set[str]:
        return {self.name(b) for b in self.sch.get_output_blocks(self.root)}

    def name(self, block: Any) -> str:
        return str(self.sch.get(block).name_hint)

    def is_reduction(self, block: Any) -> bool:
        return any(int(iv.iter_type) == _REDUCE for iv in self.sch.get(block).iter_vars)

    def consumers(self, block: Any) -> list[Any]:
        return list(self.sch.get_consumers(block))

    def producers(self, block: Any) -> list[Any]:
        return list(self.sch.get_producers(block))

    def store(self, block: Any) -> Any:
        body = self.sch.get(block).body
        return body if isinstance(body, tirx.BufferStore) else None


def _divisor(extent: int, candidates: tuple[int, ...]) -> int:
    """The first candidate that divides ``extent`` (1 if none does)."""
    for c in candidates:
        if c >= 1 and extent % c == 0:
            return c
    return 1


_ILLEGAL = (_ScheduleError, tvm.error.InternalError, ValueError)


def _attempt(action: Callable[[], Any]) -> bool:
    """Whether ``action()`` succeeded; False where TVM finds the step
    illegal (the schedule is then unchanged: primitives are atomic)."""
    try:
        action()
    except _ILLEGAL:
        return False
    return True


# ====================================================== expression costs
def _children(node: Any) -> list[Any]:
    if isinstance(node, _Load):
        return list(node.indices)
    if isinstance(node, tirx.Select):
        return [node.condition, node.true_value, node.false_value]
    if isinstance(node, tirx.Cast):
        return [node.value]
    if isinstance(node, tvm.ir.expr.Call):
        return list(node.args)
    if isinstance(node, tirx.Not):
        return [node.a]
    if hasattr(node, "a") and hasattr(node, "b"):
        return [node.a, node.b]
    return []


class Cost:
    """A let-substituted expression's size, and how many times it reads each
    buffer (by name)."""

    __slots__ = ("size", "reads")

    def __init__(self, size: int, reads: dict[str, int]) -> None:
        self.size = size
        self.reads = reads

    @staticmethod
    def combine(parts: list[Cost]) -> Cost:
        reads: dict[str, int] = {}
        for p in parts:
            for k, v in p.reads.items():
                reads[k] = reads.get(k, 0) + v
        return Cost(1 + sum(p.size for p in parts), reads)


def expression_cost(expr: Any) -> Cost:
    """The cost of ``expr`` with every let variable replaced by its value
    (as TVM's LLVM code generator sees it): an explicit stack, no recursion."""
    bound: dict[Any, Cost] = {}
    results: list[Cost] = []
    work: list[tuple[str, Any, int]] = [("visit", expr, 0)]
    while work:
        action, node, count = work.pop()
        if action == "visit":
            if isinstance(node, tirx.Let):
                work.append(("let", node, 0))
                work.append(("visit", node.body, 0))
                work.append(("bind", node.var, 0))
                work.append(("visit", node.value, 0))
            elif isinstance(node, tirx.Var) and node in bound:
                results.append(bound[node])
            else:
                kids = _children(node)
                work.append(("combine", node, len(kids)))
                work.extend(("visit", k, 0) for k in reversed(kids))
        elif action == "bind":
            bound[node] = results.pop()
        elif action == "combine":
            parts = [results.pop() for _ in range(count)]
            cost = Cost.combine(parts)
            if isinstance(node, _Load):
                name = str(node.source.name)
                cost.reads[name] = cost.reads.get(name, 0) + 1
            results.append(cost)
        # "let": the body's cost, already on the stack, is the let's
    return results.pop()


# ================================================================ inlining
def inline_within_budget(sch: Any) -> None:
    """Step 1: inline every spatial, non-output block into its consumers
    while [RULE BUDGET] allows, never into a matmul-like block."""
    blocks = _Blocks(sch)
    progress = True
    while progress:  # each success may make another producer inlinable
        progress = False
        outputs = blocks.outputs()
        for block in blocks.all():
            if blocks.name(block) in outputs or blocks.is_reduction(block):
                continue
            if _may_inline(blocks, block) and _attempt(lambda b=block: sch.compute_inline(b)):
                progress = True
                break


def _may_inline(blocks: _Blocks, block: Any) -> bool:
    store = blocks.store(block)
    if store is None or KEEP in blocks.sch.get(block).annotations:
        return False
    mine = expression_cost(store.value)
    buffer = str(store.buffer.name)
    for consumer in blocks.consumers(block):
        if blocks.is_reduction(consumer) and _matmul_operands(blocks.sch, consumer):
            return False
        theirs = blocks.store(consumer)
        if theirs is None:
            return False
        cost = expression_cost(theirs.value)
        if cost.size + cost.reads.get(buffer, 0) * mine.size > INLINE_BUDGET:
            return False
    return True


# =================================================================== CPU
class _CpuScheduler:
    """Steps 1-5 of the module docstring on one PrimFunc."""

    def __init__(self, func: Any, target: Any = None) -> None:
        self.target = target
        self.sch = s_tir.Schedule(func)
        self.blocks = _Blocks(self.sch)
        self.placed: set[str] = set()  # blocks scheduled as part of another's tile
        self.tile_of: dict[str, Any] = {}  # a tiled block's outer vector loop

    def run(self) -> Any:
        inline_within_budget(self.sch)
        self.blocks = _Blocks(self.sch)
        blocks = self.blocks.all()
        for block in blocks:
            if _empty(self.sch, block):  # nothing to speed up; leave TVM's loops alone
                self.placed.add(self.blocks.name(block))
                continue
            if self.blocks.is_reduction(block):
                matmul = _matmul_operands(self.sch, block)
                if matmul is not None:
                    self._guarded(lambda b=block, m=matmul: self._matmul(b, m))
                else:
                    self._guarded(lambda b=block: self._reduction(b))
        for block in reversed(self.blocks.all()):
            name = self.blocks.name(block)
            if name in self.placed or self.blocks.is_reduction(block):
                continue
            if not self._compute_at_consumer(block):
                self._guarded(lambda b=block: self._elementwise(b))
        return self.sch.mod

    def _guarded(self, steps: Callable[[], Any]) -> None:
        """Runs a multi-step schedule of one block; if a step is illegal the
        block's steps so far are undone (the schedule is restored)."""
        saved = self.sch.copy()
        placed = set(self.placed)
        try:
            steps()
        except _ILLEGAL:
            self.sch = saved
            self.blocks = _Blocks(saved)
            self.placed = placed

    # ------------------------------------------------------------ step 1
    # ------------------------------------------------------------ step 2
    def _matmul(self, block: Any, operands: _MatmulInfo) -> None:
        sch = self.sch
        packed = packed_gemm(sch, block, self.target)  # a large product (schedule_gemm.py)
        if packed is not None:
            local, tile, copies = packed
            self.placed.update(self.blocks.name(c) for c in copies)
            self._epilogue(local, tile)
            return
        loops = sch.get_loops(block)
        spatial = [loops[k] for k in operands.spatial]
        (k_loop,) = [loops[k] for k in operands.reduce]
        # Tiles cover the last two output axes (rows i, columns j); batch
        # axes stay outer loops, so that no tile straddles two matrices (a
        # tile's write-back region would then overlap its neighbours').
        j_loop = spatial[-1]
        if len(spatial) >= 2:
            i_loop = spatial[-2]
        else:  # a vector times a matrix: one row
            i_loop = sch.add_unit_loop(j_loop)
        m = int(sch.get(i_loop).extent)
        lanes = vector_lanes(operands.acc_dtype)
        if operands.j_contiguous:
            self._matmul_tiles(block, i_loop, j_loop, k_loop, m, operands, lanes)
        elif m >= 8 and operands.rhs_on_jk:
            self._pack_rhs(block, operands)
            self._matmul_tiles(block, i_loop, j_loop, k_loop, m, operands, lanes)
        else:
            self._gemv(block, i_loop, j_loop, k_loop, m, operands, lanes)

    def _pack_rhs(self, block: Any, operands: _MatmulInfo) -> None:
        sch = self.sch
        jt = _divisor(
            operands.n, (2 * vector_lanes(operands.acc_dtype), vector_lanes(operands.acc_dtype))
        )
        packed = sch.cache_read(block, operands.rhs_index, "global")
        if operands.rhs_j_first:
            sch.transform_layout(
                block, ("read", operands.rhs_index), lambda j, k: (j // jt, k, j % jt)
            )
        else:
            sch.transform_layout(
                block, ("read", operands.rhs_index), lambda k, j: (j // jt, k, j % jt)
            )
        self.placed.add(self.blocks.name(packed))
        # Copy in (jt x 16) tiles, a vector of jt along j at a time: the
        # writes are contiguous, the strided reads stay within one tile.
        j, k = sch.get_loops(packed)[-2:]
        jo, ji = sch.split(j, [None, jt])
        ko, ki = sch.split(k, [None, _divisor(operands.k, (16, 8, 4, 2))])
        sch.reorder(jo, ko, ki, ji)
        sch.vectorize(ji)

    def _matmul_tiles(
        self, block: Any, i: Any, j: Any, k: Any, m: int, operands: _MatmulInfo, lanes: int
    ) -> None:
        sch = self.sch
        it = _divisor(m, (4, 2))
        jt = _divisor(operands.n, (2 * lanes, lanes, lanes // 2, lanes // 4))
        local = sch.cache_write(block, 0, "local")
        io, ii = sch.split(i, [None, it])
        jo, ji = sch.split(j, [None, jt])
        sch.reorder(io, jo, k, ii, ji)
        sch.reverse_compute_at(local, jo)
        if it > 1:
            sch.unroll(ii)
        if jt > 1:
            sch.vectorize(ji)
        sch.decompose_reduction(block, k)
        self._epilogue(local, jo)

    def _gemv(
        self, block: Any, i: Any, j: Any, k: Any, m: int, operands: _MatmulInfo, lanes: int
    ) -> None:
        sch = self.sch
        kt = _divisor(operands.k, (lanes, lanes // 2, lanes // 4))
        if kt < 4 or operands.k < 2 * kt:  # too short a reduction to split
            return
        _, ki = sch.split(k, [None, kt])
        rf = sch.rfactor(ki, factor_axis=operands.out_rank)
        loops = sch.get_loops(block)
        i, j, kk = loops[-3:]
        io, ii = sch.split(i, [None, _divisor(m, (4, 2))])
        jo, ji = sch.split(j, [None, _divisor(operands.n, (4, 2))])
        sch.reorder(io, jo, ii, ji, kk)
        sch.compute_at(rf, jo)
        roles = _loop_roles(sch, rf, operands.out_rank, jo)
        order = [roles.get(r) for r in ("reduce", "i", "j", "lane")]
        sch.reorder(*[loop for loop in order if loop is not None])
        for role in ("i", "j"):
            if roles.get(role) is not None:
                sch.unroll(roles[role])
        sch.vectorize(roles["lane"])
        sch.decompose_reduction(rf, roles["reduce"])
        sch.unroll(kk)
        self._epilogue(block, jo)

    def _epilogue(self, producer: Any, at: Any) -> None:
        """Computes the consumer of a tile's result at the tile: the copy out
        of the accumulators fused with the (inlined) epilogue chain."""
        sch = self.sch
        target = producer
        consumers = self.blocks.consumers(producer)
        if len(consumers) == 1 and not self.blocks.is_reduction(consumers[0]):
            consumer = consumers[0]
            if self.blocks.is_reduction(producer) or _attempt(lambda: sch.compute_inline(producer)):
                if _attempt(lambda: sch.reverse_compute_at(consumer, at)):
                    target = consumer
        self.placed.add(self.blocks.name(target))
        if self.blocks.is_reduction(target):
            return
        loops = sch.get_loops(target)
        if loops:
            _attempt(lambda: sch.vectorize(loops[-1]))

    # ------------------------------------------------------------ step 3
    def _reduction(self, block: Any) -> None:
        sch = self.sch
        info = sch.get(block)
        loops = sch.get_loops(block)
        kinds = [int(iv.iter_type) for iv in info.iter_vars]
        if len(loops) != len(kinds) or not loops:
            return
        spatial = [lp for lp, kd in zip(loops, kinds, strict=True) if kd == _DATA_PAR]
        reduce = [lp for lp, kd in zip(loops, kinds, strict=True) if kd == _REDUCE]
        store = self.blocks.store(block)
        if len(reduce) != len(loops) - len(spatial) or store is None:
            # Not a single store: a tuple reduction (argmax) binds its results
            # with let statements, which TVM's vectoriser gets wrong.
            return
        dtype = str(store.value.ty)
        lanes = vector_lanes(dtype)
        if spatial and _innermost_is_spatial(sch, block):
            inner = spatial[-1]
            sch.reorder(*spatial[:-1], *reduce, inner)
            extent = int(sch.get(inner).extent)
            vt = _divisor(extent, (lanes, lanes // 2, lanes // 4))
            if vt >= 4:
                _, vi = sch.split(inner, [None, vt])
                sch.vectorize(vi)
                sch.decompose_reduction(block, reduce[0])
            return
        if len(reduce) == 1 and len(info.writes) == 1:
            extent = int(sch.get(reduce[0]).extent)
            kt = _divisor(extent, (lanes, lanes // 2))
            if kt >= 8 and extent >= 2 * kt:
                _, ki = sch.split(reduce[0], [None, kt])
                rank = len(info.writes[0].region)
                rf = sch.rfactor(ki, factor_axis=rank)
                roles = _loop_roles(sch, rf, rank)
                sch.reorder(roles["reduce"], roles["lane"])
                sch.vectorize(roles["lane"])
                sch.decompose_reduction(rf, roles["reduce"])

    # ------------------------------------------------------------ step 4, 5
    def _elementwise(self, block: Any) -> None:
        sch = self.sch
        loops = sch.get_loops(block)
        if not loops:
            return
        store = self.blocks.store(block)
        if store is None:  # see _reduction
            return
        fused = sch.fuse(*loops) if len(loops) > 1 else loops[0]
        dtype = str(store.value.ty)
        lanes = vector_lanes(dtype)
        vt = _divisor(int(sch.get(fused).extent), (lanes, lanes // 2, lanes // 4))
        if vt < 4:
            return
        outer, inner = sch.split(fused, [None, vt])
        if _attempt(lambda: sch.vectorize(inner)):
            self.tile_of[self.blocks.name(block)] = (outer, vt)

    def _compute_at_consumer(self, block: Any) -> bool:
        """[step 5] ``block`` computed at its only consumer's vector tile."""
        sch = self.sch
        if self.blocks.name(block) in self.blocks.outputs():
            return False
        consumers = self.blocks.consumers(block)
        if len(consumers) != 1:
            return False
        tile = self.tile_of.get(self.blocks.name(consumers[0]))
        if tile is None or not _same_domain(sch, block, consumers[0]):
            return False
        outer, _ = tile
        if not _attempt(lambda: sch.compute_at(block, outer)):
            return False
        _attempt(lambda: sch.set_scope(block, 0, "local"))
        loops = sch.get_loops(block)
        _attempt(lambda: sch.vectorize(loops[-1]))
        self.placed.add(self.blocks.name(block))
        self.tile_of[self.blocks.name(block)] = tile
        return True


# ========================================================= matmul facts
class _MatmulInfo:
    """Which iterators and operands of a sum-of-products block play which
    part: output spatial iterators (the last is j), the reduction k, the
    right operand (the one j indexes) and its layout."""

    def __init__(self, **fields: Any) -> None:
        self.__dict__.update(fields)

    spatial: list[int]
    reduce: list[int]
    rhs_index: int
    j_contiguous: bool  # the right operand's innermost index is j
    rhs_on_jk: bool  # the right operand is indexed by j and k only (packable)
    rhs_j_first: bool
    n: int
    k: int
    out_rank: int
    acc_dtype: str


def _matmul_operands(sch: Any, block: Any) -> _MatmulInfo | None:
    """The roles in a block ``C[s] = C[s] + A[..] * B[..]`` with one
    reduction iterator and at least one spatial one, or None."""
    info = sch.get(block)
    store = info.body
    if not isinstance(store, tirx.BufferStore) or len(info.reads) < 2:
        return None
    kinds = [int(iv.iter_type) for iv in info.iter_vars]
    spatial = [k for k, kd in enumerate(kinds) if kd == _DATA_PAR]
    reduce = [k for k, kd in enumerate(kinds) if kd == _REDUCE]
    if len(reduce) != 1 or not spatial or len(sch.get_loops(block)) != len(kinds):
        return None
    value = store.value
    if not isinstance(value, tirx.Add):
        return None
    product = strip_casts(value.b)
    if not isinstance(product, tirx.Mul):
        return None
    lhs, rhs = strip_casts(product.a), strip_casts(product.b)
    if not (isinstance(lhs, _Load) and isinstance(rhs, _Load)):
        return None
    j_var = info.iter_vars[spatial[-1]].var
    k_var = info.iter_vars[reduce[0]].var
    if uses(lhs, j_var) and not uses(rhs, j_var):
        lhs, rhs = rhs, lhs
    if not uses(rhs, j_var) or not uses(rhs, k_var) or not uses(lhs, k_var):
        return None
    reads = [str(r.source.name) for r in info.reads]
    if str(rhs.source.name) not in reads:
        return None
    rhs_vars = [i for i in rhs.indices]
    plain = all(isinstance(i, tirx.Var) for i in rhs_vars)
    return _MatmulInfo(
        spatial=spatial,
        reduce=reduce,
        rhs_index=reads.index(str(rhs.source.name)),
        j_contiguous=_is(rhs_vars[-1], j_var),
        rhs_on_jk=plain and len(rhs_vars) == 2,
        rhs_j_first=plain and _is(rhs_vars[0], j_var),
        n=int(info.iter_vars[spatial[-1]].dom.extent),
        k=int(info.iter_vars[reduce[0]].dom.extent),
        out_rank=len(store.indices),
        acc_dtype=str(store.value.ty),
    )


def _is(e: Any, var: Any) -> bool:
    return isinstance(e, tirx.Var) and e.same_as(var)


def _loop_roles(sch: Any, rf: Any, factor_axis: int, at: Any = None) -> dict[str, Any]:
    """The loops of an rfactor block by role: "lane" (the factored iterator,
    at ``factor_axis`` of the buffer it writes), "j" and "i" (the output's
    last two axes, before it), "reduce" (the rest of the reduction). Only
    loops inside ``at`` (where the block was computed at) count; a role
    whose loop is gone (extent 1) is absent."""
    realize = _get_realize(sch, rf)
    store = realize.block.body
    index = list(store.indices)
    wanted = {"lane": index[factor_axis]}
    if factor_axis >= 1:
        wanted["j"] = index[factor_axis - 1]
    if factor_axis >= 2:
        wanted["i"] = index[factor_axis - 2]
    loops = list(sch.get_loops(rf))
    if at is not None:
        at_loop = sch.get(at)
        inner = [k for k, lp in enumerate(loops) if sch.get(lp).same_as(at_loop)]
        loops = loops[inner[0] + 1 :] if inner else loops
    roles: dict[str, Any] = {}
    for iv, value in zip(realize.block.iter_vars, realize.iter_values, strict=True):
        role = "reduce" if int(iv.iter_type) == _REDUCE else None
        for name, var in wanted.items():
            if _is(var, iv.var):
                role = name
        if role is None:
            continue
        for lp in loops:  # the innermost loop the binding uses
            if uses(value, sch.get(lp).loop_var):
                roles[role] = lp
    return roles


def _innermost_is_spatial(sch: Any, block: Any) -> bool:
    """Whether the block's innermost input index is a spatial iterator (a
    reduction over outer axes), so vectorising it reads contiguous memory."""
    info = sch.get(block)
    spatial_vars = [iv.var for iv in info.iter_vars if int(iv.iter_type) == _DATA_PAR]
    if not spatial_vars:
        return False
    for region in info.reads:
        if str(region.source.name) == str(info.writes[0].source.name):
            continue
        last = region.region[-1].min if len(region.region) else None
        if last is None or not _is(last, spatial_vars[-1]):
            return False
    return True


def _empty(sch: Any, block: Any) -> bool:
    """A block over a domain with an extent of 0 (it computes nothing, or
    only its reduction's initial value)."""
    return any(int(iv.dom.extent) == 0 for iv in sch.get(block).iter_vars)


def _same_domain(sch: Any, producer: Any, consumer: Any) -> bool:
    """Producer and consumer iterate over the same shape (an elementwise
    pair: the consumer's tile needs the same tile of the producer)."""
    a = [int(iv.dom.extent) for iv in sch.get(producer).iter_vars]
    b = [int(iv.dom.extent) for iv in sch.get(consumer).iter_vars]
    return a == b and int(np.prod(a)) > 0


# =================================================================== GPU
KEEP = "effir_keep"
"""Annotation of a block never inlined: a run-time check computed once
(te_checks.py), which inlining would repeat per element."""

ORDERED = "effir_ordered"
"""Annotation of a reduction whose combiner is not associative (integer
``power``'s bit loop): it runs in order, never split across threads."""

GPU_THREADS = 256
"""Threads per block for a loop nest bound by ``_bind_threads``."""


def _schedule_gpu(func: Any, target: Any) -> Any:
    """Inline within the budget (dlight's own fallback inlines every block,
    and a chain of squarings inlined whole is exponential in size), then
    dlight's matmul, GEMV and reduction rules where one applies to the
    whole function, else one thread per output element of each block."""
    from tvm.s_tir import dlight

    sch = s_tir.Schedule(func)
    inline_within_budget(sch)
    blocks = _Blocks(sch)
    anchors = [b for b in blocks.all() if blocks.is_reduction(b)]
    ordered = any(ORDERED in sch.get(b).annotations for b in anchors)
    if len(anchors) == 1 and not ordered:
        rules = (dlight.gpu.Matmul(), dlight.gpu.GEMV(), dlight.gpu.Reduction())
        with target:
            for rule in (*rules, dlight.gpu.GeneralReduction()):
                try:
                    scheduled = rule.apply(sch.mod["main"], target, False)
                except _ILLEGAL:
                    continue
                if scheduled is not None:
                    return scheduled.mod
    _bind_all(sch, blocks)
    return sch.mod


def _bind_all(sch: Any, blocks: _Blocks) -> None:
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
                and _same_domain(sch, block, consumers[0])
                and _attempt(lambda b=block, a=at: sch.compute_at(b, a))
            ):
                _attempt(lambda b=block: sch.set_scope(b, 0, "local"))
                threads[name] = at
                continue
        threads[name] = _bind_threads(sch, blocks, block)
        _localise_private_buffers(sch, blocks, block)


def _localise_private_buffers(sch: Any, blocks: _Blocks, block: Any) -> None:
    """Buffers only ``block`` reads and writes (a tuple reduction's running
    value next to its index) live in its thread's registers."""
    params = {str(b.name) for b in sch.mod["main"].params}
    others = [b for b in blocks.all() if blocks.name(b) != blocks.name(block)]
    read_elsewhere = {str(r.source.name) for b in others for r in sch.get(b).reads}
    for k, region in enumerate(sch.get(block).writes):
        name = str(region.source.name)
        if name not in params and name not in read_elsewhere:
            _attempt(lambda i=k: sch.set_scope(block, i, "local"))


def _bind_threads(sch: Any, blocks: _Blocks, block: Any) -> Any:
    """The block's spatial loops fused and split over blocks of
    ``GPU_THREADS`` threads; its reduction loops run in each thread.
    Returns the thread loop."""
    loops = sch.get_loops(block)
    kinds = [int(iv.iter_type) for iv in sch.get(block).iter_vars]
    spatial = [lp for lp, kd in zip(loops, kinds, strict=False) if kd == _DATA_PAR]
    reduce = [lp for lp, kd in zip(loops, kinds, strict=False) if kd != _DATA_PAR]
    if not spatial:
        spatial = [sch.add_unit_loop(block)]
    sch.reorder(*spatial, *reduce)
    fused = sch.fuse(*spatial) if len(spatial) > 1 else spatial[0]
    threads = min(GPU_THREADS, max(1, int(sch.get(fused).extent)))
    bx, tx = sch.split(fused, [None, threads])
    sch.bind(bx, "blockIdx.x")
    sch.bind(tx, "threadIdx.x")
    return tx
