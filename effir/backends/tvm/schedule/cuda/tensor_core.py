"""[RULE SCHED-TENSORCORE] A matrix product on the GPU's tensor cores, when the
compile's precision is TF32 or bfloat16 (precision.py [RULE COMPILE-PRECISION]).

Why not TVM's own
-----------------
TVM 0.27's tensor-core rules (dlight's ``MatmulTensorization``, the WMMA
and MMA intrinsics of ``s_tir.tensor_intrin.cuda``) take float16 or int8
operands only: none multiplies TF32, none bfloat16, and its CUDA code
generator refuses a float32 WMMA fragment. effir's products are float32
operands rounded in the kernel, so the tile that runs on the tensor cores
is a device function of effir's own (tensor_core.cuh, CUDA's WMMA API),
which the kernel calls; the helpers join the generated source where it is
compiled (target.py ``with_cuda_library``).

The schedule, in steps
----------------------
1. The kernel is one product ``C[i, j] = sum_k A.. * B..`` of 2-D float32
   operands that are the kernel's parameters (their rounding computes
   inlined into it), M and N multiples of 16, and at most one block after
   it, elementwise over (i, j), writing the kernel's output (its epilogue:
   bias, activation). Anything else keeps the usual schedules.
2. The product writes its tiles to shared memory (``cache_write``); the
   copy back is inlined into the epilogue, which then reads them there.
3. i and j are split into 16 x 16 tiles; a block of ``WARPS`` warps takes
   ``WARPS`` tiles along j (``threadIdx.y``), and each tile's loops become
   one block (``blockize``), whose body is replaced by the call of the
   helper: the warp computes the tile over the whole depth.
4. The epilogue is computed at the tile, its 256 elements over the warp's
   32 lanes (``threadIdx.x``).

The helper reads the operands through their strides (any layout: ``x @
w.T`` of ``nn.dense``, a transposed matmul operand) at any address, and
rounds them as precision.py does, so a kernel gives the same numbers on the
tensor cores as on the float32 units up to the order of its sums.

Known limitations: batched products and products of more dimensions, M
or N not multiples of 16, operands computed in the kernel (a transpose
fused before the product) and epilogues of several blocks keep the float32
units (with the same rounding); a warp computes one tile from global
memory, without the shared-memory pipelining of a tuned GEMM, so large
products reach a fraction of the tensor cores' peak.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import tvm_ffi
from tvm import s_tir, tirx

from ..common import ILLEGAL, Blocks, Load, divisor, matmul_operands

TILE = 16
"""Rows and columns of the tile one warp computes."""

WARPS = 4
"""Warps of a thread block, at most (tensor_core.cuh ``EFFIR_MMA_MAX_WARPS``)."""

HELPERS = {"tf32": "effir_mma_tf32", "bfloat16": "effir_mma_bf16"}
"""The device function of tensor_core.cuh for each precision."""

LIBRARY = (Path(__file__).parent / "tensor_core.cuh").read_text()
"""The CUDA source of the helpers."""


def schedule_tensor_core(sch: Any, precision: str) -> Any | None:
    """``sch`` (its blocks inlined within the budget) with its product on
    the tensor cores, as a module, or None when the kernel is not one the
    rule takes (step 1); ``sch`` may then be changed: pass a copy."""
    helper = HELPERS.get(precision)
    if helper is None:
        return None
    blocks = Blocks(sch)
    products = [b for b in blocks.all() if blocks.is_reduction(b)]
    if len(products) != 1 or matmul_operands(sch, products[0]) is None:
        return None
    product = products[0]
    try:
        return _tiled(sch, blocks, product, helper)
    except ILLEGAL:
        return None


def _tiled(sch: Any, blocks: Blocks, product: Any, helper: str) -> Any | None:
    for producer in blocks.producers(product):  # the operands' rounding
        sch.compute_inline(producer)
    operands = _operands(sch, product)
    if operands is None:
        return None
    a, a_layout, b, b_layout, depth = operands
    (c,) = [w.source for w in sch.get(product).writes]
    rows, cols = (int(d) for d in c.shape)
    if rows % TILE or cols % TILE or str(c.dtype) != "float32":
        return None
    writes_output = blocks.name(product) in blocks.outputs()
    cache = sch.cache_write(product, 0, "shared")
    if not writes_output:
        sch.compute_inline(cache)  # the epilogue reads the tiles in shared memory
    rest = [b for b in blocks.all() if blocks.name(b) != blocks.name(product)]
    if (
        len(rest) != 1
        or blocks.name(rest[0]) not in blocks.outputs()
        or _spatial_rank(sch, rest[0]) != 2
    ):
        return None
    (epilogue,) = rest
    i, j, k = sch.get_loops(product)
    i_tile, i_in = sch.split(i, [None, TILE])
    j_tile, j_in = sch.split(j, [None, TILE])
    j_group, j_warp = sch.split(j_tile, [None, divisor(cols // TILE, (WARPS, 2, 1))])
    sch.reorder(i_tile, j_group, j_warp, i_in, j_in, k)
    sch.bind(sch.fuse(i_tile, j_group), "blockIdx.x")
    sch.bind(j_warp, "threadIdx.y")
    tile = sch.blockize(i_in)
    sch.reverse_compute_at(epilogue, j_warp)
    inner = sch.get_loops(epilogue)[2:]
    _, lane = sch.split(sch.fuse(*inner), [None, 32])
    sch.bind(lane, "threadIdx.x")
    _call_helper(sch, tile, helper, a, a_layout, b, b_layout, depth)
    return sch.mod


def _operands(sch: Any, product: Any) -> tuple[Any, str, Any, str, int] | None:
    """The product's operands A (indexed by i and k) and B (by k and j),
    each a parameter read at plain indices, their layouts ("ik" or "ki",
    "jk" or "kj") and the depth K."""
    info = sch.get(product)
    params = {str(buf.name) for buf in sch.mod["main"].params}
    (c,) = [w.source for w in info.writes]
    i, j, k = (iv.var for iv in info.iter_vars)
    found: dict[str, tuple[Any, str]] = {}

    def visit(node: Any) -> None:
        if not isinstance(node, Load) or node.source.same_as(c):
            return
        indices = list(node.indices)
        if len(indices) != 2 or not all(isinstance(x, tirx.Var) for x in indices):
            found["bad"] = (node.source, "")
            return
        names = "".join(
            "i" if x.same_as(i) else "j" if x.same_as(j) else "k" if x.same_as(k) else "?"
            for x in indices
        )
        found.setdefault(names, (node.source, names))

    tvm_ffi.structural_walk(info.body, (Load, lambda node: visit(node)))
    a = found.get("ik") or found.get("ki")
    b = found.get("jk") or found.get("kj")
    if "bad" in found or a is None or b is None or len(found) != 2:
        return None
    if str(a[0].name) not in params or str(b[0].name) not in params:
        return None
    if str(a[0].dtype) != "float32" or str(b[0].dtype) != "float32":
        return None
    depth = int(info.iter_vars[2].dom.extent)
    return a[0], a[1], b[0], b[1], depth


def _spatial_rank(sch: Any, block: Any) -> int:
    info = sch.get(block)
    return sum(1 for iv in info.iter_vars if int(iv.iter_type) == 0)


def _call_helper(
    sch: Any, tile: Any, helper: str, a: Any, a_layout: str, b: Any, b_layout: str, depth: int
) -> None:
    """Step 3: the tile block's body replaced by the helper's call."""
    block = sch.get(tile)
    ti, tj = (iv.var for iv in block.iter_vars if int(iv.iter_type) == 0)
    row, col = ti * TILE, tj * TILE
    (c,) = [w.source for w in block.writes]
    a_cols, b_cols = int(a.shape[1]), int(b.shape[1])  # compact parameters: row strides
    if a_layout == "ik":
        a_at, a_i, a_k = a[row, 0], a_cols, 1
    else:
        a_at, a_i, a_k = a[0, row], 1, a_cols
    if b_layout == "jk":
        b_at, b_k, b_j = b[col, 0], 1, b_cols
    else:
        b_at, b_k, b_j = b[0, col], b_cols, 1

    def i64(value: int) -> Any:
        return tirx.const(value, "int64")

    call = tirx.call_extern(
        "int32",
        helper,
        tirx.address_of(c[row, col]),
        tirx.address_of(c[row + 1, col]),  # the tile's row stride, wherever c is placed
        tirx.address_of(a_at),
        i64(a_i),
        i64(a_k),
        tirx.address_of(b_at),
        i64(b_k),
        i64(b_j),
        TILE,
        TILE,
        depth,
    )
    new = s_tir.SBlock(
        block.iter_vars,
        block.reads,
        block.writes,
        block.name_hint,
        tirx.Evaluate(call),
        None,
        block.alloc_buffers,
        block.match_buffers,
        block.annotations,
    )
    sch.state.replace(sch.get_sref(tile), new, {block: new})
