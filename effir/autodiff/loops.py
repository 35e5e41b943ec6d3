"""The backward of ``cf.foreach`` and ``cf.while_loop``: a reverse loop.

Both loops run a body ``(x_t, carry) -> (out_t, carry')`` (``while_loop``:
``carry -> (out_t, carry')``) some number of times. The forward is rewritten
to also output, per step, what the backward of that step needs; the
outputs are stacked by the loop itself, so a ``while_loop``, whose trip
count is data-dependent, stacks exactly as many as it ran steps (JAX
refuses reverse mode through ``while_loop`` because ``lax.while_loop``
cannot stack; effir's can: its per-step outputs already have a ``?``
leading dimension). The backward is one ``cf.foreach`` over those stacks,
reversed, carrying ``(ct of the carry, ct of each free variable)``: a
static loop's backward is again one loop, compiled as one kernel loop.

Checkpointing (``checkpoint=``) chooses what is stacked:

1. ``"none"``: the *residuals*, the forward values of the step that its
   backward reads. If one is not a tensor (a branch's pullback closure, a
   key), the loop falls back to ``"loop"``. A nested static loop's
   residual stacks are typed, so the enclosing loop stacks them in turn.
2. ``"loop"``: only the carry each step started from; the backward
   recomputes the step's forward from it, then runs its backward (in
   segments, as ``"sqrt"``'s, when weight-gradient terms are hoisted:
   ``effir.autodiff.sqrt``, so that one chunk's factors are stored).
3. ``"sqrt"``: a ``foreach`` is split into segments of about sqrt(T)
   steps (``effir.autodiff.sqrt``; T known at run time:
   ``effir.autodiff.runtime_segments``): the forward stores only each
   segment's first carry, the backward recomputes a segment with
   ``"loop"`` storage and runs its backward. A ``while_loop``'s forward
   stores nothing; its backward reruns it in segments from the initial
   carry (one more forward), then proceeds as a ``foreach``'s.

All three run the same operations on the same values, so the gradients
are bit-identical; only memory and time differ.
"""

from __future__ import annotations

from collections.abc import Callable

from ..ir.analysis import free_vars
from ..ir.builder import LetBuilder
from ..ir.expr import Call, Expr, Function, GlobalVar, Let, TupleGetItem, Var, is_atom
from ..ir.expr_functor import Computation
from ..ir.types import ANY, Dim, TensorType, TupleType, Type
from ..ir.vjp import DifferentiationError
from ..passes.anf_sharing import fresh_binders
from . import hoist, keytape
from .cotangent import (
    accumulate,
    ct_type,
    differentiable,
    fields_of,
    is_float,
    materialize,
    reverse,
    shaped_as,
    stackable,
)
from .differentiator import raise_primitive
from .hoist import Plan
from .keytape import tape_leaves_only
from .reverse import Reverse


def has_leaves(t: Type) -> bool:
    """Whether a value of type ``t`` holds a tensor (``()`` does not)."""
    if isinstance(t, TupleType):
        return any(has_leaves(f) for f in t.fields)
    return True


def empty_value(b: LetBuilder, t: Type) -> Expr:
    """The only value of a type without tensors (``()``, ``((), ())``...)."""
    assert isinstance(t, TupleType)
    return b.emit(b.tuple([empty_value(b, f) for f in t.fields]), "unit")


def leading_dim(t: Type) -> Dim:
    """The number of steps of a loop over sequences of type ``t``."""
    while isinstance(t, TupleType):
        t = t.fields[0]
    assert isinstance(t, TensorType)
    return t.shape[0]


def holey(t: Type) -> bool:
    """Whether the tuple type ``t`` has a field without tensors, at any depth."""
    return isinstance(t, TupleType) and any(not has_leaves(f) or holey(f) for f in t.fields)


def prune(b: LetBuilder, value: Expr, t: Type) -> Expr:
    """``value`` of type ``t`` without its fields that hold no tensor, at
    any depth: a loop cannot iterate over a ``()`` (``unprune`` undoes it)."""
    if not holey(t):
        return value
    assert isinstance(t, TupleType)
    parts = [
        prune(b, b.emit_get(value, i, "part"), f) for i, f in enumerate(t.fields) if has_leaves(f)
    ]
    return b.emit(b.tuple(parts), "pruned")


