"""[LOOP] The loop PrimFunc: the prologue, the state copied into a double
buffer, a serial loop over the steps whose one block binds the scheduled
step's buffers (``match_buffer``) to where their data lives at step ``t``,
the final state copied out; and ``lower_loop``, every step from the body
to that function. [RULE LOOPFN-ALIGN] (the package's docstring) for the buffers'
declared alignment."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import tvm
import tvm_ffi
from tvm import s_tir, te, tirx
from tvm.ir import Range

from ....ir import type_tree
from ....ir.expr import Function, Var
from ....ir.module import IRModule
from ..runtime.errors import BackendError
from .cpu import rows
from .cpu.schedule import schedule
from .evaluate import StepTE
from .graph import ROW_TILE, Graph, Stages, TensorMap, hoist
from .values import Leaf


def _param(name: str, shape: Sequence[Any], dtype: str) -> Any:
    """A loop-function parameter [RULE LOOPFN-ALIGN]."""
    return tirx.decl_buffer(
        list(shape),
        dtype,
        name,
        data_alignment=max(1, tvm.DataType(dtype).bits // 8),
        offset_factor=1,
    )


def _view(buf: Any) -> Any:
    """A buffer like ``buf`` whose offset a ``match_buffer`` binds."""
    return tirx.decl_buffer(
        list(buf.shape),
        buf.dtype,
        buf.name,
        elem_offset=tirx.Var(f"{buf.name}_offset", "int32"),
        data_alignment=max(1, tvm.DataType(buf.dtype).bits // 8),
        offset_factor=1,
    )


def _region(buf: Any, lead: Sequence[Any], span: tuple[Any, int] | None = None) -> Any:
    """``buf[lead..., :, ...]``: the sub-tensor at the leading indices
    ``lead``; with ``span`` (start, count), only those rows of the next axis."""
    rest = list(buf.shape)[len(lead) :]
    ranges = [Range.from_min_extent(i, 1) for i in lead]
    if span is not None:
        ranges.append(Range.from_min_extent(*span))
        rest = rest[1:]
    ranges += [Range.from_min_extent(0, d) for d in rest]
    return tirx.BufferRegion(buf, ranges)


def _copy(dst: Any, dst_lead: Sequence[Any], src: Any, src_lead: Sequence[Any], name: str) -> Any:
    """A block copying ``src[src_lead]`` to ``dst[dst_lead]``."""
    shape = list(dst.shape)[len(dst_lead) :]
    idx = [tirx.Var(f"i{k}", "int32") for k in range(len(shape))]
    stmt: Any = tirx.BufferStore(dst, tirx.BufferLoad(src, [*src_lead, *idx]), [*dst_lead, *idx])
    for var, extent in reversed(list(zip(idx, shape, strict=True))):
        stmt = tirx.For(var, tirx.const(0, "int32"), extent, tirx.ForKind.SERIAL, stmt)
    block = s_tir.SBlock([], [_region(src, src_lead)], [_region(dst, dst_lead)], name, stmt)
    return s_tir.SBlockRealize([], True, block)


def _stage_body(func: Any, mapping: Mapping[Any, Any]) -> tuple[Any, list[Any]]:
    """A stage's statement with its parameter buffers replaced by
    ``mapping``'s, and the buffers it allocates."""
    for param, buf in list(mapping.items()):
        for old, new in zip(param.shape, buf.shape, strict=True):
            if isinstance(old, tirx.Var) and not old.same_as(new):
                mapping = {**mapping, old: new}  # a renewed symbolic length
    root = func.body.block
    body = tvm_ffi.structural_map(root.body, (tirx.Var, lambda v: mapping.get(v, v)))
    return body, list(root.alloc_buffers)


@dataclass
class _Interface:
    """The step's placeholders, in the loop function's parameter order."""

    x: list[te.Tensor]
    state: list[te.Tensor]
    captured: list[te.Tensor]  # captured leaves, then constants
    outputs: list[te.Tensor]  # out_t leaves
    xs: list[te.Tensor]  # the prologue's placeholders of the whole sequences
    length: Any  # T
    invariant: frozenset[int] = frozenset()  # state leaves every step returns unchanged


