"""The sharing analyses of A-normal form (steps 1-3 of ``anf.py``'s
algorithm): a node's expression edges in evaluation order, which nodes are
shared and which pinned (``Facts``, [RULE ANF-MOVABLE]), the unfolding of shared
pinned nodes [RULE ANF-UNFOLD] (``Unfolder``), and the scope each node is bound in
(``Placement``, [RULE ANF-SCOPE]); and ``fresh_binders``, the copy that unfolding
(and inlining elsewhere) binds a second time. ``anf.py`` states the rules;
its normalizer (step 4) and ``to_gnf``/``to_bbnf`` use these."""

from __future__ import annotations

import dataclasses
from typing import Any

from effir.ir.analysis import bound_vars
from effir.ir.expr import (
    ATOM_TYPES,
    Call,
    Constructor,
    Expr,
    Function,
    If,
    Let,
    Match,
    Op,
    RefCreate,
    RefRead,
    RefWrite,
    Var,
    is_atom,
)
from effir.ir.expr_functor import Computation, ExprFunctor
from effir.ir.functor import Functor, Mutator, Visitor, after, on, post_order
from effir.ir.node import Node
from effir.ir.op import op_def

Slot = str | int
# A block's bindings: variable, value, and whether the value is pinned.
Bindings = list[tuple[Var, Expr, bool]]


# ------------------------------------------------------------------ edges
class _Edges(Functor):
    """A node's expression edges: its expression fields in field order
    (``child_slots``, through the functor's plan: no binders, types or
    patterns), except where an ``@on`` hook says otherwise: a call
    evaluates its arguments before its callee; a branch, a clause body and
    a function body open a block. Hooks return ``(slot, child, opens)``;
    ``rebuild`` hooks put children back in that order."""

    patterns = False

    @on(Call)
    def _call(self, node: Call) -> list[tuple[Slot, Expr, bool]]:
        edges: list[tuple[Slot, Expr, bool]] = [(i, a, False) for i, a in enumerate(node.args)]
        edges.append(("callee", node.callee, False))
        return edges

    @on(If)
    def _if(self, node: If) -> list[tuple[Slot, Expr, bool]]:
        return [
            ("cond", node.cond, False),
            ("then", node.then_branch, True),
            ("else", node.else_branch, True),
        ]

    @on(Match)
    def _match(self, node: Match) -> list[tuple[Slot, Expr, bool]]:
        edges: list[tuple[Slot, Expr, bool]] = [("data", node.data, False)]
        edges += [(i, clause.body, True) for i, clause in enumerate(node.clauses)]
        return edges

    @on(Function)
    def _function(self, node: Function) -> list[tuple[Slot, Expr, bool]]:
        return [("body", node.body, True)]


_EDGE_PLAN = _Edges.plan


def expression_edges(node: Node) -> list[tuple[Slot, Expr, bool]]:
    """``(slot, child, opens_block)`` for each child expression of ``node``
    in evaluation order (the slot is the field's name, or the index in a
    tuple field); a branch, a clause body and a function body open a block
    of their own."""
    rule, _, fields, _, _ = _EDGE_PLAN(type(node))
    if rule is not None:
        return rule(None, node)
    edges: list[tuple[Slot, Expr, bool]] = []
    for name, many in fields:
        value = getattr(node, name)
        if many:
            edges += [(i, child, False) for i, child in enumerate(value)]
        elif value is not None:
            edges.append((name, value, False))
    return edges


def with_children(node: Expr, children: list[Expr]) -> Expr:
    """``node`` with new children, given in ``expression_edges`` order
    (``node`` itself when none changed)."""
    if isinstance(node, Call):
        return replace_fields(node, args=tuple(children[:-1]), callee=children[-1])
    if isinstance(node, Match):
        clauses = tuple(
            replace_fields(clause, body=body)
            for clause, body in zip(node.clauses, children[1:], strict=True)
        )
        return replace_fields(node, data=children[0], clauses=clauses)
    changes: dict[str, Any] = {}
    at = 0
    for name, many in _EDGE_PLAN(type(node))[2]:
        value = getattr(node, name)
        if many:
            changes[name] = tuple(children[at : at + len(value)])
            at += len(value)
        elif value is not None:
            changes[name] = children[at]
            at += 1
    if at != len(children):
        raise TypeError(
            f"normal forms: {type(node).__name__} has {at} children, not {len(children)}"
        )
    return replace_fields(node, **changes)


