"""The CPU schedule of a kernel: steps 1-5 of the package docstring."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..common import (
    DATA_PAR,
    ILLEGAL,
    REDUCE,
    Blocks,
    MatmulInfo,
    attempt,
    divisor,
    get_realize,
    is_empty,
    is_var,
    matmul_operands,
    same_domain,
    uses,
    vector_lanes,
)
from ..inline import inline_within_budget
from ..unchecked import unchecked_schedule
from .gemm import packed_gemm


# =================================================================== CPU
class CpuScheduler:
    """Steps 1-5 of the module docstring on one PrimFunc."""

    def __init__(self, func: Any, target: Any = None) -> None:
        self.target = target
        self.sch = unchecked_schedule(func)  # [RULE SCHED-UNCHECKED]
        self.blocks = Blocks(self.sch)
        self.placed: set[str] = set()  # blocks scheduled as part of another's tile
        self.tile_of: dict[str, Any] = {}  # a tiled block's outer vector loop

    def run(self) -> Any:
        inline_within_budget(self.sch)
        self.blocks = Blocks(self.sch)
        blocks = self.blocks.all()
        for block in blocks:
            if is_empty(self.sch, block):  # nothing to speed up; leave TVM's loops alone
                self.placed.add(self.blocks.name(block))
                continue
            if self.blocks.is_reduction(block):
                matmul = matmul_operands(self.sch, block)
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
        except ILLEGAL:
            self.sch = saved
            self.blocks = Blocks(saved)
            self.placed = placed

    # ------------------------------------------------------------ step 1
    # ------------------------------------------------------------ step 2
    def _matmul(self, block: Any, operands: MatmulInfo) -> None:
        sch = self.sch
        packed = packed_gemm(sch, block, self.target)  # a large product (schedule/cpu/gemm.py)
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

    def _pack_rhs(self, block: Any, operands: MatmulInfo) -> None:
        sch = self.sch
        jt = divisor(
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
        ko, ki = sch.split(k, [None, divisor(operands.k, (16, 8, 4, 2))])
        sch.reorder(jo, ko, ki, ji)
        sch.vectorize(ji)

    def _matmul_tiles(
        self, block: Any, i: Any, j: Any, k: Any, m: int, operands: MatmulInfo, lanes: int
    ) -> None:
        sch = self.sch
        it = divisor(m, (4, 2))
        jt = divisor(operands.n, (2 * lanes, lanes, lanes // 2, lanes // 4))
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
        self, block: Any, i: Any, j: Any, k: Any, m: int, operands: MatmulInfo, lanes: int
    ) -> None:
        sch = self.sch
        kt = divisor(operands.k, (lanes, lanes // 2, lanes // 4))
        if kt < 4 or operands.k < 2 * kt:  # too short a reduction to split
            return
        _, ki = sch.split(k, [None, kt])
        rf = sch.rfactor(ki, factor_axis=operands.out_rank)
        loops = sch.get_loops(block)
        i, j, kk = loops[-3:]
        io, ii = sch.split(i, [None, divisor(m, (4, 2))])
        jo, ji = sch.split(j, [None, divisor(operands.n, (4, 2))])
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
            if self.blocks.is_reduction(producer) or attempt(lambda: sch.compute_inline(producer)):
                if attempt(lambda: sch.reverse_compute_at(consumer, at)):
                    target = consumer
        self.placed.add(self.blocks.name(target))
        if self.blocks.is_reduction(target):
            return
        loops = sch.get_loops(target)
        if loops:
            attempt(lambda: sch.vectorize(loops[-1]))

    # ------------------------------------------------------------ step 3
    def _reduction(self, block: Any) -> None:
        sch = self.sch
        info = sch.get(block)
        loops = sch.get_loops(block)
        kinds = [int(iv.iter_type) for iv in info.iter_vars]
        if len(loops) != len(kinds) or not loops:
            return
        spatial = [lp for lp, kd in zip(loops, kinds, strict=True) if kd == DATA_PAR]
        reduce = [lp for lp, kd in zip(loops, kinds, strict=True) if kd == REDUCE]
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
            vt = divisor(extent, (lanes, lanes // 2, lanes // 4))
            if vt >= 4:
                _, vi = sch.split(inner, [None, vt])
                sch.vectorize(vi)
                sch.decompose_reduction(block, reduce[0])
            return
        if len(reduce) == 1 and len(info.writes) == 1:
            extent = int(sch.get(reduce[0]).extent)
            kt = divisor(extent, (lanes, lanes // 2))
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
        vt = divisor(int(sch.get(fused).extent), (lanes, lanes // 2, lanes // 4))
        if vt < 4:
            return
        outer, inner = sch.split(fused, [None, vt])
        if attempt(lambda: sch.vectorize(inner)):
            self.tile_of[self.blocks.name(block)] = (outer, vt)

    def _compute_at_consumer(self, block: Any) -> bool:
        """[step 5] ``block`` computed at its only consumer's vector tile.

        [RULE SCHED-BOOLVEC] A boolean block so placed keeps a scalar loop:
        its local buffer, written and read only as vectors of n lanes, is
        what TVM's ``StorageRewrite`` turns into one ``int8xn`` element
        without converting the accesses, and the build fails ("dtype
        mismatch on BufferStore", a let of ``boolxn`` bound to ``int8xn``).
        Its consumer still runs in vectors; the comparison it computes is
        a few instructions a lane."""
        sch = self.sch
        if self.blocks.name(block) in self.blocks.outputs():
            return False
        consumers = self.blocks.consumers(block)
        if len(consumers) != 1:
            return False
        tile = self.tile_of.get(self.blocks.name(consumers[0]))
        if tile is None or not same_domain(sch, block, consumers[0]):
            return False
        outer, _ = tile
        if not attempt(lambda: sch.compute_at(block, outer)):
            return False
        attempt(lambda: sch.set_scope(block, 0, "local"))
        loops = sch.get_loops(block)
        store = self.blocks.store(block)
        if store is None or str(store.buffer.dtype) != "bool":  # [RULE SCHED-BOOLVEC]
            attempt(lambda: sch.vectorize(loops[-1]))
        self.placed.add(self.blocks.name(block))
        self.tile_of[self.blocks.name(block)] = tile
        return True


def _loop_roles(sch: Any, rf: Any, factor_axis: int, at: Any = None) -> dict[str, Any]:
    """The loops of an rfactor block by role: "lane" (the factored iterator,
    at ``factor_axis`` of the buffer it writes), "j" and "i" (the output's
    last two axes, before it), "reduce" (the rest of the reduction). Only
    loops inside ``at`` (where the block was computed at) count; a role
    whose loop is gone (extent 1) is absent."""
    realize = get_realize(sch, rf)
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
        role = "reduce" if int(iv.iter_type) == REDUCE else None
        for name, var in wanted.items():
            if is_var(var, iv.var):
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
    spatial_vars = [iv.var for iv in info.iter_vars if int(iv.iter_type) == DATA_PAR]
    if not spatial_vars:
        return False
    for region in info.reads:
        if str(region.source.name) == str(info.writes[0].source.name):
            continue
        last = region.region[-1].min if len(region.region) else None
        if last is None or not is_var(last, spatial_vars[-1]):
            return False
    return True


def schedule_cpu(func: Any, target: Any) -> Any:
    """Steps 1-5 on ``func``: the scheduled IRModule."""
    return CpuScheduler(func, target).run()
