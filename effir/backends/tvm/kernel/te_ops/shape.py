"""Shape and indexing rules: ``reshape``, ``transpose``, ``concatenate``,
``split``, slicing, ``take`` [RULE RUNTIME-CHECK], fills. The rules' reasons are
the package's docstring."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from tvm import te, tirx

from .....ir.node import Attrs
from .....ir.types import TupleType, Type
from .....ops.indexing import _slices
from .....ops.shape import _show_newshape
from ..checks import require
from ..rules import te_rule
from ..symbolic_shapes import sliced
from .common import (
    _const,
    _dtype,
    _kind,
    _map,
    _out,
    _shape,
    opaque,
    program_constant,
    static_shape,
)
from .elementwise import cast_value
from .wrapping import _sum_reducer, wrap_add, wrap_mul

PrimExpr = Any  # tvm.tirx.PrimExpr
Tensor = Any  # tvm.te.Tensor


def _ravel(index: Sequence[PrimExpr], shape: Sequence[int]) -> PrimExpr:
    flat: PrimExpr = _const(0, "int32")
    for i, d in zip(index, shape, strict=True):
        flat = flat * d + i
    return flat


def _unravel(flat: PrimExpr, shape: Sequence[int]) -> list[PrimExpr]:
    index = []
    for d in reversed(shape):
        index.append(tirx.indexmod(flat, d) if d != 1 else _const(0, "int32"))
        flat = tirx.indexdiv(flat, d)
    return index[::-1]


@te_rule("reshape")
def _reshape(args: tuple[Any, ...], attrs: Attrs, out_type: Type) -> Tensor:
    (x,) = args
    shape, _ = _out(out_type)
    in_shape = _shape(x)
    if all(isinstance(d, int) for d in in_shape) or not all(isinstance(d, int) for d in shape):
        # (a result of sizes known at run time: its element count is checked
        # before the kernel runs, kernel/symbolic_shapes.py [RULE SHAPE-SIZECHECK])
        return te.compute(
            shape, lambda *i: x(*_unravel(_ravel(i, shape), in_shape)), name="reshape"
        )
    # A symbolic input (after boolean_mask) may hold another number of
    # elements than the static result: checked at run time, as the
    # interpreter does [RULE RUNTIME-CHECK].
    size: PrimExpr = _const(1, "int64")
    for d in in_shape:
        size = size * tirx.Cast("int64", d) if not isinstance(d, int) else size * d
    wanted = int(np.prod(shape, dtype=np.int64))
    message = "cannot reshape {} elements into shape " + _show_newshape(attrs["newshape"])
    require(shape, lambda *i: size != wanted, message, lambda *i: size)
    zero = _const(0, _dtype(x))
    return te.compute(  # (nothing read where the check fails: x may be smaller)
        shape,
        lambda *i: tirx.if_then_else(
            size != wanted, zero, x(*_unravel(_ravel(i, shape), in_shape))
        ),
        name="reshape",
    )


@te_rule("transpose")
def _transpose(args: tuple[Any, ...], attrs: Attrs, out_type: Type) -> Tensor:
    (x,) = args
    rank = len(x.shape)
    axes = attrs["axes"]
    perm = [a % rank for a in axes] if axes is not None else list(reversed(range(rank)))
    shape, _ = _out(out_type)

    def body(*i: PrimExpr) -> PrimExpr:
        index: list[PrimExpr] = [0] * rank
        for out_axis, in_axis in enumerate(perm):
            index[in_axis] = i[out_axis]
        return x(*index)

    return te.compute(shape, body, name="transpose")


@te_rule("expand_dims")
def _expand_dims(args: tuple[Any, ...], attrs: Attrs, out_type: Type) -> Tensor:
    """New axes of size 1 at ``axis``; the other axes keep their order."""
    (x,) = args
    shape, _ = _out(out_type)
    rank = len(x.shape)
    axis = attrs["axis"] + rank + 1 if attrs["axis"] < 0 else attrs["axis"]
    kept = [d for d in range(len(shape)) if not axis <= d < axis + attrs["num_newaxis"]]
    return te.compute(shape, lambda *i: x(*(i[d] for d in kept)), name="expand_dims")


@te_rule("squeeze")
def _squeeze(args: tuple[Any, ...], attrs: Attrs, out_type: Type) -> Tensor:
    """The listed axes (every axis of size 1 when none is) removed."""
    (x,) = args
    shape, _ = _out(out_type)
    in_shape = _shape(x)
    if attrs["axis"] is None:
        squeezed = {d for d, n in enumerate(in_shape) if n == 1}
    else:
        squeezed = {a % len(in_shape) for a in attrs["axis"]}

    def body(*i: PrimExpr) -> PrimExpr:
        outs = iter(i)
        return x(*(0 if d in squeezed else next(outs) for d in range(len(in_shape))))

    return te.compute(shape, body, name="squeeze")


def _pick(
    position: PrimExpr,
    starts: Sequence[int],
    loads: Sequence[Callable[[PrimExpr], PrimExpr]],
) -> PrimExpr:
    """``loads[k](position - starts[k])`` for the last k with ``starts[k] <=
    position``: the lazy ``if_then_else`` reads only the chosen input."""
    value = loads[-1](position - starts[-1])
    for k in range(len(loads) - 2, -1, -1):
        value = tirx.if_then_else(position < starts[k + 1], loads[k](position - starts[k]), value)
    return value


def _at(x: Tensor, index: Sequence[PrimExpr], axis: int, position: PrimExpr) -> PrimExpr:
    full = list(index)
    full[axis] = position
    return x(*full)


@te_rule("concatenate")
def _concatenate(args: tuple[Any, ...], attrs: Attrs, out_type: Type) -> Tensor:
    # (an input empty at run time has a start equal to the next one's: never picked)
    fields = [f for f in args[0] if _shape(f)[attrs["axis"] % len(f.shape)] != 0]
    shape, _ = _out(out_type)
    axis = attrs["axis"] % len(shape)
    if not fields:  # every input is empty along the axis: so is the output
        return te.compute(shape, lambda *i: args[0][0](*i), name="concatenate")
    starts: list[Any] = [0]
    for f in fields[:-1]:
        starts.append(starts[-1] + _shape(f)[axis])

    def body(*i: PrimExpr) -> PrimExpr:
        loads = [lambda p, f=f: _at(f, i, axis, p) for f in fields]
        return _pick(i[axis], starts, loads)

    return te.compute(shape, body, name="concatenate")


@te_rule("stack")
def _stack(args: tuple[Any, ...], attrs: Attrs, out_type: Type) -> Tensor:
    fields = list(args[0])
    shape, _ = _out(out_type)
    axis = attrs["axis"] % len(shape)

    def body(*i: PrimExpr) -> PrimExpr:
        rest = i[:axis] + i[axis + 1 :]
        loads = [lambda p, f=f: f(*rest) for f in fields]
        return _pick(i[axis], list(range(len(fields))), loads)

    return te.compute(shape, body, name="stack")


def _sliced(
    x: Tensor, shape: Sequence[int], starts: dict[int, tuple[int, int]], name: str
) -> Tensor:
    """``x[start + i * step]`` along each axis of ``starts`` (axis -> (start, step))."""

    def body(*i: PrimExpr) -> PrimExpr:
        index = []
        for d, v in enumerate(i):
            if d in starts:
                start, step = starts[d]
                index.append(v * step + start if step != 1 else v + start)
            else:
                index.append(v)
        return x(*index)

    return te.compute(shape, body, name=name)


@te_rule("split")
def _split(args: tuple[Any, ...], attrs: Attrs, out_type: Type) -> tuple[Tensor, ...]:
    """numpy.split: piece k is ``x[bounds[k]:bounds[k + 1]]`` along the axis,
    with Python's clipping of the bounds."""
    (x,) = args
    in_shape = _shape(x)
    axis = attrs["axis"] % len(in_shape)
    spec = attrs["indices_or_sections"]
    size = in_shape[axis]
    if isinstance(spec, int):
        step = size // spec
        bounds: list[Any] = [k * step for k in range(spec)] + [None]
    else:
        bounds = [0, *spec, None]
    assert isinstance(out_type, TupleType)
    pieces = []
    for k, field in enumerate(out_type.fields):
        if isinstance(size, int):
            start = range(size)[bounds[k] : bounds[k + 1]].start
        elif isinstance(spec, int):  # a size known at run time, checked divisible
            start = bounds[k]
        else:
            start = sliced(size, bounds[k], bounds[k + 1], 1)[0]
        pieces.append(_sliced(x, static_shape(field), {axis: (start, 1)}, "split"))
    return tuple(pieces)


