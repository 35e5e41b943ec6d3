"""The schedule of a large matrix product in a CPU kernel: both operands
packed into panels, a register tile sized for the CPU's vector registers.

Why
---
schedule/cpu/kernel.py's register tile reads its operands where they lie. That is
right for the small products of a model's forward (a weight read by a
batch of a few rows), and wrong for the large ones a gradient program
makes: the weights' gradients are products of two stacks of every step's
rows (``(3200 x 768)^T (3200 x 256)`` for the GRU language model of
benchmarks/train_step.py), and the inputs' gradient a (3200 x 768) by
(768 x 256) product. There the left operand's rows are read a tile's
height apart (four cache lines per step of the reduction, none reused
before they are evicted), a transposed operand (``transpose_a``, or a
``transpose`` the fuse pass put into the kernel) is read across rows, and
the tile of 4 rows by two 64-byte vectors holds 16 accumulators of 32
bytes on a CPU without AVX-512 (AMD Zen 3, Intel before Skylake-X), more
than its 16 registers: they spilled to the stack at every multiply-add.
Measured on that machine, one thread (TVM_NUM_THREADS=1), CPU ms, median
of 8: ``matmul(transpose_a)`` (3200 x 768)^T (3200 x 256) 92-111 before,
21 packed; (3200 x 768) (768 x 256) 40-42 before, 20 packed; numpy's
OpenBLAS takes 16 for each.

How (as BLIS and every tuned GEMM)
----------------------------------
- [PACK] Each operand is copied once per call into panels that the tile
  reads contiguously, whatever its layout: the left one into
  ``[i / R, k, i % R]`` (a tile's R rows side by side for each k, so the
  broadcasts of one step of the reduction are one cache line), the right
  one into ``[j / C, k, j % C]`` (a tile's C columns, one or two vectors,
  for each k). The copy walks tiles of C x 16 (or R x 16) elements, so
  both its reads and its writes stay within a few cache lines whatever the
  source's layout. A producer of an operand inside the kernel (a
  ``transpose`` or ``reshape`` the fuse pass put there) is computed in the
  copy (``compute_inline``): the transposed matrix is never written.
  Packing reads M*K + N*K elements for M*N*K multiply-adds.
- [TILE] R rows by C columns accumulate in registers over all of k, R x C
  / lanes accumulators: with AVX-512 (32 registers of 64 bytes) 8 rows by
  two vectors, 16 registers; without (16 registers of 32 bytes) 4 rows by
  one 64-byte vector, 8 registers, leaving room for the panel's vectors
  and the broadcast row (6 rows measured no faster, 8 spilled). Tiles walk
  rows outside columns, so one row panel (R x K) stays in the L2 cache
  while every column panel passes.

Which products: a reduction block ``C[i, j] += A[.] * B[.]`` of one
reduction axis k and two spatial axes, both operands 2-D and indexed by
plain iterators (in either order), with R dividing the rows, C dividing
the columns, and at least ``MIN_MULTIPLY_ADDS`` multiply-adds (a small
product does not pay for its copies). Everything else keeps schedule/cpu/kernel.py's
tile (or, in a whole loop, loop/cpu/schedule.py's).

[BATCH] A whole loop's prologue batches each step's product over the
steps (loop/graph.py [HOIST]): ``C[t, i, j] += A[t', ., .] * B[t', ., .]``,
``t'`` any expression of the leading axes (``min(t, T - 1)``), or an
operand without them (a weight). The panels gain the leading axes, the
tiles run inside them; the per-chunk weight gradients of the GRU language
model's backward, 10 batched ``(320 x 768)^T (320 x 256)`` products and
the inputs' ``(320 x 768) (768 x 256)``, took 160 ms of CPU in
``_tile_contraction``'s tile, 61 packed (one thread). Each packing reads
the operand for this product only (``consumer_blocks``): another reader
of it keeps its own layout and schedule.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import tvm
from tvm import tirx
from tvm.target import Target, codegen

from ..common import static_extent, strip_casts, uses, vector_lanes

MIN_MULTIPLY_ADDS = 1 << 22
"""Smallest product packed: 4M multiply-adds (a 256 x 256 x 64 product).
The copies cost about (M + N) K element moves against M N K multiply-adds."""

_DATA_PAR, _REDUCE = 0, 2  # tirx.IterVar kinds
_Load = tvm.ir.expr.TensorLoad  # a buffer element read


@dataclass(frozen=True)
class _Operand:
    """One operand of the product: its index in the block's reads and
    whether its first axis is the reduction's (``k``-major)."""

    read: int
    k_first: bool


