"""Type inference of calls: operators (their type relations, retried while
an argument type is unknown [RULE TYPE-WAIT]), global functions (their symbolic
dimensions renamed per call [RULE TYPE-CALLDIMS]), constructors and closures.

``CallInference`` is a part of ``TypeInferencer`` (``infer_type.py``), split
off at the seam between walking expressions and applying functions; it
uses the inferencer's solver, error reporting and walk (``_flat``,
``_infer``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..ir.diagnostics import Span
from ..ir.expr import Call, Constructor, GlobalVar, Op, Var
from ..ir.functor import on
from ..ir.node import Node
from ..ir.op import op_def
from ..ir.types import ANY, FuncType, IncompleteType, TensorType, Type, TypeVar
from ..ops.relations import NotReady, RelationError
from .type_solver import UnifyError, rename_dims, show


class Pending:
    """A relation waiting for argument types [RULE TYPE-WAIT]."""

    __slots__ = ("attempt", "node", "span", "forcible")

    def __init__(
        self, attempt: Callable[..., None], node: Node, span: Span | None, forcible: bool
    ) -> None:
        self.attempt = attempt
        self.node = node
        self.span = span
        self.forcible = forcible  # attempt(force=True) always completes


class CallInference:
    """The call rules of ``TypeInferencer`` (a mixin: the attributes it
    reads are the inferencer's)."""

    solver: Any
    signatures: dict[str, FuncType]
    pending: list[Pending]
    span_stack: list[Span | None]

    @on(Call)
    def _call(self, expr: Call):
        arg_types = []
        for a in expr.args:
            t = self._flat(a)
            arg_types.append(t if t is not None else (yield self.eval(a)))
        callee = expr.callee
        if isinstance(callee, Op):
            return self._call_op(expr, callee, arg_types)
        if isinstance(callee, GlobalVar) and callee.name in self.signatures:
            return self._call_global(expr, callee.name, arg_types)
        if isinstance(callee, Constructor):
            fn_type = self._constructor_type(callee)
            what = f"constructor {callee.name}"
        else:
            fn_type = yield self.eval(callee)
            what = "the called function"
        fn = self.solver.head(fn_type)
        if isinstance(fn, IncompleteType):
            result = IncompleteType()
            self._unify(fn, FuncType(tuple(arg_types), result), expr, "a call")
            return result
        if not isinstance(fn, FuncType):
            self._error(
                f"{what} is not a function: it has type {show(self.solver.resolve(fn))}", callee
            )
            return IncompleteType()
        fn = self._instantiate(fn)
        return self._apply(expr, fn, arg_types, what)

    def _apply(self, expr: Call, fn: FuncType, arg_types: list[Type], what: str) -> Type:
        if len(fn.arg_types) != len(arg_types):
            self._error(f"{what} takes {len(fn.arg_types)} argument(s), got {len(arg_types)}", expr)
            return IncompleteType()
        for i, (param, arg) in enumerate(zip(fn.arg_types, arg_types, strict=True)):
            try:
                self.solver.unify(param, arg)
            except UnifyError as err:
                self._mismatch(
                    param, arg, call_site(expr.args[i], expr), f"argument {i + 1} of {what}", err
                )
        return fn.ret_type

    def _global_signature(self, name: str) -> FuncType:
        """A global's signature, resolved: its inferred result type must be
        renamed [RULE TYPE-CALLDIMS] and instantiated like its annotated parts."""
        sig = self.solver.resolve(self.signatures[name])
        assert isinstance(sig, FuncType)
        return sig

    def _call_global(self, expr: Call, name: str, arg_types: list[Type]) -> Type:
        sig = self._instantiate(self._global_signature(name))
        if len(sig.arg_types) != len(arg_types):
            self._error(
                f"@{name} takes {len(sig.arg_types)} argument(s), got {len(arg_types)}", expr
            )
            return IncompleteType()
        result = IncompleteType()

        def attempt(force: bool = False) -> None:
            # [RULE TYPE-CALLDIMS] the callee's symbolic dimensions, in the caller's terms.
            # An argument still unknown where the callee has symbolic
            # dimensions waits (NotReady) unless `force`d: then those
            # dimensions become `?`.
            dims: dict[str, object] = {}
            for i, (param, arg) in enumerate(zip(sig.arg_types, arg_types, strict=True)):
                problem = _match_dims(param, self.solver.resolve(arg), dims, force)
                if problem:
                    self._error(
                        f"argument {i + 1} of @{name}: {problem} "
                        f"(expected {show(param)}, got {show(self.solver.resolve(arg))})",
                        call_site(expr.args[i], expr),
                    )
                    return
            renamed = rename_dims(sig, dims)  # type: ignore[arg-type]
            assert isinstance(renamed, FuncType)
            out = self._apply(expr, renamed, arg_types, f"@{name}")
            self._unify(result, out, expr, f"the result of @{name}")

        self._try(attempt, expr, forcible=True)
        return result

    def _call_op_core(self, expr: Call, arg_types: list[Type]) -> Type:
        return self._call_op(expr, expr.callee, arg_types)  # type: ignore[arg-type]

    def _call_op(self, expr: Call, op: Op, arg_types: list[Type]) -> Type:
        definition = op_def(op)
        relation = definition.rules.get("type")
        if relation is None:
            self._error(f"operator {op.name} has no type relation registered", expr)
            return IncompleteType()
        result = IncompleteType()
        control_flow = "control_flow" in definition.traits
        memo: dict[str, Any] = {}

        def attempt(force: bool = False) -> None:
            resolved = tuple(self.solver.resolve(t) for t in arg_types)
            try:
                if control_flow:
                    out = relation(resolved, expr.attrs, _RelationSolver(self, memo, force))
                else:
                    out = relation(resolved, expr.attrs)
            except RelationError as err:
                self._error(
                    f"{op.name}: {err.message}"
                    if not err.message.startswith(op.name)
                    else err.message,
                    expr,
                )
                return
            except _Reported:
                return
            try:
                self.solver.unify(result, out)
            except UnifyError as err:
                self._mismatch(result, out, expr, f"the result of {op.name}", err)

        self._try(attempt, expr, forcible=control_flow)
        return result

    def _try(self, attempt: Callable[..., None], node: Node, forcible: bool = False) -> None:
        try:
            attempt()
        except NotReady:
            self.pending.append(Pending(attempt, node, self._span(node), forcible))

    def _solve_pending(self) -> None:
        """Retry waiting relations until none makes progress [RULE TYPE-WAIT]; then
        force the first waiting global call (its unknown symbolic dimensions
        become `?`), which may unblock the others, and go on."""
        while self.pending:
            progress = False
            waiting, self.pending = self.pending, []
            for item in waiting:
                self.span_stack.append(item.span)
                try:
                    item.attempt()
                    progress = True
                except NotReady:
                    self.pending.append(item)
                finally:
                    self.span_stack.pop()
            if progress:
                continue
            forcible = next((p for p in self.pending if p.forcible), None)
            if forcible is None:
                return
            self.pending.remove(forcible)
            self.span_stack.append(forcible.span)
            try:
                forcible.attempt(force=True)
            except NotReady:  # still waiting on something unknown: it waits unforced
                self.pending.append(Pending(forcible.attempt, forcible.node, forcible.span, False))
            finally:
                self.span_stack.pop()


class _Reported(Exception):
    """A control-flow relation's unification failed and was already reported."""


class _RelationSolver:
    """What a control-flow relation may do: unify types, join them, resolve
    them. ``memo`` is the relation's own, kept across the attempts at one
    call (what it learnt before it had to wait); ``forced`` says that the
    call was forced [RULE TYPE-WAIT], so the relation must not wait again."""

    def __init__(self, inferencer: Any, memo: dict[str, Any], forced: bool) -> None:
        self._inferencer = inferencer
        self.memo = memo
        self.forced = forced

    def unify(self, expected: Type, actual: Type, what: str = "a loop function") -> Type:
        before = len(self._inferencer.errors)
        result = self._inferencer._unify(expected, actual, None, what)
        if len(self._inferencer.errors) > before:
            raise _Reported
        return result

    def join(self, a: Type, b: Type, what: str) -> Type:
        """``Solver.join`` [RULE TYPE-JOIN]: NotReady while a part is unknown,
        unless forced; a mismatch is reported."""
        try:
            return self._inferencer.solver.join(a, b, self.forced)
        except UnifyError as err:
            self._inferencer._mismatch(a, b, None, what, err)
            raise _Reported from None

    def within(self, sub: Type, sup: Type) -> bool:
        return self._inferencer.solver.within(sub, sup)

    def resolve(self, t: Type) -> Type:
        return self._inferencer.solver.resolve(t)


def call_site(node: Node, parent: Node) -> Node:
    """Where to point for a problem with ``node``: a variable's span is its
    binder's, so a use is located at the enclosing expression."""
    return parent if isinstance(node, Var | GlobalVar | Constructor) else node


def _match_dims(param: Type, arg: Type, dims: dict[str, object], force: bool) -> str | None:
    """Bind the callee's symbolic dimensions in ``param`` to ``arg``'s
    dimensions; a message if one is bound to two different sizes. NotReady
    when ``arg`` is unknown where ``param`` has symbolic dimensions."""
    stack = [(param, arg)]
    while stack:
        p, a = stack.pop()
        if isinstance(a, IncompleteType) and not force and _has_symbols(p):
            raise NotReady
        if isinstance(p, TensorType) and isinstance(a, TensorType):
            if len(p.shape) != len(a.shape):
                continue  # reported by unification
            for pd, ad in zip(p.shape, a.shape, strict=True):
                if isinstance(pd, str) and pd != ANY:
                    bound = dims.get(pd)
                    if bound is None or bound == ANY:
                        dims[pd] = ad
                    elif ad != ANY and ad != bound:
                        return f"dimension {pd} is both {bound} and {ad}"
        elif isinstance(p, IncompleteType | TypeVar) or isinstance(a, IncompleteType):
            continue
        else:
            pc = [c for c in p.children() if isinstance(c, Type)]
            ac = [c for c in a.children() if isinstance(c, Type)]
            if type(p) is type(a) and len(pc) == len(ac):
                stack.extend(zip(pc, ac, strict=True))
    return None


def _has_symbols(t: Type) -> bool:
    stack = [t]
    while stack:
        node = stack.pop()
        if isinstance(node, TensorType) and any(
            isinstance(d, str) and d != ANY for d in node.shape
        ):
            return True
        stack.extend(c for c in node.children() if isinstance(c, Type))
    return False
