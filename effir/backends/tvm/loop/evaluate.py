"""[EVAL] A loop body evaluated symbolically into TE tensors: one
placeholder per leaf of ``x_t``, of the state and of each captured value (a
key is a ``uint32[2]`` tensor); non-scalar constants become placeholders
fed their data at each call; each operator's ``te`` rule gives its result.
Calls of functions (bound in the chain, captured or global) are evaluated
in place; anything else is a ``BackendError`` naming the construct."""

from __future__ import annotations

from collections import ChainMap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from tvm import te

from ....ir.expr import (
    Call,
    Constant,
    Expr,
    Function,
    GlobalVar,
    Let,
    Op,
    Tuple,
    TupleGetItem,
    Var,
)
from ....ir.expr_functor import ExprFunctor
from ....ir.functor import on
from ....ir.module import IRModule
from ....ir.op import op_def
from ....ir.types import TupleType, Type
from ..kernel import random_ops, rounding, te_ops  # noqa: F401  (the te rules)
from ..kernel.constant_calls import folded_call
from ..kernel.te_ops.common import scalar_constant
from ..runtime.errors import BackendError
from .values import concrete, leaf_of


@dataclass
class _Closure:
    function: Function
    env: Mapping[Var, Any]


class StepTE(ExprFunctor):
    """[EVAL] The body's step as TE tensors, for one binding of the symbolic
    dimensions. Free variables and non-scalar constants become placeholders.
    An ``ExprFunctor``: a hook ``(expr, env)`` per expression class."""

    def __init__(
        self,
        dims: Mapping[str, int],
        captured: Sequence[Var],
        functions: Mapping[Var, Function],
        module: IRModule | None,
    ) -> None:
        super().__init__()
        self.dims = dims
        self.functions = functions
        self.module = module
        self.captured = {
            v: self._placeholder(v.checked_type, v.name_hint, "captured") for v in captured
        }
        self.constants: list[tuple[te.Tensor, np.ndarray]] = []
        self.active: list[Function] = []

    def _placeholder(self, t: Type, name: str, what: str) -> Any:
        t = concrete(t, self.dims)
        if isinstance(t, TupleType):
            return tuple(self._placeholder(f, f"{name}_{i}", what) for i, f in enumerate(t.fields))
        leaf = leaf_of(t, self.dims, f"the {what} value %{name}")
        return te.placeholder(leaf.shape, leaf.dtype, name=name)

    def evaluate(self, body: Function) -> tuple[Any, Any, Any]:  # type: ignore[override]
        """Placeholders of ``x_t`` and of the state, and the body's result."""
        if len(body.params) != 2:
            raise BackendError(
                f"a loop body takes (x_t, state), this one {len(body.params)} parameter(s)",
                body.span,
            )
        x, state = body.params
        x_ph = self._placeholder(x.checked_type, x.name_hint, "step input")
        s_ph = self._placeholder(state.checked_type, state.name_hint, "state")
        env = ChainMap({x: x_ph, state: s_ph})
        result = self.drive(self._block(body.body, env))
        return x_ph, s_ph, result

    def _block(self, expr: Expr, env: ChainMap):
        """Generator: the value of a let chain."""
        while isinstance(expr, Let):
            if isinstance(expr.value, Function):
                env[expr.var] = _Closure(expr.value, env)
            else:
                env[expr.var] = yield self._value(expr.value, env)
            expr = expr.body
        return (yield self._value(expr, env))

    def _value(self, expr: Expr, env: ChainMap) -> Any:
        """The value of a binding or an argument (its class's hook), or its
        computation to ``yield``. Nested expressions (before to-anf) go
        through the trampoline too."""
        return self.eval(expr, env)

    @on(Tuple)
    def _tuple(self, expr: Tuple, env: ChainMap):
        fields = []
        for f in expr.fields:
            fields.append((yield self._value(f, env)))
        return tuple(fields)

    @on(TupleGetItem)
    def _get(self, expr: TupleGetItem, env: ChainMap):
        value = yield self._value(expr.tuple_value, env)
        if not isinstance(value, tuple):
            raise BackendError("projection of a value that is not a tuple", expr.span)
        return value[expr.index]

    @on(Function)
    def _function(self, expr: Function, env: ChainMap) -> _Closure:
        return _Closure(expr, env)

    @on(Let)
    def _let(self, expr: Let, env: ChainMap):
        return self._block(expr, env.new_child())

    @on(Expr)
    def _other(self, expr: Expr, env: ChainMap) -> Any:
        raise BackendError(
            f"a loop compiled by TVM cannot contain {type(expr).__name__} "
            "(only operator calls, calls of functions, tuples and constants)",
            getattr(expr, "span", None),
        )

    @on(Var, Constant, GlobalVar)
    def _atom(self, expr: Expr, env: ChainMap) -> Any:
        if isinstance(expr, Var):
            if expr in env:
                return env[expr]
            if expr in self.captured:
                return self.captured[expr]
            if expr in self.functions:
                return _Closure(self.functions[expr], {})
            raise BackendError(f"%{expr.name_hint} is not known in the loop body", expr.span)
        if isinstance(expr, GlobalVar):
            if self.module is None or expr.name not in self.module.functions:
                raise BackendError(f"@{expr.name} is not a function of the module given", expr.span)
            return _Closure(self.module.functions[expr.name], {})
        assert isinstance(expr, Constant)
        return self._constant(expr)

    def _constant(self, c: Constant) -> te.Tensor:
        data = c.data
        scalar = scalar_constant(data)
        if scalar is not None:
            return scalar
        ph = te.placeholder(data.shape, str(data.dtype), name="constant")
        self.constants.append((ph, data.copy(order="C")))
        return ph

    @on(Call)
    def _call(self, call: Call, env: ChainMap):
        args = []
        for a in call.args:
            args.append((yield self._value(a, env)))
        callee = call.callee
        if isinstance(callee, Op):
            return self._operator(call, callee, args)
        target = None
        if isinstance(callee, Var | GlobalVar | Function):
            target = yield self._value(callee, env)
        if not isinstance(target, _Closure):
            raise BackendError(
                "a loop compiled by TVM can only call operators and functions", call.span
            )
        fn = target.function
        if any(fn is active for active in self.active):
            raise BackendError("a recursive function cannot be compiled into a loop", call.span)
        if len(fn.params) != len(args):
            raise BackendError(
                f"a call with {len(args)} argument(s) of a function of {len(fn.params)}", call.span
            )
        inner = ChainMap(dict(zip(fn.params, args, strict=True)), target.env)
        self.active.append(fn)
        try:
            return (yield self._block(fn.body, inner))
        finally:
            self.active.pop()

    def _operator(self, call: Call, op: Op, args: list[Any]) -> Any:
        definition = op_def(op)
        if definition.effect != "pure" or "control_flow" in definition.traits:
            raise BackendError(
                f"{op.name} ({definition.effect}, {', '.join(sorted(definition.traits)) or 'no traits'}) "
                "cannot be compiled into a loop: only pure operators can",
                call.span,
            )
        rule = definition.rules.get("te")
        if rule is None:
            raise BackendError(f"{op.name} has no te rule: TVM cannot compute it", call.span)
        if not call.has_type:
            raise BackendError("the loop body has no types: run effir.check first", call.span)
        out_type = concrete(call.checked_type, self.dims)
        folded = folded_call(definition, tuple(args), call.attrs, out_type)  # [RULE TE-FOLD]
        if folded is not None:
            return folded
        value = rule(tuple(args), call.attrs, out_type)
        # [RULE KERNEL-ROUND] (kernel/rounding.py) in gradient programs; a whole loop is built for LLVM only
        return rounding.rounded(value) if rounding.active() else value
