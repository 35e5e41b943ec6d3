"""State passing, steps 3 and 4: the analysis. Which cell every
``ref_read``/``ref_write`` touches (from the flows of
``infer_effects.solve_flows``), which functions every call may call, each
function's signature (a fixpoint over the call graph; functions one call
site may call are grouped and share the union of their cells), and the
checks that make the translation sound: a local reference is only read and
written, a closure over one does not escape, an ADT field holds functions of
one signature. Anything it cannot make sound it rejects with a located
``EffectError``."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from effir.ir.analysis import operand_fields
from effir.ir.diagnostics import EffectError, Span
from effir.ir.expr import (
    Call,
    Constructor,
    Expr,
    Function,
    GlobalVar,
    Let,
    Op,
    RefCreate,
    RefRead,
    RefWrite,
    Var,
)
from effir.ir.functor import Visitor, after, on
from effir.ir.module import IRModule
from effir.ir.node import Node
from effir.ir.op import op_def
from effir.ir.types import FuncType, RefType, Type
from effir.ops.effects import WORLD, WORLD_TYPE, needs_world
from effir.passes.analyses.infer_effects import Source, solve_flows
from effir.passes.transforms.state_passing.signature import Signature, where
from effir.passes.transforms.state_passing.specialise import DownwardClosures


class Analysis:
    """Which cell each reference names, each function's signature, and the
    checks that make the translation sound."""

    def __init__(
        self, module: IRModule, nodes: dict[str, list[Node]], copies: dict[str, str]
    ) -> None:
        self.module = module
        self.nodes = nodes  # each global function's nodes, in pre-order (``_expr_nodes``)
        self.copies = copies  # global copies made for a caller's local references
        self.flows = solve_flows(module)
        self.order: dict[str, int] = {name: i for i, name in enumerate(module.cells)}
        self.types: dict[str, Type] = {WORLD: WORLD_TYPE}
        for name, cell in module.cells.items():
            declared = cell.type
            if isinstance(declared, RefType):
                self.types[name] = declared.value
            else:
                self.types[name] = cell.init.checked_type
        self.parent: dict[Source, Source | None] = {}
        self.unit_fn: dict[Source, Function] = {}
        self.unit_of: dict[Function, Source] = {}
        self.owner: dict[str, Source] = {}  # local reference -> the function creating it
        self.alloc_name: dict[RefCreate, str] = {}
        self.alloc_span: dict[str, Span | None] = {}
        self.target: dict[Expr, str] = {}  # ref_read / ref_write -> cell
        self.used: set[Var] = set()
        self.bound: set[Var] = set()
        self._bodies: dict[Function, list[Node]] = {}
        self._units()
        self._resolve_references()
        self._signatures()
        self._check_local_closures()
        self._adt_fields()

    # ----------------------------------------------------------- units
    def _units(self) -> None:
        """Every function (def or fn) with its lexically enclosing function,
        the variables used and bound, and the local references, numbered
        in the reverse of the order in which a walk of the module's
        functions finishes them."""
        walk = _Units(self)
        for name, fn in self.module.functions.items():
            walk.root = ("def", name)
            walk.visit(fn)
        for k, (node, unit) in enumerate(reversed(walk.allocs)):
            name = f"%ref{k}" if k else "%ref"
            self.alloc_name[node] = name
            self.alloc_span[name] = node.span
            self.types[name] = node.value.checked_type
            self.owner[name] = unit
            self.order[name] = len(self.module.cells) + k
        self.order[WORLD] = len(self.order) + 1

    def body_nodes(self, fn: Function) -> list[Node]:
        """``body_nodes(fn.body)``, computed once per function: the analysis
        and the translation walk each body several times."""
        nodes = self._bodies.get(fn)
        if nodes is None:
            nodes = self._bodies[fn] = body_nodes(fn.body)
        return nodes

    def needed(self, var: Var) -> bool:
        """Whether a binding of ``var`` must be kept: a variable of the
        program that is never used is not rebound after translation, unless
        it is annotated: its annotation may be what fixes the type of a value
        it was bound from (``let %f: Option[Key] = debug.print(None)``: the
        ``None`` that ``io.print`` still prints has no other type)."""
        return var in self.used or var not in self.bound or var.type_annotation is not None

    def sort(self, cells: Iterable[str]) -> tuple[str, ...]:
        return tuple(sorted(set(cells), key=self.order.__getitem__))

    def nested_in(self, unit: Source, ancestor: Source) -> bool:
        current: Source | None = unit
        while current is not None:
            if current == ancestor:
                return True
            current = self.parent.get(current)
        return False

    # ------------------------------------------------------ references
    def _resolve_references(self) -> None:
        """The cell behind every ref_read/ref_write; local references may
        only be read and written."""
        ref_vars: dict[Var, str] = {}
        for fn in self.unit_fn.values():
            for node in self.body_nodes(fn):
                if isinstance(node, Let) and isinstance(node.value, RefCreate):
                    ref_vars[node.var] = self.alloc_name[node.value]
        # Aliases only come from references already known, so with none
        # there is nothing to check but the targets.
        local = bool(ref_vars)
        for name in self.module.functions:
            for node in self.nodes[name]:
                if local:
                    self._check_reference_uses(node, ref_vars)
                    if isinstance(node, Let) and isinstance(node.value, Var):
                        if node.value in ref_vars:
                            ref_vars[node.var] = ref_vars[node.value]
                if isinstance(node, RefRead | RefWrite):
                    self.target[node] = self._cell_of(node)
        bound = set(ref_vars.values())  # one set, not a scan per allocation
        for node, name in self.alloc_name.items():
            if name not in bound:
                raise EffectError(
                    "this local reference is used as a value (it is not bound by a let "
                    "and only read and written); state passing can turn a local reference "
                    "into plain values only when it is only read and written",
                    node.span,
                )

    def _check_reference_uses(self, node: Node, ref_vars: dict[Var, str]) -> None:
        for field_name, child in var_uses(node):
            if child not in ref_vars:
                continue
            if isinstance(node, RefRead | RefWrite) and field_name == "ref":
                continue
            if isinstance(node, Let) and field_name == "value":
                continue  # an alias, checked where it is used
            name = ref_vars[child]
            raise EffectError(
                f"the local reference %{child.name_hint} is used as a value here (passed, "
                "stored or returned); state passing turns a local reference into plain "
                "values only when it is only read and written",
                node.span or child.span,
                (f"the reference is created at {where(self.alloc_span[name])}",),
            )

    def _cell_of(self, node: RefRead | RefWrite) -> str:
        sources = self.flows.value_of(node.ref)
        cells = sorted(
            {s[1] for s in sources if s[0] == "cell"}
            | {self.alloc_name[s[1]] for s in sources if s[0] == "alloc"}
        )
        what = "ref_read" if isinstance(node, RefRead) else "ref_write"
        if len(cells) == 1:
            return cells[0]
        if not cells:
            raise EffectError(
                f"cannot tell which cell this {what} touches: no reference reaches it",
                node.span,
            )
        names = ", ".join(c if c.startswith("%") else "@" + c for c in cells)
        raise EffectError(
            f"this {what} may touch any of {names}; state passing must know which cell "
            "to pass, so pass the cell itself (functions given a cell are specialised per "
            "cell) or write one function per cell",
            node.span,
        )

    # ------------------------------------------------------ signatures
    def _signatures(self) -> None:
        """Each function's cells (reads, writes), by a fixpoint over the call
        sites; functions that one call site may call form a group (union-find)
        whose signature is the union of its members'."""
        reads: dict[Source, set[str]] = {u: set() for u in self.unit_fn}
        writes: dict[Source, set[str]] = {u: set() for u in self.unit_fn}
        self.call_sites: dict[Source, list[tuple[Call, str, frozenset[Source]]]] = {}
        self.loop_bodies: dict[tuple[Call, int], frozenset[Source]] = {}
        groups = _UnionFind()
        union = groups.union
        for unit, fn in self.unit_fn.items():
            sites: list[tuple[Call, str, frozenset[Source]]] = []
            for node in self.body_nodes(fn):
                if isinstance(node, RefRead):
                    reads[unit].add(self.target[node])
                elif isinstance(node, RefWrite):
                    writes[unit].add(self.target[node])
                elif isinstance(node, Call):
                    callee = node.callee
                    if isinstance(callee, Op):
                        definition = op_def(callee)
                        if needs_world(definition):
                            reads[unit].add(WORLD)
                            writes[unit].add(WORLD)
                        if "control_flow" in definition.traits:
                            for i, arg in enumerate(node.args):
                                if not is_function(arg):
                                    continue  # data, even if the flows mention functions
                                found = self.functions_of(arg)
                                if found:
                                    union(found)
                                    self.loop_bodies[(node, i)] = found
                                    sites.append((node, "loop", found))
                    elif isinstance(callee, GlobalVar) and callee.name in self.module.functions:
                        sites.append((node, "direct", frozenset({("def", callee.name)})))
                    elif not isinstance(callee, Constructor):
                        found = self.functions_of(callee)
                        if found:
                            union(found)
                            sites.append((node, "indirect", found))
            self.call_sites[unit] = sites
        self.group: dict[Source, int] = groups.classes()
        members: dict[int, list[Source]] = {}
        for src, g in self.group.items():
            members.setdefault(g, []).append(src)
        owned: dict[Source, set[str]] = {}
        for name, unit in self.owner.items():
            owned.setdefault(unit, set()).add(name)
        for unit, mine in owned.items():  # a function's own references are not its state
            reads[unit] -= mine
            writes[unit] -= mine
        group_reads: dict[int, set[str]] = {g: set() for g in members}
        group_writes: dict[int, set[str]] = {g: set() for g in members}
        changed = True
        while changed:
            changed = False
            for g, srcs in members.items():
                for s in srcs:
                    if s in reads:
                        if not reads[s] <= group_reads[g] or not writes[s] <= group_writes[g]:
                            group_reads[g] |= reads[s]
                            group_writes[g] |= writes[s]
                            changed = True
            for unit, sites in self.call_sites.items():
                r, w = reads[unit], writes[unit]
                before = (len(r), len(w))
                for _, kind, found in sites:
                    if kind == "direct":
                        (target,) = found
                        r |= reads[target]
                        w |= writes[target]
                    else:
                        g = self.group[next(iter(found))]
                        r |= group_reads[g]
                        w |= group_writes[g]
                mine = owned.get(unit, set())
                r -= mine
                w -= mine
                if (len(r), len(w)) != before:
                    changed = True
        self.reads, self.writes = reads, writes
        self.group_sig = {
            g: Signature(self.sort(group_reads[g] | group_writes[g]), self.sort(group_writes[g]))
            for g in members
        }
        downward: set[tuple[str, str]] = set()
        escaped: list[tuple[Source, str]] = []
        for unit in self.unit_fn:
            for cell in reads[unit] | writes[unit]:
                owner = self.owner.get(cell)
                if owner is None or self.nested_in(unit, owner):
                    continue
                if unit[0] == "def":
                    caller = self.top_level(owner)
                    if self.copies.get(unit[1]) == caller:
                        if self.called_only_from(unit, owner):
                            continue
                    elif self.calls_directly(caller, unit):
                        downward.add((unit[1], caller))
                        continue
                escaped.append((unit, cell))
        if downward:  # copies first: they may leave nothing that escapes
            raise DownwardClosures(downward)
        if escaped:
            unit, cell = escaped[0]
            span = self.unit_fn[unit].span
            for call, kind, found in self.call_sites[unit]:
                if cell in self.site_signature(kind, found).reads:
                    span = call.span or span
                    break
            raise EffectError(
                f"this touches the local reference created at "
                f"{where(self.alloc_span[cell])} outside the function that created "
                "it (a closure over the reference escaped); state passing turns a "
                "local reference into plain values only when it does not escape",
                span,
            )

    def top_level(self, unit: Source) -> str:
        """The global function ``unit`` is (or is nested in)."""
        while unit[0] != "def":
            parent = self.parent[unit]
            assert parent is not None  # every fn is nested in some def
            unit = parent
        return unit[1]

    def calls_directly(self, caller: str, unit: Source) -> bool:
        """Whether the global function ``caller`` (or a function nested in
        it) calls ``unit`` directly: a closure may have been passed down."""
        top = ("def", caller)
        return any(
            kind == "direct" and unit in found and self.nested_in(site_unit, top)
            for site_unit, sites in self.call_sites.items()
            for _, kind, found in sites
        )

    def called_only_from(self, unit: Source, owner: Source) -> bool:
        """Whether the copy ``unit`` is only ever called directly, from
        ``owner`` (or functions nested in it) and from copies made for the
        same caller: then the owner's references are live at every call."""
        caller = self.copies[unit[1]]
        for site_unit, sites in self.call_sites.items():
            for _, kind, found in sites:
                if unit not in found:
                    continue
                if kind != "direct":
                    return False  # called as a value: from anywhere
                if not (
                    self.nested_in(site_unit, owner)
                    or self.copies.get(self.top_level(site_unit)) == caller
                ):
                    return False
        return True

    def functions_of(self, atom: Expr) -> frozenset[Source]:
        """The functions ``atom`` may be."""
        return frozenset(s for s in self.flows.value_of(atom) if s[0] in ("def", "fn"))

    def own_signature(self, unit: Source) -> Signature:
        r, w = self.reads.get(unit, set()), self.writes.get(unit, set())
        return Signature(self.sort(r | w), self.sort(w))

    def signature_of(self, unit: Source) -> Signature:
        """A closure's signature is its group's; a def's is its own."""
        if unit[0] == "fn" and unit in self.group:
            return self.group_sig[self.group[unit]]
        return self.own_signature(unit)

    def site_signature(self, kind: str, found: frozenset[Source]) -> Signature:
        if kind == "direct":
            return self.own_signature(next(iter(found)))
        return self.group_sig[self.group[next(iter(found))]]

    def _check_local_closures(self) -> None:
        """A closure that touches a local reference may be called, given to
        a loop, passed down as an argument (the callee then takes the
        reference's value as state, [RULE STATE-DOWNWARD]), held in a tuple or an ADT
        value and aliased, as long as it stays inside the activation that
        created the reference: the flows follow it through all of these, so
        one rule decides for every form (``_check_escapes``). Returned from
        that function, stored in a reference, or passed back to it, it could
        run after that activation is gone, or in another one."""
        closures: dict[Function, str] = {}
        for src in self.unit_fn:
            if src[0] == "fn":
                local = [c for c in self.signature_of(src).reads if c in self.owner]
                if local:
                    closures[src[1]] = local[0]
        if closures:
            self._check_escapes(closures)

    def _check_escapes(self, closures: dict[Function, str]) -> None:
        """A closure over a local reference must not reach the result of the
        function owning the reference, nor any reference's contents (the
        flows follow it through calls, tuples and constructors)."""
        values = self.flows.values
        stored_anywhere: set[Source] = set()
        for key, found in values.items():
            if isinstance(key, tuple) and key[0] == "content":
                stored_anywhere |= found
        # The closures that touch the reference themselves are reported
        # first (the others only share a call site's signature with them).
        own_first = sorted(closures.items(), key=lambda item: not self._touches(item[0], item[1]))
        for fn, cell in own_first:
            src = ("fn", fn)
            owner = self.owner[cell]
            stored = src in stored_anywhere
            returned = self.flows.value_of(self.unit_fn[owner].body)
            # Passed back to the function owning the reference (recursion):
            # there it would meet another activation's reference.
            again = any(src in self.flows.value_of(p) for p in self.unit_fn[owner].params)
            if src in returned or stored or again:
                how = (
                    "stored in a reference"
                    if stored
                    else "passed back to the function creating it, whose next activation has "
                    "a reference of its own"
                    if again
                    else "returned by the function creating it"
                )
                created = f"the local reference created at {where(self.alloc_span[cell])}"
                toucher = self._touching_partner(fn, cell, closures)
                if self._touches(fn, cell):
                    what = f"this closure touches {created} and escapes ({how})"
                elif toucher is None:
                    what = f"this closure takes the value of {created} as state and escapes ({how})"
                else:
                    what = (
                        f"this closure is called where the closure at {where(toucher.span)} "
                        f"is, which touches {created}, so it takes that reference's value "
                        f"as state too, and it escapes ({how})"
                    )
                raise EffectError(
                    f"{what}; it could then run where that reference's value is not known",
                    fn.span,
                )

    def _touches(self, fn: Function, cell: str) -> bool:
        """Whether ``fn``'s own body reads or writes ``cell``."""
        src = ("fn", fn)
        return cell in self.reads.get(src, set()) or cell in self.writes.get(src, set())

    def _touching_partner(
        self, fn: Function, cell: str, closures: dict[Function, str]
    ) -> Function | None:
        """A closure that touches ``cell`` and shares a call site (and so a
        signature) with ``fn``, if there is one."""
        group = self.group.get(("fn", fn))
        for other, other_cell in closures.items():
            if other_cell == cell and self._touches(other, cell):
                if group is not None and self.group.get(("fn", other)) == group:
                    return other
        return None

    def _adt_fields(self) -> None:
        """Function-typed constructor fields that hold functions with state:
        the field's declared type gains the state (one signature per field)."""
        found: dict[tuple[str, int], dict[Signature, Call]] = {}
        for fn in self.unit_fn.values():
            for node in self.body_nodes(fn):
                if not (isinstance(node, Call) and isinstance(node.callee, Constructor)):
                    continue
                ctor = node.callee
                for i, arg in enumerate(node.args):
                    for src in self.functions_of(arg):
                        sig = self.signature_of(src)
                        if sig:
                            found.setdefault((ctor.name, i), {}).setdefault(sig, node)
        self.adt_fields: dict[tuple[str, int], Signature] = {}
        for (name, i), sigs in found.items():
            ctor = self.module.constructors[name]
            declared = ctor.inputs[i] if i < len(ctor.inputs) else None
            if len(sigs) > 1 or not isinstance(declared, FuncType):
                calls = list(sigs.values())
                call = calls[-1]
                notes = tuple(f"another is stored at {where(c.span)}" for c in calls[:-1])
                raise EffectError(
                    f"field {i} of constructor {name} holds functions that need state "
                    + (
                        "with different cells; state passing needs one signature per field"
                        if len(sigs) > 1
                        else "but its declared type is not a function type, so it cannot "
                        "say which state they take"
                    ),
                    call.span,
                    notes,
                )
            sig = next(iter(sigs))
            local = [c for c in sig.reads if c in self.owner]
            if local:
                # A field's type is one for the whole program; a local
                # reference is one activation's (a tuple's type is its own).
                raise EffectError(
                    f"field {i} of constructor {name} holds a closure over the local "
                    f"reference created at {where(self.alloc_span[local[0]])}; a field "
                    "has one type for the whole program, which cannot take one "
                    "activation's reference: pass the closure itself, or in a tuple",
                    sigs[sig].span,
                )
            self.adt_fields[(name, i)] = sig

    # ---------------------------------------------------- writes inside
    def writes_inside(self, fn: Function) -> dict[int, frozenset[str]]:
        """For each compound node of a body: the cells written within it."""
        nodes = self.body_nodes(fn)
        inside: dict[int, frozenset[str]] = {}
        sites = {
            id(c): (kind, found)
            for c, kind, found in self.call_sites[self.unit_of[fn]]
            if kind != "loop"
        }
        for node in reversed(nodes):
            own: set[str] = set()
            if isinstance(node, RefWrite):
                own.add(self.target[node])
            elif isinstance(node, Call):
                if isinstance(node.callee, Op) and needs_world(op_def(node.callee)):
                    own.add(WORLD)
                site = sites.get(id(node))
                if site is not None:
                    own |= set(self.site_signature(*site).writes)
                if isinstance(node.callee, Op) and "control_flow" in op_def(node.callee).traits:
                    for i in range(len(node.args)):
                        found = self.loop_bodies.get((node, i))
                        if found:
                            own |= set(self.group_sig[self.group[next(iter(found))]].writes)
            if not isinstance(node, Function):
                for child in node.children():
                    if id(child) in inside:
                        own |= inside[id(child)]
            inside[id(node)] = frozenset(own)
        return inside


