"""Randomness and running statistics made explicit (common/effects.py).

- ``Dropout``: in training mode the output is ``random.dropout`` of a key
  drawn from a key cell (``seed``: a cell of its own), the mask the same
  key's Bernoulli draw (reproducible from the key); a training mode known
  only at run time is an ``if`` (only the branch taken draws); a ratio
  known only at run time is a uniform draw compared with ``1 - ratio``.
- ``BatchNormalization`` in training mode normalises with the batch's
  statistics (the population variance) and updates the running ones in
  ONNX's convention (``momentum`` weighs the old value); when the running
  statistics are constants of the model they live in a state cell
  ``(mean, var)`` that the node reads and writes, so that a model trains
  on from call to call.
- ``RandomNormal``, ``RandomUniform``, their ``Like`` forms, ``Bernoulli``
  and ``Multinomial`` (by the Gumbel-max trick) draw from key cells.

A draw needs a static shape (effir's samplers take it as an attribute),
except dropout with a constant ratio, which takes its input's shape.
"""

from __future__ import annotations

import numpy as np

from ....ir.expr import RefRead, RefWrite
from ....ir.types import TensorType, TupleType
from ...common.block import Block
from ...common.values import Value, constant
from ..graph import NodeContext
from ..registry import converter
from .elementwise import cast, dtype_of_attr, scalar

LATER = (22,)  # versions that only add element types effir does not have


def _seed(ctx: NodeContext) -> int | None:
    seed = ctx.attrs.get("seed")
    return None if seed is None else int(seed)


def _key(ctx: NodeContext, block: Block | None = None) -> Value:
    block = block or ctx.block
    cell = ctx.state.cells.key_cell(block, _seed(ctx), ctx.name)
    return ctx.state.cells.draw(block, cell)


def _static(ctx: NodeContext, t: TensorType, what: str) -> list[int]:
    if not all(isinstance(d, int) for d in t.shape):
        raise ctx.error(f"{what} must have a static shape to draw from, got {t.shape}")
    return [int(d) for d in t.shape]


def ones_like(block: Block, x: Value, dtype: str) -> Value:
    """True (or 1) in ``x``'s shape: ``where(x < x, ...)`` picks the constant
    everywhere (``x < x`` is false, NaN included), keeping ``x``'s symbolic
    dimensions in the type."""
    shape = x.tensor.shape
    if all(isinstance(d, int) for d in shape):
        return constant(np.ones(shape, dtype=dtype))
    never = block.op("less", x, x)
    one = constant(np.ones((), dtype=dtype))
    return block.op("where", never, one, one)


# ---------------------------------------------------------------- Dropout
@converter("Dropout", versions=(10, 12, 13, *LATER))
def _dropout(ctx: NodeContext) -> list[Value]:
    x = ctx.tensor(0)
    mask_wanted = ctx.wants(1)

    def identity(block: Block) -> list[Value]:
        return [x, ones_like(block, x, "bool")] if mask_wanted else [x]

    if ctx.version == 10:  # inference only: the identity
        return identity(ctx.block)
    ratio, training = ctx.optional(1), ctx.optional(2)
    if training is not None and training.tensor.ndim:
        training = ctx.block.op("reshape", training, newshape=[])
    if training is None or (training.const is not None and not bool(training.const)):
        return identity(ctx.block)
    if training.const is not None:
        return _train(ctx, ctx.block, x, ratio)
    # a run-time training mode: an if, only the taken branch draws
    train, plain = ctx.block.child(), ctx.block.child()
    trained, kept = _train(ctx, train, x, ratio), identity(plain)
    train_expr = train.finish(train.tuple(trained).expr)
    plain_expr = plain.finish(plain.tuple(kept).expr)
    types = TupleType(tuple(v.type for v in trained))
    both = ctx.block.if_(training, train_expr, plain_expr, types, ctx.name)
    return ctx.block.fields(both, len(trained), ["output", "mask"])