@te_rule("strided_slice")
def _strided_slice(args: tuple[Any, ...], attrs: Attrs, out_type: Type) -> Tensor:
    """Python slicing per axis (the numpy rule's plan): element i of an axis
    is ``range(n)[begin:end:stride][i]``."""
    (x,) = args
    in_shape = _shape(x)
    plan = _slices(attrs, len(in_shape))
    starts = {}
    for axis, (b, e, s) in plan.items():
        if isinstance(in_shape[axis], int):
            r = range(in_shape[axis])[b:e:s]
            starts[axis] = (r.start, r.step)
        else:  # a size known only at run time
            starts[axis] = (sliced(in_shape[axis], b, e, s)[0], s)
    shape, _ = _out(out_type)
    return _sliced(x, shape, starts, "strided_slice")


def _sized(size: Any, dtype: str) -> PrimExpr:
    """A size (an int, or an expression of sizes known at run time) as ``dtype``."""
    return _const(size, dtype) if isinstance(size, int) else tirx.Cast(dtype, size)


def _take_index(index: PrimExpr, size: Any, mode: str) -> PrimExpr:
    """An index in [0, size): wrapped (Python's modulo) or clipped ("clip"
    and "fast", which the interpreter checks and a kernel cannot [RULE TE-DIV])."""
    dtype = _dtype(index)
    signed = _kind(dtype) == "i"
    if mode == "wrap":
        n = _sized(size, dtype)
        if not isinstance(size, int):  # 0 at run time fails (``_take``)
            n = tirx.max(n, _const(1, dtype))
        wrapped = tirx.floormod(index, n) if signed else tirx.truncmod(index, n)
        return wrapped.astype("int32")
    clipped = te.min(index, _sized(size, dtype) - _const(1, dtype))
    if signed:
        clipped = te.max(clipped, _const(0, dtype))
    return clipped.astype("int32")


