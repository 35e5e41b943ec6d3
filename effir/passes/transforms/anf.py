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
  variable is not bound yet where the expression would go) [RULE ANF-MOVABLE]. A
  function literal is movable when its body is.
- Every other expression is *pinned*.

A shared movable expression is bound once, in the lowest common scope of
its uses: the innermost block (function body, branch, clause) that encloses
every use, just before the first construct of that block that contains a
use, in evaluation order [RULE ANF-SCOPE]. Its free variables are bound there: each
use is in their scope, so their binders come earlier in that block or in
an enclosing one (only a recursive let's own variable could come later,
and [RULE ANF-MOVABLE] pins what mentions it). This is Relay's ToANormalForm
(``CalcScope``): a node's scope is the lowest common ancestor of the scopes
of the edges that reach it, an edge into a branch, a clause or a function
body opening a child scope.

A nullary constructor call (``None``, ``Nil``) is never shared: each use
builds its own [RULE ANF-NULLARY].

A shared pinned expression is bound where it is first used and reused by
later uses in the same block or in blocks nested in it; a use in a sibling
scope (the other branch, or the code after an ``if`` whose branch used it)
binds a fresh instance of it [RULE ANF-UNFOLD]. Binding it at the lowest common
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
   variables, and bottom-up which nodes are pinned [RULE ANF-MOVABLE].
2. If a pinned node is shared, ``Unfolder`` makes [RULE ANF-UNFOLD] explicit: it
   walks the pinned part in evaluation order with the blocks as scopes; a
   pinned node reached again outside the scope of its first evaluation is
   replaced by a fresh instance (new binders for the variables it binds;
   the movable sub-expressions that do not mention them stay shared, so
   they too are bound once). Afterwards every use of a pinned node follows
   its first use, in that use's block or a nested one.
