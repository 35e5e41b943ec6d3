"""Shape manipulation and tensor creation, including the shape-tensor
(``dyn.``) variants whose output shape comes from a tensor's values."""

import itertools
from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..ir.expr import Expr
from ..ir.node import Attrs
from ..ir.op import AttrSpec, register_op
from ..ir.types import ANY, Dim, TensorType, TupleType, Type
from ..ir.vjp import Args, DifferentiationError, Grads, VjpContext, defvjp, not_differentiable
from ..runtime.values import as_tensor
from .relations import (
    OpFailure,
    RelationError,
    allocation,
    check_dims,
    expect_dtype,
    expect_tensor,
    expect_tensors,
    is_static,
    merge_dim,
    normalize_axes,
    normalize_axis,
    numpy_rule,
    raise_at_run_time,
    same_dtype,
    shape_tensor_rank,
    show_dim,
    show_shape,
    type_rule,
    with_op_name,
)

register_op("reshape", 1, attrs=(AttrSpec("newshape", "ints"),), traits=("injective",))
register_op(
    "transpose", 1, attrs=(AttrSpec("axes", "ints", None, optional=True),), traits=("injective",)
)
register_op(
    "expand_dims",
    1,
    attrs=(AttrSpec("axis", "int"), AttrSpec("num_newaxis", "int", 1)),
    traits=("injective",),
)
register_op(
    "squeeze", 1, attrs=(AttrSpec("axis", "ints", None, optional=True),), traits=("injective",)
)
register_op(
    "concatenate",
    1,
    attrs=(AttrSpec("axis", "int", 0),),
    traits=("injective",),
    doc="concatenate a tuple of tensors",
)
register_op(
    "stack",
    1,
    attrs=(AttrSpec("axis", "int", 0),),
    traits=("injective",),
    doc="stack a tuple of tensors along a new axis",
)
register_op(
    "split",
    1,
    attrs=(AttrSpec("indices_or_sections", "int_or_ints"), AttrSpec("axis", "int", 0)),
    traits=("injective",),
    doc="split into a tuple of tensors",
)
register_op("broadcast_to", 1, attrs=(AttrSpec("shape", "ints"),), traits=("broadcast",))
register_op(
    "shape_of",
    1,
    attrs=(AttrSpec("dtype", "dtype", "int32"),),
    traits=("opaque",),
    doc="the shape of a tensor as a 1-d tensor",
)
# The shape-tensor variant: the new shape is a 1-d integer tensor argument.
register_op(
    "dyn.reshape",
    2,
    attrs=(AttrSpec("allowzero", "bool", False),),
    traits=("dynamic_shape",),
    doc="reshape(x, newshape_tensor); allowzero: its 0s are sizes (ONNX's Reshape)",
)


# ====================================================================== rules
# Type relations and numpy implementations, one section per operator. Every
# relation reads its arguments with ``expect_*`` (NotReady while unknown) and
# its RelationError messages are prefixed with the operator's name.
# Dimension arithmetic never guesses: a size that is not an int, nor exactly
# one symbol, becomes ``?`` and only the run-time value tells.


# -------------------------------------------------------------------- reshape
def _show_newshape(newshape: Sequence[int]) -> str:
    return "(" + ", ".join(str(d) for d in newshape) + ")"


def _special_values(newshape: Sequence[int], error: type[Exception]) -> list[Dim]:
    """``newshape`` checked: -1 (at most one) is inferred later; -2/-3/-4
    are not supported."""
    for d in newshape:
        if d < -1:
            raise error(f"special value {d} in newshape is not supported (only 0 and -1 are)")
    if list(newshape).count(-1) > 1:
        raise error(f"newshape {_show_newshape(newshape)} has more than one -1")
    return list(newshape)


def _copy_zeros(shape: Sequence[Dim], newshape: Sequence[int], error: type[Exception]) -> list[Dim]:
    """Relay's special values: 0 copies the input dimension at its position,
    -1 (at most one) is inferred later; -2/-3/-4 are not supported."""
    out: list[Dim] = []
    for i, d in enumerate(_special_values(newshape, error)):
        if d == 0:
            if i >= len(shape):
                raise error(
                    f"newshape {_show_newshape(newshape)} copies dimension {i} (0), "
                    f"but the input has rank {len(shape)}"
                )
            out.append(shape[i])
        else:
            out.append(d)
    return out


