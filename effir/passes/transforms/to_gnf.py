"""Graph normal form (``to-gnf``), for display, as Relay's ToGraphNormalForm.

A let-bound variable used as a pure value is replaced by the value itself,
so that the printer shows the dataflow graph: a value used once is written
where it is used, one used several times once as ``%N = ...;`` in the
innermost block around its uses (the printer's graph form), and
``to-anf`` gives the bindings back.

Which lets go
-------------
Relay's pass removes every let (a recursive one becomes ``let %f = v;
%f``): its IR had no effects worth ordering. Here a let is removed when
its value is *movable* in the sense of ``anf.py`` [RULE ANF-MOVABLE]: no effectful
operator, no reference, no call of unknown code (a variable, a global, a
computed closure; a called function literal is checked with its body), no
loop with a non-literal body, no recursive let's variable. The others stay
lets, in order: the let is what orders an effect, and a graph node is
evaluated where it is first needed, which could be later or, once shared,
in another branch. Two more kinds stay [RULE GNF-KEEP]:

- a let whose variable is annotated: the annotation is part of the
  program (it may loosen a dimension to ``?``) and graph form has nowhere
  to write it;
- a let whose variable a function literal inside its scope uses (a closure
  that stays captures it; one in the value of a let that goes does not
  count): graph form is one activation's dataflow, and writing the
  value inside the closure would compute it at each call (a loop body's
  key split would draw from the same key at every iteration, which the
  linearity verifier rightly rejects in a state-passing program).

The decision is made on the value with the substitutions already done, so
``let %f = fn (...) {...}; %f(%x)`` becomes one call of the literal, itself
movable if the body is.

A removed binding whose variable is unused disappears, as in Relay. Its
value has no effect; only a run-time failure (or a pure loop that never
ends) could have been observed, as with ``dce``. When it was the only use
that typed a ``Nil`` (``match (@rev(Nil)) {...}`` unused), the binding that
holds the ``Nil`` gets that type as annotation [RULE PIN-CONTEXT] and,
annotated, stays a let.

``to-anf`` after ``to-gnf`` runs as the original: movable values move to
their uses' lowest common scope (a pure value may go down into a branch that
uses it, never into a closure). The checker ``gnf_problem`` (invariant ``gnf``,
effir/passes/infra/invariants.py) names the
first let that [RULE GNF-KEEP] would remove.
"""

from __future__ import annotations

from typing import TypeVar

from effir.ir.context_types import pin_changed_functions
from effir.ir.expr import ATOM_TYPES, Expr, Function, Let, Var
from effir.ir.functor import Mutator
from effir.ir.module import IRModule
from effir.ir.node import Node
from effir.passes.analyses.anf_sharing import Facts, expression_edges, pins
from effir.passes.analyses.infer_type import typed_if_possible
from effir.passes.infra.invariants import captured_lets, removable_lets
from effir.passes.infra.transform import module_pass

E = TypeVar("E", bound=Expr)


@module_pass(
    name="to-gnf",
    establishes={"gnf"},
    preserves={"a2"},
    doc="pure let-bound values written where they are used (graph form, for display)",
)
def to_gnf(module: IRModule) -> IRModule:
    """Every global function in graph normal form (cell initialisers are
    left alone)."""
    functions = {name: _graph_form(fn, Function) for name, fn in module.functions.items()}
    # A removed binding may have been what typed a `Nil` that stays [RULE PIN-CONTEXT].
    functions = pin_changed_functions(module, functions, typed_if_possible)
    return IRModule(functions, module.type_defs, module.cells)


