"""Kernels after a data-dependent shape, compiled once for every size
[RULE SHAPEPOLY].

A primitive function whose types keep a ``?`` dimension (``tanh`` of a
``boolean_mask``, a ``sum`` over its rows) cannot be compiled for one
shape. It is compiled once, with its sizes as variables, and lives in the
VM's executable like any kernel, so the program exports:

1. Each ``?`` of a parameter's type gets the size the VM knows for it: the
   Relax shape of the argument (a variable bound where the executor's
   kernels allocated it, ``relax_dynamic.py``), or a variable bound by a
   ``match_cast`` of the argument. Equal sizes (the same Relax expression)
   get one name, ``dyn0``, ``dyn1``, ...; a size the VM knows as a number
   becomes that number.
2. The function is typed again with these names in place of the ``?``s, so
   that its result's dimensions are named too (``tanh`` of ``(dyn0, 3)`` is
   ``(dyn0, 3)``).
3. Its kernel is lowered with each name a TIR variable (kernel.py, the
   rules' ``symbolic_dims``); the TIR function binds them from its
   arguments' shapes when called, and checks that tensors sharing a name
   agree. The call's output shapes are the names' Relax expressions.

Where a step fails (two sizes the types cannot relate, a result whose size
no name gives, a ``te`` rule that needs a static size, such as the random
operators'), the kernel is built per concrete shape from Python
(relax_fallback.py [FALLBACK]); only such programs cannot be exported.

The methods are a mixin of relax_lower's ``_Lowering``.
"""

from __future__ import annotations

import itertools
from typing import Any

import tvm_ffi
from tvm import relax, tirx

from ...ir import type_tree
from ...ir.diagnostics import Error
from ...ir.expr import Function, Var
from ...ir.types import ANY, KeyType, TensorType, TupleType, Type
from ...ir.visitor import ExprMutator
from ...passes.infer_type import infer_expr
from .errors import BackendError
from .kernel import leaves
from .relax_fallback import PythonKernel
from .relax_types import relax_type

_fallback_ids = itertools.count()


class _NotSymbolic(Exception):
    """This kernel cannot be compiled for symbolic sizes (step 1 or 2)."""


class SymbolicLowering:
    """Kernels of data-dependent shapes for ``_Lowering`` (relax_lower.py)."""

    def _shape_polymorphic(
        self, fn: Function, args: list[Any], types: list[Type], result: Type, name: str
    ) -> Any:
        """[RULE SHAPEPOLY] The call of ``fn``, a kernel whose types keep a
        ``?``: compiled once for every size, or per shape from Python."""
        inputs = [leaf for arg, t in zip(args, types, strict=True) for leaf in self._leaves(arg, t)]
        try:
            typed, sizes = self._named_sizes(fn, inputs)
            return self._symbolic_call(typed, sizes, inputs, name)
        except _NotSymbolic:
            pass
        return self._fallback(fn, inputs, types, result, name)

    def _named_sizes(self, fn: Function, inputs: list[Any]) -> tuple[Function, dict[str, Any]]:
        """Steps 1 and 2: ``fn`` typed with named sizes, and each name's
        Relax expression."""
        sizes: dict[str, Any] = {}
        tensors = iter(inputs)

        def named_leaf(t: Type, value: Any) -> Type:
            if isinstance(t, KeyType) or (isinstance(t, TensorType) and t.is_static):
                return t
            assert isinstance(t, TensorType)
            dims = self._dims(value, t)
            shape = [
                d if d != ANY else self._size_name(dims[k], sizes) for k, d in enumerate(t.shape)
            ]
            return TensorType(tuple(shape), t.dtype)

        def named(t: Type) -> Type:
            return type_tree.unflatten(t, tensors, named_leaf, lambda f: TupleType(tuple(f)))

        params = {p: Var(p.name_hint, named(p.checked_type), span=p.span) for p in fn.params}
        body = _Rename(params).mutate(fn.body)
        typed = Function(tuple(params.values()), body, None, fn.type_params, fn.attrs, span=fn.span)
        try:
            infer_expr(typed)
        except Error as err:  # sizes the types cannot relate (dyn0 against dyn1)
            raise _NotSymbolic from err
        for leaf in leaves(typed.body.checked_type):
            if any(isinstance(d, str) and d not in sizes for d in leaf.shape):
                raise _NotSymbolic  # a result size no name gives
        return typed, sizes

    @staticmethod
    def _size_name(size: Any, sizes: dict[str, Any]) -> int | str:
        if isinstance(size, int | tirx.IntImm):
            return int(size)
        for known, expr in sizes.items():
            if tvm_ffi.structural_equal(expr, size, map_free_vars=False):
                return known
        name = f"dyn{len(sizes)}"
        sizes[name] = size
        return name

    def _symbolic_call(
        self, typed: Function, sizes: dict[str, Any], inputs: list[Any], name: str
    ) -> Any:
        """Step 3: the kernel compiled with symbolic sizes, called."""
        try:
            gv, lowered = self._kernel(typed, {d: tirx.Var(d, "int64") for d in sizes})
        except BackendError as err:  # a rule that needs a static size
            raise _NotSymbolic from err
        inputs = inputs + [relax.const(c, str(c.dtype)) for c in lowered.constants]
        outs = [relax_type(t, sizes) for t in lowered.signature.outputs]
        result_type = typed.body.checked_type
        result = self.bb.emit(
            relax.call_dps_packed(gv, inputs, outs if len(outs) > 1 else outs[0]), name
        )
        if len(outs) == 1:
            return result
        parts = iter([self.bb.emit(relax.TupleGetItem(result, i)) for i in range(len(outs))])
        return self._rebuild(result_type, parts)

    def _fallback(
        self, fn: Function, inputs: list[Any], types: list[Type], result: Type, name: str
    ) -> Any:
        """[FALLBACK] A kernel built per concrete shape when called, as a
        Python packed function (relax_fallback.py)."""
        packed = f"effir.fallback.{next(_fallback_ids)}"
        self.fallbacks[packed] = PythonKernel(fn, self.target, types, result)
        outs = [relax_type(t) for t in leaves(result)]
        ty = outs[0] if len(outs) == 1 else relax.TupleType(outs)
        value = self.bb.emit(relax.op.call_pure_packed(packed, *inputs, ty_args=ty), name)
        if len(outs) == 1:
            return value
        parts = iter([self.bb.emit(relax.TupleGetItem(value, i)) for i in range(len(outs))])
        return self._rebuild(result, parts)


class _Rename(ExprMutator):
    def __init__(self, mapping: dict[Var, Var]) -> None:
        super().__init__()
        self.mapping = mapping

    def visit_Var(self, new: Any, old: Any) -> Any:
        return self.mapping.get(old, new)