@dataclass(frozen=True)
class GemmShape:
    """A product ``C[b..., i, j] = sum_k A * B`` as the packed schedule sees it
    (``batch`` leading axes, none in a kernel's products; a whole loop's
    prologue batches each step's product over the steps: loop/graph.py)."""

    m: int
    n: int
    k: int
    lhs: _Operand  # indexed by i and k
    rhs: _Operand  # indexed by j and k
    dtype: str
    batch: int = 0


def gemm_shape(sch: Any, block: Any) -> GemmShape | None:
    """The roles of a product block, or None when the block is not one
    (see the module's "Which products"). Leading spatial axes are batch
    axes [BATCH]: an operand indexes them first, by any expression of
    them alone (the prologue's ``min(t, T - 1)``), or not at all."""
    info = sch.get(block)
    store = info.body
    if not isinstance(store, tirx.BufferStore) or len(store.indices) < 2:
        return None
    nb = len(store.indices) - 2
    kinds = [int(iv.iter_type) for iv in info.iter_vars]
    if kinds != [_DATA_PAR] * (nb + 2) + [_REDUCE] or len(sch.get_loops(block)) != nb + 3:
        return None
    value = store.value
    if not isinstance(value, tirx.Add):
        return None
    product = strip_casts(value.b)
    if not isinstance(product, tirx.Mul):
        return None
    loads = [strip_casts(product.a), strip_casts(product.b)]
    if not all(isinstance(x, _Load) and len(x.indices) in (2, nb + 2) for x in loads):
        return None
    *batch_vars, i_var, j_var, k_var = (iv.var for iv in info.iter_vars)
    if any(not _is(e, v) for e, v in zip(store.indices, (*batch_vars, i_var, j_var), strict=True)):
        return None
    roles: dict[str, _Operand] = {}
    for load in loads:
        *lead, a, b = load.indices
        if any(uses(e, v) for e in lead for v in (i_var, j_var, k_var)):
            return None
        # buffers by identity: two of a kernel's may share a name ("transpose")
        found = [r for r, region in enumerate(info.reads) if region.source.same_as(load.source)]
        if len(found) != 1:
            return None
        for role, var in (("lhs", i_var), ("rhs", j_var)):
            if _is(a, var) and _is(b, k_var):
                roles[role] = _Operand(found[0], False)
            elif _is(a, k_var) and _is(b, var):
                roles[role] = _Operand(found[0], True)
    if set(roles) != {"lhs", "rhs"} or roles["lhs"].read == roles["rhs"].read:
        return None
    extents = [static_extent(iv.dom.extent) for iv in info.iter_vars[nb:]]
    if any(e is None for e in extents):
        return None
    m, n, k = (int(e) for e in extents)  # type: ignore[arg-type]
    return GemmShape(m, n, k, roles["lhs"], roles["rhs"], str(value.ty), nb)


def tile(shape: GemmShape, wide: bool) -> tuple[int, int] | None:
    """(rows R, columns C) of the register tile [TILE], or None when the
    product is too small or the tile does not divide it. ``wide``: the
    CPU has AVX-512."""
    lanes = vector_lanes(shape.dtype)
    rows, cols = (8, 2 * lanes) if wide else (4, lanes)
    if shape.m * shape.n * shape.k < MIN_MULTIPLY_ADDS or shape.k < 16:
        return None
    if shape.m % rows or shape.n % cols or shape.m < 2 * rows:
        return None
    return rows, cols


