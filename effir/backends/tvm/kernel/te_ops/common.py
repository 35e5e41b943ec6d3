"""Helpers every ``te`` rule uses: shapes, dtypes, constants, lets [RULE LET],
broadcasting loads, elementwise maps. The rules' reasons are the package's
docstring."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import tvm_ffi
from tvm import te, tirx

from .....ir.types import TensorType, Type
from ...runtime.errors import BackendError
from ..rules import dim_value

PrimExpr = Any  # tvm.tirx.PrimExpr
Tensor = Any  # tvm.te.Tensor


def static_shape(t: Type) -> tuple[int, ...]:
    """The dimensions of a tensor type, which must all be known integers."""
    if not isinstance(t, TensorType):
        raise BackendError(f"expected a tensor type, got {t!r}")
    dims = tuple(dim_value(d) for d in t.shape)  # a TIR variable: symbolic (kernel/rules.py)
    if any(d is None for d in dims):
        raise BackendError(f"a kernel needs static shapes, got {t!r}")
    return dims


def _out(t: Type) -> tuple[tuple[int, ...], str]:
    return static_shape(t), t.dtype  # type: ignore[union-attr]


def _shape(x: Tensor) -> tuple[int, ...]:
    return tuple(int(d) if isinstance(d, tirx.IntImm) else d for d in x.shape)


def _dtype(x: Tensor | PrimExpr) -> str:
    """The dtype of a tensor or an expression (TVM 0.27 expressions carry a
    ``ty``, tensors and tensor elements a ``dtype``)."""
    dtype = getattr(x, "dtype", None)
    return str(dtype if dtype is not None else x.ty)


def _kind(dtype: str) -> str:
    """'b' (bool), 'i' (signed), 'u' (unsigned) or 'f' (float)."""
    if dtype == "bool":
        return "b"
    return {"float": "f", "uint": "u", "int": "i"}[dtype.rstrip("0123456789")]


def _const(value: Any, dtype: str) -> PrimExpr:
    return tirx.const(value, dtype)


def let_expr(var: Any, value: PrimExpr, body: PrimExpr) -> PrimExpr:
    """``let var = value in body`` whose value TVM's bound analysis cannot
    see through [RULE LET]: a ``reinterpret`` to its own dtype, which the
    LLVM code generator emits as nothing."""
    if _dtype(value) != "bool":  # (a boolean's range is its whole range)
        value = tirx.call_intrin(_dtype(value), "tirx.reinterpret", value)
    return tirx.Let(var, value, body)


def _let(value: PrimExpr, body: Callable[[PrimExpr], PrimExpr]) -> PrimExpr:
    """``body(value)`` with ``value`` bound once [RULE LET]."""
    if isinstance(value, tirx.Var | tirx.IntImm | tirx.FloatImm):
        return body(value)
    var = tirx.Var("v", _dtype(value))
    return let_expr(var, value, body(var))


def _lets(values: Sequence[PrimExpr], body: Callable[..., PrimExpr]) -> PrimExpr:
    if not values:
        return body()
    return _let(values[0], lambda v: _lets(values[1:], lambda *rest: body(v, *rest)))


def _load_broadcast(
    x: Tensor, index: Sequence[PrimExpr], out: Sequence[Any] | None = None
) -> PrimExpr:
    """``x`` at ``index`` of the broadcast result (numpy's rule: trailing
    dimensions align, a dimension of size 1 stretches). A size known only
    at run time that is not the result's (``out``) may be the 1 that
    stretches: read at 0 where it is (kernel/symbolic_shapes.py [RULE SIZECHECK])."""
    shape = _shape(x)
    offset = len(index) - len(shape)
    return x(*(_stretched(d, index[offset + k], out, offset + k) for k, d in enumerate(shape)))


def _stretched(d: Any, i: PrimExpr, out: Sequence[Any] | None, position: int) -> PrimExpr:
    if isinstance(d, int):
        return 0 if d == 1 else i
    if out is None or tvm_ffi.structural_equal(d, out[position], map_free_vars=False):
        return i
    return _select(d == 1, tirx.const(0, _dtype(i)), i)


def _name(op: str) -> str:
    return op.replace(".", "_")


def _map(
    name: str, out_type: Type, inputs: Sequence[Tensor], fn: Callable[..., PrimExpr]
) -> Tensor:
    """An elementwise (broadcasting) compute of ``fn`` over ``inputs``."""
    shape, _ = _out(out_type)
    return te.compute(
        shape,
        lambda *i: _lets([_load_broadcast(x, i, shape) for x in inputs], fn),
        name=_name(name),
    )


def _widened(dtype: str, fn: Callable[..., PrimExpr]) -> Callable[..., PrimExpr]:
    """``fn`` computed in float32 for float16 arguments [RULE F16]."""
    if dtype != "float16":
        return fn
    return lambda *xs: fn(*(x.astype("float32") for x in xs)).astype("float16")


def _is_nan(x: PrimExpr) -> PrimExpr:
    return tirx.isnan(x)


def _select(cond: PrimExpr, a: PrimExpr, b: PrimExpr) -> PrimExpr:
    return tirx.Select(cond, a, b)


def _count(sizes: Sequence[Any], dtype: str) -> PrimExpr:
    """The number of elements of ``sizes`` as a ``dtype`` value (symbolic
    sizes, kernel/rules.py, give an expression: 0 / 0 is NaN at run time too)."""
    if all(isinstance(d, int) for d in sizes):
        return _const(float(np.prod(sizes)), dtype)
    return math.prod(sizes).astype(dtype)
