"""One way to walk and rewrite the IR: ``Visitor`` and ``Mutator``, and the
typed dispatch (``Functor``, ``@on``) every functor of the family shares.

Modelled on TVM's ``ExprFunctor`` family (relax/expr_functor.h), written
for Python and for programs too deep for Python's recursion:

- **Typed dispatch.** A hook is a method marked ``@on(NodeClass, ...)``;
  each functor class builds its table (node class -> hook) once, when the
  class is created, and resolves a node's class through its MRO once per
  node class. Nothing is looked up by method name at run time.
- **Iterative.** The walk is an explicit stack: depth is limited by memory,
  not by ``sys.getrecursionlimit()``. A ``let`` chain of any length is a
  loop over that stack.
- **Memoised.** A node reached along several edges (a shared
  sub-expression, the text's graph form) is visited once; a mutator
  returns the same rewritten node for every edge, so sharing survives.
- **Uniform over fields.** Children are the fields ``child_slots`` reads
  from ``FIELDS`` (``node``, ``nodes``, ``def``, ``defs``, ``ctordefs``).
  Three class attributes choose which a functor walks: ``binders`` (the
  ``def`` kinds: let variables, parameters, pattern variables, ADT
  constructors), ``types`` (annotations, return types, type parameters)
  and ``patterns`` (match patterns). Expressions and clauses are always
  walked.

``Visitor`` (analyses): ``visit(root)`` calls each ``@on`` hook with the
node before its children (return ``False`` to skip the children, or the
list of children to walk, in that order, instead of those of its fields)
and each ``@after`` hook after them. With ``binds = True``, ``bind(let)``
is called once a let's value is walked and before its body is entered
(``Mutator.bind``'s counterpart: the value's scope closes; anf_sharing's
``Facts`` finds recursive lets so). ``Mutator`` (rewrites): ``mutate(root)``
rebuilds bottom-up; a hook ``(self, new, old) -> Node`` gets ``new``, the
node with its children already rewritten, and ``old``, the original, and
returns the replacement. A ``let``'s value is rewritten before its body is
entered and ``bind(let)`` is called in between (what a variable holds is
known at its uses); with ``body_first = True`` the body is rewritten first
and ``keep(let)`` decides whether the binding stays (its value is then
never visited: a backward sweep, as dead-code elimination wants).
``mutate_as(root, Function)`` is ``mutate`` with its result checked to be
of that class, and ``child_expr(e)`` is ``child`` checked to be an
expression (a pass's hooks keep a function a function and an expression
an expression).

The family's other members share ``Functor``'s tables: ``ExprFunctor``
(effir.ir.expr_functor), whose hooks return a result per node and
``yield`` their children's on the trampoline (IR to text, normal forms),
its ``Evaluator`` (effir.ir.evaluator) for abstract interpreters, and its
``BindingMutator`` (effir.ir.binding_mutator) for rewrites binding by
binding, emitting through a ``LetBuilder``.

``pre_order`` and ``post_order`` iterate every node once (all fields);
shared analyses (free variables, shared nodes, uses) are in
``effir.ir.analysis``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from typing import Any, ClassVar, TypeVar

from .diagnostics import PassError
from .expr import Expr, Let
from .node import EXPR, PATTERN, TYPE, Node, child_nodes, child_slots, nodes_in

F = TypeVar("F", bound=Callable[..., Any])
N = TypeVar("N", bound=Node)


Plan = tuple[Any, Any, tuple[tuple[str, bool], ...], bool, Any]
"""Of a node class, for one functor class: (hook, after-hook, walked fields
as ``(name, holds a tuple)``, whether there is anything to do at all,
before-hook)."""


def on(*classes: type) -> Callable[[F], F]:
    """Marks a functor method as the hook for ``classes`` (and their
    subclasses, unless one has a hook of its own)."""

    def mark(fn: F) -> F:
        fn.__effir_on__ = getattr(fn, "__effir_on__", ()) + classes  # type: ignore[attr-defined]
        return fn

    return mark


def before(*classes: type) -> Callable[[F], F]:
    """Marks a ``Mutator`` method ``(self, node) -> Node | None`` as asked
    when a ``classes`` node (not a ``let``) is reached: a node it returns
    is the replacement, and the children are not visited."""

    def mark(fn: F) -> F:
        fn.__effir_before__ = getattr(fn, "__effir_before__", ()) + classes  # type: ignore[attr-defined]
        return fn

    return mark


def after(*classes: type) -> Callable[[F], F]:
    """Marks a ``Visitor`` method as called after the children of
    ``classes`` nodes have been visited (post-order)."""

    def mark(fn: F) -> F:
        fn.__effir_after__ = getattr(fn, "__effir_after__", ()) + classes  # type: ignore[attr-defined]
        return fn

    return mark


class Functor:
    """The shared part: which fields are walked, and the hook tables."""

    binders: ClassVar[bool] = False
    types: ClassVar[bool] = False
    patterns: ClassVar[bool] = True

    _rules: ClassVar[dict[type, Callable[..., Any]]] = {}
    _after_rules: ClassVar[dict[type, Callable[..., Any]]] = {}
    _before_rules: ClassVar[dict[type, Callable[..., Any]]] = {}
    _plans: ClassVar[dict[type, Plan]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        rules: dict[type, str] = {}
        after_rules: dict[type, str] = {}
        before_rules: dict[type, str] = {}
        for klass in reversed(cls.__mro__):
            for name, attr in vars(klass).items():
                for node_cls in getattr(attr, "__effir_on__", ()):
                    rules[node_cls] = name
                for node_cls in getattr(attr, "__effir_after__", ()):
                    after_rules[node_cls] = name
                for node_cls in getattr(attr, "__effir_before__", ()):
                    before_rules[node_cls] = name
        cls._rules = {c: getattr(cls, n) for c, n in rules.items()}
        cls._after_rules = {c: getattr(cls, n) for c, n in after_rules.items()}
        cls._before_rules = {c: getattr(cls, n) for c, n in before_rules.items()}
        cls._plans = {}

    @classmethod
    def plan(cls, node_type: type) -> Plan:
        """The hooks and walked fields of a node class, resolved once per
        functor class and node class."""
        try:
            return cls._plans[node_type]
        except KeyError:
            pass
        rule = after_rule = before_rule = None
        for klass in node_type.__mro__:
            if rule is None:
                rule = cls._rules.get(klass)
            if after_rule is None:
                after_rule = cls._after_rules.get(klass)
            if before_rule is None:
                before_rule = cls._before_rules.get(klass)
        fields = tuple(
            (s.name, s.many)
            for s in child_slots(node_type)
            if (cls.binders or not s.binder)
            and (cls.types or s.role != TYPE)
            and (cls.patterns or s.role != PATTERN)
        )
        walked = bool(rule or fields or before_rule)
        plan = cls._plans[node_type] = (rule, after_rule, fields, walked, before_rule)
        return plan

    def children(self, node: Node) -> list[Node]:
        """The children of ``node`` this functor walks, in field order."""
        return nodes_in(node, self.plan(type(node))[2])


class Visitor(Functor):
    """An analysis: each node once, ``@on`` hooks before the children (a
    hook returning ``False`` skips them, one returning a list walks those
    children instead of ``children(node)``), ``@after`` hooks after them;
    with ``binds`` on, ``bind(let)`` between a let's value and its body."""

    binders = True

    binds: ClassVar[bool] = False
    """Call ``bind(let)`` once a let's value has been walked and before its
    body is entered (off: visitors that need no let scope pay nothing)."""

    def __init__(self) -> None:
        self.seen: set[int] = set()

    def bind(self, let: Let) -> None:
        """Called (``binds`` on) when ``let``'s value and the children
        before it have been walked, before its body is entered: the value's
        scope closes (``Mutator.bind``'s counterpart). A let whose walked
        children do not end in its body gets it after all of them."""

    def visit(self, root: Node) -> None:
        seen = self.seen
        plans = self._plans
        plan = self.plan
        children = self.children
        binds = self.binds
        bind = type(self).bind
        stack: list[tuple[Node, Any]] = [(root, None)]
        push = stack.append
        pop = stack.pop
        while stack:
            node, then = pop()
            if then is not None:  # an @after hook, or bind
                then(self, node)
                continue
            if id(node) in seen:
                continue
            seen.add(id(node))
            rule, after_rule, _, _, _ = plans.get(type(node)) or plan(type(node))
            found = None if rule is None else rule(self, node)
            if found is False:
                continue
            if after_rule is not None:
                push((node, after_rule))
            if type(found) is not list:
                found = children(node)
            if binds and isinstance(node, Let):
                if found and found[-1] is node.body:
                    found = found[:-1]
                    if id(node.body) not in seen:
                        push((node.body, None))
                push((node, bind))
            for child in reversed(found):
                if id(child) not in seen:
                    push((child, None))


