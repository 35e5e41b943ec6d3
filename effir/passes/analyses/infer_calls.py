"""Type inference of calls: operators (their type relations, retried while
an argument type is unknown [RULE TYPE-WAIT]), global functions (their symbolic
dimensions renamed per call [RULE TYPE-CALLDIMS]), constructors and closures.

``CallRules`` is a part of ``TypeInferencer`` (``infer_type.py``), split
off at the seam between walking expressions and applying functions: the
inferencer holds it and calls it for every ``Call``. It shares the
inferencer's ``InferenceState`` (infer_state.py: the solver, the
signatures, error reporting, the waiting relations) and calls back into
its walk (``InferenceWalk``: ``flat``, ``eval``, ``instantiate``,
``constructor_type``)."""

from __future__ import annotations

from typing import Any

from effir.ir.expr import Call, Constructor, GlobalVar, Op, Var
from effir.ir.node import Node
from effir.ir.op import op_def
from effir.ir.trampoline import Computation
from effir.ir.types import ANY, FuncType, IncompleteType, TensorType, Type, TypeVar
from effir.ops.relations import NotReady, RelationError
from effir.passes.analyses.infer_state import InferenceState, InferenceWalk
from effir.passes.analyses.type_solver import UnifyError, rename_dims, show


class CallRules:
    """The call rules of ``TypeInferencer``."""

    def __init__(self, state: InferenceState, walk: InferenceWalk) -> None:
        self.state = state
        self.walk = walk

    def call(self, expr: Call) -> Computation[Type]:
        """Generator: the type of a call (its arguments typed first)."""
        arg_types = []
        for a in expr.args:
            t = self.walk.flat(a)
            arg_types.append(t if t is not None else (yield self.walk.eval(a)))
        callee = expr.callee
        if isinstance(callee, Op):
            return self._call_op(expr, callee, arg_types)
        if isinstance(callee, GlobalVar) and callee.name in self.state.signatures:
            return self._call_global(expr, callee.name, arg_types)
        if isinstance(callee, Constructor):
            fn_type = self.walk.constructor_type(callee)
            what = f"constructor {callee.name}"
        else:
            fn_type = yield self.walk.eval(callee)
            what = "the called function"
        fn = self.state.solver.head(fn_type)
        if isinstance(fn, IncompleteType):
            result = IncompleteType()
            self.state.unify(fn, FuncType(tuple(arg_types), result), expr, "a call")
            return result
        if not isinstance(fn, FuncType):
            self.state.error(
                f"{what} is not a function: it has type {show(self.state.solver.resolve(fn))}",
                callee,
            )
            return IncompleteType()
        fn = self.walk.instantiate(fn)
        return self._apply(expr, fn, arg_types, what)

    def _apply(self, expr: Call, fn: FuncType, arg_types: list[Type], what: str) -> Type:
        if len(fn.arg_types) != len(arg_types):
            self.state.error(
                f"{what} takes {len(fn.arg_types)} argument(s), got {len(arg_types)}", expr
            )
            return IncompleteType()
        for i, (param, arg) in enumerate(zip(fn.arg_types, arg_types, strict=True)):
            try:
                self.state.solver.unify(param, arg)
            except UnifyError as err:
                self.state.mismatch(
                    param, arg, call_site(expr.args[i], expr), f"argument {i + 1} of {what}", err
                )
        return fn.ret_type

    def global_signature(self, name: str) -> FuncType:
        """A global's signature, resolved: its inferred result type must be
        renamed [RULE TYPE-CALLDIMS] and instantiated like its annotated parts."""
        sig = self.state.solver.resolve(self.state.signatures[name])
        assert isinstance(sig, FuncType)
        return sig

    def _call_global(self, expr: Call, name: str, arg_types: list[Type]) -> Type:
        sig = self.walk.instantiate(self.global_signature(name))
        if len(sig.arg_types) != len(arg_types):
            self.state.error(
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
                problem = _match_dims(param, self.state.solver.resolve(arg), dims, force)
                if problem:
                    self.state.error(
                        f"argument {i + 1} of @{name}: {problem} "
                        f"(expected {show(param)}, got {show(self.state.solver.resolve(arg))})",
                        call_site(expr.args[i], expr),
                    )
                    return
            renamed = rename_dims(sig, dims)  # type: ignore[arg-type]
            assert isinstance(renamed, FuncType)
            out = self._apply(expr, renamed, arg_types, f"@{name}")
            self.state.unify(result, out, expr, f"the result of @{name}")

        self.state.attempt(attempt, expr, forcible=True)
        return result

    def call_op_core(self, expr: Call, arg_types: list[Type]) -> Type:
        return self._call_op(expr, expr.callee, arg_types)  # type: ignore[arg-type]

    def _call_op(self, expr: Call, op: Op, arg_types: list[Type]) -> Type:
        definition = op_def(op)
        relation = definition.rules.get("type")
        if relation is None:
            self.state.error(f"operator {op.name} has no type relation registered", expr)
            return IncompleteType()
        result = IncompleteType()
        control_flow = "control_flow" in definition.traits
        memo: dict[str, Any] = {}

        def attempt(force: bool = False) -> None:
            resolved = tuple(self.state.solver.resolve(t) for t in arg_types)
            try:
                if control_flow:
                    out = relation(resolved, expr.attrs, _RelationSolver(self.state, memo, force))
                else:
                    out = relation(resolved, expr.attrs)
            except RelationError as err:
                self.state.error(
                    f"{op.name}: {err.message}"
                    if not err.message.startswith(op.name)
                    else err.message,
                    expr,
                )
                return
            except _Reported:
                return
            try:
                self.state.solver.unify(result, out)
            except UnifyError as err:
                self.state.mismatch(result, out, expr, f"the result of {op.name}", err)

        self.state.attempt(attempt, expr, forcible=control_flow)
        return result


class _Reported(Exception):
    """A control-flow relation's unification failed and was already reported."""


class _RelationSolver:
    """What a control-flow relation may do: unify types, join them, resolve
    them. ``memo`` is the relation's own, kept across the attempts at one
    call (what it learnt before it had to wait); ``forced`` says that the
    call was forced [RULE TYPE-WAIT], so the relation must not wait again."""

    def __init__(self, state: InferenceState, memo: dict[str, Any], forced: bool) -> None:
        self._state = state
        self.memo = memo
        self.forced = forced

    def unify(self, expected: Type, actual: Type, what: str = "a loop function") -> Type:
        before = len(self._state.errors)
        result = self._state.unify(expected, actual, None, what)
        if len(self._state.errors) > before:
            raise _Reported
        return result

    def join(self, a: Type, b: Type, what: str) -> Type:
        """``Solver.join`` [RULE TYPE-JOIN]: NotReady while a part is unknown,
        unless forced; a mismatch is reported."""
        try:
            return self._state.solver.join(a, b, self.forced)
        except UnifyError as err:
            self._state.mismatch(a, b, None, what, err)
            raise _Reported from None

    def within(self, sub: Type, sup: Type) -> bool:
        return self._state.solver.within(sub, sup)

    def resolve(self, t: Type) -> Type:
        return self._state.solver.resolve(t)


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
