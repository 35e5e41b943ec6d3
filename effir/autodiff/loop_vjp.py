"""``LoopVjp``: one ``cf.foreach`` or ``cf.while_loop`` binding being
differentiated, and the pieces every checkpoint policy builds its backward
from.

Both loops run a body ``(x_t, carry) -> (out_t, carry')`` (``while_loop``:
``carry -> (out_t, carry')``) some number of times. A policy
(``effir.autodiff.checkpoint``) rewrites the forward to also output, per
step, what the backward of that step needs; the backward is one
``cf.foreach`` over those stacks, reversed (``LoopVjp.reverse_loop``),
carrying ``(ct of the carry, ct of each free variable)``. What is here is
shared by every policy: the loop taken apart (``LoopVjp.of``), the body
rebuilt, the step recomputed from a stored carry (``recompute_step``), the
reverse loop and the slots it iterates over (``Slots``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field

from effir.passes.analyses.anf_sharing import fresh_binders

from ..ir import type_tree
from ..ir.block import Block
from ..ir.builder import LetBuilder
from ..ir.diagnostics import Span
from ..ir.expr import Call, Expr, Function, GlobalVar, TupleGetItem, Var, is_atom
from ..ir.types import ANY, Dim, TensorType, TupleType, Type
from ..ir.vjp import DifferentiationError
from . import hoist, keytape
from .cotangent import (
    accumulate,
    ct_type,
    fields_of,
    is_float,
    materialize,
    shaped_as,
    stackable,
)
from .differentiator import Differentiator, raise_primitive
from .hoist import Plan
from .keytape import tape_leaves_only
from .reverse import Reverse


def has_leaves(t: Type) -> bool:
    """Whether a value of type ``t`` holds a tensor (``()`` does not)."""
    return bool(type_tree.leaves(t))


def empty_value(b: LetBuilder, t: Type) -> Expr:
    """The only value of a type without tensors (``()``, ``((), ())``...)."""
    assert isinstance(t, TupleType) and not has_leaves(t)
    return type_tree.unflatten(t, (), make=lambda fields: b.emit(b.tuple(fields), "unit"))


def leading_dim(t: Type) -> Dim:
    """The number of steps of a loop over sequences of type ``t``."""
    while isinstance(t, TupleType):
        t = t.fields[0]
    assert isinstance(t, TensorType)
    return t.shape[0]


def holey(t: Type) -> bool:
    """Whether the tuple type ``t`` has a field without tensors, at any depth."""
    stack = [t]
    while stack:
        node = stack.pop()
        if isinstance(node, TupleType):
            if any(not has_leaves(f) for f in node.fields):
                return True
            stack.extend(node.fields)
    return False


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
    return all(
        isinstance(leaf, TensorType) and ANY not in leaf.shape for leaf in type_tree.leaves(t)
    )


def stacked(t: Type, length: Dim) -> TensorType:
    """The tensor type ``t`` with a leading axis of ``length`` (steps)."""
    assert isinstance(t, TensorType)
    return TensorType((length, *t.shape), t.dtype)


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


@dataclass(eq=False)
class LoopVjp:
    """One loop binding ``var = call`` under differentiation: its body,
    sequence, carry, free variables and how to rebuild it.

    ``LoopVjp.of`` takes the call apart; ``dataclasses.replace`` makes a
    view of it (a ``while_loop`` seen as a ``foreach`` over its step
    indices, ``runtime_segments.foreach_view``)."""

    rev: Reverse  # the block's reverse: its tape gets the loop's backward
    var: Var
    call: Call
    foreach: bool  # cf.foreach (else cf.while_loop)
    body: Function  # resolved: a literal, a let-bound closure's or a global's
    init: Expr  # the initial carry
    xs: Expr | None  # the sequence (foreach)
    cond: Expr | None  # the condition (while_loop)
    # a while_loop's max_iterations given at run time: passed on to every
    # loop rebuilt from it (an integer: it has no cotangent)
    limit: tuple[Expr, ...]
    shared: bool  # a let-bound closure, which may be the body of several loops
    length: Dim  # the number of steps (ANY for a while_loop)
    free: list[Var]  # the body's free variables that take a gradient
    # keys or ADT values in the carry: they go on a tape, and only the
    # carry's tensors are stored per step (or per segment)
    taped: bool
    stored_type: Type  # what is stored of a carry
    # what a recomputing reverse loop iterates over: ct of out_t, the
    # stored carry, x_t
    recompute_slots: Slots
    last_plan: Plan = field(default_factory=Plan)  # the last reverse loop's hoisting

    @classmethod
    def of(cls, rev: Reverse, var: Var, call: Call) -> LoopVjp:
        """The loop binding ``var = call`` (a ``loop`` operator's call)."""
        foreach = call.callee.name == "cf.foreach"
        xs = cond = None
        limit: tuple[Expr, ...] = ()
        if foreach:
            body, xs, init = call.args
        else:
            cond, body, init, *rest = call.args
            limit = tuple(rest)
        fn = _resolve(rev.ad, body, call)
        carry_type = init.checked_type
        taped = not stackable(carry_type) and tape_leaves_only(carry_type)
        stored_type = keytape.tensors_type(carry_type) if taped else carry_type
        types = [ct_type(var.checked_type.fields[0], rev.ad.adts), stored_type]
        if foreach:
            types.append(xs.checked_type)
        return cls(
            rev=rev,
            var=var,
            call=call,
            foreach=foreach,
            body=fn,
            init=init,
            xs=xs,
            cond=cond,
            limit=limit,
            shared=not isinstance(body, Function),
            length=leading_dim(xs.checked_type) if foreach else ANY,
            free=rev.ad.free_differentiable(fn),
            taped=taped,
            stored_type=stored_type,
            recompute_slots=Slots(types),
        )

    @property
    def ad(self) -> Differentiator:
        return self.rev.ad

    @property
    def span(self) -> Span | None:
        return self.call.span

    def view(self, **changes: object) -> LoopVjp:
        """A copy with ``changes`` (the same reverse, tape and variable)."""
        return dataclasses.replace(self, **changes)

    def stacked_type(self, t: Type) -> Type:
        """The type of per-step values of type ``t`` stacked by this loop
        (``cf.foreach``'s type rule: a new leading axis of the steps)."""
        return type_tree.map_leaves(t, lambda leaf: stacked(leaf, self.length))

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
            shaped_as(
                bb,
                materialize(bb, parts[0], outs, t.fields[0], self.ad.adts),
                outs,
                t.fields[0],
                self.ad.adts,
            ),
            shaped_as(
                bb,
                materialize(bb, parts[1], final, t.fields[1], self.ad.adts),
                final,
                t.fields[1],
                self.ad.adts,
            ),
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
                    g = accumulate(nb, g, term, t, self.ad.adts)
            total.append(
                materialize(nb, accumulate(nb, acc, g, t, self.ad.adts), f, t, self.ad.adts)
            )
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

    def tape_cond(self) -> Function:
        """The while_loop's condition on (carry, tape): the carry's."""
        pair = Var("carry_and_tape", span=self.span)
        cb = LetBuilder(self.span)
        carry = cb.emit_get(pair, 0, "carry")
        cond = cb.emit(self.cond, "cond") if isinstance(self.cond, Function) else self.cond
        return Function((pair,), cb.finish(cb.emit(cb.call(cond, [carry]), "go")), span=self.span)


def _resolve(ad: Differentiator, body: Expr, call: Call) -> Function:
    """The body function of a loop: a literal, a let-bound closure's or a
    monomorphic global's."""
    if isinstance(body, Function):
        return body
    if isinstance(body, Var) and body in ad.loop_bodies:
        return ad.loop_bodies[body]
    if isinstance(body, GlobalVar) and body.name in ad.module.functions:
        # differentiated where the loop is, as a let-bound closure's body
        # (a global has no free variables)
        fn = ad.module.functions[body.name]
        if fn.attrs.get("Primitive") == 1:
            raise_primitive(body.name, fn)
        if not fn.type_params:
            return fn
    raise DifferentiationError(
        "the body of a loop must be a function literal, a let-bound closure or a "
        "monomorphic global function to be differentiated",
        call.span,
    )


def splice(b: LetBuilder, expr: Expr) -> Expr:
    """The bindings of the block ``expr`` appended to ``b``; its result atom."""
    block = Block.of(expr)
    for let in block.lets:
        b.bind(let.var, let.value)
    tail = block.tail
    return tail if is_atom(tail) else b.emit(tail, "result")


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
