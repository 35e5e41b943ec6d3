"""Segments of a ``cf.foreach`` of static length (``StaticSegments``):
``checkpoint="sqrt"``, and the chunks in which every policy sums the
hoisted weight-gradient terms.

A static length T >= 4 splits into T // k segments of k steps and a tail
of T mod k steps (``geometry``): k is the first divisor of T from
ceil(sqrt(T)) to 2 ceil(sqrt(T)) (no tail), else ceil(sqrt(T)).

``sqrt``: the forward runs an outer loop over the segments, each an inner
loop over k steps, and stores only the carry each segment started from;
the tail runs as a loop that stores its carries (``"loop"`` storage, fewer
than k of them). The backward (``segmented_back``) runs the tail's reverse
loop, then a reverse loop over the segments whose step recomputes its
segment from the stored carry (storing that segment's k carries) and runs
the segment's reverse loop. The reverse loop over the segments iterates
over their indices, last first, and takes each segment from the stacks
(its stored carries, its x), rather than over reversed copies of the
stacks (``reverse``), which held the stored carries twice at the
backward's peak. Memory: about 2*sqrt(T) carries instead of T; time: one
more forward.

Chunks: the reverse loop's weight-gradient terms that ``hoist`` moves out
of it are summed per chunk (the tail, then each segment, in the reverse
loop's order), each chunk's factors reduced by one product as soon as the
chunk's steps are done. ``"loop"`` runs the same ``segmented_back`` from
its stored carries (no recomputation), so it stores one chunk's factors,
not T steps' (which are several carries per step: for a GRU the gates'
cotangents, the step's input and state); ``"none"`` runs one reverse loop
and reduces its stacked factors in the same chunks after it
(``chunked_totals``). All three add the same chunk sums in the same order,
so the gradients stay bit-identical.

The segments are the leading axis reshaped to (T // k, k): this needs a
static T. A foreach whose length is symbolic and a while_loop have their
segments and chunks computed when the program runs
(``runtime_segments.py``; ``loops.segments_of`` says which), a carry holding keys or
ADT values with the same tape.
"""

from __future__ import annotations

import math

import numpy as np

from ..ir import type_tree
from ..ir.builder import LetBuilder
from ..ir.expr import Expr, Function, Var
from ..ir.type_tree_emit import map_value
from ..ir.types import TensorType, TupleType, Type
from .cotangent import ct_type, differentiable, materialize, reverse
from .hoist import Plan
from .loop_vjp import LoopVjp
from .segments import (
    Leaf,
    Segments,
    chunk_loop,
    concat_tree,
    plain_copy,
    segment_backward_step,
    segment_end,
    segment_start,
    take_row,
    taped_init,
)

SegmentShape = tuple[int, int, int, int]
"""(k, segments, steps in segments, tail steps) of a static length."""


class StaticSegments(Segments):
    """Segments of a static length T: ``geometry``'s (None: T < 4, one
    chunk and no segments)."""

    def __init__(self, geo: SegmentShape | None) -> None:
        self.geo = geo

    def sqrt(self, loop: LoopVjp, b: LetBuilder) -> bool:
        if self.geo is None:
            return False
        segmented_binding(loop, b, self.geo, store_all=False)
        return True

    def store_all(self, loop: LoopVjp, b: LetBuilder) -> bool:
        """``loop`` storage in segments, so that only one chunk's hoisted
        factors are stored (``segmented_binding``); False where there are
        no segments."""
        if self.geo is None:
            return False
        segmented_binding(loop, b, self.geo, store_all=True)
        return True

    def totals(
        self, loop: LoopVjp, bb: LetBuilder, plan: Plan, factors: Expr
    ) -> tuple[list[Expr], Expr | None]:
        return chunked_totals(loop, bb, plan, factors, self.geo)


def _slice(begin: int, end: int, length: int) -> Leaf:
    def leaf(b: LetBuilder, x: Expr, t: TensorType) -> Expr:
        if begin == 0 and end == length:
            return x  # the whole sequence: no copy
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