class _UnionFind:
    """Disjoint sets of function sources."""

    def __init__(self) -> None:
        self.parent: dict[Source, Source] = {}

    def find(self, src: Source) -> Source:
        parent = self.parent
        parent.setdefault(src, src)
        while parent[src] != src:
            parent[src] = parent[parent[src]]  # path halving
            src = parent[src]
        return src

    def union(self, sources: Iterable[Source]) -> None:
        roots = [self.find(s) for s in sources]
        for root in roots[1:]:
            self.parent[self.find(root)] = self.find(roots[0])

    def classes(self) -> dict[Source, int]:
        """Each source's class, numbered."""
        numbers: dict[Source, int] = {}
        return {s: numbers.setdefault(self.find(s), len(numbers)) for s in list(self.parent)}


def var_uses(node: Node) -> Iterator[tuple[str, Var]]:
    """The variables ``node`` uses directly (not binds), with their fields."""
    for field_name, many in operand_fields(node):
        value = getattr(node, field_name)
        if many:
            for item in value:
                if isinstance(item, Var):
                    yield field_name, item
        elif isinstance(value, Var):
            yield field_name, value


class _Units(Visitor):
    """Gathers what ``Analysis._units`` needs in one walk of a global
    function (``root`` names it): the enclosing function of each function
    and reference, the variables used and bound."""

    binders = True

    def __init__(self, analysis: Analysis) -> None:
        super().__init__()
        self.a = analysis
        self.root: Source = ("def", "")
        self.units: list[Source] = []  # the functions around the node visited
        self.allocs: list[tuple[RefCreate, Source | None]] = []  # in post-order

    @on(Node)
    def _node(self, node: Node) -> bool | None:
        used = self.a.used
        for name, many in operand_fields(node):  # the variables it uses
            value = getattr(node, name)
            if many:
                used.update(v for v in value if isinstance(v, Var))
            elif isinstance(value, Var):
                used.add(value)
        if isinstance(node, Let):
            self.a.bound.add(node.var)
        elif isinstance(node, Function):
            src: Source = ("fn", node) if self.units else self.root
            if src in self.a.unit_fn:
                return False
            self.a.parent[src] = self.units[-1] if self.units else None
            self.a.unit_fn[src] = node
            self.a.unit_of[node] = src
            self.units.append(src)
        return None

    @after(Function)
    def _left(self, node: Function) -> None:
        self.units.pop()

    @after(RefCreate)
    def _ref(self, node: RefCreate) -> None:
        self.allocs.append((node, self.units[-1] if self.units else None))


class _Nodes(Visitor):
    """The nodes of an expression in pre-order, types left out, nested
    functions entered or not."""

    binders = True

    def __init__(self, into_functions: bool) -> None:
        super().__init__()
        self.into_functions = into_functions
        self.out: list[Node] = []

    @on(Node)
    def _node(self, node: Node) -> bool:
        self.out.append(node)
        return self.into_functions or not isinstance(node, Function)


def expr_nodes(root: Expr, into_functions: bool = True) -> list[Node]:
    """``pre_order(root)`` without the types (no type holds an expression),
    and without entering nested functions unless ``into_functions``."""
    walk = _Nodes(into_functions)
    walk.visit(root)
    return walk.out


def body_nodes(body: Expr) -> list[Node]:
    """The nodes of a body in pre-order, not entering nested functions."""
    return expr_nodes(body, into_functions=False)


def is_function(expr: Expr) -> bool:
    return isinstance(expr, Function) or (expr.has_type and isinstance(expr.checked_type, FuncType))
