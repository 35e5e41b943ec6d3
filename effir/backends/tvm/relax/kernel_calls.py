"""Kernel calls in the Relax lowering: a primitive function's call as the
call of its scheduled TIR, compiled apart from the Relax module.

- [RULE LOWER-FLAT] Its tuple and key arguments are flattened into tensors, its
  tuple results rebuilt.
- [RULE LOWER-APART] Its TIR is compiled apart from the Relax module
  (relax/apart.py), once per distinct text and types.
- [RULE LOWER-VIEW] A kernel that only rearranges axes, keeping the
  elements' order, is a view of its argument (relax/views.py).
- [RULE LOWER-TAKE-INDEX] Its constant ``take`` indices are arguments
  (relax/take_indices.py).
- A kernel whose types keep a ``?`` dimension goes to relax/symbolic.py
  [RULE LOWER-SHAPEPOLY].
"""

from __future__ import annotations

from typing import Any

from tvm import relax

from ....ir import type_tree
from ....ir.dims import static_shapes
from ....ir.expr import Expr, Function, Var
from ....ir.printer import astext
from ....ir.types import Type
from ..kernel.checks import error_shape
from ..kernel.primitive import KernelIR, leaves, lower_kernel
from .apart import LIBRARY
from .dynamic import DynamicRules
from .state import LoweringState, Walk
from .symbolic import SymbolicRules
from .take_indices import lifted_take_indices
from .types import NeedsStatic, named_dims, relax_type, scheduled
from .views import view_shape


class KernelRules:
    """Kernel calls for relax/lower.py's walk."""

    def __init__(self, state: LoweringState, walk: Walk, dynamic: DynamicRules) -> None:
        self.state = state
        self.bb = state.bb
        self.walk = walk
        self.dynamic = dynamic
        self.symbolic = SymbolicRules(state, self, dynamic)

    def kernel_call(
        self, fn: Function, arguments: tuple[Expr, ...], env: dict[Var, Any], name: str
    ) -> Any:
        """[RULE LOWER-FLAT] A primitive function's call: its arguments' tensors
        in, its result's tensors out."""
        types = [p.checked_type for p in fn.params]
        result_type = fn.body.checked_type
        args = [self.walk.atom(a, env) for a in arguments]
        if not (all(map(static_shapes, types)) and static_shapes(result_type)):
            self.needs_static([*types, result_type])
            shown = [_input_name(a) for a in arguments]
            return self.symbolic.shape_polymorphic(fn, args, types, result_type, name, shown)
        if not leaves(result_type):  # nothing to compute (random.split(k, num=0))
            return self.rebuild(result_type, iter(()))
        view = view_shape(fn)
        if view is not None:  # [RULE LOWER-VIEW]
            return self.bb.emit(self.dynamic.reshape(args[0], view), name)
        fn, indices = lifted_take_indices(fn)  # [RULE LOWER-TAKE-INDEX]
        gv, lowered = self.kernel(fn)
        inputs = [leaf for arg, t in zip(args, types, strict=True) for leaf in self.leaves(arg, t)]
        inputs += [self.bb.constant(c) for c in (*indices, *lowered.constants)]
        outs = [relax_type(t) for t in lowered.signature.outputs]
        return self.call_kernel(gv, inputs, outs, lowered.checks, result_type, name)

    def call_kernel(
        self,
        gv: str,
        inputs: list[Any],
        outs: list[Any],
        checks: tuple[str, ...],
        result_type: Type,
        name: str,
    ) -> Any:
        """The call of a kernel (``outs``: its outputs' types) as a value of
        ``result_type``. A kernel with checks has an error output more
        (kernel/checks.py): a CPU kernel raises by itself, a GPU kernel's error
        code is tested on the host after it."""
        if not outs:  # nothing to compute (random.split(k, num=0) after a mask)
            return self.rebuild(result_type, iter(()))
        if checks:
            outs = [*outs, relax.TensorType(list(error_shape(checks)), "int64")]
        result = self.bb.emit(
            relax.call_dps_packed(gv, inputs, outs if len(outs) > 1 else outs[0]), name
        )
        if len(outs) == 1:  # a tensor, or a tuple of one (random.split(k, num=1))
            return self.rebuild(result_type, iter([result]))
        parts = [self.bb.emit(relax.TupleGetItem(result, i)) for i in range(len(outs))]
        if checks:
            error = parts.pop()
            if self.state.target.kind.name != "llvm":
                self.dynamic.test_error_code(error, checks)
        return self.rebuild(result_type, iter(parts))

    def needs_static(self, types: list[Type]) -> None:
        """[RULE LOWER-SYMBOLIC] Code whose types name the entry's symbolic
        dimensions, where they must be static."""
        needed = {d for t in types for d in named_dims(t)} & self.state.symbols.keys()
        if needed:
            raise NeedsStatic(needed)

    def kernel(
        self, fn: Function, sizes: dict[str, Any] | None = None, inputs: list[str] | None = None
    ) -> tuple[str, KernelIR]:
        """``fn``'s kernel (``sizes``: its symbolic ones, [RULE LOWER-SHAPEPOLY];
        ``inputs``: what its arguments are, for messages)."""
        key = astext(fn) + "|" + ",".join(astext(p.checked_type) for p in fn.params)
        known = self.state.kernels.get(key)
        if known is None:
            lowered = lower_kernel(fn, self.state.target, sizes, inputs=inputs)
            symbol = self.compiled_apart(lowered.module["main"], _identifier(lowered.name))
            known = self.state.kernels[key] = (symbol, lowered)
        return known

    def compiled_apart(self, func: Any, name: str, weight: int = 1) -> str:
        """[RULE LOWER-APART] ``func`` (effir's own kernel or loop) is compiled
        apart from the Relax module, in modules of effir's kernels alone
        (relax/apart.py: in parallel, and once per process for a kernel
        every build shares), linked into the VM's executable; its call is
        ``call_dps_packed`` of the returned symbol. TVM's LLVM code
        generator drops ``noalias`` from every function of a module as soon
        as something in it (the shape functions Relax generates, say) leads
        it to, and effir's loops then run 2.3x slower: compiled apart, they
        keep it whatever the program."""
        symbol = LIBRARY.symbol(scheduled(func), name, self.state.target, weight)
        self.state.apart[symbol] = None
        return symbol

    def leaves(self, value: Any, t: Type) -> list[Any]:
        """The tensors of a value of type ``t`` (a tuple's, in order)."""
        return type_tree.flatten(t, value, lambda v, i: self.bb.emit(relax.TupleGetItem(v, i)))

    def rebuild(self, t: Type, parts: Any) -> Any:
        """The value of type ``t`` made of the next of ``parts``."""
        return type_tree.unflatten(t, parts, make=lambda fields: self.bb.emit(relax.Tuple(fields)))


def _input_name(arg: Expr) -> str:
    """A kernel's argument as a message names it."""
    return f"the input %{arg.name_hint}" if isinstance(arg, Var) else "a constant input"


def _identifier(name: str) -> str:
    cleaned = "".join(c if c.isalnum() or c == "_" else "_" for c in name)
    return cleaned if cleaned and not cleaned[0].isdigit() else f"k_{cleaned}"
