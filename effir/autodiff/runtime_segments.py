"""Segments whose geometry is known only at run time: ``checkpoint="sqrt"``
for a ``cf.foreach`` of symbolic length and for a ``cf.while_loop``, and the
run-time chunks in which every mode sums such a loop's hoisted terms.

The static segments (``static_segments.py``) reshape the stacked steps to
``(T div k, k, ...)``, which needs T in the program. Here T is a value:
the sequence's leading dimension (``shape_of``) or the number of steps a
``while_loop`` ran (a counter carried along), and the geometry is computed
from it when the program runs (``Geometry``): k = ceil(sqrt(T)) (1 for
T = 0), T div k segments of k steps (at least one, of 0 steps when T = 0)
and a tail of T mod k steps. No shape is reshaped by a run-time size: the
loops iterate over segment indices (``iota``, from ``argwhere`` of ones)
and each step takes its segment's rows from the flat stacks
(``take(x, i*k + iota(k))``), so the stacked values keep their trailing
dimensions, symbolic ones included.

- ``sqrt`` for a ``foreach`` (``sqrt_foreach``): the forward is an outer
  loop over the segments, each an inner loop over its k steps, storing
  the carry each segment started from, then the tail storing its carries
  (``loop`` storage); the backward (``segmented_backward``) runs the
  tail's reverse loop, then a reverse loop over the segments, last first,
  each recomputing its segment from its start and running its reverse
  loop (``segments.segment_backward_step``, shared with the static form).
- ``sqrt`` for a ``while_loop`` (``sqrt_while``): the trip count is known
  only once the loop has run. The forward runs the loop as written, with
  a counter in its carry, and stores nothing; the backward first runs the
  body again from the initial carry as the segmented forward of a
  ``foreach`` over ``iota(T)`` (the step's index unused), storing every
  k-th carry, then proceeds as for a ``foreach``. That is one more
  forward than a ``foreach``'s ``sqrt`` (two in all).
- A carry holding keys or ADT values (``LoopVjp.taped``): the outer
  loop and the tail carry the key tape as the static segments' do
  (``segments.segment_start``): each start's tensors are stacked and its keys
  and ADT values pushed; the backward carries the tape through the tail's
  reverse loop and the segments', whose ``_segment_step`` pops and replays
  them.
- Chunks (``runtime_totals``): ``none`` and ``loop`` run one reverse loop
  over all steps and sum its stacked hoisted factors in the same run-time
  chunks (the tail, then each segment, in the reverse loop's order), so
  the three modes add the same chunk sums in the same order and stay
  bit-identical.
"""

from __future__ import annotations

from ..ir import type_tree
from ..ir.builder import LetBuilder
from ..ir.expr import Call, Expr, Function, Var
from ..ir.type_tree_emit import map_value
from ..ir.types import ANY, TensorType, TupleType, Type
from .cotangent import ct_type, differentiable, materialize
from .hoist import Plan
from .loop_vjp import LoopVjp, Slots, paired_body, spliced_step, stacked
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

INDEX = TensorType((), "int64")


class Geometry:
    """The run-time geometry of T steps (``length``, a 0-d int64 value):
    ``k``, ``nseg`` segments, ``main`` = nseg * k steps in them, ``rem``
    tail steps, and ``within`` = iota(k), a segment's positions."""

    def __init__(self, b: LetBuilder, length: Expr) -> None:
        # In float64 (exact below 2**53), then cast: integer arithmetic on
        # a cast of sqrt, fused into one kernel, failed TVM's build (its
        # ConstIntBound analyser: "bound ... conflicts with memorization").
        def op(name: str, *args: Expr, **attrs) -> Var:
            return b.emit(b.call_op(name, *args, **attrs), "t")

        one = b.const(1.0, "float64")
        steps = op("cast", length, dtype="float64")
        # the casts truncate: s is floor(sqrt(T)), or its ceiling where the
        # float rounds up; s*s < T then adds the one that ceil(sqrt(T)) needs
        s = op("cast", op("cast", op("sqrt", steps), dtype="int64"), dtype="float64")
        k = op(
            "add",
            s,
            op("cast", op("less", op("multiply", s, s), steps), dtype="float64"),
        )
        count = op("cast", op("divide", steps, op("maximum", k, one)), dtype="int64")
        nseg = op("maximum", op("cast", count, dtype="float64"), one)  # T = 0: one, empty
        main = op("multiply", nseg, k)
        self.length = length
        self.k = b.emit(b.call_op("cast", k, dtype="int64"), "k")
        self.nseg = b.emit(b.call_op("cast", nseg, dtype="int64"), "segments")
        self.main = b.emit(b.call_op("cast", main, dtype="int64"), "main")
        self.rem = b.emit(b.call_op("cast", op("subtract", steps, main), dtype="int64"), "tail")
        self.within = iota(b, self.k)

    def rows(self, b: LetBuilder, index: Expr, offset: Expr | None = None) -> Var:
        """The rows of segment ``index`` (0-d int64): offset + index*k + iota(k)."""
        start = b.emit(b.call_op("multiply", index, self.k), "t")
        if offset is not None:
            start = b.emit(b.call_op("add", start, offset), "t")
        return b.emit(b.call_op("add", start, self.within), "rows")

    def tail_rows(self, b: LetBuilder, first: Expr) -> Var:
        """The tail's rem rows, from ``first``."""
        return b.emit(b.call_op("add", iota(b, self.rem), first), "rows")