def _train(ctx: NodeContext, block: Block, x: Value, ratio: Value | None) -> list[Value]:
    """The training-mode output, and the mask when the node asks for it."""
    rate = 0.5 if ratio is None else (None if ratio.const is None else float(ratio.const))
    if rate is not None:
        if not 0.0 <= rate <= 1.0:
            raise ctx.error(f"the ratio must be in [0, 1], got {rate}")
        if rate == 0.0:
            return [x, ones_like(block, x, "bool")] if ctx.wants(1) else [x]
        key = _key(ctx, block)
        if not ctx.wants(1):
            return [block.op("random.dropout", x, key, rate=rate, name_hint=ctx.name)]
        # the mask too, from the one use of the key a key allows: the draw
        # of the ones (1 / keep where kept, as random.dropout scales), whose
        # nonzeros are the mask; the output is random.dropout's, bit for bit
        # (but for a one-element input, which random.dropout divides)
        scaled = block.op("random.dropout", ones_like(block, x, x.tensor.dtype), key, rate=rate)
        mask = block.op("not_equal", scaled, scalar(0, x.tensor.dtype), name_hint="mask")
        kept = block.op("multiply", x, scaled)
        return [block.op("where", mask, kept, scalar(0, x.tensor.dtype), name_hint=ctx.name), mask]
    shape = _static(ctx, x.tensor, "the input of a dropout with a run-time ratio")
    dtype = x.tensor.dtype
    key = _key(ctx, block)
    scalar_ratio = ratio if ratio.tensor.ndim == 0 else block.op("reshape", ratio, newshape=[])  # type: ignore[union-attr]
    scalar_ratio = (
        cast(ctx, scalar_ratio, dtype) if scalar_ratio.tensor.dtype != dtype else scalar_ratio
    )
    keep = block.op("subtract", scalar(1, dtype), scalar_ratio)
    drawn = block.op("random.uniform", key, shape=shape, dtype=dtype)
    mask = block.op("less", drawn, keep)
    y = block.op("where", mask, block.op("divide", x, keep), scalar(0, dtype), name_hint=ctx.name)
    return [y, mask] if ctx.wants(1) else [y]


# ---------------------------------------------------------- BatchNormalization
@converter("BatchNormalization", versions=(9, 14, 15))
def _batch_norm(ctx: NodeContext) -> list[Value]:
    x = ctx.tensor(0)
    dtype = x.tensor.dtype
    scale, bias, mean, var = (_as(ctx, ctx.tensor(i), dtype) for i in range(1, 5))
    epsilon = float(ctx.attrs.get("epsilon", 1e-5))
    if not ctx.attrs.get("training_mode", 0):
        if any(ctx.wants(i) for i in (1, 2)):
            raise ctx.error("its running statistics are outputs only in training mode")
        y = ctx.block.op("nn.batch_norm_infer", x, scale, bias, mean, var, axis=1, epsilon=epsilon)
        return [y]
    momentum = float(ctx.attrs.get("momentum", 0.9))
    block = ctx.block
    cell = None
    if mean.const is not None and var.const is not None:
        cell = ctx.state.cells.stats_cell(block, ctx.name, mean.const, var.const)
        stats = block.emit(
            RefRead(cell, span=block.span), TupleType((mean.type, var.type)), "stats"
        )
        mean, var = block.fields(stats, 2, ["running_mean", "running_var"])
    others = [i for i in range(x.tensor.ndim) if i != 1]
    batch_mean = block.op("mean", x, axis=others, name_hint="batch_mean")
    centred = block.op("subtract", x, _along(block, batch_mean, x.tensor.ndim))
    batch_var = block.op(
        "mean", block.op("multiply", centred, centred), axis=others, name_hint="batch_var"
    )
    y = block.op(
        "nn.batch_norm_infer", x, scale, bias, batch_mean, batch_var, axis=1, epsilon=epsilon
    )
    keep, take = scalar(momentum, dtype), scalar(1.0 - momentum, dtype)

    def moved(old: Value, new: Value) -> Value:
        return block.op("add", block.op("multiply", old, keep), block.op("multiply", new, take))

    new_mean, new_var = moved(mean, batch_mean), moved(var, batch_var)
    if cell is not None:
        pair = block.tuple([new_mean, new_var], "new_stats")
        block.emit(RefWrite(cell, pair.expr, span=block.span), TupleType(()), "_")
    return [y, new_mean, new_var]


