"""Helpers every ``te`` rule uses: shapes, dtypes, constants, lets [RULE TE-LET],
broadcasting loads, elementwise maps. The rules' reasons are the package's
docstring."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import tvm
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
    if not isinstance(t, TensorType):
        raise BackendError(f"expected a tensor type, got {t!r}")
    return static_shape(t), t.dtype


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


def opaque(value: PrimExpr) -> PrimExpr:
    """``value``, which TVM's integer arithmetic cannot see into
    [RULE TE-OPAQUE]: a ``reinterpret`` to its own dtype, which the LLVM code
    generator emits as nothing. Other dtypes are left as they are."""
    return _reinterpret(value) if _kind(_dtype(value)) in "iu" else value


def float_quotient(a: PrimExpr, b: PrimExpr) -> PrimExpr:
    """``a / b`` of floats, the divisor opaque unless it is a nonzero
    immediate [RULE TE-DIVISOR]: TVM's constant folding aborts the build on
    a float divisor it folds to 0, which IEEE divides by (inf, NaN)."""
    if isinstance(b, tirx.FloatImm) and b.value != 0:
        return a / b
    if isinstance(b, tvm.ir.Call) and b.op.name == "tirx.reinterpret":
        return a / b  # a program constant: opaque already
    return a / _reinterpret(b)


def let_expr(var: Any, value: PrimExpr, body: PrimExpr) -> PrimExpr:
    """``let var = value in body``, the value opaque [RULE TE-OPAQUE]."""
    return tirx.Let(var, opaque(value), body)


def program_constant(value: Any, dtype: str) -> PrimExpr:
    """A constant of the program (a literal, the value of a fill), opaque
    [RULE TE-OPAQUE]: TVM's simplifier folds ``x * 0.0`` to 0 and ``0.0 / x``
    to 0 (wrong where x is infinite, NaN or negative), ``x + 0.0`` to x
    (wrong for -0.0), refuses ``x / 0.0`` ("Divide by zero") and folds
    ``x == INT_MIN`` to false. A ``reinterpret`` to its own dtype hides the
    value until TVM's late passes remove it (``FP8StorageLegalize``; a
    let of constants is substituted before [RULE TE-CONSTLET]); a negative
    integer (and a uint64 past int64's range) is the ``reinterpret`` of
    its bits as the other signedness, which stays to the code generator:
    after ``LowerIntrin`` the analyzer still folds a cast of a negative
    immediate to an unsigned dtype, and fails ("cannot make uint from
    negative value"). A float -0.0 is the ``reinterpret`` of its bits as
    an integer too: TVM compares float immediates by value, so -0.0 and
    +0.0 are one expression to its common-subexpression elimination and
    its simplifier (``where(c, 0f, -0f)`` became +0 everywhere). LLVM
    folds them all as IEEE and two's complement do."""
    if dtype == "bool":
        return tirx.const(value, dtype)
    if _kind(dtype) == "f" and value == 0 and np.signbit(value):
        bits = np.array(value, dtype).view(f"int{np.dtype(dtype).itemsize * 8}")
        immediate = tirx.const(bits.item(), str(bits.dtype))
        return tirx.call_intrin(dtype, "tirx.reinterpret", immediate)
    if _kind(dtype) in "iu" and not 0 <= value < 2**63:
        bits = np.array(value).astype(dtype)
        other = ("int" if dtype[0] == "u" else "uint") + dtype.lstrip("uint")
        immediate = tirx.const(bits.view(other).item(), other)
        return tirx.call_intrin(dtype, "tirx.reinterpret", immediate)
    return _reinterpret(tirx.const(value, dtype))


def scalar_constant(data: np.ndarray) -> Tensor | None:
    """A scalar constant of the program as a 0-d compute of its value
    (``program_constant``: inlined into its users, never let-bound, which
    ``_let`` knows)."""
    if data.ndim != 0:
        return None
    value = program_constant(data.item(), str(data.dtype))
    return te.compute((), lambda: value, name="constant")


def _reinterpret(value: PrimExpr) -> PrimExpr:
    return tirx.call_intrin(_dtype(value), "tirx.reinterpret", value)


def _lower_reinterpret_for_cuda(call: PrimExpr) -> PrimExpr:
    """``LowerIntrin``'s rule for ``reinterpret`` on CUDA [RULE TE-OPAQUE]:
    the opaque wrappers are no longer needed there (it is the last pass),
    and TVM's CUDA code generator prints a ``reinterpret`` as
    ``*(T *)(&(x))``, which nvcc refuses when ``x`` is an immediate ("must
    be an lvalue"). A ``reinterpret`` to the argument's own dtype is the
    argument; one of an immediate is the immediate of the same bits (a
    uint64 past int64's range: the cast of its signed bits, which wraps in
    CUDA as in numpy); any other stays for the code generator, which binds
    a non-immediate argument to a variable first. A float64 immediate is
    ``__longlong_as_double`` of its bits (``_cuda_double``)."""
    (arg,) = call.args
    to, source = _dtype(call), _dtype(arg)
    if to == source:
        return _cuda_double(arg) if isinstance(arg, tirx.FloatImm) else arg
    if "bool" in (to, source) or "x" in to + source:  # a vector (lanes): the code generator's
        return call
    width = np.dtype(to).itemsize * 8
    if isinstance(arg, tirx.IntImm):
        # TVM's NarrowDataType may have narrowed the immediate (an int32 -5
        # under a uint64 reinterpret): its value, wrapped to the width
        bits = int(arg.value) % 2**width
    elif isinstance(arg, tirx.FloatImm) and np.dtype(source).itemsize * 8 == width:
        bits = np.array(arg.value, source).view(f"uint{width}").item()
    else:
        return call
    if _kind(to) == "f":
        return _cuda_double(
            tirx.FloatImm(to, float(np.array(bits, f"uint{width}").view(to).item()))
        )
    if _kind(to) == "i" and bits >= 2 ** (width - 1):
        return tirx.IntImm(to, bits - 2**width)
    if bits >= 2**63:  # a uint64 past int64's range: its signed bits, cast
        return tirx.Cast(to, tirx.IntImm("int64", bits - 2**64))
    return tirx.IntImm(to, bits)


def _cuda_double(value: PrimExpr) -> PrimExpr:
    """A float immediate for CUDA; a float64 one as ``__longlong_as_double``
    of its bits, which nvcc folds: TVM's CUDA code generator prints a
    float64 immediate with 15 digits after the point, so ``1e-20`` was 0
    and ``2 / 3`` lost its last bits."""
    if _dtype(value) != "float64":
        return value
    bits = np.array(value.value, "float64").view("int64").item()
    return tirx.call_pure_extern("float64", "__longlong_as_double", tirx.IntImm("int64", bits))


tirx.op.register_intrin_lowering(
    "tirx.reinterpret", "cuda", f=_lower_reinterpret_for_cuda, level=99
)


def _is_atom(value: PrimExpr) -> bool:
    """A variable, an immediate or an opaque immediate: nothing to bind."""
    if isinstance(value, tvm.ir.Call) and value.op.name == "tirx.reinterpret":
        value = value.args[0]
    return isinstance(value, tirx.Var | tirx.IntImm | tirx.FloatImm)


def _constant_read(value: PrimExpr) -> PrimExpr | None:
    """The constant ``value`` reads when it loads a compute of one
    (``scalar_constant``): read directly rather than bound to a let, which
    kernel/lets.py would substitute anyway [RULE TE-CONSTLET]."""
    if not (isinstance(value, tvm.ir.Call) and value.op.name == "te.tensor_load"):
        return None
    tensor = value.args[0]
    if not isinstance(tensor.op, te.ComputeOp):
        return None
    body = tensor.op.body[tensor.value_index]
    return body if _is_atom(body) else None


def _let(value: PrimExpr, body: Callable[[PrimExpr], PrimExpr]) -> PrimExpr:
    """``body(value)`` with ``value`` bound once [RULE TE-LET]."""
    constant = _constant_read(value)
    value = value if constant is None else constant
    if _is_atom(value):
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
    stretches: read at 0 where it is (kernel/symbolic_shapes.py [RULE SHAPE-SIZECHECK])."""
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
    """``fn`` computed in float32 for float16 arguments [RULE TE-F16]."""
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
