"""partial-eval: evaluate what is known at compile time, keep the rest.

An online partial evaluator over A-normal form, in the spirit of Relay's
PartialEvaluate, kept deliberately simple so that it always terminates and
never blows up. Every variable gets a *partially static value* (``PV``): the
residual atom that holds it at run time, plus what is known about it: a
constant tensor, the fields of a tuple, the constructor and fields of an ADT
value, the function (and the static values of its free variables) of a
closure or a global function, or the identity of the reference it is.

Values
- A pure operator whose arguments are all constants is evaluated with its
  own numpy rule (bit-identical to the interpreter), up to ``MAX_ELEMENTS``
  elements; operators with effects never are.
- A projection of a known tuple, an ``if`` on a constant, a ``match`` on a
  known constructor resolve statically; the taken branch is evaluated in
  place.

Calls and loops (the fuel rules that guarantee termination)
- A call of a known function (a closure or a global) is inlined when it is
  not recursive (the function is not already being inlined: recursion is
  residualised after one unfolding), its body is at most ``MAX_INLINE``
  nodes, and the pass's total budget (ten times the input's size) is not
  spent: the output is at most linearly larger than the input.
- An inlined function with type parameters is its instance at the call
  site (``instances``): its type parameters replaced by the types inference
  gave the call, so the residual mentions only the type parameters of the
  function it is in; when one its body mentions stays unknown, the call
  stays. Its symbolic dimensions are its own too: the instance is written
  in the caller's sizes, each one bound from the call's types
  [RULE DIMS-BIND] (``?`` where they do not tell).
- A ``cf.foreach`` whose sequence length is static, at most
  ``MAX_UNROLL`` steps, unrolls when its body is a known function that could
  be inlined that many times within the budget: each step is the body
  inlined on ``take(xs, t, axis=0)`` and the state, and the outputs are
  stacked, exactly as the operator's own rule does. A ``cf.while_loop``
  unrolls the same way when its condition folds to a constant at every step
  and turns false within ``MAX_UNROLL`` steps (or ``max_iterations`` stops
  it); the steps are evaluated on trial, and a condition that is not a
  constant throws the trial away. Longer loops stay loops (a backend
  compiles a loop as a whole), their bodies partially evaluated.

The store (references whose identity is known)
- A global cell (``@rng``) and a ``ref(...)`` made in the function being
  evaluated have a known identity. The pass keeps each one's current
  contents as a PV in a store: a read of a known value is that value (no
  read is emitted), a write only updates the store and marks it *dirty*. So
  a block that reads and writes a cell many times (explicate's expansion of
  a dropout per layer, once inlined) keeps one read at the start and one
  write at the end, as the effects RFC promised.
- Dirty values are written back (*flushed*) before anything that may observe
  the cell, and forgotten after anything that may change it. Unknown effects
  invalidate only what they may touch: a call of a global function touches
  the cells its inferred effects name (``infer_effects``); a closure or loop
  body touches the cells its body names (directly or through the globals it
  calls), or every cell when it calls an unknown function or uses a
  reference it did not make; a read or write through a reference of unknown
  identity may touch every cell. Operators with ``random``/``state`` effects
  name the cell they touch as an argument.
- A local reference *escapes* when it is used other than by
  ``ref_read``/``ref_write``: passed to a call, stored in a tuple or ADT or
  another reference, captured by a closure, returned. Until then no other
  code can reach it, so only this function's own reads and writes touch it;
  from then on it is flushed and no longer tracked. A local reference that
  never escapes is never written back: its last write is dead.
- An ``if`` or ``match`` whose branch is not known flushes every dirty value
  first; each branch starts from the same known values and flushes its own
  writes at its end; afterwards a value stays known only if no branch
  changed it. A closure's body starts from an empty store (it may run at any
  time) and flushes its global writes at its end, as a function body does.

Everything else is residualised in evaluation order, so effects (outputs,
reads and writes of references that stay) keep their order.

The pass ends with ``dce``: the bindings of values it resolved statically
(a tuple whose fields were used one by one, a reference nobody reads any
more) are dead, and a dead tuple that mentions a key or the world token
would make the program read as non-linear. A folded failure stays a run-time
failure (the call is kept), unless its result is unused and dce removes it,
as dce's own rules say.

The package: ``values`` (partially static values and the store's
entries), ``evaluator`` (blocks, the store, compounds, calls and inlining),
``unroll`` (short loops), ``instances`` (inlined polymorphic functions),
``touches`` (what unknown code may touch) and ``static`` (folding and
static matching).
"""

from __future__ import annotations

from effir.ir.functor import pre_order
from effir.ir.module import IRModule
from effir.passes.analyses.infer_type import check
from effir.passes.infra.transform import Option, PassError, module_pass
from effir.passes.transforms.anf import to_anf
from effir.passes.transforms.dce import dce
from effir.passes.transforms.partial_eval.evaluator import PartialEvaluator
from effir.passes.transforms.partial_eval.values import MAX_ELEMENTS, MAX_INLINE, MAX_UNROLL

__all__ = ["MAX_ELEMENTS", "MAX_INLINE", "MAX_UNROLL", "partial_eval"]


@module_pass(
    name="partial-eval",
    establishes={"anf"},
    preserves={"a2"},  # inlines and folds: adds no effect
    doc="fold constants, resolve static ifs, matches and projections, inline known calls",
    options={
        "fuel": Option(
            "nodes inlining and unrolling may add (0: ten times the input's size)", minimum=0
        )
    },
)
def partial_eval(module: IRModule, fuel: int = 0) -> IRModule:
    """Every global function partially evaluated (see the module docstring).
    ``fuel`` bounds the nodes that inlining and unrolling may add (the
    pipeline text's ``partial-eval{fuel=N}``); 0, the default, allows ten
    times the input's size, and a negative fuel is refused."""
    if fuel < 0:
        raise PassError(
            f"partial-eval: fuel must be 0 (ten times the input's size) or more, got {fuel}"
        )
    module = check(to_anf(module))  # residual closures need their parameters' types
    size = sum(1 for fn in module.functions.values() for _ in pre_order(fn))
    evaluator = PartialEvaluator(module, budget=fuel if fuel > 0 else 10 * size)
    functions = {name: evaluator.global_function(name) for name in module.functions}
    # The bindings of values resolved statically (a tuple whose fields were
    # used one by one) are dead now; left in place, a dead tuple would still
    # mention a key or the world token, and the program would no longer read
    # as linear.
    return dce(IRModule(functions, module.type_defs, module.cells))
