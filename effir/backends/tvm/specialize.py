"""Specialisation: a program's symbolic dimensions bound to the sizes of
one call's arguments.

Kernels are generated per concrete shape (DESIGN.md: "static code is
generated per concrete shape behind a runtime shape check"): the compiled
program keeps one specialisation per binding of the entry's symbolic
dimensions (``t``, ``b``), and checks each call's arguments against it.
Specialising is a substitution in the entry's type annotations followed by
type inference, which makes static what the binding determines (a
``reshape(%x, newshape=[-1, 64])`` of a ``(t, b, 64)`` tensor becomes
``(24, 64)`` once ``t = 6`` and ``b = 4``). What stays ``?`` depends on data
(``boolean_mask``, a ``while_loop``'s outputs) and is handled by the
executor at run time.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ...ir.module import IRModule
from ...ir.node import Node
from ...ir.printer import astext
from ...ir.types import ANY, KeyType, TensorType, TupleType, Type
from ...ir.visitor import ExprMutator
from ...passes.infer_type import check
from ...runtime.values import PRNGKey
from .errors import BackendError

Dims = dict[str, int]


def bind_dims(params: list[tuple[str, Type]], args: tuple[Any, ...]) -> Dims:
    """The sizes ``args`` give the symbolic dimensions of the parameters'
    types; BackendError for an argument of the wrong shape or dtype, or a
    dimension given two sizes."""
    if len(args) != len(params):
        raise BackendError(f"the program takes {len(params)} argument(s), got {len(args)}")
    dims: Dims = {}
    for (name, t), arg in zip(params, args, strict=True):
        _bind(t, arg, dims, f"argument %{name}")
    return dims


def _bind(t: Type, value: Any, dims: Dims, what: str) -> None:
    work = [(t, value, what)]
    while work:
        ty, v, where = work.pop()
        if isinstance(ty, TupleType):
            if not isinstance(v, tuple | list) or len(v) != len(ty.fields):
                raise BackendError(f"{where} must be a tuple of {len(ty.fields)} values")
            work.extend(
                (f, x, f"{where}.{i}") for i, (f, x) in enumerate(zip(ty.fields, v, strict=True))
            )
        elif isinstance(ty, KeyType):
            data = v.data if isinstance(v, PRNGKey) else np.asarray(v)
            if data.shape != (2,) or data.dtype != np.uint32:
                raise BackendError(f"{where} must be a Key (random.key(...)), got {_shown(data)}")
        elif isinstance(ty, TensorType):
            array = np.asarray(v)
            if array.dtype != np.dtype(ty.dtype) or array.ndim != ty.ndim:
                raise BackendError(f"{where} must be a {astext(ty)}, got {_shown(array)}")
            for d, n in zip(ty.shape, array.shape, strict=True):
                if isinstance(d, int):
                    if d != n:
                        raise BackendError(f"{where} must be a {astext(ty)}, got {_shown(array)}")
                elif d != ANY and dims.setdefault(d, int(n)) != n:
                    raise BackendError(
                        f"{where}: dimension {d} is {dims[d]} in an earlier argument and {n} here"
                    )
        else:
            raise BackendError(f"{where} has type {astext(ty)}, which compiled code cannot take")


def _shown(array: np.ndarray) -> str:
    return f"an array of shape {tuple(array.shape)} and dtype {array.dtype}"


def substitute_dims(t: Type, dims: Mapping[str, int]) -> Type:
    """``t`` with the named dimensions of ``dims`` replaced by their sizes."""
    return _Substitution(dims).mutate(t)  # type: ignore[return-value]


class _Substitution(ExprMutator):
    def __init__(self, dims: Mapping[str, int]) -> None:
        super().__init__()
        self.dims = dims

    def visit_TensorType(self, new: Node, old: Node) -> Node:
        assert isinstance(new, TensorType)
        if all(isinstance(d, int) or d not in self.dims for d in new.shape):
            return new
        shape = tuple(self.dims.get(d, d) if isinstance(d, str) else d for d in new.shape)
        return TensorType(shape, new.dtype)


def specialize(module: IRModule, entry: str, dims: Mapping[str, int]) -> IRModule:
    """``module`` with ``@entry``'s dimensions bound by ``dims`` (its own
    annotations and those inside it), type-checked again. Other functions
    keep their own dimensions (their calls bind them)."""
    if not dims:
        return check(module)
    functions = dict(module.functions)
    functions[entry] = _Substitution(dims).mutate(module.functions[entry])  # type: ignore[assignment]
    return check(IRModule(functions, module.type_defs, module.cells))
