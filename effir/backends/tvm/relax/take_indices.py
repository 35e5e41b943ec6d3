"""[RULE LOWER-TAKE-INDEX] A kernel's constant ``take`` index is an argument
of its call, not a number in its code.

Why: a loop that partial evaluation unrolls, or a checkpointed segment run
step by step, leaves one kernel per step that differs from the others only
in the step it takes (``take(%xs, 0, axis=0)``, ``take(%xs, 1, axis=0)``,
...). A constant in a kernel's code is part of its content, so the sharing
by content (relax/apart.py [RULE APART-SHARE]) saw four kernels where there
is one: the MLP gradient of benchmarks/mlp_scan.py built eight such copies,
the GRU language model's training step twelve. With the index a parameter
(a 0-d tensor the call passes) they are one kernel, lowered and built once.

Only what reads the same either way is lifted: a scalar integer constant
index into a static axis that is not empty. Its value is put in range as
the operator's mode says (clipped, or wrapped), and the call's mode becomes
``clip``, which leaves an index in range as it is; a ``fast`` take of an
index out of range keeps its constant and its run-time check."""

from __future__ import annotations

import math

import numpy as np

from ....ir.expr import Call, Constant, Expr, Function, Op, Var
from ....ir.functor import Mutator, on
from ....ir.node import Attrs, Node
from ....ir.types import TensorType
from ....passes.analyses.infer_type import infer_expr


def lifted_take_indices(fn: Function) -> tuple[Function, list[np.ndarray]]:
    """``fn`` (a typed primitive function) with each liftable ``take``
    index a new parameter, after its own, and those indices' values, in
    the parameters' order; ``fn`` itself and ``[]`` when there is none."""
    lifting = _Lift()
    body = lifting.mutate_as(fn.body, Expr)
    if not lifting.values:
        return fn, []
    lifted = Function(
        (*fn.params, *lifting.params), body, fn.ret_type, fn.type_params, fn.attrs, span=fn.span
    )
    infer_expr(lifted)
    return lifted, lifting.values


class _Lift(Mutator):
    """The ``take`` calls of a kernel's body, their constant index replaced."""

    def __init__(self) -> None:
        super().__init__()
        self.params: list[Var] = []
        self.values: list[np.ndarray] = []

    @on(Call)
    def _call(self, new: Node, old: Node) -> Node:
        assert isinstance(new, Call) and isinstance(old, Call)
        index = _in_range_index(old)
        if index is None:
            return new
        param = Var(f"index{len(self.params)}", TensorType((), str(index.dtype)))
        self.params.append(param)
        self.values.append(index)
        attrs = Attrs({**dict(new.attrs.items()), "mode": "clip"})
        return Call(new.callee, (new.args[0], param), attrs, span=new.span)


def _in_range_index(call: Call) -> np.ndarray | None:
    """The index of ``call`` when it is a ``take`` of a scalar integer
    constant into a static, non-empty axis, put in range as its mode does;
    None otherwise (and for a ``fast`` take out of range: it must fail)."""
    if not (isinstance(call.callee, Op) and call.callee.name == "take"):
        return None
    data, index = call.args
    if not (isinstance(index, Constant) and index.data.ndim == 0 and index.data.dtype.kind in "iu"):
        return None
    if not (data.has_type and isinstance(data.checked_type, TensorType)):
        return None
    shape = [d for d in data.checked_type.shape if isinstance(d, int)]
    axis = call.attrs["axis"]
    if len(shape) != len(data.checked_type.shape) or (axis is not None and not shape):
        return None
    size = math.prod(shape) if axis is None else shape[axis % len(shape)]
    value = int(index.data)
    if size == 0:
        return None
    mode = call.attrs["mode"]
    if mode == "wrap":
        value %= size
    elif mode == "clip":
        value = min(max(value, 0), size - 1)
    elif not 0 <= value < size:  # "fast": out of range fails at run time
        return None
    return np.array(value, dtype=index.data.dtype)
