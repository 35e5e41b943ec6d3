"""[ROWS] A loop whose rows are independent, run by blocks of rows across
the thread pool with no barrier per step.

The step of a recurrent cell over a batch (a GRU's) computes row ``r`` of
the new state from row ``r`` of the state and of ``x_t`` and from the
weights only. Such a loop can run as::

    parallel for blk in range(blocks):      # one barrier a call
        for t in range(T):
            step(rows blk * rows .. (blk + 1) * rows)

each thread carrying its rows through every step, where a parallel loop
inside the step would meet a barrier at every step (on a busy machine, a
time slice's wait each: cpu_schedule.PARALLEL_MIN_WORK).

[ROWS CHECK] ``batch_of`` decides it from the step's TE graph (before
hoisting, so that the prologue's products are covered too). Call *rowed*
every tensor that is not CONST (it depends on ``x_t`` or the state). The
loop is row-independent when

- every rowed tensor (``x_t``'s and the state's leaves, every rowed
  operation, every output) has the same leading extent ``B``, the batch;
- every read of a rowed tensor inside an operation is ``R[i0, ...]``,
  where ``i0`` is the reading operation's own leading axis, and ``i0``
  occurs nowhere else in the operation (not in another index, not in a
  condition, not in the index of a CONST tensor);
- no output is CONST.

By induction over the graph, row ``r`` of every rowed tensor is then a
function of row ``r`` of the rowed leaves and of CONST tensors alone,
computed by the same expression whatever the other rows. A reduction over
the batch (``sum(h, axis=0)``) reads ``h[k, ...]`` with ``k`` a reduction
variable; ``nn.dense(w, h)`` (the carry on the right) reads ``h[j, k]``;
a captured tensor indexed by the row (a mask of the batch's shape) uses
``i0`` outside a rowed read: all are refused and keep the serial form.

[ROWS BLOCK] ``block_step`` rebuilds the (hoisted) step for ``rows`` rows:
each rowed placeholder becomes one of ``rows`` rows, each rowed operation
is recomputed with that leading extent (its body unchanged but for the
leading variable), CONST ones are kept whole. Each row's arithmetic is
the same expression as in the full step, so the results are bit-identical
(only the register tiles' count changes, never the order of a sum).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import tvm
from tvm import te, tirx

from ...schedule.common import static_extent, uses
from ..graph import CONST, STEP, Graph, Stages, TensorMap, _substitute, topological
from . import schedule as cpu_schedule
from .schedule import SYMBOLIC_EXTENT

ROW_BLOCK_MIN_ROWS = 4
"""Fewest rows a block may have: a contraction's register tile spans 2 to 8
rows, and a block of fewer rows than a tile computes a thinner tile."""


def _leading(t: te.Tensor) -> int | None:
    return static_extent(t.shape[0]) if len(t.shape) else None


def _reads_own_row(op: Any, rowed: Any) -> bool:
    """Whether every read of a rowed tensor in ``op``'s body is at ``op``'s
    own leading index, which occurs nowhere else [ROWS CHECK]."""
    if not op.axis:
        return False
    i0 = op.axis[0].var
    marker = tirx.Var("row", "int32")
    ok = True

    def load(t: te.Tensor, idx: list) -> Any:
        nonlocal ok
        if not rowed(t):
            return t(*idx)
        if not idx or not idx[0].same_as(marker) or any(uses(i, marker) for i in idx[1:]):
            ok = False
            return t(*idx)
        return t(tirx.const(0, "int32"), *idx[1:])

    for body in op.body:
        rest = _substitute(body, {i0: marker}, load)
        if not ok or uses(rest, marker):
            return False
    return True


def batch_of(graph: Graph) -> int | None:
    """The batch ``B`` when ``graph``'s rows are independent [ROWS CHECK]
    (``graph`` classified), else None."""
    rowed_leaves = [*graph.state, *graph.x]
    if not rowed_leaves:
        return None
    batch = _leading(rowed_leaves[0])
    if batch is None or any(_leading(t) != batch for t in rowed_leaves):
        return None
    if any(graph.cls.get(t.op) == CONST for t in graph.outputs):
        return None

    def rowed(t: te.Tensor) -> bool:
        return graph.cls.get(t.op, CONST) != CONST

    for op in topological(graph.outputs):
        if graph.cls.get(op, CONST) == CONST:
            continue
        if isinstance(op, te.PlaceholderOp):
            if not any(op.same_as(t.op) for t in rowed_leaves):
                return None
            continue
        if not isinstance(op, te.ComputeOp):
            return None
        if not op.axis or static_extent(op.axis[0].dom.extent) != batch:
            return None
        if not _reads_own_row(op, rowed):
            return None
    return batch


def step_work(graph: Graph) -> int:
    """Multiply-adds (or elements) of the operations a step runs (STEP)."""
    work = 0
    for op in topological(graph.outputs):
        if isinstance(op, te.ComputeOp) and graph.cls.get(op) == STEP:
            extents = [iv.dom.extent for iv in (*op.axis, *op.reduce_axis)]
            work += math.prod(static_extent(e) or SYMBOLIC_EXTENT for e in extents)
    return work


def row_blocks(batch: int | None, work: int, threads: int) -> int:
    """How many blocks of rows to run in parallel: up to ``threads``, each
    of at least ROW_BLOCK_MIN_ROWS rows and dividing ``batch``, when a
    call's work (``work`` a step, SYMBOLIC_EXTENT steps) is worth a barrier
    (PARALLEL_MIN_WORK, as any parallel block of the loop); 1: serial."""
    if batch is None or threads < 2 or work * SYMBOLIC_EXTENT < cpu_schedule.PARALLEL_MIN_WORK:
        return 1
    fits = [n for n in range(2, threads + 1) if batch % n == 0 and batch // n >= ROW_BLOCK_MIN_ROWS]
    return max(fits, default=1)


def _body(op: Any, block: TensorMap) -> Any:
    """``op``'s body as a ``te.compute`` function, reading through ``block``."""
    old = [iv.var for iv in op.axis]

    def body(*idx: Any) -> Any:
        var_map = dict(zip(old, idx, strict=True))
        values = [_substitute(b, var_map, lambda t, i: block.get(t, t)(*i)) for b in op.body]
        return values if len(values) > 1 else values[0]

    return body