@te_rule("take")
def _take(args: tuple[Any, ...], attrs: Attrs, out_type: Type) -> Tensor:
    x, indices = args
    shape, dtype = _out(out_type)
    mode = attrs["mode"]
    if attrs["axis"] is None:
        flat_shape = (math.prod(_shape(x)),)
        flat = te.compute(flat_shape, lambda i: x(*_unravel(i, _shape(x))), name="take_flat")
        x, axis = flat, 0
    else:
        axis = attrs["axis"] % len(x.shape)
    size = _shape(x)[axis]
    rank = len(indices.shape)
    empty = f"cannot take from axis {axis} of size 0"
    if isinstance(size, int) and size == 0:
        # nothing to take from: fails unless nothing is taken [RULE RUNTIME-CHECK]
        require(shape, lambda *i: tirx.const(True, "bool"), empty)
        return te.compute(shape, lambda *i: _const(0, dtype), name="take")
    if not isinstance(size, int) and mode != "fast":  # a size 0 at run time fails
        require(shape, lambda *i: size == 0, empty)

    def body(*i: PrimExpr) -> PrimExpr:
        before, picked, after = i[:axis], i[axis : axis + rank], i[axis + rank :]
        value = x(*before, _take_index(indices(*picked), size, mode), *after)
        if isinstance(size, int):
            return value
        # nothing read from an axis of size 0 at run time (the check fails)
        return tirx.if_then_else(size == 0, _const(0, out_type.dtype), value)

    if mode == "fast":  # clipped, and checked [RULE RUNTIME-CHECK]

        def bad(*i: PrimExpr) -> PrimExpr:
            index = indices(*i[axis : axis + rank])  # (a load: a let cannot index a buffer)
            dtype = _dtype(index)
            out = index >= _sized(size, dtype)
            return tirx.Or(index < _const(0, dtype), out) if _kind(dtype) == "i" else out

        def shown(*i: PrimExpr) -> PrimExpr | tuple[PrimExpr, ...]:
            index = indices(*i[axis : axis + rank]).astype("int64")
            return index if isinstance(size, int) else (index, _sized(size, "int64"))

        shown_size = size if isinstance(size, int) else "{}"  # a run-time size shows too
        require(  # over the result: nothing fails where nothing is taken
            shape,
            bad,
            f"index {{}} is out of range for axis {axis} of size {shown_size}",
            shown,
        )
    return te.compute(shape, body, name="take")


