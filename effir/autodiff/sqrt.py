"""``checkpoint="sqrt"``: a ``cf.foreach`` of T steps in segments of
k = ceil(sqrt(T)) steps.

The forward runs an outer loop over the T // k whole segments, each an
inner loop over k steps, and stores only the carry each segment started
from; the remaining T mod k steps run as a loop that stores its carries
(``"loop"`` storage, fewer than k of them). The backward runs the tail's
reverse loop, then a reverse loop over the segments whose step recomputes
its segment from the stored carry (storing that segment's k carries) and
runs the segment's reverse loop. Memory: about 2*sqrt(T) carries instead of
T; time: one more forward. The steps compute exactly what the other modes
compute, so the gradients are bit-identical.

The segments are the leading axis reshaped to (T // k, k): this needs a
static T. A loop whose length is symbolic uses ``"loop"`` checkpointing.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from ..ir.builder import LetBuilder
from ..ir.expr import Expr, Function, Var
from ..ir.types import TensorType, TupleType, Type
from .cotangent import ct_type, differentiable, materialize, reverse, stackable

Leaf = Callable[[LetBuilder, Expr, TensorType], Expr]


def _map(b: LetBuilder, value: Expr, t: Type, leaf: Leaf) -> Expr:
    """``leaf`` applied to every tensor of the tuple tree ``value``."""
    if isinstance(t, TupleType):
        parts = [_map(b, b.emit_get(value, i, "part"), f, leaf) for i, f in enumerate(t.fields)]
        return b.emit(b.tuple(parts), "tree")
    assert isinstance(t, TensorType)
    return leaf(b, value, t)


def _concat(b: LetBuilder, a: Expr, c: Expr, t: Type) -> Expr:
    if isinstance(t, TupleType):
        parts = [
            _concat(b, b.emit_get(a, i, "part"), b.emit_get(c, i, "part"), f)
            for i, f in enumerate(t.fields)
        ]
        return b.emit(b.tuple(parts), "tree")
    pair = b.emit(b.tuple([a, c]), "pair")
    return b.emit(b.call_op("concatenate", pair, axis=0), "joined")


def _slice(begin: int, end: int) -> Leaf:
    def leaf(b: LetBuilder, x: Expr, t: TensorType) -> Expr:
        return b.emit(b.call_op("strided_slice", x, begin=[begin], end=[end], axes=[0]), "part")

    return leaf


def _split(nseg: int, k: int) -> Leaf:
    """(nseg * k, *rest) -> (nseg, k, *rest); rest may be symbolic: the
    leading axis is moved last, where reshape's 0s copy the others."""

    def leaf(b: LetBuilder, x: Expr, t: TensorType) -> Expr:
        r = t.ndim - 1
        last = b.emit(b.call_op("transpose", x, axes=[*range(1, r + 1), 0]), "t")
        shaped = b.emit(b.call_op("reshape", last, newshape=[0] * r + [nseg, k]), "t")
        axes = [r, r + 1, *range(r)]
        return b.emit(b.call_op("transpose", shaped, axes=axes), "segments")

    return leaf


def _join(total: int) -> Leaf:
    """(nseg, k, *rest) -> (nseg * k, *rest)."""

    def leaf(b: LetBuilder, x: Expr, t: TensorType) -> Expr:
        r = t.ndim - 2
        last = b.emit(b.call_op("transpose", x, axes=[*range(2, r + 2), 0, 1]), "t")
        shaped = b.emit(b.call_op("reshape", last, newshape=[0] * r + [total]), "t")
        return b.emit(b.call_op("transpose", shaped, axes=[r, *range(r)]), "joined")

    return leaf


def _length(t: Type) -> int | None:
    while isinstance(t, TupleType):
        t = t.fields[0]
    if isinstance(t, TensorType) and t.shape and isinstance(t.shape[0], int):
        return t.shape[0]
    return None