def iota(b: LetBuilder, count: Expr) -> Var:
    """``[0, 1, ..., count - 1]`` (int64, ``(?,)``) for a 0-d int64 count:
    the rows ``argwhere`` finds in ``count`` ones."""
    shape = b.emit(b.call_op("reshape", count, newshape=[1]), "t")
    ones = b.emit(b.call_op("dyn.ones", shape, dtype="bool"), "t")
    rows = b.emit(b.call_op("argwhere", ones), "t")
    flat = b.emit(b.call_op("reshape", rows, newshape=[-1]), "t")
    return b.emit(b.call_op("cast", flat, dtype="int64"), "iota")


def backwards(b: LetBuilder, count: Expr) -> Var:
    """``[count - 1, ..., 1, 0]``: the rows of a sequence of ``count`` steps
    taken in reverse (``take``). Not ``cotangent.reverse``, a strided_slice
    whose end is before the first row whatever the length: of a length
    known only at run time, its result's length is min(n, 2**31 - 2),
    which TVM's memory planner took as a size to allocate (std::bad_alloc)."""
    last = b.emit(b.call_op("subtract", count, b.const(1, "int64")), "t")
    return b.emit(b.call_op("subtract", last, iota(b, count)), "backwards")


def length_of(b: LetBuilder, value: Expr, t: Type) -> Var:
    """The leading dimension of the stacked tree ``value`` (its first
    tensor's), as a 0-d int64 value."""
    while isinstance(t, TupleType):
        value, t = b.emit_get(value, 0, "part"), t.fields[0]
    dims = b.emit(b.call_op("shape_of", value, dtype="int64"), "t")
    first = b.emit(b.call_op("strided_slice", dims, begin=[0], end=[1], axes=[0]), "t")
    return b.emit(b.call_op("reshape", first, newshape=[]), "steps")


def _rows(rows: Expr) -> Leaf:
    def leaf(b: LetBuilder, x: Expr, t: TensorType) -> Expr:
        return b.emit(b.call_op("take", x, rows, axis=0, mode="fast"), "part")

    return leaf


def _merge(b: LetBuilder, x: Expr, t: TensorType) -> Expr:
    """(nseg, k, *rest) -> (nseg * k, *rest), ``rest`` kept (symbolic
    dimensions included: then the leading axes are moved last, where
    reshape's 0s copy the others)."""
    rest = t.shape[2:]
    if all(isinstance(d, int) for d in rest):
        return b.emit(b.call_op("reshape", x, newshape=[-1, *rest]), "joined")
    r = len(rest)
    last = b.emit(b.call_op("transpose", x, axes=[*range(2, r + 2), 0, 1]), "t")
    shaped = b.emit(b.call_op("reshape", last, newshape=[0] * r + [-1]), "t")
    return b.emit(b.call_op("transpose", shaped, axes=[r, *range(r)]), "joined")


def _nested(t: Type) -> Type:
    """The type ``t`` (stacked over steps) stacked once more (segments)."""
    return type_tree.map_leaves(t, lambda leaf: stacked(leaf, ANY))


