"""Recurrent layers (Elman RNN, GRU, LSTM) as ``cf.foreach`` loops.

One direction of a layer is one ``cf.foreach`` over the time axis whose
step computes the gates of the input step and the hidden state, never an
unrolled chain: the loop's length stays symbolic, and the TVM backend
compiles a static step into one loop kernel (hoisting the input
projections of all steps into one product). What the importers share:

- ``Gates`` holds a direction's weights split per gate, outside the loop
  (a slice of a constant weight is computed once, not at every step);
- ``run_direction`` builds the loop: the state is ``(h)``, ``(h, c)``,
  plus the time index when sequences have lengths; a step at or past a
  row's length keeps the row's state and outputs zeros; a reverse
  direction runs over the reversed time axis (a row's steps past its
  length are then skipped first, so each row runs backwards from its own
  last step, as ONNX and cuDNN run it) and its outputs are reversed back.

The equations are ONNX's (Operators.md, RNN/GRU/LSTM), in the gate orders
it stores: GRU ``z, r, h``; LSTM ``i, o, f, c``, peepholes ``i, o, f``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from ...ir.expr import Call, Function, Tuple, Var
from ...ir.op import get_op
from ...ir.types import TensorType, TupleType
from .block import Block, TupleValue
from .values import Value, constant

Activation = Callable[[Block, Value], Value]

GATES = {"rnn": 1, "gru": 3, "lstm": 4}


@dataclass(frozen=True)
class Cell:
    """What a layer's step computes: its kind, hidden size, activations
    (RNN ``f``; GRU ``f, g``; LSTM ``f, g, h``), clip, and GRU's
    ``linear_before_reset``, LSTM's ``input_forget``."""

    kind: str
    hidden: int
    activations: tuple[Activation, ...]
    clip: float | None = None
    linear_before_reset: bool = False
    input_forget: bool = False


@dataclass(frozen=True)
class Gates:
    """One direction's weights, per gate: ``w[k]`` (hidden, input), ``r[k]``
    (hidden, hidden), the summed biases ``b[k]`` (hidden,) or None, GRU's
    recurrent bias of its candidate ``rb_h`` apart (it is inside the reset
    product when ``linear_before_reset``), LSTM's peepholes ``p`` (i, o, f)."""

    w: tuple[Value, ...]
    r: tuple[Value, ...]
    b: tuple[Value | None, ...]
    rb_h: Value | None = None
    p: tuple[Value, ...] | None = None


def split_gates(
    block: Block,
    cell: Cell,
    w: Value,
    r: Value,
    wb: Value | None,
    rb: Value | None,
    p: Value | None,
) -> Gates:
    """``w`` (gates * hidden, input), ``r`` (gates * hidden, hidden), the
    input and recurrent biases (gates * hidden,) and the peepholes (3 *
    hidden,) of one direction, split per gate."""
    count, hidden = GATES[cell.kind], cell.hidden

    def rows(value: Value | None, k: int) -> Value | None:
        if value is None:
            return None
        return block.op(
            "strided_slice", value, begin=[k * hidden], end=[(k + 1) * hidden], axes=[0]
        )

    ws = tuple(rows(w, k) for k in range(count))
    rs = tuple(rows(r, k) for k in range(count))
    biases: list[Value | None] = []
    rb_h = None
    for k in range(count):
        a, b = rows(wb, k), rows(rb, k)
        if cell.kind == "gru" and k == 2 and cell.linear_before_reset:
            rb_h, b = b, None
        biases.append(a if b is None else b if a is None else block.op("add", a, b))
    peep = None if p is None else tuple(rows(p, k) for k in range(3))  # type: ignore[misc]
    return Gates(ws, rs, tuple(biases), rb_h, peep)  # type: ignore[arg-type]


def run_direction(
    block: Block,
    cell: Cell,
    gates: Gates,
    xs: Value,
    h0: Value,
    c0: Value | None,
    lengths: Value | None,
    reverse: bool,
) -> tuple[Value, Value, Value | None]:
    """One direction over ``xs`` (time, batch, input): the per-step hidden
    states (time, batch, hidden), the last hidden state and (LSTM) the last
    cell state."""
    time = xs.tensor.shape[0]
    if reverse:
        xs = reversed_time(block, xs)
    h_type = h0.tensor
    state_types = [h_type] + ([c0.tensor] if c0 is not None else [])
    if lengths is not None:
        state_types.append(TensorType((), "int64"))
    x_t = Var("x_t", TensorType(xs.tensor.shape[1:], xs.tensor.dtype), span=block.span)
    state = Var("state", TupleType(tuple(state_types)), span=block.span)
    step = block.child()
    fields = step.fields(
        Value(state, state.type_annotation),
        len(state_types),
        ["h", "c", "t"][: len(state_types)] if c0 is not None else ["h", "t"][: len(state_types)],
    )
    h = fields[0]
    c = fields[1] if c0 is not None else None
    x = Value(x_t, x_t.type_annotation)
    new_h, new_c = _step(step, cell, gates, x, h, c)
    out = new_h
    new_state = [new_h] + ([new_c] if new_c is not None else [])
    if lengths is not None:
        t = fields[-1]
        alive = step.op("expand_dims", step.op("less", t, lengths), axis=1)
        zero = constant(np.zeros((), dtype=h_type.dtype))
        out = step.op("where", alive, new_h, zero)
        new_state = [
            step.op("where", alive, v, old)
            for v, old in zip(new_state, [h, c] if c is not None else [h], strict=False)
        ]
        delta = constant(np.asarray(-1 if reverse else 1, dtype=np.int64))
        new_state.append(step.op("add", t, delta))
    body = step.finish(
        Tuple((out.expr, Tuple(tuple(v.expr for v in new_state), span=block.span)), span=block.span)
    )
    fn = Function((x_t, state), body, span=block.span)
    init = [h0] + ([c0] if c0 is not None else [])
    if lengths is not None:
        init.append(_first_step(block, xs, reverse))
    init_value = block.tuple(init, "init")
    loop_type = TupleType(
        (TensorType((time, *h_type.shape), h_type.dtype), TupleType(tuple(state_types)))
    )
    loop = block.emit(
        Call(get_op("cf.foreach"), (fn, xs.expr, init_value.expr), span=block.span),
        loop_type,
        "layer",
    )
    ys, final = block.fields(loop, 2, ["ys", "final"])
    if reverse:
        ys = reversed_time(block, ys)
    last_h = block.get(final, 0, "h_last")
    last_c = block.get(final, 1, "c_last") if c0 is not None else None
    if lengths is not None:  # a row of no steps has zero states (onnxruntime's reading)
        some = block.op("expand_dims", block.op("greater", lengths, _i64(0)), axis=1)
        zero = constant(np.zeros((), dtype=h_type.dtype))
        last_h = block.op("where", some, last_h, zero, name_hint="h_last")
        if last_c is not None:
            last_c = block.op("where", some, last_c, zero, name_hint="c_last")
    return ys, last_h, last_c