def sqrt_binding(loop, b: LetBuilder) -> None:
    """``loop`` (a ``loops._Loop`` of a foreach) with sqrt checkpointing."""
    xs_type = loop.xs.checked_type
    length = _length(xs_type)
    if length is None or length < 4 or not stackable(loop.init.checked_type):
        loop.recompute(b)  # symbolic length (or too short to segment)
        return
    k = math.ceil(math.sqrt(length))
    nseg, main = length // k, (length // k) * k
    rem = length - main
    var_type = loop.var.checked_type
    out_type = var_type.fields[0]

    # ---- forward: segments storing their first carry, then the tail
    xs_main = _map(b, _map(b, loop.xs, xs_type, _slice(0, main)), xs_type, _split(nseg, k))
    seg, carry = Var("segment", span=loop.span), Var("carry", span=loop.span)
    sb = b.child()
    inner = sb.emit(sb.call_op("cf.foreach", _plain_copy(loop), seg, carry), "segment_loop")
    outs_seg = sb.emit_get(inner, 0, "outs")
    end = sb.emit_get(inner, 1, "carry")
    per_seg = sb.emit(sb.tuple([outs_seg, carry]), "per_segment")
    seg_body = Function((seg, carry), sb.finish(sb.emit(sb.tuple([per_seg, end]), "ret")))
    outer = b.emit(b.call_op("cf.foreach", seg_body, xs_main, loop.init), "segments")
    stacked = b.emit_get(outer, 0, "stacked")
    outs_main = _map(b, b.emit_get(stacked, 0, "outs"), _segmented(out_type, nseg, k), _join(main))
    starts = b.emit_get(stacked, 1, "starts")
    middle = b.emit_get(outer, 1, "middle")
    xs_tail = carries_tail = None
    if rem:
        xs_tail = _map(b, loop.xs, xs_type, _slice(main, length))
        tail = b.emit(b.call_op("cf.foreach", loop.storing_body(b), xs_tail, middle), "tail")
        tail_stacked = b.emit_get(tail, 0, "stacked")
        carries_tail = b.emit_get(tail_stacked, 1, "carries")
        outs = _concat(b, outs_main, b.emit_get(tail_stacked, 0, "outs"), out_type)
        final = b.emit_get(tail, 1, "final")
    else:
        outs, final = outs_main, middle
    b.bind(loop.var, b.tuple([outs, final]))

    # ---- backward
    def back(bb: LetBuilder) -> None:
        seeds = loop.seeds(bb, outs, final)
        if seeds is None:
            return
        ct_outs, ct_final = seeds
        ct_out_type = ct_type(out_type)
        zeros = [materialize(bb, None, f, f.checked_type) for f in loop.free]
        ct_xs_tail = None
        if rem:
            ct_tail = _map(bb, ct_outs, ct_out_type, _slice(main, length))
            seqs = [
                reverse(bb, ct_tail, ct_out_type),
                reverse(bb, carries_tail, loop.init.checked_type),
                reverse(bb, xs_tail, xs_type),
            ]
            init = bb.emit(bb.tuple([ct_final, *zeros]), "ct_init")
            tail_back = loop.reverse_loop(
                bb, loop.recompute_slots.pack(bb, seqs), init, loop.recompute_step
            )
            tail_steps, tail_flats = loop.hoisted_flats(bb, tail_back, loop.last_plan)
            if not loop.last_plan.x_terms:
                ct_xs_tail = reverse(bb, tail_steps, ct_type(xs_type))
            carried = bb.emit_get(tail_back, 1, "ct_middle")
        else:
            carried = bb.emit(bb.tuple([ct_final, *zeros]), "ct_init")
            tail_flats = []
        ct_main = _map(
            bb, _map(bb, ct_outs, ct_out_type, _slice(0, main)), ct_out_type, _split(nseg, k)
        )
        seqs = [
            reverse(bb, ct_main, ct_out_type),
            reverse(bb, starts, loop.init.checked_type),
            reverse(bb, xs_main, xs_type),
        ]
        segs_back = loop.reverse_loop(
            bb,
            loop.recompute_slots.pack(bb, seqs),
            carried,
            lambda nb, s, c: _segment_step(loop, nb, s, c, plans),
            totals=True,
        )
        plan = plans[0]  # the segments' reverse loops hoist as the tail's does
        fin = bb.emit_get(segs_back, 1, "ct_final")
        loop.rev.add(bb, loop.init, bb.emit_get(fin, 0, "ct_init"))
        seg_steps, flats = loop.hoisted_flats(bb, segs_back, plan)
        if tail_flats:  # steps in reverse order: the tail's, then the segments'
            flats = [
                bb.emit(bb.call_op("concatenate", bb.tuple([a, c]), axis=0), "stacked")
                for a, c in zip(tail_flats, flats, strict=True)
            ]
        if plan.x_terms:  # all steps' x cotangents at once, from the joined factors
            loop.rev.add(bb, loop.xs, reverse(bb, plan.x_total(bb, flats), ct_type(xs_type)))
        elif differentiable(xs_type):
            steps = reverse(bb, seg_steps, ct_type(xs_type))
            ct_xs = _map(bb, steps, _segmented(ct_type(xs_type), nseg, k), _join(main))
            if ct_xs_tail is not None:
                ct_xs = _concat(bb, ct_xs, ct_xs_tail, ct_type(xs_type))
            loop.rev.add(bb, loop.xs, ct_xs)
        for j, f in enumerate(loop.free):
            acc = bb.emit_get(fin, j + 1, "ct_free")
            loop.rev.add(bb, f, plan.total(bb, j, acc, flats) if plan.active else acc)

    plans: list = []
    loop.rev.tape.append(back)


