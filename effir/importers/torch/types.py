"""torch dtypes as effir dtypes."""

from __future__ import annotations

from typing import Any

DTYPES = (
    "float16",
    "float32",
    "float64",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "bool",
)


def dtype_of(dtype: Any) -> str | None:
    """``torch.float32`` as ``"float32"``; None for a dtype effir lacks
    (bfloat16, complex, float8)."""
    name = str(dtype).removeprefix("torch.")
    return name if name in DTYPES else None
