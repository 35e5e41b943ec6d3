"""A-normal form, and the normalizer that basic-block normal form shares.

Purpose
-------
State passing and explicate rewrite programs binding by binding, so they
need each effect at a position of its own. ``to_anf`` gives that: call
arguments and callees, tuple fields, ``if`` conditions, ``match``
scrutinees and reference operands become atoms, bound in the order the
interpreter evaluates them (docs/semantics.md §3.2: a call's arguments
before its callee); a ``let`` whose value is a ``let`` is flattened; bodies
of functions, branches and clauses become blocks (a chain of lets ending in
a value). ``to_bbnf`` (``to_bbnf.py``) runs the same normalizer but leaves
compound operands nested.

Sharing
-------
A sub-expression reachable along several edges (graph form, ``%0 = ...;``)
is evaluated by the interpreter once per activation, where it is first
needed. Where it is bound depends on whether it may move:

- A *movable* expression may be evaluated anywhere its free variables are
  bound: none of its nodes calls an operator whose registry effect is not
  ``pure``, calls a ``control_flow`` operator whose loop bodies
  (``rules["loop"]``) are not function literals, calls anything but an
  operator, a constructor or a function literal (a variable, a global, a
  computed closure: unknown code), creates, reads or writes a reference, or
  mentions a variable of a recursive ``let`` (inside that let's value the
  variable is not bound yet where the expression would go) [RULE M]. A
  function literal is movable when its body is.
- Every other expression is *pinned*.

A shared movable expression is bound once, in the lowest common scope of
its uses: the innermost block (function body, branch, clause) that encloses
every use, just before the first construct of that block that contains a
use, in evaluation order [RULE L]. Its free variables are bound there: each
use is in their scope, so their binders come earlier in that block or in
an enclosing one (only a recursive let's own variable could come later,
and [RULE M] pins what mentions it). This is Relay's ToANormalForm
(``CalcScope``): a node's scope is the lowest common ancestor of the scopes
of the edges that reach it, an edge into a branch, a clause or a function
body opening a child scope.

A nullary constructor call (``None``, ``Nil``) is never shared: each use
builds its own [RULE D].

A shared pinned expression is bound where it is first used and reused by
later uses in the same block or in blocks nested in it; a use in a sibling
scope (the other branch, or the code after an ``if`` whose branch used it)
binds a fresh instance of it [RULE P]. Binding it at the lowest common
scope would run its effect on a path that never used it. Within one branch
this is exactly what the interpreter does; after an ``if`` whose branch
evaluated it, the interpreter remembers the value and A-normal form cannot
(whether the branch ran is known only at run time), so it is evaluated
again there: the one place where a program with effectful sharing can
change.

Algorithm
---------
1. One walk of each definition (``Facts``): the number of edges reaching
   each compound node, the nodes children first, the recursive let
   variables, and bottom-up which nodes are pinned [RULE M].
2. If a pinned node is shared, ``_Unfolder`` makes [RULE P] explicit: it
   walks the pinned part in evaluation order with the blocks as scopes; a
   pinned node reached again outside the scope of its first evaluation is
   replaced by a fresh instance (new binders for the variables it binds;
   the movable sub-expressions that do not mention them stay shared, so
   they too are bound once). Afterwards every use of a pinned node follows
   its first use, in that use's block or a nested one.
3. ``_Placement`` gives every node its scope in topological order, parents
   first (Kahn's algorithm over the edge counts): the lowest common
   ancestor of its edges' scopes [RULE L]; a node whose edges are not all
   in one scope is *lifted* (Relay's ``lifted`` set).
4. ``_Normalizer`` walks in evaluation order. A shared node is bound the
   first time it is reached: a pinned one in the current block, a movable
   one in its scope's block, whose binding list is live (it encloses the
   current position), before the construct being built there. A ``let``
   that is a shared node's first evaluation binds it to the let's own
   variable; a ``let`` of a shared node already bound elsewhere binds
   nothing, its variable standing for the node's: no alias is made.

Everything is a loop or a generator driven by ``effir.ir.trampoline.run``:
no Python recursion proportional to the program.

Known imprecisions
------------------
Moving a movable expression to the scope of its uses may evaluate it on a
path that did not (it is used in the first branch of one ``if`` and the
first branch of another, say); its effects are none, but it may fail or
take time, as with Relay's placement and ``dce``. A function literal with
an effectful body is pinned, so one shared across branches is copied into
each.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from typing import Any

from ..ir.expr import (
    ATOM_TYPES,
    Call,
    Constructor,
    Expr,
    Function,
    If,
    Let,
    Match,
    Op,
    PatternVar,
    RefCreate,
    RefRead,
    RefWrite,
    Tuple,
    TupleGetItem,
    Var,
    is_atom,
)
from ..ir.functor import Mutator, on, post_order, pre_order
from ..ir.module import IRModule
from ..ir.node import Node
from ..ir.op import op_def
from ..ir.trampoline import Computation, run

Slot = str | int
# A block's bindings: variable, value, and whether the value is pinned.
_Bindings = list[tuple[Var, Expr, bool]]


def simple_operands(value: Expr) -> tuple[Expr, ...] | None:
    """The operands of a call, tuple, projection or reference operation
    (the values that open no block of their own); None for anything else."""
    if isinstance(value, Call):
        return (value.callee, *value.args)
    if isinstance(value, Tuple):
        return value.fields
    if isinstance(value, TupleGetItem):
        return (value.tuple_value,)
    if isinstance(value, RefCreate):
        return (value.value,)
    if isinstance(value, RefRead):
        return (value.ref,)
    if isinstance(value, RefWrite):
        return (value.ref, value.value)
    return None


def to_anf(module: IRModule) -> IRModule:
    """Every global function in A-normal form (cell initialisers are left
    alone); ``module`` itself when every function already is what this
    would make of it (passes run it on their input: one walk instead of a
    rebuild, and the type checker's memory of the module stays valid)."""
    functions = {
        name: fn if is_anf_output(fn) else to_anf_expr(fn) for name, fn in module.functions.items()
    }
    if all(functions[name] is fn for name, fn in module.functions.items()):
        return module
    return IRModule(functions, module.type_defs, module.cells)


def is_anf_output(fn: Function, on_call: Callable[[Call], None] | None = None) -> bool:
    """Whether ``fn`` is exactly what ``to_anf`` would make of it, so that
    ``to_anf`` would only rebuild it: blocks are let chains whose lets
    carry their value's span; a let's value and a block's end are atoms or
    have atoms for operands (their own blocks aside: branches, clauses,
    function bodies); no compound node is reached twice. One walk, no
    allocation per node beyond a set entry; ``on_call`` sees every call."""
    normal = True
    seen: set[int] = set()
    blocks: list[Expr] = [fn.body]
    while blocks:
        expr = blocks.pop()
        values = []
        while isinstance(expr, Let):
            values.append(expr.value)
            if id(expr) in seen or expr.span is not expr.value.span:
                normal = False
            seen.add(id(expr))
            expr = expr.body
        values.append(expr)
        for value in values:
            if is_atom(value):
                continue
            if id(value) in seen:
                normal = False
            seen.add(id(value))
            if isinstance(value, Call) and on_call is not None:
                on_call(value)
            operands = simple_operands(value)
            if operands is None:  # a value with blocks of its own
                if isinstance(value, If):
                    operands = (value.cond,)
                    blocks += (value.then_branch, value.else_branch)
                elif isinstance(value, Match):
                    operands = (value.data,)
                    for clause in value.clauses:
                        if id(clause) in seen:
                            normal = False
                        seen.add(id(clause))
                        blocks.append(clause.body)
                elif isinstance(value, Function):
                    operands = ()
                    blocks.append(value.body)
                else:  # a let in a let's value
                    normal = False
                    continue
            if not all(is_atom(operand) for operand in operands):
                normal = False
            if not normal and on_call is None:
                return False
    return normal


def to_anf_expr(expr: Expr) -> Expr:
    """``expr`` in A-normal form; a Function stays a Function."""
    return normal_form(expr, atomic=True)


def normal_form(expr: Expr, atomic: bool) -> Expr:
    """``expr`` with its blocks as let chains and its sharing placed by
    [RULE L] and [RULE P]: operands bound to atoms when ``atomic`` (ANF),
    left nested otherwise, where only sharing across blocks is bound (BBNF)."""
    if is_atom(expr):
        return expr
    return run(_Normalizer(expr, atomic).top())


# ------------------------------------------------------------------ edges
def expression_edges(node: Node) -> Iterator[tuple[Slot, Expr, bool]]:
    """``(slot, child, opens_block)`` for each child expression of ``node``
    in evaluation order; a branch, a clause body and a function body open a
    block of their own."""
    if isinstance(node, Call):
        for i, arg in enumerate(node.args):
            yield i, arg, False
        yield "callee", node.callee, False
    elif isinstance(node, Let):
        yield "value", node.value, False
        yield "body", node.body, False
    elif isinstance(node, Tuple):
        for i, field in enumerate(node.fields):
            yield i, field, False
    elif isinstance(node, TupleGetItem):
        yield "tuple", node.tuple_value, False
    elif isinstance(node, If):
        yield "cond", node.cond, False
        yield "then", node.then_branch, True
        yield "else", node.else_branch, True
    elif isinstance(node, Match):
        yield "data", node.data, False
        for i, clause in enumerate(node.clauses):
            yield i, clause.body, True
    elif isinstance(node, Function):
        yield "body", node.body, True
    elif isinstance(node, RefCreate):
        yield "value", node.value, False
    elif isinstance(node, RefRead):
        yield "ref", node.ref, False
    elif isinstance(node, RefWrite):
        yield "ref", node.ref, False
        yield "value", node.value, False


def with_children(node: Expr, children: list[Expr]) -> Expr:
    """``node`` with new children, given in ``expression_edges`` order
    (``node`` itself when none changed)."""
    if isinstance(node, Call):
        return _replace(node, args=tuple(children[:-1]), callee=children[-1])
    if isinstance(node, Let):
        return _replace(node, value=children[0], body=children[1])
    if isinstance(node, Tuple):
        return _replace(node, fields=tuple(children))
    if isinstance(node, TupleGetItem):
        return _replace(node, tuple_value=children[0])
    if isinstance(node, If):
        return _replace(node, cond=children[0], then_branch=children[1], else_branch=children[2])
    if isinstance(node, Match):
        clauses = tuple(
            _replace(clause, body=body)
            for clause, body in zip(node.clauses, children[1:], strict=True)
        )
        return _replace(node, data=children[0], clauses=clauses)
    if isinstance(node, Function):
        return _replace(node, body=children[0])
    if isinstance(node, RefCreate):
        return _replace(node, value=children[0])
    if isinstance(node, RefRead):
        return _replace(node, ref=children[0])
    if isinstance(node, RefWrite):
        return _replace(node, ref=children[0], value=children[1])
    raise TypeError(f"normal forms: unexpected {type(node).__name__}")


# ------------------------------------------------------------------ facts
def _leaf(expr: Expr) -> bool:
    """An atom, or a nullary constructor (``None``, ``Nil``): never shared.
    Building one costs nothing, and its type comes from where it is used
    (``let %e: List[int32] = Nil``): bound once for several uses, the
    binding would have no type of its own once a pass removes a use
    [RULE D]."""
    return isinstance(expr, ATOM_TYPES) or (
        isinstance(expr, Call) and not expr.args and isinstance(expr.callee, Constructor)
    )


_VISIT, _POST, _LEAVE = 0, 1, 2


class Facts:
    """One walk of a definition (step 1): ``indegree``, how many edges reach
    each compound node (by identity); ``shared``, those reached by several;
    ``order``, the compound nodes children first; ``recursive``, the
    variables of recursive lets (used in their own value)."""

    def __init__(self, root: Expr) -> None:
        self.indegree: dict[int, int] = {id(root): 0}
        self.order: list[Expr] = []
        self.recursive: set[Var] = set()
        active: dict[Var, int] = {}  # let variables whose value is being walked
        seen: set[int] = set()
        stack: list[tuple[int, Any]] = [(_VISIT, root)]
        while stack:
            step, item = stack.pop()
            if step == _POST:
                self.order.append(item)
                continue
            if step == _LEAVE:
                active[item] -= 1
                continue
            if id(item) in seen:
                continue
            seen.add(id(item))
            stack.append((_POST, item))
            children = list(expression_edges(item))
            for slot, child, _ in children:
                if isinstance(child, Var):
                    inside_own_value = isinstance(item, Let) and slot == "value"
                    if active.get(child) or (inside_own_value and child is item.var):
                        self.recursive.add(child)
                elif not _leaf(child):
                    self.indegree[id(child)] = self.indegree.get(id(child), 0) + 1
            if isinstance(item, Let):
                # The value is walked first, with the let's variable active.
                stack.append((_VISIT, item.body))
                stack.append((_LEAVE, item.var))
                stack.append((_VISIT, item.value))
                active[item.var] = active.get(item.var, 0) + 1
            else:
                stack.extend((_VISIT, c) for _, c, _ in reversed(children) if not _leaf(c))
        self.shared = {key for key, count in self.indegree.items() if count > 1}

    def pinned(self) -> set[int]:
        """The compound nodes that may not move [RULE M]."""
        pinned: set[int] = set()
        for node in self.order:
            if pins(node, self.recursive) or any(
                id(child) in pinned for _, child, _ in expression_edges(node)
            ):
                pinned.add(id(node))
        return pinned


def pins(node: Expr, recursive: set[Var]) -> bool:
    """Whether ``node`` itself (its children aside) is pinned [RULE M]."""
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
class _Unfolder:
    """[RULE P] made explicit (step 2): a pinned node reached outside the
    scope of its first evaluation becomes a fresh instance."""

    def __init__(self, pinned: set[int]) -> None:
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
        rebuilt = yield self._rebuild(source)
        self._evaluated(key, rebuilt)
        return rebuilt

    def _evaluated(self, key: int, rebuilt: Expr) -> None:
        self.available[key] = rebuilt
        self.frames[-1].append(key)
        self.keep.append(rebuilt)

    def _rebuild(self, node: Expr) -> Computation[Expr]:
        if isinstance(node, Let):
            return (yield self._chain(node))
        children = []
        for _, child, opens in expression_edges(node):
            if opens:
                self.frames.append([])
            children.append((yield self.visit(child)))
            if opens:
                for key in self.frames.pop():
                    del self.available[key]
        return with_children(node, children)

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
            result = _replace(let, value=value, body=result)
            if i > 0:
                self._evaluated(id(let), result)
        return result

    def _instance(self, node: Expr) -> Expr:
        """A copy of ``node`` with new binders; what mentions none of them
        is shared with ``node``."""
        binders = _binders(node)
        if not binders:
            copy = dataclasses.replace(node)
        else:
            renamer = _FreshBinders(binders, {}, copy_all=False)
            copy = renamer.mutate(node)
            assert isinstance(copy, Expr) and copy is not node
            for original in post_order(node):
                new = renamer.memo.get(id(original))
                if new is not None and new is not original and id(original) in self.pinned:
                    self.pinned.add(id(new))
        self.pinned.add(id(copy))
        self.keep.append(copy)
        return copy


# --------------------------------------------------------------- placement
class _Scope:
    """A block of the output: its parent, depth, a jump pointer to an
    ancestor (skew-binary, so that the lowest common ancestor of two scopes
    takes O(log depth) steps: a 10,000-deep nest whose every level uses one
    shared node stays linear), and, while the block is being built, the
    list its bindings go to."""

    __slots__ = ("parent", "depth", "jump", "frame")

    def __init__(self, parent: _Scope | None) -> None:
        self.parent = parent
        self.frame: _Bindings | None = None
        if parent is None:
            self.depth, self.jump = 0, self
            return
        self.depth = parent.depth + 1
        up = parent.jump
        if up.depth > 0 and parent.depth - up.depth == up.depth - up.jump.depth:
            self.jump = up.jump
        else:
            self.jump = parent

    def ancestor(self, depth: int) -> _Scope:
        """The ancestor (or self) at ``depth``."""
        scope = self
        while scope.depth > depth:
            scope = scope.jump if scope.jump.depth >= depth else scope.parent  # type: ignore[assignment]
        return scope


def _lca(a: _Scope, b: _Scope) -> _Scope:
    a, b = a.ancestor(b.depth), b.ancestor(a.depth)
    while a is not b:
        # Jump pointers depend only on depth: equal depths jump together.
        if a.jump is not b.jump:
            a, b = a.jump, b.jump
        else:
            a, b = a.parent, b.parent  # type: ignore[assignment]
    return a


class _Placement:
    """Step 3: the scope of every node, parents first (Relay's CalcScope)."""

    def __init__(self, root: Expr, facts: Facts) -> None:
        self.root = _Scope(None)
        self.blocks: dict[tuple[int, Slot], _Scope] = {}
        self.home: dict[int, _Scope] = {}  # scope of each shared node
        self.lifted: set[int] = set()  # nodes whose edges span several scopes
        remaining = dict(facts.indegree)
        candidate: dict[int, _Scope] = {}
        where = {id(root): self.root}
        ready = [root]
        while ready:
            node = ready.pop()
            here = where.pop(id(node))
            for slot, child, opens in expression_edges(node):
                scope = here
                if opens:
                    scope = _Scope(here)
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
    lifted = _Placement(root, facts).lifted
    return [node for node in facts.order if id(node) in lifted]


# -------------------------------------------------------------- normalizer
class _Normalizer:
    """Step 4: blocks as let chains, shared nodes bound by [RULE L]/[RULE P]."""

    def __init__(self, root: Expr, atomic: bool) -> None:
        self.atomic = atomic
        facts = Facts(root)
        pinned: set[int] = set()
        if facts.shared or not atomic:
            pinned = facts.pinned()
        if any(key in pinned for key in facts.shared):
            unfolder = _Unfolder(pinned)
            root = run(unfolder.visit(root))
            facts = Facts(root)
            pinned = facts.pinned()
        self.root = root
        self.shared = facts.shared
        self.pinned = pinned
        self.placement = _Placement(root, facts) if facts.shared else None
        lifted = self.placement.lifted if self.placement is not None else set()
        # ANF binds every shared node; BBNF only those used in several blocks.
        self.bind = self.shared if atomic else lifted
        self.bound: dict[int, Expr] = {}
        # Let variables bound to a shared node that is bound elsewhere: the
        # node's variable replaces them (no alias binding is made).
        self.alias: dict[Var, Expr] = {}

    def top(self) -> Computation[Expr]:
        root = self.root
        if isinstance(root, Function):
            return (yield self._value(root, []))
        scope = self.placement.root if self.placement is not None else None
        return (yield self.block(root, scope))

    def _scope(self, node: Expr, slot: Slot) -> _Scope | None:
        if self.placement is None:
            return None
        return self.placement.blocks.get((id(node), slot))

    def block(self, expr: Expr, scope: _Scope | None) -> Computation[Expr]:
        """``expr`` as a let chain ending in a value, in a block of its own."""
        bindings: _Bindings = []
        if scope is not None:
            scope.frame = bindings
        result = yield self.value(expr, bindings)
        if scope is not None:
            scope.frame = None
        for var, value, _ in reversed(bindings):
            result = Let(var, value, result, span=value.span)
        return result

    def _target(self, key: int, bindings: _Bindings) -> _Bindings:
        """Where a shared node is bound: here when pinned, else its scope."""
        if key in self.pinned:
            return bindings
        assert self.placement is not None
        frame = self.placement.home[key].frame
        if frame is None:  # its scope encloses every use, so it is being built
            raise RuntimeError("normal form: a shared expression's scope is not open")
        return frame

    def value(self, expr: Expr, bindings: _Bindings) -> Computation[Expr]:
        """A let-free value for ``expr``, emitting what it needs into ``bindings``."""
        if isinstance(expr, ATOM_TYPES):
            return self.alias.get(expr, expr) if isinstance(expr, Var) else expr
        key = id(expr)
        if key not in self.shared:
            return (yield self._value(expr, bindings))
        if key in self.bound:
            return self.bound[key]
        if key not in self.bind:  # BBNF: shared within one block stays shared
            result = yield self._value(expr, bindings)
            self.bound[key] = result
            return result
        target = self._target(key, bindings)
        result = yield self._value(expr, target)
        if not is_atom(result):
            var = Var(_hint(expr), span=expr.span)
            target.append((var, result, key in self.pinned))
            result = var
        self.bound[key] = result
        return result

    def atom(self, expr: Expr, bindings: _Bindings) -> Computation[Expr]:
        """An atom for ``expr``, binding it first if it is compound."""
        if isinstance(expr, ATOM_TYPES):
            return self.alias.get(expr, expr) if isinstance(expr, Var) else expr
        value = yield self.value(expr, bindings)
        if is_atom(value):
            return value
        var = Var(_hint(expr), span=expr.span)
        bindings.append((var, value, id(expr) in self.pinned))
        return var

    def _known(self, expr: Expr) -> Expr | None:
        """The value of an atom or of a shared node already bound, without a
        trip through the trampoline (most operands are one of these)."""
        if isinstance(expr, ATOM_TYPES):
            return self.alias.get(expr, expr) if isinstance(expr, Var) else expr
        return self.bound.get(id(expr))

    def operand(self, expr: Expr, bindings: _Bindings) -> Computation[Expr]:
        if self.atomic:
            return (yield self.atom(expr, bindings))
        return (yield self.value(expr, bindings))

    def operands(self, parts: list[Expr], bindings: _Bindings) -> Computation[list[Expr]]:
        """Operands in evaluation order. In BBNF an operand may stay nested;
        when a later one emits a pinned binding (a flattened let, a first
        use), the earlier pinned operands are bound before it, so effects
        keep their order."""
        values: list[Expr] = []
        if self.atomic:
            for part in parts:
                done = self._known(part)
                values.append(done if done is not None else (yield self.atom(part, bindings)))
            return values
        for part in parts:
            done = self._known(part)
            if done is not None:
                values.append(done)
                continue
            mark = len(bindings)
            values.append((yield self.value(part, bindings)))
            if any(p for _, _, p in bindings[mark:]):
                self._settle(parts, values, bindings, mark)
        return values

    def _settle(
        self, parts: list[Expr], values: list[Expr], bindings: _Bindings, mark: int
    ) -> None:
        early: _Bindings = []
        for k in range(len(values) - 1):
            value, part = values[k], parts[k]
            if is_atom(value) or id(part) not in self.pinned:
                continue
            var = Var(_hint(part), span=part.span)
            early.append((var, value, True))
            values[k] = var
            if self.bound.get(id(part)) is value:
                self.bound[id(part)] = var
        bindings[mark:mark] = early

    def _let(self, let: Let, bindings: _Bindings) -> Computation[None]:
        """One binding of a let chain. The first evaluation of a shared node
        here binds it to the let's own variable; a let of a shared node bound
        elsewhere makes no alias: its variable stands for the node's. (Not
        when the variable is annotated: the annotation may loosen its type.)"""
        value, key = let.value, id(let.value)
        plain = let.var.type_annotation is None
        if isinstance(value, ATOM_TYPES):
            result = self._known(value)
        elif key not in self.shared:
            result = yield self._value(value, bindings)
        elif (
            plain
            and key not in self.bound
            and (key not in self.bind or self._target(key, bindings) is bindings)
        ):
            result = yield self._value(value, bindings)
            self.bound[key] = let.var
        else:
            result = yield self.value(value, bindings)
            if plain and is_atom(result):
                self.alias[let.var] = result
                return
        bindings.append((let.var, result, key in self.pinned))

    def _value(self, expr: Expr, bindings: _Bindings) -> Computation[Expr]:
        if isinstance(expr, Let):
            head: Expr = expr
            # A shared let inside the chain is a value of its own (memoized).
            while isinstance(expr, Let) and (expr is head or id(expr) not in self.shared):
                yield self._let(expr, bindings)
                expr = expr.body
            return (yield self.value(expr, bindings))
        if isinstance(expr, Call):
            values = yield self.operands([*expr.args, expr.callee], bindings)
            return _replace(expr, args=tuple(values[:-1]), callee=values[-1])
        if isinstance(expr, Tuple):
            return _replace(expr, fields=tuple((yield self.operands(list(expr.fields), bindings))))
        if isinstance(expr, TupleGetItem):
            return _replace(expr, tuple_value=(yield self.operand(expr.tuple_value, bindings)))
        if isinstance(expr, RefCreate):
            return _replace(expr, value=(yield self.operand(expr.value, bindings)))
        if isinstance(expr, RefRead):
            return _replace(expr, ref=(yield self.operand(expr.ref, bindings)))
        if isinstance(expr, RefWrite):
            ref, value = yield self.operands([expr.ref, expr.value], bindings)
            return _replace(expr, ref=ref, value=value)
        if isinstance(expr, If):
            cond = yield self.operand(expr.cond, bindings)
            then_branch = yield self.block(expr.then_branch, self._scope(expr, "then"))
            else_branch = yield self.block(expr.else_branch, self._scope(expr, "else"))
            return _replace(expr, cond=cond, then_branch=then_branch, else_branch=else_branch)
        if isinstance(expr, Match):
            data = yield self.operand(expr.data, bindings)
            clauses = []
            for i, clause in enumerate(expr.clauses):
                body = yield self.block(clause.body, self._scope(expr, i))
                clauses.append(_replace(clause, body=body))
            return _replace(expr, data=data, clauses=tuple(clauses))
        if isinstance(expr, Function):
            return _replace(expr, body=(yield self.block(expr.body, self._scope(expr, "body"))))
        raise TypeError(f"normal forms: unexpected {type(expr).__name__}")


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
        return rebuilt


def _binders(expr: Expr) -> set[Var]:
    binders: set[Var] = set()
    for node in pre_order(expr):
        if isinstance(node, Let):
            binders.add(node.var)
        elif isinstance(node, Function):
            binders.update(node.params)
        elif isinstance(node, PatternVar):
            binders.add(node.var)
    return binders


def fresh_binders(expr: Expr, replace: dict[Var, Expr] | None = None) -> Expr:
    """A copy of ``expr`` that shares no compound node with it and whose own
    binders are new variables (its free variables stay), so that it can be
    bound a second time; ``replace`` substitutes expressions for variables
    (a binder so replaced must be dropped from the copy by the caller)."""
    copy = _FreshBinders(_binders(expr), replace or {}, copy_all=True).mutate(expr)
    assert isinstance(copy, Expr)
    return copy


def _replace(node, **changes):
    """``node`` with ``changes``, or ``node`` itself when nothing changed."""
    if all(getattr(node, k) is v for k, v in changes.items()):
        return node
    return dataclasses.replace(node, **changes)


def _hint(expr: Expr) -> str:
    """A name for a new variable: the operator or function it calls."""
    while isinstance(expr, Let):  # a let block is named after its result
        expr = expr.body
    if isinstance(expr, Call):
        callee = expr.callee
        name = getattr(callee, "name", None) or getattr(callee, "name_hint", None)
        if isinstance(name, str):
            return name.rsplit(".", 1)[-1]
    if isinstance(expr, Function):
        return "f"
    return "t"