class Forward:
    """What the segmented forward made: the loop's outputs and final carry,
    each segment's start carry, and the tail's stored carries (a ``taped``
    loop's: their tensors; and ``tape``, the tape with their keys and ADT
    values, the tail's steps on top)."""

    def __init__(
        self,
        outs: Expr | None,
        final: Expr,
        starts: Expr,
        tail: Expr,
        tape: Expr | None,
    ) -> None:
        self.outs, self.final, self.starts, self.tail = outs, final, starts, tail
        self.tape = tape


def segmented_forward(loop: LoopVjp, b: LetBuilder, geo: Geometry, outs: bool = True) -> Forward:
    """``loop`` (a foreach, or a while_loop's view as one) in segments of
    ``geo``: an outer loop over the segment indices whose step takes its
    segment's x and runs an inner loop over its k steps, storing the carry
    it started from; then the tail, storing its carries. Without ``outs``
    (a rerun, whose outputs the forward has) the segments' outputs are
    not kept. A ``taped`` loop's outer loop and tail carry (carry, tape)
    as the static segments' do (``segments.segment_start``)."""
    xs_type = loop.xs.checked_type
    out_type = loop.var.checked_type.fields[0]
    seg, carry = Var("segment", span=loop.span), Var("carry", span=loop.span)
    sb = b.child()
    x_seg = map_value(sb, loop.xs, xs_type, _rows(geo.rows(sb, seg)))
    start, stored, pushed = segment_start(loop, sb, carry)
    inner = sb.emit(sb.call_op("cf.foreach", plain_copy(loop), x_seg, start), "segment_loop")
    outs_seg = sb.emit_get(inner, 0, "outs")
    end = segment_end(sb, sb.emit_get(inner, 1, "carry"), pushed)
    per_seg = sb.emit(sb.tuple([outs_seg, stored]), "per_segment") if outs else stored
    seg_body = Function((seg, carry), sb.finish(sb.emit(sb.tuple([per_seg, end]), "ret")))
    indices = iota(b, geo.nseg)
    outer = b.emit(b.call_op("cf.foreach", seg_body, indices, taped_init(loop, b)), "segments")
    stacked = b.emit_get(outer, 0, "stacked")
    starts = b.emit_get(stacked, 1, "starts") if outs else stacked
    middle = b.emit_get(outer, 1, "middle")
    xs_tail = map_value(b, loop.xs, xs_type, _rows(geo.tail_rows(b, geo.main)))
    tail = b.emit(b.call_op("cf.foreach", loop.storing_body(b), xs_tail, middle), "tail")
    tail_stacked = b.emit_get(tail, 0, "stacked")
    final = b.emit_get(tail, 1, "final")
    tape = None
    if loop.taped:  # (carry, tape)
        tape = b.emit_get(final, 1, "tape")
        final = b.emit_get(final, 0, "final")
    carries = b.emit_get(tail_stacked, 1, "carries")
    if not outs:
        return Forward(None, final, starts, carries, tape)
    outs_main = map_value(b, b.emit_get(stacked, 0, "outs"), _nested(out_type), _merge)
    joined = concat_tree(b, outs_main, b.emit_get(tail_stacked, 0, "outs"), out_type)
    return Forward(joined, final, starts, carries, tape)


def sqrt_foreach(loop: LoopVjp, b: LetBuilder) -> None:
    """``sqrt`` for a foreach of symbolic length (``LoopVjp``)."""
    geo = Geometry(b, length_of(b, loop.xs, loop.xs.checked_type))
    fwd = segmented_forward(loop, b, geo)
    b.bind(loop.var, b.tuple([fwd.outs, fwd.final]))

    def back(bb: LetBuilder) -> None:
        seeds = loop.seeds(bb, fwd.outs, fwd.final)
        if seeds is not None:
            segmented_backward(loop, bb, seeds, geo, fwd)

    loop.rev.tape.append(back)


