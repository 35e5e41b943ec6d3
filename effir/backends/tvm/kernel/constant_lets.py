"""[RULE TE-CONSTLET] No ``Let`` of a kernel binds a constant: a let whose value
reads no variable and no buffer is substituted into its body before TVM
builds the kernel (``without_constant_lets``, at every ``tvm.compile``
of effir's TIR).

Why: the program's constants are opaque to TVM's simplifier
[RULE TE-OPAQUE] until its pipeline removes the ``reinterpret`` hiding
them (``FP8StorageLegalize``, on every target, rebuilds each
``reinterpret`` through the helper that drops one to its own dtype). A let bound to an expression of constants (``tanh(2f)``'s clamped
argument, an inlined ``multiply(ones(...), -3f)`` read by ``max``) then
holds an expression that folds: ``LowerIntrin``'s analyzer binds the let
variable to it as it is, ``1f * -3f``, and when it simplifies a condition
that holds the let (a NaN-propagating ``max``, a ``where``, ``nn.relu``)
its simplifier binds the same variable to the folded ``-3f``, and TVM
aborts the build ("Binding of variable v ... conflicts with previous
binding"). Whatever operators meet: a constant reaches a let through a
rule's own lets of its operands, through a scalar constant's compute, or
through ``compute_inline`` of a constant producer into a consumer.

Substituted, the expression has no variable to bind twice; the code is
unchanged (TVM's LLVM code generator substitutes every let anyway, and
LLVM folds the constants, IEEE-exactly). The substituted size is what the
inlining budget already bounds (schedule/inline.py [RULE SCHED-BUDGET]
counts let-substituted nodes). TVM's integer folds are wrong for some
constants [RULE TE-OPAQUE] only where an operand is not a constant, which
this leaves bound."""

from __future__ import annotations

from typing import Any

import tvm
import tvm_ffi
from tvm import tirx

_PURE = 1
"""TVM's ``CallEffectKind.kPure``: the largest effect a constant's calls have."""


def without_constant_lets(module: Any) -> Any:
    """``module`` (a TIR IRModule) with each constant ``Let`` substituted
    into its body [RULE TE-CONSTLET]."""
    functions = {
        gv: func.with_body(_substituted(func.body)) if isinstance(func, tirx.PrimFunc) else func
        for gv, func in module.functions.items()
    }
    return tvm.IRModule(functions, attrs=module.attrs)


def _substituted(stmt: Any) -> Any:
    """One walk (TVM's mutator, no Python recursion): a let's value is
    rewritten before the constancy test, so a let of constant lets is
    constant too."""
    constants: dict[Any, Any] = {}

    def on_let(let: Any, mutator: Any) -> Any:
        value = mutator.mutate(let.value)
        if _constant(value):
            constants[let.var] = value
            return mutator.mutate(let.body)
        body = mutator.mutate(let.body)
        if value.same_as(let.value) and body.same_as(let.body):
            return let
        return tirx.Let(let.var, value, body)

    def on_var(var: Any, _mutator: Any) -> Any:
        return constants.get(var, var)

    return tvm_ffi.structural_mutate(stmt, [(tirx.Let, on_let), (tirx.Var, on_var)])


def _constant(expr: Any) -> bool:
    """Whether ``expr`` reads no variable, no buffer and calls nothing impure."""

    def reads(node: Any) -> Any:
        if isinstance(node, tvm.ir.expr.Call) and isinstance(node.op, tvm.ir.Op):
            effect = node.op.get_attr("TCallEffectKind")
            return tvm_ffi.VisitInterrupt(node) if effect is None or effect > _PURE else None
        return tvm_ffi.VisitInterrupt(node)

    found = tvm_ffi.structural_walk(
        expr,
        [
            (tirx.Var, reads),
            (tvm.ir.expr.TensorLoad, reads),  # a buffer element read
            (tvm.ir.expr.Call, reads),
        ],
    )
    return found is None
