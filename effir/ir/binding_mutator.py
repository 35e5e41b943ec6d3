"""Rewriting a program binding by binding: ``BindingMutator``, a mutator
that owns a ``LetBuilder``.

Why. A ``Mutator`` (effir.ir.functor) replaces a node by one node: a rule
that turns one binding into several (an operator expanded into its parts, a
value taken apart field by field) has to return a nested ``let`` and flatten
it afterwards, and one that removes a binding has to substitute its uses by
hand. TVM Relax's ``ExprMutator`` answers with the builder it owns
(``builder_``): it visits each binding of a block with the block's builder
open, a binding rule emits as many bindings as it likes (``builder_->Emit``)
or none, re-emitting an unchanged binding is the default
(``ReEmitBinding``), a variable whose definition changes is remapped at its
uses (``var_remap_``), and each nested scope (a function body, an ``if``'s
branches: ``VisitWithNewScope``) gets a builder of its own. This is that
design for effir, where a block is a let chain (``effir.ir.block``):

- **A rule per class of bound value.** ``visit_binding(var, value)``
  dispatches on ``value``'s class to the hook marked ``@on(Cls)``,
  ``(self, value, var)``, with ``self.builder`` open on the block the
  binding is in and its span scope set to the binding's ``let``; the rule
  emits into it (``self.builder.emit``, ``bind``, ``call_op``, ...) what
  replaces the binding. The default (``@on(Expr)``) rewrites the value
  (``visit_expr``: variables remapped, nested blocks visited) and re-emits
  it (``reemit``). A rule that emits nothing for ``var`` says what its
  uses become: ``self.var_remap[var] = atom``.
- **Nested blocks.** A branch, a clause's body, a function body and a
  ``let`` met where a value is expected are each visited with a child
  builder (``visit_with_new_scope``) and finished into a let chain there.
  ``emit_block(block)`` emits a block's bindings into the builder that is
  open instead (a rule that splices an expansion in place); the block's
  tail goes through ``visit_tail``, which may emit bindings too.
- **Definitions.** ``visit_var_def(var)`` gives the variable a binder
  becomes (itself by default): a let's, before its value is visited (a
  recursive closure's uses see it), a parameter's and a pattern variable's;
  a new one is recorded in ``var_remap``.
- **Unchanged is identical.** A block whose bindings all come back as they
  were keeps its ``let`` nodes (``Block.rebuild``), and a node none of
  whose children changed is returned as it is: the identity mutator
  returns its input.
- **Iterative.** A chain is a loop (one stack entry for 100,000
  bindings); a rule or a visit that needs a nested block visited is a
  generator that ``yield``s it (``yield self.visit_with_new_scope(body)``,
  ``yield self.visit_expr(value)``) on the trampoline
  (``effir.ir.trampoline``), so nesting depth is not Python recursion.
  Yield, never ``yield from``. ``visit_expr`` of an atom, or of a value
  whose operands are atoms, returns at once (no generator is started).

A program in A-normal form shares nothing but variables; a compound value
reached along two edges (the text's graph form) is visited once per edge.

Real users: ``passes/transforms/explicate.py`` (an operator's expansion
spliced in place of its binding); ``tests/ir/test_binding_mutator.py``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from types import GeneratorType
from typing import Any, TypeVar

from .block import Block
from .builder import LetBuilder
from .expr import (
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
    PatternVar,
    Var,
)
from .expr_functor import Computation, ExprFunctor
from .functor import Mutator, on, pre_order, rewritten_as
from .node import Node

_LEAVES = (GlobalVar, Constant, Op, Constructor)


E = TypeVar("E", bound=Expr)


class BindingMutator(ExprFunctor):
    """Rewrites blocks binding by binding (see the module docstring):
    ``@on(Cls)`` hooks ``(self, value, var)`` emit into ``self.builder``."""

    def __init__(self) -> None:
        super().__init__()
        self.builder = LetBuilder()
        self.var_remap: dict[Var, Expr] = {}

    # -------------------------------------------------------- entry points
    def mutate(self, expr: Expr) -> Expr:
        """``expr`` rewritten (a function, a block, any expression)."""
        return self.drive(self.visit_expr(expr))

    def mutate_as(self, expr: Expr, kind: type[E]) -> E:
        """``mutate(expr)`` checked to be a ``kind`` (as ``Mutator.mutate_as``,
        TVM's ``Downcast``): a hook that turns a function into something else
        is a bug of its pass, reported here."""
        return rewritten_as(self, expr, self.mutate(expr), kind)

    # -------------------------------------------------------------- blocks
    def visit_with_new_scope(self, expr: Expr) -> Computation[Expr]:
        """``expr`` as a block of its own: its bindings emitted into a child
        of the open builder and finished around its tail."""
        outer = self.builder
        self.builder = outer.child()
        try:
            block = Block.of(expr)
            tail = yield self.emit_block(block)
            return block.rebuild(self.builder.bindings, tail)
        finally:
            self.builder = outer

    def emit_block(self, block: Block) -> Computation[Expr]:
        """Each binding of ``block`` visited into the open builder, in
        order; the tail rewritten (not bound)."""
        b = self.builder
        remap = self.var_remap
        for let in block.lets:
            var = let.var
            defined = self.visit_var_def(var)
            if defined is not var:
                remap[var] = defined
            with b.span(let.span):
                yield self.visit_binding(var, let.value)
        return (yield self.visit_tail(block.tail))

    def visit_tail(self, tail: Expr) -> Expr | Computation[Expr]:
        """The expression a block ends in, rewritten (``visit_expr``); a
        pass may emit bindings before it, as a rule does."""
        return self.visit_expr(tail)

    # ------------------------------------------------------------ bindings
    def visit_binding(self, var: Var, value: Expr) -> Computation[None] | None:
        """``let var = value`` replaced by what its value's rule emits."""
        return self.eval(value, var)

    @on(Expr)
    def reemit_binding(self, value: Expr, var: Var) -> Computation[None] | None:
        """The default rule: the value rewritten (``visit_expr``), bound again."""
        new = self.visit_expr(value)
        if isinstance(new, GeneratorType):
            return self._reemit_after(var, new)
        assert isinstance(new, Expr)
        self.reemit(var, new)
        return None

    def _reemit_after(self, var: Var, computation: Computation[Expr]) -> Computation[None]:
        self.reemit(var, (yield computation))

    def reemit(self, var: Var, value: Expr) -> Var:
        """``let var = value`` in the open builder, under the variable
        ``var``'s definition became (``visit_var_def``); that variable."""
        defined = self.var_remap.get(var, var)
        return self.builder.bind(defined if type(defined) is Var else var, value)

    def visit_var_def(self, var: Var) -> Var:
        """The variable a binder ``var`` becomes (itself unless overridden)."""
        return var

    # --------------------------------------------------------- expressions
    def visit_expr(self, expr: Expr) -> Expr | Computation[Expr]:
        """``expr`` with its variables remapped and its nested blocks
        visited: the expression itself, or a computation of it."""
        cls = type(expr)
        if cls is Var:
            assert isinstance(expr, Var)
            return self.var_remap.get(expr, expr)
        if cls in _LEAVES:
            return expr
        if cls is Let:
            return self.visit_with_new_scope(expr)
        if cls is Function:
            return self.visit_function(expr)  # type: ignore[arg-type]
        if cls is If:
            return self._if(expr)  # type: ignore[arg-type]
        if cls is Match:
            return self._match(expr)  # type: ignore[arg-type]
        return self._operands(expr)

    def visit_function(self, fn: Function) -> Computation[Function]:
        """``fn`` with its parameters defined (``visit_var_def``) and its
        body visited as a block of its own."""
        params = self._define(fn.params)
        body = yield self.visit_with_new_scope(fn.body)
        if body is fn.body and params is fn.params:
            return fn
        return dataclasses.replace(fn, params=params, body=body)

    def _define(self, binders: tuple[Var, ...]) -> tuple[Var, ...]:
        defined = tuple(map(self.visit_var_def, binders))
        if defined == binders:  # variables compare by identity
            return binders
        for old, new in zip(binders, defined, strict=True):
            if new is not old:
                self.var_remap[old] = new
        return defined

    def _if(self, node: If) -> Computation[Expr]:
        cond = yield self.visit_expr(node.cond)
        then = yield self.visit_with_new_scope(node.then_branch)
        other = yield self.visit_with_new_scope(node.else_branch)
        if cond is node.cond and then is node.then_branch and other is node.else_branch:
            return node
        return dataclasses.replace(node, cond=cond, then_branch=then, else_branch=other)

    def _match(self, node: Match) -> Computation[Expr]:
        data = yield self.visit_expr(node.data)
        clauses: list[Clause] = []
        changed = data is not node.data
        for clause in node.clauses:
            pattern = self._pattern(clause.pattern)
            body = yield self.visit_with_new_scope(clause.body)
            if pattern is clause.pattern and body is clause.body:
                clauses.append(clause)
            else:
                clauses.append(dataclasses.replace(clause, pattern=pattern, body=body))
                changed = True
        if not changed:
            return node
        return dataclasses.replace(node, data=data, clauses=tuple(clauses))

    def _pattern(self, pattern: Pattern) -> Pattern:
        """``pattern`` with its variables defined (``visit_var_def``)."""
        binders = tuple(n.var for n in pre_order(pattern) if type(n) is PatternVar)
        defined = self._define(binders)
        if defined is binders:
            return pattern
        renamed = _Rename(dict(zip(binders, defined, strict=True))).mutate(pattern)
        assert isinstance(renamed, Pattern)
        return renamed

    def _operands(self, expr: Expr) -> Expr | Computation[Expr]:
        """A call, tuple, projection or reference operation with its
        operands visited: at once when they are all atoms."""
        fields = self.plan(type(expr))[2]
        simple = True
        for name, many in fields:
            value = getattr(expr, name)
            for child in value if many else (value,):
                if child is not None and type(child) is not Var and type(child) not in _LEAVES:
                    simple = False
        if simple:
            remap = self.var_remap
            if not remap:
                return expr
            changes: dict[str, Any] = {}
            for name, many in fields:
                value = getattr(expr, name)
                if many:
                    items = tuple(remap.get(c, c) for c in value)
                    if items != value:
                        changes[name] = items
                elif value is not None:
                    new = remap.get(value, value)
                    if new is not value:
                        changes[name] = new
            return dataclasses.replace(expr, **changes) if changes else expr
        return self._operands_nested(expr, fields)

    def _operands_nested(self, expr: Expr, fields: Sequence[tuple[str, bool]]) -> Computation[Expr]:
        changes: dict[str, Any] = {}
        for name, many in fields:
            value = getattr(expr, name)
            if many:
                items = []
                for child in value:
                    items.append((yield self.visit_expr(child)))
                if tuple(items) != value:
                    changes[name] = tuple(items)
            elif value is not None:
                new = yield self.visit_expr(value)
                if new is not value:
                    changes[name] = new
        return dataclasses.replace(expr, **changes) if changes else expr


class _Rename(Mutator):
    """Pattern variables replaced by their new definitions."""

    binders = True

    def __init__(self, renamed: dict[Var, Var]) -> None:
        super().__init__()
        self.renamed = renamed

    @on(Var)
    def _var(self, new: Node, old: Node) -> Node:
        return self.renamed.get(old, new)  # type: ignore[call-overload]


__all__ = ["BindingMutator"]
