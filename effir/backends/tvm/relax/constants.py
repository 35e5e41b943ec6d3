"""[RULE LOWER-CONST] Relax constants are made without ``relax.const``.

Why: TVM's ``relax.const`` imports ml_dtypes at every call (for bfloat16
and float8 arrays, which effir never has: ir/types.py ``DTYPES``), and
importing ml_dtypes costs 0.8-1 s of CPU on the development machine, as
much as the rest of a cold compile's lowering: runtime/importing.py hides
it while TVM is imported, and the first constant of the first build
imported it all the same. ``constant`` makes the same node (TVM's
``relax.MakeTensorConst`` of a ``tvm.runtime.tensor``, what ``relax.const``
ends with), so a cold compile imports no ml_dtypes."""

from __future__ import annotations

from typing import Any

import numpy as np
import tvm
from tvm_ffi import get_global_func

_MAKE_TENSOR_CONST = get_global_func("relax.MakeTensorConst")


def constant(value: Any, dtype: str | None = None) -> Any:
    """A Relax constant of ``value`` (a numpy array or scalar, or a Python
    number) as ``dtype`` (by default the array's own), a C-contiguous copy
    [RULE LOWER-CONST]."""
    array = np.array(value, dtype=dtype, order="C")
    return _MAKE_TENSOR_CONST(tvm.runtime.tensor(array), None, None)