def _symbolic_size(dims: Sequence[Dim]) -> tuple[int, Counter[str], bool]:
    """A product of dimensions as (integer part, multiset of symbols, has ``?``)."""
    number, symbols, unknown = 1, Counter[str](), False
    for d in dims:
        if is_static(d):
            number *= d
        elif d == ANY:
            unknown = True
        else:
            symbols[d] += 1
    return number, symbols, unknown


def _infer_minus_one(shape: Sequence[Dim], known: Sequence[Dim], newshape: Sequence[int]) -> Dim:
    """The dimension -1 stands for: the input size divided by the known output
    dimensions, cancelling equal symbols. Static sizes that do not divide are
    an error; a remainder that is not an int or exactly one symbol is ``?``."""
    in_num, in_syms, in_any = _symbolic_size(shape)
    out_num, out_syms, out_any = _symbolic_size(known)
    static = not (in_syms or in_any or out_syms or out_any)
    if static:
        if out_num == 0 or in_num % out_num:
            raise RelationError(
                f"cannot reshape {in_num} elements into shape {_show_newshape(newshape)}"
            )
        return in_num // out_num
    if in_any or out_any or out_syms - in_syms:
        return ANY
    if out_num == 0 or in_num % out_num:
        return ANY  # a symbol may be 0: no error, decided at run time
    rest, number = in_syms - out_syms, in_num // out_num
    if not rest:
        return number
    if number == 1 and sum(rest.values()) == 1:
        return next(iter(rest))
    return ANY


@type_rule("reshape")
@with_op_name("reshape")
def _reshape_rel(args: tuple[Type, ...], attrs: Attrs) -> Type:
    x = expect_tensor(args[0])
    newshape = attrs["newshape"]
    out = _copy_zeros(x.shape, newshape, RelationError)
    if -1 in out:
        at = out.index(-1)
        out[at] = _infer_minus_one(x.shape, out[:at] + out[at + 1 :], newshape)
    elif all(is_static(d) for d in x.shape):
        # Only fully static sizes can be told apart: a symbol may be 0.
        in_num, out_num = _symbolic_size(x.shape)[0], _symbolic_size(out)[0]
        if in_num != out_num:
            raise RelationError(
                f"cannot reshape {in_num} elements into shape {_show_newshape(newshape)}"
            )
    return TensorType(tuple(out), x.dtype)


def _reshape_value(x: np.ndarray, newshape: Sequence[int], allowzero: bool = False) -> np.ndarray:
    """The run-time reshape shared by ``reshape`` and ``dyn.reshape``
    (``allowzero``: a 0 is a size, as in a shape read at run time from an
    empty tensor, not a copy of the input's dimension)."""
    if allowzero:
        target: list[Dim] = _special_values(newshape, OpFailure)
    else:
        target = _copy_zeros(x.shape, newshape, OpFailure)
    try:
        return np.reshape(x, tuple(int(d) for d in target))
    except ValueError:
        raise OpFailure(
            f"cannot reshape {x.size} elements into shape {_show_newshape(newshape)}"
        ) from None


@numpy_rule("reshape")
def _reshape_np(args: tuple[Any, ...], attrs: Attrs) -> np.ndarray:
    return _reshape_value(as_tensor(args[0]), attrs["newshape"])


# ------------------------------------------------------------------ transpose
def _permutation(axes: Sequence[int] | None, rank: int) -> tuple[int, ...]:
    if axes is None:
        return tuple(reversed(range(rank)))
    if len(axes) != rank:
        raise RelationError(f"axes {list(axes)} must list each of the {rank} axes once")
    perm = tuple(normalize_axis(a, rank) for a in axes)
    if sorted(perm) != list(range(rank)):
        raise RelationError(f"axes {list(axes)} are not a permutation of the {rank} axes")
    return perm


@type_rule("transpose")
@with_op_name("transpose")
def _transpose_rel(args: tuple[Type, ...], attrs: Attrs) -> Type:
    x = expect_tensor(args[0])
    perm = _permutation(attrs["axes"], x.ndim)
    return TensorType(tuple(x.shape[a] for a in perm), x.dtype)


@numpy_rule("transpose")
def _transpose_np(args: tuple[Any, ...], attrs: Attrs) -> np.ndarray:
    x = as_tensor(args[0])
    try:
        perm = _permutation(attrs["axes"], x.ndim)
    except RelationError as err:
        raise_at_run_time(err)
    return np.transpose(x, perm)


