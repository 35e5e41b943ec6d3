"""[COLUMNS] A step whose constant operands overflow one core's L2 but
fit the pool's, at a batch too small for the row split, runs its
contractions split by column panels across TVM's pool.

At batch 1 the step of a recurrent cell is a matrix-vector product with
its recurrent weight (a GRU at hidden 256: 768 x 256 float32, 786 KB,
packed into panels). Run by one core, whose L2 holds 512 KB (AMD Zen 3),
the weight streams from L3 at every step (about 33 us a step, 24 GB/s).
Split over two threads by column panels, each thread computes the same
half of the columns at every step (TVM's parallel loop hands each task a
fixed contiguous range), so each thread's half of the weight (393 KB)
stays in its own core's L2 across steps. The cost is one barrier a step
(the state must be whole before the next step reads it), which a busy
machine can make wait a time slice (cpu_schedule.PARALLEL_MIN_WORK): the
criterion below is about caches and work, not load. Each output element
is computed by the same expression, its sum in the same order, as in the
serial step (only which thread runs a register tile changes): results are
bit-identical (tests/backends/tvm/test_loop_columns.py).

[COLUMNS CHECK] ``split_columns`` decides from the step's TE graph and
the machine's caches: the bytes of the step's constant operands (the
packed weights and captured values it reads) exceed ``L2_FILL`` of one
core's L2 and fit in ``L2_FILL`` of each of the pool's distinct L2s when
shared equally; the step's contractions have fewer rows than the row
split needs (two blocks of ``rows.ROW_BLOCK_MIN_ROWS``); their
multiply-adds reach ``STEP_SPLIT_MIN_WORK`` a step. The caches are read
from Linux's sysfs (``/sys/devices/system/cpu/cpuN/cache``) for the CPUs
the pool's threads may run on; where they cannot be read (another OS, a
container hiding sysfs), the step stays serial.
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import tvm
from tvm import te

from ..schedule_common import static_extent
from .graph import Stages, topological
from .rows import ROW_BLOCK_MIN_ROWS

L2_FILL = 7 / 8
"""The part of an L2 cache a step's constant operands may fill and still
be said to stay there: the rest is for the state, the gates' buffers, the
input row and what the cache's associativity wastes. The hidden-256
GRU's half weight fills 393 of a Zen 3 core's 512 KB (0.77)."""

STEP_SPLIT_MIN_WORK = 1 << 16
"""Fewest multiply-adds a step's contractions must have to be split: a
barrier costs a few microseconds on an idle machine (TVM's pool wakes its
spinning worker and waits for it), about what 2**16 multiply-adds whose
operand streams from L2 (8 floats a cycle at best) take on one core; half
of it is what the second core saves. The hidden-32 GRU's step (3,072)
stays serial whatever the caches; the hidden-256 step has 196,608."""

SYSFS_CPU = Path("/sys/devices/system/cpu")


@dataclass(frozen=True)
class L2Caches:
    """The L2 caches the pool's threads run on: the smallest one's bytes
    and how many distinct caches there are (two threads on SMT siblings
    share one)."""

    size: int
    count: int


def _bytes(text: str) -> int:
    """sysfs's cache size (``512K``, ``1M``, ``32768K``) in bytes."""
    text = text.strip().upper()
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
    return int(text.rstrip("KMG")) * scale


def read_l2(cpus: Sequence[int], root: Path = SYSFS_CPU) -> L2Caches | None:
    """The L2 caches (unified or data) of ``cpus``, from sysfs under
    ``root``; None when any cannot be read."""
    caches: dict[str, int] = {}
    try:
        for cpu in cpus:
            found = None
            for index in sorted((root / f"cpu{cpu}" / "cache").glob("index*")):
                level = (index / "level").read_text().strip()
                kind = (index / "type").read_text().strip()
                if level == "2" and kind in ("Unified", "Data"):
                    shared = (index / "shared_cpu_list").read_text().strip()
                    found = (shared, _bytes((index / "size").read_text()))
                    break
            if found is None:
                return None
            caches[found[0]] = found[1]
    except (OSError, ValueError):
        return None
    if not caches:
        return None
    return L2Caches(min(caches.values()), len(caches))


def pool_cpus(threads: int) -> list[int]:
    """The CPUs TVM's pool of ``threads`` threads runs on: the first of
    those this process may use (loop/__init__ sizes the pool to them)."""
    affinity = getattr(os, "sched_getaffinity", None)  # Linux only
    cpus = sorted(affinity(0)) if affinity else list(range(os.cpu_count() or 1))
    return cpus[:threads]


@functools.cache
def pool_l2(threads: int) -> L2Caches | None:
    """The L2 caches of the pool's CPUs (read once a process)."""
    return read_l2(pool_cpus(threads))


@dataclass(frozen=True)
class StepFacts:
    """What [COLUMNS CHECK] reads from a step."""

    const_bytes: int  # the constant operands the step reads at every step
    rows: int  # the most rows of a contraction of the step (0: none)
    work: int  # multiply-adds of the step's contractions


def _nbytes(t: te.Tensor) -> int:
    elements = math.prod(static_extent(d) or 0 for d in t.shape)
    return elements * max(1, tvm.DataType(str(t.dtype)).bits // 8)


def step_facts(stages: Stages, captured: Sequence[te.Tensor]) -> StepFacts:
    """[COLUMNS CHECK]'s facts of ``stages``' step; ``captured``: the
    loop's captured leaves (constants included)."""
    const_views = [
        v for v, seq in zip(stages.hoisted_views, stages.hoisted_seq, strict=True) if not seq
    ]
    const_ops = {t.op for t in (*captured, *const_views)}
    const_bytes = sum(_nbytes(ph) for ph in stages.step_inputs if ph.op in const_ops)
    rows, work = 0, 0
    for op in topological(stages.step_outputs):
        if isinstance(op, te.ComputeOp) and op.reduce_axis and op.axis:
            spatial = [static_extent(iv.dom.extent) or 0 for iv in op.axis]
            reduce = [static_extent(iv.dom.extent) or 0 for iv in op.reduce_axis]
            rows = max(rows, math.prod(spatial[:-1]))
            work += math.prod(spatial) * math.prod(reduce)
    return StepFacts(const_bytes, rows, work)


def split_columns(facts: StepFacts, threads: int, l2: L2Caches | None) -> bool:
    """[COLUMNS CHECK]: whether the step's contractions run split by column
    panels across the pool (``threads`` threads on ``l2``'s caches)."""
    if threads < 2 or l2 is None or l2.count < 2 or facts.rows == 0:
        return False
    if facts.rows >= 2 * ROW_BLOCK_MIN_ROWS or facts.work < STEP_SPLIT_MIN_WORK:
        return False  # the row split's regime, or too little work for a barrier
    room = L2_FILL * l2.size
    shared = min(threads, l2.count)
    return room < facts.const_bytes <= room * shared


def decide(stages: Stages, captured: Sequence[te.Tensor], threads: int) -> bool:
    """[COLUMNS] for a loop the row split left serial (function.lower_loop)."""
    return split_columns(step_facts(stages, captured), threads, pool_l2(threads))
