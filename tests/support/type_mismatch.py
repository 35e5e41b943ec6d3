"""Helpers first written for tests/passes/test_types_match_values.py, shared with other
test modules (which import tests/support, never each other)."""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import HealthCheck

from effir.backends.interpreter import Closure, ConstructorFunction
from effir.ir import (
    ANY,
    FuncType,
    GlobalTypeVar,
    IRModule,
    KeyType,
    RefType,
    TensorType,
    TupleType,
    Type,
    TypeCall,
    astext,
)
from effir.passes.analyses.type_solver import substitute
from effir.runtime.values import ADTValue, PRNGKey, RefValue, describe_value

COMMON: dict[str, Any] = dict(
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


# ------------------------------------------------------- value vs type
def type_mismatch(
    value: Any, ty: Type, module: IRModule, dims: dict[str, int] | None = None
) -> str | None:
    """Why ``value`` does not have type ``ty`` (None when it does).

    Symbolic dims must take one size throughout (``dims`` holds sizes already
    known, e.g. from the arguments) and ``?`` matches any size. Iterative, so
    a long list is fine."""
    dims = {} if dims is None else dims
    work: list[tuple[Any, Type, str]] = [(value, ty, "the value")]
    while work:
        v, t, where = work.pop()
        shown = f"{where}: expected {astext(t)}, got {describe_value(v, limit=60)}"
        if isinstance(t, TensorType):
            if not isinstance(v, np.ndarray):
                return shown + " (not an ndarray)"
            if str(v.dtype) != t.dtype:
                return shown + f" (dtype {v.dtype})"
            if v.ndim != len(t.shape):
                return shown + f" (rank {v.ndim})"
            for size, dim in zip(v.shape, t.shape, strict=True):
                if dim == ANY:
                    continue
                if isinstance(dim, int):
                    if size != dim:
                        return shown + f" (shape {v.shape})"
                elif dims.setdefault(dim, size) != size:
                    return shown + f" (shape {v.shape}, but {dim} = {dims[dim]})"
        elif isinstance(t, TupleType):
            if not isinstance(v, tuple) or len(v) != len(t.fields):
                return shown
            work.extend(
                (f, ft, f"{where}.{i}") for i, (f, ft) in enumerate(zip(v, t.fields, strict=True))
            )
        elif isinstance(t, KeyType):
            if not isinstance(v, PRNGKey):
                return shown
        elif isinstance(t, RefType):
            if not isinstance(v, RefValue):
                return shown
            work.append((v.value, t.value, f"ref_read({where})"))
        elif isinstance(t, FuncType):
            if not isinstance(v, Closure | ConstructorFunction):
                return shown
        elif isinstance(t, TypeCall | GlobalTypeVar):
            func, args = (t.func, t.args) if isinstance(t, TypeCall) else (t, ())
            data = module.type_defs.get(func.name)
            if data is None:
                return f"{where}: unknown ADT {func.name}"
            if not isinstance(v, ADTValue):
                return shown
            ctor = next((c for c in data.constructors if c.name == v.constructor), None)
            if ctor is None:
                return shown + f" ({v.constructor} is not a constructor of {data.name})"
            if len(v.fields) != len(ctor.inputs) or len(args) != len(data.type_params):
                return shown + " (wrong number of fields or type arguments)"
            mapping = dict(zip(data.type_params, args, strict=True))
            for i, (f, ft) in enumerate(zip(v.fields, ctor.inputs, strict=True)):
                work.append((f, substitute(ft, mapping), f"{where}.{v.constructor}[{i}]"))
        else:  # a checked program's type is concrete: no TypeVar, no IncompleteType
            return f"{where}: the type {astext(t)} is not a concrete type"
    return None
