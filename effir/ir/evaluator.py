"""Evaluation-order walks: ``Evaluator``, an ``ExprFunctor`` for abstract
interpreters.

Why. ``Visitor`` and ``Mutator`` reach each node once, in field
order, and remember the result; an ``ExprFunctor`` (effir.ir.expr_functor)
returns a result per node from typed hooks. An abstract interpreter (partial
evaluation, the state-passing translation, the linearity verifier) instead
*evaluates*: a ``let``'s value before its body, one branch of an ``if``
or each branch from the same state, a function's body when the pass
decides (where the closure is made, at a call it inlines, later from a
queue), the same body more than once (inlined twice), and it threads a
state of its own (a store, the current value of each cell, the keys used
so far) through in that order. So here each rule decides what is
evaluated, when, and in which context.

The design, modelled on TVM's ``ExprFunctor`` (one method per node class)
and JAX's per-primitive rule tables (``partial_eval.py``: a rule gets the
equation and what is known of its inputs):

- **Typed rules.** A rule is a method marked ``@on(NodeClass, ...)``,
  ``(self, node, *args) -> value``; ``args`` are the pass's own context
  (an environment, the builder residual code goes to, the variable the
  value is bound to). The table is built once per class and a node class
  resolved through its MRO once (``Functor``); nothing is looked up by
  name at run time. A subclass's rule replaces its base's for the same
  class. (All of this, ``eval`` and ``evaluate``, is ``ExprFunctor``'s.)
- **Iterative.** A rule returns its value, or is a generator (a
  *computation*) that ``yield``s sub-computations, ``self.eval(child,
  *args)`` or a helper generator of the pass, and receives their values;
  ``drive`` (``effir.ir.trampoline.run``) runs them with a list as the
  stack (the values of a walk are never generators themselves). A rule must ``yield``, never ``yield
  from``, the evaluation of another node: each level of a ``yield from``
  chain is a level of C recursion when the chain resumes, and a chain as
  deep as the program (500 nested inlinings) overflows it. An exception
  raised below is thrown into the rule that asked, so ``try``/``finally``
  in a rule runs in order. A computation that *returns* a computation
  (``return self.eval(branch, env)``) is replaced by it on the stack: a
  proper tail call, so an interpreter's loop of tail calls runs in
  constant stack.
- **Let chains** are one loop in one frame: the default ``Let`` rule
  evaluates each value, calls ``bind(let, value, *args)``, and evaluates
  the tail, so a 100,000-binding chain is one stack entry. A pass whose
  context changes along the chain (the variable a value is bound to, the
  position of a use) writes the same loop in its own ``@on(Let)`` rule.
- **Branches and scopes.** ``branches(node, bodies, *args)`` evaluates
  each branch of an ``if``/``match`` from the same state: ``fork`` saves
  the state before them, ``enter_branch``/``leave_branch`` bracket each,
  ``join`` makes one state (and value) of their ends. ``scoped(node, body,
  *args)`` evaluates a function body between ``enter_scope`` and
  ``leave_scope``. Both evaluate a body through ``body(node, index, expr,
  *args)``, which a pass that makes a block of each body overrides. The
  defaults do nothing, for a pass with no state.
- **Defaults** for other nodes: a ``Function`` is a value (its body is not
  evaluated: a closure runs when it is called, if the pass wants it to);
  any other node evaluates its expression children in field order, which
  is evaluation order (a call's callee then its arguments, a reference
  then the value written), then passes their values to its ``@after``
  hook ``(self, node, values, *args)``. A node with neither fails loudly,
  naming the node class and the walker.

Real users: ``passes/transforms/partial_eval/evaluator.py`` (rules per compound,
inlining and unrolling through ``yield``), ``passes/transforms/state_passing/
translate.py`` (rules per bound value, threading each cell's current
value), ``passes/analyses/verify_linear/verifier.py`` (rules per expression,
forking and joining the keys used on each path) and
``backends/interpreter.py`` (rules per expression in an environment, tail
positions returned as continuations).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .expr import Expr, Function, If, Let, Match
from .expr_functor import Computation, ExprFunctor
from .functor import on
from .node import Node


class Evaluator(ExprFunctor):
    """An evaluation-order walk (see the module docstring). Override the
    rules and hooks a pass needs; ``evaluate(expr, *args)`` runs one."""

    # -------------------------------------------------------- let chains
    @on(Let)
    def let_chain(self, let: Let, *args: Any) -> Computation:
        """A let chain as one loop: each value, ``bind``, then the tail."""
        expr: Expr = let
        while isinstance(expr, Let):
            value = yield self.eval(expr.value, *args)
            self.bind(expr, value, *args)
            expr = expr.body
        return (yield self.eval(expr, *args))

    def bind(self, let: Let, value: Any, *args: Any) -> None:
        """``let``'s variable now holds ``value`` (default ``Let`` rule)."""
        raise NotImplementedError(f"{type(self).__name__} has no bind for its let chains")

    # --------------------------------------------------------- branches
    @on(If, Match)
    def branching(self, node: If | Match, *args: Any) -> Computation:
        """The scrutinee, then every branch from the same state (an
        abstract interpreter does not know which one runs)."""
        scrutinee = node.cond if isinstance(node, If) else node.data
        yield self.eval(scrutinee, *args)
        if isinstance(node, If):
            bodies: Sequence[Expr] = (node.then_branch, node.else_branch)
        else:
            bodies = tuple(c.body for c in node.clauses)
        return (yield self.branches(node, bodies, *args))

    def branches(self, node: Node, bodies: Sequence[Expr], *args: Any) -> Computation:
        """Each of ``bodies`` evaluated from the state ``fork`` saved, then
        ``join`` of their ends (what ``leave_branch`` made of each)."""
        start = self.fork(node)
        ends = []
        for index, body in enumerate(bodies):
            mark = self.enter_branch(node, index, start, *args)
            value = yield self.body(node, index, body, *args)
            ends.append(self.leave_branch(node, index, mark, value))
        return self.join(node, start, ends)

    def body(self, node: Node, index: int, body: Expr, *args: Any) -> Any:
        """How body ``index`` of ``node`` (a branch, a function's body) is
        evaluated: as any expression, unless the pass makes a block of each."""
        return self.eval(body, *args)

    def fork(self, node: Node) -> Any:
        """The state before the branches of ``node``."""
        return None

    def enter_branch(self, node: Node, index: int, start: Any, *args: Any) -> Any:
        """Branch ``index`` begins from ``start`` (bind a clause's pattern
        variables here); returns a mark for ``leave_branch``."""
        return None

    def leave_branch(self, node: Node, index: int, mark: Any, value: Any) -> Any:
        """Branch ``index`` ended with ``value``: what ``join`` gets of it."""
        return value

    def join(self, node: Node, start: Any, ends: list[Any]) -> Any:
        """One state after the branches, and the value of ``node``."""
        return ends

    # ------------------------------------------------------------ scopes
    def scoped(self, node: Node, body: Expr, *args: Any) -> Computation:
        """``body`` (of the function ``node``) between ``enter_scope`` and
        ``leave_scope``, which runs even when the body raises."""
        mark = self.enter_scope(node)
        try:
            return (yield self.body(node, 0, body, *args))
        finally:
            self.leave_scope(node, mark)

    def enter_scope(self, node: Node) -> Any:
        """A function body begins: returns a mark for ``leave_scope``."""
        return None

    def leave_scope(self, node: Node, mark: Any) -> None:
        """The function body begun at ``mark`` ends: undo what it bound."""

    # ------------------------------------------------------------ others
    @on(Function)
    def function(self, fn: Function, *args: Any) -> Any:
        """A closure is a value: its ``@after`` hook, body not evaluated."""
        return self._finish(fn, [], args)

    @on(Node)
    def children_first(self, node: Node, *args: Any) -> Any:
        """Any other node: its expression children in evaluation order,
        then its ``@after`` hook with their values."""
        children = self.children(node)
        if not children:
            return self._finish(node, [], args)
        return self._children_first(node, children, args)

    def _children_first(self, node: Node, children: list[Node], args: tuple) -> Computation:
        values = []
        for child in children:
            values.append((yield self.eval(child, *args)))
        return self._finish(node, values, args)

    def _finish(self, node: Node, values: list[Any], args: tuple) -> Any:
        hook = self.plan(type(node))[1]
        if hook is None:
            raise self.missing(node)
        return hook(self, node, values, *args)


__all__ = ["Computation", "Evaluator"]
