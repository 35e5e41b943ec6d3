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
- an entry whose parameters or result are not tensors, keys and tuples of
  them (what a caller can pass and receive).

The lowering's own checks remain (relax_lower.py); each raises
``CompileError`` too, among them a kernel after a data-dependent shape
whose sizes cannot be related (symbolic_shapes.py): that depends on which
run-time sizes the lowering finds equal, so it is decided there, when the
program is built (by ``effir.compile`` for an entry of static shapes).
"""

from __future__ import annotations

from ...ir.expr import (
    Call,
    Op,
    RefCreate,
    RefRead,
    RefWrite,
)
from ...ir.module import IRModule
from ...ir.op import op_def
from ...ir.visitor import pre_order
from ...passes.call_graph import reachable
from .errors import BackendError, CompileError
from .relax_dynamic import DYNAMIC
from .signature import spec_of

LOWERED_OPERATORS = frozenset({"cf.foreach", "cf.while_loop", "io.print", *DYNAMIC})
"""Operators the Relax lowering handles itself (the others need a ``te`` rule)."""


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
                for p in fn.params:
                    spec_of(p.checked_type)
                spec_of(fn.body.checked_type)
            except BackendError as err:
                raise CompileError(f"@{name}: {err.message}", fn.span) from None