def sqrt_while(loop: LoopVjp, b: LetBuilder) -> None:
    """``sqrt`` for a while_loop: the loop as written, counting its steps;
    the backward reruns it in segments from the initial carry."""
    counted = _counting_body(loop, b)
    start = b.emit(b.tuple([loop.init, b.const(0, "int64")]), "init")
    args = (loop.tape_cond(), counted, start, *loop.limit)
    run = b.emit(Call(loop.call.callee, args, loop.call.attrs, span=loop.span), "loop")
    outs = b.emit_get(run, 0, "outs")
    final_pair = b.emit_get(run, 1, "final")
    final = b.emit_get(final_pair, 0, "final")
    steps = b.emit_get(final_pair, 1, "steps")
    b.bind(loop.var, b.tuple([outs, final]))

    def back(bb: LetBuilder) -> None:
        seeds = loop.seeds(bb, outs, final)
        if seeds is None:
            return
        geo = Geometry(bb, steps)
        view = foreach_view(loop, iota(bb, steps))
        segmented_backward(view, bb, seeds, geo, segmented_forward(view, bb, geo, outs=False))

    loop.rev.tape.append(back)


def _counting_body(loop: LoopVjp, b: LetBuilder) -> Function:
    """A copy of the while_loop's body on (carry, steps so far) that counts."""
    fb, body, pair, count = paired_body(loop.body, b, "carry_and_count", "count", loop.span)
    out, carry = spliced_step(fb, body.body)
    following = fb.emit(fb.call_op("add", count, fb.const(1, "int64")), "count")
    ret = fb.emit(fb.tuple([out, fb.tuple([carry, following])]), "ret")
    return Function((pair,), fb.finish(ret), span=loop.body.span)


def foreach_view(loop: LoopVjp, indices: Var) -> LoopVjp:
    """The while_loop ``loop`` as a foreach over ``indices`` (its steps'
    numbers, unused by the body ``fn(%i, %carry)``): the segmented code
    and the recomputing reverse loop then serve both."""
    indices.set_checked_type(TensorType((ANY,), "int64"))
    index = Var("step_index", INDEX, span=loop.span)
    index.set_checked_type(INDEX)
    params = (index, *loop.body.params)
    types = [
        ct_type(loop.var.checked_type.fields[0], loop.ad.adts),
        loop.stored_type,
        indices.checked_type,
    ]
    return loop.view(
        foreach=True,
        xs=indices,
        body=Function(params, loop.body.body, span=loop.body.span),
        recompute_slots=Slots(types),
    )


def segmented_backward(
    loop: LoopVjp, bb: LetBuilder, seeds: tuple, geo: Geometry, fwd: Forward
) -> None:
    """The tail's reverse loop, then a reverse loop over the segments, last
    first, each recomputing its segment from its start carry and running
    its reverse loop (``segments.segment_backward_step``), reducing that chunk's
    hoisted factors into the carried sums."""
    ct_outs, ct_final = seeds
    xs_type = loop.xs.checked_type
    ct_out_type = ct_type(loop.var.checked_type.fields[0], loop.ad.adts)
    plan = loop.probe_plan()
    n = len(loop.free)
    slots = loop.recompute_slots
    zeros = [materialize(bb, None, f, f.checked_type, loop.ad.adts) for f in loop.free]
    x_parts: list[Expr] = []
    # the tail's steps, last first
    tail_back = backwards(bb, geo.rem)
    tail_rows = bb.emit(bb.call_op("add", tail_back, geo.main), "rows")
    seqs = [
        map_value(bb, ct_outs, ct_out_type, _rows(tail_rows)),
        map_value(bb, fwd.tail, loop.stored_type, _rows(tail_back)),
        map_value(bb, loop.xs, xs_type, _rows(tail_rows)),
    ]
    tape = [] if fwd.tape is None else [fwd.tape]  # the tail's steps on top
    init = bb.emit(bb.tuple([ct_final, *zeros, *tape]), "ct_init")
    tail_loop = loop.reverse_loop(bb, slots.pack(bb, seqs), init, loop.recompute_step)
    tplan = loop.last_plan
    tail_steps, tail_flats = loop.hoisted_flats(bb, tail_loop, tplan)
    sums = tplan.chunk_parts(bb, tail_flats) if tplan.active else []
    ct_xs_tail = None
    if tplan.x_terms:
        x_parts.append(tplan.x_part(bb, tail_flats))
    else:
        ct_xs_tail = map_value(bb, tail_steps, ct_type(xs_type, loop.ad.adts), _rows(tail_back))
    fin = bb.emit_get(tail_loop, 1, "ct_middle")
    carried_fields = [bb.emit_get(fin, i, "ct_middle") for i in range(1 + n)]
    if tape:  # then the segments' starts, last on top
        tape = [bb.emit_get(fin, 1 + n, "tape")]
    carried = bb.emit(bb.tuple([*carried_fields, *sums, *tape]), "ct_init")
    # per slot: the flat stacks give a segment's rows, the starts its index
    sources = [(ct_outs, ct_out_type, True), (fwd.starts, loop.stored_type, False)]
    sources.append((loop.xs, xs_type, True))
    stacks = [s for s, p in zip(sources, slots.positions, strict=True) if p is not None]
    order = backwards(bb, geo.nseg)

    def segment_step(nb: LetBuilder, index: Var, c: Var) -> tuple:
        rows = geo.rows(nb, index)
        parts = [
            map_value(nb, s, t, _rows(rows) if flat else take_row(index)) for s, t, flat in stacks
        ]
        step = slots.pack_kept(nb, parts, "segment")
        return segment_backward_step(loop, nb, step, c, plan, False)

    segs_back = loop.reverse_loop(bb, order, carried, segment_step, totals=True)
    fin = bb.emit_get(segs_back, 1, "ct_final")
    loop.rev.add(bb, loop.init, bb.emit_get(fin, 0, "ct_init"))
    seg_steps = bb.emit_get(segs_back, 0, "ct_steps")
    if plan.x_terms:  # the chunks' x cotangents, in the reverse loops' order
        x_parts.append(bb.emit_get(seg_steps, 1, "ct_x"))
        steps = _rows(backwards(bb, geo.length))(bb, plan.x_steps(bb, x_parts), None)
        loop.rev.add(bb, loop.xs, steps)
    elif differentiable(xs_type, loop.ad.adts):
        steps = map_value(bb, seg_steps, ct_type(xs_type, loop.ad.adts), _rows(order))
        ct_xs = map_value(bb, steps, _nested(ct_type(xs_type, loop.ad.adts)), _merge)
        assert ct_xs_tail is not None
        loop.rev.add(
            bb,
            loop.xs,
            concat_tree(bb, ct_xs, ct_xs_tail, ct_type(xs_type, loop.ad.adts)),
        )
    hoisted = plan.hoisted
    for j, f in enumerate(loop.free):
        acc = bb.emit_get(fin, j + 1, "ct_free")
        total = bb.emit_get(fin, 1 + n + hoisted.index(j), "ct_hoisted") if j in hoisted else None
        loop.rev.add(bb, f, plan.total(bb, j, acc, total))


