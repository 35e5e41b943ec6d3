"""The two unsegmented backwards of a loop: from stacked residuals
(``checkpoint="none"``) and from stacked carries (``"loop"``).

``residuals``: the forward also outputs, per step, the *residuals*, the
forward values of the step that its backward reads; if one is not a
tensor (a branch's pullback closure, a key), nothing is emitted and the
caller falls back to ``recompute``. A policy may choose which residuals
are stored and which are recomputed in the backward step from the stored
ones (``Saves``, given by the policies of ``effir.autodiff.checkpoint``
as JAX's ``jax.checkpoint`` policies are): recomputation runs the same
operations on the same values, so the gradients do not change. A nested static loop's residual stacks are typed, so the
enclosing loop stacks them in turn.

``recompute``: only the carry each step started from is stored; the
backward recomputes the step's forward from it, then runs its backward (in
segments, as ``"sqrt"``'s, when weight-gradient terms are hoisted:
``static_segments``, so that one chunk's factors are stored). Keys and ADT
values in the carry go on a tape (``keytape``).
"""

from __future__ import annotations

from collections.abc import Callable

from effir.passes.analyses.anf_sharing import fresh_binders

from ..ir.analysis import free_vars
from ..ir.builder import LetBuilder
from ..ir.expr import Call, Constant, Expr, Function, Op, TupleGetItem, Var
from ..ir.expr_functor import Computation
from ..ir.op import op_def
from ..ir.types import TensorType, TupleType
from ..ir.vjp import DifferentiationError
from . import keytape
from .cotangent import ct_type, differentiable, materialize, reverse, stackable
from .loop_vjp import LoopVjp, Slots, fixed_shape
from .reverse import Reverse
from .runtime_segments import RuntimeSegments
from .segments import Segments
from .static_segments import StaticSegments, geometry


def segments_of(loop: LoopVjp) -> Segments:
    """How ``loop``'s steps are cut: by its static length, else at run time."""
    if loop.foreach and isinstance(loop.length, int):
        return StaticSegments(geometry(loop))
    return RuntimeSegments()


Saves = Callable[[Var, Call], bool]
"""Whether a residual computed by an operator call is stored (else it is
recomputed in the backward step from what is stored)."""


def residuals(loop: LoopVjp, b: LetBuilder, saves: Saves) -> Computation[bool]:
    """Stack the step's residuals (those ``saves`` keeps; the others are
    recomputed from them: ``recomputed``); False (nothing emitted) where
    one cannot be stacked."""
    sub = Reverse(loop.ad)
    fb = b.child()
    result = yield sub.forward_steps(loop.body.body, fb)
    ct_out, ct_carry = Var("ct_out", span=loop.span), Var("ct_carry", span=loop.span)
    bb = b.child()
    x_ct, prev, free_cts = loop.step_backward(bb, sub, result, ct_out, ct_carry)
    probe = Function(
        (ct_out, ct_carry), bb.finish(bb.tuple([x_ct, prev, *free_cts])), span=loop.span
    )
    forward_vars = set(loop.body.params) | {v for v, _ in fb.bindings}
    kept = [v for v in free_vars(probe) if v in forward_vars]
    kept, again = recomputed(loop, kept, fb.bindings, saves)
    if not all(v.has_type and stackable(v.checked_type) for v in kept):
        return False
    out = fb.emit_get(result, 0, "out")
    carry = fb.emit_get(result, 1, "carry")
    per_step = fb.emit(fb.tuple([out, *kept]), "per_step")
    ret = fb.emit(fb.tuple([per_step, carry]), "ret")
    body = Function(loop.body.params, fb.finish(ret), span=loop.body.span)
    if loop.shared:
        # the closure may be the body of another loop too: its binders
        # (the parameters, the step's forward) are bound once per loop
        body = fresh_binders(body)
        assert isinstance(body, Function)
    looped = loop.rebuild(b, body)
    outs, (stacked,), final = loop.bind_result(b, looped)
    stacks = [b.emit_get(stacked, i + 1, "stack") for i in range(len(kept))]
    if isinstance(loop.length, int) and all(fixed_shape(v.checked_type) for v in kept):
        type_stacks(loop, looped, stacked, outs, final, stacks, kept)

    out_ct_type = ct_type(loop.var.checked_type.fields[0], loop.ad.adts)
    slots = Slots([out_ct_type, *(v.checked_type for v in kept)])

    def make_step(nb: LetBuilder, step: Var, carry: Var) -> tuple[Expr, Expr, list[Expr]]:
        nb.bind(ct_out, slots.get(nb, step, 0, "ct_out"))
        for i, v in enumerate(kept):
            nb.bind(v, slots.get(nb, step, i + 1, "residual"))
        nb.bind(ct_carry, TupleGetItem(carry, 0))
        for v, call in again:  # the forward values not stored, in their order
            nb.bind(v, Call(call.callee, call.args, call.attrs, span=call.span))
        for v, value in bb.bindings:  # the step's backward, generated once
            nb.bind(v, value)
        return x_ct, prev, free_cts

    def back(bb2: LetBuilder) -> None:
        seeds = loop.seeds(bb2, outs, final)
        if seeds is None:
            return
        ct_outs, ct_final = seeds
        sequences = [reverse(bb2, ct_outs, out_ct_type)]
        sequences += [reverse(bb2, s, v.checked_type) for s, v in zip(stacks, kept, strict=True)]
        backward_loop(loop, bb2, slots.pack(bb2, sequences), ct_final, make_step)

    loop.rev.tape.append(back)
    return True