# ---------------------------------------------------------------- expand_dims
def _expand_axis(attrs: Attrs, rank: int) -> tuple[int, int]:
    axis, count = attrs["axis"], attrs["num_newaxis"]
    if count < 0:
        raise RelationError(f"num_newaxis must be >= 0, got {count}")
    if not -rank - 1 <= axis <= rank:
        raise RelationError(
            f"axis {axis} is out of range [{-rank - 1}, {rank}] for a tensor of rank {rank}"
        )
    return (axis + rank + 1 if axis < 0 else axis), count


@type_rule("expand_dims")
@with_op_name("expand_dims")
def _expand_dims_rel(args: tuple[Type, ...], attrs: Attrs) -> Type:
    x = expect_tensor(args[0])
    axis, count = _expand_axis(attrs, x.ndim)
    return TensorType(x.shape[:axis] + (1,) * count + x.shape[axis:], x.dtype)


@numpy_rule("expand_dims")
def _expand_dims_np(args: tuple[Any, ...], attrs: Attrs) -> np.ndarray:
    x = as_tensor(args[0])
    try:
        axis, count = _expand_axis(attrs, x.ndim)
    except RelationError as err:
        raise_at_run_time(err)
    return x.reshape(x.shape[:axis] + (1,) * count + x.shape[axis:])


# -------------------------------------------------------------------- squeeze
@type_rule("squeeze")
@with_op_name("squeeze")
def _squeeze_rel(args: tuple[Type, ...], attrs: Attrs) -> Type:
    x = expect_tensor(args[0])
    if attrs["axis"] is None:
        for i, d in enumerate(x.shape):
            if not is_static(d):
                raise RelationError(
                    f"dimension {i} of {show_shape(x.shape)} is {show_dim(d)}, not known to be 1; "
                    "give an explicit axis to squeeze it (or not)"
                )
        return TensorType(tuple(d for d in x.shape if d != 1), x.dtype)
    axes = normalize_axes(attrs["axis"], x.ndim)
    for a in axes:
        d = x.shape[a]
        if is_static(d) and d != 1:
            raise RelationError(f"cannot squeeze axis {a} of size {d}")
    return TensorType(tuple(d for i, d in enumerate(x.shape) if i not in axes), x.dtype)


@numpy_rule("squeeze")
def _squeeze_np(args: tuple[Any, ...], attrs: Attrs) -> np.ndarray:
    x = as_tensor(args[0])
    if attrs["axis"] is None:
        return np.squeeze(x)
    try:
        axes = normalize_axes(attrs["axis"], x.ndim)
    except RelationError as err:
        raise_at_run_time(err)
    for a in axes:
        if x.shape[a] != 1:
            raise OpFailure(f"cannot squeeze axis {a} of size {x.shape[a]}")
    return np.squeeze(x, axis=axes)


# -------------------------------------------------------- concatenate / stack
def _fields(args: tuple[Type, ...]) -> tuple[tuple[TensorType, ...], str, int]:
    """The tuple argument's tensors, their common dtype and rank."""
    fields = expect_tensors(args[0])
    if not fields:
        raise RelationError("the tuple of tensors is empty")
    dtype = same_dtype(fields, "the tensors")
    ranks = {f.ndim for f in fields}
    if len(ranks) > 1:
        shown = ", ".join(show_shape(f.shape) for f in fields)
        raise RelationError(f"the tensors must have the same rank, got shapes {shown}")
    return fields, dtype, fields[0].ndim


def _merged(fields: Sequence[TensorType], axis: int) -> Dim:
    merged = fields[0].shape[axis]
    for f in fields[1:]:
        merged = merge_dim(merged, f.shape[axis], f"sizes along axis {axis}")
    return merged


def _sum_dims(dims: Sequence[Dim]) -> Dim:
    """The concatenated size: exact when static, or when a single field's size
    is not static and all others are 0; ``?`` otherwise."""
    if all(is_static(d) for d in dims):
        return sum(dims)  # type: ignore[arg-type]
    dynamic = [d for d in dims if not is_static(d)]
    if len(dynamic) == 1 and all(d == 0 for d in dims if is_static(d)):
        return dynamic[0]
    return ANY


