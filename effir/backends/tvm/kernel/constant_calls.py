"""[RULE TE-FOLD] An elementwise call of constants is computed by the operator's
numpy rule when the kernel is built, never by TVM: its value is the
interpreter's, bit for bit, and TVM sees one opaque constant.

Why: TVM's rewrite simplifier (``s_tir.StmtSimplify`` and the simplification
of ``te.create_prim_func``) rewrites float expressions as if they were reals
whenever two operands are the same expression: ``x - x`` to 0, ``(x + y) - y``
to x, ``(x + y) - x`` to y, ``x - (x + y)`` and ``x - (y + x)`` to ``0 - y``,
``x == x`` to true, ``select(c, y, z) - z`` to ``select(c, y - z, 0)``. Its
own code says these hold for finite values only: ``inf - inf`` became 0 (IEEE:
NaN), ``(1e8 + 1) - 1e8`` became 1 (float32: 0), ``x - (x + 0)`` with
``x = -0`` +0 (IEEE: -0), ``nan == nan`` true. Its constant folding adds
more once an immediate is visible: ``0 * x`` and ``0 / x`` to 0, ``x + 0``
to x. In a kernel the rules' operands are bound to lets ([RULE TE-LET]), and
the simplifier substitutes a let only when its value is a variable or an
immediate, so two operands are the same expression only when both are
constants: the program's constants, which stay inline (atoms) and whose
lets are substituted ([RULE TE-CONSTLET]). At -O1 fusion puts the
program's constant expressions into kernels (-O2 folds them with numpy
first, ``fold-constant``), and there the simplifier reasoned about them.

So the kernel builder (kernel/primitive.py, and loop/evaluate.py for whole
loops) computes a call of an ``elementwise`` or ``broadcast`` operator whose
arguments are all uniform constants (a compute of one opaque constant:
a scalar constant, a fill, a shape operator of one) as ``fold-constant``
does, with the operator's numpy rule on the constants' values, and the
result is a uniform constant again, ``program_constant`` [RULE TE-OPAQUE]
of the value: what TVM folds is then one atom, never an expression of
them. A call whose numpy rule raises (an integer division by zero) is
left to its ``te`` rule, whose run-time check raises the interpreter's
error [RULE RUNTIME-CHECK]. Kernels without such a call are unchanged.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import tvm
from tvm import te, tirx

from ....ir.node import Attrs
from ....ir.op import OpDef
from ....ir.types import TensorType, Type
from .rules import TEValue, dim_value
from .te_ops.common import _dtype, program_constant, scalar_constant

_FOLDED_TRAITS = frozenset({"elementwise", "broadcast"})
"""The operators whose every result element is the same function of the
arguments' elements: a call of uniform constants gives a uniform constant."""


def folded_call(
    definition: OpDef, args: tuple[TEValue, ...], attrs: Attrs, out_type: Type
) -> TEValue | None:
    """The value of a pure elementwise call of uniform constants, computed by
    its numpy rule [RULE TE-FOLD]; None for any other call, and where the
    numpy rule raises or gives another dtype than the call's type."""
    impl = definition.rules.get("numpy")
    if (
        impl is None
        or definition.effect != "pure"
        or not definition.traits & _FOLDED_TRAITS
        or not isinstance(out_type, TensorType)
    ):
        return None
    values = [uniform_value(a) for a in args]
    if any(v is None for v in values):
        return None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # numpy's overflow and invalid warnings: IEEE's values
            value = np.asarray(impl(tuple(values), attrs))
    except Exception:  # the run-time error stays at run time [RULE RUNTIME-CHECK]
        return None
    if value.shape != () or str(value.dtype) != out_type.dtype:
        return None
    if not out_type.shape:
        return scalar_constant(value)
    shape = [dim_value(d) for d in out_type.shape]
    if any(d is None for d in shape):
        return None
    constant = program_constant(value.item(), out_type.dtype)
    return te.compute(shape, lambda *_: constant, name="folded")


_DEPTH = 16
"""How many computes of a read of the next (shape operators of a constant)
``uniform_value`` looks through: a constant look per call, so a kernel's
folding stays linear in its size; a deeper chain is left to its rules."""


def uniform_value(value: TEValue) -> np.ndarray | None:
    """The 0-d array a tensor holds at every position when it is a compute
    of one program constant (``program_constant``), read through shape
    operators' computes of one (``_DEPTH`` at most); None otherwise."""
    if not isinstance(value, te.Tensor):
        return None
    body: Any = value
    for _ in range(_DEPTH):
        if not isinstance(body, te.Tensor):
            break
        op = body.op
        if not isinstance(op, te.ComputeOp) or op.num_outputs != 1 or op.reduce_axis:
            return None
        body = op.body[0]
        if isinstance(body, tvm.ir.Call) and body.op.name == "te.tensor_load":
            body = body.args[0]
    return _constant_value(body, str(value.dtype))


def _constant_value(expr: Any, dtype: str) -> np.ndarray | None:
    """The value of ``program_constant``'s expression of dtype ``dtype``: an
    immediate, or the ``reinterpret`` of one (its bits as ``dtype``)."""
    if isinstance(expr, tvm.ir.Call) and expr.op.name == "tirx.reinterpret":
        (inner,) = expr.args
        bits = _constant_value(inner, _dtype(inner))
        if bits is None or bits.dtype.itemsize != np.dtype(dtype).itemsize:
            return None
        return bits.view(dtype)
    if isinstance(expr, tirx.IntImm | tirx.FloatImm) and _dtype(expr) == dtype:
        return np.array(expr.value, dtype)
    return None
