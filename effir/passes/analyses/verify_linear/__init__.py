"""The linearity verifier for state-passing (A2) programs.

Why. A PRNG key is a value, so nothing stops a program from handing the
same key to two random operators, and then the two "independent" draws are
equal. JAX checks this ("key reuse") at trace time; effir checks it
statically on A2 programs, where ``state-passing`` has turned every global
state cell into values threaded through functions. Threading is the other
half of the contract: an A2 function that receives the state of a cell and
is meant to hand back its new value must really thread it, and the world
token that orders output (``io``) must flow through every output exactly
once, or the rewrite has silently dropped an update or reordered output.

What is a place. A *place* is a value that the rules track: a variable (or
an anonymous call result) whose type holds a ``Key``, a world token, a
value that is new state, or a closure that captured such a value. A
projection path names a part of it: ``%ks.0`` and ``%ks.1`` are different
places, and using ``%ks`` whole uses both.

The walk. Each function body (global ``def`` and every ``fn``) is walked
once in evaluation order (a call's arguments left to right, then the call)
by the framework's ``Evaluator`` (effir.ir.evaluator), so deep programs
need no Python recursion. The walk keeps a *path state*: which places were
used and which obligations are met on the path taken so far. ``if`` and
``match`` fork it: each branch is walked from the same state (the changes
are logged and undone), and at the join the worst case is kept: a place
used in any branch counts as used, an obligation counts as met only if
every branch met it.

Uses. An occurrence as a call argument, returned value, ``if``/``match``
scrutinee, ``ref``/``ref_write`` value or closure capture is a *use*. A
tuple field, a branch result and a pattern variable are *moves*: they use
the source too, and the new place takes over the source's world tokens,
which must then be used through it. A ``let`` alias (``let %t = %p.0``, or
a second name of a value) is a move of its world tokens and closures, but
a *view* of its key parts: a use of the alias's key parts is a use of the
source's there, and nothing else is, so ``to-anf``'s one ``let %t = %p.0``
per occurrence of ``%p.0.0`` does not read the key ``%p.0.1`` beside the
tensor, while two aliases whose keys are both used are reported at those
uses. New state, in contrast, counts as kept once it has been bound or
used: an A1 program may write a cell twice, and the first new value is
then rightly dead in A2.

Rules.

1. [RULE LINEAR-KEY] A part of a place whose type holds a ``Key`` is used at most
   once on every path. A key free in a ``fn`` is used where the closure is
   created; the closure is then a place used at most once (a call is a use),
   and passing it to a control-flow operator (trait ``control_flow``) reuses
   the key in every iteration. Not applied in a function with the attribute
   ``replays_keys=True`` nor in the closures it creates: ``grad`` marks the
   functions it generates so, because their backward reads the forward's
   keys again on purpose (dropout's rule draws the forward's mask with the
   same key; a recomputed loop step pops its keys from the tape). The
   user's own functions stay checked, and so do rules 2-4 in marked ones.
2. [RULE LINEAR-WORLD] The world token is used exactly once on every path: the
   ``io`` state parameter, the ``state_outputs`` of an ``io`` operator
   (``io.print``'s output 0), the ``io`` field of a state-passing call's
   result, and a world token in a loop's initial state, which the loop body
   (a ``fn`` it is given) must use once and which comes out in the loop's
   final state.
3. [RULE LINEAR-STATE] New state is not dropped: the ``state_outputs`` of an
   operator call (``nn.batch_norm_train``'s new mean and variance) and
   fields 1.. of a call to a function whose ``state_out`` is non-empty
   (callee known statically: a global ``def``, or a variable let-bound to a
   ``fn``) are used or bound on every path, field by field for tuples. With
   ``require_incoming_use=True`` each ``state_in`` parameter of a cell that
   is also in ``state_out`` must be used too; that is off by default because
   a function that only writes a cell (``ref_write(@acc, ...)`` in A1)
   rightly ignores the cell's incoming value.
4. [RULE LINEAR-SHAPE] A function with ``state_out`` returns on every path a tuple
   of ``1 + len(state_out)`` fields (a tuple literal, or a value whose type
   is such a tuple); ``state_in`` names at most as many cells as there are
   parameters, without repeats, and each such parameter has the type of its
   cell's content (the world token: ``Tensor[(), int64]``).

Each violation is one ``LinearityError`` naming both places involved (the
binder or producer, and the second use or the end of the path that drops
it), located at the offending expression.

What it does not check (imprecise, never crashing): keys inside ``Ref``
cells (A2 programs have no references); what an unknown callee does with
its arguments (each counts as one use); ADT values field by field (a
constructor's arguments move into the value as a whole); a closure stored
in a tuple and called from there (captures are followed through ``let``
only); state other than the world token carried through a loop (a program
may drop a loop's final state); whether new state is returned in the right
position of the result tuple. A graph-form shared expression is evaluated
once per function, as the interpreter does, but one that a closure needs is
treated as evaluated again inside it.

The package: ``places`` (places, obligations and the path state),
``verifier`` (the walk and the rules), ``captures`` (what closures capture,
and the shared nodes of graph form) and ``locations`` (where a use is, for
the messages).
"""

from __future__ import annotations

from effir.ir.diagnostics import LinearityError
from effir.ir.module import IRModule
from effir.passes.analyses.infer_type import check
from effir.passes.analyses.verify_linear.verifier import Verifier

__all__ = ["linearity_errors", "verify_linear"]


def linearity_errors(
    module: IRModule, *, require_incoming_use: bool = False
) -> list[LinearityError]:
    """Every violation of the rules above, in source order. Type-checks the
    module first when its types are missing (Key detection needs them)."""
    if any(not fn.body.has_type for fn in module.functions.values()):
        check(module)
    return Verifier(module, require_incoming_use).run()


def verify_linear(module: IRModule, *, require_incoming_use: bool = False) -> None:
    """Raise the first ``LinearityError`` (the others as its notes)."""
    errors = linearity_errors(module, require_incoming_use=require_incoming_use)
    if errors:
        first = errors[0]
        raise LinearityError(first.message, first.span, tuple(str(e) for e in errors[1:]))
