"""The invariants a pass may require of its input or establish in its
output, each a named property with a checker (``INVARIANTS``): ``anf``
(A-normal form), ``bbnf`` (basic-block normal form), ``gnf`` (graph normal
form), ``a2`` (no global state is read or written: a state-passing
program). ``PassContext`` asks them before a pass runs and the registry
refuses a pass that names another (``effir.passes.infra``)."""

from __future__ import annotations

from collections.abc import Callable

from ..ir.expr import Call, Expr, Function, GlobalVar, Let, Op, RefRead, RefWrite, is_atom
from ..ir.module import IRModule
from ..ir.op import op_def
from ..ir.visitor import pre_order


def anf_problem(module: IRModule) -> str | None:
    """Where ``module`` is not in A-normal form, or None."""
    for name, fn in module.functions.items():
        for node in pre_order(fn):
            if isinstance(node, Let) and isinstance(node.value, Let):
                return f"@{name} has a let whose value is a let"
            if isinstance(node, Call):
                for arg in node.args:
                    if not _is_atom_like(arg):
                        return f"@{name} has a call with a compound argument"
    return None


def a2_problem(module: IRModule) -> str | None:
    """Where ``module`` still reads or writes global state, or None."""
    cells = set(module.cells)
    for name, fn in module.functions.items():
        for node in pre_order(fn):
            if isinstance(node, RefRead | RefWrite) and isinstance(node.ref, GlobalVar):
                if node.ref.name in cells:
                    return f"@{name} reads or writes the global cell @{node.ref.name}"
            if isinstance(node, Call) and isinstance(node.callee, Op):
                definition = op_def(node.callee)
                if definition.effect in ("random", "state"):
                    return f"@{name} calls the effectful operator {definition.name}"
    return None


def bbnf_problem(module: IRModule) -> str | None:
    """Where ``module`` is not in basic-block normal form, or None."""
    from .to_bbnf import bbnf_problem as problem  # to_bbnf registers a pass: imported late

    return problem(module)


def gnf_problem(module: IRModule) -> str | None:
    """Where ``module`` is not in graph normal form, or None."""
    from .to_gnf import gnf_problem as problem

    return problem(module)


def _is_atom_like(expr: Expr) -> bool:
    """An atom, or a function literal (state passing gives loops literal bodies)."""
    return is_atom(expr) or isinstance(expr, Function)


INVARIANTS: dict[str, Callable[[IRModule], str | None]] = {
    "anf": anf_problem,
    "a2": a2_problem,
    "bbnf": bbnf_problem,
    "gnf": gnf_problem,
}
"""Each invariant's checker: a description of where it fails, or None."""

INVARIANT_TEXT = {
    "anf": "A-normal form",
    "a2": "a state-passing program (A2)",
    "bbnf": "basic-block normal form",
    "gnf": "graph normal form",
}


def is_a2(module: IRModule) -> bool:
    """A state-passing program: some function passes state, none touches a cell."""
    passes_state = any(fn.attrs.get("state_in") for fn in module.functions.values())
    return passes_state and a2_problem(module) is None


__all__ = [
    "INVARIANTS",
    "INVARIANT_TEXT",
    "a2_problem",
    "anf_problem",
    "bbnf_problem",
    "gnf_problem",
    "is_a2",
]