@te_rule("broadcast_to")
def _broadcast_to(args: tuple[Any, ...], attrs: Attrs, out_type: Type) -> Tensor:
    return _map("broadcast_to", out_type, args, lambda x: x)


def _fill_rule(value: int) -> Callable[..., Tensor]:
    def rule(args: tuple[Any, ...], attrs: Attrs, out_type: Type) -> Tensor:
        shape, dtype = _out(out_type)
        return te.compute(shape, lambda *i: program_constant(value, dtype), name="fill")

    return rule


te_rule("zeros")(_fill_rule(0))
te_rule("ones")(_fill_rule(1))


@te_rule("full")
def _full(args: tuple[Any, ...], attrs: Attrs, out_type: Type) -> Tensor:
    """The fill value cast to the dtype, as ``cast`` does."""
    (value,) = args
    shape, dtype = _out(out_type)
    return te.compute(shape, lambda *i: cast_value(value(), dtype), name="full")


@te_rule("scatter_add")
def _scatter_add(args: tuple[Any, ...], attrs: Attrs, out_type: Type) -> Tensor:
    """``take``'s adjoint as a product with a one-hot matrix: with the
    indices flattened to p, ``out[.., v, ..] = data + sum_p onehot[v, p] *
    updates[.., p, ..]``, where ``onehot[v, p]`` is 1 when index p (clipped
    or wrapped as ``take`` does) is v. That is a matmul-like block, which
    the schedule tiles and vectorises (schedule/__init__.py step 2), and runs on
    every target with no write conflicts and a fixed summation order; it
    costs the output's size times the indices' count (an embedding table's
    backward: vocabulary x tokens x width), against the updates' size for a
    serial scatter. float16 accumulates in float32 [RULE TE-F16], integers
    wrap [RULE TE-WRAP]; ``mode="fast"`` checks its indices as ``take`` does
    [RULE RUNTIME-CHECK]."""
    x, indices, updates = args
    shape, dtype = _out(out_type)
    axis = attrs["axis"] % len(shape)
    mode = attrs["mode"]
    size = _shape(x)[axis]
    index_shape = _shape(indices)
    acc = "float32" if dtype == "float16" else dtype
    empty = f"cannot scatter into axis {axis} of size 0"
    if isinstance(size, int) and size == 0:
        require(index_shape, lambda *r: tirx.const(True, "bool"), empty)
        return te.compute(shape, lambda *i: x(*i), name="scatter_add")
    if not isinstance(size, int) and mode != "fast":
        require(index_shape, lambda *r: size == 0, empty)
    if mode == "fast":

        def bad(*r: PrimExpr) -> PrimExpr:
            index = indices(*r)
            dtype = _dtype(index)
            out = index >= _sized(size, dtype)
            return tirx.Or(index < _const(0, dtype), out) if _kind(dtype) == "i" else out

        def shown(*r: PrimExpr) -> PrimExpr | tuple[PrimExpr, ...]:
            index = indices(*r).astype("int64")
            return index if isinstance(size, int) else (index, _sized(size, "int64"))

        shown_size = size if isinstance(size, int) else "{}"
        message = f"index {{}} is out of range for axis {axis} of size {shown_size}"
        require(index_shape, bad, message, shown)
    count: Any = 1
    for d in index_shape:
        count = count * d
    rank = len(index_shape)
    flat_updates = updates
    if rank != 1:  # the index axes of the updates as one

        def unflatten(*i: PrimExpr) -> PrimExpr:
            where = _unravel(i[axis], index_shape) if rank else []
            return updates(*i[:axis], *where, *i[axis + 1 :])

        flat_shape = (*shape[:axis], count, *shape[axis + 1 :])
        flat_updates = te.compute(flat_shape, unflatten, name="scatter_add_updates")

    def hot(v: PrimExpr, p: PrimExpr) -> PrimExpr:
        where = _unravel(p, index_shape) if rank else []
        picked = _take_index(indices(*where), size, mode)
        return tirx.Select(picked.astype(_dtype(v)) == v, _const(1, acc), _const(0, acc))

    onehot = te.compute((size, count), hot, name="scatter_add_onehot")
    k = te.reduce_axis((0, count), name="k")
    reducer = _sum_reducer(acc)

    def product(*i: PrimExpr) -> PrimExpr:
        value = flat_updates(*i[:axis], k, *i[axis + 1 :]).astype(acc)
        return reducer(wrap_mul(onehot(i[axis], k), value), axis=k)

    total = te.compute(shape, product, name="scatter_add_sum")
    return te.compute(
        shape,
        lambda *i: wrap_add(x(*i).astype(acc), total(*i)).astype(dtype),
        name="scatter_add",
    )