def geometry(loop: LoopVjp) -> SegmentShape | None:
    """(k, segments, steps in segments, tail steps) of a ``foreach`` of
    static length T >= 4; None for other loops (one chunk, no segments)."""
    if not loop.foreach:
        return None
    length = _length(loop.xs.checked_type)
    if length is None or length < 4:
        return None
    k = math.ceil(math.sqrt(length))
    # a divisor of T near sqrt(T) leaves no tail: the stacked steps then
    # split into segments without a copy
    k = next((d for d in range(k, 2 * k + 1) if length % d == 0), k)
    nseg = length // k
    return k, nseg, nseg * k, length - nseg * k


def segmented_binding(loop: LoopVjp, b: LetBuilder, geo: SegmentShape, store_all: bool) -> None:
    """The forward in segments: an outer loop over the segments, each an
    inner loop over its k steps storing its start carry (``sqrt``) or all
    its carries (``store_all``: ``loop``, whose compiled inner loop then
    holds one segment's hoisted input projections, not T steps'), then the
    tail storing its carries; the backward is ``segmented_back``. A
    ``taped`` loop's carries are stored as its tensors, stacked, and its
    keys and ADT values, pushed on one tape the loops carry along (each
    segment's start under ``sqrt``, then the tail's steps; every step under
    ``store_all``); the backward pops them in the reverse order."""
    k, nseg, main, rem = geo
    xs_type = loop.xs.checked_type
    length = main + rem
    var_type = loop.var.checked_type
    out_type = var_type.fields[0]

    xs_main = map_value(
        b,
        map_value(b, loop.xs, xs_type, _slice(0, main, length)),
        xs_type,
        _split(nseg, k),
    )
    seg, carry = Var("segment", span=loop.span), Var("carry", span=loop.span)
    sb = b.child()
    body = loop.storing_body(sb) if store_all else plain_copy(loop)
    start, stored, pushed = carry, carry, None
    if not store_all:
        start, stored, pushed = segment_start(loop, sb, carry)
    inner = sb.emit(sb.call_op("cf.foreach", body, seg, start), "segment_loop")
    if store_all:
        inner_stacked = sb.emit_get(inner, 0, "stacked")
        outs_seg = sb.emit_get(inner_stacked, 0, "outs")
        stored = sb.emit_get(inner_stacked, 1, "carries")
    else:
        outs_seg = sb.emit_get(inner, 0, "outs")
    end = segment_end(sb, sb.emit_get(inner, 1, "carry"), pushed)
    per_seg = sb.emit(sb.tuple([outs_seg, stored]), "per_segment")
    seg_body = Function((seg, carry), sb.finish(sb.emit(sb.tuple([per_seg, end]), "ret")))
    outer = b.emit(b.call_op("cf.foreach", seg_body, xs_main, taped_init(loop, b)), "segments")
    stacked = b.emit_get(outer, 0, "stacked")
    outs_main = map_value(
        b, b.emit_get(stacked, 0, "outs"), _segmented(out_type, nseg, k), _join(main)
    )
    starts = b.emit_get(stacked, 1, "starts")
    middle = b.emit_get(outer, 1, "middle")
    carries_tail = None
    if rem:
        xs_tail = map_value(b, loop.xs, xs_type, _slice(main, length, length))
        tail = b.emit(b.call_op("cf.foreach", loop.storing_body(b), xs_tail, middle), "tail")
        tail_stacked = b.emit_get(tail, 0, "stacked")
        carries_tail = b.emit_get(tail_stacked, 1, "carries")
        outs = concat_tree(b, outs_main, b.emit_get(tail_stacked, 0, "outs"), out_type)
        final = b.emit_get(tail, 1, "final")
    else:
        outs, final = outs_main, middle
    tape = None
    if loop.taped:  # (carry, tape)
        tape = b.emit_get(final, 1, "tape")
        final = b.emit_get(final, 0, "final")
    b.bind(loop.var, b.tuple([outs, final]))
    sources = Sources(starts, carries_tail, xs_main, stored=store_all, tape=tape)
    loop.rev.tape.append(lambda bb: segmented_back(loop, bb, outs, final, geo, sources))


