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

The checker ``bbnf_problem`` (effir/passes/infra/invariants.py) reports the first violation with its place.
"""

from __future__ import annotations

from typing import overload

from effir.ir.expr import Expr, Function
from effir.ir.module import IRModule
from effir.passes.infra.transform import module_pass
from effir.passes.transforms.anf import normal_form


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


@overload
def to_bbnf_expr(expr: Function) -> Function: ...


@overload
def to_bbnf_expr(expr: Expr) -> Expr: ...


def to_bbnf_expr(expr: Expr) -> Expr:
    """``expr`` in basic-block normal form; a Function stays a Function
    (the normalizer's root is evaluated by its ``Function`` hook)."""
    return normal_form(expr, atomic=False)