# ------------------------------------------------------------------ facts
def _leaf(expr: Expr) -> bool:
    """An atom, or a nullary constructor (``None``, ``Nil``): never shared.
    Building one costs nothing, and its type comes from where it is used
    (``let %e: List[int32] = Nil``): bound once for several uses, the
    binding would have no type of its own once a pass removes a use
    [RULE ANF-NULLARY]."""
    return isinstance(expr, ATOM_TYPES) or (
        isinstance(expr, Call) and not expr.args and isinstance(expr.callee, Constructor)
    )


class Facts(Visitor):
    """One walk of a definition (step 1): ``indegree``, how many edges reach
    each compound node (by identity); ``shared``, those reached by several;
    ``order``, the compound nodes children first; ``recursive``, the
    variables of recursive lets (used in their own value).

    A ``Visitor`` over the expression edges in evaluation order, leaves
    left out (the ``@on`` hook returns the children it walks): a let's
    variable is active from the let's hook until ``bind``, that is while
    its value is walked, and a use of an active variable is recursive."""

    binds = True

    def __init__(self, root: Expr) -> None:
        super().__init__()
        self.indegree: dict[int, int] = {id(root): 0}
        self.order: list[Expr] = []
        self.recursive: set[Var] = set()
        self.active: dict[Var, int] = {}  # let variables whose value is being walked
        self.visit(root)
        self.shared = {key for key, count in self.indegree.items() if count > 1}

    @on(Expr)
    def _edges(self, node: Expr) -> list[Expr]:
        """Counts ``node``'s edges; its compound children, to walk."""
        compound: list[Expr] = []
        indegree = self.indegree
        active = self.active
        own = node.var if isinstance(node, Let) else None
        for slot, child, _ in expression_edges(node):
            if isinstance(child, Var):
                if active.get(child) or (child is own and slot == "value"):
                    self.recursive.add(child)
            elif not _leaf(child):
                indegree[id(child)] = indegree.get(id(child), 0) + 1
                compound.append(child)
        if own is not None:  # its value is walked with its variable active
            active[own] = active.get(own, 0) + 1
        return compound

    def bind(self, let: Let) -> None:
        self.active[let.var] -= 1

    @after(Expr)
    def _done(self, node: Expr) -> None:
        self.order.append(node)

    def pinned(self) -> set[int]:
        """The compound nodes that may not move [RULE ANF-MOVABLE]."""
        pinned: set[int] = set()
        for node in self.order:
            if pins(node, self.recursive) or any(
                id(child) in pinned for _, child, _ in expression_edges(node)
            ):
                pinned.add(id(node))
        return pinned


def pins(node: Expr, recursive: set[Var]) -> bool:
    """Whether ``node`` itself (its children aside) is pinned [RULE ANF-MOVABLE]."""
    if isinstance(node, RefCreate | RefRead | RefWrite):
        return True
    if isinstance(node, Call) and not _known_pure_call(node):
        return True
    return any(isinstance(c, Var) and c in recursive for _, c, _ in expression_edges(node))


def _known_pure_call(call: Call) -> bool:
    """A call whose code is known and pure: a constructor, a function
    literal (its body is checked as a child), or a pure operator whose
    function arguments, if it takes any, are literals."""
    callee = call.callee
    if isinstance(callee, Constructor | Function):
        return True
    if not isinstance(callee, Op):
        return False
    definition = op_def(callee)
    if definition.effect != "pure":
        return False
    if "control_flow" not in definition.traits:
        return True
    shape = definition.rules.get("loop")
    if shape is None:
        return False
    return all(
        body.arg < len(call.args) and isinstance(call.args[body.arg], Function)
        for body in shape.bodies
    )