def unprune(b: LetBuilder, value: Expr, t: Type) -> Expr:
    """The value of type ``t`` that ``prune`` made ``value`` from."""
    if not holey(t):
        return value
    assert isinstance(t, TupleType)
    parts: list[Expr] = []
    kept = 0
    for f in t.fields:
        if has_leaves(f):
            parts.append(unprune(b, b.emit_get(value, kept, "part"), f))
            kept += 1
        else:
            parts.append(empty_value(b, f))
    return b.emit(b.tuple(parts), "unpruned")


def fixed_shape(t: Type) -> bool:
    """Whether every value of type ``t`` has the same shape (no ``?`` dim):
    per-step values of such a type stack into one tensor per field."""
    if isinstance(t, TupleType):
        return all(fixed_shape(f) for f in t.fields)
    return isinstance(t, TensorType) and ANY not in t.shape


class Slots:
    """The sequences a reverse loop iterates over, by slot: a sequence
    without tensors (a scan's ``()`` outputs, a map's ``()`` carry) cannot
    be iterated over, so it is left out and its per-step value rebuilt;
    so are the ``()`` fields nested in a sequence's tuples (``prune``)."""

    def __init__(self, types: list[Type]) -> None:
        self.types = types
        self.positions: list[int | None] = []
        count = 0
        for t in types:
            self.positions.append(count if has_leaves(t) else None)
            count += has_leaves(t)

    def pack(self, b: LetBuilder, sequences: list[Expr]) -> Expr:
        kept = [
            prune(b, s, t)
            for s, t, p in zip(sequences, self.types, self.positions, strict=True)
            if p is not None
        ]
        return b.emit(b.tuple(kept), "seqs")

    def pack_kept(self, b: LetBuilder, kept: list[Expr], hint: str) -> Expr:
        """``pack`` from the kept slots' values only (a segment's slices)."""
        types = [t for t, p in zip(self.types, self.positions, strict=True) if p is not None]
        return b.emit(b.tuple([prune(b, s, t) for s, t in zip(kept, types, strict=True)]), hint)

    def get(self, b: LetBuilder, step: Var, slot: int, hint: str) -> Expr:
        position = self.positions[slot]
        if position is None:
            return empty_value(b, self.types[slot])
        return unprune(b, b.emit_get(step, position, hint), self.types[slot])


def loop_binding(rev: Reverse, var: Var, call: Call, b: LetBuilder) -> Computation[None]:
    """``let var = cf.foreach(...)`` or ``cf.while_loop(...)``, differentiated."""
    loop = _Loop(rev, var, call)
    mode = rev.ad.checkpoint
    if mode == "sqrt":
        from .sqrt import sqrt_binding

        sqrt_binding(loop, b)
        return
    if mode == "none" and call not in rev.ad.unstacked:
        if (yield loop.residuals(b)):
            return
        # the same loop comes again wherever an enclosing body is
        # differentiated again (its own fallback): it falls back at once
        rev.ad.unstacked.add(call)
    loop.recompute(b)