@type_rule("concatenate")
@with_op_name("concatenate")
def _concatenate_rel(args: tuple[Type, ...], attrs: Attrs) -> Type:
    fields, dtype, rank = _fields(args)
    if rank == 0:
        raise RelationError("cannot concatenate scalars (rank 0); use stack")
    axis = normalize_axis(attrs["axis"], rank)
    shape = [
        _sum_dims([f.shape[a] for f in fields]) if a == axis else _merged(fields, a)
        for a in range(rank)
    ]
    return TensorType(tuple(shape), dtype)


@numpy_rule("concatenate")
def _concatenate_np(args: tuple[Any, ...], attrs: Attrs) -> np.ndarray:
    arrays = [as_tensor(a) for a in args[0]]
    try:
        return np.concatenate(arrays, axis=attrs["axis"])
    except ValueError as err:
        shown = ", ".join(str(a.shape) for a in arrays)
        raise OpFailure(f"cannot concatenate shapes {shown}: {err}") from None


@type_rule("stack")
@with_op_name("stack")
def _stack_rel(args: tuple[Type, ...], attrs: Attrs) -> Type:
    fields, dtype, rank = _fields(args)
    axis = normalize_axis(attrs["axis"], rank + 1)
    shape = tuple(_merged(fields, a) for a in range(rank))
    return TensorType(shape[:axis] + (len(fields),) + shape[axis:], dtype)


@numpy_rule("stack")
def _stack_np(args: tuple[Any, ...], attrs: Attrs) -> np.ndarray:
    arrays = [as_tensor(a) for a in args[0]]
    try:
        return np.stack(arrays, axis=attrs["axis"])
    except ValueError as err:
        shown = ", ".join(str(a.shape) for a in arrays)
        raise OpFailure(f"cannot stack shapes {shown}: {err}") from None


