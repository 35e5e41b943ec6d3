"""Sequences as lists (the prelude's ``List``, common/sequences.py).

A sequence's elements may differ in shape (``SplitToSequence`` into
unequal parts, a sequence grown in a loop), so a list's elements are typed
by dtype and rank alone: every dimension ``?`` (``forget_dims`` where an
element is put in). ``SequenceMap`` is a map over the lists (a local
recursive function, one call per element, its body the subgraph);
``ConcatFromSequence`` a fold of ``concatenate``; positions are checked
(common/sequences.py ``checked_position``).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ....ir.expr import (
    Call,
    Clause,
    Expr,
    Function,
    If,
    Let,
    Match,
    PatternConstructor,
    PatternTuple,
    PatternVar,
    Tuple,
    Var,
)
from ....ir.trampoline import Computation
from ....ir.types import IncompleteType, TensorType, TupleType, Type
from ...common.block import Block
from ...common.sequences import checked_position
from ...common.types import JoinError, join, list_element, list_type, loose
from ...common.values import Value
from ..graph import NodeContext
from ..registry import converter
from .elementwise import dtype_of_attr, scalar
from .shape import dim_of, pack

SEQUENCE_OPS = (11,)


def element(ctx: NodeContext, value: Value, block: Block | None = None) -> Value:
    """A tensor as a list element: every dimension ``?``."""
    if not value.is_tensor:
        raise ctx.error("a sequence holds tensors")
    return (block or ctx.block).widen(value, loose(value.tensor))


def sequence(ctx: NodeContext, i: int) -> tuple[Value, Type]:
    """Input ``i``, a sequence, and its element type."""
    value = ctx.input(i)
    elem = list_element(value.type)
    if elem is None:
        raise ctx.error(f"its input {i} must be a sequence")
    return value, elem


def joined_element(ctx: NodeContext, a: Type, b: Type) -> Type:
    try:
        return join(a, b)
    except JoinError as err:
        raise ctx.error(f"a sequence's elements must have one dtype and rank: {err}") from None


def build_list(ctx: NodeContext, block: Block, items: Sequence[Value], elem: Type) -> Value:
    cons, nil = ctx.state.parts.constructors()
    result: Expr = nil
    for item in reversed(items):
        result = block.emit(
            Call(cons, (item.expr, result), span=block.span), list_type(elem), "seq"
        ).expr
    return Value(result, list_type(elem))


@converter("SequenceEmpty", versions=SEQUENCE_OPS)
def _empty(ctx: NodeContext) -> list[Value]:
    _, nil = ctx.state.parts.constructors()
    if ctx.attrs.get("dtype") is not None:
        dtype_of_attr(ctx, "dtype")  # an element type effir has: checked
    # the elements' rank is learnt from what is put in (or effir.check infers it)
    return [Value(nil, list_type(IncompleteType()))]


@converter("SequenceConstruct", versions=SEQUENCE_OPS)
def _construct(ctx: NodeContext) -> list[Value]:
    items = [element(ctx, ctx.tensor(i)) for i in range(len(ctx.inputs))]
    elem: Type = IncompleteType()
    for item in items:
        elem = joined_element(ctx, elem, item.type)
    return [build_list(ctx, ctx.block, items, elem)]


def _length(ctx: NodeContext, seq: Value) -> Value:
    fn = ctx.state.parts.library("seq_length")
    return ctx.block.emit(Call(fn, (seq.expr,), span=ctx.span), TensorType((), "int64"), "length")


def _position(
    ctx: NodeContext, i: int, default_last: bool, length: Value, allow_end: bool
) -> Value:
    given = ctx.optional(i)
    if given is None:
        end = length if allow_end else ctx.block.op("subtract", length, scalar(1, "int64"))
        return end if default_last else scalar(0, "int64")
    position = given if given.tensor.ndim == 0 else ctx.block.op("reshape", given, newshape=[])
    if position.tensor.dtype != "int64":
        position = ctx.block.op("cast", position, dtype="int64")
    return checked_position(ctx.block, position, length, allow_end)


@converter("SequenceAt", versions=SEQUENCE_OPS)
def _at(ctx: NodeContext) -> list[Value]:
    seq, elem = sequence(ctx, 0)
    if isinstance(elem, IncompleteType):
        raise ctx.error("the sequence's element type is not known (an empty sequence)")
    at = _position(ctx, 1, False, _length(ctx, seq), allow_end=False)
    fn = ctx.state.parts.library("seq_at")
    return [ctx.block.emit(Call(fn, (seq.expr, at.expr), span=ctx.span), elem, ctx.name)]


@converter("SequenceInsert", versions=SEQUENCE_OPS)
def _insert(ctx: NodeContext) -> list[Value]:
    seq, elem = sequence(ctx, 0)
    item = element(ctx, ctx.tensor(1))
    elem = joined_element(ctx, elem, item.type)
    at = _position(ctx, 2, True, _length(ctx, seq), allow_end=True)
    fn = ctx.state.parts.library("seq_insert")
    call = Call(fn, (seq.expr, at.expr, item.expr), span=ctx.span)
    return [ctx.block.emit(call, list_type(elem), ctx.name)]


@converter("SequenceErase", versions=SEQUENCE_OPS)
def _erase(ctx: NodeContext) -> list[Value]:
    seq, elem = sequence(ctx, 0)
    at = _position(ctx, 1, True, _length(ctx, seq), allow_end=False)
    fn = ctx.state.parts.library("seq_erase")
    return [ctx.block.emit(Call(fn, (seq.expr, at.expr), span=ctx.span), seq.type, ctx.name)]


@converter("SequenceLength", versions=SEQUENCE_OPS)
def _length_op(ctx: NodeContext) -> list[Value]:
    seq, _ = sequence(ctx, 0)
    return [_length(ctx, seq)]


@converter("SplitToSequence", versions=(11, 24))
def _split(ctx: NodeContext) -> list[Value]:
    x = ctx.tensor(0)
    rank = x.tensor.ndim
    axis = int(ctx.attrs.get("axis", 0))
    axis = axis + rank if axis < 0 else axis
    length = x.tensor.shape[axis]
    given = ctx.optional(1)
    keep = bool(ctx.attrs.get("keepdims", 1))
    if given is not None and given.const is None:
        return [_split_at_run_time(ctx, x, axis, given)]
    if not isinstance(length, int):
        raise ctx.error("SplitToSequence needs a static length along its axis")
    split = None if given is None else given.const
    if split is None:
        sizes = [1] * length
    elif split.ndim == 0:
        step = int(split)
        if step <= 0:
            raise ctx.error(f"the split size must be positive, got {step}")
        sizes = [min(step, length - k) for k in range(0, length, step)]
    else:
        sizes = [int(s) for s in split]
    if sum(sizes) != length or any(s < 0 for s in sizes):
        raise ctx.error(f"the split sizes {sizes} do not add up to the length {length}")
    indices = [int(i) for i in np.cumsum(sizes)[:-1]]
    parts = ctx.block.op("split", x, indices_or_sections=indices, axis=axis)
    items = ctx.block.fields(parts, len(sizes), ["part"] * len(sizes))
    if split is None and not keep:
        items = [ctx.block.op("squeeze", p, axis=[axis]) for p in items]
    items = [element(ctx, p) for p in items]
    elem = items[0].type if items else loose(x.tensor)
    return [build_list(ctx, ctx.block, items, elem)]


def _split_at_run_time(ctx: NodeContext, x: Value, axis: int, split: Value) -> Value:
    """Sizes known at run time: the parts taken along the axis between the
    running sums of the sizes (a scalar size: parts of that size, the last
    one shorter), gathered by ``dyn.arange`` indices, built into a list by a
    local recursive function from the first part's start."""
    block = ctx.block
    elem = loose(x.tensor)
    seq_type = list_type(elem)
    cons, nil = ctx.state.parts.constructors()
    length = dim_of(block, x, axis)
    sizes = split if split.tensor.dtype == "int64" else block.op("cast", split, dtype="int64")
    go = Var("parts", span=ctx.span)
    k = Var("k", TensorType((), "int64"), span=ctx.span)
    step = ctx.block.child()
    start_ = Value(k, TensorType((), "int64"))
    one = scalar(1, "int64")
    if sizes.tensor.ndim == 0:
        begin = step.op("multiply", start_, sizes)
        end = step.op("minimum", step.op("add", begin, sizes), length)
        more = step.op("less", begin, length)
    else:
        ends = step.op("cumsum", sizes, axis=0)
        count = Value(step.op("shape_of", sizes, dtype="int64").expr, TensorType((1,), "int64"))
        count = step.op("reshape", count, newshape=[])
        more = step.op("less", start_, count)
        safe = step.op("minimum", start_, step.op("subtract", count, one))
        end = step.op("take", ends, safe, axis=0)
        begin = step.op("subtract", end, step.op("take", sizes, safe, axis=0))
    taken = ctx.block.child()
    indices = taken.op("dyn.arange", begin, end, one)
    part = element(ctx, taken.op("take", x, indices, axis=axis, mode="fast"), taken)
    rest = taken.emit(
        Call(go, (taken.op("add", start_, one).expr,), span=ctx.span), seq_type, "rest"
    )
    consed = taken.emit(Call(cons, (part.expr, rest.expr), span=ctx.span), seq_type, "seq")
    body = step.finish(If(more.expr, taken.finish(consed.expr), nil, span=ctx.span))
    fn = Function((k,), body, seq_type, span=ctx.span)
    bound = Let(go, fn, Call(go, (scalar(0, "int64").expr,), span=ctx.span), span=ctx.span)
    return block.emit(bound, seq_type, ctx.name)