class Sources:
    """What a segmented backward iterates over: per segment, its start
    carry (``stored=False``: recomputed) or its k stored carries; the
    tail's stored carries; the segmented xs (None: made from the loop's);
    a taped loop's tape, as the forward left it."""

    def __init__(
        self,
        main: Expr,
        tail: Expr | None,
        xs_main: Expr | None,
        stored: bool,
        tape: Expr | None = None,
    ):
        self.main, self.tail, self.xs_main, self.stored = main, tail, xs_main, stored
        self.tape = tape


def segmented_back(
    loop: LoopVjp,
    bb: LetBuilder,
    outs: Expr,
    final: Expr,
    geo: SegmentShape,
    src: Sources,
):
    """The backward of a segmented loop: the tail's reverse loop, then a
    reverse loop over the segments, each running its steps' reverse loop
    and reducing that chunk's hoisted factors into the carried sums."""
    seeds = loop.seeds(bb, outs, final)
    if seeds is None:
        return
    k, nseg, main, rem = geo
    length = main + rem
    ct_outs, ct_final = seeds
    xs_type = loop.xs.checked_type
    out_type = loop.var.checked_type.fields[0]
    ct_out_type = ct_type(out_type, loop.ad.adts)
    plan = loop.probe_plan()
    n = len(loop.free)
    zeros = [materialize(bb, None, f, f.checked_type, loop.ad.adts) for f in loop.free]
    ct_xs_tail = None
    x_parts: list[Expr] = []
    if rem:
        ct_tail = map_value(bb, ct_outs, ct_out_type, _slice(main, length, length))
        xs_tail = map_value(bb, loop.xs, xs_type, _slice(main, length, length))
        seqs = [
            reverse(bb, ct_tail, ct_out_type),
            reverse(bb, src.tail, loop.stored_type),
            reverse(bb, xs_tail, xs_type),
        ]
        tape = [] if src.tape is None else [src.tape]  # the tail's steps on top
        init = bb.emit(bb.tuple([ct_final, *zeros, *tape]), "ct_init")
        tail_back = loop.reverse_loop(
            bb, loop.recompute_slots.pack(bb, seqs), init, loop.recompute_step
        )
        tplan = loop.last_plan
        tail_steps, tail_flats = loop.hoisted_flats(bb, tail_back, tplan)
        sums = tplan.chunk_parts(bb, tail_flats) if tplan.active else []
        if tplan.x_terms:
            x_parts.append(tplan.x_part(bb, tail_flats))
        else:
            ct_xs_tail = reverse(bb, tail_steps, ct_type(xs_type, loop.ad.adts))
        fin = bb.emit_get(tail_back, 1, "ct_middle")
        carried_fields = [bb.emit_get(fin, i, "ct_middle") for i in range(1 + n)]
        if tape:
            tape = [bb.emit_get(fin, 1 + n, "tape")]
    else:
        tape = [] if src.tape is None else [src.tape]
        carried_fields = [ct_final, *zeros]
        sums = [zeros[j] for j in plan.hoisted]
    carried = bb.emit(bb.tuple([*carried_fields, *sums, *tape]), "ct_init")
    ct_main = map_value(
        bb,
        map_value(bb, ct_outs, ct_out_type, _slice(0, main, length)),
        ct_out_type,
        _split(nseg, k),
    )
    xs_main = src.xs_main
    if xs_main is None:
        xs_main = map_value(
            bb,
            map_value(bb, loop.xs, xs_type, _slice(0, main, length)),
            xs_type,
            _split(nseg, k),
        )
    # The segments' reverse loop runs over their indices, last first, and
    # takes its segment from each stack: a reversed copy of the stacks
    # (the stored carries, x) would double them at the backward's peak.
    slots = loop.recompute_slots
    stacks = [
        (seq, _segmented(t, nseg, k))
        for seq, t, p in zip(
            [ct_main, src.main, xs_main],
            [ct_out_type, loop.stored_type, xs_type],
            slots.positions,
            strict=True,
        )
        if p is not None
    ]
    order = bb.const(np.arange(nseg - 1, -1, -1, dtype=np.int64))

    def segment_step(nb: LetBuilder, index: Var, c: Var) -> tuple:
        parts = [map_value(nb, seq, t, take_row(index)) for seq, t in stacks]
        step = slots.pack_kept(nb, parts, "segment")
        return segment_backward_step(loop, nb, step, c, plan, src.stored)

    segs_back = loop.reverse_loop(bb, order, carried, segment_step, totals=True)
    fin = bb.emit_get(segs_back, 1, "ct_final")
    loop.rev.add(bb, loop.init, bb.emit_get(fin, 0, "ct_init"))
    seg_steps = bb.emit_get(segs_back, 0, "ct_steps")
    if plan.x_terms:  # the chunks' x cotangents, in the reverse loops' order
        x_parts.append(bb.emit_get(seg_steps, 1, "ct_x"))
        loop.rev.add(
            bb,
            loop.xs,
            reverse(bb, plan.x_steps(bb, x_parts), ct_type(xs_type, loop.ad.adts)),
        )
    elif differentiable(xs_type, loop.ad.adts):
        steps = reverse(bb, seg_steps, ct_type(xs_type, loop.ad.adts))
        ct_xs = map_value(
            bb, steps, _segmented(ct_type(xs_type, loop.ad.adts), nseg, k), _join(main)
        )
        if ct_xs_tail is not None:
            ct_xs = concat_tree(bb, ct_xs, ct_xs_tail, ct_type(xs_type, loop.ad.adts))
        loop.rev.add(bb, loop.xs, ct_xs)
    hoisted = plan.hoisted
    for j, f in enumerate(loop.free):
        acc = bb.emit_get(fin, j + 1, "ct_free")
        total = bb.emit_get(fin, 1 + n + hoisted.index(j), "ct_hoisted") if j in hoisted else None
        loop.rev.add(bb, f, plan.total(bb, j, acc, total))


