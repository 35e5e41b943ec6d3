"""A kernel's lets in the form TVM's pipeline takes in linear time and
without aborting: ``normalised_lets``, applied at every ``tvm.compile`` of
effir's TIR (relax/apart.py, kernel/primitive.py, loop/build.py).

[RULE TE-LETFLOAT] A let nested in the value of another is floated out:
``let x = (let y = a in b) in c`` becomes ``let y = a in let x = b in c``
(each variable bound once: ``ConvertSSA`` first, so nothing is captured;
a let's value is evaluated where the let is, so nothing is evaluated
where it was not). Why: inlining a producer whose compute is a let
([RULE TE-LET] binds every operand read) into a consumer's let puts it
there, and a chain of n elementwise operators inlined into one kernel is
n lets each nested in the next one's value. TVM's analyzers simplify a
let's value when they visit it and again when they bind its variable, so
each level doubled the work of the one inside it: a chain of 10 ``add(multiply(%v,
0.5f), c)`` took 4 s to build, 11 took 15 s, 20 did not finish. Floated,
each value holds no let and the build is linear in the chain (200 lets:
0.7 s). A boolean's let keeps the lets of its value: bound to a value
without them, a vector of booleans makes TVM 0.27's analyzers fail
(``InjectVirtualThread``: "IntImm can only take scalar, but boolx8").

[RULE TE-CONSTLET] No let binds a constant: a let whose value reads no
variable and no buffer is substituted into its body. Why: the program's
constants are opaque to TVM's simplifier [RULE TE-OPAQUE] until its
pipeline removes the ``reinterpret`` hiding them (``FP8StorageLegalize``,
on every target, rebuilds each ``reinterpret`` through the helper that
drops one to its own dtype). A let bound to an expression of constants
(``tanh(2f)``'s clamped argument, an inlined ``multiply(ones(...), -3f)``
read by ``max``) then holds an expression that folds: ``LowerIntrin``'s
analyzer binds the let variable to it as it is, ``1f * -3f``, and when it
simplifies a condition that holds the let (a NaN-propagating ``max``, a
``where``, ``nn.relu``) its simplifier binds the same variable to the
folded ``-3f``, and TVM aborts the build ("Binding of variable v ...
conflicts with previous binding"). A constant reaches a let through a
rule's own lets of its operands, through a scalar constant's compute, or
through ``compute_inline`` of a constant producer. Substituted, it has no
variable to bind twice; the code is unchanged (TVM's LLVM code generator
substitutes every let anyway, and LLVM folds the constants, IEEE-exactly),
and the size is what the inlining budget already bounds (schedule/inline.py
[RULE SCHED-BUDGET] counts let-substituted nodes). TVM's wrong integer and
float folds [RULE TE-OPAQUE] need an operand that is not a constant, which
stays bound.

Both are one walk (TVM's mutator; a let chain is flattened with an explicit
stack, never Python recursion)."""

from __future__ import annotations

from typing import Any

import tvm
import tvm_ffi
from tvm import tirx

_PURE = 1
"""TVM's ``CallEffectKind.kPure``: the largest effect a constant's calls have."""


def normalised_lets(module: Any) -> Any:
    """``module`` (a TIR IRModule) with its lets floated out of let values
    [RULE TE-LETFLOAT] and its constant lets substituted [RULE TE-CONSTLET]."""
    module = tirx.transform.ConvertSSA()(module)
    functions = {
        gv: func.with_body(_normalised(func.body)) if isinstance(func, tirx.PrimFunc) else func
        for gv, func in module.functions.items()
    }
    return tvm.IRModule(functions, attrs=module.attrs)


def _normalised(stmt: Any) -> Any:
    constants: dict[Any, Any] = {}

    def on_let(let: Any, mutator: Any) -> Any:
        # A let and the lets in its values and bodies, in evaluation order,
        # as one flat chain: ("expr", e) flattens e, ("keep", e) does not,
        # ("bind", var) binds var to the value flattened last.
        bindings: list[tuple[Any, Any]] = []
        core: Any = None
        work: list[tuple[str, Any]] = [("expr", let)]
        while work:
            kind, item = work.pop()
            if kind == "bind":
                if _constant(core):
                    constants[item] = core
                else:
                    bindings.append((item, core))
            elif kind == "expr" and isinstance(item, tirx.Let):
                # a boolean's value keeps its lets [RULE TE-LETFLOAT]
                inner = "keep" if str(item.var.ty) == "bool" else "expr"
                work += [("expr", item.body), ("bind", item.var), (inner, item.value)]
            else:
                core = mutator.mutate(item)
        for var, value in reversed(bindings):
            core = tirx.Let(var, value, core)
        return core

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
