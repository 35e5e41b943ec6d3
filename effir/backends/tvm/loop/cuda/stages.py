"""[STAGES] The step's TE graph as the stages a persistent kernel computes
one after the other, each operation either a *stage* (its elements are
computed into a buffer, between two barriers) or *inlined* (computed, into
a register, in every element of the stages that read it).

An operation is a stage when it is an output of the step, a reduction, an
operation of several outputs, or an expensive one (``CHEAP_COST`` nodes or
more) that some stage reads inside its reduction (once per step of the
sum) or reads the same element of from several of its own elements (a
broadcast: a key split read by every element of a dropout); every other
operation is inlined. A step output that is only a copy of another
operation (``graph.hoist`` copies an output the step returns twice, the
GRU's ``h_new`` as the output and the new state) is not a stage of its
own: the operation it copies writes both destinations.

For each stage the reads of materialised tensors (stages and the step's
placeholders) are collected *through* the inlined operations it computes:
an index is composed of the inlined reader's index, so that it is an
expression of the stage's own axes and reduction variables
(``Stage.reads``), which the ownership analysis (owners.py) evaluates.
The walks are explicit worklists over the graph's topological order: no
recursion in the program's size."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import tvm
import tvm_ffi
from tvm import te, tirx

from ...runtime.errors import BackendError
from ...schedule.cost import expression_cost
from ..graph import topological

CHEAP_COST = 24
"""Expression nodes below which an operation is always inlined, whoever
reads it and however often (a split, a cast, a scalar constant)."""

MAX_CONTEXTS = 64
"""Places an inlined operation may be computed at (distinct indices in
distinct stages) before it is made a stage of its own, so that a value
read through many paths is computed once."""


@dataclass
class Read:
    """A read of a materialised tensor by a stage: its index, an expression
    of the stage's axis variables and reduction variables."""

    tensor: te.Tensor
    index: list[Any]
    in_reduce: bool


@dataclass(eq=False)
class Stage:
    """One materialised operation of the step."""

    op: Any  # te.ComputeOp
    reads: list[Read] = field(default_factory=list)
    destinations: list[int] = field(default_factory=list)  # step outputs it writes

    @property
    def name(self) -> str:
        return str(self.op.name)

    @property
    def shape(self) -> list[int]:
        return [int(d) for d in self.op.output(0).shape]

    @property
    def axes(self) -> list[Any]:
        return [iv.var for iv in self.op.axis]

    @property
    def reduce_axes(self) -> list[Any]:
        return list(self.op.reduce_axis)

    @property
    def reduce_extent(self) -> int:
        size = 1
        for iv in self.op.reduce_axis:
            size *= int(iv.dom.extent)
        return size

    @property
    def is_reduction(self) -> bool:
        return bool(self.op.reduce_axis)


@dataclass
class StepStages:
    """The stages in topological order, the inlined operations, and for
    each step output the stage that writes it."""

    stages: list[Stage]
    inlined: set[Any]
    writer: list[Stage]  # per step output

    def stage_of(self, op: Any) -> Stage | None:
        for s in self.stages:
            if s.op.same_as(op):
                return s
        return None


def same_tensor(a: te.Tensor, b: te.Tensor) -> bool:
    """Whether two tensors are one operation's same output (``op.output(i)``
    makes a new object at each call, so ``same_as`` cannot tell)."""
    return a.op.same_as(b.op) and int(a.value_index) == int(b.value_index)


def tensor_reads(exprs: Sequence[Any]) -> list[tuple[te.Tensor, list[Any]]]:
    """Every ``T[idx]`` read in ``exprs`` (inside ``Let`` values and
    indices too), in the order met."""
    found: list[tuple[te.Tensor, list[Any]]] = []

    def on_call(call: Any) -> None:
        if call.op.name == "te.tensor_load":
            found.append((call.args[0], list(call.args[1:])))

    for e in exprs:
        tvm_ffi.structural_walk(e, (tvm.ir.expr.Call, on_call))
    return found


def _direct_reads(op: Any) -> list[tuple[te.Tensor, list[Any], bool]]:
    """``op``'s reads, each with whether it sits inside its reduction."""
    out = []
    for body in op.body:
        if isinstance(body, tirx.Reduce):
            inner = [*body.source, body.condition]
            out += [(t, i, True) for t, i in tensor_reads(inner)]
            out += [(t, i, False) for t, i in tensor_reads(list(body.init))]
        else:
            out += [(t, i, False) for t, i in tensor_reads([body])]
    return out


def _uses_any(exprs: Sequence[Any], variables: Sequence[Any]) -> bool:
    wanted = set(variables)
    if not wanted:
        return False
    hit = []

    def on_var(v: Any) -> Any:
        if v in wanted:
            hit.append(v)
            return tvm_ffi.VisitInterrupt(v)
        return None

    for e in exprs:
        tvm_ffi.structural_walk(e, (tirx.Var, on_var))
        if hit:
            return True
    return False


def _substitute_vars(exprs: Sequence[Any], mapping: dict[Any, Any]) -> list[Any]:
    return [tvm_ffi.structural_map(e, (tirx.Var, lambda v: mapping.get(v, v))) for e in exprs]


@dataclass
class _Context:
    """A place an inlined operation is computed: the stage, and the index
    of the operation's element there (over the stage's variables)."""

    stage: Stage
    index: list[Any]
    in_reduce: bool


