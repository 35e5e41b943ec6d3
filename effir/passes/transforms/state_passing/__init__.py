"""state-passing: effectful A1 programs become explicit state passing (A2).

An A1 program keeps its state in global cells (``global @rng: Ref[Key]``)
and local references, and changes it with ``ref_read``/``ref_write``. The A2
program has no state at all: every function that (transitively) touches a
cell takes the cell's current value as an extra parameter and returns its
new value after the result. It is then a pure program, which the optimiser
may reorder, merge and drop in freely, and which several threads can run at
once with separate states.

The convention (docs/passes.md). A function that needs cells gets the
attributes ``state_in`` (the cells whose values it takes, appended to its
parameters) and ``state_out`` (the cells whose new values it returns:
``(result, new_1, ..., new_k)``; with no ``state_out`` it returns the result
alone). Cells are ordered as declared in the module, then local references
in the order they are created, then the world token ``io`` (a count of the
outputs so far; ``debug.print(%x)`` becomes ``io.print(%world, %x)``).
A function takes exactly the cells it reads or writes, including through
its callees, and returns exactly those it writes; a function that touches
nothing keeps its signature exactly. Cell declarations stay in the module:
they are the initial state a caller starts from.

How it works, in order:

1. ``explicate`` (surface operators become reads and writes) and A-normal
   form, so that each effect has a binding of its own.
2. Cells passed to global functions are resolved by specialisation: a call
   ``@layer(%x, @bn1)`` calls a copy of ``@layer`` in which the parameter is
   ``@bn1`` itself (one copy per function and cells, recursion included).
3. A flow analysis (``infer_effects.solve_flows``: 0-CFA) tells which cell
   or local reference every ``ref_read``/``ref_write`` touches and which
   functions every call may call. A reference that may be one of several
   cells is rejected: the pass must know which value to pass.
4. Signatures, by a fixpoint over the call graph (recursion and mutual
   recursion included). Functions that may be called from the same call site
   (closures stored in one tuple, passed to one higher-order parameter) must
   agree on their signature, so they are grouped (union-find) and each group
   takes the union of its members' cells: this is specialisation of the
   calling convention rather than effect polymorphism. A global function
   keeps its own signature for direct calls; where it is used as a value in
   a group that needs more cells, an adapter closure is passed instead.
5. Translation, binding by binding, with the current value of each cell in
   an environment: a read is that value, a write replaces it, a call passes
   the values and rebinds the new ones, both branches of an ``if``/``match``
   return the same new values, a loop body's written cells become part of
   the loop-carried state (cells it only reads are captured; a loop
   condition that writes state moves into the step), and a local
   ``ref(...)`` becomes a plain value from its creation on.

A closure over a local reference may be passed down to a global function
(``@map(%add_to_acc, %xs)``): the callee then reads and writes the
reference, so it takes the reference's value as state like a cell's; each
caller gets its own copy of the callee and of what the callee calls
directly ([RULE STATE-DOWNWARD], ``_copy_for_callers``), since another caller has
other references or none.

What is rejected, with a located error, rather than mis-compiled: a
reference whose cell is not unique, a local reference used as a value (passed,
stored, returned), a closure over a local reference that escapes its
function (returned by it, stored in a reference or a data structure, or
called where the reference is not live), and an ADT field holding functions
that need different cells.

The package follows the steps: ``specialise`` (2 and [RULE STATE-DOWNWARD]),
``analyse`` (3 and 4, with the calling convention in ``signature``),
``translate`` (5) and ``loops`` (5, for loop operators).
"""

from __future__ import annotations

from effir.ir.diagnostics import EffectError, TypeCheckError, WellFormedError
from effir.ir.expr import Call, Op, RefCreate
from effir.ir.functor import pre_order
from effir.ir.module import IRModule
from effir.ir.op import op_def
from effir.passes.analyses.infer_type import check
from effir.passes.infra.transform import module_pass
from effir.passes.transforms.explicate import explicate
from effir.passes.transforms.state_passing.analyse import Analysis, expr_nodes
from effir.passes.transforms.state_passing.signature import Signature
from effir.passes.transforms.state_passing.specialise import (
    DownwardClosures,
    copy_for_callers,
    specialise_cell_arguments,
)
from effir.passes.transforms.state_passing.translate import Translator

__all__ = ["Signature", "state_passing"]


@module_pass(
    name="state-passing",
    establishes={"anf", "a2"},
    preserves=(),  # rebuilds every function that touches state: no other form survives
    doc="global state becomes parameters and results (A1 -> A2)",
)
def state_passing(module: IRModule) -> IRModule:
    """The A2 form of ``module`` (see the module docstring); raises
    EffectError, located, for what it cannot turn into state passing."""
    module = explicate(module)
    if not _has_state(module):
        return module  # nothing to pass: every function keeps its signature
    check(module)
    nodes = {name: expr_nodes(fn) for name, fn in module.functions.items()}
    specialised = specialise_cell_arguments(module, nodes)
    if specialised is not module:  # the copies need their types too
        module = check(specialised)
        nodes = {name: expr_nodes(fn) for name, fn in module.functions.items()}
    copies: dict[str, str] = {}  # a copy made for a caller's local references -> that caller
    while True:
        try:
            analysis = Analysis(module, nodes, copies)
            break
        except DownwardClosures as need:  # [RULE STATE-DOWNWARD]
            module = check(copy_for_callers(module, need.pairs, copies))
            nodes = {name: expr_nodes(fn) for name, fn in module.functions.items()}
    result = Translator(module, analysis).run()
    try:
        check(result)
    except (TypeCheckError, WellFormedError) as err:  # a bug of this pass, not the user's
        raise EffectError(
            "state passing produced an ill-typed program; this is a bug in effir, "
            f"please report it: {err.message}",
            err.span,
            err.notes,
        ) from None
    return result


def _has_state(module: IRModule) -> bool:
    """Whether anything could need state passing: a global cell, a local
    reference or an output operator."""
    if module.cells:
        return True
    for fn in module.functions.values():
        for node in pre_order(fn):
            if isinstance(node, RefCreate):
                return True
            if isinstance(node, Call) and isinstance(node.callee, Op):
                if op_def(node.callee).effect != "pure":
                    return True
    return False