def to_gnf_expr(expr: Expr) -> Expr:
    """``expr`` with its movable, unannotated lets substituted away.

    A let kept because a closure captures it becomes removable when that
    closure is itself removed as unused. A backward sweep first finds the
    lets that go for certain (unused by the code that stays, unannotated,
    movable even before any substitution: ``_Dying``), and captures inside
    their values do not count: a chain of dropped closures, each capturing
    the previous one's let, goes in one linear walk. A let that goes only
    once another's substitution makes its value movable (a call of a
    let-bound closure, which the sweep takes as unknown code) is caught by
    a further walk, repeated until no removable let is left."""
    return _graph_form(expr, Expr)


def _graph_form(expr: E, kind: type[E]) -> E:
    """``to_gnf_expr`` of an expression that stays a ``kind`` (a function)."""
    if isinstance(expr, ATOM_TYPES):
        return expr
    result = _Graph(expr).mutate_as(expr, kind)
    while next(removable_lets(result), None) is not None:
        result = _Graph(result).mutate_as(result, kind)
    return result


class _Dying(Mutator):
    """The backward sweep of ``to_gnf_expr``: body before value, as ``dce``
    sweeps. A let goes for certain when no code that stays uses its
    variable, it is unannotated and its value is movable as it is
    (``pinned``: before any substitution, a call of a variable counts as
    unknown code); its value is then not visited, so what it uses counts
    for nothing. ``dying`` collects the ids of those lets."""

    body_first = True
    patterns = False

    def __init__(self, facts: Facts) -> None:
        super().__init__()
        self.pinned = facts.pinned()
        self.recursive = facts.recursive
        self.used: set[Var] = set()
        self.dying: set[int] = set()

    def keep(self, let: Let) -> bool:
        if let.var in self.used or let.var.type_annotation is not None:
            return True
        value = let.value
        if isinstance(value, ATOM_TYPES):
            movable = not (isinstance(value, Var) and value in self.recursive)
        else:
            movable = id(value) not in self.pinned
        if movable:
            self.dying.add(id(let))
        return not movable

    def child(self, node: Node) -> Node:
        if isinstance(node, Var):
            self.used.add(node)
            return node
        return self.memo.get(id(node), node)


class _Graph(Mutator):
    """One walk in evaluation order of bindings: a let's value is rebuilt
    (with the substitutions made so far), then either substituted for its
    variable (``bind``) or kept. Binders are unique, so one substitution
    map serves the whole walk; shared nodes are rebuilt once (memo)."""

    patterns = False

    def __init__(self, root: Expr) -> None:
        super().__init__()
        facts = Facts(root)
        self.recursive = facts.recursive
        sweep = _Dying(facts)
        sweep.mutate(root)
        self.captured = captured_lets(facts, frozenset(sweep.dying))
        self.subst: dict[Var, Expr] = {}
        self.pinned: dict[int, bool] = {}  # of rebuilt nodes, by identity
        self.alive: list[Expr] = []  # rebuilt nodes stay alive: their ids are keys

    def child(self, node: Node) -> Node:
        if isinstance(node, Var):
            return self.subst.get(node, node)
        return self.memo.get(id(node), node)

    def bind(self, let: Let) -> None:
        value = self.child_expr(let.value)
        var = let.var
        if var.type_annotation is None and var not in self.captured and self._movable(value):
            self.subst[var] = value

    def finish(self, node: Node) -> Node:
        if isinstance(node, Let) and node.var in self.subst:
            return self.child(node.body)
        rebuilt = self.rebuild(node)
        return self._register(rebuilt) if isinstance(rebuilt, Expr) else rebuilt

    def _movable(self, value: Node) -> bool:
        if isinstance(value, ATOM_TYPES):
            return not (isinstance(value, Var) and value in self.recursive)
        return not self.pinned[id(value)]

    def _register(self, node: Expr) -> Expr:
        """Record whether a rebuilt node is pinned ([RULE ANF-MOVABLE] of anf.py)."""
        if id(node) not in self.pinned:
            self.pinned[id(node)] = pins(node, self.recursive) or any(
                self.pinned.get(id(child), False) for _, child, _ in expression_edges(node)
            )
            self.alive.append(node)
        return node