@converter("ConcatFromSequence", versions=SEQUENCE_OPS)
def _concat(ctx: NodeContext) -> list[Value]:
    seq, elem = sequence(ctx, 0)
    if not isinstance(elem, TensorType):
        raise ctx.error("the sequence's element type is not known (an empty sequence)")
    new_axis = bool(ctx.attrs.get("new_axis", 0))
    rank = elem.ndim + (1 if new_axis else 0)
    axis = int(ctx.attrs["axis"])
    axis = axis + rank if axis < 0 else axis
    result_type = loose(TensorType(tuple("?" for _ in range(rank)), elem.dtype))
    cons, _ = ctx.state.parts.constructors()
    nil_ctor = ctx.state.parts.nil_constructor()
    go = Var("concat_all", span=ctx.span)
    xs = Var("xs", list_type(elem), span=ctx.span)
    # each clause binds variables of its own
    only_x, x = Var("x", elem, span=ctx.span), Var("x", elem, span=ctx.span)
    rest = Var("rest", list_type(elem), span=ctx.span)

    def lifted(block: Block, value: Value) -> Value:
        if not new_axis:
            return value
        return block.widen(block.op("expand_dims", value, axis=axis), result_type)

    last = ctx.block.child()
    only = last.finish(lifted(last, Value(only_x, elem)).expr)
    more = ctx.block.child()
    tail = more.emit(Call(go, (rest,), span=ctx.span), result_type, "tail")
    joined = more.op("concatenate", _pack(lifted(more, Value(x, elem)), tail), axis=axis)
    joined = more.widen(joined, result_type)
    last_one = PatternConstructor(nil_ctor)
    clauses = (
        Clause(PatternConstructor(cons, (PatternVar(only_x), last_one)), only),
        Clause(
            PatternConstructor(cons, (PatternVar(x), PatternVar(rest))), more.finish(joined.expr)
        ),
    )
    fn = Function(
        (xs,), Match(xs, clauses, complete=False, span=ctx.span), result_type, span=ctx.span
    )
    bound = Let(go, fn, Call(go, (seq.expr,), span=ctx.span), span=ctx.span)
    return [ctx.block.emit(bound, result_type, ctx.name)]