def _plain_copy(loop) -> Function:
    from ..passes.anf_sharing import fresh_binders

    copy = fresh_binders(loop.body)
    assert isinstance(copy, Function)
    return copy


def _segmented(t: Type, nseg: int, k: int) -> Type:
    """The type ``t`` (stacked over T steps) as (nseg, k, ...) (only the
    rank matters to the helpers)."""
    if isinstance(t, TupleType):
        return TupleType(tuple(_segmented(f, nseg, k) for f in t.fields))
    assert isinstance(t, TensorType)
    return TensorType((nseg, k, *t.shape[1:]), t.dtype)


def _segment_step(loop, nb: LetBuilder, step: Var, carry: Var, plans: list) -> tuple:
    """One segment's backward: recompute it storing its carries, then its
    reverse loop, which carries the accumulators on (so they are added to
    in the same order as by an unsegmented loop: bit-identical)."""
    xs_type = loop.xs.checked_type
    slots = loop.recompute_slots  # per segment: the same fields, k steps each
    ct_seg = slots.get(nb, step, 0, "ct_segment")
    start = slots.get(nb, step, 1, "start")
    x_seg = slots.get(nb, step, 2, "x_segment")
    fwd = nb.emit(nb.call_op("cf.foreach", loop.storing_body(nb), x_seg, start), "recompute")
    carries = nb.emit_get(nb.emit_get(fwd, 0, "stacked"), 1, "carries")
    out_t = ct_type(loop.var.checked_type.fields[0])
    seqs = [
        reverse(nb, ct_seg, out_t),  # only the tuple structure matters to reverse
        reverse(nb, carries, loop.init.checked_type),
        reverse(nb, x_seg, xs_type),
    ]
    inner = loop.reverse_loop(nb, slots.pack(nb, seqs), carry, loop.recompute_step)
    plans.append(loop.last_plan)
    steps = nb.emit_get(inner, 0, "ct_steps")
    factors = []
    if loop.last_plan.active:  # the hoisted factors go out, stacked per segment
        factors = [nb.emit_get(steps, 1, "factors")]
        steps = nb.emit_get(steps, 0, "ct_steps")
    ct_x = steps if loop.last_plan.x_terms else reverse(nb, steps, ct_type(xs_type))
    fin = nb.emit_get(inner, 1, "ct_start")
    prev = nb.emit_get(fin, 0, "ct_prev")
    free = [nb.emit_get(fin, j + 1, "ct_free") for j in range(len(loop.free))]
    if factors:
        return ct_x, prev, free, [], factors[0]
    return ct_x, prev, free
