"""``RNN``, ``GRU`` and ``LSTM``: each direction a ``cf.foreach`` over the
time axis (common/recurrent.py), with every attribute: ``direction``
(forward, reverse, bidirectional), ``activations`` with their alphas and
betas, ``clip``, ``linear_before_reset`` (GRU), ``input_forget`` and
peepholes (LSTM), ``sequence_lens``, initial states, and ``layout`` (batch
first: the layer transposes in and out)."""

from __future__ import annotations

import numpy as np

from ...common.recurrent import Cell, run_direction, split_gates, stack, zero_state
from ...common.values import Value, constant
from ..graph import NodeContext
from ..registry import converter
from .elementwise import activation, cast

DEFAULTS = {"RNN": ("Tanh",), "GRU": ("Sigmoid", "Tanh"), "LSTM": ("Sigmoid", "Tanh", "Tanh")}
NEEDS_ALPHA = {"affine", "leakyrelu", "thresholdedrelu", "scaledtanh", "hardsigmoid", "elu"}
NEEDS_BETA = {"affine", "scaledtanh", "hardsigmoid"}
DIRECTIONS = {"forward": (False,), "reverse": (True,), "bidirectional": (False, True)}


def _activations(ctx: NodeContext, count: int, per_direction: int) -> list[tuple]:
    """Each direction's activations: ``(name, alpha, beta)``, alphas and
    betas taken in order by the activations that have them (as
    onnxruntime reads the lists)."""
    kind = ctx.node.op_type
    given = any(a.name == "activations" for a in ctx.node.attribute)
    # (the schema's default is the bidirectional RNN's list: not read)
    names = list(ctx.attrs["activations"]) if given else list(DEFAULTS[kind] * count)
    if len(names) != per_direction * count:
        raise ctx.error(f"it lists {len(names)} activations, not {per_direction * count}")
    alphas = list(ctx.attrs.get("activation_alpha") or [])
    betas = list(ctx.attrs.get("activation_beta") or [])
    out = []
    for name in names:
        key = name.lower()
        alpha = alphas.pop(0) if key in NEEDS_ALPHA and alphas else None
        beta = betas.pop(0) if key in NEEDS_BETA and betas else None
        out.append((name, alpha, beta))
    return out


def _activation_fn(ctx: NodeContext, name: str, alpha: float | None, beta: float | None):
    def apply(block, x):
        try:
            return activation(block, name, x, alpha, beta)
        except KeyError:
            raise ctx.error(f"the activation {name} is not supported") from None

    return apply


@converter("RNN", "GRU", "LSTM", versions=(7, 14, 22))
def _recurrent(ctx: NodeContext) -> list[Value]:
    kind = ctx.node.op_type
    block = ctx.block
    x, w, r = ctx.tensor(0), ctx.tensor(1), ctx.tensor(2)
    bias, lengths, h0 = ctx.optional(3), ctx.optional(4), ctx.optional(5)
    c0 = ctx.optional(6) if kind == "LSTM" else None
    peepholes = ctx.optional(7) if kind == "LSTM" else None
    direction = ctx.attrs.get("direction", "forward")
    if direction not in DIRECTIONS:
        raise ctx.error(f"unknown direction '{direction}'")
    reverses = DIRECTIONS[direction]
    hidden = (
        ctx.attrs.get("hidden_size") or w.tensor.shape[1] // {"RNN": 1, "GRU": 3, "LSTM": 4}[kind]
    )
    if not isinstance(hidden, int):
        raise ctx.error("hidden_size must be given or the weights' shape static")
    batch_first = bool(ctx.attrs.get("layout", 0))
    if batch_first:
        x = block.op("transpose", x, axes=[1, 0, 2])
        h0 = None if h0 is None else block.op("transpose", h0, axes=[1, 0, 2])
        c0 = None if c0 is None else block.op("transpose", c0, axes=[1, 0, 2])
    per = len(DEFAULTS[kind])
    acts = _activations(ctx, len(reverses), per)
    clip = ctx.attrs.get("clip")
    if lengths is not None:
        lengths = cast(ctx, lengths, "int64")
    count = 3 if kind == "GRU" else 4 if kind == "LSTM" else 1
    ys, hs, cs = [], [], []
    for d, reverse in enumerate(reverses):
        cell = Cell(
            kind.lower(),
            hidden,
            tuple(_activation_fn(ctx, *a) for a in acts[d * per : (d + 1) * per]),
            None if clip is None else float(clip),
            bool(ctx.attrs.get("linear_before_reset", 0)),
            bool(ctx.attrs.get("input_forget", 0)),
        )

        def direction_of(v: Value | None, d: int = d) -> Value | None:
            return None if v is None else block.op("take", v, _index(d), axis=0)

        b = direction_of(bias)
        wb = None if b is None else block.op("strided_slice", b, begin=[0], end=[count * hidden])
        rb = (
            None
            if b is None
            else block.op("strided_slice", b, begin=[count * hidden], end=[2 * count * hidden])
        )
        gates = split_gates(
            block, cell, direction_of(w), direction_of(r), wb, rb, direction_of(peepholes)
        )
        h = direction_of(h0) if h0 is not None else zero_state(block, x, hidden)
        c = None
        if kind == "LSTM":
            c = direction_of(c0) if c0 is not None else zero_state(block, x, hidden)
        y, last_h, last_c = run_direction(block, cell, gates, x, h, c, lengths, reverse)
        ys.append(y)
        hs.append(last_h)
        if last_c is not None:
            cs.append(last_c)
    y = stack(block, ys, 1)  # (time, directions, batch, hidden)
    y_h = stack(block, hs, 0)
    y_c = stack(block, cs, 0) if cs else None
    if batch_first:
        y = block.op("transpose", y, axes=[2, 0, 1, 3])
        y_h = block.op("transpose", y_h, axes=[1, 0, 2])
        y_c = None if y_c is None else block.op("transpose", y_c, axes=[1, 0, 2])
    return [y, y_h] + ([y_c] if y_c is not None else [])


def _index(d: int) -> Value:
    return constant(np.asarray(d, dtype=np.int64))
