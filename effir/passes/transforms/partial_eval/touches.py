"""What unknown code may touch: the global cells a call of a global
function (its inferred effects), a closure's body (the cells it names) or
anything else (every cell) may read or write, so that the evaluator writes
back and forgets just those around it."""

from __future__ import annotations

from dataclasses import dataclass

from effir.ir.expr import (
    Call,
    Expr,
    Function,
    GlobalVar,
    Let,
    Op,
    RefCreate,
    RefRead,
    RefWrite,
    Var,
)
from effir.ir.functor import pre_order
from effir.ir.module import IRModule
from effir.ir.op import op_def
from effir.ir.types import TensorType
from effir.passes.analyses.infer_effects import infer_effects
from effir.passes.transforms.partial_eval.values import Entry, RefId


@dataclass(frozen=True)
class Touch:
    """The global cells an unknown computation may read or write (``None``:
    any cell), and those it may write."""

    cells: frozenset[str] | None
    writes: frozenset[str] | None


NOTHING = Touch(frozenset(), frozenset())
ANYTHING = Touch(None, None)


def global_ids(store: dict[RefId, Entry]) -> set[RefId]:
    return {k for k in store if isinstance(k, str)}


def union(a: Touch, b: Touch) -> Touch:
    cells = None if a.cells is None or b.cells is None else a.cells | b.cells
    writes = None if a.writes is None or b.writes is None else a.writes | b.writes
    return Touch(cells, writes)


def global_touches(module: IRModule) -> dict[str, Touch]:
    """The cells each global function may read or write (``infer_effects``)."""
    result = {}
    for name, effects in infer_effects(module).functions.items():
        reads = {e.removeprefix("read @") for e in effects if e.startswith("read @")}
        writes = frozenset(e.removeprefix("write @") for e in effects if e.startswith("write @"))
        result[name] = Touch(frozenset(reads) | writes, writes)
    return result


def body_touches(fn: Function, module: IRModule, globals_: dict[str, Touch]) -> Touch:
    """The cells a closure's body may touch, read off its text: the cells it
    names, and those of the globals it calls; anything, when it calls a
    function or uses a reference that it did not make itself."""
    made_here: set[Var] = set()
    for node in pre_order(fn):
        if isinstance(node, Let) and isinstance(node.value, Function | RefCreate):
            made_here.add(node.var)
    touched = NOTHING
    for node in pre_order(fn):
        if isinstance(node, GlobalVar):
            if node.name in module.cells:
                cell = frozenset({node.name})
                touched = union(touched, Touch(cell, cell))
            elif node.name in globals_:
                touched = union(touched, globals_[node.name])
        elif isinstance(node, Call) and isinstance(node.callee, Var):
            if node.callee not in made_here:
                return ANYTHING
        elif isinstance(node, Call) and isinstance(node.callee, Op):
            if "control_flow" in op_def(node.callee).traits:
                if any(
                    isinstance(a, Var) and a not in made_here
                    for a in node.args
                    if holds_function(a)
                ):
                    return ANYTHING
        elif isinstance(node, RefRead | RefWrite):
            if isinstance(node.ref, Var) and node.ref not in made_here:
                return ANYTHING
    return touched


def holds_function(expr: Expr) -> bool:
    """Whether an argument may be a function (by its type; unknown: yes)."""
    if not expr.has_type:
        return True
    return not isinstance(expr.checked_type, TensorType)
