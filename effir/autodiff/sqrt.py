"""Segments of a ``cf.foreach``: ``checkpoint="sqrt"``, and the chunks in
which every mode sums the hoisted weight-gradient terms.

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
(``runtime_segments.py``, ``chunking`` says which), a carry holding keys or
ADT values with the same tape.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from ..ir.builder import LetBuilder
from ..ir.expr import Expr, Function, Var
from ..ir.types import TensorType, TupleType, Type
from . import keytape
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


def _take(index: Expr) -> Leaf:
    """(nseg, ...) -> its row ``index`` (a 0-d int64 tensor)."""

    def leaf(b: LetBuilder, x: Expr, t: TensorType) -> Expr:
        return b.emit(b.call_op("take", x, index, axis=0), "segment")

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


def geometry(loop) -> tuple[int, int, int, int] | None:
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


RUNTIME = "runtime"
"""``chunking``'s answer for a loop whose segments are known at run time."""


def chunking(loop) -> tuple[int, int, int, int] | str | None:
    """How a loop's hoisted terms are cut into chunks: ``geometry`` for a
    foreach of static length (None: one chunk), ``RUNTIME`` for a foreach
    of symbolic length or a while_loop (``runtime_segments``)."""
    if loop.foreach and _length(loop.xs.checked_type) is not None:
        return geometry(loop)
    return RUNTIME


def sqrt_binding(loop, b: LetBuilder) -> None:
    """``loop`` (a ``loops._Loop``) with sqrt checkpointing."""
    geo = geometry(loop)
    runtime = stackable(loop.init.checked_type) or loop.taped
    if geo is None and chunking(loop) == RUNTIME and runtime:
        from .runtime_segments import sqrt_foreach, sqrt_while

        (sqrt_foreach if loop.foreach else sqrt_while)(loop, b)
        return
    if geo is None or not (stackable(loop.init.checked_type) or loop.taped):
        # too short to segment; a function carried
        loop.recompute(b)
        return
    segmented_binding(loop, b, geo, store_all=False)


def segmented_binding(loop, b: LetBuilder, geo: tuple, store_all: bool) -> None:
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

    xs_main = _map(b, _map(b, loop.xs, xs_type, _slice(0, main, length)), xs_type, _split(nseg, k))
    seg, carry = Var("segment", span=loop.span), Var("carry", span=loop.span)
    sb = b.child()
    body = loop.storing_body(sb) if store_all else _plain_copy(loop)
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
    outs_main = _map(b, b.emit_get(stacked, 0, "outs"), _segmented(out_type, nseg, k), _join(main))
    starts = b.emit_get(stacked, 1, "starts")
    middle = b.emit_get(outer, 1, "middle")
    carries_tail = None
    if rem:
        xs_tail = _map(b, loop.xs, xs_type, _slice(main, length, length))
        tail = b.emit(b.call_op("cf.foreach", loop.storing_body(b), xs_tail, middle), "tail")
        tail_stacked = b.emit_get(tail, 0, "stacked")
        carries_tail = b.emit_get(tail_stacked, 1, "carries")
        outs = _concat(b, outs_main, b.emit_get(tail_stacked, 0, "outs"), out_type)
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


def segment_start(loop, sb: LetBuilder, carry: Expr) -> tuple[Expr, Expr, Expr | None]:
    """The start of a segment of the forward (``sqrt``), from the outer
    loop's ``carry``: (the carry its inner loop starts from, what is
    stored of it, the tape with its keys and ADT values pushed: a
    ``taped`` loop's outer carry is (carry, tape); else None)."""
    if not loop.taped:
        return carry, carry, None
    start = sb.emit_get(carry, 0, "start")
    tape = sb.emit_get(carry, 1, "tape")
    data = loop.ad.tape_data()
    tensors, pushed = keytape.store(sb, data, start, loop.init.checked_type, tape)
    return start, tensors, pushed


def segment_end(sb: LetBuilder, end: Expr, pushed: Expr | None) -> Expr:
    """The outer loop's next carry: the segment's end (and the tape)."""
    return end if pushed is None else sb.emit(sb.tuple([end, pushed]), "carry_and_tape")


def taped_init(loop, b: LetBuilder) -> Expr:
    """The initial carry of a segmented forward: a ``taped`` loop's with
    an empty tape."""
    if not loop.taped:
        return loop.init
    return b.emit(b.tuple([loop.init, keytape.empty(b, loop.ad.tape_data())]), "init")


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


