"""Kernels after a data-dependent shape, compiled once for every size
[RULE LOWER-SHAPEPOLY].

A primitive function whose types keep a ``?`` dimension (``tanh`` of a
``boolean_mask``, a ``sum`` over its rows, a concatenation of two masked
tensors, a dropout of one) cannot be compiled for one shape. It is
compiled once, with its sizes as variables, and lives in the VM's
executable like any kernel, so every such program exports, reloads with
``effir.load`` and runs from the C++ runner:

1. Each ``?`` of a parameter's type gets the size the VM knows for it: the
   Relax shape of the argument (a variable bound where the executor's
   kernels allocated it, ``relax/dynamic.py``), or a variable bound by a
   ``match_cast`` of the argument. Equal sizes (the same Relax expression)
   get one name, ``dyn0``, ``dyn1``, ...; a size the VM knows as a number
   becomes that number.
2. The function's body is typed again with these names in place of the
   ``?``s (kernel/symbolic_shapes.py): every size in it is an int or a name, a
   name standing for an ``int64`` expression of the parameters' sizes
   (``dyn2 = dyn0 + dyn1`` for a concatenation) [RULE SHAPE-SIZEEXPR]; sizes the
   types cannot relate but the interpreter checks at run time (two masks'
   counts meeting in an ``add``) are checked before the kernel runs, with
   numpy's broadcasting, and fail with the interpreter's ``EvalError``
   [RULE SHAPE-SIZECHECK].
3. Its kernel is lowered with each name its TIR expression (kernel/primitive.py, the
   rules' ``symbolic_dims``); the TIR function binds the variables from its
   arguments' shapes when called, and checks that tensors sharing a name
   agree. The call's output shapes are the same expressions of the VM's
   sizes.

What cannot be done so (an operator whose sizes the types cannot relate
and kernel/symbolic_shapes.py has no rule for, a ``te`` rule that needs a static
size) is not compiled: a ``CompileError`` naming the operator, at its
location.

The rules are ``SymbolicRules``, a rule set relax/lower.py's walk holds; they
share relax/state.py's ``LoweringState``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

import tvm_ffi
from tvm import tirx

from ....ir.expr import Expr, Function, Let, Var
from ....ir.functor import Mutator, on, pre_order
from ....ir.types import ANY, KeyType, TensorType, TupleType, Type
from ..kernel.symbolic_shapes import KernelSizes, type_kernel
from .state import LoweringState
from .types import relax_type

if TYPE_CHECKING:
    from .dynamic import DynamicRules


class KernelRules(Protocol):
    """What these rules call of relax/kernel_calls.py's (which builds on
    this module, so it is named by what it does, not imported)."""

    def leaves(self, value: Any, t: Type) -> list[Any]: ...

    def kernel(
        self, fn: Function, sizes: dict[str, Any] | None = None, inputs: list[str] | None = None
    ) -> tuple[str, Any]: ...

    def call_kernel(
        self,
        gv: str,
        inputs: list[Any],
        outs: list[Any],
        checks: tuple[str, ...],
        result_type: Type,
        name: str,
    ) -> Any: ...


class SymbolicRules:
    """Kernels of data-dependent shapes for relax/kernel_calls.py."""

    def __init__(self, state: LoweringState, kernel: KernelRules, dynamic: DynamicRules) -> None:
        self.state = state
        self.bb = state.bb
        self.kernel = kernel
        self.dynamic = dynamic

    def shape_polymorphic(
        self,
        fn: Function,
        args: list[Any],
        types: list[Type],
        result: Type,
        name: str,
        shown: list[str] | None = None,
    ) -> Any:
        """[RULE LOWER-SHAPEPOLY] The call of ``fn``, a kernel whose types keep a
        ``?``: compiled once for every size (``shown``: what its arguments
        are, for messages)."""
        inputs = [
            leaf for arg, t in zip(args, types, strict=True) for leaf in self.kernel.leaves(arg, t)
        ]
        typed, sizes, known = self._named_sizes(fn, inputs)
        for check in sizes.checks:  # [RULE SHAPE-SIZECHECK], before the kernel runs
            self.dynamic.check_shape(
                check.call,
                sizes.substituted(check.ok, known),
                check.message,
                [sizes.substituted(v, known) for v in check.values],
            )
        gv, lowered = self.kernel.kernel(typed, dict(sizes.exprs), shown)
        inputs = inputs + [self.bb.constant(c) for c in lowered.constants]
        relax_sizes = {d: sizes.substituted(e, known) for d, e in sizes.exprs.items()}
        outs = [relax_type(t, relax_sizes) for t in lowered.signature.outputs]
        result_type = typed.body.checked_type
        return self.kernel.call_kernel(gv, inputs, outs, lowered.checks, result_type, name)

    def _named_sizes(
        self, fn: Function, inputs: list[Any]
    ) -> tuple[Function, KernelSizes, dict[str, Any]]:
        """Steps 1 and 2: a copy of ``fn`` typed with named sizes, the
        sizes, and each parameter size's Relax expression."""
        known: dict[str, Any] = {}
        tensors = iter(inputs)

        def named(t: Type) -> Type:
            if isinstance(t, TupleType):
                return TupleType(tuple(named(f) for f in t.fields))
            value = next(tensors)
            if isinstance(t, KeyType) or (isinstance(t, TensorType) and t.is_static):
                return t
            assert isinstance(t, TensorType)
            dims = self.dynamic.dims(value, t)
            shape = [d if d != ANY else _size_name(dims[k], known) for k, d in enumerate(t.shape)]
            return TensorType(tuple(shape), t.dtype)

        retyped = {p: named(p.checked_type) for p in fn.params}
        mapping = {p: Var(p.name_hint, t, span=p.span) for p, t in retyped.items()}
        for node in pre_order(fn.body):  # fresh let variables, typed below
            if isinstance(node, Let):
                mapping[node.var] = Var(node.var.name_hint, span=node.var.span)
        body = _Rename(mapping).mutate_as(fn.body, Expr)
        params = tuple(mapping[p] for p in fn.params)
        typed = Function(params, body, None, fn.type_params, fn.attrs, span=fn.span)
        for p, t in retyped.items():
            mapping[p].set_checked_type(t)
        sizes = KernelSizes(list(known))
        type_kernel(typed, sizes)
        return typed, sizes, known


def _size_name(size: Any, sizes: dict[str, Any]) -> int | str:
    if isinstance(size, int | tirx.IntImm):
        return int(size)
    for known, expr in sizes.items():
        if tvm_ffi.structural_equal(expr, size, map_free_vars=False):
            return known
    name = f"dyn{len(sizes)}"
    sizes[name] = size
    return name


class _Rename(Mutator):
    """Variables, binders included (types hold none)."""

    binders = True

    def __init__(self, mapping: dict[Var, Var]) -> None:
        super().__init__()
        self.mapping = mapping

    @on(Var)
    def var(self, new: Any, old: Any) -> Any:
        return self.mapping.get(old, new)
