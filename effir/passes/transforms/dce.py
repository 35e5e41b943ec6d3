"""Dead-code elimination, effect-aware: ``let`` bindings whose variable is
never used and whose value can have no effect are removed.

Purpose
-------
Explicate, state passing and partial evaluation leave values nobody reads: a
projection of a tuple whose other fields were wanted, a key split whose draw
went away, a tuple built for a function that was inlined. ``dce`` removes
them, in every block of the program (function bodies, branches, clauses,
closure bodies, loop bodies), so that later passes and the backends see only
what the result needs. It requires nothing (not even A-normal form: a value
that is a nested expression is removable only when all of it is) and keeps
everything it does not remove, spans and node identity included. A removed
binding may have been the only use that typed a ``Nil`` that stays; in a
function it changed, such a binding gets that type as annotation [RULE PIN-CONTEXT].

Which values may go, and why
----------------------------
A binding ``let %x = v; body`` is *dead* when ``%x`` is not used in ``body``
(a use inside ``v`` itself, a let-bound function calling itself, does not
count) and ``v`` is *effect-free*: evaluating it changes nothing the rest of
the program or its caller can observe, so not evaluating it changes nothing
either [RULE DCE-UNOBSERVED]. Effect-free are:

- atoms, tuples, projections, ``fn`` literals (creating a closure runs
  nothing) and constructor calls: they only build values;
- ``ref(v)``: a new reference that nobody holds is unobservable, and
  ``ref_read(r)``: reading writes nothing (§4.1 of docs/semantics.md);
- calls of operators whose registry effect kind is ``pure`` and which are
  not ``control_flow``. The keyed ``random.*`` operators are among them:
  their result depends on the key they are given, not on hidden state, so
  an unused draw may go (the split that made its key is a separate binding,
  and stays if the cell's next key uses it);
- calls of functions, closures and ``cf.*`` loops whose effects, as
  ``infer_effects`` gives them for that call site, are ``pure``, and that
  write no local reference either (effect inference does not list local
  ``ref(...)`` cells, since a caller never sees them; but a closure writing
  a reference of its creator is observable by the creator, so a call that
  may write any reference stays) [RULE DCE-CALL];
- ``let``, ``if`` and ``match`` whose parts are all effect-free.

Never effect-free: ``ref_write``; every operator whose kind is ``io``
(``debug.print``, ``io.print``: output is observable and ordered), ``random``
or ``state`` (``nn.dropout`` advances its key cell, ``nn.batch_norm``
updates or reads its statistics cell: removing one would leave the cell
behind); and calls whose inferred effects are not pure. The rules test the
registry's effect kinds and traits and the inferred effects, never an
operator's name.

A shared sub-expression (the text's graph form ``%0 = ...;``) is evaluated
where it is first needed; removing a dead binding that contains its first
use moves its evaluation to the next one. That is harmless for an
effect-free value unless it allocates references (the closure/creator rule
of semantics §8 could then give two references where there was one), so a
shared node that may allocate counts as effectful [RULE DCE-SHARED].

What removal may change
-----------------------
Effect sets do not record run-time failure or non-termination (§4.1). A
removed pure computation that would have failed (an integer division by
zero, a ``match?`` that no clause matches, a parameter check of a called
function) or run forever (a pure recursive function that never returns)
makes the program succeed where it failed or looped, as Relay's DCE does.
Operators that cannot fail on well-typed arguments (``take`` in ``clip``
mode clamps every index) lose nothing. On every program that runs to
completion, results, final state and printed values are unchanged, bit for
bit; the tests check this on random programs.

Algorithm
---------
1. One post-order walk per function: its non-atomic nodes, children first,
   and which of them are shared.
2. Per node, bottom-up over that order: whether it is effect-free. A call
   of a function or loop asks ``CallFacts`` (shared with ``cse``): the
   inferred effects of the call and, where the module creates local
   references, which calls may read, write or allocate any reference (a
   fixpoint over the call graph of ``solve_flows``). Both are computed on
   the first such question, so straight-line operator code never pays for
   effect inference.
3. One sweep in reverse evaluation order with a set of used variables: a
   block's tail first, then its bindings last to first. A binding whose
   variable is not in the set when it is reached (so no kept code after it
   uses it) and whose value is effect-free is dropped without visiting its
   value; otherwise its value is visited, which adds the variables it uses.
   So a binding used only by dead bindings is dead too, in the same sweep.
   The order of siblings does not matter: binders are unique and scopes
   lexical, so every use of ``%x`` is in ``%x``'s body, which is swept
   before ``%x`` is reached.

Known imprecisions (all on the safe side): a call whose inferred effects
only read cells stays (removing it would be sound, but the rule is "pure"),
and so does ``nn.batch_norm`` with ``training=False``, whose kind is
``state`` although it only reads its cell; a call that writes only a local
reference it creates itself stays; a shared node that may allocate counts
as effectful [RULE DCE-SHARED].

Each node is visited once (a shared node once, its result reused), so the
pass is linear in the program's size. Step 1 is ``effir.ir.analysis.scan``;
step 3 is a ``Mutator`` of ``effir.ir.functor`` in its ``body_first`` mode
(iterative: no Python recursion proportional to the program).
"""