ENTER, BOUND, DONE, BLOCK = 0, 1, 2, 3


class Mutator(Functor):
    """A rewrite, bottom-up: ``@on(Cls)`` hooks ``(self, new, old) -> Node``.

    ``memo`` maps the identity of each original node visited to its
    replacement; unchanged nodes keep their identity (so an unchanged
    program is returned as it is, and ``mutate(x) is x`` tells "nothing
    changed")."""

    body_first: ClassVar[bool] = False
    """Rewrite a ``let``'s body before its value, and ask ``keep``."""

    blocks: ClassVar[bool] = False
    """Rewrite each block (a let chain, as ``ends_block`` cuts it) as a
    whole: ``start_block(chain)``, its values in order (``bind`` after
    each), its tail, then ``finish_block(chain)``. (``body_first`` off.)"""

    def __init__(self) -> None:
        self.memo: dict[int, Node] = {}

    # -------------------------------------------------------- to override
    def bind(self, let: Let) -> None:
        """Called when ``let``'s value is rewritten, before its body is
        entered (``body_first`` off)."""

    def keep(self, let: Let) -> bool:
        """Whether ``let`` stays, asked when its body is rewritten and
        before its value is visited (``body_first`` on): False drops it."""
        return True

    def ends_block(self, let: Let) -> bool:
        """Whether ``let``, the body of another, starts a block of its own
        (``blocks`` on)."""
        return False

    def start_block(self, chain: list[Let]) -> None:
        """Called when the block ``chain`` (``blocks`` on) is entered, before
        any of its values is rewritten (a scope opens)."""

    def finish_block(self, chain: list[Let]) -> Node:
        """The replacement of the block ``chain`` (``blocks`` on) once its
        values and tail are done: by default each let finished, last first."""
        memo = self.memo
        for let in reversed(chain):
            memo[id(let)] = self.finish(let)
        return memo[id(chain[0])]

    def child(self, node: Node) -> Node:
        """The replacement of an original child (memoised, else itself)."""
        return self.memo.get(id(node), node)

    def finish(self, node: Node) -> Node:
        """The replacement of ``node`` once its children are done: rebuilt
        with their replacements, then through its hook."""
        rule = self.plan(type(node))[0]
        new = self.rebuild(node)
        return new if rule is None else rule(self, new, node)

    # ------------------------------------------------------------ the walk
    def rebuild(self, node: Node) -> Node:
        """``node`` with each walked child replaced by ``child(c)``; ``node``
        itself when none changed."""
        child = self.child
        changes: dict[str, Any] = {}
        for name, many in self.plan(type(node))[2]:
            value = getattr(node, name)
            if many:
                items = tuple(map(child, value))
                if items != value:  # nodes compare by identity
                    changes[name] = items
            elif value is not None:
                new = child(value)
                if new is not value:
                    changes[name] = new
        return dataclasses.replace(node, **changes) if changes else node

    def mutate(self, root: Node) -> Node:
        memo = self.memo
        plans = self._plans
        plan = self.plan
        binders = self.binders
        body_first = self.body_first
        blocks = self.blocks
        stack: list[tuple[Any, int]] = [(root, ENTER)]
        while stack:
            node, phase = stack.pop()
            if phase == ENTER:
                if id(node) in memo:
                    continue
                if blocks and isinstance(node, Let):
                    self._enter_block(node, stack)
                    continue
                if isinstance(node, Let):
                    stack.append((node, BOUND))
                    if body_first:
                        stack.append((node.body, ENTER))
                    else:
                        stack.append((node.value, ENTER))
                        if binders:
                            stack.append((node.var, ENTER))
                    continue
                node_plan = plans.get(type(node)) or plan(type(node))
                if not node_plan[3]:
                    continue  # no hook and nothing below: it stays as it is
                if node_plan[4] is not None:
                    replacement = node_plan[4](self, node)
                    if replacement is not None:
                        memo[id(node)] = replacement
                        continue
                pending: list[Node] = []
                for name, many in node_plan[2]:
                    value = getattr(node, name)
                    for v in value if many else (value,):
                        if v is not None and id(v) not in memo:
                            if (plans.get(type(v)) or plan(type(v)))[3]:
                                pending.append(v)
                if pending:
                    stack.append((node, DONE))
                    stack.extend((c, ENTER) for c in reversed(pending))
                else:
                    memo[id(node)] = self.finish(node)
            elif phase == BLOCK:
                memo[id(node[0])] = self.finish_block(node)
            elif phase == BOUND:
                assert isinstance(node, Let)
                if blocks:
                    self.bind(node)
                elif body_first:
                    body = self.child(node.body)  # the body's uses count first
                    if not self.keep(node):
                        memo[id(node)] = body
                        continue
                    stack.append((node, DONE))
                    stack.append((node.value, ENTER))
                    if binders:
                        stack.append((node.var, ENTER))
                else:
                    self.bind(node)
                    stack.append((node, DONE))
                    stack.append((node.body, ENTER))
            else:
                memo[id(node)] = self.finish(node)
        return self.child(root)

    def mutate_as(self, root: Node, kind: type[N]) -> N:
        """``mutate(root)``, checked to be a ``kind`` (TVM's ``Downcast``):
        a rewrite keeps a function a function and an expression an
        expression, and a hook that does not is a bug of its pass, reported
        here rather than wherever the result is used next."""
        return self._checked(root, self.mutate(root), kind)

    def child_expr(self, expr: Expr) -> Expr:
        """``child(expr)`` checked to be an expression, for a hook that
        reads a rewritten child as one."""
        new = self.child(expr)
        return new if isinstance(new, Expr) else rewritten_as(self, expr, new, Expr)

    def _checked(self, old: Node, new: Node, kind: type[N]) -> N:
        return new if isinstance(new, kind) else rewritten_as(self, old, new, kind)

    def _enter_block(self, head: Let, stack: list[tuple[Any, int]]) -> None:
        chain = [head]
        while True:
            body = chain[-1].body
            if not isinstance(body, Let) or id(body) in self.memo or self.ends_block(body):
                break
            chain.append(body)
        self.start_block(chain)
        stack.append((chain, BLOCK))
        stack.append((chain[-1].body, ENTER))
        for let in reversed(chain):
            stack.append((let, BOUND))
            stack.append((let.value, ENTER))
            if self.binders:
                stack.append((let.var, ENTER))


