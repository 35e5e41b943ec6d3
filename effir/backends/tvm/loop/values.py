"""The types and values of a loop kernel: the static leaves (tensors and
keys) its buffers hold, the symbolic dimensions bound from its arguments,
and the arguments taken apart into those leaves."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ....ir import type_tree
from ....ir.types import KeyType, TensorType, TupleType, Type
from ..runtime.errors import BackendError


@dataclass(frozen=True)
class Leaf:
    """A tensor the kernel reads or writes: static shape and dtype."""

    shape: tuple[int, ...]
    dtype: str


def leaf_of(t: Type, dims: Mapping[str, int], what: str) -> Leaf:
    """The static leaf of the tensor or key type ``t``, ``dims`` bound."""
    if isinstance(t, KeyType):
        return Leaf((2,), "uint32")
    if not isinstance(t, TensorType):
        raise BackendError(f"{what} has type {t!r}: a loop kernel takes tensors and keys")
    shape = []
    for d in t.shape:
        if isinstance(d, int):
            shape.append(d)
        elif d in dims:
            shape.append(dims[d])
        else:
            raise BackendError(f"{what} has a dimension {d!r} that is not known when compiling")
    return Leaf(tuple(shape), t.dtype)


def concrete(t: Type, dims: Mapping[str, int]) -> Type:
    """``t`` with its symbolic dimensions bound (the te rules want static types)."""

    def bound(leaf: Type) -> Type:
        if isinstance(leaf, TensorType) and not leaf.is_static:
            shape = tuple(dims.get(d, d) if isinstance(d, str) else d for d in leaf.shape)
            return TensorType(shape, leaf.dtype)
        return leaf

    return type_tree.map_leaves(t, bound)


def bind_dims(t: Type, shape: tuple[int, ...], dims: dict[str, int], what: str) -> None:
    """Bind the symbolic dimensions of ``t`` from an argument's ``shape``."""
    if isinstance(t, KeyType):
        expect: tuple[Any, ...] = (2,)
    elif isinstance(t, TensorType):
        expect = t.shape
    else:
        raise BackendError(f"{what} has type {t!r}: a loop kernel takes tensors and keys")
    if len(expect) != len(shape):
        raise BackendError(f"{what}: expected {len(expect)} dimensions, got shape {list(shape)}")
    for d, n in zip(expect, shape, strict=True):
        if isinstance(d, int):
            if d != n:
                raise BackendError(f"{what}: expected shape {list(expect)}, got {list(shape)}")
        elif dims.setdefault(d, n) != n:
            raise BackendError(f"{what}: dimension {d} is {dims[d]} elsewhere, {n} here")


def flatten(t: Type, value: Any, what: str) -> list[Any]:
    """The leaves of ``value``, checked to nest as ``t`` does."""

    def mismatch(_path: tuple[int, ...], ty: TupleType, v: Any) -> BackendError:
        return BackendError(f"{what}: expected a tuple of {len(ty.fields)}, got {_describe(v)}")

    return type_tree.flatten(t, value, mismatch=mismatch)


def _describe(v: Any) -> str:
    if isinstance(v, tuple):
        return f"a tuple of {len(v)}"
    if isinstance(v, np.ndarray):
        return f"an array {v.dtype}{list(v.shape)}"
    return type(v).__name__