class _Loop:
    """One loop binding: its body, free variables and how to rebuild it."""

    def __init__(self, rev: Reverse, var: Var, call: Call) -> None:
        self.rev, self.ad, self.var, self.call = rev, rev.ad, var, call
        self.foreach = call.callee.name == "cf.foreach"
        # a while_loop's max_iterations given at run time: passed on to
        # every loop rebuilt from it (an integer: it has no cotangent)
        self.limit: tuple[Expr, ...] = ()
        if self.foreach:
            body, self.xs, self.init = call.args
        else:
            self.cond, body, self.init, *limit = call.args
            self.limit = tuple(limit)
        self.body = self._resolve(body)
        # a let-bound closure, which may be the body of several loops
        self.shared = not isinstance(body, Function)
        self.length: Dim = leading_dim(self.xs.checked_type) if self.foreach else ANY
        self.free = self.ad.free_differentiable(self.body)
        self.span = call.span
        carry_type = self.init.checked_type
        # keys or ADT values in the carry: they go on a tape, and only the
        # carry's tensors are stored per step (or per segment)
        self.taped = not stackable(carry_type) and tape_leaves_only(carry_type)
        self.stored_type = keytape.tensors_type(carry_type) if self.taped else carry_type
        # what a recomputing reverse loop iterates over: ct of out_t, the
        # stored carry, x_t
        types = [ct_type(var.checked_type.fields[0]), self.stored_type]
        if self.foreach:
            types.append(self.xs.checked_type)
        self.recompute_slots = Slots(types)

    def _resolve(self, body: Expr) -> Function:
        if isinstance(body, Function):
            return body
        if isinstance(body, Var) and body in self.ad.loop_bodies:
            return self.ad.loop_bodies[body]
        if isinstance(body, GlobalVar) and body.name in self.ad.module.functions:
            # differentiated where the loop is, as a let-bound closure's body
            # (a global has no free variables)
            fn = self.ad.module.functions[body.name]
            if fn.attrs.get("Primitive") == 1:
                raise_primitive(body.name, fn)
            if not fn.type_params:
                return fn
        raise DifferentiationError(
            "the body of a loop must be a function literal, a let-bound closure or a "
            "monomorphic global function to be differentiated",
            self.call.span,
        )

    def stacked_type(self, t: Type) -> Type:
        """The type of per-step values of type ``t`` stacked by this loop
        (``cf.foreach``'s type rule: a new leading axis of the steps)."""
        if isinstance(t, TupleType):
            return TupleType(tuple(self.stacked_type(f) for f in t.fields))
        assert isinstance(t, TensorType)
        return TensorType((self.length, *t.shape), t.dtype)

    def rebuild(self, b: LetBuilder, body: Function, xs: Expr | None = None) -> Var:
        """The loop with ``body`` (and ``xs``) in place of its own."""
        if self.foreach:
            args = (body, self.xs if xs is None else xs, self.init)
        else:
            args = (self.cond, body, self.init, *self.limit)
        return b.emit(Call(self.call.callee, args, self.call.attrs, span=self.span), "loop")

    def bind_result(self, b: LetBuilder, loop: Var) -> tuple[Var, list[Var], Var]:
        """``var = (outs, final)`` from a loop whose per-step output is
        ``(out, extra...)``; returns outs, the extra stacks and final."""
        stacked = b.emit_get(loop, 0, "stacked")
        outs = b.emit_get(stacked, 0, "outs")
        final = b.emit_get(loop, 1, "final")
        b.bind(self.var, b.tuple([outs, final]))
        return outs, [stacked], final

    def seeds(self, bb: LetBuilder, outs: Var, final: Var) -> tuple[Expr, Expr] | None:
        """The cotangents of the stacked outputs and the final carry, or
        None when the loop's result has none."""
        ct = self.rev.ct.pop(self.var, None)
        if ct is None:
            return None
        t = self.var.checked_type
        parts = fields_of(bb, ct, t)
        return (
            shaped_as(bb, materialize(bb, parts[0], outs, t.fields[0]), outs, t.fields[0]),
            shaped_as(bb, materialize(bb, parts[1], final, t.fields[1]), final, t.fields[1]),
        )

    def step_backward(
        self, nb: LetBuilder, sub: Reverse, result: Expr, ct_out: Expr, ct_carry: Expr
    ) -> tuple[Expr, Expr, list[Expr]]:
        """Seed ``result`` (a step's ``(out, carry')``) and run the step's
        backward: the cotangents of x_t (unit for while_loop), of the carry
        and of the free variables."""
        sub.add(nb, result, [ct_out, ct_carry])
        sub.backward(nb)
        params = self.body.params
        x_ct = sub.total(nb, params[0]) if self.foreach else nb.emit(nb.tuple([]), "unit")
        return x_ct, sub.total(nb, params[-1]), [sub.total(nb, f) for f in self.free]

    def backward_loop(
        self,
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
        zeros = [materialize(bb, None, f, f.checked_type) for f in self.free]
        init = bb.emit(bb.tuple([ct_final, *zeros, *extra]), "ct_init")
        loop = self.reverse_loop(bb, sequences, init, make_step)
        plan = self.last_plan
        fin = bb.emit_get(loop, 1, "ct_final")
        self.rev.add(bb, self.init, bb.emit_get(fin, 0, "ct_init"))
        steps = bb.emit_get(loop, 0, "ct_steps")
        sums: list[Expr] = []
        if plan.active:  # the hoisted terms, summed chunk by chunk (sqrt.py)
            from .sqrt import chunked_totals, chunking

            factors = bb.emit_get(steps, 1, "factors")
            sums, x_steps = chunked_totals(self, bb, plan, factors, chunking(self))
            steps = x_steps if x_steps is not None else bb.emit_get(steps, 0, "ct_steps")
        if self.foreach and differentiable(self.xs.checked_type):
            self.rev.add(bb, self.xs, reverse(bb, steps, ct_type(self.xs.checked_type)))
        hoisted = plan.hoisted
        for j, f in enumerate(self.free):
            acc = bb.emit_get(fin, j + 1, "ct_free")
            total = sums[hoisted.index(j)] if j in hoisted else None
            self.rev.add(bb, f, plan.total(bb, j, acc, total))

    def reverse_loop(
        self,
        bb: LetBuilder,
        sequences: Expr,
        init: Expr,
        make_step: Callable[[LetBuilder, Var, Var], tuple],
        totals: bool = False,
    ) -> Var:
        """The ``cf.foreach`` over ``sequences`` carrying ``init`` = (ct of
        the carry, accumulated cts of the free variables): per step, the ct
        of x_t (stacked); finally the ct of the initial carry and the totals.
        ``make_step(nb, step, carry)`` emits one step's backward from the
        per-step slice ``step`` (one field per sequence) and ``carry``;
        its free variables' cotangents are added to the accumulators, or,
        with ``totals``, are the new accumulators (a step that itself
        runs a loop from them: the additions stay in step order)."""
        step, carry = Var("step", span=self.span), Var("carry", span=self.span)
        nb = LetBuilder(self.span)
        made = make_step(nb, step, carry)
        x_ct, prev, free_cts = made[:3]
        extra = list(made[3]) if len(made) > 3 else []  # carried on (the key tape)
        total = list(free_cts) if totals else []
        if totals:
            plan = Plan()
        else:
            plan = hoist.plan(nb, self.free, list(free_cts), x_ct, self.x_type())
        for j, (f, g) in enumerate(zip(self.free, free_cts, strict=True)):
            if totals:
                break
            acc = nb.emit_get(carry, j + 1, "acc")
            t = f.checked_type
            if plan.active:  # the terms left in the loop, in their order
                g = None
                for term in plan.in_loop[j]:
                    g = accumulate(nb, g, term, t)
            total.append(materialize(nb, accumulate(nb, acc, g, t), f, t))
        carried = nb.emit(nb.tuple([prev, *total, *extra]), "carry")
        if plan.active:  # the per-step factors of the hoisted terms
            if plan.x_terms:  # x_t's cotangent is computed after the loop
                x_ct = nb.emit(nb.tuple([]), "unit")
            x_ct = nb.emit(nb.tuple([x_ct, nb.tuple(plan.stacks)]), "per_step")
        elif len(made) > 4:  # a segment's inner factors, passed on (sqrt)
            x_ct = nb.emit(nb.tuple([x_ct, made[4]]), "per_step")
        ret = nb.emit(nb.tuple([x_ct, carried]), "ret")
        # Fresh binders: a step's code may be generated from the body's own
        # nodes more than once (sqrt checkpointing recomputes in two loops).
        body = fresh_binders(Function((step, carry), nb.finish(ret), span=self.span))
        self.last_plan = plan
        return bb.emit(bb.call_op("cf.foreach", body, sequences, init), "backward")

    def x_type(self) -> TensorType | None:
        """x_t's type where its cotangent may be hoisted (a static 2-D float
        step of a foreach), else None."""
        xt = self.xs.checked_type if self.foreach else None
        if isinstance(xt, TensorType) and xt.is_static and xt.ndim == 3 and is_float(xt.dtype):
            return TensorType(xt.shape[1:], xt.dtype)
        return None

    def probe_plan(self) -> Plan:
        """What a recomputing reverse loop's step hoists (``hoist.plan``),
        from a throwaway copy of the step: a segmented backward carries the
        chunk sums from before its first reverse loop is built."""
        nb = LetBuilder(self.span)
        step, carry = Var("step", span=self.span), Var("carry", span=self.span)
        x_ct, _, free_cts = self.recompute_step(nb, step, carry)[:3]
        return hoist.plan(nb, self.free, list(free_cts), x_ct, self.x_type())

    def hoisted_flats(self, bb: LetBuilder, loop: Var, plan: Plan) -> tuple[Var, list[Expr]]:
        """The stacked cotangents of x_t of a reverse loop built with
        ``plan``, and its hoisted factors flattened (``Plan.flat``)."""
        steps = bb.emit_get(loop, 0, "ct_steps")
        if not plan.active:
            return steps, []
        factors = bb.emit_get(steps, 1, "factors")
        flats = [
            plan.flat(bb, bb.emit_get(factors, i, "factor"), i) for i in range(len(plan.stacks))
        ]
        return bb.emit_get(steps, 0, "ct_steps"), flats

    # ------------------------------------------------------ "none": residuals
    def residuals(self, b: LetBuilder) -> Computation[bool]:
        """Stack the step's residuals; False (nothing emitted) where one
        cannot be stacked."""
        sub = Reverse(self.ad)
        fb = b.child()
        result = yield sub.forward_steps(self.body.body, fb)
        ct_out, ct_carry = Var("ct_out", span=self.span), Var("ct_carry", span=self.span)
        bb = b.child()
        x_ct, prev, free_cts = self.step_backward(bb, sub, result, ct_out, ct_carry)
        probe = Function(
            (ct_out, ct_carry), bb.finish(bb.tuple([x_ct, prev, *free_cts])), span=self.span
        )
        forward_vars = set(self.body.params) | {v for v, _ in fb.bindings}
        kept = [v for v in free_vars(probe) if v in forward_vars]
        if not all(v.has_type and stackable(v.checked_type) for v in kept):
            return False
        out = fb.emit_get(result, 0, "out")
        carry = fb.emit_get(result, 1, "carry")
        per_step = fb.emit(fb.tuple([out, *kept]), "per_step")
        ret = fb.emit(fb.tuple([per_step, carry]), "ret")
        body = Function(self.body.params, fb.finish(ret), span=self.body.span)
        if self.shared:
            # the closure may be the body of another loop too: its binders
            # (the parameters, the step's forward) are bound once per loop
            body = fresh_binders(body)
            assert isinstance(body, Function)
        loop = self.rebuild(b, body)
        outs, (stacked,), final = self.bind_result(b, loop)
        stacks = [b.emit_get(stacked, i + 1, "stack") for i in range(len(kept))]
        if isinstance(self.length, int) and all(fixed_shape(v.checked_type) for v in kept):
            self.type_stacks(loop, stacked, outs, final, stacks, kept)

        out_ct_type = ct_type(self.var.checked_type.fields[0])
        slots = Slots([out_ct_type, *(v.checked_type for v in kept)])

        def make_step(nb: LetBuilder, step: Var, carry: Var) -> tuple[Expr, Expr, list[Expr]]:
            nb.bind(ct_out, slots.get(nb, step, 0, "ct_out"))
            for i, v in enumerate(kept):
                nb.bind(v, slots.get(nb, step, i + 1, "residual"))
            nb.bind(ct_carry, TupleGetItem(carry, 0))
            for v, value in bb.bindings:  # the step's backward, generated once
                nb.bind(v, value)
            return x_ct, prev, free_cts

        def back(bb2: LetBuilder) -> None:
            seeds = self.seeds(bb2, outs, final)
            if seeds is None:
                return
            ct_outs, ct_final = seeds
            sequences = [reverse(bb2, ct_outs, out_ct_type)]
            sequences += [
                reverse(bb2, s, v.checked_type) for s, v in zip(stacks, kept, strict=True)
            ]
            self.backward_loop(bb2, slots.pack(bb2, sequences), ct_final, make_step)

        self.rev.tape.append(back)
        return True

    def type_stacks(
        self, loop: Var, stacked: Var, outs: Var, final: Var, stacks: list[Var], kept: list[Var]
    ) -> None:
        """Type the residual loop's results, so that an enclosing loop may
        stack them as its residuals in turn (the step's backward reads
        them): each level's body is then differentiated once, not once more
        per enclosing level. Only for a static number of steps and
        residuals without ``?`` dims: a ``while_loop``'s stacks (or a
        symbolic length's) may differ in length from one step of the
        enclosing loop to the next, and cannot be stacked; such an
        enclosing loop recomputes its steps."""
        t = self.var.checked_type
        stacked_type = TupleType((t.fields[0], *(self.stacked_type(v.checked_type) for v in kept)))
        loop.set_checked_type(TupleType((stacked_type, t.fields[1])))
        stacked.set_checked_type(stacked_type)
        outs.set_checked_type(t.fields[0])
        final.set_checked_type(t.fields[1])
        for s, v in zip(stacks, kept, strict=True):
            s.set_checked_type(self.stacked_type(v.checked_type))

    # ------------------------------------------------- "loop": recompute
    def recompute(self, b: LetBuilder) -> None:
        """Stack each step's starting carry (``taped``: its tensors, its keys
        and ADT values on a tape); the backward recomputes the step."""
        if not (stackable(self.init.checked_type) or self.taped):
            raise DifferentiationError(
                "the backward of this loop recomputes each step from its carried state, "
                "which must be tensors, keys and ADT values to be stored per step (it holds "
                "a function; docs/autodiff.md)",
                self.span,
            )
        from .sqrt import geometry, segmented_binding

        geo = geometry(self)
        if geo is not None and self.probe_plan().active:
            # in segments, so that only one chunk's hoisted factors are stored
            segmented_binding(self, b, geo, store_all=True)
            return
        if self.taped:
            self.recompute_with_tape(b)
            return
        loop = self.rebuild(b, self.storing_body(b))
        outs, (stacked,), final = self.bind_result(b, loop)
        carries = b.emit_get(stacked, 1, "carries")
        self.rev.tape.append(lambda bb: self.recompute_back(bb, outs, carries, final))

    def storing_body(self, b: LetBuilder) -> Function:
        """A copy of the body that also outputs the carry it started from
        (``taped``: its tensors; the copy carries (carry, tape) and pushes
        the carry's keys and ADT values on the tape)."""
        if self.taped:
            return self._taped_body(b)
        copy = fresh_binders(self.body)
        assert isinstance(copy, Function)
        fb = b.child()
        out, carry = spliced_step(fb, copy.body)
        per_step = fb.emit(fb.tuple([out, copy.params[-1]]), "per_step")
        ret = fb.emit(fb.tuple([per_step, carry]), "ret")
        return Function(copy.params, fb.finish(ret), span=self.body.span)

    def recompute_back(
        self, bb: LetBuilder, outs: Var, carries: Expr, final: Var, tape: tuple[Expr, ...] = ()
    ) -> None:
        """The reverse loop over the stored ``carries`` (``taped``: their
        tensors, and ``tape``, the forward's final tape, carried along)."""
        seeds = self.seeds(bb, outs, final)
        if seeds is None:
            return
        ct_outs, ct_final = seeds
        sequences = [
            reverse(bb, ct_outs, self.recompute_slots.types[0]),
            reverse(bb, carries, self.stored_type),
        ]
        if self.foreach:
            sequences.append(reverse(bb, self.xs, self.xs.checked_type))
        pack = self.recompute_slots.pack(bb, sequences)
        self.backward_loop(bb, pack, ct_final, self.recompute_step, extra=tape)

    def recompute_step(self, nb: LetBuilder, step: Var, carry: Var) -> tuple:
        """One backward step: the forward step again, from the stored carry
        (``taped``: its tensors and the values popped from the tape, which
        the reverse loop carries after the accumulators, and carries on)."""
        slots = self.recompute_slots
        ct_out = slots.get(nb, step, 0, "ct_out")
        params = self.body.params
        stored = slots.get(nb, step, 1, "carry")
        rest = None
        if self.taped:
            tape = nb.emit_get(carry, 1 + len(self.free), "tape")
            stored, rest = keytape.restore(
                nb, self.ad.tape_data(), stored, tape, self.init, self.init.checked_type
            )
        nb.bind(params[-1], stored)
        if self.foreach:
            nb.bind(params[0], slots.get(nb, step, 2, "x"))
        ct_carry = nb.emit_get(carry, 0, "ct_carry")
        sub = Reverse(self.ad)
        result = sub.forward(self.body.body, nb)
        backward = self.step_backward(nb, sub, result, ct_out, ct_carry)
        return backward if rest is None else (*backward, [rest])

    # ----------------------------------------- keys in the carry: a tape
    def recompute_with_tape(self, b: LetBuilder) -> None:
        """``recompute`` for a carry holding keys or ADT values: its tensors
        are stacked, the others pushed on a tape carried along (``keytape``),
        which the reverse loop pops."""
        init = b.emit(b.tuple([self.init, keytape.empty(b, self.ad.tape_data())]), "init")
        body = self.storing_body(b)
        if self.foreach:
            args: tuple[Expr, ...] = (body, self.xs, init)
        else:
            args = (self._tape_cond(), body, init, *self.limit)
        loop = b.emit(Call(self.call.callee, args, self.call.attrs, span=self.span), "loop")
        stacked = b.emit_get(loop, 0, "stacked")
        outs = b.emit_get(stacked, 0, "outs")
        tensors = b.emit_get(stacked, 1, "carries")
        final_pair = b.emit_get(loop, 1, "final")
        final = b.emit_get(final_pair, 0, "final")
        tape_final = b.emit_get(final_pair, 1, "tape")
        b.bind(self.var, b.tuple([outs, final]))
        self.rev.tape.append(
            lambda bb: self.recompute_back(bb, outs, tensors, final, (tape_final,))
        )

    def _taped_body(self, b: LetBuilder) -> Function:
        """``storing_body`` of a taped loop: ``(x_t, (carry, tape)) ->
        ((out, the carry's tensors), (carry', tape with its others))``."""
        data = self.ad.tape_data()
        fb, copy, pair, tape = paired_body(self.body, b, "carry_and_tape", "tape", self.span)
        tensors, pushed = keytape.store(fb, data, copy.params[-1], self.init.checked_type, tape)
        out, carry = spliced_step(fb, copy.body)
        per_step = fb.emit(fb.tuple([out, tensors]), "per_step")
        following = fb.emit(fb.tuple([carry, pushed]), "carry_and_tape")
        ret = fb.emit(fb.tuple([per_step, following]), "ret")
        params = (copy.params[0], pair) if self.foreach else (pair,)
        return Function(params, fb.finish(ret), span=self.body.span)

    def _tape_cond(self) -> Function:
        """The while_loop's condition on (carry, tape): the carry's."""
        pair = Var("carry_and_tape", span=self.span)
        cb = LetBuilder(self.span)
        carry = cb.emit_get(pair, 0, "carry")
        cond = cb.emit(self.cond, "cond") if isinstance(self.cond, Function) else self.cond
        return Function((pair,), cb.finish(cb.emit(cb.call(cond, [carry]), "go")), span=self.span)


def splice(b: LetBuilder, expr: Expr) -> Expr:
    """The bindings of the block ``expr`` appended to ``b``; its result atom."""
    while isinstance(expr, Let):
        b.bind(expr.var, expr.value)
        expr = expr.body
    return expr if is_atom(expr) else b.emit(expr, "result")


def paired_body(
    body: Function, b: LetBuilder, pair_name: str, extra_hint: str, span
) -> tuple[LetBuilder, Function, Var, Expr]:
    """A copy of the loop body ``body`` (fresh binders) whose carry comes
    as the first field of a pair ``(carry, extra)``, for a loop that
    carries more than the program's (a tape, a step count): the builder of
    the copy's body (its carry bound, nothing of its body emitted yet),
    the copy, the pair parameter and the extra."""
    copy = fresh_binders(body)
    assert isinstance(copy, Function)
    pair = Var(pair_name, span=span)
    fb = b.child()
    fb.bind(copy.params[-1], TupleGetItem(pair, 0))
    return fb, copy, pair, fb.emit_get(pair, 1, extra_hint)


def spliced_step(fb: LetBuilder, body: Expr) -> tuple[Expr, Expr]:
    """A step's body spliced into ``fb``: its ``(out, carry')``."""
    result = splice(fb, body)
    return fb.emit_get(result, 0, "out"), fb.emit_get(result, 1, "carry")


__all__ = ["loop_binding", "paired_body", "spliced_step", "splice"]
