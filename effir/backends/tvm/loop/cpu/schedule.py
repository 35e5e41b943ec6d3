"""[SCHED] The CPU schedule of a loop's prologue and step (each a PrimFunc
made by ``te.create_prim_func``): spatial blocks inlined into their
consumers within schedule/inline.py's budget, contractions register-tiled,
packings copied tile by tile, other blocks vectorised along a contiguous
innermost axis; heavy blocks on TVM's thread pool. A block whose schedule
TVM rejects keeps its plain loops (slower, never wrong)."""

from __future__ import annotations

import functools
import math
from typing import Any

import tvm
import tvm_ffi
from tvm import s_tir, tirx
from tvm.target import codegen

from ...schedule.common import static_extent, strip_casts, uses, vector_lanes
from ...schedule.cpu.gemm import packed_gemm
from ...schedule.inline import INLINE_BUDGET, InlineCosts
from ...schedule.unchecked import unchecked_schedule
from ...target import make_target
from ..graph import MATERIALIZE, ROW_TILE, tiles_within_step

PARALLEL_MIN_WORK = 1 << 27
"""Multiply-adds (or elements times expression size) of a block, per run
of it, from which it runs on TVM's thread pool (``build_loop(parallel=True)``).
A parallel loop ends at a barrier, once a call in the prologue and once a
step in the step, and when the machine is busy (more runnable threads
than cores) a worker the scheduler has not run holds that barrier for a
time slice (milliseconds); a block whose work is less than a time slice's
(2**27 multiply-adds is about 4 ms of one core) loses more there than a
second core gains. With 2**17 (the first threshold) and 2**20, the hidden-256
GRU's step (2**17.6 a step at batch 1, 2**22.6 at batch 32) and its
elementwise gates (2**20 at batch 32: three more barriers a step) met a
barrier at every step. Measured side by side on the loaded 2-core
machine (load 6-9, median wall time of interleaved calls, relative to
JAX best in the same run): batch 32, 0.72 and 0.81 serial against 0.98
and 1.04 on the pool, and 43 against 108 ms of CPU time a call (the
workers spin at the barriers); batch 1 (the prologue's projection,
2**23.6 at SYMBOLIC_EXTENT steps), 0.34-0.45 against 0.58-0.75. The
batch-32 prologue (2**28.6) stays on the pool. On an idle machine with
two free cores the step at batch 32 would gain from the pool, which
could not be measured here; a loop whose rows are independent now runs
each core's rows through every step with no barrier at all (loop/cpu/rows.py: one
barrier a call, decided by this threshold on a call's work)."""
SYMBOLIC_EXTENT = 64
"""What a symbolic extent (the sequence length) counts for in work estimates."""

INLINE_MAX_COPIED = 100
"""Largest expression (IR nodes) inlined into more than one reading site;
larger ones (a sigmoid read twice) are computed once into a buffer."""


def _accesses(block: Any) -> list[list[Any]]:
    """Index lists of every buffer read and write in ``block``'s body and init."""
    found: list[list[Any]] = []

    def on_access(node: Any) -> None:
        found.append(list(node.indices))

    for stmt in (block.body, block.init):
        if stmt is not None:
            tvm_ffi.structural_walk(stmt, ((tvm.ir.expr.TensorLoad, tirx.BufferStore), on_access))
    return found


def _contiguous(block: Any, var: Any, lanes: int) -> bool:
    """Every access moves by one element (or not at all) as ``var`` steps
    through a vector of ``lanes``: vectorising ``var`` gives vector loads."""

    def const_multiple(e: Any) -> bool:
        return isinstance(e, tirx.IntImm) and int(e.value) % lanes == 0

    for indices in _accesses(block):
        if not indices:
            continue
        *outer, last = indices
        for e in outer:
            if uses(e, var) and not (
                isinstance(e, tirx.FloorDiv) and e.a.same_as(var) and const_multiple(e.b)
            ):
                return False
        if not uses(last, var):
            continue
        if last.same_as(var):
            continue
        if isinstance(last, tirx.FloorMod) and last.a.same_as(var) and const_multiple(last.b):
            continue
        if isinstance(last, tirx.Add) and (
            (last.a.same_as(var) and not uses(last.b, var))
            or (last.b.same_as(var) and not uses(last.a, var))
        ):
            continue
        return False
    return True


