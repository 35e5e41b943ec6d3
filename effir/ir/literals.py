"""Scalar literals (``1f``, ``-2.5f64``, ``7i64``, ``True``): the one place
that maps between literal text and numpy scalars, for both the parser and the
printer, so that every literal the printer writes reads back bit for bit."""

from __future__ import annotations

import math

import numpy as np

SUFFIX_DTYPE = {
    None: None,  # decided by the literal: int32, or float32 with a '.' or exponent
    "f": "float32",
    "f16": "float16",
    "f32": "float32",
    "f64": "float64",
    "i": "int32",
    "i8": "int8",
    "i16": "int16",
    "i32": "int32",
    "i64": "int64",
    "u": "uint32",
    "u8": "uint8",
    "u16": "uint16",
    "u32": "uint32",
    "u64": "uint64",
}

DTYPE_SUFFIX = {
    "float32": "f",
    "float16": "f16",
    "float64": "f64",
    "int32": "",
    "int8": "i8",
    "int16": "i16",
    "int64": "i64",
    "uint8": "u8",
    "uint16": "u16",
    "uint32": "u32",
    "uint64": "u64",
}


class LiteralError(ValueError):
    pass


def literal_value(text: str, suffix: str | None, negative: bool) -> np.ndarray:
    """The 0-d array a numeric literal denotes; LiteralError if it cannot."""
    dtype = SUFFIX_DTYPE[suffix]
    is_float = any(c in text for c in ".eE")
    if dtype is None:
        dtype = "float32" if is_float else "int32"
    if dtype.startswith("float"):
        value = float(text)
        if negative:
            value = -value
        if not math.isfinite(value):
            raise LiteralError(f"literal {'-' if negative else ''}{text} is out of range")
        with np.errstate(over="ignore"):
            result = np.array(value, dtype=dtype)
        if not np.isfinite(result):
            raise LiteralError(
                f"literal {'-' if negative else ''}{text} is out of range for {dtype}"
            )
        return result
    if is_float:
        raise LiteralError(f"literal {text} has a fraction or exponent but an integer suffix")
    value = -int(text) if negative else int(text)
    info = np.iinfo(dtype)
    if not info.min <= value <= info.max:
        raise LiteralError(f"integer literal {value} does not fit in {dtype}")
    return np.array(value, dtype=dtype)


def format_scalar(array: np.ndarray) -> str | None:
    """Literal text for a 0-d array, or None when it needs the metadata section
    (non-finite floats, other dtypes, values whose text would not read back)."""
    if array.ndim != 0:
        return None
    dtype = str(array.dtype)
    if dtype == "bool":
        return "True" if bool(array) else "False"
    suffix = DTYPE_SUFFIX.get(dtype)
    if suffix is None:
        return None
    value = array[()]
    if dtype.startswith("float"):
        if not np.isfinite(value):
            return None
        text = str(value)  # numpy prints the shortest text that reads back
        if text.endswith(".0"):
            text = text[:-2]
        negative = text.startswith("-")
        body = text[1:] if negative else text
        try:
            back = literal_value(body, suffix, negative)
        except LiteralError:
            return None
        if back.tobytes() != array.tobytes():
            return None
        return text + suffix
    return f"{int(value)}{suffix}"
