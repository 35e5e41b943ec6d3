"""Segments of a loop's steps: the interface of the two ways of cutting
them (``Segments``) and what both share.

``checkpoint="sqrt"`` runs a ``cf.foreach`` in segments of about sqrt(T)
steps: the forward stores each segment's first carry, the backward
recomputes one segment at a time. Every policy also sums the reverse
loop's hoisted weight-gradient terms (``hoist``) in the same chunks (the
tail, then each segment, in the reverse loop's order), so that all add the
same sums in the same order and stay bit-identical. Where T is in the
program, the segments are the leading axis reshaped
(``static_segments.StaticSegments``); where it is known only at run time
(a symbolic length, a ``while_loop``), they are computed when the program
runs (``runtime_segments.RuntimeSegments``). ``segments_of`` picks one.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable

from effir.passes.analyses.anf_sharing import fresh_binders

from ..ir.builder import LetBuilder
from ..ir.expr import Expr, Function, Var
from ..ir.type_tree_emit import Leaf, map_values
from ..ir.types import TensorType, Type
from . import keytape
from .cotangent import ct_type, reverse
from .hoist import Plan
from .loop_vjp import LoopVjp


class Segments(ABC):
    """One way of cutting a loop's steps into segments and chunks."""

    @abstractmethod
    def sqrt(self, loop: LoopVjp, b: LetBuilder) -> bool:
        """Bind ``loop`` with its forward in segments, storing each segment's
        start, and record its backward; False (nothing emitted) where the
        loop is too short to segment."""

    @abstractmethod
    def totals(
        self, loop: LoopVjp, bb: LetBuilder, plan: Plan, factors: Expr
    ) -> tuple[list[Expr], Expr | None]:
        """The sums of the hoisted terms (per ``plan.hoisted``) from an
        unsegmented reverse loop's stacked ``factors`` (steps in its
        order), chunk by chunk as the segmented backward sums them; and the
        stacked x cotangents, if hoisted."""


def concat_tree(b: LetBuilder, a: Expr, c: Expr, t: Type) -> Expr:
    """The trees ``a`` and ``c`` of type ``t`` joined along the steps."""

    def leaf(bb: LetBuilder, parts: list[Expr], ty: Type) -> Expr:
        pair = bb.emit(bb.tuple(parts), "pair")
        return bb.emit(bb.call_op("concatenate", pair, axis=0), "joined")

    return map_values(b, [a, c], t, leaf)


def take_row(index: Expr) -> Leaf:
    """(nseg, ...) -> its row ``index`` (a 0-d int64 tensor)."""

    def leaf(b: LetBuilder, x: Expr, t: TensorType) -> Expr:
        return b.emit(b.call_op("take", x, index, axis=0), "segment")

    return leaf


def segment_start(loop: LoopVjp, sb: LetBuilder, carry: Expr) -> tuple[Expr, Expr, Expr | None]:
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


def taped_init(loop: LoopVjp, b: LetBuilder) -> Expr:
    """The initial carry of a segmented forward: a ``taped`` loop's with
    an empty tape."""
    if not loop.taped:
        return loop.init
    return b.emit(b.tuple([loop.init, keytape.empty(b, loop.ad.tape_data())]), "init")


def chunk_loop(
    loop: LoopVjp,
    bb: LetBuilder,
    plan: Plan,
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


def plain_copy(loop: LoopVjp) -> Function:
    copy = fresh_binders(loop.body)
    assert isinstance(copy, Function)
    return copy


def segment_backward_step(
    loop: LoopVjp, nb: LetBuilder, step: Var, carry: Var, plan: Plan, stored: bool
) -> tuple:
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
    out_t = ct_type(loop.var.checked_type.fields[0], loop.ad.adts)
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
    return reverse(nb, steps, ct_type(xs_type, loop.ad.adts)), prev, free, sums
