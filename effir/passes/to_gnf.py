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
  captures it): graph form is one activation's dataflow, and writing the
  value inside the closure would compute it at each call (a loop body's
  key split would draw from the same key at every iteration, which the
  linearity verifier rightly rejects in a state-passing program).

The decision is made on the value with the substitutions already done, so
``let %f = fn (...) {...}; %f(%x)`` becomes one call of the literal, itself
movable if the body is.

A removed binding whose variable is unused disappears, as in Relay. Its
value has no effect; only a run-time failure (or a pure loop that never
ends) could have been observed, as with ``dce``.

``to-anf`` after ``to-gnf`` runs as the original: movable values move to
their uses' lowest common scope (a pure value may go down into a branch that
uses it, never into a closure). The checker ``gnf_problem`` (invariant ``gnf``) names the
first let that [RULE GNF-KEEP] would remove.
"""

from __future__ import annotations

from collections.abc import Iterator

from ..ir.expr import ATOM_TYPES, Expr, Function, Let, Var
from ..ir.functor import Mutator
from ..ir.module import IRModule
from ..ir.node import Node
from .anf_sharing import Facts, expression_edges, pins
from .infra import module_pass
from .to_bbnf import located


@module_pass(
    name="to-gnf",
    establishes={"gnf"},
    doc="pure let-bound values written where they are used (graph form, for display)",
)
def to_gnf(module: IRModule) -> IRModule:
    """Every global function in graph normal form (cell initialisers are
    left alone)."""
    functions = {name: to_gnf_expr(fn) for name, fn in module.functions.items()}
    return IRModule(functions, module.type_defs, module.cells)


def to_gnf_expr(expr: Expr) -> Expr:
    """``expr`` with its movable, unannotated lets substituted away.

    A let kept because a closure captures it can become removable when that
    closure is itself removed as unused (it is decided before the closure's
    fate is known): the walk is repeated until no such let is left. Each
    round removes at least one let and is linear; a second round is needed
    only where a dropped closure captured a let, a third only where such a
    let's value was itself a dropped closure's capture, and so on."""
    if isinstance(expr, ATOM_TYPES):
        return expr
    result: Expr = _Graph(expr).mutate(expr)  # type: ignore[assignment]
    while next(removable_lets(result), None) is not None:
        result = _Graph(result).mutate(result)  # type: ignore[assignment]
    return result


def gnf_problem(module: IRModule) -> str | None:
    """Where ``module`` is not in graph normal form, or None."""
    for name, fn in module.functions.items():
        for let in removable_lets(fn):
            return (
                f"@{name}: let %{let.var.name_hint}{located(let)} binds a pure value; "
                "graph normal form writes the value where it is used"
            )
    return None


def removable_lets(root: Expr) -> Iterator[Let]:
    """The lets of ``root`` that graph normal form removes [RULE GNF-KEEP]."""
    facts = Facts(root)
    pinned = facts.pinned()
    captured = _captured(facts)
    for node in facts.order:
        if not isinstance(node, Let) or node.var.type_annotation is not None:
            continue
        if node.var in captured:
            continue
        value = node.value
        if isinstance(value, ATOM_TYPES):
            if not (isinstance(value, Var) and value in facts.recursive):
                yield node
        elif id(value) not in pinned:
            yield node


def _captured(facts: Facts) -> set[Var]:
    """Let variables used inside a function literal within their scope: a
    use nested in more function literals than the let. Nodes go parents
    first (reversed post-order); a shared node counts at its deepest place."""
    depth: dict[int, int] = {}
    deepest_use: dict[Var, int] = {}
    bound_at: dict[Var, int] = {}
    for node in reversed(facts.order):
        here = depth.get(id(node), 0)
        if isinstance(node, Let):
            bound_at[node.var] = here
        inner = here + 1 if isinstance(node, Function) else here
        for _, child, _ in expression_edges(node):
            if isinstance(child, Var):
                deepest_use[child] = max(deepest_use.get(child, 0), inner)
            elif not isinstance(child, ATOM_TYPES):
                depth[id(child)] = max(depth.get(id(child), 0), inner)
    return {v for v, d in bound_at.items() if deepest_use.get(v, 0) > d}


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
        self.captured = _captured(facts)
        self.subst: dict[Var, Expr] = {}
        self.pinned: dict[int, bool] = {}  # of rebuilt nodes, by identity
        self.keep: list[Expr] = []  # rebuilt nodes stay alive: their ids are keys

    def child(self, node: Node) -> Node:
        if isinstance(node, Var):
            return self.subst.get(node, node)
        return self.memo.get(id(node), node)

    def bind(self, let: Let) -> None:
        value = self.child(let.value)
        var = let.var
        if var.type_annotation is None and var not in self.captured and self._movable(value):
            self.subst[var] = value  # type: ignore[assignment]

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
            self.keep.append(node)
        return node
