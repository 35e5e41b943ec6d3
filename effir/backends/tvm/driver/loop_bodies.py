"""Loop bodies as function literals, before the lowering.

The lowering compiles a loop (``cf.foreach``, ``cf.while_loop``) from its
body's and condition's code: a function literal, written in place or
bound by a ``let`` (relax/loops.py). The language allows any function
value there, and programs have them: a global function (``cf.foreach(@step,
...)``, what ``effir.grad`` makes of a loop whose body it differentiated
into a global), a function parameter, a closure computed at run time. Each
such argument ``%f`` of type ``fn(A, B) -> C`` becomes the literal
``fn (%a: A, %b: B) { %f(%a, %b) }``, which the lowering compiles like any
other body (a call of a global is a direct call; of a closure value, an
``invoke_closure``). The types are those inference gave the argument at
this use, so the program is checked again afterwards (``specialise``).
"""

from __future__ import annotations

from ....ir.expr import Call, Function, GlobalVar, Let, Op, Var
from ....ir.functor import Mutator, on, pre_order
from ....ir.module import IRModule
from ....ir.node import Node
from ....ir.op import op_def
from ....ir.types import FuncType


def literal_loop_bodies(module: IRModule) -> IRModule:
    """``module`` (checked) with every loop body or condition that is not a
    function literal (or a variable let-bound to one) wrapped in one;
    ``module`` itself when there is none."""
    functions = dict(module.functions)
    for name, fn in module.functions.items():
        nodes = list(pre_order(fn))
        if not any(_loop_bodies(n) for n in nodes if isinstance(n, Call)):
            continue
        bound = {n.var for n in nodes if isinstance(n, Let) and isinstance(n.value, Function)}
        functions[name] = _Wrap(bound).mutate(fn)  # type: ignore[assignment]
    if all(functions[name] is fn for name, fn in module.functions.items()):
        return module
    return IRModule(functions, module.type_defs, module.cells)


def _loop_bodies(call: Call) -> list[int]:
    """The argument positions of ``call``'s loop bodies (none: not a loop)."""
    if not isinstance(call.callee, Op):
        return []
    shape = op_def(call.callee).rules.get("loop")
    return [] if shape is None else [body.arg for body in shape.bodies]


class _Wrap(Mutator):
    """Each loop body that is not a literal, wrapped in one (``bound``:
    the variables let-bound to function literals, which are literals)."""

    def __init__(self, bound: set[Var]) -> None:
        super().__init__()
        self.bound = bound

    @on(Call)
    def _call(self, new: Node, old: Node) -> Node:
        assert isinstance(new, Call) and isinstance(old, Call)
        positions = _loop_bodies(new)
        if not positions:
            return new
        args = list(new.args)
        for i in positions:
            arg = args[i]
            if isinstance(arg, Function) or (isinstance(arg, Var) and arg in self.bound):
                continue
            if isinstance(arg, Var | GlobalVar) and old.args[i].has_type:
                args[i] = _literal(arg, old.args[i].checked_type)
        if all(a is b for a, b in zip(args, new.args, strict=True)):
            return new
        return Call(new.callee, tuple(args), new.attrs, span=new.span)


def _literal(fn: Var | GlobalVar, t: object) -> Function:
    """``fn (%p0: A, ...) { fn(%p0, ...) }`` for ``fn`` of type ``t``."""
    assert isinstance(t, FuncType)
    params = tuple(Var(f"p{k}", a, span=fn.span) for k, a in enumerate(t.arg_types))
    return Function(params, Call(fn, params, span=fn.span), span=fn.span)
