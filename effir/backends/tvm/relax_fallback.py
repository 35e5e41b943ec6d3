"""[FALLBACK] Kernels of data-dependent shape, built per concrete shape.

A kernel whose types keep a ``?`` dimension is compiled once with symbolic
sizes (relax_symbolic.py [RULE SHAPEPOLY]); the few that cannot be (a
result size no name gives, such as a concatenation of two masked tensors;
a ``te`` rule that needs a static size, such as the random operators')
come here. The lowering calls such a kernel as a Python packed function
that builds it for the shapes it meets (kernel.build_kernel) and caches it.
Such a program runs from Python only; ``export`` refuses it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import tvm_ffi

from ...ir import type_tree
from ...ir.expr import Function, Var
from ...ir.types import KeyType, TensorType, TupleType, Type
from ...ir.visitor import ExprMutator
from ...passes.infer_type import infer_expr
from ...runtime.values import PRNGKey
from .kernel import build_kernel


class PythonKernel:
    """[FALLBACK] A packed function computing a primitive function on the
    VM's tensors: the kernel for their shapes is built at the first call."""

    def __init__(self, fn: Function, target: Any, types: list[Type], result: Type) -> None:
        self.fn = fn
        self.target = target
        self.types = types
        self.result = result
        self.builds: dict[tuple[tuple[int, ...], ...], Any] = {}

    def __call__(self, *tensors: Any) -> Any:
        arrays = [np.from_dlpack(t) for t in tensors]
        key = tuple(a.shape for a in arrays)
        kernel = self.builds.get(key)
        if kernel is None:
            kernel = self.builds[key] = build_kernel(
                _with_static_types(self.fn, arrays), self.target
            )
        args = _regroup(self.types, iter(arrays))
        result = kernel(*args)
        flat = _flatten_result(result)
        outs = [tvm_ffi.from_dlpack(np.array(a, order="C")) for a in flat]
        return outs[0] if len(outs) == 1 else tvm_ffi.convert(outs)


def _with_static_types(fn: Function, arrays: list[np.ndarray]) -> Function:
    """``fn`` with its parameters typed by ``arrays``' shapes and its body
    checked again, so that every type in it is static."""
    it = iter(arrays)
    params = {p: Var(p.name_hint, _static_type(p.checked_type, it), span=p.span) for p in fn.params}
    renamer = _Rename(params)
    body = renamer.mutate(fn.body)
    copy = Function(tuple(params.values()), body, None, fn.type_params, fn.attrs, span=fn.span)
    infer_expr(copy)
    return copy


class _Rename(ExprMutator):
    def __init__(self, mapping: dict[Var, Var]) -> None:
        super().__init__()
        self.mapping = mapping

    def visit_Var(self, new: Any, old: Any) -> Any:
        return self.mapping.get(old, new)


def _static_type(t: Type, arrays: Any) -> Type:
    def leaf(ty: Type, array: Any) -> Type:
        if isinstance(ty, KeyType):
            return ty
        assert isinstance(ty, TensorType)
        return TensorType(tuple(int(n) for n in array.shape), ty.dtype)

    return type_tree.unflatten(t, arrays, leaf, lambda fields: TupleType(tuple(fields)))


def _regroup(types: list[Type], arrays: Any) -> list[Any]:
    def leaf(ty: Type, a: Any) -> Any:
        return PRNGKey(a) if isinstance(ty, KeyType) else a

    return [type_tree.unflatten(t, arrays, leaf) for t in types]


def _flatten_result(value: Any) -> list[np.ndarray]:
    return [
        top.data if isinstance(top, PRNGKey) else np.asarray(top)
        for top in type_tree.tuple_leaves(value)
    ]