@functools.cache
def _wide(target_text: str) -> bool:
    return bool(codegen.target_has_features("avx512f", Target(target_text)))


def wide_vectors(target: Any) -> bool:
    """Whether ``target`` (an LLVM target) has AVX-512's 32 wide registers."""
    try:
        return _wide(str(target))
    except Exception:  # a target TVM cannot query: the narrow tile is safe
        return False


def packed_gemm(
    sch: Any, block: Any, target: Any, parallel: bool = False
) -> tuple[Any, Any, list[Any]] | None:
    """Schedule ``block`` as a packed product [PACK] [TILE] when it is one
    this schedule takes; returns (the accumulator block, the column-tile
    loop) for the caller's epilogue and the copies (scheduled: the caller
    leaves them alone), or None (nothing changed). ``parallel``: the
    tiles (batch axes and row tiles) run on TVM's thread pool."""
    shape = gemm_shape(sch, block)
    if shape is None:
        return None
    sizes = tile(shape, wide_vectors(target))
    if sizes is None:
        return None
    rows, cols = sizes
    # The copies stay serial: one barrier a call for the product alone
    # (loop/cpu/schedule.py PARALLEL_MIN_WORK: a busy machine makes every
    # barrier wait a time slice).
    copies = [_pack(sch, block, shape.lhs, rows), _pack(sch, block, shape.rhs, cols)]
    *batch, i, j, k = sch.get_loops(block)
    io, ii = sch.split(i, [None, rows])
    jo, ji = sch.split(j, [None, cols])
    sch.reorder(*batch, io, jo, k, ii, ji)
    local = sch.cache_write(block, 0, "local")
    sch.reverse_compute_at(local, jo)
    sch.unroll(ii)
    sch.vectorize(ji)
    if parallel:
        sch.parallel(sch.fuse(*batch, io) if batch else io)
    sch.decompose_reduction(block, k)
    return local, jo, copies


def _pack(sch: Any, block: Any, operand: _Operand, width: int) -> Any:
    """[PACK] The operand copied into ``[b..., x / width, k, x % width]`` (x
    its row or column index, b its batch indices, if any), its producer in
    the kernel, if any, computed in the copy. Returns the copy's block."""
    buffer = sch.get(block).reads[operand.read].source
    producers = [
        p
        for p in sch.get_producers(block)
        if any(w.source.same_as(buffer) for w in sch.get(p).writes)
    ]
    # Only this product reads the panels: another reader of the operand
    # (the prologue's sum of the same stack) keeps its own layout.
    packed = sch.cache_read(block, operand.read, "global", consumer_blocks=[block])
    if operand.k_first:
        sch.transform_layout(
            block,
            ("read", operand.read),
            lambda *b: (*b[:-2], b[-1] // width, b[-2], b[-1] % width),
        )
    else:
        sch.transform_layout(
            block,
            ("read", operand.read),
            lambda *b: (*b[:-2], b[-2] // width, b[-1], b[-2] % width),
        )
    for producer in producers:  # a transpose or reshape fused into the kernel
        try:
            sch.compute_inline(producer)
        except Exception:  # kept as its own block: still correct
            pass
    # The copy's loops are the source buffer's axes: (b..., x, k) or (b..., k, x).
    *lead, a, b = sch.get_loops(packed)
    x, k = (b, a) if operand.k_first else (a, b)
    xo, xi = sch.split(x, [None, width])
    ko, ki = sch.split(k, [None, 16 if int(sch.get(k).extent) % 16 == 0 else 1])
    sch.reorder(xo, ko, ki, xi)
    sch.vectorize(xi)
    return packed


def _is(e: Any, var: Any) -> bool:
    return isinstance(e, tirx.Var) and e.same_as(var)
