"""Effect inference: which global state cells each function and each call
reads and writes, and whether it does I/O.

An effect set names global cells (``read @rng``, ``write @rng``) and ``io``;
the empty set is ``pure``. Local ``ref(...)`` cells are not global state and
do not appear (they cannot outlive or escape the program's run unnoticed by
its caller: the caller only sees results).

The algorithm has two fixpoints over the whole module:

1. **What may flow where** (a flow-insensitive, field-insensitive closure and
   reference analysis, "0-CFA"). Every expression gets a set of *sources*:
   functions (a ``def`` or a ``fn`` node), constructors, global cells and
   ``ref(...)`` allocation sites. Sources flow through lets, calls (arguments
   to parameters, bodies to results), tuples, ADT fields, pattern variables,
   reference contents and control-flow operators (a function given to
   ``cf.foreach`` is called with the operator's other arguments) [RULE EFFECT-FLOW].
   Tuples and ADT values hold the union of their fields: imprecise but sound.
   Once the program is type-checked, types sharpen this [RULE EFFECT-TYPED]: a value
   whose type is a tensor or a key holds no function and no reference. A
   module not yet checked is checked first (where it type-checks): without
   types the sets grow with the nesting of closures, and the work with it.
2. **Effects**: a function's effects are its body's direct effects
   (``ref_read``/``ref_write`` of a reference that may be a global cell, an
   effectful operator on such a reference, an ``io`` operator) plus the
   latent effects of every function a call in its body may call [RULE EFFECT-DIRECT].
   Bodies of nested ``fn`` are not part of the enclosing function's effects
   until the closure is called. Recursion is handled by iterating to a
   fixpoint over the call graph.

Effect kinds per operator come from the registry (``effect``): ``random``
and ``state`` operators read and write the cell they are given (batch norm
in inference mode only reads it), ``io`` operators add ``io``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from effir.ir.analysis import body_nodes
from effir.ir.diagnostics import EffectError
from effir.ir.expr import (
    Call,
    Clause,
    Constructor,
    Expr,
    Function,
    GlobalVar,
    If,
    Let,
    Match,
    Op,
    PatternConstructor,
    PatternTuple,
    PatternVar,
    RefCreate,
    RefRead,
    RefWrite,
    Tuple,
    TupleGetItem,
    Var,
)
from effir.ir.expr_functor import ExprFunctor
from effir.ir.functor import on, pre_order
from effir.ir.module import IRModule
from effir.ir.node import Node, child_nodes
from effir.ir.op import op_def
from effir.ir.types import FuncType, KeyType, RefType, TensorType, TupleType, Type
from effir.ir.well_formed import check_well_formed
from effir.passes.analyses.infer_type import typed_if_possible

IO = "io"


def effect_text(effects: frozenset[str]) -> str:
    """``pure`` or the sorted effect items: ``io, read @rng, write @rng``."""
    return ", ".join(sorted(effects)) if effects else "pure"


@dataclass
class EffectInfo:
    """The result: effects per global function, per ``fn`` node and per call."""

    functions: dict[str, frozenset[str]] = field(default_factory=dict)
    closures: dict[Function, frozenset[str]] = field(default_factory=dict)
    calls: dict[Call, frozenset[str]] = field(default_factory=dict)
    violations: list[EffectError] = field(default_factory=list)

    def of(self, target: str | Function | Call) -> frozenset[str]:
        if isinstance(target, str):
            return self.functions[target.removeprefix("@")]
        if isinstance(target, Function):
            return self.closures[target]
        return self.calls[target]


def infer_effects(module: IRModule) -> EffectInfo:
    """Effects of every function, closure and call; ``violations`` lists the
    functions whose effects exceed an effect annotation (see check_effects)."""
    check_well_formed(module)
    return _EffectInference(_typed(module)).run()


def check_effects(module: IRModule) -> EffectInfo:
    """Effect inference, raising the first EffectError (each one listed in
    its notes) when a function reaches a binder annotated with an effect set
    it exceeds: ``let %f: fn () -> {} int32 = fn () { ref_read(@c) }``.

    An annotation's ``random`` allows reading and writing every state cell
    that holds a ``Key``."""
    info = infer_effects(module)
    if info.violations:
        first = info.violations[0]
        notes = tuple(str(v) for v in info.violations[1:])
        raise EffectError(first.message, first.span, notes)
    return info


def solve_flows(module: IRModule) -> _EffectInference:
    """The flow solution alone, for passes that must know which functions,
    cells and references an expression may be (``value_of``, ``callees_of``)."""
    analysis = _EffectInference(_typed(module))
    analysis.solve_flows()
    return analysis


def _typed(module: IRModule) -> IRModule:
    """``module`` type-checked when it is not yet and can be [RULE EFFECT-TYPED]: without
    types, every function a loop or an operator is given may flow into every
    value after it, so sets grow with the nesting of closures (quadratic
    work, 2.5x for twice the nested loops); checking is linear. A module
    that does not type-check is analysed as it is."""
    return typed_if_possible(module)


# Sources are hashable: ("def", name), ("fn", Function), ("ctor", name),
# ("cell", name), ("alloc", RefCreate).
Source = tuple


class _EffectInference(ExprFunctor):
    """The flow analysis: ``step`` is each node's transfer function (one
    ``@on`` hook per expression class, applied by the fixpoint in
    ``solve_flows``), then the effects read off the solved flows."""

    def __init__(self, module: IRModule) -> None:
        super().__init__()
        self.module = module
        self.values: dict[object, set[Source]] = {}  # node or ("ret", source) / ("content", src)
        self.functions: list[tuple[Source, Function]] = []
        self.binder_vars: list[Var] = []  # every variable binder, for annotations
        self.bodies: dict[Source, list[Node]] = {}
        self.holds = _Holds()

    def flows(self, key: object) -> set[Source]:
        found = self.values.get(key)
        if found is None:
            found = self.values[key] = set()
        return found

    def add(self, key: object, sources: set[Source]) -> bool:
        target = self.flows(key)
        before = len(target)
        if isinstance(key, Expr) and key.has_type and sources:
            sources = _holdable(sources, self.holds(key.checked_type))
        target |= sources
        return len(target) != before

    # -------------------------------------------------------------- flows
    def run(self) -> EffectInfo:
        return self.effects(self.solve_flows())

    def solve_flows(self) -> list[tuple[Source, Function]]:
        """Solve the flows; the global functions, as roots of the effects."""
        module = self.module
        roots: list[tuple[Source, Function]] = [
            (("def", name), fn) for name, fn in module.functions.items()
        ]
        nodes: list[Node] = []
        defs = set(module.functions.values())
        starts: list[Node] = [fn for _, fn in roots] + [c.init for c in module.cells.values()]
        # Last root and last child first, as this walk always went: the order
        # changes how many sweeps the fixpoint below takes, not its result.
        for node in pre_order(*reversed(starts), children=_last_first):
            nodes.append(node)
            if isinstance(node, Function) and node not in defs:
                self.functions.append((("fn", node), node))
            if isinstance(node, Function):
                self.binder_vars.extend(node.params)
            elif isinstance(node, Let):
                self.binder_vars.append(node.var)
            elif isinstance(node, PatternVar):
                self.binder_vars.append(node.var)
        # Children before parents: most flows then settle in one sweep.
        nodes.reverse()
        changed = True
        while changed:
            changed = False
            for name, cell in module.cells.items():
                # `global @c = ref(init)`: the cell holds init's value.
                changed |= self.add(("content", ("cell", name)), self.value_of(cell.init))
            for node in nodes:
                changed |= self.step(node)
        return roots

    def value_of(self, expr: Expr) -> set[Source]:
        if isinstance(expr, GlobalVar):
            if expr.name in self.module.functions:
                return {("def", expr.name)}
            return {("cell", expr.name)}
        if isinstance(expr, Constructor):
            return {("ctor", expr.name)}
        if isinstance(expr, Function):
            return {("fn", expr)}
        return self.flows(expr)

    def function_of(self, source: Source) -> Function | None:
        if source[0] == "def":
            return self.module.functions[source[1]]
        if source[0] == "fn":
            return source[1]
        return None

    def call_into(self, callees: set[Source], args: list[set[Source]], result: object) -> bool:
        """[RULE EFFECT-FLOW] arguments flow to parameters, bodies to the call's result."""
        changed = False
        for src in list(callees):
            fn = self.function_of(src)
            if fn is not None:
                for param, arg in zip(fn.params, args, strict=False):
                    changed |= self.add(param, arg)
                changed |= self.add(result, self.value_of(fn.body))
            elif src[0] == "ctor":
                for arg in args:
                    changed |= self.add(result, arg)
        return changed

    def step(self, node: Node) -> bool:
        """[RULE EFFECT-FLOW] one node's flows; whether any set grew."""
        return self.eval(node)

    @on(Node)
    def _no_flow(self, node: Node) -> bool:
        return False  # atoms, functions, patterns: their values are read off

    @on(Let)
    def _let(self, node: Let) -> bool:
        v = self.value_of
        return self.add(node.var, v(node.value)) | self.add(node, v(node.body))

    @on(If)
    def _if(self, node: If) -> bool:
        v = self.value_of
        return self.add(node, v(node.then_branch)) | self.add(node, v(node.else_branch))

    @on(Match)
    def _match(self, node: Match) -> bool:
        changed = False
        data = self.value_of(node.data)
        for clause in node.clauses:
            changed |= self._bind_pattern(clause, data)
            changed |= self.add(node, self.value_of(clause.body))
        return changed

    @on(Tuple)
    def _tuple(self, node: Tuple) -> bool:
        changed = False
        for f in node.fields:
            changed |= self.add(node, self.value_of(f))
        return changed

    @on(TupleGetItem)
    def _get(self, node: TupleGetItem) -> bool:
        return self.add(node, self.value_of(node.tuple_value))

    @on(RefCreate)
    def _ref_create(self, node: RefCreate) -> bool:
        src = ("alloc", node)
        return self.add(node, {src}) | self.add(("content", src), self.value_of(node.value))

    @on(RefRead)
    def _ref_read(self, node: RefRead) -> bool:
        changed = False
        for src in list(self.value_of(node.ref)):
            changed |= self.add(node, self.flows(("content", src)))
        return changed

    @on(RefWrite)
    def _ref_write(self, node: RefWrite) -> bool:
        changed = False
        value = self.value_of(node.value)
        for src in list(self.value_of(node.ref)):
            changed |= self.add(("content", src), value)
        return changed

    @on(Call)
    def _call(self, node: Call) -> bool:
        v = self.value_of
        args = [v(a) for a in node.args]
        if isinstance(node.callee, Op):
            if "control_flow" in op_def(node.callee).traits:
                # [RULE EFFECT-FLOW] each function argument is called with all the others.
                everything: set[Source] = set().union(*args) if args else set()
                changed = False
                for arg in args:
                    callees = {s for s in arg if s[0] in ("def", "fn")}
                    if callees:
                        fn_args = [everything | self.flows(node)] * 2
                        changed |= self.call_into(callees, fn_args, node)
                return changed
            # An operator's result may be built from its arguments
            # (debug.print returns its argument): sound for all.
            changed = False
            for arg in args:
                changed |= self.add(node, arg)
            return changed
        return self.call_into(v(node.callee), args, node)

    def _bind_pattern(self, clause: Clause, data: set[Source]) -> bool:
        changed = False
        work = [clause.pattern]
        while work:
            p = work.pop()
            if isinstance(p, PatternVar):
                changed |= self.add(p.var, data)
            elif isinstance(p, PatternTuple | PatternConstructor):
                work.extend(p.patterns)
        return changed

    # ------------------------------------------------------------ effects
    def cells_in(self, sources: set[Source]) -> set[str]:
        return {s[1] for s in sources if s[0] == "cell"}

    def direct_effects(self, node: Node) -> set[str]:
        """[RULE EFFECT-DIRECT] effects a node has by itself (not through a call)."""
        if isinstance(node, RefRead):
            return {f"read @{c}" for c in self.cells_in(self.value_of(node.ref))}
        if isinstance(node, RefWrite):
            return {f"write @{c}" for c in self.cells_in(self.value_of(node.ref))}
        if isinstance(node, Call) and isinstance(node.callee, Op):
            definition = op_def(node.callee)
            if definition.effect == "io":
                return {IO}
            if definition.effect in ("random", "state"):
                cells: set[str] = set()
                for a in node.args:
                    cells |= self.cells_in(self.value_of(a))
                effects = {f"read @{c}" for c in cells}
                if definition.effect == "random" or node.attrs.get("training", True):
                    effects |= {f"write @{c}" for c in cells}
                return effects
        return set()

    def callees_of(self, node: Node) -> set[Source]:
        if not isinstance(node, Call):
            return set()
        if isinstance(node.callee, Op):
            if "control_flow" not in op_def(node.callee).traits:
                return set()
            found: set[Source] = set()
            for a in node.args:
                found |= {s for s in self.value_of(a) if s[0] in ("def", "fn")}
            return found
        return {s for s in self.value_of(node.callee) if s[0] in ("def", "fn")}

    def effects(self, roots: list[tuple[Source, Function]]) -> EffectInfo:
        units = roots + self.functions
        nodes_of = {src: body_nodes(fn.body) for src, fn in units}
        direct: dict[Source, set[str]] = {}
        calls: dict[Source, list[tuple[Call, set[Source]]]] = {}
        own: dict[Call, set[str]] = {}
        for src, nodes in nodes_of.items():
            direct[src] = set()
            calls[src] = []
            for n in nodes:
                effects = self.direct_effects(n)
                direct[src] |= effects
                if isinstance(n, Call):
                    own[n] = effects
                    calls[src].append((n, self.callees_of(n)))
        latent = {src: set(effects) for src, effects in direct.items()}
        changed = True
        while changed:
            changed = False
            for src in latent:
                for _, callees in calls[src]:
                    for callee in callees:
                        extra = latent.get(callee, set()) - latent[src]
                        if extra:
                            latent[src] |= extra
                            changed = True
        info = EffectInfo()
        self._check_annotations(latent, info)
        for src, effects in latent.items():
            if src[0] == "def":
                info.functions[src[1]] = frozenset(effects)
            else:
                info.closures[src[1]] = frozenset(effects)
            for call, callees in calls[src]:
                effects_of_call = set(own[call])
                for callee in callees:
                    effects_of_call |= latent.get(callee, set())
                info.calls[call] = frozenset(effects_of_call)
        return info

    # ------------------------------------------------------- annotations
    def _key_cells(self) -> set[str]:
        cells = set()
        for name, cell in self.module.cells.items():
            declared = cell.type
            if isinstance(declared, RefType) and isinstance(declared.value, KeyType):
                cells.add(name)
            elif declared is None and cell.init.has_type:
                if isinstance(cell.init.checked_type, KeyType):
                    cells.add(name)
        return cells

    def _check_annotations(self, latent: dict[Source, set[str]], info: EffectInfo) -> None:
        key_cells: set[str] | None = None
        for node in self.binder_vars:
            annotation = node.type_annotation
            if not isinstance(annotation, FuncType) or annotation.effects is None:
                continue
            allowed = set(annotation.effects)
            if "random" in allowed:
                if key_cells is None:
                    key_cells = self._key_cells()
                allowed |= {f"{kind} @{c}" for c in key_cells for kind in ("read", "write")}
            for src in sorted(self.flows(node), key=_source_order):
                if src[0] not in ("def", "fn"):
                    continue
                excess = latent.get(src, set()) - allowed
                if excess:
                    fn = self.function_of(src)
                    what = f"@{src[1]}" if src[0] == "def" else "a function"
                    where = f" (defined at {fn.span})" if fn is not None and fn.span else ""
                    info.violations.append(
                        EffectError(
                            f"%{node.name_hint} allows the effects "
                            f"{{{', '.join(annotation.effects)}}}, but {what}{where} that "
                            f"reaches it has {effect_text(frozenset(excess))} besides",
                            node.span,
                        )
                    )