def _pack(*values: Value) -> Value:
    return pack(list(values))


@converter("SequenceMap", versions=(17,))
def _map(ctx: NodeContext) -> Computation[list[Value]]:
    """A local recursive function over the sequences (one more call per
    element), the body converted once, its outputs consed on."""
    inputs = [ctx.input(i) for i in range(len(ctx.inputs))]
    cons, nil = ctx.state.parts.constructors()
    lists = [k for k, v in enumerate(inputs) if list_element(v.type) is not None]
    seq_vars = {k: Var(f"xs{k}", inputs[k].type, span=ctx.span) for k in lists}
    heads = {k: Var(f"x{k}", list_element(inputs[k].type), span=ctx.span) for k in lists}
    rests = {k: Var(f"rest{k}", inputs[k].type, span=ctx.span) for k in lists}
    for k in lists:
        if isinstance(list_element(inputs[k].type), IncompleteType):
            raise ctx.error(f"the element type of its input {k} is not known (an empty sequence)")
    body_inputs = [
        Value(heads[k], list_element(inputs[k].type)) if k in heads else inputs[k]
        for k in range(len(inputs))
    ]
    inner, outputs = yield ctx.subgraph("body", body_inputs)
    items = [element(ctx, o, inner) for o in outputs]
    out_types = [list_type(i.type) for i in items]
    result_type = TupleType(tuple(out_types))
    go = Var("map", span=ctx.span)
    rest = inner.emit(
        Call(go, tuple(rests[k] for k in lists), span=ctx.span), result_type, "mapped"
    )
    consed = [
        inner.emit(Call(cons, (item.expr, inner.get(rest, j).expr), span=ctx.span), t, "out")
        for j, (item, t) in enumerate(zip(items, out_types, strict=True))
    ]
    step = inner.finish(Tuple(tuple(c.expr for c in consed), span=ctx.span))
    nil_ctor = ctx.state.parts.nil_constructor()
    done = Tuple(tuple(Call(nil_ctor, ()) for _ in items), span=ctx.span)  # a node each
    scrutinee = Tuple(tuple(seq_vars[k] for k in lists), span=ctx.span)
    all_cons = PatternTuple(
        tuple(PatternConstructor(cons, (PatternVar(heads[k]), PatternVar(rests[k]))) for k in lists)
    )
    all_nil = PatternTuple(tuple(PatternConstructor(nil_ctor) for _ in lists))
    match = Match(
        scrutinee, (Clause(all_cons, step), Clause(all_nil, done)), complete=False, span=ctx.span
    )
    fn = Function(tuple(seq_vars[k] for k in lists), match, result_type, span=ctx.span)
    bound = Let(
        go, fn, Call(go, tuple(inputs[k].expr for k in lists), span=ctx.span), span=ctx.span
    )
    result = ctx.block.emit(bound, result_type, ctx.name)
    return ctx.block.fields(result, len(items), ["mapped"] * len(items))
