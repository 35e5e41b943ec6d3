"""What effir's schedulers share: the vector width, questions about TIR
expressions, and facts about a schedule's blocks.

schedule/cpu/kernel.py and schedule/cuda/kernel.py schedule a kernel (a
primitive function); loop/cpu/schedule.py schedules the prologue and the
step of a whole loop. They tile and
vectorise differently (a loop's step keeps its state in a double buffer and
its prologue is batched over the steps), but they read the same facts from
the blocks they schedule: how many elements of a dtype fill a vector, and
whether an index expression depends on a loop variable.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import tvm
import tvm_ffi
from tvm import s_tir, tirx
from tvm_ffi import get_global_func

VECTOR_BYTES = 64
"""Bytes per vector register (AVX-512); LLVM splits each vector on a
narrower CPU, which costs little."""


def vector_lanes(dtype: str) -> int:
    """Elements of ``dtype`` per vector register (a ``bool`` counts a byte)."""
    return max(1, VECTOR_BYTES // max(1, tvm.DataType(dtype).bits // 8))


def uses(expr: Any, var: Any) -> bool:
    """Whether the TIR expression ``expr`` reads the variable ``var``."""
    hit = tvm_ffi.structural_walk(
        expr, (tirx.Var, lambda v: tvm_ffi.VisitInterrupt(v) if v.same_as(var) else None)
    )
    return hit is not None


def strip_casts(expr: Any) -> Any:
    """``expr`` under any casts around it."""
    while isinstance(expr, tirx.Cast):
        expr = expr.value
    return expr


def static_extent(extent: Any) -> int | None:
    """An extent's value when it is a constant, else None (a symbolic one)."""
    return int(extent) if isinstance(extent, tirx.IntImm | int) else None


# ============================================================ block facts
get_realize = get_global_func("s_tir.schedule.GetSBlockRealize")


ScheduleError = s_tir.ScheduleError


DATA_PAR, REDUCE = 0, 2  # tirx.IterVar kinds


Load = tvm.ir.expr.TensorLoad  # a buffer element read (BufferLoad before TVM 0.27)


# ============================================================ block facts
class Blocks:
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
        return any(int(iv.iter_type) == REDUCE for iv in self.sch.get(block).iter_vars)

    def consumers(self, block: Any) -> list[Any]:
        return list(self.sch.get_consumers(block))

    def producers(self, block: Any) -> list[Any]:
        return list(self.sch.get_producers(block))

    def store(self, block: Any) -> Any:
        body = self.sch.get(block).body
        return body if isinstance(body, tirx.BufferStore) else None


def divisor(extent: int, candidates: tuple[int, ...]) -> int:
    """The first candidate that divides ``extent`` (1 if none does)."""
    for c in candidates:
        if c >= 1 and extent % c == 0:
            return c
    return 1


ILLEGAL = (ScheduleError, tvm.error.InternalError, ValueError)


def attempt(action: Callable[[], Any]) -> bool:
    """Whether ``action()`` succeeded; False where TVM finds the step
    illegal (the schedule is then unchanged: primitives are atomic)."""
    try:
        action()
    except ILLEGAL:
        return False
    return True


# ========================================================= matmul facts
class MatmulInfo:
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


def matmul_operands(sch: Any, block: Any) -> MatmulInfo | None:
    """The roles in a block ``C[s] = C[s] + A[..] * B[..]`` with one
    reduction iterator and at least one spatial one, or None."""
    info = sch.get(block)
    store = info.body
    if not isinstance(store, tirx.BufferStore) or len(info.reads) < 2:
        return None
    kinds = [int(iv.iter_type) for iv in info.iter_vars]
    spatial = [k for k, kd in enumerate(kinds) if kd == DATA_PAR]
    reduce = [k for k, kd in enumerate(kinds) if kd == REDUCE]
    if len(reduce) != 1 or not spatial or len(sch.get_loops(block)) != len(kinds):
        return None
    value = store.value
    if not isinstance(value, tirx.Add):
        return None
    product = strip_casts(value.b)
    if not isinstance(product, tirx.Mul):
        return None
    lhs, rhs = strip_casts(product.a), strip_casts(product.b)
    if not (isinstance(lhs, Load) and isinstance(rhs, Load)):
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
    return MatmulInfo(
        spatial=spatial,
        reduce=reduce,
        rhs_index=reads.index(str(rhs.source.name)),
        j_contiguous=is_var(rhs_vars[-1], j_var),
        rhs_on_jk=plain and len(rhs_vars) == 2,
        rhs_j_first=plain and is_var(rhs_vars[0], j_var),
        n=int(info.iter_vars[spatial[-1]].dom.extent),
        k=int(info.iter_vars[reduce[0]].dom.extent),
        out_rank=len(store.indices),
        acc_dtype=str(store.value.ty),
    )


def is_var(e: Any, var: Any) -> bool:
    return isinstance(e, tirx.Var) and e.same_as(var)


def is_empty(sch: Any, block: Any) -> bool:
    """A block over a domain with an extent of 0 (it computes nothing, or
    only its reduction's initial value)."""
    return any(_static(iv.dom.extent) == 0 for iv in sch.get(block).iter_vars)


def same_domain(sch: Any, producer: Any, consumer: Any) -> bool:
    """Producer and consumer iterate over the same shape (an elementwise
    pair: the consumer's tile needs the same tile of the producer)."""
    a = [iv.dom.extent for iv in sch.get(producer).iter_vars]
    b = [iv.dom.extent for iv in sch.get(consumer).iter_vars]
    if len(a) != len(b):
        return False
    if not all(
        tvm_ffi.structural_equal(x, y, map_free_vars=False) for x, y in zip(a, b, strict=True)
    ):
        return False
    # a symbolic extent (a loop prologue's steps) is the same on both sides:
    # when it is 0 at run time neither block runs
    return all(_static(x) != 0 for x in a)


def _static(extent: Any) -> int | None:
    """An extent's value when it is static, None when it is symbolic."""
    return int(extent) if isinstance(extent, tirx.IntImm) else None


# =================================================================== GPU
KEEP = "effir_keep"
"""Annotation of a block never inlined: a run-time check computed once
(kernel/checks.py), which inlining would repeat per element."""


ORDERED = "effir_ordered"
"""Annotation of a reduction whose combiner is not associative (integer
``power``'s bit loop): it runs in order, never split across threads."""
