"""What effir's two CPU schedulers share: the vector width, and questions
about TIR expressions.

schedule.py schedules a kernel (a primitive function); loop/cpu_schedule.py
schedules the prologue and the step of a whole loop. They tile and
vectorise differently (a loop's step keeps its state in a double buffer and
its prologue is batched over the steps), but they read the same facts from
the blocks they schedule: how many elements of a dtype fill a vector, and
whether an index expression depends on a loop variable.
"""

from __future__ import annotations

from typing import Any

import tvm
import tvm_ffi
from tvm import tirx

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
