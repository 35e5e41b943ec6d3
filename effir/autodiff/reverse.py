"""Reverse mode on one block: the forward as it was, a tape of backward steps.

``Reverse.forward(expr, b)`` copies the bindings of a block into the
builder ``b`` (the forward: the program's own nodes, so that every forward
value keeps its checked type) and records, per binding, a backward step.
``Reverse.backward(bb)`` runs the tape last binding first, emitting into
``bb`` the cotangent of each binding's operands from the cotangent of its
variable (``effir.autodiff.cotangent``), through the operator's VJP rule
(``effir.ir.vjp``). Each let chain is walked with a loop; nested blocks
(branches, clauses, closure bodies) get a ``Reverse`` of their own.

What needs a backward of its own is compiled to a *pullback* closure
(Relay's and JAX's ``vjp``): a global function ``@g`` becomes ``@g_vjp``
returning ``(result, pullback)``; a let-bound closure ``%f`` called
directly becomes ``%f_vjp``, whose pullback also returns the cotangents of
``%f``'s free variables; an ``if`` or ``match`` returns the taken branch's
result and pullback, so only the taken branch's backward runs. An operator
with a binding rule (a loop: ``effir.autodiff.rules``, ``loop_rule``)
rewrites its binding itself.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from effir.passes.analyses.anf_sharing import fresh_binders

from ..ir.block import Block
from ..ir.builder import LetBuilder
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
    Pattern,
    RefCreate,
    RefRead,
    RefWrite,
    Tuple,
    TupleGetItem,
    Var,
    is_atom,
)
from ..ir.expr_functor import Computation, ExprFunctor
from ..ir.functor import on
from ..ir.types import FuncType, TupleType
from ..ir.vjp import NOT_DIFFERENTIABLE, DifferentiationError, VjpContext, vjp_rule
from .cotangent import CT, accumulate, ct_type, differentiable, fields_of, materialize
from .differentiator import ClosureVjp, Differentiator, raise_primitive
from .rules import binding_vjp_rule

Step = Callable[[LetBuilder], None]


class Reverse(ExprFunctor):
    """The forward and the tape of one block (see the module docstring).
    An ``ExprFunctor`` over bound values: ``binding`` dispatches a value to
    its class's hook ``(value, var, b)``."""

    def __init__(self, ad: Differentiator) -> None:
        super().__init__()
        self.ad = ad
        self.tape: list[Step] = []
        self.ct: dict[Var, CT] = {}

    # ------------------------------------------------------------ forward
    def forward(self, expr: Expr, b: LetBuilder) -> Expr:
        """Copy the block ``expr`` into ``b`` with its tape; its result atom."""
        return self.drive(self.forward_steps(expr, b))

    def forward_steps(self, expr: Expr, b: LetBuilder) -> Computation[Expr]:
        """``forward`` on the trampoline: a nested block (a branch, a
        closure, a loop body) is yielded, not called, so nesting depth is
        not Python recursion."""
        block = Block.of(expr)
        for let in block.lets:
            with b.span(let.span):
                yield self.binding(let.var, let.value, b)
        expr = block.tail
        if is_atom(expr):
            return expr
        var = Var("result", span=expr.span)
        var.set_checked_type(expr.checked_type)
        with b.span(expr.span):
            yield self.binding(var, expr, b)
        return var

    def binding(self, var: Var, value: Expr, b: LetBuilder) -> Computation[None] | None:
        """``var = value`` copied into ``b``, its tape step recorded: the hook
        of ``value``'s class (a computation to yield, or done)."""
        return self.eval(value, var, b)

    @on(Expr)
    def _simple(self, value: Expr, var: Var, b: LetBuilder) -> None:
        if isinstance(value, Var):
            b.bind(var, value)
            self.tape.append(lambda bb: self.add(bb, value, self.ct.pop(var, None)))
        elif isinstance(value, Constant | GlobalVar | Op | Constructor):
            b.bind(var, value)
        elif isinstance(value, Tuple):
            b.bind(var, value)
            self.tape.append(lambda bb: self._tuple_back(bb, var, value))
        elif isinstance(value, TupleGetItem):
            b.bind(var, value)
            self.tape.append(lambda bb: self._get_back(bb, var, value))
        elif isinstance(value, RefCreate | RefRead | RefWrite):
            raise DifferentiationError(
                "references remain after state passing: grad differentiates state-passing "
                "(A2) programs",
                value.span,
            )
        else:
            raise DifferentiationError(
                f"cannot differentiate a {type(value).__name__} binding", value.span
            )

    # ---------------------------------------------------------- backward
    def backward(self, bb: LetBuilder) -> None:
        """Emit the tape's steps, last binding first."""
        for step in reversed(self.tape):
            step(bb)

    def add(self, bb: LetBuilder, atom: Expr, ct: CT) -> None:
        """Accumulate ``ct`` into the cotangent of ``atom`` (variables only)."""
        if ct is None or not isinstance(atom, Var) or atom in self.ad.closure_vars:
            return
        t = atom.checked_type
        if not differentiable(t, self.ad.adts):
            return
        self.ct[atom] = accumulate(bb, self.ct.get(atom), ct, t, self.ad.adts)

    def total(self, bb: LetBuilder, atom: Var) -> Expr:
        """The whole cotangent of ``atom``, zeros filled in."""
        return materialize(bb, self.ct.get(atom), atom, atom.checked_type, self.ad.adts)

    # ----------------------------------------------------- simple values
    def _tuple_back(self, bb: LetBuilder, var: Var, value: Tuple) -> None:
        ct = self.ct.pop(var, None)
        if ct is None:
            return
        parts = fields_of(bb, ct, var.checked_type)
        for field, part in zip(value.fields, parts, strict=True):
            self.add(bb, field, part)

    def _get_back(self, bb: LetBuilder, var: Var, value: TupleGetItem) -> None:
        ct = self.ct.pop(var, None)
        t = value.tuple_value.checked_type
        if ct is None or not isinstance(t, TupleType):
            return
        parts: list[CT] = [None] * len(t.fields)
        parts[value.index] = ct
        self.add(bb, value.tuple_value, parts)

    def _construct_back(self, bb: LetBuilder, var: Var, call: Call) -> None:
        """The fields' cotangents, taken out of the constructed value's (adt.py)."""
        ct = self.ct.pop(var, None)
        if ct is None:
            return
        assert isinstance(ct, Expr) and isinstance(call.callee, Constructor)
        parts = self.ad.adts.take_fields(bb, ct, var.checked_type, call.callee, list(call.args))
        for arg, part in zip(call.args, parts, strict=True):
            self.add(bb, arg, part)

    # ------------------------------------------------------------- calls
    @on(Call)
    def _call(self, call: Call, var: Var, b: LetBuilder) -> Computation[None]:
        callee = call.callee
        if isinstance(callee, Op):
            rule = binding_vjp_rule(callee)
            if rule is not None:  # a loop: the rule rewrites the binding (rules.py)
                yield rule(self, var, call, b)
                return
            b.bind(var, call)
            self.tape.append(lambda bb: self._op_back(bb, var, call))
        elif isinstance(callee, GlobalVar) and callee.name in self.ad.module.functions:
            self._global_call(var, call, b)
        elif isinstance(callee, Var) and callee in self.ad.closures:
            info = self.ad.closures[callee]
            self._pullback_call(var, call, info.vjp, list(call.args) + list(info.free), b)
        elif isinstance(callee, Constructor):
            b.bind(var, call)
            if differentiable(var.checked_type, self.ad.adts) and any(
                isinstance(a, Var) and differentiable(a.checked_type, self.ad.adts)
                for a in call.args
            ):
                self.tape.append(lambda bb: self._construct_back(bb, var, call))
        else:
            raise DifferentiationError(
                "a call of a function value that is not a known closure or global function "
                "cannot be differentiated (higher-order code: specialise it first with "
                "partial-eval; docs/autodiff.md)",
                call.span,
            )

    def _op_back(self, bb: LetBuilder, var: Var, call: Call) -> None:
        ct = self.ct.pop(var, None)
        if ct is None or not any(
            isinstance(a, Var) and differentiable(a.checked_type, self.ad.adts) for a in call.args
        ):
            return  # no argument can take a gradient: no rule is needed
        rule = vjp_rule(call)
        if rule is NOT_DIFFERENTIABLE:
            return
        t = var.checked_type
        if isinstance(t, TupleType):
            parts = fields_of(bb, ct, t)
            arg = tuple(
                p if p is None or isinstance(p, Expr) else materialize(bb, p, var, f, self.ad.adts)
                for p, f in zip(parts, t.fields, strict=True)
            )
        else:
            arg = materialize(bb, ct, var, t, self.ad.adts)
        grads = rule(VjpContext(bb, call), call.args, call.attrs, var, arg)
        if len(grads) != len(call.args):
            raise DifferentiationError(
                f"the vjp rule of {call.callee.name} returned {len(grads)} cotangents for "
                f"{len(call.args)} arguments",
                call.span,
            )
        for a, g in zip(call.args, grads, strict=True):
            if g is not None:
                self.add(bb, a, g)

    def _global_call(self, var: Var, call: Call, b: LetBuilder) -> None:
        name = call.callee.name
        if not differentiable(var.checked_type, self.ad.adts) or not any(
            differentiable(a.checked_type, self.ad.adts) for a in call.args if isinstance(a, Var)
        ):
            b.bind(var, call)  # nothing to differentiate: the original function
            return
        self._pullback_call(
            var, call, self.ad.global_vjp(name, call.span, call), list(call.args), b
        )

    def _pullback_call(
        self, var: Var, call: Call, vjp: Expr, targets: list[Expr], b: LetBuilder
    ) -> None:
        """``var = vjp(args).0``; backward: the pullback's cotangents go to ``targets``."""
        pair = b.emit(b.call(vjp, call.args), "vjp")
        b.bind(var, b.get(pair, 0))
        pullback = b.emit(b.get(pair, 1), "pullback")

        def back(bb: LetBuilder) -> None:
            ct = self.ct.pop(var, None)
            if ct is None:
                return
            seed = materialize(bb, ct, var, var.checked_type, self.ad.adts)
            cts = bb.emit(bb.call(pullback, [seed]), "cts")
            for i, target in enumerate(targets):
                if isinstance(target, Var) and differentiable(target.checked_type, self.ad.adts):
                    self.add(bb, target, bb.emit_get(cts, i, "ct"))

        self.tape.append(back)

    # ---------------------------------------------------------- closures
    @on(Function)
    def _function(self, fn: Function, var: Var, b: LetBuilder) -> Computation[None]:
        use = self.ad.closure_use.get(var, set())
        if "value" in use:
            raise DifferentiationError(
                "a closure used as a value (passed, returned or stored) cannot be "
                "differentiated: specialise higher-order code first (partial-eval); "
                "docs/autodiff.md",
                fn.span,
            )
        if "call" in use and "loop" in use:
            raise DifferentiationError(
                "a closure both called and used as a loop body cannot be differentiated: "
                "bind two closures",
                fn.span,
            )
        self.ad.closure_vars.add(var)
        b.bind(var, typed_copy(fn))  # for code that is run, not differentiated
        if "call" not in use:
            self.ad.loop_bodies[var] = fn  # differentiated where the loop is (loop_rule.py)
            return
        free = self.ad.free_differentiable(fn, exclude=var)
        vjp = Var(f"{var.name_hint}_vjp", span=fn.span)
        self.ad.closures[var] = ClosureVjp(vjp, tuple(free))  # before: it may call itself
        b.bind(vjp, (yield function_vjp(self.ad, fn, free)))

    # ------------------------------------------------------------ branches
    @on(If)
    def _if(self, node: If, var: Var, b: LetBuilder) -> Computation[None]:
        free = self.ad.free_differentiable(node)
        then_branch = yield block_vjp(self.ad, node.then_branch, free, b)
        else_branch = yield block_vjp(self.ad, node.else_branch, free, b)
        self._branches(var, b.if_(node.cond, then_branch, else_branch), free, b)

    @on(Match)
    def _match(self, node: Match, var: Var, b: LetBuilder) -> Computation[None]:
        free = self.ad.free_differentiable(node)
        data = node.data
        scrutinee = isinstance(data, Var) and differentiable(data.checked_type, self.ad.adts)
        if scrutinee and data not in free:
            free = [*free, data]
        clauses = []
        for c in node.clauses:
            pattern = c.pattern
            matched = None
            if scrutinee:
                # the clause's pullback adds the scrutinee's cotangent, built
                # from its pattern variables' (adt.py)
                pattern = self.ad.adts.name_wildcards(pattern, data.checked_type)
                matched = (data, pattern)
            body = yield block_vjp(self.ad, c.body, free, b, matched)
            clauses.append(Clause(pattern, body, span=c.span))
        clauses = tuple(clauses)
        self._branches(var, Match(node.data, clauses, node.complete, span=node.span), free, b)

    def _branches(self, var: Var, node: Expr, free: list[Var], b: LetBuilder) -> None:
        pair = b.emit(node, "branch")
        b.bind(var, b.get(pair, 0))
        pullback = b.emit(b.get(pair, 1), "pullback")

        def back(bb: LetBuilder) -> None:
            ct = self.ct.pop(var, None)
            if ct is None or not free:
                return
            seed = materialize(bb, ct, var, var.checked_type, self.ad.adts)
            cts = bb.emit(bb.call(pullback, [seed]), "cts")
            for i, target in enumerate(free):
                self.add(bb, target, bb.emit_get(cts, i, "ct"))

        self.tape.append(back)