class _Holds:
    """What a value of a type may be or contain [RULE EFFECT-TYPED]: (functions,
    references). A tensor or a key holds neither, whatever the
    field-insensitive flows say (a tuple's projection gets every field's
    sources); a function type holds functions, a ``Ref`` references; ADTs,
    type variables and unknown types anything. Each type is walked once
    (types hash by identity): the types of nested expressions share their
    parts, and a walk per expression would be quadratic in the depth."""

    def __init__(self) -> None:
        self._memo: dict[Type, tuple[bool, bool]] = {}

    def __call__(self, t: Type) -> tuple[bool, bool]:
        memo = self._memo
        stack: list[tuple[Type, list[Type] | None]] = [(t, None)]
        while stack:
            node, parts = stack.pop()
            if parts is not None:  # its parts are done
                functions = any(memo[p][0] for p in parts)
                refs = isinstance(node, RefType) or any(memo[p][1] for p in parts)
                memo[node] = (functions, refs)
            elif node in memo:
                continue
            elif isinstance(node, TensorType | KeyType):
                memo[node] = (False, False)
            elif isinstance(node, FuncType):
                memo[node] = (True, False)
            elif isinstance(node, TupleType | RefType):
                parts = list(node.fields) if isinstance(node, TupleType) else [node.value]
                stack.append((node, parts))
                stack.extend((p, None) for p in parts)
            else:
                memo[node] = (True, True)
        return memo[t]


def _holdable(sources: set[Source], holds: tuple[bool, bool]) -> set[Source]:
    """The sources a value may be, given what its type ``holds``."""
    functions, refs = holds
    if functions and refs:
        return sources
    keep = {"def", "fn", "ctor"} if functions else set()
    if refs:
        keep |= {"cell", "alloc"}
    return {s for s in sources if s[0] in keep}


def _source_order(src: Source) -> tuple:
    fn = src[1]
    return (0, fn) if isinstance(fn, str) else (1, fn.span.start if fn.span else 0)


def _last_first(node: Node) -> list[Node]:
    found = child_nodes(node)
    found.reverse()
    return found
