"""The state one type inference shares between its parts.

``TypeInferencer`` (infer_type.py, the walk over expressions) and
``CallRules`` (infer_calls.py, the rules of calls) hand this one object
around: every value both read or write is a field here, declared with its
type and what it is for. It also holds what both do with those fields and
nothing else: report an error where the walk is, unify and report a
mismatch, and keep the relations that wait for argument types [RULE TYPE-WAIT].
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from effir.ir.diagnostics import Span, TypeCheckError
from effir.ir.expr import Constructor, Expr, Var
from effir.ir.module import IRModule
from effir.ir.node import Node
from effir.ir.types import FuncType, IncompleteType, TensorType, Type
from effir.ops.relations import NotReady
from effir.passes.analyses.type_solver import Solver, UnifyError, show


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


@dataclass
class InferenceState:
    """One type inference's shared state (one per module or expression checked)."""

    module: IRModule
    """The module whose functions, cells and type definitions are typed."""
    solver: Solver = field(default_factory=Solver)
    """The unknowns and what unification has learnt of them."""
    types: dict[Expr, Type] = field(default_factory=dict)
    """Each expression's type so far (set on the nodes when inference ends)."""
    var_types: dict[Var, Type] = field(default_factory=dict)
    """Each bound variable's type so far."""
    signatures: dict[str, FuncType] = field(default_factory=dict)
    """Each global function's type (annotations, unknowns where there are none)."""
    cell_types: dict[str, Type] = field(default_factory=dict)
    """Each initialised state cell's ``Ref`` type, in declaration order."""
    pending: list[Pending] = field(default_factory=list)
    """Relations waiting for argument types [RULE TYPE-WAIT]."""
    errors: list[TypeCheckError] = field(default_factory=list)
    """The errors found, reported together when inference ends."""
    span_stack: list[Span | None] = field(default_factory=lambda: [None])
    """The spans of the expressions being typed, innermost last: where an
    error in a node without a span is reported."""
    constant_types: dict[tuple[tuple[int, ...], np.dtype], TensorType] = field(default_factory=dict)
    """The type of constants of each shape and dtype, shared."""

    # ------------------------------------------------------------ errors
    def span(self, node: Node | None) -> Span | None:
        if node is not None and node.span is not None:
            return node.span
        for span in reversed(self.span_stack):
            if span is not None:
                return span
        return None

    def error(self, message: str, node: Node | None, span: Span | None = None) -> None:
        self.errors.append(TypeCheckError(message, span or self.span(node)))

    def unify(self, expected: Type, actual: Type, node: Node | None, what: str) -> Type:
        try:
            return self.solver.unify(expected, actual)
        except UnifyError as err:
            return self.mismatch(expected, actual, node, what, err)

    def mismatch(
        self, expected: Type, actual: Type, node: Node | None, what: str, err: UnifyError
    ) -> Type:
        """Report a failed unification; the unknown type the failing part gets.
        (Hot callers unify in their own ``try`` and format ``what`` only here.)"""
        exp, act = self.solver.resolve(expected), self.solver.resolve(actual)
        message = f"type mismatch in {what}: expected {show(exp)}, got {show(act)}"
        inner = err.detail
        if not (show(exp) in inner and show(act) in inner):  # says something new
            message += f" ({inner})"
        self.error(message, node)
        return IncompleteType()

    # ---------------------------------------------------------- [RULE TYPE-WAIT]
    def attempt(self, attempt: Callable[..., None], node: Node, forcible: bool = False) -> None:
        """Run ``attempt`` now, or keep it waiting while it raises NotReady."""
        try:
            attempt()
        except NotReady:
            self.pending.append(Pending(attempt, node, self.span(node), forcible))

    def solve_pending(self) -> None:
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


class InferenceWalk(Protocol):
    """What the call rules call back into ``TypeInferencer``'s walk for."""

    def flat(self, expr: Expr) -> Type | None:
        """The type of a leaf or of an expression of leaves, without a generator."""
        ...

    def eval(self, expr: Expr) -> Any:
        """The type of ``expr``, or a computation to yield."""
        ...

    def instantiate(self, t: FuncType) -> FuncType:
        """``t`` with fresh unknowns for its type parameters."""
        ...

    def constructor_type(self, ctor: Constructor) -> FuncType:
        """A constructor's function type, its type parameters fresh."""
        ...