@te_rule("strided_set")
def _strided_set(args: tuple[Any, ...], attrs: Attrs, out_type: Type) -> Tensor:
    """Element i of an axis is the value's ``(i - start) / step`` where that
    is a whole number in [0, count) (the numpy rule's plan), the data's
    elsewhere; the lazy ``if_then_else`` reads only the chosen input. The
    division is of an opaque distance by a positive step [RULE TE-OPAQUE]."""
    x, v = args
    in_shape = _shape(x)
    plan = _slices(attrs, len(in_shape))
    placed: dict[int, tuple[Any, int, Any]] = {}
    for axis, (b, e, s) in plan.items():
        if isinstance(in_shape[axis], int):
            r = range(in_shape[axis])[b:e:s]
            placed[axis] = (r.start, r.step, len(r))
        else:  # a size known only at run time
            start, count = sliced(in_shape[axis], b, e, s)
            placed[axis] = (start, s, count)
    shape, _ = _out(out_type)

    def body(*i: PrimExpr) -> PrimExpr:
        inside: PrimExpr = tirx.const(True, "bool")
        index = []
        for d, position in enumerate(i):
            if d not in placed:
                index.append(position)
                continue
            start, step, count = placed[d]
            wide = position if isinstance(start, int) else position.astype("int64")
            # the distance from the start in the step's direction, opaque,
            # over the step's magnitude [RULE TE-OPAQUE]
            offset = opaque(wide - start if step > 0 else start - wide)
            q = tirx.floordiv(offset, abs(step))
            ok = tirx.And(tirx.floormod(offset, abs(step)) == 0, tirx.And(q >= 0, q < count))
            inside = tirx.And(inside, ok)
            index.append(q.astype(_dtype(position)))
        return tirx.if_then_else(inside, v(*index), x(*i))

    return te.compute(shape, body, name="strided_set")
