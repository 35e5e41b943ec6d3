"""[RULE SCHED-BUDGET] Inlining within a budget: a spatial block substituted into
its consumers while the let-substituted size of the result stays small
(schedule/__init__.py, step 1 on both targets; loop/cpu/schedule.py).

The sizes are footprints (cost.py), one per block, kept by ``InlineCosts``
from one inlining to the next: a block is walked once, and a consumer's
footprint after an inlining is composed from its own and the producer's.
"""

from __future__ import annotations

import functools
import heapq
from collections.abc import Sequence
from typing import Any

from tvm import tirx

from ..precision import ROUNDED_OPERAND
from .common import KEEP, Blocks, attempt, matmul_operands
from .cost import Footprint, expression_cost, inlined

INLINE_BUDGET = 3000
"""Most let-substituted expression nodes an inlining may produce [RULE SCHED-BUDGET]."""


class InlineCosts:
    """The footprint of each block's stored value, by block name, kept
    across ``compute_inline``: the consumers' footprints are composed from
    theirs and the producer's (cost.py ``inlined``), never walked again
    unless the composition does not apply. A footprint names variables and
    buffers by handle; an inlined block's buffer and iterators leave every
    footprint held with it, so each handle held is a live object's."""

    def __init__(self, sch: Any) -> None:
        self.sch = sch
        self._of: dict[str, Footprint] = {}

    def of(self, block: Any) -> Footprint:
        """The footprint of the value ``block`` stores (a BufferStore body)."""
        node = self.sch.get(block)
        name = str(node.name_hint)
        held = self._of.get(name)
        if held is None:
            held = self._of[name] = expression_cost(node.body.value)
        return held

    def inline(self, block: Any, consumers: Sequence[Any]) -> None:
        """``compute_inline(block)`` into ``consumers`` (all of its
        consumers), their footprints composed. TVM's ScheduleError when it
        refuses propagates, the schedule and the footprints unchanged."""
        node = self.sch.get(block)
        store = node.body
        iterators = _iterators(node, store)
        producer = self.of(block) if iterators is not None else None
        names = [str(self.sch.get(c).name_hint) for c in consumers]
        self.sch.compute_inline(block)
        self._of.pop(str(node.name_hint), None)
        for name in names:
            before = self._of.pop(name, None)
            if before is not None and producer is not None and iterators is not None:
                after = inlined(before, store.buffer, producer, iterators)
                if after is not None:
                    self._of[name] = after


def _iterators(block: Any, store: Any) -> list[int] | None:
    """The handles of the iterators ``compute_inline`` substitutes in the
    producer's value: its block iterators, when it stores at them in order
    (or at 0 for an iterator of extent 1), as TVM's fast path requires;
    None for another store (TVM first rewrites the value by the inverse of
    the store's index map, which a footprint does not follow)."""
    if not isinstance(store, tirx.BufferStore) or len(store.indices) != len(block.iter_vars):
        return None
    handles = []
    for index, iv in zip(store.indices, block.iter_vars, strict=True):
        at_zero = (
            isinstance(index, tirx.IntImm)
            and index.value == 0
            and isinstance(iv.dom.min, tirx.IntImm)
            and iv.dom.min.value == 0
            and isinstance(iv.dom.extent, tirx.IntImm)
            and iv.dom.extent.value == 1
        )
        if not (index.same_as(iv.var) or at_zero):
            return None
        handles.append(iv.var.__chandle__())
    return handles


# ================================================================ inlining
def inline_within_budget(sch: Any, costs: InlineCosts | None = None) -> InlineCosts:
    """Step 1: inline every spatial, non-output block into its consumers
    while [RULE SCHED-BUDGET] allows, never into a matmul-like block; the
    footprints it kept are returned (``costs``, when given, is the one used).

    The first block in order that may be inlined is inlined, until none
    may: what re-scanning the blocks after each inlining decides, without
    re-scanning. A producer refused stays refused unless an inlining
    changes what its decision reads, its consumers: an inlined block's
    producers get its consumers, and a consumer's reads of a buffer name
    drop when the inlined block's buffer has that name (``Footprint.reads``
    counts by name), so only such refused blocks are asked again, earliest
    first. (Re-scanning cost a chain of n blocks n walks of its refused
    head.)"""
    costs = InlineCosts(sch) if costs is None else costs
    blocks = Blocks(sch)
    outputs = blocks.outputs()
    order = [b for b in blocks.all()]
    position = {blocks.name(b): k for k, b in enumerate(order)}
    refused: set[int] = set()
    again: list[int] = []  # refused blocks to ask again (a heap of positions)
    ahead = 0  # the next block never asked
    while again or ahead < len(order):
        if again:
            k = heapq.heappop(again)
        else:
            k, ahead = ahead, ahead + 1
        block = order[k]
        if blocks.name(block) in outputs or blocks.is_reduction(block):
            continue
        consumers = blocks.consumers(block)
        if not _may_inline(blocks, costs, block, consumers):
            refused.add(k)
            continue
        producers = blocks.producers(block)
        buffer = str(blocks.store(block).buffer.name)
        if not attempt(functools.partial(costs.inline, block, consumers)):
            refused.add(k)
            continue
        changed = [*producers, *consumers]
        for consumer in consumers:
            changed += [p for p in blocks.producers(consumer) if _writes(blocks, p) == buffer]
        for other in changed:
            j = position[blocks.name(other)]
            if j in refused:
                refused.remove(j)
                heapq.heappush(again, j)
    return costs


def _writes(blocks: Blocks, block: Any) -> str | None:
    """The name of the buffer ``block`` stores to."""
    store = blocks.store(block)
    return None if store is None else str(store.buffer.name)


def _may_inline(blocks: Blocks, costs: InlineCosts, block: Any, consumers: list[Any]) -> bool:
    store = blocks.store(block)
    if store is None or KEEP in blocks.sch.get(block).annotations:
        return False
    mine = costs.of(block)
    buffer = str(store.buffer.name)
    for consumer in consumers:
        if blocks.is_reduction(consumer) and matmul_operands(blocks.sch, consumer):
            return False
        if blocks.store(consumer) is None:
            return False
        theirs = costs.of(consumer)
        if theirs.size + theirs.reads.get(buffer, 0) * mine.size > INLINE_BUDGET:
            return False
    return True


def inline_operand_rounding(sch: Any) -> None:
    """The computes rounding a product's operands (precision.py
    [RULE COMPILE-PRECISION]) inlined into the product, on a GPU: its schedules read
    each operand element once per thread block (into shared memory or
    registers), so the rounding costs a few instructions per load, and a
    GPU kernel has no global memory for an intermediate tensor."""
    blocks = Blocks(sch)
    for block in blocks.all():
        if blocks.name(block).startswith(ROUNDED_OPERAND):
            attempt(functools.partial(sch.compute_inline, block))