def _is_copy_of(op: Any) -> te.Tensor | None:
    """The tensor ``op`` copies element for element (``out[i] = src[i]``),
    or None."""
    if not isinstance(op, te.ComputeOp) or op.num_outputs != 1 or op.reduce_axis:
        return None
    body = op.body[0]
    if not (isinstance(body, tvm.ir.expr.Call) and body.op.name == "te.tensor_load"):
        return None
    src, index = body.args[0], list(body.args[1:])
    axes = [iv.var for iv in op.axis]
    if len(index) != len(axes) or not all(i.same_as(a) for i, a in zip(index, axes, strict=True)):
        return None
    if list(src.shape) != list(op.output(0).shape) or src.dtype != op.output(0).dtype:
        return None
    return src


def step_stages(outputs: Sequence[te.Tensor], placeholders: Sequence[te.Tensor]) -> StepStages:
    """[STAGES] The step whose results are ``outputs`` (out_t leaves, then
    the new state's) as stages; ``placeholders`` are its inputs."""
    known_inputs = {ph.op for ph in placeholders}
    ops = topological(outputs)
    for op in ops:
        if isinstance(op, te.PlaceholderOp):
            if op not in known_inputs:
                raise BackendError(f"the loop step reads {op.name}, which it was not given")
        elif not isinstance(op, te.ComputeOp):
            raise BackendError(f"a persistent loop cannot compute {type(op).__name__} {op.name}")
    # A step output that only copies another computed output becomes a
    # second destination of that operation.
    alias: dict[int, te.Tensor] = {}
    for k, t in enumerate(outputs):
        src = _is_copy_of(t.op)
        if src is not None and isinstance(src.op, te.ComputeOp) and src.op.num_outputs == 1:
            alias[k] = src
    written = {t.op for k, t in enumerate(outputs) if k not in alias}
    written |= {src.op for src in alias.values()}
    consumers: dict[Any, list[Any]] = {op: [] for op in ops}
    for op in ops:
        if isinstance(op, te.ComputeOp):
            for t, index, in_reduce in _direct_reads(op):
                consumers[t.op].append((op, t.value_index, index, in_reduce))

    stage_of: dict[Any, Stage] = {}
    contexts: dict[Any, list[_Context]] = {}
    inlined: set[Any] = set()
    for op in reversed(ops):  # consumers before producers
        gathered = _gather_contexts(op, consumers[op], stage_of, contexts)
        if isinstance(op, te.PlaceholderOp):
            for ctx, t in gathered:
                ctx.stage.reads.append(Read(t, ctx.index, ctx.in_reduce))
            continue
        if op in written or _must_materialise(op, gathered):
            stage = stage_of[op] = Stage(op)
            for ctx, t in gathered:
                ctx.stage.reads.append(Read(t, ctx.index, ctx.in_reduce))
        else:
            inlined.add(op)
            contexts[op] = [ctx for ctx, _ in gathered]
    stages = [stage_of[op] for op in ops if op in stage_of]
    writer = []
    for k, t in enumerate(outputs):
        stage = stage_of[alias[k].op if k in alias else t.op]
        stage.destinations.append(k)
        writer.append(stage)
    return StepStages(stages, inlined, writer)


def _gather_contexts(
    op: Any,
    uses: list[tuple[Any, int, list[Any], bool]],
    stage_of: dict[Any, Stage],
    contexts: dict[Any, list[_Context]],
) -> list[tuple[_Context, te.Tensor]]:
    """Where ``op``'s elements are read: directly by a stage, or through
    an inlined reader, at the reader's contexts (indices composed)."""
    gathered: list[tuple[_Context, te.Tensor]] = []
    seen: set[tuple[int, int, str, bool]] = set()
    for reader, value_index, index, in_reduce in uses:
        tensor = op.output(value_index)
        if reader in stage_of:
            places = [_Context(stage_of[reader], index, in_reduce)]
        else:
            axes = [iv.var for iv in reader.axis]
            places = []
            for ctx in contexts.get(reader, []):
                composed = _substitute_vars(index, dict(zip(axes, ctx.index, strict=True)))
                places.append(_Context(ctx.stage, composed, ctx.in_reduce or in_reduce))
        for ctx in places:
            key = (id(ctx.stage), value_index, str(ctx.index), ctx.in_reduce)
            if key not in seen:
                seen.add(key)
                gathered.append((ctx, tensor))
    return gathered


def _must_materialise(op: Any, gathered: list[tuple[_Context, te.Tensor]]) -> bool:
    """Whether ``op`` is a stage of its own ([STAGES])."""
    if op.reduce_axis or op.num_outputs != 1 or any(isinstance(b, tirx.Reduce) for b in op.body):
        return True
    if not gathered:
        return False  # read by nothing computed: never emitted
    if len(gathered) > MAX_CONTEXTS:
        return True
    if expression_cost(op.body[0]).size < CHEAP_COST:
        return False
    for ctx, _ in gathered:
        reduce_vars = [iv.var for iv in ctx.stage.reduce_axes]
        if ctx.in_reduce and _uses_any(ctx.index, reduce_vars):
            return True
        for iv in ctx.stage.op.axis:
            if int(iv.dom.extent) > 1 and not _uses_any(ctx.index, [iv.var]):
                return True
    return False
