"""partial-eval: evaluate what is known at compile time, keep the rest.

An online partial evaluator over A-normal form, in the spirit of Relay's
PartialEvaluate, kept deliberately simple so that it always terminates and
never blows up. Every variable gets a *partially static value* (``PV``): the
residual atom that holds it at run time, plus what is known about it: a
constant tensor, the fields of a tuple, the constructor and fields of an ADT
value, or the function (and the static values of its free variables) of a
closure or a global function.

- A pure operator whose arguments are all constants is evaluated with its
  own numpy rule (bit-identical to the interpreter), up to ``MAX_ELEMENTS``
  elements; operators with effects never are.
- A projection of a known tuple, an ``if`` on a constant, a ``match`` on a
  known constructor resolve statically; the taken branch is evaluated in
  place.
- A call of a known function (a closure or a global) is inlined when it is
  not recursive (the function is not already being inlined: recursion is
  residualised, which is the fuel rule that guarantees termination), its body
  is at most ``MAX_INLINE`` nodes, and the pass's total inlining budget (ten
  times the input's size) is not spent: the output is at most linearly
  larger than the input.
- Everything else is residualised in evaluation order, so effects (outputs,
  reads and writes of references) keep their order. Loops are residualised
  with their bodies partially evaluated (no unrolling), and references are
  not tracked (state passing has already turned global state into values).

The pass ends with ``dce``: the bindings of values it resolved statically
(a tuple whose fields were used one by one) are dead, and a dead tuple that
mentions a key or the world token would make the program read as non-linear.
A folded failure stays a run-time failure (the call is kept), unless its
result is unused and dce removes it, as dce's own rules say.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..ir.expr import (
    Call,
    Clause,
    Constant,
    Constructor,
    Expr,
    Function,
    GlobalVar,
    If,
    Let,
    Match,
    Op,
    PatternConstructor,
    PatternTuple,
    PatternVar,
    PatternWildcard,
    Tuple,
    TupleGetItem,
    Var,
    is_atom,
)
from ..ir.module import IRModule
from ..ir.op import op_def
from ..ir.trampoline import Computation, run
from ..ir.types import IncompleteType, TypeVar
from ..ir.visitor import pre_order
from .anf import fresh_binders, to_anf
from .dce import dce
from .infer_type import check
from .infra import Pass, register_pass

MAX_ELEMENTS = 1024
MAX_INLINE = 200


@dataclass
class PV:
    """A partially static value: its residual atom and what is known."""

    atom: Expr
    const: np.ndarray | None = None
    fields: tuple[PV, ...] | None = None
    ctor: Constructor | None = None
    fn: Function | None = None
    env: dict[Var, PV] = field(default_factory=dict)


def partial_eval(module: IRModule) -> IRModule:
    """Every global function partially evaluated (see the module docstring)."""
    module = check(to_anf(module))  # residual closures need their parameters' types
    size = sum(1 for fn in module.functions.values() for _ in pre_order(fn))
    evaluator = _Evaluator(module, budget=10 * size)
    functions = {name: evaluator.global_function(name) for name in module.functions}
    # The bindings of values resolved statically (a tuple whose fields were
    # used one by one) are dead now; left in place, a dead tuple would still
    # mention a key or the world token, and the program would no longer read
    # as linear.
    return dce(IRModule(functions, module.type_defs, module.cells))


_Bindings = list[tuple[Var, Expr]]


class _Evaluator:
    def __init__(self, module: IRModule, budget: int) -> None:
        self.module = module
        self.budget = budget
        self.inlining: list[Function] = []  # the functions being inlined, innermost last
        self.sizes: dict[int, int] = {}
        self.tails: set[Var] = set()  # variables made for the value of a block's tail

    def global_function(self, name: str) -> Function:
        fn = self.module.functions[name]
        self.inlining = [fn]
        env = {p: PV(p) for p in fn.params}
        body = run(self.block(fn.body, env))
        return Function(fn.params, body, fn.ret_type, fn.type_params, fn.attrs, span=fn.span)

    # ----------------------------------------------------------- blocks
    def block(self, expr: Expr, env: dict[Var, PV]) -> Computation[Expr]:
        """``expr`` as a residual let chain, in a scope of its own."""
        out: _Bindings = []
        tail = Var("result", span=expr.span)
        value = yield from self.value(expr, dict(env), out, tail)
        if out and out[-1][0] is value.atom and value.atom in self.tails:
            result = out.pop()[1]  # the tail computation, not a let of it
        else:
            result = value.atom
        for var, bound in reversed(out):
            result = Let(var, bound, result, span=bound.span)
        return result

    def value(self, expr: Expr, env: dict[Var, PV], out: _Bindings, tail: Var | None = None):
        """Evaluate ``expr`` into ``out``; its PV (``tail`` names its last value)."""
        while isinstance(expr, Let):
            pv = yield from self.compound(expr.var, expr.value, env, out)
            env[expr.var] = pv
            expr = expr.body
        if tail is None:
            tail = Var("result", span=expr.span)
        self.tails.add(tail)
        return (yield from self.compound(tail, expr, env, out))

    def atom(self, expr: Expr, env: dict[Var, PV]) -> PV:
        if isinstance(expr, Var):
            return env.get(expr) or PV(expr)
        if isinstance(expr, Constant):
            return PV(expr, const=expr.data)
        if isinstance(expr, GlobalVar) and expr.name in self.module.functions:
            return PV(expr, fn=self.module.functions[expr.name])
        return PV(expr)

    def emit(self, var: Var, value: Expr, out: _Bindings, **known: Any) -> PV:
        out.append((var, value))
        return PV(var, **known)

    # -------------------------------------------------------- compounds
    def compound(self, var: Var, expr: Expr, env: dict[Var, PV], out: _Bindings):
        if is_atom(expr):
            return self.atom(expr, env)
        if isinstance(expr, Tuple):
            fields = tuple(self.atom(f, env) for f in expr.fields)
            tuple_expr = Tuple(tuple(f.atom for f in fields), span=expr.span)
            return self.emit(var, tuple_expr, out, fields=fields)
        if isinstance(expr, TupleGetItem):
            whole = self.atom(expr.tuple_value, env)
            if whole.fields is not None:
                return whole.fields[expr.index]
            return self.emit(var, TupleGetItem(whole.atom, expr.index, span=expr.span), out)
        if isinstance(expr, Function):
            residual = yield from self.closure(expr, env)
            return self.emit(var, residual, out, fn=expr, env=dict(env))
        if isinstance(expr, If):
            cond = self.atom(expr.cond, env)
            if cond.const is not None and cond.const.shape == ():
                taken = expr.then_branch if bool(cond.const) else expr.else_branch
                return (yield from self.value(taken, dict(env), out))
            then_branch = yield self.block(expr.then_branch, env)
            else_branch = yield self.block(expr.else_branch, env)
            return self.emit(var, If(cond.atom, then_branch, else_branch, span=expr.span), out)
        if isinstance(expr, Match):
            return (yield from self.match(var, expr, env, out))
        if isinstance(expr, Call):
            return (yield from self.call(var, expr, env, out))
        # References: residualised as they are, in order.
        rebuilt = _substitute(expr, env)
        return self.emit(var, rebuilt, out)

    def closure(self, fn: Function, env: dict[Var, PV]) -> Computation[Function]:
        """The residual closure. Its parameters get their inferred types: a
        call that taught inference those types may have been inlined away."""
        inner = dict(env)
        params = []
        for p in fn.params:
            typed = _annotated(p)
            inner[p] = PV(typed)
            params.append(typed)
        body = yield self.block(fn.body, inner)
        return Function(tuple(params), body, fn.ret_type, fn.type_params, fn.attrs, span=fn.span)

    def match(self, var: Var, expr: Match, env: dict[Var, PV], out: _Bindings):
        data = self.atom(expr.data, env)
        if data.ctor is not None:
            for clause in expr.clauses:
                bound = _static_match(clause.pattern, data)
                if bound is None:
                    break  # undecidable statically: residualise
                if bound is not False:
                    inner = dict(env)
                    inner.update(bound)
                    return (yield from self.value(clause.body, inner, out))
        clauses = []
        for clause in expr.clauses:
            inner = dict(env)
            for node in pre_order(clause.pattern):
                if isinstance(node, PatternVar):
                    inner[node.var] = PV(node.var)
            body = yield self.block(clause.body, inner)
            clauses.append(Clause(clause.pattern, body, span=clause.span))
        residual = Match(data.atom, tuple(clauses), expr.complete, span=expr.span)
        return self.emit(var, residual, out)

    # ------------------------------------------------------------ calls
    def call(self, var: Var, call: Call, env: dict[Var, PV], out: _Bindings):
        callee = call.callee
        args = [self.atom(a, env) for a in call.args]
        if isinstance(callee, Op):
            definition = op_def(callee)
            if "control_flow" in definition.traits:
                residual_args = []
                for a, pv in zip(call.args, args, strict=True):
                    if isinstance(a, Function):
                        residual_args.append((yield from self.closure(a, env)))
                    else:
                        residual_args.append(pv.atom)
                rebuilt = Call(callee, tuple(residual_args), call.attrs, span=call.span)
                return self.emit(var, rebuilt, out)
            rebuilt = Call(callee, tuple(a.atom for a in args), call.attrs, span=call.span)
            folded = _fold(definition, rebuilt, args)
            if folded is not None:
                return PV(Constant(folded, span=call.span), const=folded)
            return self.emit(var, rebuilt, out)
        if isinstance(callee, Constructor):
            rebuilt = Call(callee, tuple(a.atom for a in args), span=call.span)
            return self.emit(var, rebuilt, out, ctor=callee, fields=tuple(args))
        target = self.atom(callee, env)
        if target.fn is not None and self.inlinable(target.fn, len(args)):
            return (yield from self.inline(target, args, out))
        rebuilt = Call(target.atom, tuple(a.atom for a in args), call.attrs, span=call.span)
        return self.emit(var, rebuilt, out)

    def inlinable(self, fn: Function, arity: int) -> bool:
        if fn in self.inlining or len(fn.params) != arity:
            return False
        size = self.sizes.get(id(fn))
        if size is None:
            size = self.sizes[id(fn)] = sum(1 for _ in pre_order(fn))
        return size <= MAX_INLINE and size <= self.budget

    def inline(self, target: PV, args: list[PV], out: _Bindings):
        fn = target.fn
        assert fn is not None
        self.budget -= self.sizes[id(fn)]
        copy = fresh_binders(fn)
        assert isinstance(copy, Function)
        env = dict(target.env)
        for param, arg in zip(copy.params, args, strict=True):
            env[param] = arg
        self.inlining.append(fn)
        try:
            return (yield from self.value(copy.body, env, out))
        finally:
            self.inlining.pop()


def _annotated(param: Var) -> Var:
    """``param`` with its inferred type as annotation, when it has none and
    the type is closed (no type variables, nothing left unknown)."""
    if param.type_annotation is not None or not param.has_type:
        return param
    t = param.checked_type
    if any(isinstance(n, TypeVar | IncompleteType) for n in pre_order(t)):
        return param
    return Var(param.name_hint, t, span=param.span)


def _fold(definition, call: Call, args: list[PV]) -> np.ndarray | None:
    """The value of a pure operator on constants, or None."""
    if definition.effect != "pure" or not all(a.const is not None for a in args):
        return None
    if definition.name.startswith("random."):
        return None
    try:
        result = definition.rule("numpy")(tuple(a.const for a in args), call.attrs)
    except Exception:  # a failure stays a run-time failure
        return None
    if not isinstance(result, np.ndarray | np.generic):
        return None
    result = np.asarray(result)
    if result.size > MAX_ELEMENTS:
        return None
    return result


def _static_match(pattern, data: PV) -> dict[Var, PV] | bool | None:
    """Bindings if ``pattern`` surely matches ``data``, False if it surely
    does not, None if that is not known statically."""
    work = [(pattern, data)]
    bound: dict[Var, PV] = {}
    while work:
        p, v = work.pop()
        if isinstance(p, PatternWildcard):
            continue
        if isinstance(p, PatternVar):
            bound[p.var] = v
        elif isinstance(p, PatternConstructor):
            if v.ctor is None:
                return None
            if v.ctor.name != p.constructor.name:
                return False
            assert v.fields is not None
            work.extend(zip(p.patterns, v.fields, strict=True))
        elif isinstance(p, PatternTuple):
            if v.fields is None:
                return None
            work.extend(zip(p.patterns, v.fields, strict=True))
        else:
            return None
    return bound


def _substitute(expr: Expr, env: dict[Var, PV]) -> Expr:
    """A reference operation with its atoms replaced by their residual atoms."""
    changes = {}
    for name, kind in type(expr).FIELDS:
        value = getattr(expr, name)
        if kind == "node" and isinstance(value, Var) and value in env:
            changes[name] = env[value].atom
    return dataclasses.replace(expr, **changes) if changes else expr


register_pass(
    Pass(
        "partial-eval",
        partial_eval,
        establishes=frozenset({"anf"}),
        doc="fold constants, resolve static ifs, matches and projections, inline known calls",
    )
)