def _as(ctx: NodeContext, value: Value, dtype: str) -> Value:
    return value if value.tensor.dtype == dtype else cast(ctx, value, dtype)


def _along(block: Block, vector: Value, rank: int) -> Value:
    """A per-channel vector shaped to broadcast along axis 1."""
    return block.op("reshape", vector, newshape=[1, -1] + [1] * (rank - 2)) if rank > 2 else vector


# ------------------------------------------------------------ random draws
def _attr_dtype(ctx: NodeContext, default: str) -> str:
    return dtype_of_attr(ctx, "dtype") if ctx.attrs.get("dtype") is not None else default


@converter("RandomNormal", "RandomUniform", versions=(1, *LATER))
def _random(ctx: NodeContext) -> list[Value]:
    shape = [int(d) for d in ctx.attrs["shape"]]
    return [_draw(ctx, shape, _attr_dtype(ctx, "float32"))]


@converter("RandomNormalLike", "RandomUniformLike", versions=(1, *LATER))
def _random_like(ctx: NodeContext) -> list[Value]:
    x = ctx.tensor(0)
    shape = _static(ctx, x.tensor, "its input")
    return [_draw(ctx, shape, _attr_dtype(ctx, x.tensor.dtype))]


def _draw(ctx: NodeContext, shape: list[int], dtype: str) -> Value:
    if not dtype.startswith("float"):
        raise ctx.error(f"it draws floats: its dtype must be a float dtype, got {dtype}")
    key = _key(ctx)
    block = ctx.block
    if ctx.node.op_type.startswith("RandomUniform"):
        low, high = float(ctx.attrs.get("low", 0.0)), float(ctx.attrs.get("high", 1.0))
        return block.op(
            "random.uniform", key, shape=shape, dtype=dtype, low=low, high=high, name_hint=ctx.name
        )
    normal = block.op("random.normal", key, shape=shape, dtype=dtype)
    mean, scale = float(ctx.attrs.get("mean", 0.0)), float(ctx.attrs.get("scale", 1.0))
    if scale != 1.0:
        normal = block.op("multiply", normal, scalar(scale, dtype))
    if mean != 0.0:
        normal = block.op("add", normal, scalar(mean, dtype))
    return normal


@converter("Bernoulli", versions=(15, *LATER))
def _bernoulli(ctx: NodeContext) -> list[Value]:
    p = ctx.tensor(0)
    shape = _static(ctx, p.tensor, "its input")
    drawn = ctx.block.op("random.uniform", _key(ctx), shape=shape, dtype=p.tensor.dtype)
    hits = ctx.block.op("less", drawn, p)  # true with probability p
    return [cast(ctx, hits, _attr_dtype(ctx, p.tensor.dtype))]


@converter("Multinomial", versions=(7, *LATER))
def _multinomial(ctx: NodeContext) -> list[Value]:
    """Gumbel-max: the argmax over classes of the logits plus Gumbel noise
    ``-log(-log(u))`` is a draw from the softmax of the logits."""
    logits = ctx.tensor(0)
    batch, classes = _static(ctx, logits.tensor, "its input")
    samples = int(ctx.attrs.get("sample_size", 1))
    dtype = logits.tensor.dtype
    block = ctx.block
    u = block.op("random.uniform", _key(ctx), shape=[batch, samples, classes], dtype=dtype)
    gumbel = block.op("negative", block.op("log", block.op("negative", block.op("log", u))))
    scores = block.op("add", block.op("expand_dims", logits, axis=1), gumbel)
    picked = block.op("argmax", scores, axis=[2], name_hint=ctx.name)
    return [cast(ctx, picked, _attr_dtype(ctx, "int32"))]