def chunked_totals(
    loop: LoopVjp, bb: LetBuilder, plan: Plan, factors: Expr, geo: SegmentShape | None
) -> tuple[list[Expr], Expr | None]:
    """The sums of the hoisted terms (per ``plan.hoisted``) from a reverse
    loop's stacked factors ``factors`` (steps in its order), chunk by chunk
    as ``segmented_back`` sums them; and the stacked x cotangents, if
    hoisted."""
    stacks = [bb.emit_get(factors, i, "factor") for i in range(len(plan.stacks))]
    if geo is None:  # one chunk
        flats = [plan.flat(bb, s, i) for i, s in enumerate(stacks)]
        x = plan.x_steps(bb, [plan.x_part(bb, flats)]) if plan.x_terms else None
        return plan.chunk_parts(bb, flats), x
    k, nseg, main, rem = geo
    length = main + rem
    x_parts: list[Expr] = []

    def cut(begin: int, end: int) -> list[Expr]:
        if begin == 0 and end == length:
            return stacks
        return [
            bb.emit(
                bb.call_op("strided_slice", s, begin=[begin], end=[end], axes=[0]),
                "part",
            )
            for s in stacks
        ]

    if rem:  # the tail's steps come first in the reverse loop's order
        flats = [plan.flat(bb, s, i) for i, s in enumerate(cut(0, rem))]
        sums = plan.chunk_parts(bb, flats)
        if plan.x_terms:
            x_parts.append(plan.x_part(bb, flats))
    else:
        sums = [
            materialize(bb, None, loop.free[j], loop.free[j].checked_type, loop.ad.adts)
            for j in plan.hoisted
        ]
    segments = [
        bb.emit(bb.call_op("reshape", s, newshape=[nseg, -1, *plan.trailing[i]]), "segments")
        for i, s in enumerate(cut(rem, length))
    ]
    return chunk_loop(
        loop,
        bb,
        plan,
        sums,
        x_parts,
        lambda b: b.tuple(segments),
        lambda nb, seg: [nb.emit_get(seg, i, "factor") for i in range(len(stacks))],
    )


def _segmented(t: Type, nseg: int, k: int) -> Type:
    """The type ``t`` (stacked over T steps) as (nseg, k, ...) (only the
    rank matters to the helpers)."""

    def leaf(ty: Type) -> Type:
        assert isinstance(ty, TensorType)
        return TensorType((nseg, k, *ty.shape[1:]), ty.dtype)

    return type_tree.map_leaves(t, leaf)
