"""What [RULE SCHED-BUDGET] measures: an expression's size with every let
variable replaced by its value (TVM's LLVM code generator substitutes them
all), and how many times it reads each buffer.

``expression_cost`` walks an expression once. The inliner (inline.py)
needs a consumer's cost again after each producer it inlines into it,
and the consumer grows with each one: walked again every time, a chain of
n elementwise blocks cost O(n^2) nodes (a 500-let chain spent 10 of its
14 s of build there). So the cost of a block is a ``Footprint`` that
``inlined`` composes instead of walking. ``compute_inline`` replaces each
read ``P[e_1, ..., e_k]`` of a producer P by P's stored value with P's
iterators ``v_i`` replaced by the ``e_i`` (TVM's ``Substitute``: nothing is
simplified), so the consumer's let-substituted tree after the inlining
follows from facts kept about each side:

1. its size: each read of P (the read and its index expressions) gives
   way to P's tree, where each occurrence of ``v_i`` grows by
   ``size(e_i) - 1``;
2. how often each variable occurs: P's occurrences, each ``v_i`` counted
   through ``e_i``;
3. each buffer element it reads, as the buffer and its indices'
   footprints, with a count: the reads of P at which to substitute, and
   what the next inlining substitutes into.

Each node of a block's value is walked once, when the block is first
costed; an inlining then costs what the reads of P in the consumer and
P's own reads hold. The composition is exact; where it does not apply
(a read of P inside another read's index, as a gather's index computed
by P) ``inlined`` says so and the consumer is walked again.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any

import tvm
from tvm import tirx

from .common import Load


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


Read = tuple[int, str, tuple["Footprint", ...], int]
"""A buffer element read: the buffer (its handle), its name, the indices'
footprints, and how many times the expression reads it."""


class Footprint:
    """An expression's let-substituted tree as [RULE SCHED-BUDGET] counts it
    and an inlining composes it: ``size`` (nodes), ``occurs`` (each free
    variable, by its handle, and how often it occurs) and ``loads`` (each
    buffer element read, reads inside other reads' indices included)."""

    __slots__ = ("size", "occurs", "loads", "_reads", "_buffers", "_key")

    def __init__(self, size: int, occurs: dict[int, int], loads: dict[Hashable, Read]) -> None:
        self.size = size
        self.occurs = occurs
        self.loads = loads
        self._reads: dict[str, int] | None = None
        self._buffers: frozenset[int] | None = None
        self._key: Hashable | None = None

    @property
    def reads(self) -> dict[str, int]:
        """How many times the expression reads each buffer, by name: two
        buffers of one name (TVM names a compute's buffer after its
        operator, ``add``, and makes only the blocks' names unique) count
        as one, as the budget has always counted them."""
        if self._reads is None:
            reads: dict[str, int] = {}
            for _, name, _, count in self.loads.values():
                reads[name] = reads.get(name, 0) + count
            self._reads = reads
        return self._reads

    @property
    def buffers(self) -> frozenset[int]:
        """The buffers (handles) the expression reads."""
        if self._buffers is None:
            self._buffers = frozenset(load[0] for load in self.loads.values())
        return self._buffers

    def key(self) -> Hashable:
        """Equal for footprints that compose alike (a read's identity)."""
        if self._key is None:
            loads = frozenset((k, load[3]) for k, load in self.loads.items())
            self._key = (self.size, frozenset(self.occurs.items()), loads)
        return self._key


LEAF = Footprint(1, {}, {})
"""An immediate, or anything else without operands."""


class _Sum:
    """A footprint being summed from parts, each counted some times."""

    def __init__(self, size: int = 0) -> None:
        self.size = size
        self.occurs: dict[int, int] = {}
        self.loads: dict[Hashable, Read] = {}

    def add(self, part: Footprint, times: int = 1) -> None:
        self.size += times * part.size
        self.add_contents(part, times)

    def add_contents(self, part: Footprint, times: int) -> None:
        """``part``'s variables and reads, ``times`` times (not its size)."""
        for var, count in part.occurs.items():
            self.occurs[var] = self.occurs.get(var, 0) + times * count
        for key, (buffer, name, indices, count) in part.loads.items():
            self.add_load(key, buffer, name, indices, times * count)

    def add_load(
        self, key: Hashable, buffer: int, name: str, indices: tuple[Footprint, ...], count: int
    ) -> None:
        held = self.loads.get(key)
        self.loads[key] = (buffer, name, indices, count + (held[3] if held else 0))

    def footprint(self) -> Footprint:
        occurs = {var: count for var, count in self.occurs.items() if count}
        loads = {key: load for key, load in self.loads.items() if load[3]}
        return Footprint(self.size, occurs, loads)


def _load_key(buffer: int, indices: Sequence[Footprint]) -> Hashable:
    return (buffer, tuple(i.key() for i in indices))


def _read(buffer: int, name: str, indices: tuple[Footprint, ...]) -> Footprint:
    """The footprint of a read of ``buffer`` at ``indices``."""
    total = _Sum(1)
    for index in indices:
        total.add(index)
    total.add_load(_load_key(buffer, indices), buffer, name, indices, 1)
    return total.footprint()


_VISIT, _BIND, _UNBIND, _COMBINE = range(4)


def expression_cost(expr: Any) -> Footprint:
    """The footprint of ``expr`` with every let variable replaced by its
    value: one walk with an explicit stack, no recursion; a let's value is
    walked once and counted at each use of its variable."""
    bound: dict[int, Footprint] = {}
    shadowed: list[Footprint | None] = []  # bindings a nested let of the same variable hides
    results: list[Footprint] = []
    work: list[tuple[int, Any, int]] = [(_VISIT, expr, 0)]
    while work:
        action, node, count = work.pop()
        if action == _VISIT:
            if isinstance(node, tirx.Let):
                work.append((_UNBIND, node.var, 0))
                work.append((_VISIT, node.body, 0))
                work.append((_BIND, node.var, 0))
                work.append((_VISIT, node.value, 0))
            elif isinstance(node, tirx.Var):
                handle = node.__chandle__()
                held = bound.get(handle)
                results.append(held if held is not None else Footprint(1, {handle: 1}, {}))
            else:
                kids = _children(node)
                if not kids and not isinstance(node, Load):
                    results.append(LEAF)
                    continue
                work.append((_COMBINE, node, len(kids)))
                work.extend((_VISIT, k, 0) for k in reversed(kids))
        elif action == _BIND:
            handle = node.__chandle__()
            shadowed.append(bound.get(handle))
            bound[handle] = results.pop()
        elif action == _UNBIND:  # the body's footprint, on the stack, is the let's
            handle = node.__chandle__()
            previous = shadowed.pop()
            if previous is None:
                del bound[handle]
            else:
                bound[handle] = previous
        else:
            parts = tuple(results[len(results) - count :])
            del results[len(results) - count :]
            if isinstance(node, Load):
                source = node.source
                results.append(_read(source.__chandle__(), str(source.name), parts))
                continue
            total = _Sum(1)
            for part in parts:
                total.add(part)
            results.append(total.footprint())
    return results.pop()


def _substituted(
    expr: Footprint, values: dict[int, Footprint], memo: dict[int, Footprint]
) -> Footprint:
    """``expr`` with each variable of ``values`` replaced by its value's
    tree (item 1 and 2 of the module docstring); ``memo`` holds the
    footprints already substituted, by identity."""
    if not any(var in values for var in expr.occurs):
        return expr
    done = memo.get(id(expr))
    if done is not None:
        return done
    total = _Sum(expr.size)
    for var, count in expr.occurs.items():
        value = values.get(var)
        if value is None:
            total.occurs[var] = total.occurs.get(var, 0) + count
        else:
            total.size += count * (value.size - 1)
            total.add_contents(value, count)
    for buffer, name, indices, count in expr.loads.values():
        moved = tuple(_substituted(i, values, memo) for i in indices)
        total.add_load(_load_key(buffer, moved), buffer, name, moved, count)
    memo[id(expr)] = result = total.footprint()
    return result


def inlined(
    consumer: Footprint, buffer: Any, producer: Footprint, iterators: Sequence[int]
) -> Footprint | None:
    """The consumer's footprint once ``compute_inline`` has put the value
    of the producer writing ``buffer`` (``producer``, stored at its
    iterators ``iterators``, by handle, in order) in place of its reads of
    ``buffer``; None where a read of ``buffer`` is inside another read's
    index (the consumer is then walked again)."""
    handle = buffer.__chandle__()
    reads = []
    for held, _, indices, count in consumer.loads.values():
        if any(handle in index.buffers for index in indices):
            return None
        if held == handle:
            if len(indices) != len(iterators):
                return None
            reads.append((indices, count))
    total = _Sum()
    total.add(consumer)
    name = str(buffer.name)
    for indices, count in reads:
        values = dict(zip(iterators, indices, strict=True))
        total.add(_substituted(producer, values, {}), count)
        total.add(_read(handle, name, indices), -count)
    return total.footprint()
