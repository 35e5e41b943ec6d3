"""Basic-block normal form (``to-bbnf``), as Relay's ToBasicBlockNormalForm.

The form
--------
A *block* is a global function's body, a function literal's body, an
``if`` branch or a ``match`` clause body. A program is in basic-block
normal form when:

1. every block is a let chain: a ``let`` appears only as the head of a
   block or as the body of another ``let`` (never as an argument, a tuple
   field, a let's value...);
2. every shared expression is let-bound in the scope where it is used:
   a compound expression reachable along several edges (graph form,
   ``%0 = ...;``) has all of its uses in one block. Each use's block is the
   innermost block around it, where the uses inside a shared expression
   count in the block of that expression, as in Relay's ``CalcScope``.

Unlike A-normal form, a binding's value may be a nested expression
(``let %y = add(multiply(%x, 2f), 1f);``) and sharing inside one block stays
graph form. Relay's check accepts a node whose *first* use is in the lowest
common scope of its uses and its others deeper; here every use of a shared
node must be in one block, the condition ``to-bbnf`` establishes and the
one that makes a block's expressions a self-contained dataflow graph (what
fusion and code generation of a basic block want).

The pass
--------
``normal_form(expr, atomic=False)`` of ``anf.py``: the A-normal form
normalizer with nested operands kept nested. Let chains in nested
positions are flattened into their block; an expression shared by several
blocks is bound once, where A-normal form would bind it (a movable one at
the lowest common scope of its uses, a pinned one at its first use: see
``anf.py``); sharing within one block stays. Flattening must not reorder
effects: when an operand emits a pinned binding (a flattened let, an
effectful shared expression's first use), the pinned operands evaluated
before it are bound first. Every program in A-normal form that
``to-anf`` produces is in this form, so ``to-anf`` establishes ``bbnf`` too.

The checker ``bbnf_problem`` reports the first violation with its place.
"""

from __future__ import annotations

from ..ir.expr import (
    Call,
    Expr,
    Function,
    If,
    Let,
    Match,
    Op,
    RefCreate,
    RefRead,
    RefWrite,
    Tuple,
    TupleGetItem,
)
from ..ir.module import IRModule
from ..ir.visitor import pre_order
from .anf import normal_form
from .anf_sharing import expression_edges, lifted_nodes
from .infra import module_pass


@module_pass(
    name="to-bbnf",
    establishes={"bbnf"},
    preserves={"a2"},
    doc="every block a let chain; sharing across blocks bound in their common block",
)
def to_bbnf(module: IRModule) -> IRModule:
    """Every global function in basic-block normal form (cell initialisers
    are left alone)."""
    functions = {name: to_bbnf_expr(fn) for name, fn in module.functions.items()}
    return IRModule(functions, module.type_defs, module.cells)


def to_bbnf_expr(expr: Expr) -> Expr:
    """``expr`` in basic-block normal form; a Function stays a Function."""
    return normal_form(expr, atomic=False)


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
