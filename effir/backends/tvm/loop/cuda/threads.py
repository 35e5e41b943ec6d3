"""[THREADS] The persistent kernel's code is written once, as what one
thread of one block does between barriers, and assembled two ways:

- ``on_gpu``: ``for bx in blockIdx.x: for tx in threadIdx.x: body``, each
  block barrier a ``__syncthreads`` (``tvm_storage_sync("shared")``, which
  TVM's own barrier placement recognises), each grid barrier a cooperative
  groups ``grid.sync()``; shared buffers are ``shared`` memory;
- ``on_cpu`` (the same kernel run serially, to test its algorithm against
  the interpreter where there is no GPU): each piece between two barriers
  becomes ``for bx: for tx: piece``, so every thread finishes a piece
  before any starts the next, which is exactly what the barriers
  guarantee on the GPU; a shared buffer gains a leading axis of the
  blocks, indexed by ``bx``.

A piece keeps nothing in registers across a barrier (what a later piece
reads is in a buffer), so the serial run computes what the grid computes:
the same elements, from the same values, by the same expressions."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from tvm import tirx
from tvm.backend.cuda import op as cuda_op

from ...runtime.errors import BackendError


class Sync(Enum):
    """A barrier between two pieces of a thread's code."""

    BLOCK = "block"
    GRID = "grid"


@dataclass
class Loop:
    """``for var in range(extent): body`` around pieces and barriers (the
    loop over the steps); every thread runs it, so barriers may sit in it."""

    var: Any
    extent: Any
    body: list[Any]


Piece = Any  # a statement of one thread (bx, tx free), a Sync, or a Loop


@dataclass
class Threads:
    """A grid of ``blocks`` blocks of ``threads`` threads, for the GPU or
    serially on the CPU ([THREADS])."""

    blocks: int
    threads: int
    on_gpu: bool
    bx: Any = field(default_factory=lambda: tirx.Var("bx", "int32"))
    tx: Any = field(default_factory=lambda: tirx.Var("tx", "int32"))
    allocations: list[Any] = field(default_factory=list)
    per_block: list[Any] = field(default_factory=list)  # the shared buffers

    # ------------------------------------------------------------ buffers
    def shared(self, name: str, shape: Sequence[int], dtype: str) -> Any:
        """A buffer each block has its own copy of."""
        if self.on_gpu:
            buf = tirx.decl_buffer(list(shape), dtype, name, scope="shared")
        else:
            buf = tirx.decl_buffer([self.blocks, *shape], dtype, name)
        self.allocations.append(buf)
        self.per_block.append(buf)
        return buf

    def is_per_block(self, buf: Any) -> bool:
        return any(buf.same_as(b) for b in self.per_block)

    def local(self, name: str, dtype: str) -> Any:
        """A value of one thread, within one piece."""
        buf = tirx.decl_buffer([1], dtype, name, scope="local")
        self.allocations.append(buf)
        return buf

    def index(self, buf: Any, index: Sequence[Any]) -> list[Any]:
        """``index`` into ``buf`` as this model lays it out."""
        if not self.on_gpu and self.is_per_block(buf):
            return [self.bx, *index]
        return list(index)

    def load(self, buf: Any, index: Sequence[Any]) -> Any:
        return tirx.BufferLoad(buf, self.index(buf, index))

    def store(self, buf: Any, value: Any, index: Sequence[Any]) -> Any:
        return tirx.BufferStore(buf, value, self.index(buf, index))

    # ----------------------------------------------------------- assembly
    def assemble(self, pieces: list[Piece]) -> Any:
        """The kernel's statement ([THREADS])."""
        if self.on_gpu:
            body = _seq([self._gpu(p) for p in pieces])
            tx = tirx.IterVar(None, self.tx, tirx.IterVar.ThreadIndex, "threadIdx.x")
            bx = tirx.IterVar(None, self.bx, tirx.IterVar.ThreadIndex, "blockIdx.x")
            body = tirx.For(self.tx, 0, self.threads, tirx.ForKind.THREAD_BINDING, body, tx)
            return tirx.For(self.bx, 0, self.blocks, tirx.ForKind.THREAD_BINDING, body, bx)
        return _seq([self._cpu(p) for p in pieces])

    def _gpu(self, piece: Piece) -> Any:
        if isinstance(piece, Sync):
            block = tirx.Evaluate(tirx.call_intrin("int32", "tirx.tvm_storage_sync", "shared"))
            if piece is Sync.GRID and self.blocks > 1:
                # the block's own barrier first: TVM's barrier placement
                # (ThreadSync) knows it, not the grid's
                return tirx.SeqStmt([block, tirx.Evaluate(cuda_op.cuda_grid_sync())])
            return block
        if isinstance(piece, Loop):
            body = _seq([self._gpu(p) for p in piece.body])
            return tirx.For(piece.var, 0, piece.extent, tirx.ForKind.SERIAL, body)
        return piece

    def _cpu(self, piece: Piece) -> Any:
        if isinstance(piece, Sync):
            return None
        if isinstance(piece, Loop):
            body = _seq([self._cpu(p) for p in piece.body])
            return tirx.For(piece.var, 0, piece.extent, tirx.ForKind.SERIAL, body)
        inner = tirx.For(self.tx, 0, self.threads, tirx.ForKind.SERIAL, piece)
        return tirx.For(self.bx, 0, self.blocks, tirx.ForKind.SERIAL, inner)


def _seq(stmts: list[Any]) -> Any:
    kept = [s for s in stmts if s is not None]
    if not kept:
        raise BackendError("a persistent loop with nothing to compute")
    return kept[0] if len(kept) == 1 else tirx.SeqStmt(kept)