def typed_copy(fn: Function) -> Function:
    """A copy of the closure ``fn`` to bind again (``typed_params``)."""
    copy = fresh_binders(fn)
    assert isinstance(copy, Function)
    params, body = typed_params(copy.params, copy.body)
    return dataclasses.replace(copy, params=params, body=body)


def typed_params(params: tuple[Var, ...], body: Expr) -> tuple[tuple[Var, ...], Expr]:
    """``params`` annotated with the types inference gave them, the body
    rebinding each old parameter to its annotated one. The closures ``grad``
    emits (the forward's copy of a closure, a closure's ``%f_vjp``) may no
    longer be called where they are bound (a loop rebuilds its body, so the
    copy of a body is dead), and inference cannot type an unannotated
    parameter of a closure that nothing calls."""
    typed = []
    for p in params:
        if p.type_annotation is None and p.has_type:
            new = Var(p.name_hint, p.checked_type, span=p.span)
            body = Let(p, new, body, span=p.span)
            p = new
        typed.append(p)
    return tuple(typed), body


def block_vjp(
    ad: Differentiator,
    body: Expr,
    free: list[Var],
    outer: LetBuilder,
    matched: tuple[Var, Pattern] | None = None,
) -> Computation[Expr]:
    """The block ``body`` as an expression of ``(result, pullback)``, where
    ``pullback(ct)`` returns the cotangents of ``free``, in order. For a
    clause, ``matched`` is the scrutinee and the clause's pattern: the
    pattern variables' cotangents are added to the scrutinee's."""
    b = outer.child()
    rev = Reverse(ad)
    result = yield rev.forward_steps(body, b)
    t = body.checked_type
    ct = Var("ct", ct_type(t, ad.adts), span=b.current_span)
    bb = b.child()
    rev.add(bb, result, ct)
    rev.backward(bb)
    if matched is not None:
        data, pattern = matched
        scrutinee_ct = ad.adts.pattern_cotangent(
            bb, pattern, data.checked_type, lambda v: rev.total(bb, v)
        )
        rev.add(bb, data, scrutinee_ct)
    cts = bb.emit(bb.tuple([rev.total(bb, v) for v in free]), "cts")
    pullback = b.emit(b.function([ct], bb.finish(cts)), "pullback")
    return b.finish(b.emit(b.tuple([result, pullback]), "vjp"))


def function_vjp(ad: Differentiator, fn: Function, free: list[Var]) -> Computation[Function]:
    """``fn`` as a function returning ``(result, pullback)``; the pullback
    returns the cotangents of the parameters, then of ``free``."""
    b = LetBuilder(fn.span)
    body = yield block_vjp(ad, fn.body, list(fn.params) + free, b)
    result_type = fn.body.checked_type
    targets = [p.checked_type for p in fn.params] + [v.checked_type for v in free]
    pullback_type = FuncType(
        (ct_type(result_type, ad.adts),),
        TupleType(tuple(ct_type(t, ad.adts) for t in targets)),
    )
    ret = TupleType((result_type, pullback_type))
    params, body = typed_params(fn.params, body)
    return Function(params, body, ret, fn.type_params, span=fn.span)


def finish(ad: Differentiator) -> dict[str, Function]:
    """Every ``vjp`` global ``ad`` was asked for (a worklist, not recursion)."""
    while ad.pending:
        key = ad.pending.pop()
        name, fn = ad.sources[key]
        if fn.attrs.get("Primitive") == 1:
            raise_primitive(name, fn)
        ad.functions[ad.vjp_names[key]] = Reverse.drive(function_vjp(ad, fn, []))
    return ad.functions
