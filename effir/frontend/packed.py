"""Variable-length batches without padding to the longest: ``packed_scan``.

A batch of sequences of different lengths, padded to the longest and run
by one scan, computes every row at every step: with 64 sequences of
lengths 1-200, 12,736 row-steps for 6,834 that matter. ``packed_scan``
sorts the sequences by length, longest first, and runs the scan over
segments of steps whose active rows are a prefix of the sorted batch that
shrinks as sequences finish; each finished sequence's state is frozen by
the scan's mask, and the states are put back in the caller's order at the
end. A row is computed at a step only while it is active or while it
shares a register tile with an active row: the prefix is rounded up to a
multiple of ``tile`` rows (the compiled loop's register tile is 8 rows,
so a prefix of 37 rows costs what 40 do), which also bounds the number of
builds: one per batch size used, at most ``ceil(batch / tile)``, each
cached on disk (driver/build_cache.py) and shared by every later batch. Each
segment is a call of the scan, which costs more than its steps (the
arguments, the loop's prologue): the prefix shrinks where the rows it
drops pay for the extra call (``segments``, ``call_cost``), so a
sequence may run a few steps past its end, frozen.

What the scan must be: a program (compiled or not: any callable) taking
``(xs, done, h, *captured)`` and returning the final state, where ``xs``
is ``(t, b, ...)``, ``done`` is a float32 ``(t, b, 1)`` that is 1 from a
row's last step on, ``h`` the ``(b, ...)`` state, and a row whose ``done``
is 1 keeps its state exactly (a GRU forces its update gate to 1:
``maximum(z, done)``, docs/frontend.md "Variable-length batches"). Rows
must not interact (each row of the new state depends on the same row of
``xs`` and ``h`` only), as in every recurrent cell over a batch.

With a callable scan, the segments are separate calls of it, one per
batch size; each call pays the call's fixed cost (arguments, the loop's
prologue), which keeps the gain below the ratio of row-steps on small
problems (docs/performance.md). ``compile_packed`` instead compiles the
scan into one loop whose active rows shrink inside it (a ``PackedScan``,
effir/backends/tvm/loop/cpu/packed.py): ``packed_scan`` hands it the batch
as is, one call, no mask needed, every step over the tiles of rows still
running only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..backends.tvm.runtime.importing import import_tvm
from ..runtime.packed_scan import PackedScan, PackedScanError

ROW_TILE = 8
"""Rows of the compiled loop's register tile (backends/tvm/loop/graph.py,
``ROW_TILE``; not imported here so that the frontend does not import TVM)."""


CALL_COST = 200
"""What a call of the scan costs beyond its steps, in row-steps: fitted on
benchmarks/varlen.py (about half a millisecond a call against 2.8 us a
row-step on the loaded development machine), so that a segment is split
off only where the rows it drops pay for the extra call."""


def segments(
    lengths: np.ndarray, tile: int = ROW_TILE, call_cost: float = CALL_COST
) -> list[tuple[int, int, int]]:
    """``(rows, start, stop)`` for each segment of steps, for lengths sorted
    longest first: steps ``start`` to ``stop`` run on the first ``rows``
    rows, a multiple of ``tile`` (or the whole batch), every row active at
    those steps among them. Of the ways to shrink the prefix at multiples
    of ``tile``, the one of fewest row-steps plus ``call_cost`` a segment
    (dynamic programming over the batch sizes, quadratic in their number:
    at most ``ceil(batch / tile)``)."""
    batch = len(lengths)
    if batch == 0 or lengths[0] == 0:
        return []
    sizes = [min(batch, m) for m in range(-(-batch // tile) * tile, 0, -tile)]

    def begins(i: int) -> int:
        """The step from which size ``sizes[i]`` holds every active row."""
        return int(lengths[sizes[i]]) if sizes[i] < batch else 0

    # best[i]: the least cost of the steps from begins(i) on, starting at
    # sizes[i]; after[i]: the next size (None: runs to the end).
    best: list[float] = [0.0] * len(sizes)
    after: list[int | None] = [None] * len(sizes)
    for i in reversed(range(len(sizes))):
        best[i] = sizes[i] * (int(lengths[0]) - begins(i)) + call_cost
        for j in range(i + 1, len(sizes)):
            steps = begins(j) - begins(i)
            cost = sizes[i] * steps + (call_cost if steps else 0) + best[j]
            if cost < best[i]:
                best[i], after[i] = cost, j
    out: list[tuple[int, int, int]] = []
    i: int | None = 0
    while i is not None:
        j = after[i]
        stop = begins(j) if j is not None else int(lengths[0])
        if stop > begins(i):
            out.append((sizes[i], begins(i), stop))
        i = j
    return out


def packed_scan(
    scan: Callable[..., Any],
    xs: Any,
    lengths: Any,
    h0: Any,
    *captured: Any,
    tile: int = ROW_TILE,
    call_cost: float = CALL_COST,
) -> np.ndarray:
    """The final state of each sequence ``b`` after its ``lengths[b]`` steps
    of ``xs[:, b]`` from ``h0[b]`` (``h0[b]`` itself for length 0), the
    batch's rows in the caller's order; ``scan(xs, done, h, *captured)``
    as the module docstring says. Equal to running each sequence alone.
    ``tile`` and ``call_cost``: how the batch shrinks (``segments``).
    A ``PackedScan`` (``compile_packed``) runs the batch in one call of its
    compiled loop (no ``done`` mask; ``tile`` and ``call_cost`` unused)."""
    if isinstance(scan, PackedScan):
        return scan(xs, lengths, h0, *captured, outputs=False)
    xs, h0 = np.asarray(xs), np.asarray(h0)
    lengths = np.asarray(lengths)
    if xs.ndim < 2 or h0.ndim < 1 or lengths.shape != (xs.shape[1],) or len(h0) != len(lengths):
        raise PackedScanError(
            f"packed_scan: xs must be (t, b, ...), lengths (b,) and h0 (b, ...); got xs "
            f"{list(xs.shape)}, lengths {list(lengths.shape)}, h0 {list(h0.shape)}"
        )
    if not np.issubdtype(lengths.dtype, np.integer) or (lengths < 0).any():
        raise PackedScanError("packed_scan: lengths must be integers >= 0")
    if len(lengths) and lengths.max() > xs.shape[0]:
        raise PackedScanError(
            f"packed_scan: a length of {int(lengths.max())} exceeds the {xs.shape[0]} steps of xs"
        )
    if not isinstance(tile, int) or tile < 1:
        raise PackedScanError(f"packed_scan: tile must be a positive int, not {tile!r}")
    order = np.argsort(-lengths, kind="stable")
    ordered = lengths[order]
    h = np.array(h0[order])
    for rows, start, stop in segments(ordered, tile, call_cost):
        chosen = order[:rows]
        steps = np.arange(start, stop)[:, None]
        done = (steps >= ordered[None, :rows])[:, :, None].astype(np.float32)
        part = np.ascontiguousarray(xs[start:stop][:, chosen])
        h[:rows] = np.asarray(scan(part, done, np.ascontiguousarray(h[:rows]), *captured))
    out = np.empty_like(h)
    out[order] = h
    return out


def compile_packed(
    module: Any, target: Any = "llvm", *, parallel: bool = True, tile: int | None = None
) -> PackedScan:
    """``module``'s scan compiled into one loop over a packed batch, whose
    step runs only the rows still active (effir/backends/tvm/driver/packed.py).

    ``@main`` must be ``fn (%xs, %h0, %captured...) { ...
    cf.foreach(%step, %xs, %h0) ... }``: the sequences ``(t, b, ...)`` and
    the initial state ``(b, ...)`` with a symbolic batch dimension first,
    the loop body's free variables among the other parameters (functions
    bound before the loop are evaluated in place), and @main returns the
    loop's result or its final state (``.1``). The result is called as
    ``scan(xs, lengths, h0, *captured)`` (or through ``packed_scan``) and
    gives what @main gives for each sequence alone: the final states, and
    the per-step outputs ``(t, b, ...)`` (zero from each sequence's end on)
    when @main returns both; ``scan.run_packed(data, batch_sizes, h0,
    *captured)`` takes PyTorch's packed layout (outputs in that layout). ``tile``:
    the rows a step runs on at a time (4 or 8; by default the CPU's
    register tile, at least 4). ``parallel`` (on by default): a call
    whose work is worth one barrier (cpu_schedule.PARALLEL_MIN_WORK
    multiply-adds, as effir.compile's loops decide) splits its row tiles
    across TVM's thread pool for the whole call, each thread carrying its
    tiles through every step (bit-identical results); False: every call
    serial. Imports TVM on first use."""
    import_tvm()  # without the PyTorch import TVM's FFI makes
    from ..backends.tvm.driver.packed import compile_packed as build  # lazy: imports TVM

    return build(module, target, parallel=parallel, tile=tile)
