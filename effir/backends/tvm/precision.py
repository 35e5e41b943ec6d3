"""[RULE COMPILE-PRECISION] How matrix products multiply: ``effir.compile``'s
``precision`` option.

Why
---
A GPU's tensor cores multiply matrices an order of magnitude faster than its
float32 units, on operands of fewer mantissa bits: TF32 (float32's range,
10 bits of mantissa) and bfloat16 (float32's range, 7 bits), accumulating in
float32. JAX multiplies float32 matrices in TF32 on an H100 or H200 by
default; effir does not change a program's numbers unless asked, so the
default is float32 and the others are explicit options.

The rule
--------
With ``precision="tf32"`` or ``"bfloat16"``, each float32 operand of a
float32 matrix product (``nn.dense``, ``nn.matmul``) is rounded to that
format before it is multiplied; the products are accumulated in float32.
The rounding is the hardware's: TF32 rounds to nearest with ties away from
zero (PTX ``cvt.rna.tf32.f32``), bfloat16 to nearest even
(``__float2bfloat16_rn``); infinities and NaNs pass unchanged. It is
written into the kernels' TE (``operand``: a compute of its own before
the product), so it is the same on every target: on the CPU the program computes what the GPU's tensor cores compute
(and runs no faster); on CUDA the products whose shape allows it run on the
tensor cores (schedule/cuda/tensor_core.py), the others on the float32
units with the same rounding. Nothing else changes: elementwise operators,
reductions and the products of other dtypes keep their precision.

Results then differ from the interpreter's (which multiplies in float32)
by the operands' rounding: about 2**-11 relative per operand in TF32, 2**-8
in bfloat16, summed over the product's depth.

Where
-----
The option is set for a program's lowering (``products_in``, a context
variable read by the TE rules and the CUDA schedules), part of the build
cache's key and of an exported artifact's manifest.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import numpy as np
from tvm import te, tirx

PRECISIONS = ("float32", "tf32", "bfloat16")
"""The values of ``effir.compile(precision=...)``."""

# Per format: the low bits dropped, and what is added before they are
# (TF32: half an ulp, ties away from zero; bfloat16: half an ulp less one,
# plus the kept last bit, ties to even).
_DROPPED = {"tf32": 13, "bfloat16": 16}
_EXPONENT = 0x7F800000

_PRECISION: ContextVar[str] = ContextVar("effir_precision", default="float32")


@contextmanager
def products_in(precision: str) -> Iterator[None]:
    """Kernels lowered within multiply matrices in ``precision``."""
    token = _PRECISION.set(precision)
    try:
        yield
    finally:
        _PRECISION.reset(token)


def current() -> str:
    """The precision of the matrix products lowered now."""
    return _PRECISION.get()


ROUNDED_OPERAND = "effir_operand_rounded"
"""The name of the compute that rounds a product's operand (``operand``):
the CPU schedules leave it a loop of its own, so the rounding costs one
pass over the operand, not one per multiply-add; the CUDA schedules inline
it into the product's loads (schedule/inline.py)."""


def operand(tensor: Any, acc: str) -> Any:
    """A matrix product's operand ``tensor`` (a TE tensor) as it is
    multiplied: a compute rounding it to the current precision when it
    and the accumulator ``acc`` are float32, else the tensor itself."""
    precision = current()
    if precision == "float32" or acc != "float32" or str(tensor.dtype) != "float32":
        return tensor
    return te.compute(
        tuple(tensor.shape),
        lambda *i: rounded(tensor(*i), precision),
        name=ROUNDED_OPERAND,
    )


def rounded(value: Any, precision: str) -> Any:
    """A float32 TIR expression rounded to ``precision`` through its bits."""
    dropped = _DROPPED[precision]
    bits = tirx.reinterpret("uint32", value)
    half = 1 << (dropped - 1)
    if precision == "tf32":
        bias: Any = tirx.const(half, "uint32")
    else:
        last = tirx.bitwise_and(tirx.shift_right(bits, tirx.const(dropped, "uint32")), 1)
        bias = tirx.const(half - 1, "uint32") + last
    mask = tirx.const((0xFFFFFFFF >> dropped) << dropped, "uint32")
    rounded = tirx.reinterpret("float32", tirx.bitwise_and(bits + bias, mask))
    special = tirx.bitwise_and(bits, tirx.const(_EXPONENT, "uint32")) == tirx.const(
        _EXPONENT, "uint32"
    )
    return tirx.Select(special, value, rounded)


def numpy_operand(array: np.ndarray, precision: str) -> np.ndarray:
    """``operand``'s rounding in numpy, for float32 arrays: what a product
    in ``precision`` multiplies (the reference its tests compare with)."""
    array = np.asarray(array, np.float32)
    if precision == "float32":
        return array
    dropped = _DROPPED[precision]
    bits = array.view(np.uint32).astype(np.uint64)
    half = 1 << (dropped - 1)
    bias = half if precision == "tf32" else half - 1 + ((bits >> dropped) & 1)
    mask = (0xFFFFFFFF >> dropped) << dropped
    rounded = ((bits + bias) & mask).astype(np.uint32).view(np.float32)
    special = (array.view(np.uint32) & _EXPONENT) == _EXPONENT
    return np.where(special, array, rounded)