def _is_copy(block: Any) -> bool:
    """A block that only moves data (its value is one buffer read)."""
    body = block.body
    if not isinstance(body, tirx.BufferStore):
        return False
    return isinstance(strip_casts(body.value), tvm.ir.expr.TensorLoad)


def _size(stmt: Any) -> int:
    """The number of IR nodes in ``stmt``."""
    count = 0

    def on_node(_node: Any) -> None:
        nonlocal count
        count += 1

    tvm_ffi.structural_walk(stmt, on_node)
    return count


def _binds_bool(block: Any) -> bool:
    found = tvm_ffi.structural_walk(
        block.body,
        (tirx.Let, lambda let: tvm_ffi.VisitInterrupt(let) if str(let.var.ty) == "bool" else None),
    )
    return found is not None


def _is_reduction(block: Any) -> bool:
    return any(iv.iter_type != tirx.IterVar.DataPar for iv in block.iter_vars)


def schedule(func: Any, parallel: bool, unscheduled: list[str]) -> Any:
    """[SCHED] A CPU schedule for a stage created by ``te.create_prim_func``.
    Each block's steps are kept only if TVM accepts them all: a block whose
    schedule TVM finds illegal keeps its plain loops (slower, never wrong)
    and its name goes to ``unscheduled``."""
    sch = unchecked_schedule(func)  # [RULE SCHED-UNCHECKED]
    min_work = PARALLEL_MIN_WORK if parallel else None
    _inline(sch, sch.get_sblock("root"))
    for name in [sch.get(b).name_hint for b in sch.get_child_blocks(sch.get_sblock("root"))]:
        saved = sch.copy()
        try:
            b = sch.get_sblock(name)
            node = sch.get(b)
            if _is_reduction(node):
                if not _packed_product(sch, b, node, min_work):
                    _tile_contraction(sch, b, node, min_work)
            elif MATERIALIZE in node.annotations:
                _pack_loops(sch, b)
            else:
                _vectorize(sch, b, node, min_work)
        except (s_tir.ScheduleError, tvm.error.InternalError):
            sch = saved
            unscheduled.append(str(name))
    return sch.mod["main"]


def _pack_loops(sch: Any, b: Any) -> None:
    """A packing ``Bp[no, k, ni] = B[no * w + ni, k]`` (``graph.Graph._panel``)
    copied a (w x 16) tile at a time, a vector of w along ni: the writes are
    contiguous, the strided reads stay within the tile's cache lines (36 us
    for a 768 x 256 float32 weight, against 88 us element by element)."""
    no, k, ni = sch.get_loops(b)
    extent = static_extent(sch.get(k).extent)
    if extent is not None and extent % 16 == 0:
        ko, ki = sch.split(k, [None, 16])
        sch.reorder(no, ko, ki, ni)
    sch.vectorize(ni)