3. ``Placement`` gives every node its scope in topological order, parents
   first (Kahn's algorithm over the edge counts): the lowest common
   ancestor of its edges' scopes [RULE ANF-SCOPE]; a node whose edges are not all
   in one scope is *lifted* (Relay's ``lifted`` set).
4. ``_Normalizer`` walks in evaluation order. A shared node is bound the
   first time it is reached: a pinned one in the current block, a movable
   one in its scope's block, whose binding list is live (it encloses the
   current position), before the construct being built there. A ``let``
   that is a shared node's first evaluation binds it to the let's own
   variable; a ``let`` of a shared node already bound elsewhere binds
   nothing, its variable standing for the node's: no alias is made.

Steps 1-3 are in ``anf_sharing.py``, step 4 here. Everything is a loop,
a ``Mutator`` of ``effir.ir.functor`` or an ``ExprFunctor``
(``effir.ir.expr_functor``: ``Unfolder``, ``_Normalizer``) whose generator
hooks run on the trampoline: no Python recursion proportional to the
program.

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

from collections.abc import Callable
from typing import overload

from effir.ir.expr import (
    ATOM_TYPES,
    Call,
    Clause,
    Expr,
    Function,
    If,
    Let,
    Match,
    RefCreate,
    RefRead,
    RefWrite,
    Tuple,
    TupleGetItem,
    Var,
    is_atom,
)
from effir.ir.expr_functor import Computation, ExprFunctor
from effir.ir.functor import Visitor, on
from effir.ir.module import IRModule
from effir.ir.node import Node, nodes_in
from effir.passes.analyses.anf_sharing import (
    Bindings,
    Facts,
    Placement,
    Scope,
    Slot,
    Unfolder,
    fresh_binders,
    replace_fields,
)
from effir.passes.infra.transform import module_pass

_SIMPLE = (Call, Tuple, TupleGetItem, RefCreate, RefRead, RefWrite)


def simple_operands(value: Expr) -> tuple[Expr, ...] | None:
    """The operands of a call, tuple, projection or reference operation
    (the values that open no block of their own), its expression fields
    in field order (``child_slots``); None for anything else."""
    if not isinstance(value, _SIMPLE):
        return None
    fields = nodes_in(value, _AnfCheck.plan(type(value))[2])
    return tuple(f for f in fields if isinstance(f, Expr))  # these classes hold only expressions


@module_pass(
    name="to-anf",
    establishes={"anf", "bbnf"},
    preserves={"a2"},
    doc="every intermediate value bound by a let, in evaluation order",
)
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
    function bodies); no compound node is reached twice. One walk (a
    ``Visitor`` over the compound nodes only), stopped at the first
    difference unless ``on_call`` is given; ``on_call`` sees every call
    (when ``fn`` is not in that form, possibly more than those of its
    blocks)."""
    check = _AnfCheck(on_call)
    try:
        check.visit(fn)
    except _NotAnf:
        return False
    return check.normal


_BLOCK_OPENERS = (If, Match, Function, Clause)


class _NotAnf(Exception):
    """Stops ``_AnfCheck`` at the first difference."""


class _AnfCheck(Visitor):
    """``is_anf_output``'s walk: each hook checks its node's own edges
    (operands are atoms; a let's value is no let and shares its span); the
    walk enters compound children only, and counts the edges that reach
    each (a node reached twice is shared)."""

    binders = False
    patterns = False

    def __init__(self, on_call: Callable[[Call], None] | None) -> None:
        super().__init__()
        self.on_call = on_call
        self.normal = True
        self.reached: set[int] = set()
        self.pending: list[Node] = []  # what a let chain leaves to the walk

    def fail(self) -> None:
        self.normal = False
        if self.on_call is None:
            raise _NotAnf

    def children(self, node: Node) -> list[Node]:
        """What the walk enters: let chains and the nodes with blocks of
        their own; the other children are checked here (``_value``)."""
        if type(node) is not Let:  # a let's chain hook did this
            reached = self.reached
            for child in nodes_in(node, self.plan(type(node))[2]):
                if type(child) is Let:
                    if id(child) in reached:
                        self.fail()
                    reached.add(id(child))
                    self.pending.append(child)
                else:
                    self._value(child)
        pending, self.pending = self.pending, []
        return pending

    def _atoms(self, *operands: Node) -> None:
        for operand in operands:
            if not isinstance(operand, ATOM_TYPES):
                self.fail()

    @on(Let)
    def _chain(self, head: Let) -> None:
        """A let chain as a loop: its lets and simple values checked here,
        the values with blocks of their own left to the walk."""
        reached = self.reached
        expr: Expr = head
        while isinstance(expr, Let):
            if expr.span is not expr.value.span or (expr is not head and id(expr) in reached):
                self.fail()
            reached.add(id(expr))
            self._value(expr.value)
            expr = expr.body
        self._value(expr)

    def _value(self, value: Node) -> None:
        """A let's value, a chain's end or a clause: an atom, or a node whose own
        hook accepts it (a let fails: no let in a let's value)."""
        if isinstance(value, ATOM_TYPES):
            return
        if id(value) in self.reached or isinstance(value, Let):
            self.fail()
            return
        self.reached.add(id(value))
        plan = self._plans.get(type(value)) or self.plan(type(value))
        rule = plan[0]
        if rule is not None:
            rule(self, value)
        if isinstance(value, _BLOCK_OPENERS):
            self.pending.append(value)

    @on(Call)
    def _call(self, node: Call) -> None:
        if self.on_call is not None:
            self.on_call(node)
        if not isinstance(node.callee, ATOM_TYPES):
            self.fail()
        for arg in node.args:
            if not isinstance(arg, ATOM_TYPES):
                self.fail()

    @on(Tuple, TupleGetItem, RefCreate, RefRead, RefWrite)
    def _simple(self, node: Expr) -> None:
        self._atoms(*nodes_in(node, self.plan(type(node))[2]))

    @on(If)
    def _if(self, node: If) -> None:
        self._atoms(node.cond)

    @on(Match)
    def _match(self, node: Match) -> None:
        self._atoms(node.data)


@overload
def to_anf_expr(expr: Function) -> Function: ...


@overload
def to_anf_expr(expr: Expr) -> Expr: ...


def to_anf_expr(expr: Expr) -> Expr:
    """``expr`` in A-normal form; a Function stays a Function (the
    normalizer's root is evaluated by its ``Function`` hook)."""
    return normal_form(expr, atomic=True)


def normal_form(expr: Expr, atomic: bool) -> Expr:
    """``expr`` with its blocks as let chains and its sharing placed by
    [RULE ANF-SCOPE] and [RULE ANF-UNFOLD]: operands bound to atoms when ``atomic`` (ANF),
    left nested otherwise, where only sharing across blocks is bound (BBNF)."""
    if is_atom(expr):
        return expr
    normalizer = _Normalizer(expr, atomic)
    return normalizer.drive(normalizer.top())


# -------------------------------------------------------------- normalizer
class _Normalizer(ExprFunctor):
    """Step 4: blocks as let chains, shared nodes bound by [RULE ANF-SCOPE]/[RULE ANF-UNFOLD].
    An ``ExprFunctor``: ``eval(expr, bindings)`` is ``expr``'s let-free
    value, what it needs emitted into ``bindings``."""

    def __init__(self, root: Expr, atomic: bool) -> None:
        super().__init__()
        self.atomic = atomic
        facts = Facts(root)
        pinned: set[int] = set()
        if facts.shared or not atomic:
            pinned = facts.pinned()
        if any(key in pinned for key in facts.shared):
            unfolder = Unfolder(pinned)
            root = unfolder.drive(unfolder.visit(root))
            facts = Facts(root)
            pinned = facts.pinned()
        self.root = root
        self.shared = facts.shared
        self.pinned = pinned
        self.placement = Placement(root, facts) if facts.shared else None
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
            return (yield self.eval(root, []))
        scope = self.placement.root if self.placement is not None else None
        return (yield self.block(root, scope))

    def _scope(self, node: Expr, slot: Slot) -> Scope | None:
        if self.placement is None:
            return None
        return self.placement.blocks.get((id(node), slot))

    def block(self, expr: Expr, scope: Scope | None) -> Computation[Expr]:
        """``expr`` as a let chain ending in a value, in a block of its own."""
        bindings: Bindings = []
        if scope is not None:
            scope.frame = bindings
        result = yield self.value(expr, bindings)
        if scope is not None:
            scope.frame = None
        for var, value, _ in reversed(bindings):
            result = Let(var, value, result, span=value.span)
        return result

    def _target(self, key: int, bindings: Bindings) -> Bindings:
        """Where a shared node is bound: here when pinned, else its scope."""
        if key in self.pinned:
            return bindings
        assert self.placement is not None
        frame = self.placement.home[key].frame
        if frame is None:  # its scope encloses every use, so it is being built
            raise RuntimeError("normal form: a shared expression's scope is not open")
        return frame

    def value(self, expr: Expr, bindings: Bindings) -> Expr | Computation[Expr]:
        """A let-free value for ``expr``, emitting what it needs into
        ``bindings``: an atom's at once, else a computation (the hook's own
        when ``expr`` is not shared: no generator in between)."""
        if isinstance(expr, ATOM_TYPES):
            return self.alias.get(expr, expr) if isinstance(expr, Var) else expr
        key = id(expr)
        if key not in self.shared:
            return (self._plans.get(type(expr)) or self.plan(type(expr)))[0](self, expr, bindings)
        return self._shared_value(expr, key, bindings)

    def _shared_value(self, expr: Expr, key: int, bindings: Bindings) -> Computation[Expr]:
        if key in self.bound:
            return self.bound[key]
        if key not in self.bind:  # BBNF: shared within one block stays shared
            result = yield self.eval(expr, bindings)
            self.bound[key] = result
            return result
        target = self._target(key, bindings)
        result = yield self.eval(expr, target)
        if not is_atom(result):
            var = Var(_hint(expr), span=expr.span)
            target.append((var, result, key in self.pinned))
            result = var
        self.bound[key] = result
        return result

    def atom(self, expr: Expr, bindings: Bindings) -> Expr | Computation[Expr]:
        """An atom for ``expr`` (at once when it is one), binding it first
        if it is compound."""
        if isinstance(expr, ATOM_TYPES):
            return self.alias.get(expr, expr) if isinstance(expr, Var) else expr
        return self._bound_atom(expr, bindings)

    def _bound_atom(self, expr: Expr, bindings: Bindings) -> Computation[Expr]:
        value = yield self.value(expr, bindings)
        if is_atom(value):
            return value
        var = Var(_hint(expr), span=expr.span)
        bindings.append((var, value, id(expr) in self.pinned))
        return var

    def _known(self, expr: Expr) -> Expr | None:
        """The value of an atom or of a shared node already bound, without a
        trip through the trampoline (most operands are one of these)."""
        if isinstance(expr, Var):  # (the atom it aliases, as _atom_value)
            return self.alias.get(expr, expr)
        if isinstance(expr, ATOM_TYPES):
            return expr
        return self.bound.get(id(expr))

    def _atom_value(self, atom: Expr) -> Expr:
        """An atom's value: the atom a variable aliases, else itself."""
        return self.alias.get(atom, atom) if isinstance(atom, Var) else atom

    def operand(self, expr: Expr, bindings: Bindings) -> Expr | Computation[Expr]:
        if self.atomic:
            return self.atom(expr, bindings)
        return self.value(expr, bindings)

    def operands(self, parts: list[Expr], bindings: Bindings) -> Computation[list[Expr]]:
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

    def _settle(self, parts: list[Expr], values: list[Expr], bindings: Bindings, mark: int) -> None:
        early: Bindings = []
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

    def _let(self, let: Let, bindings: Bindings) -> Computation[None]:
        """One binding of a let chain. The first evaluation of a shared node
        here binds it to the let's own variable; a let of a shared node bound
        elsewhere makes no alias: its variable stands for the node's. (Not
        when the variable is annotated: the annotation may loosen its type.)"""
        value, key = let.value, id(let.value)
        plain = let.var.type_annotation is None
        if isinstance(value, ATOM_TYPES):
            result = self._atom_value(value)
        elif key not in self.shared:
            result = yield (self._plans.get(type(value)) or self.plan(type(value)))[0](
                self, value, bindings
            )
        elif (
            plain
            and key not in self.bound
            and (key not in self.bind or self._target(key, bindings) is bindings)
        ):
            result = yield self.eval(value, bindings)
            self.bound[key] = let.var
        else:
            result = yield self.value(value, bindings)
            if plain and is_atom(result):
                self.alias[let.var] = result
                return
        bindings.append((let.var, result, key in self.pinned))

    # One hook per compound class: its operands in evaluation order, its
    # blocks (branches, clauses, a function's body) each a block of its own.
    @on(Let)
    def _let_chain(self, head: Let, bindings: Bindings) -> Computation[Expr]:
        expr: Expr = head
        # A shared let inside the chain is a value of its own (memoized).
        while isinstance(expr, Let) and (expr is head or id(expr) not in self.shared):
            yield self._let(expr, bindings)
            expr = expr.body
        return (yield self.value(expr, bindings))

    @on(Call)
    def _call(self, expr: Call, bindings: Bindings) -> Computation[Expr]:
        values = yield self.operands([*expr.args, expr.callee], bindings)
        return replace_fields(expr, args=tuple(values[:-1]), callee=values[-1])

    @on(Tuple)
    def _tuple(self, expr: Tuple, bindings: Bindings) -> Computation[Expr]:
        return replace_fields(
            expr, fields=tuple((yield self.operands(list(expr.fields), bindings)))
        )

    @on(TupleGetItem)
    def _get(self, expr: TupleGetItem, bindings: Bindings) -> Computation[Expr]:
        return replace_fields(expr, tuple_value=(yield self.operand(expr.tuple_value, bindings)))

    @on(RefCreate)
    def _ref_create(self, expr: RefCreate, bindings: Bindings) -> Computation[Expr]:
        return replace_fields(expr, value=(yield self.operand(expr.value, bindings)))

    @on(RefRead)
    def _ref_read(self, expr: RefRead, bindings: Bindings) -> Computation[Expr]:
        return replace_fields(expr, ref=(yield self.operand(expr.ref, bindings)))

    @on(RefWrite)
    def _ref_write(self, expr: RefWrite, bindings: Bindings) -> Computation[Expr]:
        ref, value = yield self.operands([expr.ref, expr.value], bindings)
        return replace_fields(expr, ref=ref, value=value)

    @on(If)
    def _if(self, expr: If, bindings: Bindings) -> Computation[Expr]:
        cond = yield self.operand(expr.cond, bindings)
        then_branch = yield self.block(expr.then_branch, self._scope(expr, "then"))
        else_branch = yield self.block(expr.else_branch, self._scope(expr, "else"))
        return replace_fields(expr, cond=cond, then_branch=then_branch, else_branch=else_branch)

    @on(Match)
    def _match(self, expr: Match, bindings: Bindings) -> Computation[Expr]:
        data = yield self.operand(expr.data, bindings)
        clauses = []
        for i, clause in enumerate(expr.clauses):
            body = yield self.block(clause.body, self._scope(expr, i))
            clauses.append(replace_fields(clause, body=body))
        return replace_fields(expr, data=data, clauses=tuple(clauses))

    @on(Function)
    def _function(self, expr: Function, bindings: Bindings) -> Computation[Expr]:
        return replace_fields(expr, body=(yield self.block(expr.body, self._scope(expr, "body"))))


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


__all__ = [
    "fresh_binders",  # defined in anf_sharing; state passing and partial evaluation use it
    "is_anf_output",
    "normal_form",
    "simple_operands",
    "to_anf",
    "to_anf_expr",
]