def segmented_back(loop, bb: LetBuilder, outs: Expr, final: Expr, geo: tuple, src: Sources):
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
    ct_out_type = ct_type(out_type)
    plan = loop.probe_plan()
    n = len(loop.free)
    zeros = [materialize(bb, None, f, f.checked_type) for f in loop.free]
    ct_xs_tail = None
    x_parts: list[Expr] = []
    if rem:
        ct_tail = _map(bb, ct_outs, ct_out_type, _slice(main, length, length))
        xs_tail = _map(bb, loop.xs, xs_type, _slice(main, length, length))
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
            ct_xs_tail = reverse(bb, tail_steps, ct_type(xs_type))
        fin = bb.emit_get(tail_back, 1, "ct_middle")
        carried_fields = [bb.emit_get(fin, i, "ct_middle") for i in range(1 + n)]
        if tape:
            tape = [bb.emit_get(fin, 1 + n, "tape")]
    else:
        tape = [] if src.tape is None else [src.tape]
        carried_fields = [ct_final, *zeros]
        sums = [zeros[j] for j in plan.hoisted]
    carried = bb.emit(bb.tuple([*carried_fields, *sums, *tape]), "ct_init")
    ct_main = _map(
        bb, _map(bb, ct_outs, ct_out_type, _slice(0, main, length)), ct_out_type, _split(nseg, k)
    )
    xs_main = src.xs_main
    if xs_main is None:
        xs_main = _map(
            bb, _map(bb, loop.xs, xs_type, _slice(0, main, length)), xs_type, _split(nseg, k)
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
        parts = [_map(nb, seq, t, _take(index)) for seq, t in stacks]
        step = slots.pack_kept(nb, parts, "segment")
        return _segment_step(loop, nb, step, c, plan, src.stored)

    segs_back = loop.reverse_loop(bb, order, carried, segment_step, totals=True)
    fin = bb.emit_get(segs_back, 1, "ct_final")
    loop.rev.add(bb, loop.init, bb.emit_get(fin, 0, "ct_init"))
    seg_steps = bb.emit_get(segs_back, 0, "ct_steps")
    if plan.x_terms:  # the chunks' x cotangents, in the reverse loops' order
        x_parts.append(bb.emit_get(seg_steps, 1, "ct_x"))
        loop.rev.add(bb, loop.xs, reverse(bb, plan.x_steps(bb, x_parts), ct_type(xs_type)))
    elif differentiable(xs_type):
        steps = reverse(bb, seg_steps, ct_type(xs_type))
        ct_xs = _map(bb, steps, _segmented(ct_type(xs_type), nseg, k), _join(main))
        if ct_xs_tail is not None:
            ct_xs = _concat(bb, ct_xs, ct_xs_tail, ct_type(xs_type))
        loop.rev.add(bb, loop.xs, ct_xs)
    hoisted = plan.hoisted
    for j, f in enumerate(loop.free):
        acc = bb.emit_get(fin, j + 1, "ct_free")
        total = bb.emit_get(fin, 1 + n + hoisted.index(j), "ct_hoisted") if j in hoisted else None
        loop.rev.add(bb, f, plan.total(bb, j, acc, total))


def chunked_totals(
    loop, bb: LetBuilder, plan, factors: Expr, geo: tuple | str | None
) -> tuple[list[Expr], Expr | None]:
    """The sums of the hoisted terms (per ``plan.hoisted``) from a reverse
    loop's stacked factors ``factors`` (steps in its order), chunk by chunk
    as ``segmented_back`` sums them; and the stacked x cotangents, if
    hoisted."""
    if geo == RUNTIME:
        from .runtime_segments import runtime_totals

        return runtime_totals(loop, bb, plan, factors)
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
            bb.emit(bb.call_op("strided_slice", s, begin=[begin], end=[end], axes=[0]), "part")
            for s in stacks
        ]

    if rem:  # the tail's steps come first in the reverse loop's order
        flats = [plan.flat(bb, s, i) for i, s in enumerate(cut(0, rem))]
        sums = plan.chunk_parts(bb, flats)
        if plan.x_terms:
            x_parts.append(plan.x_part(bb, flats))
    else:
        sums = [
            materialize(bb, None, loop.free[j], loop.free[j].checked_type) for j in plan.hoisted
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


def chunk_loop(
    loop,
    bb: LetBuilder,
    plan,
    sums: list[Expr],
    x_parts: list[Expr],
    sequence_of: Callable[[LetBuilder], Expr],
    factors_of: Callable[[LetBuilder, Var], list[Expr]],
) -> tuple[list[Expr], Expr | None]:
    """The loop over the chunks that adds each chunk's hoisted terms to
    ``sums`` (the tail's, or zeros) in the reverse loop's order, over the
    sequence ``sequence_of(bb)`` emits; its step gets the chunk's flattened
    factors (``Plan.flat``) from ``factors_of(builder, element)``. Returns
    the totals, and the stacked x cotangents (after ``x_parts``, the
    tail's) if hoisted."""
    seg, carry = Var("chunk", span=loop.span), Var("sums", span=loop.span)
    nb = LetBuilder(loop.span)
    flats = factors_of(nb, seg)
    parts = plan.chunk_parts(nb, flats)
    new = [
        nb.emit(nb.call_op("add", nb.emit_get(carry, i, "sum"), p), "sum")
        for i, p in enumerate(parts)
    ]
    out = plan.x_part(nb, flats) if plan.x_terms else nb.emit(nb.tuple([]), "unit")
    ret = nb.emit(nb.tuple([out, nb.tuple(new)]), "ret")
    body = Function((seg, carry), nb.finish(ret), span=loop.span)
    init = bb.emit(bb.tuple(sums), "sums")
    chunks = bb.emit(bb.call_op("cf.foreach", body, sequence_of(bb), init), "chunks")
    fin = bb.emit_get(chunks, 1, "sums")
    totals = [bb.emit_get(fin, i, "ct_hoisted") for i in range(len(sums))]
    x = None
    if plan.x_terms:
        x_parts.append(bb.emit_get(chunks, 0, "ct_x"))
        x = plan.x_steps(bb, x_parts)
    return totals, x


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


def _segment_step(loop, nb: LetBuilder, step: Var, carry: Var, plan, stored: bool) -> tuple:
    """One segment's backward: its carries (recomputed from its start, or
    stored), then its reverse loop, which carries the accumulators on (so
    they are added to in the same order as by an unsegmented loop); then
    its chunk of the hoisted terms added to the carried sums. A taped
    loop's tape is carried last: the segment pops its start's keys and ADT
    values, its recomputation pushes its steps' on the rest, and its
    reverse loop pops them, so each recomputed step gets the forward's."""
    xs_type = loop.xs.checked_type
    slots = loop.recompute_slots  # per segment: the same fields, k steps each
    ct_seg = slots.get(nb, step, 0, "ct_segment")
    start = slots.get(nb, step, 1, "start")
    x_seg = slots.get(nb, step, 2, "x_segment")
    n = len(loop.free)
    tape = [nb.emit_get(carry, 1 + n + len(plan.hoisted), "tape")] if loop.taped else []
    if stored:
        carries = start
    else:
        if tape:
            data, carry_type = loop.ad.tape_data(), loop.init.checked_type
            start, rest = keytape.restore(nb, data, start, tape[0], loop.init, carry_type)
            start = nb.emit(nb.tuple([start, rest]), "start_and_tape")
        fwd = nb.emit(nb.call_op("cf.foreach", loop.storing_body(nb), x_seg, start), "recompute")
        carries = nb.emit_get(nb.emit_get(fwd, 0, "stacked"), 1, "carries")
        if tape:
            tape = [nb.emit_get(nb.emit_get(fwd, 1, "end"), 1, "tape")]
    out_t = ct_type(loop.var.checked_type.fields[0])
    seqs = [
        reverse(nb, ct_seg, out_t),  # only the tuple structure matters to reverse
        reverse(nb, carries, loop.stored_type),
        reverse(nb, x_seg, xs_type),
    ]
    init = [nb.emit_get(carry, i, "ct") for i in range(1 + n)]
    init = nb.emit(nb.tuple([*init, *tape]), "ct_init")
    inner = loop.reverse_loop(nb, slots.pack(nb, seqs), init, loop.recompute_step)
    iplan = loop.last_plan
    steps, flats = loop.hoisted_flats(nb, inner, iplan)
    sums = [nb.emit_get(carry, 1 + n + i, "sum") for i in range(len(plan.hoisted))]
    if iplan.active:
        sums = [
            nb.emit(nb.call_op("add", s, p), "sum")
            for s, p in zip(sums, iplan.chunk_parts(nb, flats), strict=True)
        ]
    fin = nb.emit_get(inner, 1, "ct_start")
    prev = nb.emit_get(fin, 0, "ct_prev")
    free = [nb.emit_get(fin, j + 1, "ct_free") for j in range(n)]
    if tape:  # carried on after the sums
        sums = [*sums, nb.emit_get(fin, 1 + n, "tape")]
    if iplan.x_terms:
        return nb.emit(nb.tuple([]), "unit"), prev, free, sums, iplan.x_part(nb, flats)
    return reverse(nb, steps, ct_type(xs_type)), prev, free, sums