def _inline(sch: Any, root: Any) -> None:
    """Inline spatial blocks into their consumers, consumers first, except
    outputs, packings, producers of a reduction (which would recompute them
    for every output element) unless they only move data, an expensive
    producer read at several places (each would get a copy), and where the
    consumer would outgrow schedule/inline.py's INLINE_BUDGET ([RULE SCHED-BUDGET] there:
    LLVM code generation substitutes every let)."""
    outputs = {sch.get(b).name_hint for b in sch.get_output_blocks(root)}
    costs = InlineCosts(sch)  # footprints kept across inlinings, never walked twice
    for b in reversed(sch.get_child_blocks(root)):
        node = sch.get(b)
        if node.name_hint in outputs or MATERIALIZE in node.annotations or _is_reduction(node):
            continue
        if not isinstance(node.body, tirx.BufferStore):
            continue
        consumer_blocks = sch.get_consumers(b)
        consumers = [sch.get(c) for c in consumer_blocks]
        if any(_is_reduction(c) for c in consumers) and not _is_copy(node):
            continue
        mine = costs.of(b)
        name = str(node.body.buffer.name)
        sites = 0
        fits = True
        for c, block in zip(consumers, consumer_blocks, strict=True):
            if not isinstance(c.body, tirx.BufferStore):
                fits = False
                break
            theirs = costs.of(block)
            reads = theirs.reads.get(name, 0)
            sites += reads
            fits = fits and theirs.size + reads * mine.size <= INLINE_BUDGET
        if not fits or (sites > 1 and mine.size > INLINE_MAX_COPIED):
            continue
        try:
            costs.inline(b, consumer_blocks)
        except s_tir.ScheduleError:
            pass


def _vectorize(sch: Any, b: Any, node: Any, min_work: int | None) -> None:
    """Vectorise the innermost loop of a spatial block when it is
    contiguous; spread the other loops over the thread pool when the block
    is heavy (elements times expression size reach ``min_work``; None: serial)."""
    loops = sch.get_loops(b)
    if not loops or not node.iter_vars:
        return
    extent = static_extent(node.iter_vars[-1].dom.extent)
    dtype = node.body.buffer.dtype if isinstance(node.body, tirx.BufferStore) else "float32"
    lanes = vector_lanes(str(dtype))
    if extent is None or extent < 2 or not _contiguous(node, node.iter_vars[-1].var, lanes):
        return
    if _binds_bool(node):
        return  # TVM 0.27's vectoriser fails on a let-bound vector of booleans
    inner = loops[-1]
    if extent > lanes:
        if extent % lanes:
            return
        _, inner = sch.split(inner, [None, lanes])
    sch.vectorize(inner)
    outer = sch.get_loops(b)[:-1]
    elements = math.prod(static_extent(iv.dom.extent) or SYMBOLIC_EXTENT for iv in node.iter_vars)
    if min_work is not None and outer and elements * _size(node.body) >= min_work:
        sch.parallel(sch.fuse(*outer) if len(outer) > 1 else outer[0])


def _packed_product(sch: Any, b: Any, node: Any, min_work: int | None) -> bool:
    """A large product of two operands read where they lie (neither a
    weight ``graph`` packed: it reads its panels), each step's or batched
    over the steps in the prologue, as a kernel's large product: both
    operands packed into panels (schedule/cpu/gemm.py [PACK] [TILE] [BATCH]).
    The per-chunk weight gradients of a reverse loop are such products:
    ``(320 x 768)^T (320 x 256)`` a chunk of the GRU language model, which
    ``_tile_contraction`` ran at a quarter of the packed schedule's rate
    (its tile reads the transposed left operand across rows). False:
    not such a product, nothing changed."""
    work = math.prod(static_extent(iv.dom.extent) or SYMBOLIC_EXTENT for iv in node.iter_vars)
    parallel = min_work is not None and work >= min_work
    packed = packed_gemm(sch, b, make_target("llvm"), parallel)
    if packed is None:
        return False
    local, _ = packed[0], packed[1]
    sch.vectorize(sch.get_loops(local)[-1])
    return True