def block_step(
    stages: Stages, rowed_inputs: Sequence[te.Tensor], rows: int
) -> tuple[list[te.Tensor], list[te.Tensor]] | None:
    """[ROWS BLOCK] The step's inputs and outputs rebuilt for ``rows`` rows
    (``rowed_inputs``: the step's placeholders that have the batch's rows);
    None if the step breaks [ROWS CHECK] (the graph's check makes it hold)."""
    block = TensorMap()
    for ph in rowed_inputs:
        block[ph] = te.placeholder([rows, *ph.shape[1:]], ph.dtype, name=ph.op.name)

    def rowed(t: te.Tensor) -> bool:
        return t in block

    for op in topological(stages.step_outputs):
        if not isinstance(op, te.ComputeOp) or not any(rowed(t) for t in op.input_tensors):
            continue
        if not _reads_own_row(op, rowed):
            return None
        shape = [rows, *(iv.dom.extent for iv in op.axis[1:])]
        out = te.compute(shape, _body(op, block), name=op.name, tag=op.tag, attrs=op.attrs)
        for i, t in enumerate(out if isinstance(out, list | tuple) else [out]):
            block[op.output(i)] = t
    if not all(rowed(t) for t in stages.step_outputs):
        return None
    inputs = [block.get(ph, ph) for ph in stages.step_inputs]
    return inputs, [block[t] for t in stages.step_outputs]


def pool_threads() -> int:
    """The threads of TVM's pool (loop/__init__ sizes it to the cores)."""
    return int(tvm.runtime.num_threads())
