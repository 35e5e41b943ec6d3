"""The invariants a pass may require of its input or establish in its
output, each a named property with a checker (``INVARIANTS``): ``anf``
(A-normal form), ``bbnf`` (basic-block normal form), ``gnf`` (graph normal
form), ``a2`` (no global state is read or written: a state-passing
program). ``PassContext`` asks them before a pass runs and the registry
refuses a pass that names another (``effir.passes.infra.transform``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from effir.ir.expr import (
    ATOM_TYPES,
    Call,
    Expr,
    Function,
    GlobalVar,
    If,
    Let,
    Match,
    Op,
    RefCreate,
    RefRead,
    RefWrite,
    Tuple,
    TupleGetItem,
    Var,
    is_atom,
)
from effir.ir.module import IRModule
from effir.ir.op import op_def
from effir.ir.visitor import pre_order
from effir.passes.analyses.anf_sharing import Facts, expression_edges, lifted_nodes


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
    for name, fn in module.functions.items():
        for node in pre_order(fn):
            if not isinstance(node, Expr):
                continue
            for slot, child, opens in expression_edges(node):
                if not isinstance(child, Let) or opens:
                    continue
                if isinstance(node, Let):
                    if slot == "body":
                        continue
                    where = "the value of a let"
                else:
                    where = describe(node)
                return (
                    f"@{name}: a let{located(child)} is nested in {where}; "
                    "in basic-block normal form lets only make up blocks"
                )
        lifted = lifted_nodes(fn)
        if lifted:
            node = lifted[-1]  # outermost first: the order is children first
            return (
                f"@{name}: {describe(node)}{located(node)} is shared by several blocks; "
                "basic-block normal form binds it in the block that encloses its uses"
            )
    return None


def gnf_problem(module: IRModule) -> str | None:
    """Where ``module`` is not in graph normal form, or None."""
    for name, fn in module.functions.items():
        for let in removable_lets(fn):
            return (
                f"@{name}: let %{let.var.name_hint}{located(let)} binds a pure value; "
                "graph normal form writes the value where it is used"
            )
    return None


def removable_lets(root: Expr) -> Iterator[Let]:
    """The lets of ``root`` that graph normal form removes [RULE GNF-KEEP]."""
    facts = Facts(root)
    pinned = facts.pinned()
    captured = captured_lets(facts)
    for node in facts.order:
        if not isinstance(node, Let) or node.var.type_annotation is not None:
            continue
        if node.var in captured:
            continue
        value = node.value
        if isinstance(value, ATOM_TYPES):
            if not (isinstance(value, Var) and value in facts.recursive):
                yield node
        elif id(value) not in pinned:
            yield node


def captured_lets(facts: Facts, dying: frozenset[int] = frozenset()) -> set[Var]:
    """Let variables used inside a function literal within their scope: a
    use nested in more function literals than the let. Nodes go parents
    first (reversed post-order); a shared node counts at its deepest place.
    Uses inside the values of the lets ``dying`` (ids) do not count: those
    values go, with the closures in them (to_gnf.py's backward sweep)."""
    root = facts.order[-1] if facts.order else None
    depth: dict[int, int] = {id(root): 0}
    deepest_use: dict[Var, int] = {}
    bound_at: dict[Var, int] = {}
    for node in reversed(facts.order):
        here = depth.get(id(node))
        if here is None:  # reached only through a dying let's value
            continue
        if isinstance(node, Let):
            bound_at[node.var] = here
        inner = here + 1 if isinstance(node, Function) else here
        for _, child, _ in expression_edges(node):
            if id(node) in dying and child is node.value:  # type: ignore[attr-defined]
                continue
            if isinstance(child, Var):
                deepest_use[child] = max(deepest_use.get(child, 0), inner)
            elif not isinstance(child, ATOM_TYPES):
                depth[id(child)] = max(depth.get(id(child), -1), inner)
    return {v for v, d in bound_at.items() if deepest_use.get(v, 0) > d}


def located(node: Expr) -> str:
    """`` at file:line:col`` when ``node`` has a span, else nothing."""
    return f" at {node.span}" if node.span is not None else ""


def describe(node: Expr) -> str:
    """A short description of an expression, for messages."""
    if isinstance(node, Call):
        if isinstance(node.callee, Op):
            return f"the call of {node.callee.name}"
        return "a call"
    kinds: list[tuple[type, str]] = [
        (Let, "a let"),
        (Tuple, "a tuple"),
        (TupleGetItem, "a tuple projection"),
        (If, "an if"),
        (Match, "a match"),
        (Function, "a function literal"),
        (RefCreate, "a ref"),
        (RefRead, "a ref_read"),
        (RefWrite, "a ref_write"),
    ]
    for cls, text in kinds:
        if isinstance(node, cls):
            return text
    return f"a {type(node).__name__}"


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
