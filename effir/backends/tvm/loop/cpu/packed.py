"""[PACKED] A whole loop over a packed batch of sequences of different
lengths: one compiled function whose step runs only the rows still active.

Purpose
-------
A batch of sequences padded to the longest and run by ``cf.foreach``
computes every row at every step: 64 sequences of lengths 1-200 cost
12,736 row-steps for the 6,834 that matter. Sorted longest first, the
sequences still running at step ``t`` are the first ``n_t`` rows, ``n_t``
non-increasing (PyTorch's ``PackedSequence`` calls it ``batch_sizes``).
``PackedLoop`` compiles the loop body once, for a tile of ``tile`` rows
(4 or 8: the batch dimension bound to it), and runs it in one TIR
function::

    packed weights                    # the constant part of the prologue, once
    parallel for p in range(parts):   # [PARTS] 1 (serial) or the pool's threads
      for c in range(ceil(T / 16)):   # [CHUNK] chunks of CHUNK_STEPS steps
        start = first[p, 16 c]
        hoisted[p, :] = projections of rows[index[start : first[p, 16 (c + 1)]]]  # [GATHER]
        for t in range(16 c, min(T, 16 (c + 1))):
            for k in range(first[p, t + 1] - first[p, t]):   # p's active tiles only
                g = first[p, t] + k             # the tile's place in the packed rows
                j = mine[p, k]                  # its row tile
                step(hoisted[p, g - start], state[t % 2, j] -> state[(t + 1) % 2, j], outs[g])
                for r in tile j's rows that end at t (n[t + 1] <= r < n[t]):
                    final[r] = state[(t + 1) % 2, r]

``n``, ``first`` (each part's first tile at each step) and ``mine`` (each
part's row tiles, longest first) are data (int32 buffers), so one build
serves every batch and every set of lengths; nothing is called per step
and no step computes a tile whose rows have all finished. A row
that has finished but shares a tile with an active row is computed (its
state drifts), which is why a row's final state is copied out at the step
it ends. Rows must not interact (each row of the new state depends on the
same row of ``x_t`` and of the state only), as in every recurrent cell
over a batch; a body whose captured values have the batch dimension is
refused.

[GATHER] The packed rows are tile ``g``'s ``rows[index[g, k]]``, read
from the caller's rows through the index inside the prologue's products
(no copy); a step's last tile repeats its last active row (computed,
never read). An element of ``x_t`` the step reads itself is gathered into
a chunk buffer of its own. ``PackedLoop`` makes the index for a padded
batch ``(T, B, ...)`` with lengths (``__call__``, any order) or PyTorch's
packed layout (``run_packed``: the rows of every step, step after step),
once per set of lengths (``_Plan``). The per-step outputs are computed
into the packed layout and put back in the caller's (``outputs=True``).

[CHUNK] The projections are hoisted per chunk of steps, into buffers of
one chunk that stay in cache until its steps read them; the weights are
packed once.

[PARTS] Rows are independent, so the row tiles can be split between
threads for the whole call, each thread carrying its tiles through every
chunk and step (the chunk's projections of its tiles only, into buffers
of its own) with one barrier a call, as rows.py runs the padded loop's
rows. The host assigns the tiles (``_Plan.layout``): longest first, each
to the part with the fewest tile-steps so far, and packs the tiles part
after part, so a part's chunk is one range of packed tiles. Each row's
arithmetic is the same whatever its part (the step and the projections
are the same kernels, serial inside a part), so the results are
bit-identical to the serial loop's. ``PackedLoop.parts`` decides per call:
the pool's threads when the call's work (tile-steps times ``tile_work``)
reaches cpu_schedule.PARALLEL_MIN_WORK (a barrier's worth on a busy
machine, as rows.row_blocks decides), else 1; one build per count of parts.

TVM 0.27: every loop here starts at 0 (a ``For`` with another start
around the step's block computed wrong results after s_tir's lowering);
the chunk's buffers are allocated in the prologue's own block, where the
chunk's tile count is bound.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import tvm
import tvm_ffi
from tvm import s_tir, te, tirx
from tvm.ir import Range

from .....ir import type_tree
from .....ir.expr import Function, Var
from .....ir.module import IRModule
from .....ir.types import FuncType, TensorType
from .....ir.visitor import free_vars
from .....runtime.packed_scan import PackedScan, PackedScanError
from ...runtime.errors import BackendError
from ...schedule.common import static_extent
from ...target import make_target
from ..build import _Argument, _compile, _Compiled
from ..function import _param, _region, _stage_body, _view, step_leaves
from ..graph import CONST, ROW_TILE, Graph, TensorMap, _recompute, hoist, topological
from ..values import Leaf, bind_dims
from . import rows
from . import schedule as cpu_schedule
from .schedule import ACCUMULATORS, SYMBOLIC_EXTENT, accumulators, schedule

PLANS_KEPT = 16
"""Plans (the packing of one set of lengths) a loop keeps, per thread."""

CHUNK_STEPS = 16
"""Steps per chunk [CHUNK]: the input projections of 16 steps at batch 64
(a 768 KiB buffer for hidden 64) stay in the L2 cache until the steps read
them; those of 199 steps (9.8 MiB) would not (15 % slower)."""


@dataclass
class LoweredPacked:
    """The packed loop as TIR and its parameters: ``func(rows..., index,
    captured..., constants..., outs..., sizes, first, mine, state...,
    final..., hoisted...)``; ``parts`` [PARTS] the row tiles' owners, run
    in parallel (1: serial)."""

    func: Any
    x: list[Leaf]  # per tile: (ROW_TILE, ...)
    state: list[Leaf]
    captured: list[Leaf]
    constants: list[np.ndarray]
    outputs: list[Leaf]
    scratch: list[tuple[Leaf, bool]]  # prologue results; True: one per tile
    parts: int = 1


def _block(stmt: Any, name: str, reads: list[Any], writes: list[Any], matches=()) -> Any:
    block = s_tir.SBlock([], reads, writes, name, stmt, match_buffers=list(matches))
    return s_tir.SBlockRealize([], True, block)


def _whole(buf: Any) -> Any:
    return tirx.BufferRegion(buf, [Range.from_min_extent(0, d) for d in buf.shape])


def lower_packed(
    body: Function,
    dims: Mapping[str, int],
    captured: Sequence[Var],
    functions: Mapping[Var, Function],
    module: IRModule | None,
    parallel: bool,
    parts: int = 1,
) -> LoweredPacked:
    """[EVAL] to [HOIST] as ``lower_loop`` (the batch dimension bound to the
    tile in ``dims``), then the packed loop function, its tiles owned by
    ``parts`` parallel parts [PARTS] (1: serial; the stages inside the
    loop are then serial whatever ``parallel`` says: ``parallel`` lets the
    weights' packing, once a call, use the pool)."""
    builder, x_leaves, s_leaves, cap_leaves, out_leaves, new_leaves = step_leaves(
        body, dims, captured, functions, module
    )
    graph = Graph(x_leaves, s_leaves, cap_leaves, out_leaves + new_leaves)
    graph.classify()
    graph.pack()
    graph.classify()
    tile = int(x_leaves[0].shape[0]) if x_leaves else ROW_TILE
    # [GATHER] A chunk's packed rows, read from the caller's rows through
    # the index (tiles ``c0`` to ``c0 + chunk``): fused into the products.
    tiles, chunk, c0 = tirx.Var("G", "int32"), tirx.Var("chunk", "int32"), tirx.Var("c0", "int32")
    rows_in = tirx.Var("N", "int32")
    flat_ph = [
        te.placeholder([rows_in, *t.shape[1:]], t.dtype, name=f"{t.op.name}_rows") for t in x_leaves
    ]
    index_ph = te.placeholder([tiles, tile], "int32", name="index")

    def gather(src: te.Tensor, t: te.Tensor) -> te.Tensor:
        return te.compute(
            [chunk, *t.shape],
            lambda g, k, *i: src[index_ph[c0 + g, k], *i],
            name=f"{t.op.name}_gathered",
        )

    xs_seq = [gather(src, t) for src, t in zip(flat_ph, x_leaves, strict=True)]
    stages = hoist(graph, xs_seq, chunk)
    if stages.padded:  # a tile of ROW_TILE rows always fills the register tile
        raise BackendError("a packed loop's step does not fill a register tile", body.span)
    # An x leaf the step reads itself (not only through hoisted products) is
    # gathered into a buffer of its own, chunk by chunk.
    step_ops = {ph.op for ph in stages.step_inputs}
    gathered = [(x, seq) for x, seq in zip(x_leaves, xs_seq, strict=True) if x.op in step_ops]
    outputs = [*stages.prologue_outputs, *(seq for _, seq in gathered)]
    per_tile = [*stages.hoisted_seq, *(True for _ in gathered)]
    # [CHUNK] The constant part of the prologue (packed weights) runs once;
    # the part per step runs per chunk of CHUNK_STEPS steps, into buffers
    # of one chunk, which stay in cache until its steps read them.
    consts = [t for t, seq in zip(outputs, per_tile, strict=True) if not seq]
    seqs = [t for t, seq in zip(outputs, per_tile, strict=True) if seq]
    const_inputs = TensorMap(
        ((t.op, 0), te.placeholder(t.shape, t.dtype, t.op.name)) for t in consts
    )
    rebuilt = TensorMap(const_inputs)
    for op in topological(seqs):
        if isinstance(op, te.ComputeOp) and (op, 0) not in const_inputs:
            if any(t in rebuilt for t in op.input_tensors):
                new = _recompute(op, lambda t, idx, _o: rebuilt.get(t, t)(*idx))
                for i, t in enumerate(new):
                    rebuilt[op.output(i)] = t
    seqs_rebuilt = [rebuilt.get(t, t) for t in seqs]
    unscheduled: list[str] = []

    def sched(f: Any, threads: bool = False) -> Any:
        return schedule(f, threads, unscheduled)

    marks, row_tiles = tirx.Var("T1", "int32"), tirx.Var("NT", "int32")
    steps = marks - 1  # sizes and first have an entry past the last step
    room = tirx.Var("room", "int32")  # tiles a chunk's buffers hold
    flat = [_param(f"rows{i}", ph.shape, ph.dtype) for i, ph in enumerate(flat_ph)]
    index = _param("index", [tiles, tile], "int32")
    caps = [_param(f"captured{i}", t.shape, t.dtype) for i, t in enumerate(cap_leaves)]
    outs = [_param(f"outs{i}", [tiles, *t.shape], t.dtype) for i, t in enumerate(out_leaves)]
    sizes = _param("sizes", [marks], "int32")
    first = _param("first", [parts, marks], "int32")
    mine = _param("mine", [parts, tirx.Var("M", "int32")], "int32")
    state = [_param(f"state{i}", [2, row_tiles, *t.shape], t.dtype) for i, t in enumerate(s_leaves)]
    final = [_param(f"final{i}", [row_tiles, *t.shape], t.dtype) for i, t in enumerate(s_leaves)]
    const_bufs = [_param(f"hoisted{i}", t.shape, t.dtype) for i, t in enumerate(consts)]
    seq_bufs = [
        _param(f"chunk{i}", [parts, room, *list(t.shape)[1:]], t.dtype) for i, t in enumerate(seqs)
    ]
    buffer_of = TensorMap()
    for ph, buf in zip([*flat_ph, index_ph, *cap_leaves], [*flat, index, *caps], strict=True):
        buffer_of[ph] = buf
    for t, buf in zip(const_inputs.values(), const_bufs, strict=True):
        buffer_of[t] = buf
    stmts: list[Any] = []
    allocs: list[Any] = []

    def stage(
        outputs: list[te.Tensor],
        buffers: list[Any],
        scalars: dict[Any, Any],
        threads: bool = False,
        matches: Sequence[Any] = (),
    ) -> Any:
        """The scheduled stage computing ``outputs`` into ``buffers``, with
        ``scalars``' variables (``c0`` a parameter, ``chunk`` a dimension)
        replaced by their values: its buffers' shapes are left as declared
        (a chunk's buffers hold ``room`` tiles, the stage writes ``chunk``)."""
        used = set(topological(outputs))
        inputs = [ph for ph in buffer_of_keys() if ph.op in used]
        arguments = [v for v in scalars if v.same_as(c0)]
        func = sched(te.create_prim_func([*inputs, *outputs, *arguments]), threads)
        params = list(func.params)
        mapping: dict[Any, Any] = dict(zip(params, [buffer_of[ph] for ph in inputs], strict=False))
        mapping.update(zip(params[len(inputs) : len(inputs) + len(outputs)], buffers, strict=True))
        mapping.update(zip(params[len(inputs) + len(outputs) :], arguments, strict=True))
        mapping.update(scalars)
        root = func.body.block
        body = tvm_ffi.structural_map(root.body, (tirx.Var, lambda v: mapping.get(v, v)))
        # Its own block, whose buffers (sized by ``chunk``) are allocated
        # where ``chunk`` is bound.
        block = s_tir.SBlock(
            [], [], [], "prologue", body, alloc_buffers=root.alloc_buffers, match_buffers=matches
        )
        return s_tir.SBlockRealize([], True, block)

    def buffer_of_keys() -> list[te.Tensor]:
        return [*flat_ph, index_ph, *cap_leaves, *const_inputs.values()]

    if consts:
        stmts.append(stage(consts, const_bufs, {}, parallel))

    t, j, g = tirx.Var("t", "int32"), tirx.Var("j", "int32"), tirx.Var("g", "int32")
    c, start, local = tirx.Var("c", "int32"), tirx.Var("start", "int32"), tirx.Var("l", "int32")
    p, slot = tirx.Var("p", "int32"), tirx.Var("k", "int32")
    step = sched(te.create_prim_func([*stages.step_inputs, *stages.step_outputs]))
    where = TensorMap()
    chunk_of, const_of = TensorMap(), TensorMap()
    for x, buf in zip(seqs, seq_bufs, strict=True):
        chunk_of[x] = buf
    for x, buf in zip(consts, const_bufs, strict=True):
        const_of[x] = buf
    for (ph, _), in_chunk in zip(gathered, seqs[len(seqs) - len(gathered) :], strict=True):
        where[ph] = (chunk_of[in_chunk], [p, local])
    for ph, buf in zip(s_leaves, state, strict=True):
        where[ph] = (buf, [tirx.floormod(t, 2), j])
    for ph, buf in zip(cap_leaves, caps, strict=True):
        where[ph] = (buf, [])
    for ph, out in zip(stages.hoisted_views, stages.prologue_outputs, strict=True):
        where[ph] = (chunk_of[out], [p, local]) if out in chunk_of else (const_of[out], [])
    places = [where[ph] for ph in stages.step_inputs]
    places += [(buf, [g]) for buf in outs]
    places += [(buf, [tirx.floormod(t + 1, 2), j]) for buf in state]
    mapping, matches, reads, writes = {}, [], [], []
    for k, (param, (buf, lead)) in enumerate(zip(step.params, places, strict=True)):
        region = _region(buf, lead)
        (reads if k < len(stages.step_inputs) else writes).append(region)
        if lead:
            mapping[param] = _view(param)
            matches.append(s_tir.MatchBufferRegion(mapping[param], region))
        else:
            mapping[param] = buf
    stmt, extra = _stage_body(step, mapping)
    allocs += extra
    # The rows of tile j that end at step t: their state, copied out before
    # it drifts (rows max(n[t + 1], j tile) to min(n[t], (j + 1) tile)).
    r = tirx.Var("r", "int32")
    low = tirx.max(tirx.BufferLoad(sizes, [t + 1]), j * tile)
    high = tirx.min(tirx.BufferLoad(sizes, [t]), (j + 1) * tile)
    copies = []
    for n, (fin, buf) in enumerate(zip(final, state, strict=True)):
        rest = list(fin.shape)[2:]
        idx = [tirx.Var(f"i{m}", "int32") for m in range(len(rest))]
        row = low + r
        at = [tirx.floordiv(row, tile), tirx.floormod(row, tile), *idx]
        copy: Any = tirx.BufferStore(
            fin, tirx.BufferLoad(buf, [tirx.floormod(t + 1, 2), *at]), [*at]
        )
        for var, extent in reversed(list(zip(idx, rest, strict=True))):
            copy = tirx.For(var, tirx.const(0, "int32"), extent, tirx.ForKind.SERIAL, copy)
        copy = tirx.For(
            r, tirx.const(0, "int32"), tirx.max(high - low, 0), tirx.ForKind.SERIAL, copy
        )
        copies.append(_block(copy, f"final{n}", [_whole(buf)], [_whole(fin)]))
    # [PARTS] Part p's tiles active at step t: the first
    # first[p, t + 1] - first[p, t] of its own (mine[p]), longest first.
    owned = tirx.BufferLoad(first, [p, t + 1]) - tirx.BufferLoad(first, [p, t])
    tile_loop = tirx.For(
        slot,
        tirx.const(0, "int32"),
        owned,
        tirx.ForKind.SERIAL,
        tirx.SeqStmt(
            [
                tirx.Bind(g, tirx.BufferLoad(first, [p, t]) + slot),
                tirx.Bind(j, tirx.BufferLoad(mine, [p, slot])),
                tirx.Bind(local, g - start),
                _block(stmt, "step", reads, writes, matches),
                *copies,
            ]
        ),
    )
    within = tirx.Var("within", "int32")  # loops from 0: s_tir assumes so
    step_loop = tirx.For(
        within,
        tirx.const(0, "int32"),
        tirx.min(steps - c * CHUNK_STEPS, CHUNK_STEPS),
        tirx.ForKind.SERIAL,
        tirx.SeqStmt([tirx.Bind(t, c * CHUNK_STEPS + within), tile_loop]),
    )
    end = tirx.BufferLoad(first, [p, tirx.min(steps, (c + 1) * CHUNK_STEPS)])
    chunk_body = [tirx.Bind(start, tirx.BufferLoad(first, [p, c * CHUNK_STEPS]))]
    if seqs:
        # The chunk's projections of part p's tiles, into its own buffers.
        views = [
            tirx.decl_buffer(
                [chunk, *list(buf.shape)[2:]],
                buf.dtype,
                buf.name,
                elem_offset=tirx.Var(f"{buf.name}_offset", "int32"),
                data_alignment=max(1, tvm.DataType(buf.dtype).bits // 8),
                offset_factor=1,
            )
            for buf in seq_bufs
        ]
        matches_p = [
            s_tir.MatchBufferRegion(v, _region(buf, [p], (0, chunk)))
            for v, buf in zip(views, seq_bufs, strict=True)
        ]
        chunk_body.append(tirx.Bind(chunk, end - start))
        chunk_body.append(stage(seqs_rebuilt, views, {c0: start}, False, matches_p))
    chunk_body.append(step_loop)
    chunks = tirx.For(
        c,
        tirx.const(0, "int32"),
        tirx.floordiv(steps + (CHUNK_STEPS - 1), CHUNK_STEPS),
        tirx.ForKind.SERIAL,
        tirx.SeqStmt(chunk_body),
    )
    # [PARTS] one part per thread, each through every chunk and step: the
    # step's buffers its own, allocated in the part.
    own = s_tir.SBlock([], [], [], "part", chunks, alloc_buffers=allocs)
    kind = tirx.ForKind.PARALLEL if parts > 1 else tirx.ForKind.SERIAL
    stmts.append(
        tirx.For(p, tirx.const(0, "int32"), parts, kind, s_tir.SBlockRealize([], True, own))
    )
    body_stmt = tirx.SeqStmt(stmts) if len(stmts) > 1 else stmts[0]
    root = s_tir.SBlock([], [], [], "root", body_stmt)
    params = [
        *[*flat, index, *caps, *outs, sizes, first, mine, *state, *final],
        *[*const_bufs, *seq_bufs],
    ]
    func = tirx.PrimFunc(params, s_tir.SBlockRealize([], True, root))
    for key, value in {"global_symbol": "main", "tirx.noalias": True, "s_tir": True}.items():
        func = func.with_attr(key, value)

    def leaf(t: te.Tensor, lead: int = 0) -> Leaf:
        return Leaf(tuple(int(d) for d in t.shape[lead:]), str(t.dtype))

    return LoweredPacked(
        func,
        [leaf(t) for t in x_leaves],
        [leaf(t) for t in s_leaves],
        [leaf(t) for t in cap_leaves[: len(cap_leaves) - len(builder.constants)]],
        [data for _, data in builder.constants],
        [leaf(t) for t in out_leaves],
        [(leaf(t), False) for t in consts] + [(leaf(t, 1), True) for t in seqs],
        parts,
    )


def tile_work(
    body: Function,
    dims: Mapping[str, int],
    captured: Sequence[Var],
    functions: Mapping[Var, Function],
    module: IRModule | None,
) -> int:
    """Multiply-adds (or elements) of one tile's step, its input
    projections included: every operation that depends on the step's
    input or state (the batch dimension bound to the tile in ``dims``)."""
    _, x_leaves, s_leaves, cap_leaves, out_leaves, new_leaves = step_leaves(
        body, dims, captured, functions, module
    )
    graph = Graph(x_leaves, s_leaves, cap_leaves, out_leaves + new_leaves)
    graph.classify()
    work = 0
    for op in topological(graph.outputs):
        if isinstance(op, te.ComputeOp) and graph.cls.get(op) != CONST:
            extents = [iv.dom.extent for iv in (*op.axis, *op.reduce_axis)]
            work += math.prod(static_extent(e) or SYMBOLIC_EXTENT for e in extents)
    return work


PACKED_TILES = (4, 8)
"""Rows a packed loop's step may run on: whole register tiles (4 to
ROW_TILE rows: graph.tiles_within_step)."""


def packed_tile() -> int:
    """The rows of the step: as many as one register tile has on this CPU
    (loop/cpu/schedule.py: 8 rows with AVX-512, 2 without), at least 4. Fewer rows
    waste fewer row-steps where a step's active rows are not a multiple."""
    return 8 if accumulators() >= ACCUMULATORS else 4


def _batch_dim(body: Function) -> str:
    """The symbolic leading dimension shared by every leaf of ``x_t`` and of
    the state: the batch, which the packed loop shrinks."""
    leaves = [
        *type_tree.leaves(body.params[0].checked_type),
        *type_tree.leaves(body.params[1].checked_type),
    ]
    firsts = {
        t.shape[0] if isinstance(t, TensorType) and t.ndim and isinstance(t.shape[0], str) else None
        for t in leaves
    }
    if len(firsts) != 1 or None in firsts or "?" in firsts:
        raise BackendError(
            "a packed loop needs every tensor of the step's input and state to have the same "
            "symbolic batch dimension first (as `Tensor[(b, ...)]`)",
            body.span,
        )
    return firsts.pop()


class PackedLoop(PackedScan):
    """``cf.foreach(body, xs, init)`` compiled whole over a packed batch (the
    module's docstring): ``loop(xs, lengths, init, *captured)`` gives the
    final state of each sequence, in the caller's order. One build per
    binding of the body's other symbolic dimensions; the batch size and the
    lengths are data. ``parallel`` (on by default): a call whose work is
    worth a barrier runs its tiles split across TVM's pool [PARTS]; off,
    every call is serial."""

    def __init__(
        self,
        body: Function,
        captured: Sequence[Var],
        target: Any = "llvm",
        *,
        functions: Mapping[Var, Function] | None = None,
        module: IRModule | None = None,
        parallel: bool = True,
        tile: int | None = None,
    ) -> None:
        self.target = make_target(target)
        if self.target.kind.name != "llvm":
            raise BackendError(
                f"a packed loop compiles for the CPU (llvm), not {self.target.kind.name}", body.span
            )
        if not body.has_type or not all(p.has_type for p in body.params):
            raise BackendError("the loop body has no types: run effir.check first", body.span)
        self.body, self.functions, self.module = body, dict(functions or {}), module
        self.parallel = parallel
        self.captured = tuple(captured)
        missing = [v for v in free_vars(body) if v not in self.functions and v not in captured]
        if missing:
            raise BackendError(
                f"the loop body reads %{missing[0].name_hint}, which is not a captured value",
                missing[0].span,
            )
        self.batch = _batch_dim(body)
        self.tile = packed_tile() if tile is None else tile
        if self.tile not in PACKED_TILES:
            raise BackendError(f"a packed loop's tile is one of {PACKED_TILES} rows, not {tile!r}")
        for v in self.captured:
            if isinstance(v.checked_type, FuncType):
                raise BackendError(f"%{v.name_hint} is a function: pass it in `functions`", v.span)
            for t in type_tree.leaves(v.checked_type):
                if isinstance(t, TensorType) and self.batch in t.shape:
                    raise BackendError(
                        f"%{v.name_hint} has the batch dimension {self.batch}: rows would "
                        "interact, which a packed loop cannot run",
                        v.span,
                    )
        self.x_type = body.params[0].checked_type
        self.state_type = body.params[1].checked_type
        self.out_type = body.checked_type.ret_type.fields[0]  # type: ignore[attr-defined]
        self._xs = _Argument.of(self.x_type, "the sequence")
        self._init = _Argument.of(self.state_type, "the initial state")
        self._captured = [_Argument.of(v.checked_type, f"%{v.name_hint}") for v in self.captured]
        self._builds: dict[tuple[Any, ...], tuple[_Compiled, LoweredPacked]] = {}
        self._work: dict[tuple[tuple[str, int], ...], int] = {}
        self._local = threading.local()

    @property
    def builds(self) -> int:
        return len(self._builds)

    def _build(self, dims: Mapping[str, int], parts: int) -> tuple[_Compiled, LoweredPacked]:
        key = (tuple(sorted(dims.items())), parts)
        if key not in self._builds:
            lowered = lower_packed(
                self.body, dims, self.captured, self.functions, self.module, self.parallel, parts
            )
            compiled = _compile(lowered, self.target)  # type: ignore[arg-type]
            self._builds[key] = (compiled, lowered)
        return self._builds[key]

    def parts(self, dims: Mapping[str, int], plan: _Plan) -> int:
        """[PARTS] How many parts run the call's tiles: the pool's threads
        (at most one a tile) when ``parallel`` and the call's work (its
        tile-steps times a tile-step's, ``tile_work``) is worth the one
        barrier a call (cpu_schedule.PARALLEL_MIN_WORK, as rows.row_blocks
        decides for the padded loop); else 1 (serial)."""
        threads = min(rows.pool_threads(), plan.row_tiles)
        if not self.parallel or threads < 2:
            return 1
        key = tuple(sorted(dims.items()))
        if key not in self._work:
            self._work[key] = tile_work(self.body, dims, self.captured, self.functions, self.module)
        work = plan.tiles * self._work[key]
        return threads if work >= cpu_schedule.PARALLEL_MIN_WORK else 1

    def __call__(
        self,
        xs: Any,
        lengths: Any,
        init: Any,
        *captured: Any,
        enforce_sorted: bool = False,
        outputs: bool = False,
    ) -> Any:
        """The final state of sequence ``b`` after its ``lengths[b]`` steps of
        ``xs[:, b]`` (``(T, B, ...)``) from ``init[b]``; with
        ``enforce_sorted`` the lengths must be sorted longest first. With
        ``outputs``, ``(outputs, final)`` as ``cf.foreach`` gives them, the
        per-step outputs ``(T, B, ...)`` zero from each sequence's end on."""
        xs_arrays = self._xs.arrays(xs)
        init_arrays = self._init.arrays(init)
        lengths = np.asarray(lengths)
        if any(a.ndim < 2 for a in xs_arrays) or len({a.shape[:2] for a in xs_arrays}) != 1:
            raise PackedScanError(
                "packed_scan: the sequences must be (T, B, ...) with one T and B, got shapes "
                f"{[list(a.shape) for a in xs_arrays]}"
            )
        steps, batch = xs_arrays[0].shape[:2]
        _check_lengths(lengths, batch, init_arrays, steps)
        if enforce_sorted and (np.diff(lengths) > 0).any():
            raise PackedScanError("packed_scan: the lengths are not sorted longest first")
        key = ("padded", steps, batch, lengths.tobytes())

        def plan() -> _Plan:
            order = np.argsort(-lengths, kind="stable")
            return _Plan.of(
                _sizes(lengths[order]), self.tile, lambda t, r: t * batch + order[r], order
            )

        ready = self._plan(key, plan)
        order = ready.order
        flat = [a.reshape(steps * batch, *a.shape[2:]) for a in xs_arrays]
        final, outs, layout = self._run(flat, ready, [a[order] for a in init_arrays], captured)
        out = []
        for f in final:
            back = np.empty_like(f)
            back[order] = f
            out.append(back)
        state = type_tree.unflatten(self.state_type, out)
        if not outputs:
            return state
        unpacked = [
            o.reshape(steps, batch, *o.shape[1:]) for o in layout.unpack(outs, steps * batch)
        ]
        return type_tree.unflatten(self.out_type, unpacked), state

    def run_packed(
        self, data: Any, batch_sizes: Any, init: Any, *captured: Any, outputs: bool = False
    ) -> Any:
        """PyTorch's packed layout: ``data`` ``(N, ...)`` holds the rows of
        step 0, then of step 1, ...: ``batch_sizes[t]`` (non-increasing) rows
        at step ``t``, the first ``batch_sizes[t]`` sequences, sorted longest
        first; ``init`` in that order. The final states, in that order;
        with ``outputs``, ``(outputs, final)``, the outputs ``(N, ...)`` in
        the layout of ``data``."""
        data_arrays = self._xs.arrays(data)
        init_arrays = self._init.arrays(init)
        sizes = np.asarray(batch_sizes)
        if not np.issubdtype(sizes.dtype, np.integer) or sizes.ndim != 1 or (sizes < 1).any():
            raise PackedScanError("packed_scan: batch_sizes must be integers >= 1, one per step")
        if (np.diff(sizes) > 0).any():
            raise PackedScanError(
                "packed_scan: batch_sizes must not increase (the sequences sorted longest first)"
            )
        total = int(sizes.sum())
        if any(a.ndim < 1 or a.shape[0] != total for a in data_arrays):
            raise PackedScanError(
                f"packed_scan: batch_sizes sum to {total} rows, the data has shapes "
                f"{[list(a.shape) for a in data_arrays]}"
            )
        batch = int(sizes[0]) if len(sizes) else 0
        if any(a.shape[:1] != (batch,) for a in init_arrays):
            raise PackedScanError(
                f"packed_scan: the initial state must have {batch} rows (batch_sizes[0]), got "
                f"shapes {[list(a.shape) for a in init_arrays]}"
            )
        start = np.concatenate([[0], np.cumsum(sizes)])
        full = np.concatenate([sizes, [0]]).astype(np.int32)
        ready = self._plan(
            ("packed", sizes.tobytes()),
            lambda: _Plan.of(full, self.tile, lambda t, r: start[t] + r, np.arange(batch)),
        )
        final, outs, layout = self._run(data_arrays, ready, init_arrays, captured)
        state = type_tree.unflatten(self.state_type, final)
        if not outputs:
            return state
        return type_tree.unflatten(self.out_type, layout.unpack(outs, total)), state

    def _plan(self, key: tuple[Any, ...], make: Callable[[], _Plan]) -> _Plan:
        """The plan for ``key`` (the lengths), made once: the last few are kept."""
        plans = self._local.__dict__.setdefault("plans", {})
        if key not in plans:
            if len(plans) >= PLANS_KEPT:
                plans.pop(next(iter(plans)))
            plans[key] = make()
        return plans[key]

    def _run(
        self,
        flat: list[np.ndarray],
        plan: _Plan,
        init: list[np.ndarray],
        captured: Sequence[Any],
    ) -> tuple[list[np.ndarray], list[np.ndarray], _Layout]:
        """The loop on the rows of ``flat`` as ``plan`` packs them; ``init``
        sorted. The final states, sorted, the outputs ``(tiles, tile,
        ...)``, packed, and the layout that packed them (its parts: ``parts``)."""
        if len(captured) != len(self.captured):
            names = ", ".join("%" + v.name_hint for v in self.captured) or "none"
            raise PackedScanError(
                f"packed_scan: the loop takes {len(self.captured)} captured value(s) ({names}), "
                f"got {len(captured)}"
            )
        c_arrays: list[np.ndarray] = []
        for argument, value in zip(self._captured, captured, strict=True):
            c_arrays += argument.arrays(value)
        if any(a.size >= 2**31 for a in flat) or plan.tiles * self.tile >= 2**31:
            raise PackedScanError("packed_scan: a packed loop indexes with int32: too many rows")
        tile = self.tile
        dims: dict[str, int] = {self.batch: tile}
        for (t, _), a in zip(self._xs.leaves, flat, strict=True):
            bind_dims(t, (tile, *a.shape[1:]), dims, "a sequence element")
        for (t, _), a in zip(self._init.leaves, init, strict=True):
            bind_dims(t, (tile, *a.shape[1:]), dims, "the initial state")
        for (t, what), a in zip(
            [(t, arg.what) for arg in self._captured for t, _ in arg.leaves], c_arrays, strict=True
        ):
            bind_dims(t, a.shape, dims, what)
        parts = self.parts(dims, plan)
        layout = plan.layout(parts)
        compiled, lowered = self._build(dims, parts)
        batch = len(init[0]) if init else 0
        row_tiles = max(1, -(-batch // tile))
        finals = []
        for a in init:
            f = np.empty((row_tiles * tile, *a.shape[1:]), a.dtype)
            f[: len(a)] = a  # rows of length 0 keep their initial state
            finals.append(f)
        outs = [np.empty((plan.tiles, *leaf.shape), leaf.dtype) for leaf in lowered.outputs]
        if layout.index is None:  # no steps
            return [f[:batch] for f in finals], outs, layout
        state = [np.zeros((2, row_tiles, tile, *a.shape[1:]), a.dtype) for a in init]
        for s, a in zip(state, init, strict=True):
            s[0].reshape(-1, *a.shape[1:])[:batch] = a
        final_tiles = [f.reshape(row_tiles, tile, *f.shape[1:]) for f in finals]
        args = [
            *flat,
            layout.index,
            *c_arrays,
            *lowered.constants,
            *outs,
            plan.sizes,
            layout.first,
            layout.mine,
            *state,
            *final_tiles,
            *self._scratch(compiled, lowered, parts, layout.room),
        ]
        compiled.function(*[tvm_ffi.from_dlpack(a) for a in args])
        return [f[:batch] for f in finals], outs, layout

    def _scratch(
        self, compiled: _Compiled, lowered: LoweredPacked, parts: int, tiles: int
    ) -> list[np.ndarray]:
        """The prologue's buffers, of ``tiles`` tiles for a chunk's, one set
        per part (``(parts, room, ...)``, room at least ``tiles``): kept
        between calls (one set per thread) and grown when too small (fresh
        pages cost a page fault per 4 KiB)."""
        cache = self._local.__dict__.setdefault("scratch", {})
        held = cache.get(id(compiled))
        if held is None or held[0] < tiles:  # the kernel reads room from the shape
            arrays = [
                np.empty(((parts, tiles) if seq else ()) + leaf.shape, leaf.dtype)
                for leaf, seq in lowered.scratch
            ]
            held = cache[id(compiled)] = (tiles, arrays)
        return held[1]


@dataclass
class _Layout:
    """The kernel's ``index``, ``first`` and ``mine`` for ``parts`` parts
    (the module's docstring, [PARTS]): the packed tiles part after part,
    step after step; the most tiles of a part's chunk (``room``);
    ``valid`` (tiles, tile): the slot holds an active row."""

    first: np.ndarray | None = None
    mine: np.ndarray | None = None
    index: np.ndarray | None = None
    room: int = 0
    valid: np.ndarray | None = None

    def unpack(self, outs: list[np.ndarray], rows: int) -> list[np.ndarray]:
        """Packed outputs ``(tiles, tile, ...)`` put back at the caller's
        rows (``rows`` in all: ``index`` gives each active slot's), zero
        where no active row is."""
        out = []
        for o in outs:
            back = np.zeros((rows, *o.shape[2:]), o.dtype)
            if self.index is not None and self.valid is not None:
                back[self.index[self.valid]] = o[self.valid]
            out.append(back)
        return out


@dataclass
class _Plan:
    """How a batch is packed: ``sizes`` (active rows per step, then 0),
    the active tiles per step, the tiles in all; ``order``: sorted row ->
    caller's row; ``source(t, r)``: the caller's row of sorted row ``r``
    at step ``t``. Its layouts, one per count of parts, made once."""

    order: np.ndarray
    sizes: np.ndarray
    tile: int
    source: Callable[..., Any]
    per_step: np.ndarray
    tiles: int
    layouts: dict[int, _Layout]

    @property
    def row_tiles(self) -> int:
        return int(self.per_step[0]) if len(self.per_step) else 0

    @staticmethod
    def of(sizes: np.ndarray, tile: int, source: Callable[..., Any], order: np.ndarray) -> _Plan:
        sizes = sizes.astype(np.int32)
        per_step = -(-sizes[:-1] // tile)
        return _Plan(order, sizes, tile, source, per_step, int(per_step.sum()), {})

    def layout(self, parts: int) -> _Layout:
        """[PARTS] The tiles of ``parts`` parts: row tile ``j`` (active at
        the steps ``t`` with ``per_step[t] > j``, a prefix, longer for a
        smaller ``j``) goes to the part with the fewest tile-steps so far,
        longest first (within one tile-step of the fairest split); a part's
        tiles active at step ``t`` are a prefix of its own, ``mine[p]``."""
        if parts in self.layouts:
            return self.layouts[parts]
        steps, tile, sizes = len(self.per_step), self.tile, self.sizes
        if steps == 0 or sizes[0] == 0:
            self.layouts[parts] = _Layout()
            return self.layouts[parts]
        length = (self.per_step[:, None] > np.arange(self.row_tiles)[None, :]).sum(0)
        loads, owned = [0] * parts, [[] for _ in range(parts)]  # type: list[int], list[list[int]]
        for j, n in enumerate(length.tolist()):
            p = loads.index(min(loads))
            owned[p].append(j)
            loads[p] += n
        mine = np.zeros((parts, max(len(o) for o in owned)), np.int32)
        count = np.zeros((parts, steps), np.int64)
        for p, o in enumerate(owned):
            mine[p, : len(o)] = o
            count[p] = np.searchsorted(np.asarray(o, np.int64), self.per_step)
        first = np.concatenate([[0], np.cumsum(count)]).astype(np.int32)
        first = np.concatenate(
            [first[:-1].reshape(parts, steps), np.zeros((parts, 1), np.int32)], 1
        )
        first[:, -1] = np.cumsum(count.sum(1))
        step_of = np.concatenate([np.repeat(np.arange(steps), count[p]) for p in range(parts)])
        part_of = np.repeat(np.arange(parts), count.sum(1))
        slot = np.arange(self.tiles) - first[part_of, step_of]
        j_of = mine[part_of, slot]
        rows = j_of[:, None] * tile + np.arange(tile)
        valid = rows < sizes[step_of][:, None]
        rows = np.minimum(rows, sizes[step_of][:, None] - 1)  # the last tile: its last row again
        index = self.source(step_of[:, None], rows).astype(np.int32)
        bounds = np.minimum(np.arange(0, steps + CHUNK_STEPS, CHUNK_STEPS), steps)
        room = int(np.diff(first[:, bounds], axis=1).max())
        self.layouts[parts] = _Layout(first, mine, index, room, valid)
        return self.layouts[parts]


def _sizes(ordered: np.ndarray) -> np.ndarray:
    """The active rows at each step, then 0, for lengths sorted longest first."""
    longest = int(ordered[0]) if len(ordered) else 0
    return np.concatenate([(ordered[None, :] > np.arange(longest)[:, None]).sum(1), [0]]).astype(
        np.int32
    )


def _check_lengths(lengths: np.ndarray, batch: int, init: list[np.ndarray], steps: int) -> None:
    if lengths.shape != (batch,) or any(a.shape[:1] != (batch,) for a in init):
        raise PackedScanError(
            f"packed_scan: xs must be (T, B, ...), lengths (B,) and the initial state (B, ...); "
            f"got a batch of {batch}, lengths {list(lengths.shape)}, initial state "
            f"{[list(a.shape) for a in init]}"
        )
    if not np.issubdtype(lengths.dtype, np.integer) or (lengths < 0).any():
        raise PackedScanError("packed_scan: lengths must be integers >= 0")
    if batch and lengths.max() > steps:
        raise PackedScanError(
            f"packed_scan: a length of {int(lengths.max())} exceeds the {steps} steps of xs"
        )
