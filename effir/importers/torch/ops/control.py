"""The higher-order operators: control flow stays control flow.

- ``cond(pred, true_fn, false_fn, operands)`` is an ``if``: only the
  branch taken runs (a predicate known at import keeps its branch only).
  Outputs whose sizes differ are joined to ``?`` (``forget_dims``).
- ``while_loop(cond_fn, body_fn, carried, additional)`` is a
  ``cf.while_loop`` over the carried values.
- ``scan(combine_fn, init, xs, additional)`` is a ``cf.foreach`` over the
  leading axis of ``xs``: its state the carry, its outputs stacked.
- ``map_impl(body_fn, xs, additional)`` is a ``cf.foreach`` of no state.

Branches and bodies are converted into closures: what they read from the
enclosing graphs (``additional`` inputs, operands) they capture. Carried
values whose sizes change from one iteration to the next are joined, the
body converted again with the joined types, until they settle.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ....ir.expr import Function, Tuple, Var
from ....ir.trampoline import Computation
from ....ir.types import TensorType, TupleType
from ...common.control import emit_foreach, joined_if, settled_types
from ...common.values import Value, constant
from ..graph import NodeContext, Subgraph
from ..registry import converter

MAX_ROUNDS = 16


def _graph(ctx: NodeContext, value: Any, what: str) -> Subgraph:
    if not isinstance(value, Subgraph):
        raise ctx.error(f"its {what} is not a graph")
    return value


def _values(ctx: NodeContext, values: Any, what: str) -> list[Value]:
    out = list(values or [])
    for v in out:
        if not isinstance(v, Value):
            raise ctx.error(f"its {what} must be tensors, got {type(v).__name__}")
    return out


@converter("higher_order.cond")
def _cond(ctx: NodeContext) -> Computation[list[Value]]:
    pred = ctx.arg(0, "pred")
    true_fn = _graph(ctx, ctx.arg(1, "true_fn"), "true branch")
    false_fn = _graph(ctx, ctx.arg(2, "false_fn"), "false branch")
    operands = _values(ctx, ctx.arg(3, "operands"), "operands")
    known: bool | None
    if isinstance(pred, bool | int):
        known = bool(pred)
    else:
        if pred.tensor.ndim:
            pred = ctx.block.op("reshape", pred, newshape=[])
        if pred.tensor.dtype != "bool":
            pred = ctx.block.op("not_equal", pred, _zero(pred))
        known = None if pred.const is None else bool(pred.const)
    if known is not None:  # the branch taken is all there is
        taken, outputs = yield ctx.subgraph(true_fn if known else false_fn, operands)
        ctx.block.builder.bindings.extend(taken.builder.bindings)
        return outputs
    then = yield ctx.subgraph(true_fn, operands)
    other = yield ctx.subgraph(false_fn, operands)
    names = ["branch"] * len(then[1])
    return joined_if(ctx.block, pred, then, other, ctx.error, ctx.name, names, unwrap_one=False)


def _zero(v: Value) -> Value:
    return constant(np.zeros((), dtype=v.tensor.dtype))


@converter("higher_order.while_loop")
def _while_loop(ctx: NodeContext) -> Computation[list[Value]]:
    cond_fn = _graph(ctx, ctx.arg(0, "cond_fn"), "condition")
    body_fn = _graph(ctx, ctx.arg(1, "body_fn"), "body")
    inits = _values(ctx, ctx.arg(2, "carried_inputs"), "carried inputs")
    extra = _values(ctx, ctx.arg(3, "additional_inputs"), "additional inputs")
    types = [v.type for v in inits]
    for _ in range(MAX_ROUNDS):
        state = Var("state", TupleType(tuple(types)), span=ctx.span)
        body = ctx.block.child()
        fields = body.fields(
            Value(state, state.type_annotation), len(types), ["carried"] * len(types)
        )
        inner, outputs = yield ctx.subgraph(body_fn, [*fields, *extra])
        body.builder.bindings.extend(inner.builder.bindings)
        if len(outputs) != len(types):
            raise ctx.error(f"its body gives {len(outputs)} values for {len(types)} carried")
        joined = settled_types(ctx.error, types, outputs)
        if joined is None:
            break
        types = joined
    else:
        raise ctx.error("the types of its carried values do not settle")
    state_type = TupleType(tuple(types))
    results = [body.widen(v, t) for v, t in zip(outputs, types, strict=True)]
    step = Function(
        (state,),
        body.finish(Tuple((Tuple((), span=ctx.span), _tuple(ctx, results)), span=ctx.span)),
        span=ctx.span,
    )
    s = Var("state", state_type, span=ctx.span)
    test = ctx.block.child()
    carried = test.fields(Value(s, state_type), len(types), ["carried"] * len(types))
    inner, go = yield ctx.subgraph(cond_fn, [*carried, *extra])
    test.builder.bindings.extend(inner.builder.bindings)
    if len(go) != 1 or not go[0].is_tensor or go[0].tensor.dtype != "bool":
        raise ctx.error("its condition must give one bool")
    flag = go[0] if go[0].tensor.ndim == 0 else test.op("reshape", go[0], newshape=[])
    cond = Function((s,), test.finish(flag.expr), span=ctx.span)
    init = ctx.block.tuple(
        [ctx.block.widen(v, t) for v, t in zip(inits, types, strict=False)], "init"
    )
    call = ctx.block.builder.call_op("cf.while_loop", cond, step, init.expr)
    loop = ctx.block.emit(call, TupleType((TupleType(()), state_type)), ctx.name)
    finals = ctx.block.get(loop, 1, "finals")
    return ctx.block.fields(finals, len(types), ["final"] * len(types))


def _tuple(ctx: NodeContext, values: Sequence[Value]) -> Tuple:
    return Tuple(tuple(v.expr for v in values), span=ctx.span)


def _foreach(
    ctx: NodeContext, body_fn: Subgraph, inits: list[Value], xs: list[Value], extra: list[Value]
) -> Computation[list[Value]]:
    """A ``cf.foreach`` over the leading axis of ``xs``, carrying
    ``inits``: the final carried values, then the stacked outputs."""
    if not xs:
        raise ctx.error("it scans over no tensors")
    length = xs[0].tensor.shape[0]
    step_types = tuple(TensorType(x.tensor.shape[1:], x.tensor.dtype) for x in xs)
    types = [v.type for v in inits]
    for _ in range(MAX_ROUNDS):
        x_t = Var("x_t", TupleType(step_types), span=ctx.span)
        state = Var("state", TupleType(tuple(types)), span=ctx.span)
        body = ctx.block.child()
        carried = body.fields(
            Value(state, state.type_annotation), len(types), ["carry"] * len(types)
        )
        elements = body.fields(Value(x_t, x_t.type_annotation), len(xs), ["x"] * len(xs))
        inner, outputs = yield ctx.subgraph(body_fn, [*carried, *elements, *extra])
        body.builder.bindings.extend(inner.builder.bindings)
        if len(outputs) < len(types):
            raise ctx.error(f"its body gives {len(outputs)} values for {len(types)} carried")
        joined = settled_types(ctx.error, types, outputs[: len(types)])
        if joined is None:
            break
        types = joined
    else:
        raise ctx.error("the types of its carried values do not settle")
    results = [body.widen(v, t) for v, t in zip(outputs, types, strict=False)]
    per_step = outputs[len(types) :]
    seqs = ctx.block.tuple(xs, "xs")
    loop = emit_foreach(
        ctx.block, (x_t, state, body), per_step, results, seqs, length, inits, types, ctx.name
    )
    outs, finals = ctx.block.fields(loop, 2, ["outs", "finals"])
    return [
        *ctx.block.fields(finals, len(types), ["final"] * len(types)),
        *ctx.block.fields(outs, len(per_step), ["stacked"] * len(per_step)),
    ]


@converter("higher_order.scan")
def _scan(ctx: NodeContext) -> Computation[list[Value]]:
    body_fn = _graph(ctx, ctx.arg(0, "combine_fn"), "combine function")
    inits = _values(ctx, ctx.arg(1, "init"), "initial carries")
    xs = _values(ctx, ctx.arg(2, "xs"), "scanned inputs")
    extra = _values(ctx, ctx.arg(3, "additional_inputs"), "additional inputs")
    return (yield _foreach(ctx, body_fn, inits, xs, extra))


@converter("higher_order.map_impl")
def _map(ctx: NodeContext) -> Computation[list[Value]]:
    body_fn = _graph(ctx, ctx.arg(0, "f"), "body")
    xs = _values(ctx, ctx.arg(1, "xs"), "mapped inputs")
    extra = _values(ctx, ctx.arg(2, "operands"), "additional inputs")
    return (yield _foreach(ctx, body_fn, [], xs, extra))
