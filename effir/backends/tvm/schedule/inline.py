"""[RULE SCHED-BUDGET] Inlining within a budget: a spatial block substituted into
its consumers while the let-substituted size of the result stays small
(schedule/__init__.py, step 1 on both targets)."""

from __future__ import annotations

from typing import Any

import tvm
from tvm import tirx

from ..precision import ROUNDED_OPERAND
from .common import KEEP, Blocks, Load, attempt, matmul_operands

INLINE_BUDGET = 3000
"""Most let-substituted expression nodes an inlining may produce [RULE SCHED-BUDGET]."""


# ====================================================== expression costs
def _children(node: Any) -> list[Any]:
    if isinstance(node, Load):
        return list(node.indices)
    if isinstance(node, tirx.Select):
        return [node.condition, node.true_value, node.false_value]
    if isinstance(node, tirx.Cast):
        return [node.value]
    if isinstance(node, tvm.ir.expr.Call):
        return list(node.args)
    if isinstance(node, tirx.Not):
        return [node.a]
    if hasattr(node, "a") and hasattr(node, "b"):
        return [node.a, node.b]
    return []


class Cost:
    """A let-substituted expression's size, and how many times it reads each
    buffer (by name)."""

    __slots__ = ("size", "reads")

    def __init__(self, size: int, reads: dict[str, int]) -> None:
        self.size = size
        self.reads = reads

    @staticmethod
    def combine(parts: list[Cost]) -> Cost:
        reads: dict[str, int] = {}
        for p in parts:
            for k, v in p.reads.items():
                reads[k] = reads.get(k, 0) + v
        return Cost(1 + sum(p.size for p in parts), reads)


def expression_cost(expr: Any) -> Cost:
    """The cost of ``expr`` with every let variable replaced by its value
    (as TVM's LLVM code generator sees it): an explicit stack, no recursion."""
    bound: dict[Any, Cost] = {}
    results: list[Cost] = []
    work: list[tuple[str, Any, int]] = [("visit", expr, 0)]
    while work:
        action, node, count = work.pop()
        if action == "visit":
            if isinstance(node, tirx.Let):
                work.append(("let", node, 0))
                work.append(("visit", node.body, 0))
                work.append(("bind", node.var, 0))
                work.append(("visit", node.value, 0))
            elif isinstance(node, tirx.Var) and node in bound:
                results.append(bound[node])
            else:
                kids = _children(node)
                work.append(("combine", node, len(kids)))
                work.extend(("visit", k, 0) for k in reversed(kids))
        elif action == "bind":
            bound[node] = results.pop()
        elif action == "combine":
            parts = [results.pop() for _ in range(count)]
            cost = Cost.combine(parts)
            if isinstance(node, Load):
                name = str(node.source.name)
                cost.reads[name] = cost.reads.get(name, 0) + 1
            results.append(cost)
        # "let": the body's cost, already on the stack, is the let's
    return results.pop()


# ================================================================ inlining
def inline_within_budget(sch: Any) -> None:
    """Step 1: inline every spatial, non-output block into its consumers
    while [RULE SCHED-BUDGET] allows, never into a matmul-like block."""
    blocks = Blocks(sch)
    progress = True
    while progress:  # each success may make another producer inlinable
        progress = False
        outputs = blocks.outputs()
        for block in blocks.all():
            if blocks.name(block) in outputs or blocks.is_reduction(block):
                continue
            if _may_inline(blocks, block) and attempt(lambda b=block: sch.compute_inline(b)):
                progress = True
                break


def _may_inline(blocks: Blocks, block: Any) -> bool:
    store = blocks.store(block)
    if store is None or KEEP in blocks.sch.get(block).annotations:
        return False
    mine = expression_cost(store.value)
    buffer = str(store.buffer.name)
    for consumer in blocks.consumers(block):
        if blocks.is_reduction(consumer) and matmul_operands(blocks.sch, consumer):
            return False
        theirs = blocks.store(consumer)
        if theirs is None:
            return False
        cost = expression_cost(theirs.value)
        if cost.size + cost.reads.get(buffer, 0) * mine.size > INLINE_BUDGET:
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
            attempt(lambda b=block: sch.compute_inline(b))