def _i64(value: int) -> Value:
    return constant(np.asarray(value, dtype=np.int64))


def _first_step(block: Block, xs: Value, reverse: bool) -> Value:
    if not reverse:
        return constant(np.asarray(0, dtype=np.int64))
    time = xs.tensor.shape[0]
    if isinstance(time, int):
        return constant(np.asarray(time - 1, dtype=np.int64))
    shape = block.op("shape_of", xs, dtype="int64")
    length = block.op("take", shape, constant(np.asarray(0, dtype=np.int64)), axis=0)
    return block.op("subtract", length, constant(np.asarray(1, dtype=np.int64)))


def reversed_time(block: Block, x: Value) -> Value:
    """``x[::-1]`` along its time axis (the first)."""
    return block.op(
        "strided_slice", x, begin=[-1], end=[-(2**63)], strides=[-1], axes=[0], name_hint="reversed"
    )


def _step(
    step: Block, cell: Cell, gates: Gates, x: Value, h: Value, c: Value | None
) -> tuple[Value, Value | None]:
    op = step.op
    dtype = h.tensor.dtype

    def pre(k: int, hidden_input: Value | None = None) -> Value:
        """Gate ``k``'s pre-activation: x W_k^T + h R_k^T + b_k."""
        total = op("nn.dense", x, gates.w[k])
        if hidden_input is not None:
            total = op("add", total, op("nn.dense", hidden_input, gates.r[k]))
        if gates.b[k] is not None:
            total = op("add", total, gates.b[k])  # type: ignore[arg-type]
        return total

    def clipped(v: Value) -> Value:
        if cell.clip is None:
            return v
        bound = constant(np.asarray(cell.clip, dtype=dtype))
        low = constant(np.asarray(-cell.clip, dtype=dtype))
        return op("minimum", op("maximum", v, low), bound)

    def act(i: int, v: Value) -> Value:
        return cell.activations[i](step, clipped(v))

    one = constant(np.asarray(1, dtype=dtype))
    if cell.kind == "rnn":
        return act(0, pre(0, h)), None
    if cell.kind == "gru":
        z = act(0, pre(0, h))
        r = act(0, pre(1, h))
        if cell.linear_before_reset:
            recurrent = op("nn.dense", h, gates.r[2])
            if gates.rb_h is not None:
                recurrent = op("add", recurrent, gates.rb_h)
            candidate = act(1, op("add", pre(2), op("multiply", r, recurrent)))
        else:
            candidate = act(1, pre(2, op("multiply", r, h)))
        keep = op("multiply", z, h)
        return op("add", op("multiply", op("subtract", one, z), candidate), keep), None
    assert c is not None
    i_pre, f_pre = pre(0, h), pre(2, h)
    if gates.p is not None:
        i_pre = op("add", i_pre, op("multiply", gates.p[0], c))
        f_pre = op("add", f_pre, op("multiply", gates.p[2], c))
    i = act(0, i_pre)
    f = op("subtract", one, i) if cell.input_forget else act(0, f_pre)
    candidate = act(1, pre(3, h))
    new_c = op("add", op("multiply", f, c), op("multiply", i, candidate))
    o_pre = pre(1, h)
    if gates.p is not None:
        o_pre = op("add", o_pre, op("multiply", gates.p[1], new_c))
    o = act(0, o_pre)
    return op("multiply", o, act(2, new_c)), new_c


def zero_state(block: Block, xs: Value, hidden: int) -> Value:
    """Zeros (batch, hidden) for ``xs`` (time, batch, input): a constant
    when the batch is static; otherwise ``where`` of an all-false
    (batch, 1) mask (``x < x`` is false, NaN included) between zeros,
    which keeps the batch's symbolic dimension in its type."""
    batch = xs.tensor.shape[1]
    dtype = xs.tensor.dtype
    if isinstance(batch, int):
        return constant(np.zeros((batch, hidden), dtype=dtype))
    first = block.op("strided_slice", xs, begin=[0, 0], end=[1, 1], axes=[0, 2])
    column = block.op("squeeze", first, axis=[0])
    never = block.op("less", column, column)
    zeros = constant(np.zeros((1, hidden), dtype=dtype))
    return block.op("where", never, zeros, zeros, name_hint="h0")


def stack(block: Block, values: Sequence[Value], axis: int) -> Value:
    """The directions' results stacked along a new axis ``axis``."""
    if len(values) == 1:
        return block.op("expand_dims", values[0], axis=axis)
    return block.op("stack", TupleValue(tuple(values)), axis=axis)
