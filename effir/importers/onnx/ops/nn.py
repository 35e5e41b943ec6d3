"""Products, reductions and normalisations: ``nn.matmul``, ``nn.softmax``,
the reductions, ``nn.layer_norm``, ``nn.batch_norm_infer`` (training-mode
batch normalisation, which updates state, is in effects.py)."""

from __future__ import annotations

from ...common.values import Value
from ..graph import NodeContext
from ..registry import converter
from .elementwise import cast, scalar
from .shape import axes_input, reshape, shape_of


@converter("MatMul", versions=(9, 13))
def _matmul(ctx: NodeContext) -> list[Value]:
    return [matmul(ctx, ctx.tensor(0), ctx.tensor(1))]


def matmul(ctx: NodeContext, a: Value, b: Value) -> Value:
    """numpy's ``matmul``: a vector is a matrix of one row (``a``) or one
    column (``b``) whose axis is then dropped."""
    block = ctx.block
    vector_a, vector_b = a.tensor.ndim == 1, b.tensor.ndim == 1
    if vector_a:
        a = block.op("expand_dims", a, axis=0)
    if vector_b:
        b = block.op("expand_dims", b, axis=1)
    out = block.op("nn.matmul", a, b, name_hint=ctx.name)
    rank = out.tensor.ndim
    drop = ([rank - 2] if vector_a else []) + ([rank - 1] if vector_b else [])
    return block.op("squeeze", out, axis=drop) if drop else out


@converter("Gemm", versions=(9, 11, 13))
def _gemm(ctx: NodeContext) -> list[Value]:
    a, b, c = ctx.tensor(0), ctx.tensor(1), ctx.optional(2)
    block = ctx.block
    dtype = a.tensor.dtype
    product = block.op(
        "nn.matmul",
        a,
        b,
        transpose_a=bool(ctx.attrs.get("transA", 0)),
        transpose_b=bool(ctx.attrs.get("transB", 0)),
    )
    alpha, beta = float(ctx.attrs.get("alpha", 1.0)), float(ctx.attrs.get("beta", 1.0))
    if alpha != 1.0:
        product = block.op("multiply", product, scalar(alpha, dtype))
    if c is None:
        return [product]
    if beta != 1.0:
        c = block.op("multiply", c, scalar(beta, dtype))
    return [block.op("add", product, c, name_hint=ctx.name)]


@converter("Softmax", "LogSoftmax", versions=(11, 13))
def _softmax(ctx: NodeContext) -> list[Value]:
    x = ctx.tensor(0)
    op = "nn.softmax" if ctx.node.op_type == "Softmax" else "nn.log_softmax"
    rank = x.tensor.ndim
    axis = int(ctx.attrs.get("axis", -1 if ctx.version >= 13 else 1))
    axis = axis + rank if axis < 0 else axis
    if ctx.version >= 13 or axis == rank - 1:
        return [ctx.block.op(op, x, axis=axis, name_hint=ctx.name)]
    # before 13: over the input flattened to 2-D at axis
    flat = reshape(ctx, x, [0] * axis + [-1]) if axis else reshape(ctx, x, [1, -1])
    out = ctx.block.op(op, flat, axis=-1)
    return [ctx.block.op("dyn.reshape", out, shape_of(ctx.block, x), name_hint=ctx.name)]


REDUCTIONS = {
    "ReduceSum": ("sum", (1, 11), 13),
    "ReduceMean": ("mean", (1, 11, 13), 18),
    "ReduceMax": ("max", (1, 11, 12, 13), 18),  # and 20: booleans
    "ReduceMin": ("min", (1, 11, 12, 13), 18),
    "ReduceProd": ("prod", (1, 11, 13), 18),
}


def _reduction(op: str, since: int):
    def convert(ctx: NodeContext) -> list[Value]:
        x = ctx.tensor(0)
        axes = axes_input(ctx, 1, "axes", since)
        keepdims = bool(ctx.attrs.get("keepdims", 1))
        if not axes:
            if ctx.attrs.get("noop_with_empty_axes", 0):
                return [x]
            axes = None
        return [ctx.block.op(op, x, axis=axes, keepdims=keepdims, name_hint=ctx.name)]

    return convert


for _onnx, (_op, _old, _since) in REDUCTIONS.items():
    _later = (20,) if _op in ("max", "min") else ()
    converter(_onnx, versions=(*_old, _since, *_later))(_reduction(_op, _since))


@converter("ArgMax", versions=(11, 12, 13))
def _argmax(ctx: NodeContext) -> list[Value]:
    x = ctx.tensor(0)
    out = ctx.block.op(
        "argmax",
        x,
        axis=[int(ctx.attrs.get("axis", 0))],
        keepdims=bool(ctx.attrs.get("keepdims", 1)),
        select_last_index=bool(ctx.attrs.get("select_last_index", 0)),
    )
    return [cast(ctx, out, "int64")]


@converter("LayerNormalization", versions=(17,))
def _layer_norm(ctx: NodeContext) -> list[Value]:
    x, gamma, beta = ctx.tensor(0), ctx.tensor(1), ctx.optional(2)
    rank = x.tensor.ndim
    axis = int(ctx.attrs.get("axis", -1))
    axis = axis + rank if axis < 0 else axis
    if axis != rank - 1:
        raise ctx.error("LayerNormalization over more than the last axis is not supported")
    if any(ctx.wants(i) for i in (1, 2)):
        raise ctx.error("LayerNormalization's Mean and InvStdDev outputs are not supported")
    center = beta is not None
    if beta is None:
        beta = gamma
    out = ctx.block.op(
        "nn.layer_norm",
        x,
        gamma,
        beta,
        axis=-1,
        epsilon=float(ctx.attrs.get("epsilon", 1e-5)),
        center=center,
        name_hint=ctx.name,
    )
    return [out]