def recomputed(
    loop: LoopVjp, kept: list[Var], bindings: list[tuple[Var, Expr]], saves: Saves
) -> tuple[list[Var], list[tuple[Var, Call]]]:
    """The residuals ``kept`` split into those stored and the bindings
    recomputed in the backward step: an operator call (not a loop) whose
    operands are tensors is recomputed where ``saves`` says so, from its
    operands, stored or recomputed in turn (a worklist over the step's
    forward, in its order: no recursion). Random operators take a key,
    which is not stored per step: their results are always stored."""
    bound = dict(bindings)
    params = set(loop.body.params)
    stored: set[Var] = set()
    again: set[Var] = set()
    work = list(kept)
    while work:
        v = work.pop()
        if v in stored or v in again:
            continue
        value = bound.get(v)
        if v in params or not _recomputable(value) or saves(v, value):
            stored.add(v)
            continue
        again.add(v)
        work.extend(a for a in value.args if isinstance(a, Var) and (a in bound or a in params))
    if not again:
        return kept, []
    order = [*loop.body.params, *(v for v, _ in bindings)]
    return [v for v in order if v in stored], [(v, bound[v]) for v, _ in bindings if v in again]


def _recomputable(value: Expr | None) -> bool:
    """An operator call, not a loop, whose variable operands are tensors."""
    if not isinstance(value, Call) or not isinstance(value.callee, Op):
        return False
    if "loop" in op_def(value.callee).rules:
        return False
    return all(
        isinstance(a, Var | Constant) and (not isinstance(a, Var) or _tensor(a)) for a in value.args
    )


def _tensor(v: Var) -> bool:
    return v.has_type and isinstance(v.checked_type, TensorType)


def type_stacks(
    loop: LoopVjp,
    looped: Var,
    stacked: Var,
    outs: Var,
    final: Var,
    stacks: list[Var],
    kept: list[Var],
) -> None:
    """Type the residual loop's results, so that an enclosing loop may
    stack them as its residuals in turn (the step's backward reads
    them): each level's body is then differentiated once, not once more
    per enclosing level. Only for a static number of steps and
    residuals without ``?`` dims: a ``while_loop``'s stacks (or a
    symbolic length's) may differ in length from one step of the
    enclosing loop to the next, and cannot be stacked; such an
    enclosing loop recomputes its steps."""
    t = loop.var.checked_type
    stacked_type = TupleType((t.fields[0], *(loop.stacked_type(v.checked_type) for v in kept)))
    looped.set_checked_type(TupleType((stacked_type, t.fields[1])))
    stacked.set_checked_type(stacked_type)
    outs.set_checked_type(t.fields[0])
    final.set_checked_type(t.fields[1])
    for s, v in zip(stacks, kept, strict=True):
        s.set_checked_type(loop.stacked_type(v.checked_type))


def recompute(loop: LoopVjp, b: LetBuilder) -> None:
    """Stack each step's starting carry (``taped``: its tensors, its keys
    and ADT values on a tape); the backward recomputes the step."""
    if not (stackable(loop.init.checked_type) or loop.taped):
        raise DifferentiationError(
            "the backward of this loop recomputes each step from its carried state, "
            "which must be tensors, keys and ADT values to be stored per step (it holds "
            "a function; docs/autodiff.md)",
            loop.span,
        )
    segments = segments_of(loop)
    static = isinstance(segments, StaticSegments) and segments.geo is not None
    if static and loop.probe_plan().active:
        # in segments, so that only one chunk's hoisted factors are stored
        segments.store_all(loop, b)
        return
    if loop.taped:
        recompute_with_tape(loop, b)
        return
    looped = loop.rebuild(b, loop.storing_body(b))
    outs, (stacked,), final = loop.bind_result(b, looped)
    carries = b.emit_get(stacked, 1, "carries")
    loop.rev.tape.append(lambda bb: recompute_back(loop, bb, outs, carries, final))


