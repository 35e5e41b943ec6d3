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
cached on disk (build_cache.py) and shared by every later batch.

What the scan must be: a program (compiled or not: any callable) taking
``(xs, done, h, *captured)`` and returning the final state, where ``xs``
is ``(t, b, ...)``, ``done`` is a float32 ``(t, b, 1)`` that is 1 from a
row's last step on, ``h`` the ``(b, ...)`` state, and a row whose ``done``
is 1 keeps its state exactly (a GRU forces its update gate to 1:
``maximum(z, done)``, docs/frontend.md "Variable-length batches"). Rows
must not interact (each row of the new state depends on the same row of
``xs`` and ``h`` only), as in every recurrent cell over a batch.

Known limitation: the segments are separate calls of the scan, one per
batch size, not one compiled loop whose batch shrinks; each call pays the
call's fixed cost (arguments, the loop's prologue), which is what keeps
the gain below the ratio of row-steps on small problems
(docs/performance.md).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..ir.diagnostics import Error

ROW_TILE = 8
"""Rows of the compiled loop's register tile (backends/tvm/loop/graph.py,
``ROW_TILE``; not imported here so that the frontend does not import TVM)."""


class PackedScanError(Error):
    """Arguments of ``packed_scan`` that do not describe a packed batch."""

    kind = "packed scan error"


def segments(lengths: np.ndarray, tile: int = ROW_TILE) -> list[tuple[int, int, int]]:
    """``(rows, start, stop)`` for each segment of steps, for lengths sorted
    longest first: steps ``start`` to ``stop`` run on the first ``rows``
    rows, a multiple of ``tile`` (or the whole batch). The rows dropped
    after a segment have all finished within it."""
    batch = len(lengths)
    sizes = [min(batch, m) for m in range(-(-batch // tile) * tile, 0, -tile)]
    out, start = [], 0
    for n, rows in enumerate(sizes):
        smaller = sizes[n + 1] if n + 1 < len(sizes) else 0
        stop = int(lengths[smaller])  # the longest of the rows this size drops
        if stop > start:
            out.append((rows, start, stop))
            start = stop
    return out


def packed_scan(
    scan: Callable[..., Any],
    xs: Any,
    lengths: Any,
    h0: Any,
    *captured: Any,
    tile: int = ROW_TILE,
) -> np.ndarray:
    """The final state of each sequence ``b`` after its ``lengths[b]`` steps
    of ``xs[:, b]`` from ``h0[b]`` (``h0[b]`` itself for length 0), the
    batch's rows in the caller's order; ``scan(xs, done, h, *captured)``
    as the module docstring says. Equal to running each sequence alone."""
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
    for rows, start, stop in segments(ordered, tile):
        chosen = order[:rows]
        steps = np.arange(start, stop)[:, None]
        done = (steps >= ordered[None, :rows])[:, :, None].astype(np.float32)
        part = np.ascontiguousarray(xs[start:stop][:, chosen])
        h[:rows] = np.asarray(scan(part, done, np.ascontiguousarray(h[:rows]), *captured))
    out = np.empty_like(h)
    out[order] = h
    return out