from __future__ import annotations

from functools import cached_property

from effir.ir.analysis import body_nodes, operands, scan
from effir.ir.context_types import pin_changed_functions
from effir.ir.expr import (
    ATOM_TYPES,
    Call,
    Constructor,
    Function,
    Let,
    Op,
    RefCreate,
    RefRead,
    RefWrite,
    Var,
    is_atom,
)
from effir.ir.functor import Mutator, pre_order
from effir.ir.module import IRModule
from effir.ir.node import Node
from effir.ir.op import op_def
from effir.passes.analyses.infer_effects import EffectInfo, infer_effects, solve_flows
from effir.passes.analyses.infer_type import typed_if_possible
from effir.passes.infra.transform import module_pass

# What a call may do to references, local ones included (CallFacts.refs).
READ, WRITE, ALLOC, IO = "read", "write", "alloc", "io"


class CallFacts:
    """What each call of ``module`` may do: its inferred effects (global
    cells and io) and, when the module creates local references, what it may
    do to any reference (``READ``, ``WRITE``, ``ALLOC``, ``IO``). Computed on
    the first question: a program without calls of functions or loops never
    pays for effect inference."""

    def __init__(self, module: IRModule) -> None:
        self.module = module

    @cached_property
    def info(self) -> EffectInfo:
        return infer_effects(self.module)

    @cached_property
    def refs(self) -> dict[Call, frozenset[str]] | None:
        """What each call may do to references, None when the module creates
        none: every reference is then a global cell, which ``info`` covers."""
        module = self.module
        roots: list[Node] = [*module.functions.values(), *module.cells.values()]
        if not any(isinstance(n, RefCreate) for root in roots for n in pre_order(root)):
            return None
        return _reference_effects(module)

    def _refs(self, call: Call) -> frozenset[str]:
        refs = self.refs
        return frozenset() if refs is None else refs.get(call, frozenset())

    def removable(self, call: Call) -> bool:
        """[RULE DCE-CALL] an unused call of it may go: pure, and writes no reference."""
        effects = self.info.calls.get(call)
        return effects is not None and not effects and not ({WRITE, IO} & self._refs(call))

    def mergeable(self, call: Call) -> bool:
        """Two such calls on the same arguments give the same value: pure,
        and touches no reference at all (a read may see a write between
        the two; an allocation gives each call its own reference)."""
        effects = self.info.calls.get(call)
        return effects is not None and not effects and not self._refs(call)

    def allocates(self, call: Call) -> bool:
        return ALLOC in self._refs(call)


def _direct(node: Node) -> set[str]:
    if isinstance(node, RefRead):
        return {READ}
    if isinstance(node, RefWrite):
        return {WRITE}
    if isinstance(node, RefCreate):
        return {ALLOC}
    if isinstance(node, Call) and isinstance(node.callee, Op):
        effect = op_def(node.callee).effect
        if effect == "io":
            return {IO}
        if effect in ("random", "state"):
            return {READ, WRITE}
    return set()