# --------------------------------------------------------------- unfolding
class Unfolder(ExprFunctor):
    """[RULE ANF-UNFOLD] made explicit (step 2): a pinned node reached outside the
    scope of its first evaluation becomes a fresh instance. An
    ``ExprFunctor`` whose hooks rebuild a pinned node (a let chain as a
    loop, anything else edge by edge); ``visit`` is its memo, scoped by
    the blocks."""

    def __init__(self, pinned: set[int]) -> None:
        super().__init__()
        self.pinned = set(pinned)
        self.available: dict[int, Expr] = {}  # evaluated in an enclosing scope
        self.frames: list[list[int]] = [[]]
        self.expanded: set[int] = set()
        self.keep: list[Expr] = []  # new nodes stay alive: their ids are keys

    def visit(self, node: Expr) -> Computation[Expr]:
        if is_atom(node) or id(node) not in self.pinned:
            return node  # movable: nothing pinned inside
        key = id(node)
        if key in self.available:
            return self.available[key]
        source = node
        if key in self.expanded:
            source = self._instance(node)
        self.expanded.add(id(source))
        rebuilt = yield self.eval(source)
        self._evaluated(key, rebuilt)
        return rebuilt

    def _evaluated(self, key: int, rebuilt: Expr) -> None:
        self.available[key] = rebuilt
        self.frames[-1].append(key)
        self.keep.append(rebuilt)

    @on(Expr)
    def _rebuild(self, node: Expr) -> Computation[Expr]:
        children = []
        for _, child, opens in expression_edges(node):
            if opens:
                self.frames.append([])
            children.append((yield self.visit(child)))
            if opens:
                for key in self.frames.pop():
                    del self.available[key]
        return with_children(node, children)

    @on(Let)
    def _chain(self, head: Let) -> Computation[Expr]:
        """A let chain as a loop; a pinned let in it that is reached for
        the first time is part of the chain."""
        chain: list[tuple[Let, Expr]] = []
        node: Expr = head
        while True:
            assert isinstance(node, Let)
            chain.append((node, (yield self.visit(node.value))))
            body = node.body
            key = id(body)
            if (
                isinstance(body, Let)
                and key in self.pinned
                and key not in self.available
                and key not in self.expanded
            ):
                self.expanded.add(key)
                node = body
                continue
            result = yield self.visit(body)
            break
        for i in range(len(chain) - 1, -1, -1):
            let, value = chain[i]
            result = replace_fields(let, value=value, body=result)
            if i > 0:
                self._evaluated(id(let), result)
        return result

    def _instance(self, node: Expr) -> Expr:
        """A copy of ``node`` with new binders; what mentions none of them
        is shared with ``node``."""
        binders = bound_vars(node)
        if not binders:
            copy = dataclasses.replace(node)
        else:
            renamer = _FreshBinders(binders, {}, copy_all=False)
            copy = renamer.mutate_as(node, Expr)
            assert copy is not node
            for original in post_order(node):
                new = renamer.memo.get(id(original))
                if new is not None and new is not original and id(original) in self.pinned:
                    self.pinned.add(id(new))
        self.pinned.add(id(copy))
        self.keep.append(copy)
        return copy


# --------------------------------------------------------------- placement
class Scope:
    """A block of the output: its parent, depth, a jump pointer to an
    ancestor (skew-binary, so that the lowest common ancestor of two scopes
    takes O(log depth) steps: a 10,000-deep nest whose every level uses one
    shared node stays linear), and, while the block is being built, the
    list its bindings go to."""

    __slots__ = ("parent", "depth", "jump", "frame")

    def __init__(self, parent: Scope | None) -> None:
        self.parent = parent
        self.frame: Bindings | None = None
        if parent is None:
            self.depth, self.jump = 0, self
            return
        self.depth = parent.depth + 1
        up = parent.jump
        if up.depth > 0 and parent.depth - up.depth == up.depth - up.jump.depth:
            self.jump = up.jump
        else:
            self.jump = parent

    def ancestor(self, depth: int) -> Scope:
        """The ancestor (or self) at ``depth``."""
        scope = self
        while scope.depth > depth:
            scope = scope.jump if scope.jump.depth >= depth else scope.parent  # type: ignore[assignment]
        return scope


