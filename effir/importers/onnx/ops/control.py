"""``If``, ``Loop`` and ``Scan``: control flow stays control flow.

- ``If`` is an ``if``: only the branch taken runs (a condition known at
  import keeps only its branch). The branches' outputs are joined
  (common/types.py): dimensions that differ become ``?`` (``forget_dims``
  in the branch), different ranks or dtypes are an error.
- ``Loop`` is a ``cf.foreach`` over ``0 .. M-1`` when its trip count ``M``
  is known and its condition cannot stop it (it starts true, or is not
  given, and the body passes it on unchanged or makes it a true
  constant), so that a static body compiles into one loop kernel;
  otherwise a ``cf.while_loop`` whose state is ``(iteration, condition,
  carried values...)``, the trip count (when there is one) its
  ``max_iterations`` or a comparison. The body's condition output is read
  at every iteration even when the node has no condition input, as
  onnxruntime and ONNX's reference implementation read it (the
  specification's table of modes calls it ignored there).
- ``Scan`` is a ``cf.foreach`` over its inputs, each with its scan axis
  moved first and reversed when it scans backwards; its outputs are
  stacked, then reversed and moved to their axes.

[RULE TYPE-JOIN] A loop's carried values may change shape from one iteration
to the next (a tensor that grows, a sequence whose elements are not known
until the body inserts one). The body is converted with the initial
values' types; where what it returns is not of those types, the types are
joined and the body converted again, until they are stable (each round
forgets a dimension or learns an element type, so a few rounds at most).
The initial values and the body's results are then widened to those types.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ....ir.expr import Function, Tuple, Var
from ....ir.trampoline import Computation
from ....ir.types import ANY, TensorType, TupleType
from ...common.block import Block
from ...common.control import emit_foreach, joined_if, settled_types
from ...common.parts import identifier
from ...common.values import Value, constant
from ..graph import NodeContext
from ..registry import converter
from .elementwise import scalar

LATER = (11, 13, 16, 19, 21, 23, 24, 25)
FOREACH_LIMIT = 1 << 20
"""The longest constant trip count a ``Loop`` is a ``cf.foreach`` for (its
iteration numbers are a constant of that length)."""
MAX_ROUNDS = 64


def as_scalar(ctx: NodeContext, value: Value, what: str) -> Value:
    """A 0-d or 1-element tensor as a 0-d one."""
    if value.tensor.ndim == 0:
        return value
    if value.tensor.shape not in ((1,), (ANY,)):
        raise ctx.error(f"{what} must hold one element, got a tensor of shape {value.tensor.shape}")
    return ctx.block.op("reshape", value, newshape=[])


# -------------------------------------------------------------------- If
@converter("If", versions=LATER)
def _if(ctx: NodeContext) -> Computation[list[Value]]:
    cond = as_scalar(ctx, ctx.tensor(0), "the condition")
    if cond.tensor.dtype != "bool":
        raise ctx.error(f"the condition must be a bool, got {cond.tensor.dtype}")
    branches = ("then_branch", "else_branch")
    if cond.const is not None:  # known: the branch taken is all there is
        taken, outputs = yield ctx.subgraph(branches[0 if bool(cond.const) else 1], [])
        ctx.block.builder.bindings.extend(taken.builder.bindings)
        return outputs
    then = yield ctx.subgraph(branches[0], [])
    other = yield ctx.subgraph(branches[1], [])
    return joined_if(
        ctx.block, cond, then, other, ctx.error, ctx.name, _names(ctx), unwrap_one=True
    )


def _names(ctx: NodeContext) -> list[str]:
    return [identifier(o or "x", "v") for o in ctx.node.output]


# ------------------------------------------------------------------ Loop
@converter("Loop", versions=LATER)
def _loop(ctx: NodeContext) -> Computation[list[Value]]:
    graph = ctx.graph("body")
    inits = [ctx.input(i) for i in range(2, len(ctx.inputs))]
    carried = len(inits)
    if len(graph.input) != 2 + carried:
        raise ctx.error(f"its body takes {len(graph.input)} inputs, not 2 + {carried}")
    scans = len(graph.output) - 1 - carried
    if scans < 0:
        raise ctx.error(f"its body gives {len(graph.output)} outputs, fewer than 1 + {carried}")
    trip = ctx.optional(0)
    trip = None if trip is None else as_scalar(ctx, trip, "the trip count M")
    go = ctx.optional(1)
    go = None if go is None else as_scalar(ctx, go, "the condition")
    limit = None if trip is None or trip.const is None else int(trip.const)
    starts_true = go is None or (go.const is not None and bool(go.const))
    steady = starts_true and _passes_true(graph)
    if limit is not None and steady and limit <= FOREACH_LIMIT:
        return (yield _foreach_loop(ctx, graph, max(limit, 0), inits, scans))
    return (yield _while_loop(ctx, graph, trip, limit, go, inits, scans))


def _passes_true(graph: Any) -> bool:
    """Whether the body's condition output is its condition input passed
    on (through ``Identity`` nodes) or a true constant: a loop started
    with a true condition then never stops before its trip count."""
    made = {out: node for node in graph.node for out in node.output}
    initial = {t.name: t for t in graph.initializer}
    name = graph.output[0].name
    for _ in range(len(graph.node) + 1):
        if name == graph.input[1].name:
            return True
        if name in initial:
            from onnx import numpy_helper  # lazy: onnx loads when a model is read

            value = numpy_helper.to_array(initial[name])
            return value.size == 1 and bool(value.reshape(()))
        node = made.get(name)
        if node is None:
            return False
        if node.op_type == "Identity":
            name = node.input[0]
            continue
        if node.op_type == "Constant":
            from onnx import helper, numpy_helper  # lazy: onnx loads when a model is read

            attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
            if "value" not in attrs:
                return False
            value = numpy_helper.to_array(attrs["value"])
            return value.size == 1 and value.dtype == np.bool_ and bool(value.reshape(()))
        return False
    return False


def _foreach_loop(
    ctx: NodeContext, graph: Any, trips: int, inits: list[Value], scans: int
) -> Computation[list[Value]]:
    types = [v.type for v in inits]
    for _ in range(MAX_ROUNDS):
        index = Var("iteration", TensorType((), "int64"), span=ctx.span)
        state = Var("state", TupleType(tuple(types)), span=ctx.span)
        block = ctx.block.child()
        fields = block.fields(
            Value(state, state.type_annotation), len(types), _input_names(graph, 2)
        )
        params = [Value(index, index.type_annotation), scalar(True, "bool"), *fields]
        inner, outputs = yield ctx.subgraph("body", params)
        block.builder.bindings.extend(inner.builder.bindings)
        joined = settled_types(ctx.error, types, outputs[1 : 1 + len(types)])
        if joined is None:
            break
        types = joined
    else:
        raise ctx.error("the types of its carried values do not settle")
    results = [block.widen(v, t) for v, t in zip(outputs[1 : 1 + len(types)], types, strict=True)]
    per_step = outputs[1 + len(types) :]
    xs = constant(np.arange(trips, dtype=np.int64))
    loop = emit_foreach(
        ctx.block, (index, state, block), per_step, results, xs, trips, inits, types, ctx.name
    )
    return _loop_outputs(ctx, loop, len(types), scans)


def _loop_outputs(
    ctx: NodeContext, loop: Value, carried: int, scans: int, first: int = 0
) -> list[Value]:
    block = ctx.block
    outs, finals = block.fields(loop, 2, ["outs", "finals"])
    values = [block.get(finals, first + k, "final") for k in range(carried)]
    return values + [block.get(outs, k, "scan") for k in range(scans)]


def _input_names(graph: Any, start: int) -> list[str]:
    return [identifier(i.name, "v") for i in graph.input[start:]]


def _while_loop(
    ctx: NodeContext,
    graph: Any,
    trip: Value | None,
    limit: int | None,
    go: Value | None,
    inits: list[Value],
    scans: int,
) -> Computation[list[Value]]:
    i64, boolean = TensorType((), "int64"), TensorType((), "bool")
    types = [v.type for v in inits]
    for _ in range(MAX_ROUNDS):
        state = Var("state", TupleType((i64, boolean, *types)), span=ctx.span)
        block = ctx.block.child()
        names = ["iteration", "cond", *_input_names(graph, 2)]
        fields = block.fields(Value(state, state.type_annotation), 2 + len(types), names)
        inner, outputs = yield ctx.subgraph("body", fields)
        block.builder.bindings.extend(inner.builder.bindings)
        joined = settled_types(ctx.error, types, outputs[1 : 1 + len(types)])
        if joined is None:
            break
        types = joined
    else:
        raise ctx.error("the types of its carried values do not settle")
    state_type = TupleType((i64, boolean, *types))
    next_index = block.op("add", fields[0], scalar(1, "int64"), name_hint="next")
    next_go = as_scalar_in(block, ctx, outputs[0])
    results = [block.widen(v, t) for v, t in zip(outputs[1 : 1 + len(types)], types, strict=True)]
    per_step = outputs[1 + len(types) :]
    new_state = Tuple(tuple(v.expr for v in [next_index, next_go, *results]), span=ctx.span)
    out_expr = Tuple(tuple(v.expr for v in per_step), span=ctx.span)
    step = Function(
        (state,), block.finish(Tuple((out_expr, new_state), span=ctx.span)), span=ctx.span
    )
    # the condition: still going, and (with a trip count known only at run
    # time) fewer iterations than it
    s = Var("state", state_type, span=ctx.span)
    test = ctx.block.child()
    keep = test.get(Value(s, state_type), 1, "go")
    if trip is not None and limit is None:
        count = test.get(Value(s, state_type), 0, "iteration")
        below = test.op(
            "less",
            count,
            trip if trip.tensor.dtype == "int64" else test.op("cast", trip, dtype="int64"),
        )
        keep = test.op("logical_and", keep, below)
    cond = Function((s,), test.finish(keep.expr), span=ctx.span)
    start = scalar(True, "bool") if go is None else go
    init = ctx.block.tuple(
        [
            scalar(0, "int64"),
            start,
            *(ctx.block.widen(v, t) for v, t in zip(inits, types, strict=True)),
        ],
        "init",
    )
    stacked = TupleType(tuple(TensorType((ANY, *v.tensor.shape), v.tensor.dtype) for v in per_step))
    attrs = {"max_iterations": max(limit, 0)} if limit is not None else {}
    call = ctx.block.builder.call_op("cf.while_loop", cond, step, init.expr, **attrs)
    loop = ctx.block.emit(call, TupleType((stacked, state_type)), ctx.name)
    return _loop_outputs(ctx, loop, len(types), scans, first=2)


def as_scalar_in(block: Block, ctx: NodeContext, value: Value) -> Value:
    if not value.is_tensor or value.tensor.dtype != "bool":
        raise ctx.error("its body's condition output must be a bool")
    if value.tensor.ndim == 0:
        return value
    return block.op("reshape", value, newshape=[])


# ------------------------------------------------------------------ Scan
@converter("Scan", versions=(9, 11, 16, 19, 21, 23, 24, 25))
def _scan(ctx: NodeContext) -> Computation[list[Value]]:
    graph = ctx.graph("body")
    count = int(ctx.attrs["num_scan_inputs"])
    values = [ctx.input(i) for i in range(len(ctx.inputs))]
    inits, sequences = values[: len(values) - count], values[len(values) - count :]
    states = len(inits)
    outs = len(graph.output) - states
    in_axes = _listed(ctx, "scan_input_axes", count)
    in_reverse = _listed(ctx, "scan_input_directions", count)
    out_axes = _listed(ctx, "scan_output_axes", outs)
    out_reverse = _listed(ctx, "scan_output_directions", outs)
    xs = []
    for x, axis, backwards in zip(sequences, in_axes, in_reverse, strict=True):
        xs.append(_leading(ctx.block, ctx, x, axis, bool(backwards)))
    length = xs[0].tensor.shape[0]
    step_types = tuple(TensorType(x.tensor.shape[1:], x.tensor.dtype) for x in xs)
    types = [v.type for v in inits]
    for _ in range(MAX_ROUNDS):
        x_t = Var("x_t", TupleType(step_types), span=ctx.span)
        state = Var("state", TupleType(tuple(types)), span=ctx.span)
        block = ctx.block.child()
        names = _input_names(graph, 0)
        carried = block.fields(Value(state, state.type_annotation), states, names[:states])
        elements = block.fields(Value(x_t, x_t.type_annotation), count, names[states:])
        inner, outputs = yield ctx.subgraph("body", [*carried, *elements])
        block.builder.bindings.extend(inner.builder.bindings)
        joined = settled_types(ctx.error, types, outputs[:states])
        if joined is None:
            break
        types = joined
    else:
        raise ctx.error("the types of its states do not settle")
    results = [block.widen(v, t) for v, t in zip(outputs[:states], types, strict=True)]
    per_step = outputs[states:]
    seqs = ctx.block.tuple(xs, "xs")
    loop = emit_foreach(
        ctx.block, (x_t, state, block), per_step, results, seqs, length, inits, types, ctx.name
    )
    finals_and_outs = _loop_outputs(ctx, loop, states, outs)
    finals, stacks = finals_and_outs[:states], finals_and_outs[states:]
    placed = [
        _placed(ctx.block, s, axis, bool(backwards))
        for s, axis, backwards in zip(stacks, out_axes, out_reverse, strict=True)
    ]
    return finals + placed


def _listed(ctx: NodeContext, name: str, count: int) -> list[int]:
    given = ctx.attrs.get(name)
    values = [0] * count if given is None else [int(v) for v in given]
    if len(values) != count:
        raise ctx.error(f"{name} lists {len(values)} values, not {count}")
    return values


def _leading(block: Block, ctx: NodeContext, x: Value, axis: int, backwards: bool) -> Value:
    """``x`` with its scan axis first, reversed when scanned backwards."""
    rank = x.tensor.ndim
    axis = axis + rank if axis < 0 else axis
    if not 0 <= axis < rank:
        raise ctx.error(f"scan axis {axis} is out of range for a tensor of rank {rank}")
    if axis:
        perm = [axis] + [i for i in range(rank) if i != axis]
        x = block.op("transpose", x, axes=perm)
    return reverse_leading(block, x) if backwards else x


def _placed(block: Block, stacked: Value, axis: int, backwards: bool) -> Value:
    """Stacked outputs reversed (backwards), their step axis moved to ``axis``."""
    if backwards:
        stacked = reverse_leading(block, stacked)
    rank = stacked.tensor.ndim
    axis = axis + rank if axis < 0 else axis
    if axis == 0:
        return stacked
    perm = list(range(1, axis + 1)) + [0] + list(range(axis + 1, rank))
    return block.op("transpose", stacked, axes=perm)


def reverse_leading(block: Block, x: Value) -> Value:
    """``x[::-1]``."""
    return block.op(
        "strided_slice", x, begin=[-1], end=[-(2**63)], strides=[-1], axes=[0], name_hint="reversed"
    )