@dataclass
class RowBlocks:
    """[ROWS] (loop/cpu/rows.py) The step rebuilt for ``rows`` rows, run by ``count``
    blocks of rows in parallel, each through every step."""

    count: int
    rows: int
    step_inputs: list[te.Tensor]  # per stages.step_inputs: the block's placeholder
    step_outputs: list[te.Tensor]
    rowed: list[te.Tensor]  # the stages' step inputs that have the batch's rows


def _loop_function(
    io: _Interface,
    stages: Stages,
    schedule: Callable[..., Any],
    blocks: RowBlocks | None = None,
) -> Any:
    """[LOOP] The PrimFunc ``main(xs..., init..., captured..., outs...,
    final..., hoisted...)``: the prologue, the loop over the scheduled step
    with its buffers bound by ``match_buffer``, the final state. With
    ``blocks`` [ROWS], the loop over the steps runs inside a parallel loop
    over blocks of rows, its step (``blocks``'s, serial) bound to the
    block's rows; its buffers are allocated per block."""
    length = io.length
    xs = [_param(f"xs{i}", [length, *t.shape], t.dtype) for i, t in enumerate(io.x)]
    init = [_param(f"init{i}", t.shape, t.dtype) for i, t in enumerate(io.state)]
    caps = [_param(f"captured{i}", t.shape, t.dtype) for i, t in enumerate(io.captured)]
    outs = [_param(f"outs{i}", [length, *t.shape], t.dtype) for i, t in enumerate(io.outputs)]
    final = [_param(f"final{i}", t.shape, t.dtype) for i, t in enumerate(io.state)]
    hoisted = [
        _param(f"hoisted{i}", t.shape, t.dtype) for i, t in enumerate(stages.prologue_outputs)
    ]
    # [RULE LOOPFN-INVARIANT] a state leaf the step returns unchanged (an
    # accumulator of a reverse loop whose terms are summed after it) is read
    # from ``init`` and copied to ``final`` once, never double-buffered.
    varying = [(i, t) for i, t in enumerate(io.state) if i not in io.invariant]
    doubled = [tirx.decl_buffer([2, *t.shape], t.dtype, f"state{i}") for i, t in varying]
    stmts: list[Any] = []
    allocs: list[Any] = list(doubled)

    if stages.prologue_outputs:
        pro = schedule(te.create_prim_func([*stages.prologue_inputs, *stages.prologue_outputs]))
        sources = TensorMap()
        for ph, buf in zip([*io.xs, *io.captured], [*xs, *caps], strict=True):
            sources[ph] = buf
        params = list(pro.params)
        mapping = {p: sources[ph] for p, ph in zip(params, stages.prologue_inputs, strict=False)}
        mapping.update(zip(params[len(stages.prologue_inputs) :], hoisted, strict=True))
        stmt, extra = _stage_body(pro, mapping)
        stmts.append(stmt)
        allocs += extra
    stmts += [
        _copy(d, [0], init[i], [], f"init{i}") for d, (i, _) in zip(doubled, varying, strict=True)
    ]

    # The step: every parameter buffer bound to where its data lives at step t
    # (and, by row blocks, to the block's rows of the batch).
    t = tirx.Var("t", "int32")
    if blocks is None:
        step = schedule(te.create_prim_func([*stages.step_inputs, *stages.step_outputs]))
        block_rows = None
        rowed = TensorMap()
    else:
        step = schedule(te.create_prim_func([*blocks.step_inputs, *blocks.step_outputs]), False)
        blk = tirx.Var("blk", "int32")
        block_rows = (blk * blocks.rows, blocks.rows)
        rowed = TensorMap(((ph.op, ph.value_index), True) for ph in blocks.rowed)
    sources = TensorMap()
    for ph, buf in zip(io.x, xs, strict=True):
        sources[ph] = (buf, [t])
    for ph, buf in zip([io.state[i] for i, _ in varying], doubled, strict=True):
        sources[ph] = (buf, [tirx.floormod(t, 2)])
    for i in io.invariant:
        sources[io.state[i]] = (init[i], [])
    for ph, buf in zip(io.captured, caps, strict=True):
        sources[ph] = (buf, [])
    for ph, buf, seq in zip(stages.hoisted_views, hoisted, stages.hoisted_seq, strict=True):
        sources[ph] = (buf, [t] if seq else [])
    params = list(step.params)
    places = [(*sources[ph], block_rows if ph in rowed else None) for ph in stages.step_inputs]
    places += [(buf, [t], block_rows) for buf in outs]
    places += [(buf, [tirx.floormod(t + 1, 2)], block_rows) for buf in doubled]
    mapping = {}
    matches, reads, writes = [], [], []
    for k, (param, (buf, lead, span)) in enumerate(zip(params, places, strict=True)):
        region = _region(buf, lead, span)
        (reads if k < len(stages.step_inputs) else writes).append(region)
        if lead or span is not None:
            mapping[param] = _view(param)
            matches.append(s_tir.MatchBufferRegion(mapping[param], region))
        else:
            mapping[param] = buf
    stmt, extra = _stage_body(step, mapping)
    block = s_tir.SBlock([], reads, writes, "step", stmt, match_buffers=matches)
    realize = s_tir.SBlockRealize([], True, block)
    loop = tirx.For(t, tirx.const(0, "int32"), length, tirx.ForKind.SERIAL, realize)
    if blocks is None:
        allocs += extra
        stmts.append(loop)
    else:  # [ROWS] each block's step buffers its own, allocated in the block
        own = s_tir.SBlock([], [], [], "rows", loop, alloc_buffers=extra)
        par = s_tir.SBlockRealize([], True, own)
        stmts.append(
            tirx.For(blk, tirx.const(0, "int32"), blocks.count, tirx.ForKind.PARALLEL, par)
        )
    last = [tirx.floormod(length, 2)]
    stmts += [
        _copy(final[i], [], d, last, f"final{i}")
        for d, (i, _) in zip(doubled, varying, strict=True)
    ]
    stmts += [_copy(final[i], [], init[i], [], f"final{i}") for i in sorted(io.invariant)]

    body = tirx.SeqStmt(stmts) if len(stmts) > 1 else stmts[0]
    root = s_tir.SBlock([], [], [], "root", body, alloc_buffers=allocs)
    params = [*xs, *init, *caps, *outs, *final, *hoisted]
    func = tirx.PrimFunc(params, s_tir.SBlockRealize([], True, root))
    attrs = {"global_symbol": "main", "tirx.noalias": True, "s_tir": True}
    for key, value in attrs.items():
        func = func.with_attr(key, value)
    return func