def runtime_totals(
    loop: LoopVjp, bb: LetBuilder, plan: Plan, factors: Expr
) -> tuple[list[Expr], Expr | None]:
    """``sqrt.chunked_totals`` for a loop whose chunks are known at run
    time: the stacked factors (steps in the reverse loop's order) cut into
    the tail's rows, then each segment's, as ``segmented_backward`` sums them."""
    stacks = [bb.emit_get(factors, i, "factor") for i in range(len(plan.stacks))]
    geo = Geometry(bb, length_of(bb, stacks[0], TensorType((ANY,), "float32")))
    x_parts: list[Expr] = []
    head = geo.tail_rows(bb, bb.const(0, "int64"))
    flats = [plan.flat(bb, _rows(head)(bb, s, None), i) for i, s in enumerate(stacks)]
    sums = plan.chunk_parts(bb, flats)
    if plan.x_terms:
        x_parts.append(plan.x_part(bb, flats))

    def factors_of(nb: LetBuilder, index: Var) -> list[Expr]:
        rows = geo.rows(nb, index, geo.rem)
        return [plan.flat(nb, _rows(rows)(nb, s, None), i) for i, s in enumerate(stacks)]

    return chunk_loop(loop, bb, plan, sums, x_parts, lambda b: iota(b, geo.nseg), factors_of)


class RuntimeSegments(Segments):
    """Segments computed when the program runs: a ``foreach`` of symbolic
    length, a ``while_loop``."""

    def sqrt(self, loop: LoopVjp, b: LetBuilder) -> bool:
        (sqrt_foreach if loop.foreach else sqrt_while)(loop, b)
        return True

    def totals(
        self, loop: LoopVjp, bb: LetBuilder, plan: Plan, factors: Expr
    ) -> tuple[list[Expr], Expr | None]:
        return runtime_totals(loop, bb, plan, factors)


__all__ = [
    "Geometry",
    "RuntimeSegments",
    "runtime_totals",
    "sqrt_foreach",
    "sqrt_while",
]
