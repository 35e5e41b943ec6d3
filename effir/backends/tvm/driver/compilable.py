"""What the TVM backend cannot compile, refused when a program is compiled.

``effir.compile`` builds a program's code per binding of its entry's
dimensions, at the first call that meets the binding; a construct the
Relax lowering cannot compile would then fail at a call. This check runs
on the optimised program when it is compiled and raises ``CompileError``
at the first such construct, naming it:

- references left after state passing (``ref``, ``ref_read``,
  ``ref_write``);
- an operator with no lowering (no ``te`` rule, not a control-flow, output
  or data-dependent-shape operator the lowering knows);
- an entry whose parameters or result are not tensors, keys, tuples and
  ADT values of them (what a caller can pass and receive).

The lowering's own checks remain (relax/lower.py); each raises
``CompileError`` too, among them a kernel after a data-dependent shape
whose sizes cannot be related (kernel/symbolic_shapes.py): that depends on which
run-time sizes the lowering finds equal, so it is decided there, when the
program is built (by ``effir.compile`` for an entry of static shapes).
"""

from __future__ import annotations

from effir.passes.analyses.call_graph import reachable

from ....ir.expr import Call, Function, GlobalVar, Op, RefCreate, RefRead, RefWrite
from ....ir.module import IRModule
from ....ir.op import op_def
from ....ir.types import FuncType, TypeVar
from ....ir.visitor import pre_order
from ..relax.dynamic import DYNAMIC
from ..runtime.errors import BackendError, CompileError
from ..runtime.signature import adt_defs, spec_of

LOWERED_OPERATORS = frozenset({"cf.foreach", "cf.while_loop", "io.print", *DYNAMIC})
"""Operators the Relax lowering handles itself (the others need a ``te`` rule)."""


def callable_part(module: IRModule, entry: str) -> IRModule:
    """``module`` without the functions no possible entry reaches, so that
    the pipeline does not optimise and lower them (a module holding the
    whole prelude: 0.6 s of its 0.7 s). A possible entry is ``entry``, a
    function a cell's initial value names, or one whose declared types
    could be a compiled entry's (no type parameters, no function types: a
    later call may name it)."""
    roots = [entry]
    roots += [n for n, fn in module.functions.items() if _may_be_an_entry(fn)]
    for cell in module.cells.values():
        roots += [n.name for n in pre_order(cell.init) if isinstance(n, GlobalVar)]
    kept = set(reachable(module, *roots))
    if len(kept) == len(module.functions):
        return module
    functions = {n: fn for n, fn in module.functions.items() if n in kept}
    return IRModule(functions, module.type_defs, module.cells)


def _may_be_an_entry(fn: Function) -> bool:
    """Whether ``fn``'s declared types allow it to be a compiled entry
    (undeclared ones may): no type parameter, no function type (an ADT
    value crosses the boundary, runtime/signature.py [RULE RUNTIME-ADTARG])."""
    if fn.type_params:
        return False
    declared = [p.type_annotation for p in fn.params] + [fn.ret_type]
    return not any(
        isinstance(node, FuncType | TypeVar)
        for t in declared
        if t is not None
        for node in pre_order(t)
    )


def refuse_uncompilable(module: IRModule, entry: str = "main") -> None:
    """CompileError at the first construct the TVM backend cannot compile
    in the functions ``entry`` reaches: only those are lowered (a module
    holding a library, the prelude, compiles whatever the functions it does
    not use hold; a call of another entry is refused, located, when it is
    lowered)."""
    for name in reachable(module, entry):
        fn = module.functions[name]
        for node in pre_order(fn):
            if isinstance(node, RefCreate | RefRead | RefWrite):
                raise CompileError(
                    "references are not compiled (state passing removes those of global cells)",
                    node.span,
                )
            if isinstance(node, Call) and isinstance(node.callee, Op):
                definition = op_def(node.callee)
                if definition.name in LOWERED_OPERATORS:
                    continue
                if definition.effect != "pure" or "te" not in definition.rules:
                    raise CompileError(
                        f"the operator {definition.name} is not compiled (no TVM lowering)",
                        node.span,
                    )
        if name == entry:
            try:
                specs = [spec_of(p.checked_type) for p in fn.params]
                specs.append(spec_of(fn.body.checked_type))
                adt_defs(module.type_defs, specs)
            except BackendError as err:
                raise CompileError(f"@{name}: {err.message}", fn.span) from None
