"""[RULE LOWER-VIEW] A primitive function that only rearranges the axes of
its one tensor parameter, leaving its elements in the same order, is a
view of the argument's memory (the VM's ``reshape`` builtin), not a kernel
that copies it.

Why: the reverse loop's stacks cut into chunks (``reshape(%factor,
newshape=[10, -1, 768])``) were four copies of 3 to 10 MB in each training
step of the GRU language model (10 ms of CPU of some 250); and the stacked
steps of a checkpointed loop cut into segments (``transpose``, ``reshape``,
``transpose`` back: the MLP gradient of benchmarks/mlp_scan.py has two) are
a reshape too, which cost a kernel's build each in a cold compile. Every
tensor the VM holds is contiguous, and none is written after it is made,
so the view is the value.

Which functions: a chain of ``reshape``, ``squeeze``, ``expand_dims`` and
``transpose``, each of the one before (the first of the parameter), static
shapes, one dtype, whose composition keeps the elements' order. That is
decided without touching data: the chain is followed on numpy strides (an
array of the parameter's shape over one byte: numpy's own rules say which
reshapes need no copy), and the order is kept when the last strides are
the row-major strides of the result's shape."""

from __future__ import annotations

import math

import numpy as np

from ....ir.expr import Call, Expr, Function, Let, Op
from ....ir.types import TensorType

VIEW_OPERATORS = frozenset({"reshape", "squeeze", "expand_dims", "transpose"})
"""Operators that rearrange axes without computing."""


def view_shape(fn: Function) -> list[int] | None:
    """The result's shape when the primitive function ``fn`` is a view of
    its one parameter [RULE LOWER-VIEW]; None otherwise."""
    if len(fn.params) != 1:
        return None
    steps = _chain(fn)
    source = fn.params[0].checked_type
    if steps is None or not (isinstance(source, TensorType) and source.is_static):
        return None
    result = steps[-1].checked_type
    if not isinstance(result, TensorType) or not result.is_static:
        return None
    for step in steps:
        out = step.checked_type
        if not isinstance(out, TensorType) or out.dtype != source.dtype:
            return None
    shape = [int(d) for d in result.shape]
    if math.prod(shape) == 0:
        return shape
    return shape if _order_kept([int(d) for d in source.shape], steps) else None


def _chain(fn: Function) -> list[Call] | None:
    """The calls of ``fn``'s body when each rearranges the value before it
    (the parameter first) and the body ends with the last; None otherwise."""
    calls: list[Call] = []
    before: Expr = fn.params[0]
    body = fn.body
    while isinstance(body, Let):
        if not _rearranges(body.value, before):
            return None
        calls.append(body.value)  # type: ignore[arg-type]
        before, body = body.var, body.body
    if calls and body is before:  # the tail: the last binding's variable
        return calls
    return [*calls, body] if _rearranges(body, before) else None  # type: ignore[list-item]


def _rearranges(value: Expr, operand: Expr) -> bool:
    """Whether ``value`` is a view operator's call of ``operand`` alone."""
    return (
        isinstance(value, Call)
        and isinstance(value.callee, Op)
        and value.callee.name in VIEW_OPERATORS
        and list(value.args) == [operand]
    )


def _order_kept(shape: list[int], steps: list[Call]) -> bool:
    """Whether ``steps`` (static, of a tensor of ``shape``) keep every
    element's row-major position."""
    array = np.lib.stride_tricks.as_strided(
        np.zeros(1, np.int8), shape=shape, strides=_row_major(shape), writeable=False
    )
    for step in steps:
        out, callee = step.checked_type, step.callee
        assert isinstance(out, TensorType) and isinstance(callee, Op)
        if callee.name == "transpose":
            axes = step.attrs["axes"]
            array = array.transpose(None if axes is None else [a % array.ndim for a in axes])
            continue
        try:  # numpy's answer: can the strides hold the new shape?
            array = np.reshape(array, [int(d) for d in out.shape], copy=False)
        except ValueError:
            return False
    wanted = _row_major(list(array.shape))
    return all(n == 1 or s == w for n, s, w in zip(array.shape, array.strides, wanted, strict=True))


def _row_major(shape: list[int]) -> list[int]:
    """The strides, in elements of one byte, of a row-major tensor of ``shape``."""
    strides, step = [], 1
    for n in reversed(shape):
        strides.append(step)
        step *= max(n, 1)
    return strides[::-1]