def _lca(a: Scope, b: Scope) -> Scope:
    a, b = a.ancestor(b.depth), b.ancestor(a.depth)
    while a is not b:
        # Jump pointers depend only on depth: equal depths jump together.
        if a.jump is not b.jump:
            a, b = a.jump, b.jump
        else:
            a, b = a.parent, b.parent  # type: ignore[assignment]
    return a


class Placement:
    """Step 3: the scope of every node, parents first (Relay's CalcScope)."""

    def __init__(self, root: Expr, facts: Facts) -> None:
        self.root = Scope(None)
        self.blocks: dict[tuple[int, Slot], Scope] = {}
        self.home: dict[int, Scope] = {}  # scope of each shared node
        self.lifted: set[int] = set()  # nodes whose edges span several scopes
        remaining = dict(facts.indegree)
        candidate: dict[int, Scope] = {}
        where = {id(root): self.root}
        ready = [root]
        while ready:
            node = ready.pop()
            here = where.pop(id(node))
            for slot, child, opens in expression_edges(node):
                scope = here
                if opens:
                    scope = Scope(here)
                    self.blocks[(id(node), slot)] = scope
                if _leaf(child):
                    continue
                key = id(child)
                previous = candidate.get(key)
                if previous is None:
                    candidate[key] = scope
                elif previous is not scope:
                    self.lifted.add(key)
                    candidate[key] = _lca(previous, scope)
                remaining[key] -= 1
                if remaining[key] == 0:
                    where[key] = candidate.pop(key)
                    if key in facts.shared:
                        self.home[key] = where[key]
                    ready.append(child)


def lifted_nodes(root: Expr) -> list[Expr]:
    """The compound nodes of ``root`` used in more than one block, children
    first: what basic-block normal form must bind."""
    facts = Facts(root)
    if not facts.shared:
        return []
    lifted = Placement(root, facts).lifted
    return [node for node in facts.order if id(node) in lifted]


def replace_fields(node, **changes):
    """``node`` with ``changes``, or ``node`` itself when nothing changed."""
    if all(getattr(node, k) is v for k, v in changes.items()):
        return node
    return dataclasses.replace(node, **changes)


# ----------------------------------------------------------- fresh binders
class _FreshBinders(Mutator):
    """New variables for the binders (a binder and its uses are one node,
    so one memoised rewrite renames both)."""

    binders = True
    types = True

    def __init__(self, binders: set[Var], replace: dict[Var, Expr], copy_all: bool) -> None:
        super().__init__()
        self.copy_all = copy_all
        self.fresh: dict[Var, Expr] = {}
        for v in binders:
            copy = Var(v.name_hint, v.type_annotation, span=v.span)
            if v.has_type:  # a copy has the type its original was inferred to have
                copy.set_checked_type(v.checked_type)
            self.fresh[v] = copy
        self.fresh.update(replace)

    @on(Var)
    def _var(self, new: Node, old: Node) -> Node:
        assert isinstance(old, Var)
        return self.fresh.get(old, new)

    def rebuild(self, node: Node) -> Node:
        # With copy_all every compound node is copied, so that the copy
        # shares nothing with the original (a shared `ref(...)` would be one
        # reference, not two).
        rebuilt = super().rebuild(node)
        if self.copy_all and rebuilt is node and isinstance(node, Expr) and not is_atom(node):
            rebuilt = dataclasses.replace(node)
        if (
            rebuilt is not node
            and isinstance(rebuilt, Expr)
            and isinstance(node, Expr)
            and node.has_type
        ):
            # Only binders are renamed: the copy has its original's type (a
            # constructor call may have no other source of it, once the
            # parameter it was passed to is inlined away).
            rebuilt.set_checked_type(node.checked_type)
        return rebuilt


def fresh_binders(expr: Expr, replace: dict[Var, Expr] | None = None) -> Expr:
    """A copy of ``expr`` that shares no compound node with it and whose own
    binders are new variables (its free variables stay), so that it can be
    bound a second time; ``replace`` substitutes expressions for variables
    (a binder so replaced must be dropped from the copy by the caller)."""
    copy = _FreshBinders(bound_vars(expr), replace or {}, copy_all=True).mutate(expr)
    assert isinstance(copy, Expr)
    return copy