@dataclass
class LoweredLoop:
    """A whole loop as TIR, before code generation, and what its parameters
    are: ``func(xs..., init..., captured..., constants..., outs..., final...,
    scratch...)`` (see ``_loop_function``)."""

    func: Any  # the PrimFunc
    x: list[Leaf]
    state: list[Leaf]
    captured: list[Leaf]
    constants: list[np.ndarray]
    outputs: list[Leaf]
    scratch: list[tuple[Leaf, bool]]  # prologue results; True: with a leading T
    padded: bool  # that leading axis is padded_length(T)
    unscheduled: list[str]  # blocks left with plain loops (cpu/schedule.py ``schedule``)
    row_blocks: int = 1  # [ROWS] blocks of rows run in parallel through every step

    def scratch_rows(self, length: int) -> int:
        """The rows of the scratch buffers with a leading T, for ``length`` steps."""
        return -(-length // ROW_TILE) * ROW_TILE if self.padded else length


def step_leaves(
    body: Function,
    dims: Mapping[str, int],
    captured: Sequence[Var],
    functions: Mapping[Var, Function],
    module: IRModule | None,
) -> tuple[StepTE, list[Any], list[Any], list[Any], list[Any], list[Any]]:
    """[EVAL] a loop body as TE: the builder and the leaves of x_t, the
    state, the captured values (constants last), out_t and the new state;
    what every whole-loop form starts from."""
    builder = StepTE(dims, captured, functions, module)
    x_ph, s_ph, result = builder.evaluate(body)
    if not isinstance(result, tuple) or len(result) != 2:
        raise BackendError("a loop body returns (out_t, new_state)", body.span)
    out_t, new_state = result
    x_leaves, s_leaves = type_tree.tuple_leaves(x_ph), type_tree.tuple_leaves(s_ph)
    cap_leaves = [t for v in captured for t in type_tree.tuple_leaves(builder.captured[v])]
    cap_leaves += [ph for ph, _ in builder.constants]
    out_leaves, new_leaves = type_tree.tuple_leaves(out_t), type_tree.tuple_leaves(new_state)
    if [(tuple(t.shape), t.dtype) for t in new_leaves] != [
        (tuple(t.shape), t.dtype) for t in s_leaves
    ]:
        raise BackendError("the new state's types differ from the state's", body.span)
    return builder, x_leaves, s_leaves, cap_leaves, out_leaves, new_leaves


def lower_loop(
    body: Function,
    dims: Mapping[str, int],
    captured: Sequence[Var],
    functions: Mapping[Var, Function],
    module: IRModule | None,
    parallel: bool,
) -> LoweredLoop:
    """[EVAL] to [LOOP]: the loop over ``body`` as one scheduled PrimFunc."""
    builder, x_leaves, s_leaves, cap_leaves, out_leaves, new_leaves = step_leaves(
        body, dims, captured, functions, module
    )
    invariant = frozenset(
        i for i, (n, p) in enumerate(zip(new_leaves, s_leaves, strict=True)) if n.same_as(p)
    )
    changed = [n for i, n in enumerate(new_leaves) if i not in invariant]
    graph = Graph(x_leaves, s_leaves, cap_leaves, out_leaves + changed)
    graph.classify()
    graph.pack()
    graph.classify()
    length = tirx.Var("T", "int32")
    xs_ph = [te.placeholder([length, *t.shape], t.dtype, name=f"{t.op.name}_seq") for t in x_leaves]
    stages = hoist(graph, xs_ph, length)
    blocks = _row_blocks(graph, stages) if parallel else None

    unscheduled: list[str] = []
    func = _loop_function(
        _Interface(x_leaves, s_leaves, cap_leaves, out_leaves, xs_ph, length, invariant),
        stages,
        lambda f, threads=parallel: schedule(f, threads, unscheduled),
        blocks,
    )

    def leaf(t: te.Tensor) -> Leaf:
        return Leaf(tuple(int(d) for d in t.shape), str(t.dtype))

    return LoweredLoop(
        func,
        [leaf(t) for t in x_leaves],
        [leaf(t) for t in s_leaves],
        [leaf(t) for t in cap_leaves[: len(cap_leaves) - len(builder.constants)]],
        [data for _, data in builder.constants],
        [leaf(t) for t in out_leaves],
        [
            (Leaf(tuple(int(d) for d in t.shape[1 if seq else 0 :]), str(t.dtype)), seq)
            for t, seq in zip(stages.prologue_outputs, stages.hoisted_seq, strict=True)
        ],
        stages.padded,
        unscheduled,
        blocks.count if blocks is not None else 1,
    )


def _row_blocks(graph: Graph, stages: Stages) -> RowBlocks | None:
    """[ROWS] The step by blocks of rows, when the loop's rows are
    independent and a call's work is worth the pool (loop/cpu/rows.py); else None."""
    batch = rows.batch_of(graph)
    count = rows.row_blocks(batch, rows.step_work(graph), rows.pool_threads())
    if batch is None or count < 2:
        return None
    seq_views = [v for v, seq in zip(stages.hoisted_views, stages.hoisted_seq, strict=True) if seq]
    rowed_ops = {t.op for t in (*graph.x, *graph.state, *seq_views)}
    rowed = [ph for ph in stages.step_inputs if ph.op in rowed_ops]
    made = rows.block_step(stages, rowed, batch // count)
    if made is None:
        return None
    return RowBlocks(count, batch // count, *made, rowed)
