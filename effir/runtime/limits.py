"""The size limit: how large a value effir agrees to materialise.

A program can ask for a tensor no machine holds (``zeros(shape=[100000,
100000, 100000])``) or for a hundred million keys (``random.split(%k,
num=100000000)``). Left to numpy, such a request ends in a ``MemoryError``
or an ``OverflowError`` (a bug report instead of a user error), or worse,
in an allocation the kernel grants lazily and the machine then runs out of
memory while filling it. So every place that materialises a value of a size
the program chooses (the interpreter's operators, a type that lists one
field per key, a ``.npy`` file's header, the sizes given to ``effir
compile``) first asks ``too_large`` and refuses with a located error.

The limit is ``EFFIR_MAX_TENSOR_BYTES`` (bytes, or with a suffix ``K``,
``M``, ``G``, ``T`` for powers of 1024), read at each check so that a test
or a long-lived process may change it; the default is 4 GiB. A value that
Python holds as one object per element (a key, a field of a tuple) is
counted at ``OBJECT_BYTES`` per element, about what such an object costs.

This module only judges and words the refusal; each caller raises its own
located error with the message (a type error in a relation, an
``EvalError`` in the interpreter, a command error for a file).
"""

from __future__ import annotations

import functools
import math
import os
import re
from collections.abc import Iterable

import numpy as np

from ..ir.types import KeyType, TensorType, TupleType, Type

ENV = "EFFIR_MAX_TENSOR_BYTES"
DEFAULT_MAX_BYTES = 4 << 30
OBJECT_BYTES = 256
_SUFFIXES = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
_SIZE = re.compile(r"(\d+)\s*([kmgtKMGT]?)(?:i?[bB])?")


class LimitSettingError(ValueError):
    """``EFFIR_MAX_TENSOR_BYTES`` holds something that is not a size."""


def max_bytes() -> int:
    """The current limit in bytes (the environment's, else the default)."""
    return _parse_limit(os.environ.get(ENV, ""))


@functools.lru_cache(maxsize=8)
def _parse_limit(text: str) -> int:
    text = text.strip()
    if not text:
        return DEFAULT_MAX_BYTES
    match = _SIZE.fullmatch(text)
    if match is None:
        raise LimitSettingError(
            f"{ENV}={text!r} is not a size (give bytes, such as 8589934592 or 8G)"
        )
    number, scale = match.group(1), _SUFFIXES[match.group(2).upper()]
    return int(number) * scale


def human(nbytes: int) -> str:
    """``nbytes`` for a message: ``3.5 PiB``, ``512 bytes``."""
    if nbytes < 1024:
        return f"{nbytes} bytes"
    value = float(nbytes)
    for unit in ("KiB", "MiB", "GiB", "TiB", "PiB"):
        value /= 1024
        if value < 1024:
            return f"{value:.3g} {unit}"
    return f"{float(nbytes):.3g} bytes"


def tensor_bytes(shape: Iterable[int], dtype: str | np.dtype) -> int:
    """The bytes of a tensor of ``shape`` and ``dtype`` (Python integers:
    a product of huge sizes never wraps around)."""
    return math.prod(int(d) for d in shape) * np.dtype(dtype).itemsize


def too_large(nbytes: int, what: str) -> str | None:
    """None when ``nbytes`` fits under the limit; else why ``what`` is refused."""
    limit = max_bytes()
    if nbytes <= limit:
        return None
    return (
        f"{what} would take {human(nbytes)}, more than the limit of {human(limit)} "
        f"(set {ENV} to allow more)"
    )


def tensor_too_large(shape: Iterable[int], dtype: str | np.dtype, what: str) -> str | None:
    """``too_large`` for a tensor of ``shape`` and ``dtype``."""
    shape = tuple(int(d) for d in shape)
    nbytes = tensor_bytes(shape, dtype)
    if nbytes <= max_bytes():
        return None
    dims = ", ".join(map(str, shape))
    return too_large(nbytes, f"{what} of shape ({dims}) and dtype {dtype}")


def objects_too_large(count: int, what: str) -> str | None:
    """``too_large`` for ``count`` values held as one Python object each."""
    return too_large(int(count) * OBJECT_BYTES, f"{what} ({count} values)")


def static_bytes(t: Type) -> int:
    """The bytes of the parts of a value of type ``t`` whose size the type
    fixes (tensors with static shapes; a key or a tuple field as one object)."""
    total = 0
    stack = [t]
    while stack:
        ty = stack.pop()
        if isinstance(ty, TensorType):
            if all(isinstance(d, int) for d in ty.shape):
                total += tensor_bytes(ty.shape, ty.dtype)  # type: ignore[arg-type]
        elif isinstance(ty, TupleType):
            total += OBJECT_BYTES * len(ty.fields)
            stack.extend(ty.fields)
        elif isinstance(ty, KeyType):
            total += OBJECT_BYTES
    return total


def fully_sized(t: Type) -> bool:
    """Whether ``static_bytes(t)`` is the whole size of a value of type
    ``t``: every tensor in it has a static shape (a symbolic or ``?``
    dimension is known only when the program runs)."""
    stack = [t]
    while stack:
        ty = stack.pop()
        if isinstance(ty, TensorType):
            if not all(isinstance(d, int) for d in ty.shape):
                return False
        elif isinstance(ty, TupleType):
            stack.extend(ty.fields)
        elif not isinstance(ty, KeyType):
            return False
    return True
