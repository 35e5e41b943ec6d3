"""Randomness on key cells (common/effects.py): ``dropout`` and
``native_dropout`` in training mode, ``bernoulli``, ``rand``, ``randn``
and their ``_like`` forms draw from a key drawn from the module's
``@rng`` cell, so a compiled call draws fresh values every time and the
same values from the same key (``effir.State(module, seed=...)``).
PyTorch's own generator cannot be reproduced: what matches is the
distribution (rate, range, moments), not the bits.

A draw needs a static shape (effir's samplers take it as an attribute),
but dropout (``random.dropout`` takes its input's) and ``bernoulli`` of a
constant probability (the nonzeros of a dropout of ones)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from ...common.block import Block
from ...common.values import Value, constant
from ..graph import NodeContext
from ..registry import CONVERTERS, converter, target_name
from .elementwise import cast, scalar
from .shape import filled_like


def key(ctx: NodeContext, block: Block | None = None) -> Value:
    """A fresh key from the shared ``@rng`` cell."""
    block = block or ctx.block
    cell = ctx.state.cells.key_cell(block, None, ctx.name)
    return ctx.state.cells.draw(block, cell)


def dropout(ctx: NodeContext, block: Block, x: Value, rate: float) -> Value:
    """Training-mode dropout of ``x`` at ``rate`` (kept values scaled by
    ``1 / (1 - rate)``, as torch scales them)."""
    if not 0.0 <= rate <= 1.0:
        raise ctx.error(f"the dropout probability must be in [0, 1], got {rate}")
    if rate == 0.0:
        return x
    return block.op("random.dropout", x, key(ctx, block), rate=rate, name_hint=ctx.name)


@converter("aten.dropout", "aten.native_dropout", "aten.feature_dropout")
def _dropout(ctx: NodeContext) -> Value | list[Value]:
    name = target_name(ctx.node.target)
    x = ctx.tensor(0, "input")
    rate = float(ctx.arg(1, "p", 0.5))
    train = ctx.arg(2, "train", True)
    if name == "aten.feature_dropout" and train:
        raise ctx.error("feature (channel) dropout in training mode is not supported")
    if not isinstance(train, bool):
        raise ctx.error("a training flag known only at run time is not supported")
    y = dropout(ctx, ctx.block, x, rate) if train else x
    if name != "aten.native_dropout":
        return y
    dtype = x.tensor.dtype
    mask = ctx.block.op("not_equal", y, scalar(0, dtype)) if train and rate > 0 else None
    return [y, mask if mask is not None else filled_like(ctx, x, True, "bool")]


def _static(ctx: NodeContext, shape: tuple, what: str) -> list[int]:
    if not all(isinstance(d, int) for d in shape):
        raise ctx.error(f"{what} must have a static shape to draw from, got {shape}")
    return [int(d) for d in shape]


@converter("aten.bernoulli")
def _bernoulli(ctx: NodeContext) -> Value:
    """True (1) with probability ``p``: ``p`` a number, or the input's
    elements (``torch.bernoulli(probs)``)."""
    x = ctx.tensor(0, "self")
    dtype = ctx.out_dtype()
    p = ctx.arg(1, "p")
    if isinstance(p, Value):
        raise ctx.error(
            "bernoulli with a tensor of probabilities beside its input is not supported"
        )
    block = ctx.block
    if p is None:  # the input holds the probabilities
        shape = _static(ctx, x.tensor.shape, "its input")
        drawn = block.op("random.uniform", key(ctx), shape=shape, dtype=x.tensor.dtype)
        hits = block.op("less", drawn, x)
    elif all(isinstance(d, int) for d in x.tensor.shape):
        shape = [int(d) for d in x.tensor.shape]
        hits = block.op("random.bernoulli", key(ctx), p=float(p), shape=shape)
    else:  # a symbolic shape: the nonzeros of a dropout of ones at rate 1 - p
        ones = filled_like(ctx, x, 1.0, "float32")
        kept = block.op("random.dropout", ones, key(ctx), rate=1.0 - float(p))
        hits = block.op("not_equal", kept, scalar(0, "float32"))
    return cast(ctx, hits, dtype)


RANDOM = {
    "aten.rand": "uniform",
    "aten.randn": "normal",
    "aten.rand_like": "uniform",
    "aten.randn_like": "normal",
}


@converter(*RANDOM)
def _random(ctx: NodeContext) -> Value:
    name = target_name(ctx.node.target)
    dtype = ctx.out_dtype()
    if not dtype.startswith("float"):
        raise ctx.error(f"it draws floats: its dtype must be a float dtype, got {dtype}")
    shape = _static(ctx, ctx.out_type().shape, "its result")
    sampler = "random." + RANDOM[name]
    return ctx.block.op(sampler, key(ctx), shape=shape, dtype=dtype, name_hint=ctx.name)


# ------------------------------------------------------------ side effects
@converter("aten._print")
def _print(ctx: NodeContext) -> None:
    """``torch.ops.aten._print(s)``: ``debug.print`` labelled ``s`` (of an
    empty tensor: effir prints tensors), ordered by the let chain, which
    state passing threads as the world token."""
    text = ctx.arg(0, "s")
    if not isinstance(text, str):
        raise ctx.error("it prints a string known when the program is exported")
    empty = constant(np.zeros((0,), dtype=np.float32))
    ctx.block.op("debug.print", empty, label=text, name_hint="printed")
    return None


@converter("higher_order.with_effects")
def _with_effects(ctx: NodeContext) -> list:
    """``with_effects(token, op, *args)``, torch's threading of an effect
    token through an operator with side effects: the operator converted
    as it stands (its order is the let chain's, which state passing
    threads as effir's world token); the token passed on as nothing."""
    op = ctx.node.args[1]
    fn = CONVERTERS.get(target_name(op))
    if fn is None:
        raise ctx.error(f"the operator {op} is not supported by effir's importer")
    result = fn(_applied(ctx, op))
    return [None, *(result if isinstance(result, list) else [result])]


def _applied(ctx: NodeContext, op: object) -> NodeContext:
    """``ctx`` for ``op`` applied to the arguments after the token and op."""
    node = SimpleNamespace(
        args=tuple(ctx.node.args[2:]),
        kwargs=dict(ctx.node.kwargs),
        target=op,
        name=ctx.node.name,
        meta=ctx.node.meta,
    )
    applied = NodeContext.__new__(NodeContext)
    for slot in NodeContext.__slots__:
        setattr(applied, slot, getattr(ctx, slot))
    applied.node = node
    return applied