def pre_order(*roots: Node, children: Callable[[Node], list[Node]] = child_nodes) -> Iterator[Node]:
    """Each node reachable from ``roots`` once, parents before children,
    children in field order; ``children`` says which edges are followed
    (every field kind unless told)."""
    seen: set[int] = set()
    stack = list(reversed(roots))
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        yield node
        found = children(node)
        found.reverse()
        stack.extend(found)


def post_order(*roots: Node, children: Callable[[Node], list[Node]] = child_nodes) -> list[Node]:
    """Each node reachable from ``roots`` once, children before parents;
    ``children`` (called once per node) says which edges are followed
    (every field kind unless told)."""
    order: list[Node] = []
    seen: set[int] = set()
    stack: list[tuple[Node, bool]] = [(r, False) for r in reversed(roots)]
    pop, push, done, mark = stack.pop, stack.append, order.append, seen.add
    while stack:
        node, expanded = pop()
        if expanded:
            done(node)
            continue
        if id(node) in seen:
            continue
        mark(id(node))
        push((node, True))
        for c in reversed(children(node)):
            if id(c) not in seen:
                push((c, False))
    return order


def rewritten_as(rewriter: object, old: Node, new: Node, kind: type[N]) -> N:
    """``new``, the rewrite of ``old`` by ``rewriter``, checked to be a
    ``kind`` (TVM's ``Downcast``); every mutator's ``mutate_as`` uses it."""
    if not isinstance(new, kind):
        raise PassError(
            f"{type(rewriter).__name__} rewrote a {type(old).__name__} into a "
            f"{type(new).__name__}, not a {kind.__name__}",
            getattr(old, "span", None),
        )
    return new


__all__ = [
    "EXPR",
    "Functor",
    "Mutator",
    "Visitor",
    "after",
    "before",
    "on",
    "post_order",
    "pre_order",
    "rewritten_as",
]
