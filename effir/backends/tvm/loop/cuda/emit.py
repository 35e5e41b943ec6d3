"""[EMIT] An element of a stage as TIR statements of one thread: the
stage's ``te`` expression with its axes replaced by the element's
coordinates, every read of a materialised tensor replaced by a load from
where that tensor lives (``Reads``), and every read of an inlined
operation by a register holding that operation's element, computed first
(once per element and index: ``let``-free, so that TVM's simplifier never
substitutes a chain of them into one expression, which is exponential for
threefry's rounds; kernel/random_ops.py).

The inlined elements an element needs are found by a worklist and emitted
producers first (an explicit depth-first order): no recursion in the
depth of the step's graph."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import tvm
import tvm_ffi
from tvm import te, tirx

Load = Callable[[te.Tensor, list[Any]], Any]
Key = tuple[Any, int, str]  # an inlined operation, its output, the index's text
"""Where a materialised tensor's element is read: ``load(tensor, index)``."""


@dataclass
class _Node:
    """An inlined operation's element an element needs: the register it is
    computed into, its expression, the nodes that expression reads."""

    buffer: Any
    value: Any = None
    deps: list[Key] = field(default_factory=list)


class Elements:
    """Builds elements' statements for one kernel ([EMIT])."""

    def __init__(self, inlined: set[Any], local: Callable[[str, str], Any]) -> None:
        self.inlined = inlined
        self.local = local

    def expressions(
        self, exprs: Sequence[Any], mapping: dict[Any, Any], load: Load
    ) -> tuple[list[Any], list[Any]]:
        """``exprs`` with ``mapping``'s variables replaced, as the statements
        computing the inlined elements they read and the expressions
        left (which read those elements' registers)."""
        nodes: dict[Key, _Node] = {}
        pending: list[tuple[Key, Any, list[Any]]] = []

        def rewrite(expr: Any, var_map: dict[Any, Any], deps: list[Key]) -> Any:
            def on_call(call: Any, mutator: Any) -> Any:
                if call.op.name != "te.tensor_load":
                    return mutator.default_mutate(call)
                tensor = call.args[0]
                index = [mutator.mutate(i) for i in call.args[1:]]
                if tensor.op not in self.inlined:
                    return load(tensor, index)
                key = (tensor.op, int(tensor.value_index), str(index))
                node = nodes.get(key)
                if node is None:
                    node = nodes[key] = _Node(self.local(f"{tensor.op.name}_v", str(tensor.dtype)))
                    pending.append((key, tensor, index))
                deps.append(key)
                return tirx.BufferLoad(node.buffer, [0])

            return tvm_ffi.structural_mutate(
                expr, [(tvm.ir.expr.Call, on_call), (tirx.Var, lambda v, _m: var_map.get(v, v))]
            )

        root_deps: list[Key] = []
        results = [rewrite(e, mapping, root_deps) for e in exprs]
        while pending:
            key, tensor, index = pending.pop()
            op = tensor.op
            axes = dict(zip([iv.var for iv in op.axis], index, strict=True))
            node = nodes[key]
            node.value = rewrite(op.body[tensor.value_index], axes, node.deps)
        return _in_order(nodes, root_deps), results


def _in_order(nodes: dict[Key, _Node], roots: list[Key]) -> list[Any]:
    """The nodes' stores, each after those it reads (iterative depth-first)."""
    done: set[Key] = set()
    entered: set[Key] = set()
    stmts: list[Any] = []
    stack: list[tuple[Key, bool]] = [(k, False) for k in reversed(roots)]
    while stack:
        key, expanded = stack.pop()
        node = nodes[key]
        if expanded:
            done.add(key)
            stmts.append(tirx.BufferStore(node.buffer, node.value, [0]))
            continue
        if key in entered:
            continue
        entered.add(key)
        stack.append((key, True))
        stack.extend((d, False) for d in reversed(node.deps) if d not in done)
    return stmts


def combine(reducer: Any, acc: list[Any], value: list[Any]) -> list[Any]:
    """``reducer``'s combination of ``acc`` and ``value`` (one expression
    per result of a tuple reduction, all reading the old ``acc``)."""
    mapping = {
        **dict(zip(reducer.lhs, acc, strict=True)),
        **dict(zip(reducer.rhs, value, strict=True)),
    }
    return [
        tvm_ffi.structural_map(r, (tirx.Var, lambda v: mapping.get(v, v))) for r in reducer.result
    ]


def decode(flat: Any, extents: Sequence[int]) -> list[Any]:
    """The row-major coordinates of ``flat`` in a grid of ``extents``."""
    coords: list[Any] = []
    rest = flat
    for k, n in enumerate(reversed(extents)):
        last = k == len(extents) - 1
        coords.append(rest if last else tirx.floormod(rest, n))
        if not last:
            rest = tirx.floordiv(rest, n)
    return list(reversed(coords))