def recompute_back(
    loop: LoopVjp,
    bb: LetBuilder,
    outs: Var,
    carries: Expr,
    final: Var,
    tape: tuple[Expr, ...] = (),
) -> None:
    """The reverse loop over the stored ``carries`` (``taped``: their
    tensors, and ``tape``, the forward's final tape, carried along)."""
    seeds = loop.seeds(bb, outs, final)
    if seeds is None:
        return
    ct_outs, ct_final = seeds
    sequences = [
        reverse(bb, ct_outs, loop.recompute_slots.types[0]),
        reverse(bb, carries, loop.stored_type),
    ]
    if loop.foreach:
        sequences.append(reverse(bb, loop.xs, loop.xs.checked_type))
    pack = loop.recompute_slots.pack(bb, sequences)
    backward_loop(loop, bb, pack, ct_final, loop.recompute_step, extra=tape)


def recompute_with_tape(loop: LoopVjp, b: LetBuilder) -> None:
    """``recompute`` for a carry holding keys or ADT values: its tensors
    are stacked, the others pushed on a tape carried along (``keytape``),
    which the reverse loop pops."""
    init = b.emit(b.tuple([loop.init, keytape.empty(b, loop.ad.tape_data())]), "init")
    body = loop.storing_body(b)
    if loop.foreach:
        args: tuple[Expr, ...] = (body, loop.xs, init)
    else:
        args = (loop.tape_cond(), body, init, *loop.limit)
    looped = b.emit(Call(loop.call.callee, args, loop.call.attrs, span=loop.span), "loop")
    stacked = b.emit_get(looped, 0, "stacked")
    outs = b.emit_get(stacked, 0, "outs")
    tensors = b.emit_get(stacked, 1, "carries")
    final_pair = b.emit_get(looped, 1, "final")
    final = b.emit_get(final_pair, 0, "final")
    tape_final = b.emit_get(final_pair, 1, "tape")
    b.bind(loop.var, b.tuple([outs, final]))
    loop.rev.tape.append(lambda bb: recompute_back(loop, bb, outs, tensors, final, (tape_final,)))


def backward_loop(
    loop: LoopVjp,
    bb: LetBuilder,
    sequences: Expr,
    ct_final: Expr,
    make_step: Callable[[LetBuilder, Var, Var], tuple],
    extra: tuple[Expr, ...] = (),
) -> None:
    """Emit the reverse loop over ``sequences`` (a ``Slots`` pack,
    already reversed) and add the cotangents it returns to the loop's
    inputs. ``extra``: more carried values (the key tape), after the
    accumulators."""
    zeros = [materialize(bb, None, f, f.checked_type, loop.ad.adts) for f in loop.free]
    init = bb.emit(bb.tuple([ct_final, *zeros, *extra]), "ct_init")
    looped = loop.reverse_loop(bb, sequences, init, make_step)
    plan = loop.last_plan
    fin = bb.emit_get(looped, 1, "ct_final")
    loop.rev.add(bb, loop.init, bb.emit_get(fin, 0, "ct_init"))
    steps = bb.emit_get(looped, 0, "ct_steps")
    sums: list[Expr] = []
    if plan.active:  # the hoisted terms, summed chunk by chunk (segments.py)
        factors = bb.emit_get(steps, 1, "factors")
        sums, x_steps = segments_of(loop).totals(loop, bb, plan, factors)
        steps = x_steps if x_steps is not None else bb.emit_get(steps, 0, "ct_steps")
    if loop.foreach and differentiable(loop.xs.checked_type, loop.ad.adts):
        loop.rev.add(bb, loop.xs, reverse(bb, steps, ct_type(loop.xs.checked_type, loop.ad.adts)))
    hoisted = plan.hoisted
    for j, f in enumerate(loop.free):
        acc = bb.emit_get(fin, j + 1, "ct_free")
        total = sums[hoisted.index(j)] if j in hoisted else None
        loop.rev.add(bb, f, plan.total(bb, j, acc, total))