def _reference_effects(module: IRModule) -> dict[Call, frozenset[str]]:
    """For each call, what it may do to references: its own effect plus the
    latent effects of every function it may call (a fixpoint over the call
    graph of the flow analysis)."""
    flows = solve_flows(module)
    units = [(("def", n), f) for n, f in module.functions.items()] + flows.functions
    latent: dict[object, set[str]] = {}
    calls: dict[object, list[tuple[Call, set]]] = {}
    for src, fn in units:
        latent[src] = set()
        calls[src] = []
        for node in body_nodes(fn.body):
            latent[src] |= _direct(node)
            if isinstance(node, Call):
                calls[src].append((node, flows.callees_of(node)))
    changed = True
    while changed:
        changed = False
        for src, sites in calls.items():
            for _, callees in sites:
                for callee in callees:
                    extra = latent.get(callee, set()) - latent[src]
                    if extra:
                        latent[src] |= extra
                        changed = True
    result: dict[Call, frozenset[str]] = {}
    for sites in calls.values():
        for call, callees in sites:
            found = _direct(call)
            for callee in callees:
                found |= latent.get(callee, set())
            result[call] = frozenset(found)
    return result


# --------------------------------------------------------------- effect-free
def _operands(node: Node) -> list[Node]:
    """The non-atomic expressions and clauses ``node`` evaluates."""
    return [v for v in operands(node) if not isinstance(v, ATOM_TYPES)]


def _effect_free(order: list[Node], shared: set[int], facts: CallFacts) -> set[int]:
    """The ids of the nodes of ``order`` whose evaluation has no effect
    [RULE DCE-UNOBSERVED]; atoms have none."""
    free: set[int] = set()
    allocates: set[int] = set()
    for node in order:
        if isinstance(node, Function):
            free.add(id(node))  # creating a closure runs nothing
            continue
        if isinstance(node, RefWrite):
            continue
        ok = True
        fresh = isinstance(node, RefCreate)
        if isinstance(node, Call):
            ok = _call_removable(node, facts)
            fresh = _allocates(node, facts)
        for child in _operands(node):
            key = id(child)
            if key not in free or (key in shared and key in allocates):  # [RULE DCE-SHARED]
                ok = False
            if key in allocates:
                fresh = True
        if ok:
            free.add(id(node))
        if fresh:
            allocates.add(id(node))
    return free


def _allocates(call: Call, facts: CallFacts) -> bool:
    callee = call.callee
    if isinstance(callee, Constructor) or (
        isinstance(callee, Op) and "control_flow" not in op_def(callee).traits
    ):
        return False
    return facts.allocates(call)


def _call_removable(call: Call, facts: CallFacts) -> bool:
    callee = call.callee
    if isinstance(callee, Op):
        definition = op_def(callee)
        if "control_flow" in definition.traits:
            return facts.removable(call)  # a loop has its bodies' effects
        return definition.effect == "pure"
    if isinstance(callee, Constructor):
        return True
    return facts.removable(call)


# ---------------------------------------------------------------------- pass
@module_pass(
    name="dce",
    preserves={"anf", "a2", "bbnf"},  # only removes bindings
    doc="removes let bindings whose variable is unused and whose value has no effect",
)
def dce(module: IRModule) -> IRModule:
    """``module`` without its dead bindings (the module itself if it has none)."""
    facts = CallFacts(module)
    functions = {}
    for name, fn in module.functions.items():
        order, shared = scan(fn)
        functions[name] = _Sweep(_effect_free(order, shared, facts)).mutate_as(fn, Function)
    if all(functions[n] is fn for n, fn in module.functions.items()):
        return module
    # A removed binding may have been what typed a `Nil` that stays [RULE PIN-CONTEXT].
    functions = pin_changed_functions(module, functions, typed_if_possible)
    return IRModule(functions, module.type_defs, module.cells)


class _Sweep(Mutator):
    """The reverse sweep of step 3; ``free`` holds the effect-free nodes.
    Bodies are swept before values (``body_first``), and each variable a
    kept node holds is marked used as the node is rebuilt."""

    body_first = True
    patterns = False

    def __init__(self, free: set[int]) -> None:
        super().__init__()
        self.free = free
        self.used: set[Var] = set()

    def keep(self, let: Let) -> bool:
        value = let.value
        return let.var in self.used or not (is_atom(value) or id(value) in self.free)

    def child(self, node: Node) -> Node:
        if isinstance(node, Var):
            self.used.add(node)
            return node
        return self.memo.get(id(node), node)


__all__ = ["CallFacts", "dce"]
