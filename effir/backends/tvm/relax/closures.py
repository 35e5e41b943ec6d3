"""Functions as values in the Relax lowering [RULE LOWER-VMCLOSURE].

A function literal called where it is bound is lifted and called directly
(relax/lower.py [RULE LOWER-CLOSURE]). One used as a value (passed to a global
such as a ``foldl``, stored in an ADT, returned) becomes a VM closure:
``make_closure`` of its lifted function with the captured variables, which
the VM binds as the *last* arguments (``VMClosure::BindLastArgs``), so the
function lifted for a closure takes its parameters first. A global used as
a value is a closure that captures nothing; so is a constructor used as a
value (a function building its tagged tuple, relax/adts.py). A call of a function computed
at run time is ``invoke_closure``; its result, of a Relax ``Object`` type
where the callee's type is unknown, is cast to the call's type.

A primitive function (a kernel) is not a value here: ``CompileError``.

The rules are ``ClosureRules``, a rule set relax/lower.py's walk holds; they
share relax/state.py's ``LoweringState``.
"""

from __future__ import annotations

from typing import Any

from tvm import relax

from effir.passes.transforms.fuse import is_primitive

from ....ir.expr import Call, Function, GlobalVar, Var
from ..runtime.errors import BackendError
from .constants import constant
from .state import LoweringState, Walk
from .types import declare, relax_type


class ClosureRules:
    """Closures as values for relax/lower.py's walk."""

    def __init__(self, state: LoweringState, walk: Walk) -> None:
        self.state = state
        self.bb = state.bb
        self.walk = walk

    def closure_value(self, fn: Function, env: dict[Var, Any], name: str, span: Any) -> Any:
        """The VM closure of the function literal ``fn``: bound to ``%name``
        by a let, or a value of its own where it is written (a function's
        result, as the prelude's ``@compose`` and ``@flip`` return one)."""
        if is_primitive(fn):
            raise BackendError(
                f"the kernel %{name} is used as a value (stored, returned or passed "
                "on): only its calls are compiled",
                span,
            )
        closure = self.walk.lift(fn, env, name, captured_last=True)
        captured = relax.Tuple([env[v] for v in closure.captured])
        return self.bb.emit(relax.op.make_closure(closure.gv, captured), name)

    def global_value(self, gv: GlobalVar) -> Any:
        """A global function as a value: a closure of no captured variable
        (of a function calling it at depth 1 when the global counts its
        depth of recursion, relax/lower.py [RULE LOWER-DEPTH]). A program with
        function values runs on the large stack (runtime/stack.py)."""
        self.state.recursion = True
        target = self.state.globals[gv.name]
        if gv.name in self.state.recursive:
            target = self._at_depth_one(gv.name)
        return self.bb.emit(relax.op.make_closure(target, relax.Tuple([])))

    def _at_depth_one(self, name: str) -> Any:
        """The recursive global ``name`` without its depth parameter: it
        calls the global at depth 1 (made once)."""
        key = "value:" + name
        gv = self.state.constructor_functions.get(key)
        if gv is None:
            fn = self.state.module.functions[name]
            params = [relax.Var(p.name_hint, relax_type(p.checked_type)) for p in fn.params]
            ret = relax_type(fn.body.checked_type)
            gv = declare(self.bb, params, ret, f"value_{name}")
            one = constant(1, "int64")
            body = self.bb.block(
                lambda: self.bb.emit(relax.Call(self.state.globals[name], [one, *params]))
            )
            function = relax.Function(params, body, ret, False)
            self.bb.update_func(gv, function.with_attr("effir_name", gv.name_hint))
            self.state.constructor_functions[key] = gv
        return gv

    def invoke(self, closure: Any, call: Call, env: dict[Var, Any], name: str) -> Any:
        """A call of a function value. TVM's LowerRuntimeBuiltin gives every
        ``invoke_closure`` the type ``Object``, whatever type it asked for:
        a ``TupleGetItem`` of such a result then fails to normalise, and a
        tensor result put in a tuple passed to a typed function (a global
        loop body's state) fails the call's argument check. So every result
        is asked for as an ``Object`` and gets its type back by a cast
        where it is bound (relax/lower.py's ``_value``, relax/adts.py's
        ``typed``), as an ADT's fields do."""
        args = relax.Tuple([self.walk.atom(a, env) for a in call.args])
        return self.bb.emit(relax.op.invoke_closure(closure, args, [relax.ObjectType()]), name)
