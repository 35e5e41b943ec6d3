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

A float let whose value reads no memory is bound to the round trip of
its value through its bits, ``reinterpret(f32, reinterpret(i32, value))``
(float16 and float64 through int16 and int64). Why: each TVM pass that
walks with an analyzer (``InjectPermutedLayout``, ``FlattenBuffer``,
``LowerIntrin``...) binds a let variable whose value has no side effect,
and binding evaluates the value's integer set, an analysis written for
index arithmetic. A let of a read is never bound, so its variable is a
free symbol, a single point; a selection of points (the NaN-propagating
``maximum`` and ``minimum``, ``where``) is the interval between them; a
product or a quotient of that interval by a point of unknown sign builds
``Select(p >= IntImm(float32, 0), ...)``, and TVM aborts the build
("IntImm supports only int or uint or bool type, but float32 was
supplied"): ``negative(multiply(maximum(%a, %b), %c))`` was enough.
Nested, no float value was evaluated so: each held its producer's lets,
reads included, so it was never bound, and the set of a let is never
looked into. The round trip is a call, whose set is everything without
a look inside; TVM's simplifier keeps it (a ``reinterpret`` to the value's
own dtype would not do: ``FP8StorageLegalize`` removes those before
``LowerIntrin``, which binds too); LLVM and nvcc emit it as nothing (the
x86 assembly and the PTX of kernels that built without it are unchanged,
line for line); and it adds two nodes a let, so the build stays linear.
A let of a read is left as it is: it is never bound.

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

All three are one walk (TVM's mutator; a let chain is flattened with an
explicit stack, never Python recursion)."""

from __future__ import annotations

import re
from typing import Any

import tvm
import tvm_ffi
from tvm import tirx

_PURE = 1
"""TVM's ``CallEffectKind.kPure``: the largest effect a constant's calls have."""


def normalised_lets(module: Any) -> Any:
    """``module`` (a TIR IRModule) with its lets floated out of let values,
    its float lets of values that read no memory bound through their bits
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
                    bindings.append((item, _bound_value(item, core)))
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


def _bound_value(var: Any, value: Any) -> Any:
    """What ``var`` is bound to: a float value that reads no memory through
    its bits, opaque to TVM's integer sets [RULE TE-LETFLOAT]; any other
    value as it is."""
    bits = _FLOAT.fullmatch(str(var.ty))
    if bits is None or not _pure(value):
        return value
    integer = "int" + bits.group(1) + (bits.group(2) or "")
    hidden = tirx.call_intrin(integer, "tirx.reinterpret", value)
    return tirx.call_intrin(str(var.ty), "tirx.reinterpret", hidden)


_FLOAT = re.compile(r"float(16|32|64)(x\d+)?")
"""A float dtype with an integer of its width: its bits and its lanes."""


def _constant(expr: Any) -> bool:
    """Whether ``expr`` reads no variable, no buffer and calls nothing impure."""
    return _pure(expr, variables=True)


def _pure(expr: Any, variables: bool = False) -> bool:
    """Whether ``expr`` reads no buffer, calls nothing impure and, with
    ``variables``, reads no variable: TVM's analyzers bind a let to such a
    value (``SideEffect(value) <= kPure``)."""

    def reads(node: Any) -> Any:
        if isinstance(node, tvm.ir.expr.Call) and isinstance(node.op, tvm.ir.Op):
            effect = node.op.get_attr("TCallEffectKind")
            return tvm_ffi.VisitInterrupt(node) if effect is None or effect > _PURE else None
        return tvm_ffi.VisitInterrupt(node)

    kinds = [
        (tvm.ir.expr.TensorLoad, reads),  # a buffer element read
        (tvm.ir.expr.Call, reads),
    ]
    if variables:
        kinds.append((tirx.Var, reads))
    return tvm_ffi.structural_walk(expr, kinds) is None
