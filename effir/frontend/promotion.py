"""The one dtype rule of every route (scripted, traced, built, eager):
which dtype the operands of an elementwise or broadcast operator take.

effir's operators take operands of one dtype, as TVM's and the IR's type
relations do. The frontend adds only what a Python program means without
saying it, as JAX's weak types do:

- A Python number (``int``, ``float``) is *weak*: it takes the dtype of
  the tensors it meets (``x * 2`` on float64 ``x`` is float64), and so is
  a numpy scalar (``np.float64(0.5)``, numpy run on constants). So is a
  value that is a Python int when the function runs eagerly: a ``range``
  counter and a loop variable that starts as a Python number and stays one
  (``i = 0`` ... ``i = i + 1``), int32 in the IR. A weak int meeting a
  float tensor becomes that float.
- Tensors (numpy arrays and scalars, effir values) are *strong*: strong
  operands of different dtypes, and a Python float meeting an integer
  tensor, are a ``FrontendError`` whose hint names the cast to write.
  Nothing is widened implicitly (numpy's int32 * float32 -> float64 would
  put float64 kernels into compiled code).

``apply_op`` (builder.py) calls ``promote`` for every operator, building
or eager, so the two cannot disagree.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..ir.diagnostics import FrontendError
from ..ir.op import OpDef

_PROMOTED = frozenset({"broadcast", "elementwise"})
_FIRST_EXEMPT = frozenset({"where"})  # where(cond, x, y): the condition is bool


def operand_group(name: str, definition: OpDef, count: int) -> range:
    """The positions of the operands that must share one dtype."""
    if not definition.traits & _PROMOTED or count < 2:
        return range(0)
    return range(1 if name in _FIRST_EXEMPT else 0, count)


def is_number(value: Any) -> bool:
    """A Python number or a numpy scalar (weak); a bool is a strong ``bool``."""
    return isinstance(value, int | float | np.integer | np.floating) and not isinstance(value, bool)


def _kind(dtype: str) -> str:
    return "float" if dtype.startswith("float") else "bool" if dtype == "bool" else "int"


def promote(
    name: str,
    args: Sequence[Any],
    group: range,
    dtype_of: Callable[[Any], str | None],
    is_weak: Callable[[Any], bool],
) -> tuple[str | None, bool]:
    """The dtype the operands at ``group`` take (None: unknown, or Python
    numbers alone) and whether the result is weak (every operand weak).
    ``dtype_of`` gives an operand's dtype when known, ``is_weak`` whether
    an effir value is weak. Raises ``FrontendError`` (no location: the
    caller has it) where the rule refuses."""
    strong: list[str] = []
    weak: list[str] = []
    unknown = False
    for k in group:
        a = args[k]
        if is_number(a):
            weak.append("float" if isinstance(a, float | np.floating) else "int")
            continue
        dtype = dtype_of(a)
        if dtype is None:
            unknown = True
        elif is_weak(a):
            weak.append(dtype)
        else:
            strong.append(dtype)
    if len(set(strong)) > 1:
        a, b = sorted(set(strong))[:2]
        raise FrontendError(
            f"{name}: operands of dtypes {a} and {b}: effir does not promote tensors implicitly",
            hint=_cast_hint(a, b),
        )
    if strong:
        target = strong[0]
        for w in weak:
            if _kind(w) == "float" and _kind(target) != "float":
                raise FrontendError(
                    f"{name}: a float (a Python float or a float counter) with a {target} "
                    "tensor: effir does not promote tensors implicitly",
                    hint=f'cast the tensor: effir.op.cast(x, dtype="float32") '
                    f"(np.float32(x) in @effir.script), or write an int ({target})",
                )
            if _kind(target) == "bool":
                raise FrontendError(
                    f"{name}: a number with a bool tensor",
                    hint='cast the tensor: effir.op.cast(x, dtype="int32")',
                )
        return target, False
    if unknown or not weak:
        return None, False
    floats = [w for w in weak if _kind(w) == "float"]
    if floats:
        sized = [w for w in floats if w != "float"]
        return (max(sized, key=_width) if sized else "float32"), True
    sized = [w for w in weak if w != "int"]
    return (max(sized, key=_width) if sized else None), True


def _width(dtype: str) -> int:
    return np.dtype(dtype).itemsize


def _cast_hint(a: str, b: str) -> str:
    """The cast that makes ``a`` and ``b`` one dtype: to the float when one
    is, else to the wider."""
    if _kind(a) != _kind(b):
        to, other = (a, b) if _kind(a) == "float" else (b, a)
    else:
        to, other = (a, b) if _width(a) >= _width(b) else (b, a)
    return (
        f'cast the {other} operand: effir.op.cast(x, dtype="{to}") '
        f"(np.{to}(x) in @effir.script and eagerly)"
    )