def _tile_contraction(sch: Any, b: Any, node: Any, min_work: int | None) -> None:
    """Register tile: rows x ``width`` output elements accumulate in
    registers over the reduction, ``width`` vectorised (two vectors)."""
    spatial = [iv for iv in node.iter_vars if iv.iter_type == tirx.IterVar.DataPar]
    n_spatial = len(spatial)
    if n_spatial == 0 or len(node.iter_vars) != len(sch.get_loops(b)):
        return
    store = node.body
    dtype = str(store.buffer.dtype) if isinstance(store, tirx.BufferStore) else "float32"
    lanes = vector_lanes(dtype)
    n_extent = static_extent(spatial[-1].dom.extent)
    if n_extent is None or n_extent % lanes or not _contiguous(node, spatial[-1].var, lanes):
        return
    row_extents = [static_extent(iv.dom.extent) for iv in spatial[:-1]]
    width = 2 * lanes if n_extent % (2 * lanes) == 0 else lanes
    budget = ROW_TILE if width == 2 * lanes else 12
    budget = max(1, min(budget, accumulators() // (width // lanes)))
    panel = width  # a packed weight's panel (graph._pack_width): a tile is whole panels
    if all(e is not None for e in row_extents):
        rows_per_tile = _rows_per_tile(row_extents, budget)
        width *= _tile_panels(n_extent // width, panel // lanes, rows_per_tile)
    loops = sch.get_loops(b)
    rows, n_loop, reduce_loops = loops[: n_spatial - 1], loops[n_spatial - 1], loops[n_spatial:]
    no, ni = sch.split(n_loop, [None, width])
    outer, tile_rows = _tile_rows(sch, rows, row_extents, budget)
    panels: list[Any] = []
    if width > panel:  # each panel's columns a vector index apart, the panels unrolled
        first, ni = sch.split(ni, [None, panel])
        panels = [first]
    tiles = _tile_order(outer, no, _operand_bytes(node, dtype, n_extent))
    sch.reorder(*tiles, *reduce_loops, *tile_rows, *panels, ni)
    local = sch.cache_write(b, 0, "local")
    sch.reverse_compute_at(local, tiles[-1])
    for row in [*tile_rows, *panels]:
        sch.unroll(row)
    sch.vectorize(ni)
    write_back = sch.get_loops(local)[-1]
    sch.vectorize(write_back)
    work = math.prod(static_extent(iv.dom.extent) or SYMBOLIC_EXTENT for iv in node.iter_vars)
    if min_work is not None and work >= min_work:
        sch.parallel(sch.fuse(*tiles) if len(tiles) > 1 else no)
    init = sch.decompose_reduction(b, reduce_loops[0])
    sch.vectorize(sch.get_loops(init)[-1])


CACHED_OPERAND_BYTES = 1 << 18
"""Largest right-hand side (``n x k`` elements of a contraction) whose tiles
run row tile by row tile, each over every column panel: it stays in a
core's L2 cache (256 KiB at least on current x86 CPUs) between row tiles.
A larger one runs column panel by column panel instead (``_tile_order``)."""


def _operand_bytes(node: Any, dtype: str, n_extent: int) -> int:
    """Bytes of the contraction's right-hand side: its columns times its
    reduction (a symbolic extent counted as SYMBOLIC_EXTENT)."""
    k = math.prod(
        static_extent(iv.dom.extent) or SYMBOLIC_EXTENT
        for iv in node.iter_vars
        if iv.iter_type != tirx.IterVar.DataPar
    )
    return n_extent * k * max(1, tvm.DataType(dtype).bits // 8)


def _tile_order(outer: list[Any], columns: Any, operand_bytes: int) -> list[Any]:
    """The loops over a contraction's register tiles, outermost first. Row
    tiles outside column panels read the whole right-hand side once per
    row tile; when it does not fit in L2 (the step of a GRU at hidden 256:
    768 x 256 float32, 786 KB) that is a stream from L3 per row tile: 16
    times a step at batch 32. Column panels outside the row tiles (within
    a step, for a batched prologue) read each panel (k x two vectors: 32
    KB at k = 256) for every row tile while it is in L1, and split over
    threads, each thread's half of the weight stays in its own L2. Measured
    at batch 32 (CPU time of the loop, one thread, interleaved): 81 against
    96 ms; at batch 8, 14.0 against 16.2 ms. A right-hand side that fits in
    L2 keeps the row tiles outside (hidden 32: 0.44 against 0.49 ms, the
    output then written row by row)."""
    if outer and operand_bytes > CACHED_OPERAND_BYTES:
        return [*outer[:-1], columns, outer[-1]]
    return [*outer, columns]


ACCUMULATORS = 2 * ROW_TILE
"""Vectors (of schedule.common.VECTOR_BYTES) a contraction's tile
accumulates in on a CPU with AVX-512: half of its 32 registers, the rest
hold the weights' vectors and the broadcast input."""
ACCUMULATORS_AVX2 = 6
"""The same on a CPU without AVX-512 (16 registers of 32 bytes, so a
vector is two): 12 registers. The tile of 8 rows x 2 vectors (32
registers' worth) spilled its accumulators to the stack at every step of
the reduction on such a CPU (AMD Zen 3: the hoisted input projections)."""
MAX_TILE_VECTORS = 8
"""Widest tile, in vectors: a tile of one row (a matrix-vector product, a
step at batch 1) gets up to this many independent accumulators, enough to
hide the latency of a fused multiply-add (4 cycles, 2 a cycle), without
making so few tiles that a thread pool's share is uneven."""


def _rows_per_tile(extents: list[int | None], budget: int) -> int:
    """The rows of one register tile of a contraction with static rows (as
    ``_tile_rows`` splits them)."""
    total = math.prod(e for e in extents if e is not None)
    return max(d for d in range(1, budget + 1) if total % d == 0)


@functools.cache
def accumulators() -> int:
    """``ACCUMULATORS`` or ``ACCUMULATORS_AVX2``, for the host CPU (a whole
    loop compiles for the host: loop/kernel.py)."""
    wide = codegen.target_has_features("avx512f", make_target("llvm"))
    return ACCUMULATORS if wide else ACCUMULATORS_AVX2


def _tile_panels(panels: int, vectors: int, rows: int) -> int:
    """Panels (of ``vectors`` vectors each) of columns in a register tile of
    ``rows`` rows, out of the ``panels`` of a row: one (the tile of
    ``ROW_TILE`` rows and two vectors), or more when the tile has few rows,
    so that each step of the reduction issues up to ``ACCUMULATORS`` (at
    most ``MAX_TILE_VECTORS`` a row) independent multiply-adds. A tile of
    one row and two vectors (before) waited on each multiply-add's latency:
    the step of a hidden-32 GRU at batch 1 ran its 32 x 96 product as three
    serial chains of 32 dependent multiply-adds."""
    most = min(MAX_TILE_VECTORS, accumulators() // max(1, rows)) // vectors
    return max([p for p in range(1, max(1, most) + 1) if panels % p == 0])


def _tile_rows(
    sch: Any, rows: list[Any], extents: list[int | None], budget: int
) -> tuple[list[Any], list[Any]]:
    """Split the row loops of a contraction into loops over tiles and the
    (at most ``budget``) rows of one tile. The step axis of a batched
    prologue is the only symbolic extent (first, a multiple of ROW_TILE)."""
    if not rows:
        return [], []
    step = rows[0] if extents[0] is None else None
    static = rows[1:] if step is not None else rows
    total = math.prod(e for e in extents if e is not None)
    divisor = max(d for d in range(1, budget + 1) if total % d == 0)
    if static and (step is None or tiles_within_step(total)):
        fused = sch.fuse(*static) if len(static) > 1 else static[0]
        tiles, tile = sch.split(fused, [None, divisor])
        return ([step] if step is not None else []) + [tiles], [tile]
    # Few rows per step: a tile spans steps (the padded length divides).
    per_step = 1 << int(math.log2(max(1, budget // total)))
    tiles, tile = sch.split(step, [None, min(per_step, ROW_TILE)])
    fused = [sch.fuse(*static) if len(static) > 1 else static[0]] if static else []
    return [tiles], [tile, *fused]
