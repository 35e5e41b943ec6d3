"""[OWNERS] Which thread block computes which elements of each stage, and
where the grid must wait.

A grid barrier costs microseconds; a step should need one, at its end, so
that the next step reads a complete state. That holds when every element a
stage reads from another stage of the same step was computed by its own
block (a ``__syncthreads`` then orders the two). So each stage is split
across the blocks along one *unit axis*: block ``b`` computes the elements
whose unit coordinate ``u`` it owns (``owner[u] == b``), all of their
other coordinates (all rows of the batch). The owners are found backwards,
consumers first:

1. An output stage of the step (nothing in the step reads it) is split
   along the axis ``plan`` chooses, in contiguous runs of units (the GRU's
   new state ``h[b, j]`` by its hidden unit ``j``).
2. A stage ``P`` read by stages of the same phase: each candidate axis of
   ``P`` (the last first) is tried. Every read's index along that axis is
   evaluated on the grid of the reader's variables (indices.py), paired
   with the owner of the reader's element; the axis is consistent when no
   unit of ``P`` is read by two blocks. Then ``P`` takes those owners (the
   GRU's gate product ``gh[b, c]``, read at ``c = j``, ``j + H`` and
   ``j + 2H`` by the element ``j`` of ``h_new``: ``c`` is owned by the
   owner of ``c mod H``), and units nobody reads are spread evenly.
3. Else, when ``P`` is small (``REPLICATE_MAX_ELEMENTS``, and its work
   ``REPLICATE_MAX_WORK``), every block computes all of it into shared
   memory (*replicated*: a key split read by every element of a dropout,
   a batch-1 activation read inside the next product).
4. Else ``P`` goes to an earlier *phase*, with a grid barrier between: its
   own split is then free (step 1's rule).

A replicated stage needs every element of what it reads from its phase,
so its producers there are replicated too, or moved a phase earlier. With
one block (``blocks == 1``) every stage is owned by it and there is one
phase. The result is exact whatever the split: a split only decides who
computes an element and when the others may read it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .indices import evaluate, free_vars, grid
from .stages import Stage, StepStages

REPLICATE_MAX_ELEMENTS = 2048
"""Most elements of a stage every block computes whole (into shared memory)."""

REPLICATE_MAX_WORK = 1 << 16
"""Most multiply-adds (elements times the reduction's extent) of a
replicated stage."""

REPLICATE_BUDGET = 16 * 1024
"""Most bytes of shared memory all replicated stages of a step take."""


@dataclass
class Ownership:
    """How one stage is split: its phase (0 is the last of the step, earlier
    phases are negative) and its unit axis with each unit's block, or
    replicated (``axis`` None: every block computes every element)."""

    phase: int
    axis: int | None
    owner: np.ndarray | None  # per unit of the axis: its block

    def units(self, blocks: int) -> tuple[np.ndarray, np.ndarray]:
        """Per block, its units (``[blocks, most]``, padded with 0) and how
        many it has."""
        assert self.owner is not None
        lists = [np.flatnonzero(self.owner == b) for b in range(blocks)]
        most = max(1, max(len(u) for u in lists))
        table = np.zeros((blocks, most), dtype=np.int32)
        for b, u in enumerate(lists):
            table[b, : len(u)] = u
        return table, np.array([len(u) for u in lists], dtype=np.int32)


@dataclass
class Plan:
    """The split of every stage for a grid of ``blocks`` blocks."""

    blocks: int
    owners: dict[Stage, Ownership]

    @property
    def phases(self) -> list[int]:
        return sorted({o.phase for o in self.owners.values()})


def contiguous(extent: int, blocks: int) -> np.ndarray:
    """Units ``0 .. extent-1`` in contiguous runs, as even as they divide."""
    return (np.arange(extent, dtype=np.int64) * blocks // max(extent, 1)).astype(np.int64)


def _bytes(stage: Stage) -> int:
    return (
        int(np.prod(stage.shape, dtype=np.int64)) * np.dtype(str(stage.op.output(0).dtype)).itemsize
    )


def _replicable(stage: Stage, budget_left: int) -> bool:
    size = int(np.prod(stage.shape, dtype=np.int64))
    work = size * max(1, stage.reduce_extent)
    return (
        size <= REPLICATE_MAX_ELEMENTS
        and work <= REPLICATE_MAX_WORK
        and _bytes(stage) <= budget_left
    )


def _demanded_owners(
    producer: Stage,
    axis: int,
    readers: Sequence[tuple[Stage, list]],
    owners: dict[Stage, Ownership],
) -> np.ndarray | None:
    """[OWNERS] step 2: the block of each unit along ``axis`` that the
    readers' elements demand (-1: none reads it), or None when two blocks
    read one unit (or an index cannot be evaluated)."""
    extent = producer.shape[axis]
    lo = np.full(extent, np.iinfo(np.int64).max, dtype=np.int64)
    hi = np.full(extent, -1, dtype=np.int64)
    for reader, index in readers:
        own = owners[reader]
        assert own.axis is not None and own.owner is not None
        unit_var = reader.axes[own.axis]
        extents = {v: int(iv.dom.extent) for v, iv in zip(reader.axes, reader.op.axis, strict=True)}
        extents.update({iv.var: int(iv.dom.extent) for iv in reader.reduce_axes})
        variables = free_vars(list(index))
        if not any(v.same_as(unit_var) for v in variables):
            variables.append(unit_var)
        points = grid(extents, variables)
        if points is None:
            return None
        values = [evaluate(e, points) for e in index]
        if values[axis] is None:
            return None
        unit_of_reader = points[next(v for v in points if v.same_as(unit_var))]
        shape = np.broadcast_shapes(*[np.shape(p) for p in points.values()])
        unit = np.broadcast_to(values[axis], shape)
        block = np.broadcast_to(own.owner[unit_of_reader], shape)
        valid = np.ones(shape, dtype=bool)
        for k, v in enumerate(values):  # an index out of range is never read (a branch not taken)
            if v is not None:
                valid &= (v >= 0) & (v < producer.shape[k])
        np.minimum.at(lo, unit[valid], block[valid])
        np.maximum.at(hi, unit[valid], block[valid])
    read = hi >= 0
    if np.any(lo[read] != hi[read]):
        return None
    return np.where(read, lo, -1)


def _spread(demanded: np.ndarray, blocks: int) -> np.ndarray:
    """The owners with the units nobody reads spread evenly, in runs."""
    free = np.flatnonzero(demanded < 0)
    owner = demanded.copy()
    owner[free] = contiguous(len(free), blocks)
    return owner


def analyse(steps: StepStages, blocks: int, output_axis: dict[Stage, int]) -> Plan:
    """[OWNERS] The split of every stage for ``blocks`` blocks, each output
    stage along ``output_axis[stage]`` (default: its largest axis)."""
    owners: dict[Stage, Ownership] = {}
    by_op = {s.op: s for s in steps.stages}
    readers_of: dict[Stage, list[tuple[Stage, list]]] = {s: [] for s in steps.stages}
    for s in steps.stages:
        for read in s.reads:
            producer = by_op.get(read.tensor.op)
            if producer is not None:
                readers_of[producer].append((s, read.index))
    budget = REPLICATE_BUDGET
    for stage in reversed(steps.stages):
        readers = readers_of[stage]
        if not readers:
            axis = output_axis.get(stage, largest_axis(stage))
            owners[stage] = _free(stage, 0, axis, blocks)
            continue
        phase = min(owners[r].phase for r, _ in readers)
        same = [(r, index) for r, index in readers if owners[r].phase == phase]
        if blocks == 1:
            owners[stage] = _free(stage, phase, largest_axis(stage), 1)
            continue
        if all(owners[r].axis is not None for r, _ in same):
            chosen = _consistent_axis(stage, same, owners, blocks)
            if chosen is not None:
                owners[stage] = Ownership(phase, *chosen)
                continue
        if _replicable(stage, budget):
            budget -= _bytes(stage)
            owners[stage] = Ownership(phase, None, None)
            continue
        owners[stage] = _free(stage, phase - 1, largest_axis(stage), blocks)
    return Plan(blocks, owners)


def _consistent_axis(
    stage: Stage, readers: list[tuple[Stage, list]], owners: dict[Stage, Ownership], blocks: int
) -> tuple[int, np.ndarray] | None:
    if not stage.shape:
        return None
    for axis in reversed(range(len(stage.shape))):
        demanded = _demanded_owners(stage, axis, readers, owners)
        if demanded is not None:
            return axis, _spread(demanded, blocks)
    return None


def _free(stage: Stage, phase: int, axis: int, blocks: int) -> Ownership:
    if not stage.shape:  # a scalar: every block computes it
        return Ownership(phase, None, None)
    return Ownership(phase, axis, contiguous(stage.shape[axis], blocks))


def largest_axis(stage: Stage) -> int:
    """The axis of most units (the last of equals), or 0 for a scalar."""
    shape = stage.shape
    if not shape:
        return 0
    return max(reversed(range(len(shape))), key=lambda a: shape[a])
