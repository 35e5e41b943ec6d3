"""``aten.gru``, ``aten.lstm``, ``aten.rnn_tanh``, ``aten.rnn_relu``
(``nn.GRU``, ``nn.LSTM``, ``nn.RNN``) as loops, read before any
decomposition: each layer and direction one ``cf.foreach`` over the time
axis (common/recurrent.py), never unrolled, and in training mode the
dropout between layers (which ``run_decompositions()`` drops) a
``random.dropout`` of a key from the ``@rng`` cell.

torch's equations are ONNX's with GRU's ``linear_before_reset``; its gate
orders differ (GRU ``r, z, n``; LSTM ``i, f, g, o``) and are permuted into
ONNX's (GRU ``z, r, h``; LSTM ``i, o, f, c``) after the split. The flat
weights come per layer, per direction: ``w_ih, w_hh[, b_ih, b_hh]``.
"""

from __future__ import annotations

import numpy as np

from ...common.block import Block
from ...common.recurrent import Cell, Gates, run_direction, split_gates, stack, zero_state
from ...common.values import Value, constant
from ..graph import NodeContext
from ..registry import converter, target_name
from .effects import dropout

KINDS = {
    "aten.gru": ("gru", ("sigmoid", "tanh")),
    "aten.lstm": ("lstm", ("sigmoid", "tanh", "tanh")),
    "aten.rnn_tanh": ("rnn", ("tanh",)),
    "aten.rnn_relu": ("rnn", ("nn.relu",)),
}
ORDER = {"gru": (1, 0, 2), "lstm": (0, 3, 1, 2), "rnn": (0,)}
"""torch's gate k is ONNX's ``ORDER[kind][k]``-th ... as indices: ONNX's
gate j is torch's ``ORDER[kind][j]``."""


def _activation(op: str):
    def apply(block: Block, x: Value) -> Value:
        return block.op(op, x)

    return apply


def _permuted(gates: Gates, order: tuple[int, ...]) -> Gates:
    return Gates(
        tuple(gates.w[k] for k in order),
        tuple(gates.r[k] for k in order),
        tuple(gates.b[k] for k in order),
        gates.rb_h,
        None,
    )


@converter(*KINDS)
def _recurrent(ctx: NodeContext) -> list[Value]:
    kind, acts = KINDS[target_name(ctx.node.target)]
    x = ctx.tensor(0, "input")
    hx = ctx.arg(1, "hx")
    params = list(ctx.arg(2, "params"))
    has_biases = bool(ctx.arg(3, "has_biases"))
    layers = int(ctx.arg(4, "num_layers"))
    rate = float(ctx.arg(5, "dropout"))
    train = bool(ctx.arg(6, "train"))
    bidirectional = bool(ctx.arg(7, "bidirectional"))
    batch_first = bool(ctx.arg(8, "batch_first"))
    if not isinstance(ctx.node.args[1], list | tuple) and kind == "lstm":
        raise ctx.error("an LSTM's initial state must be a pair (h0, c0)")
    h0, c0 = (hx[0], hx[1]) if kind == "lstm" else (hx, None)
    h0_raw = ctx.raw(1, "hx")
    h0_node = h0_raw[0] if kind == "lstm" else h0_raw
    c0_node = h0_raw[1] if kind == "lstm" else None
    directions = 2 if bidirectional else 1
    per = 4 if has_biases else 2
    if len(params) != layers * directions * per:
        raise ctx.error(f"it has {len(params)} weights, not {layers * directions * per}")
    hidden = params[1].tensor.shape[1]  # w_hh: (gates * hidden, hidden)
    block = ctx.block
    if batch_first:
        x = block.op("transpose", x, axes=[1, 0, 2])
    cell = Cell(kind, hidden, tuple(_activation(a) for a in acts), None, kind == "gru")
    hs, cs = [], []
    for layer in range(layers):
        ys = []
        for d in range(directions):
            index = layer * directions + d
            w_ih, w_hh, *biases = params[index * per : (index + 1) * per]
            b_ih, b_hh = (biases[0], biases[1]) if has_biases else (None, None)
            gates = _permuted(split_gates(block, cell, w_ih, w_hh, b_ih, b_hh, None), ORDER[kind])
            h = _initial(ctx, block, h0, h0_node, x, hidden, index)
            c = _initial(ctx, block, c0, c0_node, x, hidden, index) if kind == "lstm" else None
            y, last_h, last_c = run_direction(block, cell, gates, x, h, c, None, d == 1)
            ys.append(y)
            hs.append(last_h)
            if last_c is not None:
                cs.append(last_c)
        x = ys[0] if directions == 1 else block.op("concatenate", block.tuple(ys), axis=2)
        if train and rate > 0 and layer < layers - 1:
            x = dropout(ctx, block, x, rate)  # between layers, as torch's training mode
    y = block.op("transpose", x, axes=[1, 0, 2]) if batch_first else x
    h_n = stack(block, hs, 0)
    outputs = [y, h_n]
    if kind == "lstm":
        outputs.append(stack(block, cs, 0))
    return outputs


def _initial(
    ctx: NodeContext, block: Block, h0: Value, node: object, x: Value, hidden: int, index: int
) -> Value:
    """Layer-direction ``index``'s initial state: zeros when the graph makes
    them (``zeros`` or ``new_zeros``, torch's default), which keeps the
    batch's symbolic size; otherwise row ``index`` of ``h0``."""
    made = getattr(node, "target", None)
    if made is not None and target_name(made) in ("aten.zeros", "aten.new_zeros"):
        return zero_state(block, x, hidden)
    picked = block.op("take", h0, constant(np.asarray(index, dtype=np.int64)), axis=0)
    return picked
