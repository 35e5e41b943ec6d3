"""[CLASS] [PACK] [HOIST] The step's TE graph: each operation classed by
what it depends on, contractions' constant right-hand sides repacked into
panels, and the graph split into a prologue (hoisted out of the loop,
batched over the steps) and the step proper."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import tvm
import tvm_ffi
from tvm import te, tirx

from ..schedule.common import vector_lanes
from ..schedule.cpu.gemm import GemmShape, tile, wide_vectors
from ..target import make_target

MATERIALIZE = "effir_materialize"
"""Annotation of a packing block: computed into its own buffer, never inlined."""

ROW_TILE = 8
"""Rows of a contraction's register tile (with two vectors of columns: 16
accumulators of the 32 vector registers)."""

CONST, SEQ, STEP = 0, 1, 2
"""[CLASS] What an operation depends on: captured values only, ``x_t`` (and
captured values), or the state."""


class TensorMap(dict):
    """A dict keyed by TE tensors: ``te.Tensor.__eq__`` builds an expression
    (and raises for scalars), so the key is the producing operation and the
    output index."""

    def __getitem__(self, t: te.Tensor) -> Any:
        return super().__getitem__((t.op, t.value_index))

    def __setitem__(self, t: te.Tensor, value: Any) -> None:
        super().__setitem__((t.op, t.value_index), value)

    def __contains__(self, t: object) -> bool:
        return isinstance(t, te.Tensor) and super().__contains__((t.op, t.value_index))

    def get(self, t: te.Tensor, default: Any = None) -> Any:
        return super().get((t.op, t.value_index), default)


def topological(outputs: Sequence[te.Tensor]) -> list[Any]:
    """The operations ``outputs`` depend on, producers first."""
    order: list[Any] = []
    seen: set[Any] = set()
    stack: list[tuple[Any, bool]] = [(t.op, False) for t in reversed(outputs)]
    while stack:
        op, expanded = stack.pop()
        if expanded:
            order.append(op)
            continue
        if op in seen:
            continue
        seen.add(op)
        stack.append((op, True))
        stack.extend((t.op, False) for t in reversed(list(op.input_tensors)) if t.op not in seen)
    return order


def _substitute(
    expr: Any, var_map: Mapping[Any, Any], load: Callable[[te.Tensor, list], Any]
) -> Any:
    """``expr`` with variables renamed and every tensor read ``T[idx]``
    replaced by ``load(T, idx)``; the producers of ``T`` are not visited."""

    def on_call(call: Any, mutator: Any) -> Any:
        if call.op.name == "te.tensor_load":
            return load(call.args[0], [mutator.mutate(i) for i in call.args[1:]])
        return mutator.default_mutate(call)

    return tvm_ffi.structural_mutate(
        expr, [(tvm.ir.expr.Call, on_call), (tirx.Var, lambda v, _m: var_map.get(v, v))]
    )


def _recompute(
    op: Any, read: Callable[[te.Tensor, list, list], Any], lead: Any | None = None
) -> list[te.Tensor]:
    """``op`` again, reading its inputs through ``read(T, idx, outer)``;
    with ``lead`` (an extent), the result gains a leading axis of that
    extent whose index is passed as ``outer = [t]``."""
    old = [iv.var for iv in op.axis]
    shape = [iv.dom.extent for iv in op.axis]

    def body(*idx: Any) -> Any:
        outer, inner = (list(idx[:1]), list(idx[1:])) if lead is not None else ([], list(idx))
        var_map = dict(zip(old, inner, strict=True))
        values = [_substitute(b, var_map, lambda t, i: read(t, i, outer)) for b in op.body]
        return values if len(values) > 1 else values[0]

    full = ([lead] if lead is not None else []) + shape
    out = te.compute(full, body, name=op.name, tag=op.tag, attrs=op.attrs)
    return list(out) if isinstance(out, list | tuple) else [out]


def _reduce_vars(op: Any) -> list[Any]:
    return [iv.var for iv in op.reduce_axis]


def _pack_width(extent: Any, dtype: str) -> int | None:
    """Columns per packed panel: two vectors, or one, when they divide ``extent``."""
    lanes = vector_lanes(dtype)
    if not isinstance(extent, int | tirx.IntImm):
        return None
    n = int(extent)
    for width in (2 * lanes, lanes):
        if n % width == 0:
            return width
    return None


@dataclass
class Graph:
    """The step's TE graph split into a prologue and the step proper."""

    x: list[te.Tensor]  # step inputs (one per leaf of x_t)
    state: list[te.Tensor]
    captured: list[te.Tensor]  # captured leaves, then constants
    outputs: list[te.Tensor]  # out_t leaves, then new state leaves
    cls: dict[Any, int] = field(default_factory=dict)  # op -> CONST/SEQ/STEP

    def classify(self) -> None:
        """[CLASS] for every operation reachable from the outputs."""
        for ph in self.captured:
            self.cls[ph.op] = CONST
        for ph in self.x:
            self.cls[ph.op] = SEQ
        for ph in self.state:
            self.cls[ph.op] = STEP
        for op in topological(self.outputs):
            if op not in self.cls:
                self.cls[op] = max((self.cls[t.op] for t in op.input_tensors), default=CONST)

    def pack(self) -> None:
        """[PACK] Repack CONST right-hand sides of contractions; rewrites
        ``outputs`` through the rewritten operations."""
        replaced = TensorMap()
        for op in topological(self.outputs):
            if not isinstance(op, te.ComputeOp):
                continue
            inputs_changed = any(t in replaced for t in op.input_tensors)
            contraction = op.reduce_axis and op.axis and self.cls[op] != CONST
            packs = self._packable(op) if contraction else []
            if not packs and not inputs_changed:
                continue
            panels = TensorMap()
            for b, width, k_first in packs:
                panels[b] = (self._panel(b, width, k_first), width, k_first)

            def read(t: te.Tensor, idx: list, outer: list, panels=panels) -> Any:
                if t in panels:  # read as B[n, k] or B[k, n] (_packable)
                    bp, width, k_first = panels[t]
                    n, k = (idx[1], idx[0]) if k_first else (idx[0], idx[1])
                    return bp(tirx.floordiv(n, width), k, tirx.floormod(n, width))
                return replaced.get(t, t)(*idx)

            new = _recompute(op, read)
            cls = self.cls[op]
            for i, t in enumerate(new):
                replaced[op.output(i)] = t
                self.cls[t.op] = cls
        self.outputs = [replaced.get(t, t) for t in self.outputs]

    def _packable(self, op: Any) -> list[tuple[te.Tensor, int, bool]]:
        """CONST 2-d tensors read as ``B[n, k]`` (``n`` the last output
        axis, ``k`` a reduction axis) by the contraction ``op``, or as
        ``B[k, n]`` by one in the step [PACK K]; with the panel's width and
        whether ``k`` is the first axis."""
        n_var = op.axis[-1].var
        reduce_vars = _reduce_vars(op)
        reads = TensorMap()
        tensors: list[te.Tensor] = []

        def on_call(call: Any) -> None:
            if call.op.name == "te.tensor_load":
                t = call.args[0]
                if t not in reads:
                    reads[t] = []
                    tensors.append(t)
                reads[t].append(list(call.args[1:]))

        for b in op.body:
            tvm_ffi.structural_walk(b, (tvm.ir.expr.Call, on_call))
        if self.cls[op] == SEQ and _packed_in_prologue(op):
            return []
        found = []
        for t in tensors:
            uses = reads[t]
            if self.cls.get(t.op) != CONST or len(t.shape) != 2:
                continue
            k_first = False
            if not all(
                idx[0].same_as(n_var) and any(idx[1].same_as(k) for k in reduce_vars)
                for idx in uses
            ):
                # [PACK K] A k-major weight (``nn.matmul``'s ``x @ u``) of a
                # product in the step: packed once a call too. Read where it
                # lies, each step's (32 x 768) (768 x 256) product of the GRU
                # language model's reverse loop streamed the 768 KB weight
                # across rows (50.6 ms of CPU for 100 steps, one thread);
                # scheduled as a kernel's product, it copied the weight at
                # every step (30.1); from panels, 25.6 (bit-identical).
                k_major = all(
                    idx[1].same_as(n_var) and any(idx[0].same_as(k) for k in reduce_vars)
                    for idx in uses
                )
                if not (k_major and self.cls[op] == STEP):
                    continue
                k_first = True
            n_axis = 1 if k_first else 0
            width = _pack_width(t.shape[n_axis], t.dtype)
            if width is not None and int(t.shape[n_axis]) == int(op.axis[-1].dom.extent):
                found.append((t, width, k_first))
        return found

    def _panel(self, b: te.Tensor, width: int, k_first: bool = False) -> te.Tensor:
        n, k = (int(d) for d in b.shape)
        if k_first:
            k, n = n, k
        panel = te.compute(
            (n // width, k, width),
            lambda no, kk, ni: b[kk, no * width + ni] if k_first else b[no * width + ni, kk],
            name=f"{b.op.name}_packed",
            attrs={MATERIALIZE: 1},
        )
        self.cls[panel.op] = CONST
        return panel


def _packed_in_prologue(op: Any) -> bool:
    """[PACK] Whether the SEQ contraction ``op``, hoisted and batched over the
    steps, is a large product the prologue packs as a kernel's, both
    operands into panels (loop/cpu/schedule.py ``_packed_product``,
    schedule/cpu/gemm.py [BATCH]): its weight is then read where it lies, not
    from this module's panels, which that schedule cannot read. One
    reduction axis, each step's product at least
    ``schedule.cpu.gemm.MIN_MULTIPLY_ADDS`` multiply-adds in whole tiles: the
    hidden-256 GRU's input projection at batch 32 (32 x 256 by 256 x 768 a
    step), 64 -> 42 ms of CPU for the whole loop, one thread; at batch 1
    the projection keeps the panels and the register tile."""
    if len(op.reduce_axis) != 1 or len(op.axis) < 2:
        return False
    extents = [iv.dom.extent for iv in op.axis] + [op.reduce_axis[0].dom.extent]
    if not all(isinstance(e, int | tirx.IntImm) for e in extents):
        return False
    *rows, n, k = (int(e) for e in extents)
    shape = GemmShape(math.prod(rows), n, k, None, None, str(op.output(0).dtype))  # type: ignore[arg-type]
    return tile(shape, wide_vectors(make_target("llvm"))) is not None


@dataclass
class Stages:
    """[HOIST] The prologue and the step as TE graphs, with their interfaces."""

    prologue_inputs: list[te.Tensor]  # among x-sequence, captured placeholders
    prologue_outputs: list[te.Tensor]  # hoisted tensors; SEQ ones with a leading T
    hoisted_seq: list[bool]  # per prologue output: has a T axis (read row t)
    step_inputs: list[te.Tensor]  # step placeholders (x, state, captured, hoisted views)
    step_outputs: list[te.Tensor]  # out_t leaves then new state leaves (distinct computes)
    hoisted_views: list[te.Tensor]  # step placeholders of the hoisted tensors, per prologue output
    padded: bool  # the T axis of the prologue's tensors is padded_length(T)


def _copy_of(t: te.Tensor) -> te.Tensor:
    return te.compute(t.shape, lambda *i: t(*i), name="copy")


def padded_length(length: Any) -> Any:
    """[HOIST] The leading extent of batched prologue tensors when a
    contraction's row tile must span steps (``tiles_within_step``):
    ``length`` rounded up to a whole number of tiles, so that the tiling
    needs no bounds test (rows past the end compute from the last step and
    are never read)."""
    return (length + ROW_TILE - 1) // ROW_TILE * ROW_TILE


def tiles_within_step(rows: int) -> bool:
    """Whether ``rows`` rows per step make whole register tiles of 4 to
    ROW_TILE rows (otherwise a batched contraction's tile spans steps)."""
    return any(rows % d == 0 for d in range(4, ROW_TILE + 1))


def hoist(graph: Graph, xs: list[te.Tensor], length: Any, pad: bool = True) -> Stages:
    """[HOIST] Split ``graph``: CONST/SEQ reductions and packings move to the
    prologue (SEQ ones batched over the padded ``length``, reading ``xs``).
    ``pad=False`` (a GPU loop: no register tiles span steps) never pads."""
    cls = graph.cls
    ops = topological(graph.outputs)
    hoisted = [
        op
        for op in ops
        if isinstance(op, te.ComputeOp)
        and cls[op] != STEP
        and op.num_outputs == 1
        and (op.reduce_axis or MATERIALIZE in op.attrs)
    ]

    def spans_steps(op: Any) -> bool:  # a batched reduction whose tile spans steps
        rows = math.prod(int(d) for d in op.output(0).shape[:-1])
        return cls[op] == SEQ and bool(op.reduce_axis) and not tiles_within_step(rows)

    # [RULE LOOPFN-NOPAD] A reduction of step data alone (no weight) whose rows do
    # not tile (a bias gradient's sum over a chunk's rows: one row a step)
    # gains nothing from the prologue, and there it would pad every
    # batched tensor to whole tiles of steps: the GRU language model's
    # chunk loop (10 steps, padded to 16) ran its three large products
    # 1.6 times. It stays in the step unless a hoisted operation reads it.
    stay = {
        op
        for op in hoisted
        if pad and spans_steps(op) and not any(cls[t.op] == CONST for t in op.input_tensors)
    }
    if stay:
        kept = [op for op in hoisted if op not in stay]
        needed = set(topological([op.output(0) for op in kept])) if kept else set()
        hoisted = [op for op in hoisted if op not in stay or op in needed]
    hoisted_set = set(hoisted)
    padded = pad and any(spans_steps(op) for op in hoisted)
    lead = padded_length(length) if padded else length
    # Prologue: every operation a hoisted one needs, SEQ ones batched.
    seq_of = TensorMap(((x.op, x.value_index), xt) for x, xt in zip(graph.x, xs, strict=True))
    pro = TensorMap()

    def pro_tensor(t: te.Tensor) -> te.Tensor:
        return seq_of.get(t, pro.get(t, t))

    for op in topological([op.output(0) for op in hoisted]):
        if not isinstance(op, te.ComputeOp):
            continue
        batched = cls[op] == SEQ

        def read(t: te.Tensor, idx: list, outer: list) -> Any:
            source = pro_tensor(t)
            if t in seq_of:
                step = tirx.min(outer[0], length - 1) if padded else outer[0]
                return source(step, *idx)
            if cls[t.op] == SEQ:
                return source(*outer, *idx)
            return source(*idx)

        for i, t in enumerate(_recompute(op, read, lead if batched else None)):
            pro[op.output(i)] = t
    prologue_outputs = [pro[op.output(0)] for op in hoisted]
    # Step: hoisted tensors become placeholders (a view of row t, or the whole).
    views = TensorMap(
        ((op, 0), te.placeholder(op.output(0).shape, op.output(0).dtype, name=op.name))
        for op in hoisted
    )
    step = TensorMap(views)
    for op in topological(graph.outputs):
        if not isinstance(op, te.ComputeOp) or op in hoisted_set:
            continue
        if any(t in step for t in op.input_tensors):
            for i, t in enumerate(_recompute(op, lambda t, idx, _o: step.get(t, t)(*idx))):
                step[op.output(i)] = t
    step_outputs = []
    for t in graph.outputs:
        t = step.get(t, t)
        if isinstance(t.op, te.PlaceholderOp) or any(t.same_as(o) for o in step_outputs):
            t = _copy_of(t)
        step_outputs.append(t)
    used_ops = set(topological(step_outputs))
    step_inputs = [
        ph for ph in (*graph.x, *graph.state, *graph.captured, *views.values()) if ph.op in used_ops
    ]
    pro_ops = set(topological(prologue_outputs)) if prologue_outputs else set()
    prologue_inputs = [ph for ph in (*xs, *graph.captured) if ph.op in pro_ops]
    return Stages(
        prologue_inputs,
        prologue_outputs,
        [cls[op] == SEQ for op in hoisted],
        step_inputs,
        step_outputs,
        [views[op.output(0)] for op in hoisted],
        padded,
    )