# ---------------------------------------------------------------------- split
def _split_sizes(dim: Dim, spec: int | tuple[int, ...]) -> list[Dim]:
    """The pieces' sizes along the split axis (numpy.split semantics)."""
    if isinstance(spec, int):
        if spec <= 0:
            raise RelationError(f"the number of sections must be positive, got {spec}")
        if not is_static(dim):
            return [ANY] * spec
        if dim % spec:
            raise RelationError(
                f"cannot split a dimension of size {dim} into {spec} equal sections"
            )
        return [dim // spec] * spec
    bounds: list[int | None] = [0, *spec, None]
    sizes: list[Dim] = []
    for start, stop in itertools.pairwise(bounds):
        if is_static(dim):
            sizes.append(len(range(dim)[start:stop]))
        else:
            # numpy clips indices beyond a dimension of unknown size, so no
            # piece's size is known, except the whole dimension.
            sizes.append(dim if start == 0 and stop is None else ANY)
    return sizes


@type_rule("split")
@with_op_name("split")
def _split_rel(args: tuple[Type, ...], attrs: Attrs) -> Type:
    x = expect_tensor(args[0])
    if x.ndim == 0:
        raise RelationError("cannot split a scalar (rank 0)")
    axis = normalize_axis(attrs["axis"], x.ndim)
    sizes = _split_sizes(x.shape[axis], attrs["indices_or_sections"])
    return TupleType(
        tuple(TensorType(x.shape[:axis] + (s,) + x.shape[axis + 1 :], x.dtype) for s in sizes)
    )


@numpy_rule("split")
def _split_np(args: tuple[Any, ...], attrs: Attrs) -> tuple[np.ndarray, ...]:
    x = as_tensor(args[0])
    spec = attrs["indices_or_sections"]
    try:
        axis = normalize_axis(attrs["axis"], x.ndim)
    except RelationError as err:
        raise_at_run_time(err)
    if isinstance(spec, int) and (spec <= 0 or x.shape[axis] % spec):
        raise OpFailure(
            f"cannot split a dimension of size {x.shape[axis]} into {spec} equal sections"
        )
    return tuple(np.split(x, spec if isinstance(spec, int) else list(spec), axis=axis))


# --------------------------------------------------------------- broadcast_to
@type_rule("broadcast_to")
@with_op_name("broadcast_to")
def _broadcast_to_rel(args: tuple[Type, ...], attrs: Attrs) -> Type:
    x = expect_tensor(args[0])
    shape = check_dims(attrs["shape"])
    if x.ndim > len(shape):
        raise RelationError(
            f"cannot broadcast {show_shape(x.shape)} to the smaller rank of {show_shape(shape)}"
        )
    padded = (1,) * (len(shape) - x.ndim) + x.shape
    for d, t in zip(padded, shape, strict=True):
        if not (d == t or d == 1 or d == ANY):
            raise RelationError(f"cannot broadcast {show_shape(x.shape)} to {show_shape(shape)}")
    return TensorType(shape, x.dtype)


@numpy_rule("broadcast_to")
def _broadcast_to_np(args: tuple[Any, ...], attrs: Attrs) -> np.ndarray:
    x = as_tensor(args[0])
    try:
        # A copy: broadcast_to's view is read-only and aliases its elements.
        shape = allocation(attrs["shape"], x.dtype)
        return np.array(np.broadcast_to(x, shape))
    except ValueError:
        raise OpFailure(f"cannot broadcast {x.shape} to {tuple(attrs['shape'])}") from None


# ------------------------------------------------------------------- shape_of
@type_rule("shape_of")
@with_op_name("shape_of")
def _shape_of_rel(args: tuple[Type, ...], attrs: Attrs) -> Type:
    x = expect_tensor(args[0])
    result = TensorType((x.ndim,), attrs["dtype"])
    expect_dtype(result, "iu", "the result")
    return result


@numpy_rule("shape_of")
def _shape_of_np(args: tuple[Any, ...], attrs: Attrs) -> np.ndarray:
    return np.array(as_tensor(args[0]).shape, dtype=attrs["dtype"])


# ---------------------------------------------------------------- dyn.reshape
@type_rule("dyn.reshape")
@with_op_name("dyn.reshape")
def _dyn_reshape_rel(args: tuple[Type, ...], attrs: Attrs) -> Type:
    x = expect_tensor(args[0])
    rank = shape_tensor_rank(args[1], "the new shape")
    return TensorType((ANY,) * rank, x.dtype)


@numpy_rule("dyn.reshape")
def _dyn_reshape_np(args: tuple[Any, ...], attrs: Attrs) -> np.ndarray:
    newshape = tuple(int(v) for v in as_tensor(args[1]).reshape(-1))
    return _reshape_value(as_tensor(args[0]), newshape, allowzero=bool(attrs["allowzero"]))


# ======================================================================= vjp
# The backward of a shape operator moves the cotangent back where each
# element came from: the inverse permutation, the inverse reshape, a split
# for a concatenation, a scatter for a gather (``scatter_add``, ``strided_set``).
# Integer and bool data have no cotangent.
@defvjp("reshape")
def _reshape_vjp(ctx: VjpContext, args: Args, attrs: Attrs, out: Expr, ct: Expr) -> Grads:
    return (ctx.reshape_like(ct, args[0]) if ctx.is_float(args[0]) else None,)


@defvjp("dyn.reshape")
def _dyn_reshape_vjp(ctx: VjpContext, args: Args, attrs: Attrs, out: Expr, ct: Expr) -> Grads:
    return (ctx.reshape_like(ct, args[0]) if ctx.is_float(args[0]) else None, None)


@defvjp("transpose")
def _transpose_vjp(ctx: VjpContext, args: Args, attrs: Attrs, out: Expr, ct: Expr) -> Grads:
    (x,) = args
    if not ctx.is_float(x):
        return (None,)
    perm = _permutation(attrs["axes"], ctx.tensor_type(x).ndim)
    inverse = [0] * len(perm)
    for position, axis in enumerate(perm):
        inverse[axis] = position
    return (ctx.op("transpose", ct, axes=inverse),)


@defvjp("expand_dims")
def _expand_dims_vjp(ctx: VjpContext, args: Args, attrs: Attrs, out: Expr, ct: Expr) -> Grads:
    (x,) = args
    if not ctx.is_float(x):
        return (None,)
    axis, count = _expand_axis(attrs, ctx.tensor_type(x).ndim)
    if count == 0:
        return (ct,)
    return (ctx.op("squeeze", ct, axis=list(range(axis, axis + count))),)


@defvjp("squeeze")
def _squeeze_vjp(ctx: VjpContext, args: Args, attrs: Attrs, out: Expr, ct: Expr) -> Grads:
    (x,) = args
    if not ctx.is_float(x):
        return (None,)
    shape = ctx.tensor_type(x).shape
    if attrs["axis"] is None:
        axes: Sequence[int] = [i for i, d in enumerate(shape) if d == 1]
    else:
        axes = normalize_axes(attrs["axis"], len(shape))
    return (ctx.restore_axes(ct, axes),)


@defvjp("broadcast_to")
def _broadcast_to_vjp(ctx: VjpContext, args: Args, attrs: Attrs, out: Expr, ct: Expr) -> Grads:
    (x,) = args
    if not ctx.is_float(x):
        return (None,)
    return (ctx.unbroadcast(ct, ctx.tensor_type(out), x),)


def _tuple_fields(ctx: VjpContext, atom: Expr) -> tuple[Type, ...]:
    ty = ctx.type_of(atom)
    if not isinstance(ty, TupleType):
        raise DifferentiationError(f"expected a tuple, got {type(ty).__name__}", ctx.span)
    return ty.fields


@defvjp("concatenate")
def _concatenate_vjp(ctx: VjpContext, args: Args, attrs: Attrs, out: Expr, ct: Expr) -> Grads:
    """A split at the inputs' boundaries: a ``split`` where they are static
    (every input's size along the axis but the last one's), else each
    input's rows taken (``take``) at offsets read at run time."""
    (xs,) = args
    if not ctx.is_float(out):
        return (None,)
    fields = _tuple_fields(ctx, xs)
    rank = len(expect_tensor(fields[0]).shape)
    axis = normalize_axis(attrs["axis"], rank)
    sizes = [expect_tensor(f).shape[axis] for f in fields]
    if not all(is_static(size) for size in sizes[:-1]):
        return (ctx.tuple(_concatenate_pieces(ctx, xs, fields, axis, ct)),)
    bounds = list(itertools.accumulate(int(size) for size in sizes[:-1]))
    pieces = ctx.op("split", ct, indices_or_sections=bounds, axis=axis)
    return (ctx.tuple([ctx.get(pieces, i) for i in range(len(fields))]),)


def _concatenate_pieces(
    ctx: VjpContext, xs: Expr, fields: Sequence[Type], axis: int, ct: Expr
) -> list[Expr]:
    """The cotangent of each input of a concatenation along ``axis`` whose
    sizes there are known only at run time: ``take(ct, offset + iota(size))``,
    the positions ``iota(size)`` being the rows ``argwhere`` finds in ``size``
    ones. (Each piece has a ``?`` along ``axis``; the differentiator restores
    the input's type.)"""
    offset: Expr = ctx.const(0, "int32")
    grads = []
    for i, f in enumerate(fields):
        size = expect_tensor(f).shape[axis]
        x = ctx.get(xs, i)
        if is_static(size):
            count: Expr = ctx.const(int(size), "int32")
            length = ctx.const([int(size)], "int64")
        else:
            dims = ctx.op("shape_of", x, dtype="int64")
            length = ctx.op("strided_slice", dims, begin=[axis], end=[axis + 1])
            count = ctx.op("cast", ctx.op("reshape", length, newshape=[]), dtype="int32")
        rows = ctx.op("argwhere", ctx.op("dyn.ones", length, dtype="bool"))
        positions = ctx.op("reshape", rows, newshape=[-1])
        index = ctx.op("add", positions, offset)
        grads.append(ctx.op("take", ct, index, axis=axis, mode="fast"))
        offset = ctx.op("add", offset, count)
    return grads


@defvjp("stack")
def _stack_vjp(ctx: VjpContext, args: Args, attrs: Attrs, out: Expr, ct: Expr) -> Grads:
    (xs,) = args
    if not ctx.is_float(out):
        return (None,)
    fields = _tuple_fields(ctx, xs)
    axis = normalize_axis(attrs["axis"], ctx.tensor_type(out).ndim)
    pieces = ctx.op("split", ct, indices_or_sections=len(fields), axis=axis)
    grads = [ctx.op("squeeze", ctx.get(pieces, i), axis=[axis]) for i in range(len(fields))]
    return (ctx.tuple(grads),)


@defvjp("split")
def _split_vjp(ctx: VjpContext, args: Args, attrs: Attrs, out: Expr, ct: Any) -> Grads:
    """The pieces' cotangents concatenated back, zeros for the pieces that
    have none."""
    (x,) = args
    if not ctx.is_float(x):
        return (None,)
    fields = _tuple_fields(ctx, out)
    pieces = [
        c if c is not None else ctx.zeros_of(expect_tensor(f), ctx.get(out, i))
        for i, (c, f) in enumerate(zip(ct, fields, strict=True))
    ]
    return (ctx.op("concatenate", ctx.tuple(pieces), axis=attrs["axis"]),)


not_differentiable("shape_of")  # sizes are integers
