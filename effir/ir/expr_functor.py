"""Result-returning walks: ``ExprFunctor``, the functor family's third member.

Why a third one. ``Visitor`` reaches each node once for its side effects and
``Mutator`` rebuilds a node from its rewritten children; neither returns a
value of the pass's own making up the tree (a normal form built with the
blocks a pass opens, a text, a witness, a type) nor lets a hook decide in
which order and in which context its children are computed. TVM's answer
is ``ExprFunctor<R(const Expr&, Args...)>`` (relax/expr_functor.h): one
``VisitExpr_`` per node class that calls ``VisitExpr(child, args...)`` for
the children it wants and returns an ``R``. This is it, for Python and for
programs too deep for Python's recursion:

- **Typed hooks.** A hook is a method marked ``@on(NodeClass, ...)``,
  ``(self, node, *args) -> R``; ``args`` are the pass's own context (the
  bindings a normal form emits into, a layout and an indentation level).
  The table is built once per class and a node class resolved through its
  MRO once (``effir.ir.functor.Functor``, shared with ``Visitor`` and
  ``Mutator``); nothing is looked up by name at run time. A subclass's
  hook replaces its base's for the same class. A node with no hook is an
  ``effir.ir.diagnostics.MissingRuleError`` naming the node class and the
  functor.
- **Iterative.** A hook either *returns* its result (the fast path: an atom
  needs no children, and no generator is started for it) or is a
  generator that ``yield``s a child's evaluation, ``self.eval(child,
  *args)`` (TVM's ``VisitExpr(child, args...)``), or a helper generator of
  the pass, and is sent the result back (``eval`` of an atom is its result
  already; the driver sends it back as it is). ``effir.ir.trampoline.run`` drives
  them with a list as the stack: depth is limited by memory. Yield, never
  ``yield from``, another node's evaluation (see ``trampoline``). A hook
  that *returns* a computation (``return self.eval(body, *args)``) is a
  tail call, replaced by it on the stack.
- **Memoised** when the class says ``memoise = True``: a node reached along
  several edges (a shared sub-expression) is computed once and its result
  reused, keyed by the node's identity alone (so the result must not
  depend on ``args``), in ``self.memo``.

``evaluate(node, *args)`` runs one walk to completion; ``eval(node,
*args)`` is one step, for use inside hooks (a result or a computation to
``yield``). ``effir.ir.evaluator.Evaluator`` is an ``ExprFunctor`` with
the defaults of an abstract interpreter (let chains, branches, scopes).

Real users: ``passes/transforms/anf.py`` (a normal form, hooks per compound
expression with the block the bindings go to), ``passes/analyses/anf_sharing.py``
(``Unfolder``), ``passes/analyses/exhaustiveness.py`` (patterns) and
``ir/printer.py`` (IR to text).
"""

from __future__ import annotations

from types import GeneratorType
from typing import Any, ClassVar, TypeVar, overload

from .diagnostics import MissingRuleError
from .functor import Functor, Plan
from .node import Node
from .trampoline import Computation, run

T = TypeVar("T")


class ExprFunctor(Functor):
    """A result-returning walk (see the module docstring): ``@on`` hooks
    ``(self, node, *args) -> result | Computation``."""

    binders = False  # a hook reads binders, types and patterns from its node
    types = False
    patterns = False

    memoise: ClassVar[bool] = False
    """Compute each node once and reuse its result (``self.memo``)."""

    memo: dict[int, Any]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.memoise and "eval" not in vars(cls):
            cls.eval = cls._eval_memoised  # type: ignore[method-assign]

    def __init__(self) -> None:
        self.memo = {}

    # ------------------------------------------------------------ driving
    @overload
    @staticmethod
    def drive(computation: Computation[T]) -> T: ...

    @overload
    @staticmethod
    def drive(computation: T) -> T: ...

    @staticmethod
    def drive(computation: Any) -> Any:
        """Drive a computation to its result (a value is returned as it is)."""
        return run(computation)

    def evaluate(self, node: Node, *args: Any) -> Any:
        """The result of ``node`` in the context ``args``, run to completion."""
        return run(self.eval(node, *args))

    @classmethod
    def plan(cls, node_type: type) -> Plan:
        """``Functor.plan``, with a hook that raises ``MissingRuleError``
        for a node class that has none: ``plan[0]`` is always callable, so
        a hot caller may apply it without a check."""
        plan = super().plan(node_type)
        if plan[0] is None:
            plan = cls._plans[node_type] = (_missing_rule, *plan[1:])
        return plan

    def eval(self, node: Node, *args: Any) -> Any:
        """``node``'s hook applied: its result, or a computation to ``yield``.
        (Where it is hot, a caller may apply the hook itself:
        ``(self._plans.get(type(node)) or self.plan(type(node)))[0](self,
        node, *args)``.)"""
        return (self._plans.get(type(node)) or self.plan(type(node)))[0](self, node, *args)

    def _eval_memoised(self, node: Node, *args: Any) -> Any:
        key = id(node)
        memo = self.memo
        if key in memo:
            return memo[key]
        result = (self._plans.get(type(node)) or self.plan(type(node)))[0](self, node, *args)
        if type(result) is GeneratorType:
            return self._remember(key, result)
        memo[key] = result
        return result

    def _remember(self, key: int, computation: Computation) -> Computation:
        result = yield computation
        self.memo[key] = result
        return result

    def missing(self, node: Node) -> MissingRuleError:
        """The error for a node class this functor has no hook for."""
        return MissingRuleError(
            f"{type(self).__name__} has no rule for {type(node).__name__}",
            getattr(node, "span", None),
        )


def _missing_rule(functor: ExprFunctor, node: Node, *args: Any) -> Any:
    raise functor.missing(node)


__all__ = ["Computation", "ExprFunctor"]
